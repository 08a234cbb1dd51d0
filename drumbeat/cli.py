"""The command line: ``drumbeat crawl | manager | fetcher | status | stats | demo | simweb``.

Exit codes (EXIT_CODES, listed in ``drumbeat crawl --help``): 0 the command did its job
(a crawl finished, or stopped at --max-pages / --max-time); 1 it failed (state dir in use,
unreadable checkpoint, a fetcher process failing, or every seed refused and nothing
fetched); 2 bad arguments, settings, config file or state dir (one line on stderr naming
it); 3 the crawl was stopped by SIGINT/SIGTERM and resumes with the same --state.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from drumbeat import __version__
from drumbeat.runtime.allocator import ALLOCATORS, AllocatorMissing, reexec_if_needed
from drumbeat.settings import (
    HTTP_CLIENTS,
    ORDERS,
    SCOPES,
    SITEMAP_MODES,
    Settings,
    SettingsError,
    build,
    load_saved,
    load_toml,
)
from drumbeat.web.address import DEFAULT_ADDRESS, AddressError, WebAddress, parse_address

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 3
EXIT_CODES = f"""\
Exit status:
  {EXIT_OK}  the crawl finished, or stopped at --max-pages or --max-time
  {EXIT_FAILED}  it failed: state dir in use, unreadable state, a fetcher process failing,
     or every seed refused (the message says why and which flag fixes it)
  {EXIT_USAGE}  bad arguments, settings, config file or --state directory
  {EXIT_STOPPED}  stopped by SIGINT/SIGTERM; run the same command again to resume
"""

_D = Settings()

CRAWL_EPILOG = (
    f"""\
Resuming: `drumbeat crawl --state DIR` on an existing state directory continues the crawl
from its last checkpoint with the settings it last ran with (kept in DIR/settings.json;
flags given now override them); nothing queued is lost, even after `kill -9`.
SIGINT/SIGTERM stop gracefully (a second one stops at once).

Limits: --max-pages counts pages over the whole crawl (resumes included); --max-time
counts this run only (a resume runs without one unless given again).

Seeds: a seed without a scheme gets http:// (example.org/a, localhost:8080). A seed
refused for a reason a flag or the network fixes (a loopback or private address, a DNS
failure) is said so on the terminal and tried again on the next run.

Config file: TOML with setting names as keys, at top level or under [crawl], e.g.
    host_delay_s = 1.5
    user_agent = "examplebot/1.0 (+https://example.org/bot)"
Flags override the file. Every setting of drumbeat.settings.Settings can be set there
(timeouts, body caps, robots expiry, WARC rotation, checkpoint interval ...).

Defaults are polite: {_D.host_delay_s:g} s between requests to one host, {_D.ip_delay_s:g} s to
one IP, robots.txt obeyed (Crawl-delay up to {_D.crawl_delay_max_s:g} s), private and
loopback addresses refused. Set --user-agent to name you and a contact URL.
One request per host is in flight at a time (IRLbot's rule). Crawling a server you run
yourself, you may allow more: --host-connections 4 --ip-delay 0 (with --host-delay 0, as
fast as the server answers); keep 1 for anyone else's site.
A host that answers 429 or 503, or keeps failing to connect, is backed off (the wait
doubles, Retry-After is honoured, capped at backoff_max_s = {_D.backoff_max_s:g} s) and
the URL retried up to fetch_max_attempts = {_D.fetch_max_attempts} fetches in all.
A redirect's target is crawled as a new URL (the guard and robots.txt apply to it), at
most max_redirects = {_D.max_redirects} redirects in a row; a body cut short by the size cap, a
timeout or a dropped connection is kept and marked (WARC-Truncated), not fetched again.
Spam defence (IRLbot STAR + BEAST): a pay-level domain passes at most its budget of
URLs per beast_turn_s seconds (budget_default = {_D.budget_default} for the long tail, more for
well-linked domains; beast_turn_s defaults to budget_default x host_delay_s, 0 = unpaced);
the rest waits on disk, nothing is dropped.

"""
    + EXIT_CODES
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _pos_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _redis_url(text: str) -> str:
    """An argparse type: a Redis URL redis-py reads (its scheme; the rest is checked when
    connecting)."""
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise argparse.ArgumentTypeError(
            f"expected redis://[:PASSWORD@]HOST:PORT/DB (or rediss://, unix://), got {text!r}"
        )
    return text


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {text!r}")
        return value

    return parse


_pos_int = _int_at_least(1)
_nonneg_int = _int_at_least(0)


def _add_crawl_args(p: argparse.ArgumentParser) -> None:
    """The crawl's flags, in three groups of ``--help``. A flag not given leaves its
    setting to the config file (argparse.SUPPRESS), whose values flags override."""
    _add_what_args(p.add_argument_group("what to crawl and where its state lives"))
    _add_scope_args(
        p.add_argument_group(
            "scope rules (links dropped before URL-seen; queued URLs dropped at fetch time; "
            "each drop counted by reason in `drumbeat stats`)"
        )
    )
    _add_order_args(p.add_argument_group("crawl order and focus (within STAR's budgets)"))
    _add_politeness_args(p.add_argument_group("politeness and identity (be a good guest)"))
    _add_machine_args(p.add_argument_group("this machine"))
    _add_duplicate_args(p.add_argument_group("duplicates"))
    _add_revisit_args(p.add_argument_group("revisits (keep the collection fresh)"))


def _add_what_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "urls",
        nargs="*",
        metavar="URL",
        help="seed URLs (http:// is assumed when a URL has no scheme)",
    )
    g.add_argument(
        "--seeds",
        dest="seeds_file",
        metavar="FILE",
        default=unset,
        help="file of seed URLs, one per line, UTF-8 ('#' comments)",
    )
    g.add_argument(
        "--state",
        dest="state_dir",
        metavar="DIR",
        required=True,
        help="state directory: checkpoints, WARC files, crawl.log (created if missing; "
        "an existing one is resumed)",
    )
    g.add_argument(
        "--scope",
        choices=SCOPES,
        default=unset,
        help="follow links to any host (default), only the seeds' hosts, "
        "or only the seeds' pay-level domains",
    )
    g.add_argument(
        "--sitemaps",
        choices=SITEMAP_MODES,
        default=unset,
        help="fetch the sitemaps robots.txt names (robots, the default), also "
        "/sitemap.xml where it names none (robots+default), or none (off)",
    )
    g.add_argument(
        "--max-pages",
        type=_pos_int,
        metavar="N",
        default=unset,
        help="stop after N pages fetched in total (default: no limit)",
    )
    g.add_argument(
        "--max-time",
        dest="max_time_s",
        type=_nonneg_float,
        metavar="SECONDS",
        default=unset,
        help="stop this run after SECONDS; not remembered for a resume (default: no limit)",
    )
    g.add_argument(
        "--config",
        metavar="FILE.toml",
        default=unset,
        help="TOML file of settings (see below); flags override it",
    )


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _size(text: str) -> int:
    """An argparse type: bytes, as a whole number with an optional K, M, G or T (binary:
    1K = 1024) and an optional B or iB (10M, 10MiB, 10MB: all 10 x 2^20)."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS else ""
    number = t[: len(t) - len(unit)].strip()
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"expected bytes such as 500000 or 10M, got {text!r}")
    return int(number) * _SIZE_UNITS[unit]


def _add_scope_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "--include",
        action="append",
        metavar="REGEX",
        default=unset,
        help="follow only links whose normalized URL matches REGEX (Python re, searched "
        "anywhere in the URL; repeat for more: a link matching any is kept)",
    )
    g.add_argument(
        "--exclude",
        action="append",
        metavar="REGEX",
        default=unset,
        help="drop links whose normalized URL matches REGEX (repeatable; wins over --include)",
    )
    g.add_argument(
        "--max-depth",
        type=_nonneg_int,
        metavar="N",
        default=unset,
        help="follow links at most N hops from the seeds (seeds are depth 0; a redirect "
        "counts as a hop; default: no limit)",
    )
    g.add_argument(
        "--max-pages-per-host",
        type=_pos_int,
        metavar="N",
        default=unset,
        help="fetch at most N pages of each host name (default: no limit)",
    )
    g.add_argument(
        "--max-pages-per-pld",
        type=_pos_int,
        metavar="N",
        default=unset,
        help="fetch at most N pages of each pay-level domain, all its hosts together "
        "(default: no limit)",
    )
    g.add_argument(
        "--max-bytes-per-host",
        type=_size,
        metavar="BYTES",
        default=unset,
        help="fetch no more pages of a host once its bodies add up to BYTES (10M, 1G; "
        "default: no limit)",
    )
    g.add_argument(
        "--blocklist",
        dest="blocklist_file",
        metavar="FILE",
        default=unset,
        help="file of hosts, pay-level domains (example.org blocks its subdomains too) "
        "and re:REGEX URL patterns, one a line ('#' comments), never fetched; read "
        f"again within {_D.blocklist_check_s:g} s of a change",
    )


def _add_order_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "--order",
        choices=ORDERS,
        default=unset,
        help="which URLs of each BEAST queue go first: bfs (breadth-first, the default), "
        "indegree (most links found to them), opic (OPIC page importance), larger-sites "
        "(sites with the most URLs found)",
    )
    g.add_argument(
        "--focus",
        metavar="MODULE:FUNCTION",
        default=unset,
        help="a focused crawl: FUNCTION(text, url) scores each HTML page in [0, 1] and its "
        "links are fetched in order of that score (e.g. drumbeat.focus.keywords:score with "
        "DRUMBEAT_FOCUS_KEYWORDS=word,word; see the README)",
    )


def _check_focus(s: Settings) -> None:
    """Import the focus function now: a bad --focus is an error before the crawl starts."""
    if s.focus is None:
        return
    from drumbeat.focus import FocusError, load_focus

    try:
        load_focus(s.focus)
    except FocusError as e:
        raise SettingsError(str(e)) from None


def _add_politeness_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "--host-delay",
        dest="host_delay_s",
        type=_nonneg_float,
        metavar="SECONDS",
        default=unset,
        help=f"min seconds between requests to one host (default {_D.host_delay_s:g})",
    )
    g.add_argument(
        "--ip-delay",
        dest="ip_delay_s",
        type=_nonneg_float,
        metavar="SECONDS",
        default=unset,
        help=f"min seconds between requests to one server IP "
        f"(default {_D.ip_delay_s:g}; 0 = no per-IP limit)",
    )
    g.add_argument(
        "--host-connections",
        dest="host_connections",
        type=_pos_int,
        metavar="N",
        default=unset,
        help=f"requests to one host in flight at once (default {_D.host_connections}); "
        "raise it only for servers that allow it, such as your own, with --ip-delay 0; "
        "--host-delay then spaces request starts",
    )
    g.add_argument(
        "--user-agent",
        metavar="UA",
        default=unset,
        help="User-Agent header; name your crawler and a contact URL",
    )
    g.add_argument(
        "--from",
        dest="from_header",
        metavar="EMAIL",
        default=unset,
        help="From header: an e-mail address where site operators reach you",
    )
    g.add_argument(
        "--allow-loopback",
        action="store_true",
        default=unset,
        help="allow connecting to 127.0.0.0/8 and ::1 (tests, local servers)",
    )
    g.add_argument(
        "--allow-private",
        action="store_true",
        default=unset,
        help="allow private, loopback and link-local addresses (intranet crawls)",
    )


def _add_machine_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "--concurrency",
        type=_pos_int,
        metavar="N",
        default=unset,
        help=f"fetches in flight at once (default {_D.concurrency})",
    )
    g.add_argument(
        "--fetchers",
        type=_nonneg_int,
        metavar="N",
        default=unset,
        help="fetcher processes (default: one per core; 0 = fetch in the manager's process)",
    )
    g.add_argument(
        "--http-client",
        choices=HTTP_CLIENTS,
        default=unset,
        help=f"HTTP backend of the fetchers: curl (libcurl through pycurl; less "
        f"CPU per page) or aiohttp (default {_D.http_client})",
    )
    g.add_argument(
        "--allocator",
        choices=ALLOCATORS,
        default=unset,
        help=f"malloc of the crawl's processes: mimalloc or jemalloc when "
        f"installed (auto; about 17 %% less CPU per page), or the system's "
        f"(default {_D.allocator})",
    )
    g.add_argument(
        "--dns-server",
        metavar="HOST[:PORT]",
        default=unset,
        help="send every DNS lookup to this server (default: system resolvers)",
    )
    g.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=unset,
        help="live progress panel even when stderr is not a terminal",
    )
    g.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=unset,
        help="periodic progress lines instead of the live panel",
    )


def _add_duplicate_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "--no-dedup",
        dest="dedup",
        action="store_false",
        default=unset,
        help="archive a payload seen before in full (default: a WARC revisit record)",
    )
    g.add_argument(
        "--dedup-follow-links",
        dest="dedup_follow_links",
        action="store_true",
        default=unset,
        help="extract the links of a page whose payload was seen before in the same "
        "directory of the same site too (default: only of copies elsewhere, whose relative "
        "links lead elsewhere)",
    )
    g.add_argument(
        "--near-dup",
        dest="near_dup",
        action="store_true",
        default=unset,
        help="mark near copies of earlier pages in the crawl log (a simhash of each "
        "page's text: about 1.5 times the parse's CPU)",
    )
    g.add_argument(
        "--near-dup-nofollow",
        dest="near_dup_follow_links",
        action="store_false",
        default=unset,
        help="do not follow the links of a near copy of an earlier page",
    )
    g.add_argument(
        "--near-dup-distance",
        type=_nonneg_int,
        metavar="BITS",
        default=unset,
        help=f"simhash bits two near copies may differ in (default {_D.near_dup_distance})",
    )


def _add_revisit_args(g: argparse._ArgumentGroup) -> None:
    unset = argparse.SUPPRESS
    g.add_argument(
        "--revisit",
        dest="revisit",
        action="store_true",
        default=unset,
        help="fetch each page again, by conditional GET, as often as keeps the "
        "collection freshest for the bandwidth set aside (its estimated change rate); "
        "the crawl then never finishes: --max-time, --max-pages or a signal stop it",
    )
    g.add_argument(
        "--revisit-share",
        type=_revisit_share,
        metavar="F",
        default=unset,
        help="share of the fetch rate set aside for revisits while new pages remain "
        f"(0 < F <= 1; default {_D.revisit_share}); all of it once none remain",
    )


def _revisit_share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def _add_cluster_args(g: argparse._ArgumentGroup, *, manager: bool) -> None:
    g.add_argument(
        "--redis",
        metavar="URL",
        type=_redis_url,
        required=True,
        help="the cluster's Redis: redis://[:PASSWORD@]HOST:PORT/DB (rediss:// for TLS)",
    )
    g.add_argument(
        "--redis-ca",
        metavar="FILE",
        default=None,
        help="CA certificate(s) of a rediss:// server not signed by the system's store",
    )
    g.add_argument(
        "--prefix",
        default="drumbeat:",
        help="prefix of every Redis key (default drumbeat:); clusters sharing a Redis "
        "need different ones",
    )
    if manager:
        g.add_argument("--crawl", metavar="NAME", required=True, help="the crawl's name")
        g.add_argument(
            "--partition",
            metavar="I/M",
            default="0/1",
            help="this manager is partition I of M (default 0/1: the only one)",
        )
        g.add_argument(
            "--weight",
            type=_pos_float,
            metavar="W",
            default=1.0,
            help="the crawl's share of the fetchers against other crawls (default 1)",
        )
    g.add_argument(
        "--heartbeat-timeout",
        type=_pos_float,
        metavar="SECONDS",
        default=15.0,
        help="a fetcher silent this long is taken for dead and its tasks handed out "
        "again (default 15)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="drumbeat", description="A polite, crash-safe web crawler.")
    parser.add_argument("--version", action="version", version=f"drumbeat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # The order here is the order `drumbeat --help` lists the commands in.
    _add_crawl_parser(sub)
    _add_ctl_parser(sub)
    _add_stats_parser(sub)
    _add_manager_parser(sub)
    _add_fetcher_parser(sub)
    _add_status_parser(sub)
    _add_web_parser(sub)
    _add_demo_parser(sub)
    # simweb and bench parse their own arguments (main() hands them over before this
    # parser runs); they are here only to be listed in `drumbeat --help`.
    sub.add_parser(
        "simweb",
        help="serve the synthetic web on loopback (see simweb --help)",
        add_help=False,
        prefix_chars="\0",
    )
    sub.add_parser(
        "bench",
        help="benchmarks against peers measured in the same run (see bench --help)",
        add_help=False,
        prefix_chars="\0",
    )
    return parser


def _add_crawl_parser(sub: Any) -> None:
    crawl = sub.add_parser(
        "crawl",
        help="crawl from seed URLs (or resume a crawl)",
        description="Crawl from seed URLs, or resume the crawl in --state DIR.",
        epilog=CRAWL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_crawl_args(crawl)
    _add_web_arg(crawl)


def _add_stats_parser(sub: Any) -> None:
    stats = sub.add_parser(
        "stats",
        help="summarise a crawl's state directory",
        description="Summarise a crawl from its crawl.log and WARC files: "
        "pages, bytes, status counts, errors by reason, hosts, "
        "duration (runs added, the time between them not) "
        "and pages/s.",
    )
    stats.add_argument(
        "state_dir",
        metavar="DIR",
        help="the crawl's state directory (what `drumbeat crawl --state` got); "
        "it may be in use by a running crawl",
    )
    stats.add_argument("--json", action="store_true", help="print one JSON object")


def _add_manager_parser(sub: Any) -> None:
    manager = sub.add_parser(
        "manager",
        help="run one manager of a crawl on a Redis cluster",
        description="Run manager I of M of crawl NAME: it owns the URLs of its partition "
        "(by pay-level domain), keeps its state in --state DIR like `drumbeat crawl`, and "
        "hands tasks to `drumbeat fetcher` processes through Redis. Give every manager the "
        "same seeds; each keeps its own. It keeps in flight its share of twice the live "
        "fetchers' slots (their --concurrency), so that a fetcher with room finds a task "
        "waiting; --concurrency is the least it keeps. It exits 0 once no partition has "
        "work left.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_cluster_args(manager.add_argument_group("the cluster"), manager=True)
    _add_crawl_args(manager)
    _add_web_arg(manager, "this manager's (its partition's)")


def _add_fetcher_parser(sub: Any) -> None:
    fetcher = sub.add_parser(
        "fetcher",
        help="run fetcher processes for every crawl on a Redis cluster",
        description="Fetch for every crawl on the Redis (weighted by the crawls' "
        "--weight), writing WARC files under --state DIR/warc/CRAWL/. Start and stop any "
        "number at any time, on any machine: a fetcher that stops or dies hands its tasks "
        "back. Stops on SIGINT/SIGTERM, or with --exit-when-idle once every crawl is done.",
    )
    _add_cluster_args(fetcher.add_argument_group("the cluster"), manager=False)
    fetcher.add_argument(
        "--state",
        dest="state_dir",
        metavar="DIR",
        required=True,
        help="this fetcher's directory: WARC files, drumbeat.log, stages/ (where each "
        "process's CPU time went)",
    )
    fetcher.add_argument(
        "--processes",
        type=_pos_int,
        metavar="N",
        default=None,
        help="fetcher processes on this machine (default: one per core)",
    )
    fetcher.add_argument(
        "--concurrency",
        type=_pos_int,
        metavar="N",
        default=200,
        help="fetches in flight at once per process (default 200)",
    )
    fetcher.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="exit once every crawl on the Redis is done",
    )


def _add_status_parser(sub: Any) -> None:
    status = sub.add_parser(
        "status",
        help="show a Redis cluster's crawls, managers and fetchers",
        description="The cluster at a glance: crawls, partitions, managers, fetchers "
        "alive, queues.",
    )
    _add_cluster_args(status.add_argument_group("the cluster"), manager=False)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument(
        "--forget",
        metavar="CRAWL",
        default=None,
        help="remove crawl CRAWL's keys from Redis (refused while one of its managers runs); "
        "the managers' state dirs and the fetchers' WARC files are not touched",
    )


def _add_demo_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="crawl the bundled synthetic web for about 30 s")
    demo.add_argument("--seconds", type=_nonneg_float, default=30.0, help="crawl time (default 30)")
    demo.add_argument("--hosts", type=_pos_int, default=300, help="synthetic hosts (default 300)")
    demo.add_argument(
        "--state",
        dest="state_dir",
        metavar="DIR",
        default=None,
        help="state directory (default: ./drumbeat-demo/<time>)",
    )


def _add_web_arg(parser: argparse.ArgumentParser, whose: str = "the") -> None:
    parser.add_argument(
        "--web",
        metavar="[HOST:]PORT",
        default=DEFAULT_ADDRESS,
        help=f"serve {whose} control API and /metrics there (default 127.0.0.1, a free "
        "port; the address goes to STATE/web.json, the token to STATE/web.token, for "
        "`drumbeat ctl --state STATE`); off: none",
    )


# Arguments that are not crawl settings: the command's own and a cluster manager's role.
_NOT_SETTINGS = frozenset(
    {"command", "urls", "config", "reexec", "redis", "prefix", "crawl", "partition", "weight"}
    | {"heartbeat_timeout", "redis_ca", "web"}
)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Defaults < settings saved by an earlier run of this crawl < --config file < flags."""
    flags: dict[str, Any] = {k: v for k, v in vars(args).items() if k not in _NOT_SETTINGS}
    saved = load_saved(Path(args.state_dir))
    file_layer = load_toml(Path(args.config)) if getattr(args, "config", None) else {}
    file_seeds = list(file_layer.pop("seeds", []) or [])
    flags["seeds"] = file_seeds + list(args.urls)
    return build(Settings(), saved, file_layer, flags)


def check_state_path(path: Path) -> None:
    """Raise SettingsError (one line) when ``path`` is a file or under one (before anything
    reads the settings saved there)."""
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            where = "is" if parent == path else f"is under {parent}, which is"
            raise SettingsError(f"--state {path} {where} a file, not a directory")


def check_state_dir(path: Path) -> None:
    """Raise SettingsError (one line) unless ``path`` is, or can be made, a directory this
    process can write in (made only once the settings are known good)."""
    check_state_path(path)
    what = f"--state {path}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SettingsError(f"{what}: cannot create it: {e.strerror}") from None
    try:
        probe = path / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise SettingsError(f"{what}: cannot write in it: {e.strerror}") from None


def cmd_crawl(args: argparse.Namespace) -> int:
    web = _web_address(args)

    def run(settings: Settings) -> Any:
        from drumbeat.standalone import run_crawl

        return run_crawl(settings, web=web)

    return _run_manager(args, run)


def _web_address(args: argparse.Namespace) -> WebAddress | None:
    try:
        return parse_address(args.web)
    except AddressError as e:
        raise SettingsError(str(e)) from None


def _add_ctl_parser(sub: Any) -> None:
    ctl = sub.add_parser(
        "ctl",
        help="steer a running crawl: pause, resume, speed, block, status...",
        description="Call the control API of the crawl running in --state DIR (it reads "
        "STATE/web.json and STATE/web.token). Prints the JSON answer; exits 1 when the "
        "crawl is not running or refuses the call.",
    )
    ctl.add_argument("--state", dest="state_dir", metavar="DIR", required=True)
    acts = ctl.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for name, what in [
        ("status", "pages, rates, queues, pause, speed, blocks, counters"),
        ("pause", "no new request leaves (in-flight ones finish)"),
        ("resume", "undo pause"),
        ("checkpoint", "write a checkpoint soon"),
        ("stop", "stop gracefully, as SIGTERM does"),
    ]:
        acts.add_parser(name, help=what)
    speed = acts.add_parser("speed", help="a ceiling in pages/s (none: no ceiling)")
    speed.add_argument("pages_per_s", metavar="N|none")
    for name, what in [("block", "drop a host's, PLD's or regex's URLs"), ("unblock", "lift")]:
        b = acts.add_parser(name, help=what)
        one = b.add_mutually_exclusive_group(required=True)
        one.add_argument("--host", metavar="HOST")
        one.add_argument("--pld", metavar="PLD")
        one.add_argument("--regex", metavar="REGEX")
    host = acts.add_parser("host", help="why a host is or is not fetching now")
    host.add_argument("name", metavar="NAME")
    hosts = acts.add_parser("hosts", help="the hosts with the most URLs queued in RAM")
    hosts.add_argument("--top", type=_pos_int, default=20, metavar="N")


def cmd_ctl(args: argparse.Namespace) -> int:
    from drumbeat.web.client import CtlError, call, host_path

    action = args.action
    method, path, body = "POST", f"/api/{action}", None
    if action == "status":
        method = "GET"
    elif action == "host":
        method, path = "GET", host_path(args.name)
    elif action == "hosts":
        method, path = "GET", f"/api/hosts?top={args.top}"
    elif action == "speed":
        text = args.pages_per_s.strip().lower()
        if text in ("none", "off", "0"):
            rate = None
        else:
            try:
                rate = _pos_float(text)
            except argparse.ArgumentTypeError as e:
                raise SettingsError(f"speed: {e}") from None
        method, path, body = "PUT", "/api/speed", {"pages_per_s": rate}
    elif action in ("block", "unblock"):
        kind = next(k for k in ("host", "pld", "regex") if getattr(args, k) is not None)
        method = "POST" if action == "block" else "DELETE"
        path, body = "/api/block", {kind: getattr(args, kind)}
    try:
        answer = call(Path(args.state_dir), method, path, body)
    except CtlError as e:
        print(f"drumbeat ctl: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(answer, indent=1 if method == "GET" else None))
    return EXIT_OK


def cmd_manager(args: argparse.Namespace) -> int:
    from drumbeat.queue.partition import parse_partition

    part, parts = parse_partition(args.partition)
    crawl = _crawl_name(args.crawl)
    web = _web_address(args)

    def run(settings: Settings) -> Any:
        from drumbeat.cluster import ManagerRole, run_manager

        role = ManagerRole(
            redis_url=args.redis,
            crawl=crawl,
            part=part,
            parts=parts,
            weight=args.weight,
            heartbeat_timeout_s=args.heartbeat_timeout,
            prefix=args.prefix,
            redis_ca=args.redis_ca,
        )
        return run_manager(settings, role, web)

    return _run_manager(args, run)


def _crawl_name(name: str) -> str:
    if not name or any(c in name for c in ":\x1f") or not name.isprintable():
        raise SettingsError(f"--crawl {name!r}: a name without ':' or control characters")
    return name


def _run_manager(args: argparse.Namespace, run: Callable[[Settings], Any]) -> int:
    """A crawl's manager, standalone or in a cluster: settings, allocator, run, report.
    ``run`` imports the crawl's modules itself: a process that executes itself again for
    its allocator would import them for nothing."""
    check_state_path(Path(args.state_dir))
    settings = settings_from_args(args)
    if args.reexec:
        # Before the checks below: the process executed again makes them, and this one
        # would import their modules (the scope's loads the public suffix list) for nothing.
        reexec_if_needed(settings.allocator, sys.argv[1:])  # returns if nothing to do
    from drumbeat.frontier.scope import check_settings as check_scope

    check_scope(settings)  # the blocklist file's lines, before the state dir is made
    _check_focus(settings)
    check_state_dir(Path(args.state_dir))
    from drumbeat.checkpoint import CheckpointError
    from drumbeat.drum import DrumError
    from drumbeat.runtime.gctune import tune_gc
    from drumbeat.standalone import CrawlError
    from drumbeat.store.journal import JournalError

    tune_gc()  # this process is the crawl's manager from here on
    try:
        outcome = run(settings)
    except (CrawlError, CheckpointError, DrumError, JournalError) as e:
        print(f"drumbeat {args.command}: cannot run: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:  # the disk: full, read-only, gone
        print(f"drumbeat {args.command}: failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    if outcome.seeds_refused:
        print(f"drumbeat {args.command}: {outcome.seeds_refused}", file=sys.stderr)
    print(
        f"crawl stopped ({outcome.stop_reason}) after {outcome.elapsed_s:,.1f} s: "
        f"{outcome.pages_done:,} pages in total, {outcome.queued:,} URLs still queued; "
        f"state in {outcome.state_dir}",
        file=sys.stderr,
    )
    if settings.revisit:
        _report_revisits(Path(outcome.state_dir))
    if outcome.all_seeds_refused:
        return EXIT_FAILED
    # Stopped by a signal or by the control API (drumbeat.web.app.STOP_REASON).
    stopped = outcome.stop_reason in ("signal", "stop_requested")
    return EXIT_STOPPED if stopped else EXIT_OK


def _report_revisits(state_dir: Path) -> None:
    """The revisits' figures of a crawl with ``--revisit`` (its last checkpoint's)."""
    from drumbeat.checkpoint import CheckpointError, read_counters
    from drumbeat.store.summary import revisit_summary

    try:
        counters = read_counters(state_dir)
    except CheckpointError:
        return
    r = None if counters is None else revisit_summary(counters)
    if r is not None:
        print(
            f"revisits: {r['fetched']:,} fetched ({r['not_modified']:,} not modified, "
            f"{r['unchanged']:,} unchanged, {r['changed']:,} changed), {r['queued']:,} "
            f"queued; expected freshness {r['expected_freshness']:.3f}",
            file=sys.stderr,
        )


def cmd_fetcher(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    check_state_path(state)
    check_state_dir(state)
    processes = args.processes if args.processes is not None else (os.cpu_count() or 1)
    if processes == 1 and args.reexec:
        # The malloc a crawl's fetchers run on (drumbeat.runtime.allocator); with more
        # processes, the children are started with it.
        reexec_if_needed("auto", sys.argv[1:])  # returns if nothing to do
    from drumbeat.cluster import FetcherRole, run_fetcher  # after: imported once

    return run_fetcher(
        FetcherRole(
            redis_url=args.redis,
            state_dir=state,
            processes=processes,
            concurrency=args.concurrency,
            exit_when_idle=args.exit_when_idle,
            heartbeat_timeout_s=args.heartbeat_timeout,
            prefix=args.prefix,
            redis_ca=args.redis_ca,
        )
    )


def cmd_status(args: argparse.Namespace) -> int:
    import asyncio

    from drumbeat.cluster import cluster_status, forget_crawl, render_status
    from drumbeat.queue.redis import ClusterError

    try:
        if args.forget is not None:
            forget = forget_crawl(args.redis, args.forget, args.prefix, args.redis_ca)
            removed = asyncio.run(forget)
            print(f"drumbeat status: forgot {args.forget!r} ({removed} keys)", file=sys.stderr)
        status = asyncio.run(cluster_status(args.redis, args.prefix, args.redis_ca))
    except ClusterError as e:
        print(f"drumbeat status: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(status, sort_keys=True) if args.json else render_status(status))
    return EXIT_OK


def _add_web_parser(sub: Any) -> None:
    web = sub.add_parser(
        "web",
        help="serve a Redis cluster's dashboard (read-only)",
        description="The dashboard of every crawl on a Redis cluster (or of one, --crawl): "
        "rates, crawls, managers and fetchers, with the history Redis keeps. Read-only: "
        "steer a crawl through its managers' own --web servers.",
    )
    _add_cluster_args(web.add_argument_group("the cluster"), manager=False)
    web.add_argument("--crawl", metavar="NAME", default=None, help="show this crawl only")
    web.add_argument(
        "--web",
        metavar="[HOST:]PORT",
        default=DEFAULT_ADDRESS,
        help="where to serve it (default 127.0.0.1, a free port)",
    )
    web.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help="the bearer token readers must send, needed off loopback",
    )


def cmd_web(args: argparse.Namespace) -> int:
    import asyncio
    import secrets

    from drumbeat.cluster import cluster_status
    from drumbeat.queue.redis import ClusterError, RedisLink
    from drumbeat.stats import StatsReader
    from drumbeat.web.cluster import ClusterView, serve_cluster

    try:
        address = parse_address(args.web)
    except AddressError as e:
        raise SettingsError(str(e)) from None
    if address is None:
        raise SettingsError("--web off: nothing to serve")
    token = secrets.token_urlsafe(32)
    if not address.loopback:
        if args.token_file is None:
            raise SettingsError("--web off loopback needs --token-file (the readers' token)")
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise SettingsError(f"--token-file: {e.strerror}") from None
        if not token:
            raise SettingsError("--token-file: the file is empty")

    def ready(url: str) -> None:
        print(f"drumbeat web: the cluster's dashboard at {url}", file=sys.stderr, flush=True)

    async def main() -> None:
        link = RedisLink(args.redis, prefix=args.prefix, ca_file=args.redis_ca)
        try:
            await link.check()
            view = ClusterView(
                lambda: cluster_status(args.redis, args.prefix, args.redis_ca),
                StatsReader(link.redis, args.prefix),
                args.crawl,
            )
            await serve_cluster(view, address, token, on_ready=ready)
        finally:
            await link.close()

    try:
        asyncio.run(main())
    except ClusterError as e:
        print(f"drumbeat web: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        print(f"drumbeat web: --web {args.web}: cannot listen: {e.strerror}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    from rich.console import Console

    from drumbeat.checkpoint import CheckpointError, read_counters
    from drumbeat.store.summary import render_summary, summarize

    state_dir = Path(args.state_dir)
    if not (state_dir / "crawl.log").exists():
        print(
            f"drumbeat stats: {state_dir} is not a crawl state directory (no crawl.log)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        counters = read_counters(state_dir)
    except CheckpointError as e:
        print(f"drumbeat stats: warning: {e}", file=sys.stderr)
        counters = None
    summary = summarize(state_dir, counters)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        render_summary(summary, Console())
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    if args.reexec:
        reexec_if_needed(_D.allocator, sys.argv[1:])  # returns if nothing to do
    from rich.console import Console

    from drumbeat.checkpoint import read_counters
    from drumbeat.standalone import run_crawl
    from drumbeat.store.summary import render_summary, summarize

    console = Console(stderr=True)
    state_dir = Path(args.state_dir or f"drumbeat-demo/{time.strftime('%Y%m%d-%H%M%S')}")
    console.print(
        f"[bold]drumbeat demo[/]: starting a synthetic web of {args.hosts} hosts on loopback ..."
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "drumbeat.simweb",
            "--hosts",
            str(args.hosts),
            "--ips",
            "32",
            "--pages-per-host",
            "40",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(server.stdout.readline() if server.stdout else "{}")
        settings = build(
            Settings(),
            {
                "state_dir": str(state_dir),
                "seeds": info["seeds"],
                "dns_server": info["dns"],
                "allow_loopback": True,
                "host_delay_s": 1.0,
                "ip_delay_s": 0.02,
                "max_time_s": args.seconds or 30.0,
                "checkpoint_interval_s": 10.0,
                "robots_retry_s": 5.0,
            },
        )
        console.print(
            f"crawling {len(info['seeds'])} seeds for {args.seconds:g} s "
            f"(host delay 1 s, robots obeyed); state in {state_dir}"
        )
        outcome = run_crawl(settings)
    finally:
        server.terminate()
        server.wait(timeout=10)
    out = Console()
    render_summary(summarize(state_dir, read_counters(state_dir)), out)
    out.print(
        f"demo stopped ({outcome.stop_reason}) with {outcome.queued:,} URLs still queued; "
        f"the synthetic web has stopped too."
    )
    out.print(f"WARC files: {state_dir / 'warc'}")
    out.print(f"crawl log:  {state_dir / 'crawl.log'}   summary again: drumbeat stats {state_dir}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv_given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["simweb"]:
        from drumbeat.simweb.__main__ import main as simweb_main

        return simweb_main(argv[1:])
    if argv[:1] == ["bench"]:
        from drumbeat.bench import main as bench_main

        return bench_main(argv[1:])
    # Only a whole program (the console script, python -m drumbeat) may execute itself
    # again for its allocator; a caller that passes argv keeps its process.
    reexec = not argv_given
    args = build_parser().parse_args(argv)
    args.reexec = reexec
    try:
        commands: dict[str, Callable[[argparse.Namespace], int]] = {
            "crawl": cmd_crawl,
            "manager": cmd_manager,
            "fetcher": cmd_fetcher,
            "status": cmd_status,
            "stats": cmd_stats,
            "demo": cmd_demo,
            "ctl": cmd_ctl,
            "web": cmd_web,
        }
        return commands[args.command](args)
    except (SettingsError, AllocatorMissing) as e:
        print(f"drumbeat {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the crawl's own handlers, or in another command
        return EXIT_STOPPED if args.command in ("crawl", "manager") else 130


if __name__ == "__main__":
    sys.exit(main())
