"""One place for every crawl setting and its default.

The CLI, a TOML config file and library callers all start from :class:`Settings`.
Precedence: defaults < config file < command-line flags. Units are in the field
names (``_s`` seconds, ``_bytes`` bytes). :func:`validate` turns a bad value into a
:class:`SettingsError` whose message names the setting, so the CLI can print one
line and exit 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from drumbeat import __version__
from drumbeat.runtime.allocator import ALLOCATORS

DEFAULT_USER_AGENT = (
    f"drumbeat/{__version__} (+https://github.com/drumbeat-crawler/drumbeat; "
    "set user_agent to your own contact URL)"
)

SCOPES = ("any", "host", "domain")
SITEMAP_MODES = ("off", "robots", "robots+default")
# What the Accept header asks for: pages, then feeds and sitemaps, then anything (other
# media types are archived, not parsed).
DEFAULT_ACCEPT = (
    "text/html,application/xhtml+xml;q=0.9,application/rss+xml;q=0.8,"
    "application/atom+xml;q=0.8,application/xml;q=0.7,text/xml;q=0.7,*/*;q=0.5"
)
HTTP_CLIENTS = ("aiohttp", "curl")
# Crawl orders within BEAST's budgets (drumbeat.frontier.order); --focus is one more.
ORDERS = ("bfs", "indegree", "opic", "larger-sites")


class SettingsError(ValueError):
    """A setting has a bad value; the message names the setting and says what is allowed."""


@dataclass(frozen=True)
class Settings:
    # What to crawl and where state lives.
    state_dir: Path | None = None
    seeds: tuple[str, ...] = ()
    seeds_file: Path | None = None
    scope: str = "any"  # any | host (seed hosts only) | domain (seed pay-level domains)
    # Seeds are the operator's choice, not spam: each seed host gets a BEAST place and
    # budget of its own, its PLD's (budget_max in a scoped crawl); delays are unchanged.
    # false = pure STAR for seeds too (drumbeat.frontier.star.SeedTrust).
    trust_seeds: bool = True
    # Scope rules (drumbeat.frontier.scope); None / () = no such rule, and no cost.
    # Regexes searched in each found link's normalized URL: a link matching an exclude
    # pattern is dropped; with include patterns, so is one matching none (exclude wins).
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_depth: int | None = None  # links from seeds followed at most this deep (seeds: 0)
    max_pages_per_host: int | None = None  # pages fetched (with a response) per host name
    max_pages_per_pld: int | None = None  # ... per pay-level domain
    max_bytes_per_host: int | None = None  # body bytes fetched per host name
    # Hosts, PLDs and re:REGEX URL patterns, one a line (frontier.scope.read_blocklist);
    # read again when it changes, looked at every blocklist_check_s.
    blocklist_file: Path | None = None
    blocklist_check_s: float = 5.0
    # Counters per row of each cap's count-min sketch (4 rows; 4 bytes a counter, 8 for
    # bytes): more counters, a smaller over-count (frontier.scope.CountSketch).
    scope_sketch_width: int = 1 << 20

    # Crawl order and focus (drumbeat.frontier.order). ``order``: bfs (breadth-first in
    # each BEAST queue, no per-URL cost) | indegree | opic | larger-sites. ``focus``:
    # "module:function" scoring each HTML page (its text, its URL) in [0, 1]; the score
    # orders the page's links (a focused crawl; order must be bfs). ``order_bands``:
    # priority bands per BEAST queue (one disk FIFO each); ``order_sketch_width``:
    # counters per row of the policy's count-min sketch (4 rows, 4 bytes a counter).
    order: str = "bfs"
    focus: str | None = None
    order_bands: int = 4
    order_sketch_width: int = 1 << 20

    # When to stop (None = no limit). The crawl also stops when nothing is left.
    max_pages: int | None = None
    max_time_s: float | None = None

    # Politeness. Defaults are polite: an operator lowers them deliberately.
    host_delay_s: float = 2.0  # τh: min spacing of requests to one host name
    ip_delay_s: float = 0.5  # τs: min spacing of requests to one server IP
    # Requests to one host in flight at once. 1 (IRLbot's rule): τh runs from one request's
    # completion to the next start. More only for servers whose operator allows it (your
    # own): τh then spaces request starts, and the IP delay still holds (one request per
    # IP at a time unless ip_delay_s is 0).
    host_connections: int = 1
    # Where a host's delays are all 0 (host_delay_s and ip_delay_s 0, no robots
    # Crawl-delay): requests queued at the fetchers behind each of its connections, so
    # that the next starts the moment one ends, not after a round trip through the
    # manager; still at most host_connections at once (frontier.politeness). 0: none.
    host_pipeline: int = 3
    # IRLbot scales τh and τs down for high-budget (well-linked) PLDs, to these floors.
    host_delay_min_s: float = 0.5
    ip_delay_min_s: float = 0.1
    crawl_delay_max_s: float = 60.0  # robots Crawl-delay is honoured up to this cap
    user_agent: str = DEFAULT_USER_AGENT
    # The product token that robots.txt groups are matched on (RFC 9309 §2.2.1), case-
    # insensitively; the User-Agent header should start with it. Letters, "_" and "-".
    robots_agent: str = "drumbeat"
    # The From header of every request (robots.txt included): an e-mail address where the
    # crawler's operator can be reached, as Heritrix sends; "" = no From header.
    from_header: str = ""
    robots_expiry_s: float = 86400.0
    # Back-off (429, 503, connect/timeout/reset): doubling from 2 x host delay, Retry-After
    # honoured, capped; forgiven after a quiet period; a failed URL gets this many fetches.
    backoff_max_s: float = 600.0
    backoff_forgive_s: float = 600.0
    fetch_max_attempts: int = 3
    robots_retry_s: float = 600.0  # after a 5xx / network failure on robots.txt
    robots_max_attempts: int = 3  # then the host's URLs are dropped (counted)
    robots_max_bytes: int = 512 * 1024  # RFC 9309: parse at least 500 KiB

    # Network.
    concurrency: int = 100  # fetches in flight at once
    dns_server: str | None = None  # HOST[:PORT]; None = the system's resolvers
    dns_timeout_s: float = 5.0
    dns_negative_ttl_s: float = 300.0
    allow_loopback: bool = False
    allow_private: bool = False
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    total_timeout_s: float = 60.0
    max_body_bytes: int = 10 * 1024 * 1024  # longer bodies are kept truncated
    max_decoded_bytes: int = 50 * 1024 * 1024  # cap after Content-Encoding (bombs)
    # The fetchers' HTTP client: "curl" (libcurl through pycurl, drumbeat.fetch.curl) or
    # "aiohttp" (drumbeat.fetch.http): the same contract (drumbeat.fetch.client); curl
    # costs less CPU a page.
    http_client: str = "curl"
    # HTTPS: check the server's certificate against the system CAs. A failure is the
    # fetch error tls:certificate (other TLS failures: tls:error); false archives such
    # sites too (Heritrix and Scrapy do not verify).
    tls_verify: bool = True
    # The malloc of the crawl's processes (drumbeat.runtime.allocator): "auto" = mimalloc, else
    # jemalloc, when installed (less CPU per page than glibc's: README), else the
    # system's; "mimalloc" / "jemalloc" insist (an error when missing); "system" = glibc.
    allocator: str = "auto"

    # URLs and links.
    max_url_bytes: int = 2048
    max_links_per_page: int = 10_000
    # Redirects followed in a row from a link (each is a new URL through URL-seen, which
    # ends loops); the next Location is dropped as too_many_redirects.
    max_redirects: int = 10

    # Sitemaps and feeds (drumbeat.parse.sitemaps). sitemaps: "robots" fetches those
    # robots.txt names; "robots+default" also /sitemap.xml where it names none (a guessed
    # URL on every host); "off" none. Each is fetched politely like a page.
    sitemaps: str = "robots"
    sitemap_max_urls: int = 50_000  # read per sitemap file (the protocol's cap)
    sitemap_max_bytes: int = 50 * 1024 * 1024  # uncompressed, per file (gzip bombs stop here)
    # An index's sitemaps are followed while the index is at most this many links from a
    # seed or a robots.txt (whose Sitemap lines are at depth 1): nesting is bounded.
    sitemap_index_max_depth: int = 2
    accept: str = DEFAULT_ACCEPT  # the Accept header of page requests

    # URL-seen (DRUM): RAM is fixed by this, not by the number of URLs seen.
    urlseen_ram_bytes: int = 64 * 1024 * 1024
    # RAM for the fingerprints of URLs sent to URL-seen lately, whose later copies are then
    # dropped before DRUM (drumbeat.frontier.seencache); 0 = none.
    urlseen_cache_bytes: int = 64 * 1024 * 1024
    urlseen_flush_interval_s: float = (
        0.5  # min gap between merges forced by a short or low frontier
    )
    pld_ram_bytes: int = 16 * 1024 * 1024  # PLD in-degree (two DRUMs, half each)

    # Frontier (IRLbot STAR + BEAST + robots loop): disk queues, RAM fixed by these.
    frontier_ram_urls: int = 100_000  # URLs held in RAM by the politeness scheduler at most
    budget_default: int = 10  # B0: URLs per BEAST queue for a PLD in the long tail
    budget_max: int = 10_000  # the budget of the best-linked PLDs
    budget_indegree_floor: int = 10  # PLD in-degree up to which a PLD gets budget_default
    budget_table_plds: int = 100_000  # well-linked PLDs whose in-degree STAR keeps in RAM
    # Merge the PLD graph this often so budgets follow it (less often when one merge takes
    # more than 2 % of the interval: LoopTuning.forced_pld_merge_share).
    budget_refresh_s: float = 10.0
    beast_queues: int = 4  # j at the start; doubles up to beast_max_queues
    beast_max_queues: int = 64
    beast_pld_slots: int = 1 << 20  # BEAST's per-PLD budget table (16 bytes a slot)
    beast_host_slots: int = 1 << 20  # BEAST's per-host cap table (12 bytes a slot)
    # IRLbot's T: a PLD passes at most its budget of URLs per T seconds. A BEAST queue turn
    # lasts at least this long, unless everything it brought has been fetched (so the crawl
    # never idles for it). None = budget_default x host_delay_s, the time a long-tail host
    # needs to be fetched its B0 URLs at τh: pacing never holds such a host below its
    # politeness rate. 0 = off (a turn ends as soon as its queue is read into RAM).
    beast_turn_s: float | None = None
    robots_ram_entries: int = 10_000  # parsed robots.txt kept in RAM (the rest on disk)
    robots_ram_bytes: int = 4 * 1024 * 1024  # RobotsCache + RobotsRequested DRUM buffers
    robots_wait_max_s: float = 30.0  # URLs waiting in QR are replayed after this at latest

    # Output and durability.
    warc_max_file_bytes: int = 1 << 30
    # 0-3: ISA-L (fast, a little less tight); 4-9: zlib (an order of magnitude slower for a
    # few percent smaller files). See store.warc.gzip_member and docs/benchmarks.md.
    warc_gzip_level: int = 1

    # Duplicates (drumbeat.store.dedup). A 2xx payload already archived in this crawl
    # (by the fetchers of this state directory) is written as a WARC revisit record
    # (identical-payload-digest), not a second copy. A copy in the same directory of
    # the same origin as the first (e.g. the page under another query) has the same
    # links, which are not extracted again unless dedup_follow_links; a copy elsewhere
    # is parsed, its relative links resolving to other URLs.
    dedup: bool = True
    dedup_follow_links: bool = False
    # An HTML page whose text's 64-bit simhash is within near_dup_distance bits of an
    # earlier page's is marked in the crawl log ("near_dup_of"); its links are followed
    # unless near_dup_follow_links is false. Off by default: the text and its simhash
    # cost more CPU than the parse itself (docs/benchmarks.md, "Duplicates").
    near_dup: bool = False
    near_dup_follow_links: bool = True
    near_dup_distance: int = 3
    # The 64 bits in this many blocks: C(blocks, blocks - distance) tables (4 -> 4 tables
    # keyed by 16 bits; more blocks: more tables, fewer fingerprints under a key).
    near_dup_blocks: int = 4
    # The disk cap of the index (LMDB's map size; about 300 bytes a page): when full it
    # stops growing and later copies are archived in full. Its RAM is the page cache.
    content_index_max_bytes: int = 16 << 30

    # Revisits (drumbeat.revisit, `crawl --revisit`): each page fetched is fetched again
    # at the interval that maximizes the collection's freshness for the bandwidth set
    # aside (revisit_share of the fetch rate), by conditional GET; such a crawl never
    # runs out of work (max_pages, max_time or a signal stop it). The intervals stay
    # within [revisit_min_interval_s, revisit_max_interval_s]; a page's first one, before
    # its change rate is known, is revisit_max_interval_s / 30.
    revisit: bool = False
    revisit_share: float = 0.2
    revisit_min_interval_s: float = 60.0
    revisit_max_interval_s: float = 30 * 86400.0

    checkpoint_interval_s: float = 60.0
    # The write-ahead journal of completed fetches (drumbeat.manager.journal): a resume
    # after a crash fetches again only what was in flight or done in the last
    # journal_commit_s; false = back to the last checkpoint.
    journal: bool = True
    journal_commit_s: float = 0.5

    # Task hand-off between manager and fetchers.
    task_max_items: int = 64
    # Fetcher processes: None = one per core available; 0 = fetch inside the manager's
    # process, on its event loop (one core).
    fetchers: int | None = None

    # Display: None = live progress when stderr is a terminal.
    progress: bool | None = None
    progress_interval_s: float = 10.0  # log-line progress when not on a terminal

    def with_changes(self, **changes: Any) -> Settings:
        return validate(dataclasses.replace(self, **changes))

    def beast_turn(self) -> float:
        """``beast_turn_s`` with None resolved to ``budget_default * host_delay_s``."""
        if self.beast_turn_s is not None:
            return self.beast_turn_s
        return self.budget_default * self.host_delay_s

    def fetcher_processes(self) -> int:
        """``fetchers``, with None resolved to the cores this process may run on."""
        if self.fetchers is not None:
            return self.fetchers
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )


_FIELDS = {f.name: f for f in fields(Settings)}
_PATH_FIELDS = {"state_dir", "seeds_file", "blocklist_file"}
_STR_TUPLE_FIELDS = {"seeds", "include", "exclude"}


def _type_name(name: str) -> str:
    return str(_FIELDS[name].type)


def coerce(name: str, value: Any) -> Any:
    """Convert a raw value (from TOML or a flag) to the field's type, or raise SettingsError."""
    if name not in _FIELDS:
        raise SettingsError(f"unknown setting '{name}'")
    kind = _type_name(name)
    try:
        if value is None:
            if "None" in kind:
                return None
            raise SettingsError(f"setting '{name}' cannot be empty")
        if name in _PATH_FIELDS:
            return Path(str(value))
        if name in ("include", "exclude") and isinstance(value, str):
            return (value,)  # one pattern (a config file's include = "REGEX")
        if name in _STR_TUPLE_FIELDS:
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"setting '{name}' must be a list of strings")
            return tuple(value)
        if kind.startswith("bool"):
            if not isinstance(value, bool):
                raise SettingsError(f"setting '{name}' must be true or false, got {value!r}")
            return value
        if kind.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind.startswith("float"):
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind.startswith("str"):
            if not isinstance(value, str):
                raise ValueError
            return value
    except (TypeError, ValueError):
        raise SettingsError(
            f"setting '{name}' must be {kind.split(' |')[0]}, got {value!r}"
        ) from None
    return value


# The settings checked by kind of value; the rest are checked one by one in validate().
NON_NEGATIVE_SECONDS = (
    "host_delay_s",
    "ip_delay_s",
    "crawl_delay_max_s",
    "robots_retry_s",
    "dns_negative_ttl_s",
    "robots_expiry_s",
    "host_delay_min_s",
    "ip_delay_min_s",
)
POSITIVE_SECONDS = (
    "connect_timeout_s",
    "read_timeout_s",
    "total_timeout_s",
    "dns_timeout_s",
    "checkpoint_interval_s",
    "journal_commit_s",
    "progress_interval_s",
    "urlseen_flush_interval_s",
    "budget_refresh_s",
    "robots_wait_max_s",
    "blocklist_check_s",
    "backoff_max_s",
    "backoff_forgive_s",
)
AT_LEAST_ONE = (
    "concurrency",
    "host_connections",
    "robots_max_attempts",
    "robots_max_bytes",
    "max_body_bytes",
    "max_decoded_bytes",
    "max_links_per_page",
    "warc_max_file_bytes",
    "task_max_items",
    "urlseen_ram_bytes",
    "pld_ram_bytes",
    "frontier_ram_urls",
    "budget_default",
    "budget_table_plds",
    "beast_queues",
    "beast_pld_slots",
    "beast_host_slots",
    "robots_ram_entries",
    "robots_ram_bytes",
    "fetch_max_attempts",
    "budget_indegree_floor",
    "sitemap_max_urls",
    "sitemap_max_bytes",
)


def validate(s: Settings) -> Settings:
    """Check ranges and relations; return ``s`` unchanged or raise SettingsError."""

    def need(ok: bool, name: str, what: str) -> None:
        if not ok:
            raise SettingsError(f"setting '{name}' {what}, got {getattr(s, name)!r}")

    for name in NON_NEGATIVE_SECONDS:
        need(getattr(s, name) >= 0, name, "must be >= 0 seconds")
    for name in POSITIVE_SECONDS:
        need(getattr(s, name) > 0, name, "must be > 0 seconds")
    for name in AT_LEAST_ONE:
        need(getattr(s, name) >= 1, name, "must be >= 1")
    need(
        s.beast_turn_s is None or 0 <= s.beast_turn_s < float("inf"),
        "beast_turn_s",
        "must be >= 0 seconds",
    )
    need(
        re.fullmatch(r"[A-Za-z_-]+", s.robots_agent) is not None,
        "robots_agent",
        "must be a product token: letters, '_' and '-' only (e.g. drumbeat)",
    )
    need(s.budget_max >= s.budget_default, "budget_max", "must be >= budget_default")
    need(s.beast_max_queues >= s.beast_queues, "beast_max_queues", "must be >= beast_queues")
    need(s.fetchers is None or 0 <= s.fetchers <= 256, "fetchers", "must be 0..256")
    need(s.max_url_bytes >= 16, "max_url_bytes", "must be >= 16")
    need(s.max_redirects >= 0, "max_redirects", "must be >= 0")
    need(s.host_pipeline >= 0, "host_pipeline", "must be >= 0")
    need(
        s.urlseen_cache_bytes == 0 or s.urlseen_cache_bytes >= 8,
        "urlseen_cache_bytes",
        "must be 0 (none) or >= 8",
    )
    need(0 <= s.warc_gzip_level <= 9, "warc_gzip_level", "must be 0..9")
    need(s.sitemaps in SITEMAP_MODES, "sitemaps", f"must be one of {', '.join(SITEMAP_MODES)}")
    need(s.sitemap_index_max_depth >= 0, "sitemap_index_max_depth", "must be >= 0")
    need(
        bool(s.accept.strip()) and s.accept.isascii() and s.accept.isprintable(),
        "accept",
        "must be one line of printable ASCII",
    )
    need(2 <= s.near_dup_blocks <= 8, "near_dup_blocks", "must be 2..8")
    need(
        0 <= s.near_dup_distance < s.near_dup_blocks,
        "near_dup_distance",
        "must be 0..near_dup_blocks - 1",
    )
    need(0 < s.revisit_share <= 1, "revisit_share", "must be in (0, 1]")
    need(
        0 < s.revisit_min_interval_s <= s.revisit_max_interval_s,
        "revisit_min_interval_s",
        "must be > 0 and <= revisit_max_interval_s",
    )
    need(s.content_index_max_bytes >= 1 << 20, "content_index_max_bytes", "must be >= 1 MiB")
    need(s.scope in SCOPES, "scope", f"must be one of {', '.join(SCOPES)}")
    need(s.http_client in HTTP_CLIENTS, "http_client", f"must be one of {', '.join(HTTP_CLIENTS)}")
    need(s.allocator in ALLOCATORS, "allocator", f"must be one of {', '.join(ALLOCATORS)}")
    need(s.max_pages is None or s.max_pages >= 0, "max_pages", "must be >= 0")
    need(s.max_time_s is None or s.max_time_s > 0, "max_time_s", "must be > 0 seconds")
    need(
        bool(s.user_agent.strip()) and "\n" not in s.user_agent,
        "user_agent",
        "must be a non-empty single line",
    )
    need(
        s.from_header == ""
        or ("@" in s.from_header and s.from_header.isascii() and s.from_header.isprintable()),
        "from_header",
        "must be empty or one line of printable ASCII with an e-mail address",
    )
    if s.dns_server is not None:
        parse_hostport(s.dns_server)
    _validate_scope(s, need)
    _validate_order(s, need)
    return s


def _validate_order(s: Settings, need: Callable[[bool, str, str], None]) -> None:
    need(s.order in ORDERS, "order", f"must be one of {', '.join(ORDERS)}")
    need(2 <= s.order_bands <= 64, "order_bands", "must be 2..64")
    need(
        s.order_sketch_width >= 64 and s.order_sketch_width & (s.order_sketch_width - 1) == 0,
        "order_sketch_width",
        "must be a power of 2 >= 64",
    )
    if s.focus is not None:
        need(
            re.fullmatch(r"[\w.]+:\w+", s.focus) is not None,
            "focus",
            "must be module:function (--focus)",
        )
        need(s.order == "bfs", "order", "must be bfs with --focus (the focus score orders)")


def _validate_scope(s: Settings, need: Callable[[bool, str, str], None]) -> None:
    """The scope rules' settings (their regexes compile; the blocklist file exists)."""
    need(s.max_depth is None or s.max_depth >= 0, "max_depth", "must be >= 0")
    for name in ("max_pages_per_host", "max_pages_per_pld", "max_bytes_per_host"):
        need(getattr(s, name) is None or getattr(s, name) >= 1, name, "must be >= 1")
    need(s.scope_sketch_width >= 64, "scope_sketch_width", "must be >= 64")
    for name in ("include", "exclude"):
        for pattern in getattr(s, name):
            try:
                re.compile(pattern)
            except re.error as e:
                raise SettingsError(
                    f"setting '{name}' (--{name}) has a bad regex {pattern!r}: {e}"
                ) from None
    if s.blocklist_file is not None and not s.blocklist_file.is_file():
        raise SettingsError(
            f"setting 'blocklist_file' (--blocklist): no such file {str(s.blocklist_file)!r}"
        )


def parse_hostport(value: str, default_port: int = 53) -> tuple[str, int]:
    """Parse ``HOST[:PORT]`` (``[v6]:port`` too) for the dns_server setting."""
    host, port = value, default_port
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest:
            port = _port(rest.lstrip(":"))
    elif value.count(":") == 1:
        host, p = value.split(":")
        port = _port(p)
    if not host:
        raise SettingsError(f"setting 'dns_server' must be HOST[:PORT], got {value!r}")
    return host, port


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SettingsError(f"setting 'dns_server' has a bad port {text!r}")
    return int(text)


def load_toml(path: Path) -> dict[str, Any]:
    """Read a config file of ``name = value`` lines (top level or under ``[crawl]``)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SettingsError(f"config file {path} is not valid TOML: {e}") from None
    crawl = data.pop("crawl", {})
    if not isinstance(crawl, dict):
        raise SettingsError(f"config file {path}: [crawl] must be a table")
    return {**data, **crawl}


def build(base: Settings | None = None, *layers: Mapping[str, Any]) -> Settings:
    """Apply raw layers (config file, then flags) onto ``base`` with type checks, then validate."""
    values = dataclasses.asdict(base or Settings())
    for layer in layers:
        for name, raw in layer.items():
            values[name] = coerce(name, raw)
    return validate(Settings(**values))


SAVED_FILE = "settings.json"
# Not remembered for a resume: where the state is, what this run was given to crawl, and
# what limits or shows this run only (--max-time counts this run's time, not the crawl's).
_NOT_SAVED = {"state_dir", "seeds", "seeds_file", "progress", "max_time_s"}


def saved_values(s: Settings) -> dict[str, Any]:
    """The settings a resume (or a cluster's fetchers) takes from ``s``, JSON-able: all but
    where the state is, what this run was given to crawl and what limits this run only."""
    return {
        name: (str(v) if isinstance(v, Path) else v)
        for name, v in dataclasses.asdict(s).items()
        if name not in _NOT_SAVED
    }


def save_for_resume(s: Settings) -> None:
    """Remember a crawl's settings in its state dir, so a resume needs only ``--state DIR``."""
    assert s.state_dir is not None
    values = saved_values(s)
    tmp = s.state_dir / (SAVED_FILE + ".tmp")
    # Durable before the first fetch: a crash at any instant leaves a resumable crawl.
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(values, indent=1, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(s.state_dir / SAVED_FILE)
    fd = os.open(s.state_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_saved(state_dir: Path) -> dict[str, Any]:
    """The settings a previous run of this crawl used ({} for a new crawl)."""
    path = state_dir / SAVED_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SettingsError(f"cannot read saved settings {path}: {e}") from None
    # Settings this version no longer has are ignored rather than fatal on resume.
    return {k: v for k, v in data.items() if k in _FIELDS and k not in _NOT_SAVED}
