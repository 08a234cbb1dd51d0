"""``drumbeat bench site``: one documentation site crawled to the end by drumbeat, wget -r
and Scrapy.

Issue 53's benchmark: an operator's first crawl is often one site. The site is the
cppreference HTML tree of Debian's ``cppreference-doc-en-html`` (4,000-odd pages,
installed by ``scripts/install-bench``), served by nginx (``_throughput_web.Nginx``) on
127.0.0.1 from its installed directory. Every crawler starts at its front page, obeys
robots.txt (the site has none: each asks, gets 404 and may fetch everything) and stays on
the site, until nothing is left:

* ``wget -r -l inf`` (one connection), non-HTML files rejected by suffix so that it fetches
  what the others do (``--delete-after``: nothing kept);
* Scrapy with its defaults for one site: 8 requests per domain in flight, no delay
  (``_scrapy_spider``, its ``allowed_domains`` the site);
* drumbeat (``drumbeat crawl --scope host --ip-delay 0``, WARC written): host delay 0 with
  1 and 4 connections (``--host-connections``), and host delay 5 ms with 1.

Figures, from nginx's access log (``$msec``, ``$request_time``; 1 ms resolution):
pages/s (HTML pages answered 200, over the span from the crawler's first request to its
last), coverage (every crawler must fetch the same set of pages: the pages one missed or
added against wget are counted), CPU ms a page (the crawler's processes, ``wait4``), the
most requests in flight at once and, with 1 connection, the smallest gap between one
request's end and the next one's start; drumbeat's dispatch latency and where its CPU
went, µs a page by process and by stage (its ``stages.json``); and each crawler's start,
from its launch to its first request (the span leaves it out; a user timing the crawl
sees it), beside its wall time from launch to exit. ``--quick``: wget and the
two drumbeat runs the targets name (0 s with 4 connections, 5 ms with 1); ``--only
5ms-x1`` (repeatable): only the configurations named (see ``RUNS``). ``--rounds N``: the
configurations run N times, one after the other in turn; each is reported by its median
run, and the ratio to wget is the median of each round's (a crawler's rate can swing
from minute to minute on a shared machine: a ratio of runs made side by side is the
figure that holds). ``--set NAME=VALUE`` (repeatable): a crawl setting for
drumbeat's runs, a line of their config file (``host_pipeline=0`` measures them without
the pipeline). ``--json``: one JSON object. Skips (exit 0, with a message) where the doc
package is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote

from drumbeat.bench._settings import setting_lines
from drumbeat.bench._throughput_proc import Usage, per_page_us, run_measured
from drumbeat.bench._throughput_web import Nginx, nginx_binary, pick_port
from drumbeat.bench.throughput import INSTALL_HINT, processor

DOC_PACKAGE = "cppreference-doc-en-html"
DOC_ROOT = Path("/usr/share/cppreference/doc/html")
FRONT_PAGE = "/en/index.html"
ADDRESS = "127.0.0.1"
LIMIT_S = 600.0  # a crawl stopped past this is reported as such
# Suffixes of the site's non-HTML links: wget would follow them, Scrapy's link extractor
# and drumbeat's (anchors only) mostly do not.
WGET_REJECT = "*.css,*.js,*.png,*.svg,*.gif,*.ico,*.php"
LOG_FORMAT = "$msec $request_time $connection $status $request_uri"
TARGET_RATIO_TO_WGET = 2.0
TARGET_PAGES_PER_S_AT_5MS = 150.0
# The configurations, in the order run: crawler, host delay, connections (--only names one).
RUNS: dict[str, tuple[str, float | None, int]] = {
    "wget": ("wget", None, 1),
    "scrapy": ("scrapy", None, 1),
    "0ms-x1": ("drumbeat", 0.0, 1),
    "0ms-x4": ("drumbeat", 0.0, 4),
    "5ms-x1": ("drumbeat", 0.005, 1),
}


class ServerLog(NamedTuple):
    """What nginx's access log says of one crawl."""

    pages: set[str]  # URIs of HTML pages answered 200, %-decoded
    requests: int
    span_s: float  # the first request's start to the last one's end
    most_at_once: int
    min_gap_s: float | None  # one request's end to the next start
    connections: int  # TCP connections the requests came on
    first_start: float | None  # epoch seconds: when the first request started


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    crawler: str
    host_delay_s: float | None
    connections: int
    usage: Usage
    log: ServerLog  # the crawl's requests as nginx logged them
    server_cpu_s: float | None
    stages: dict[str, Any] | None  # drumbeat's stages.json

    @property
    def pages(self) -> set[str]:
        """The HTML pages answered 200 (the log's, which coverage compares)."""
        return self.log.pages

    @property
    def first_request_s(self) -> float | None:
        """From the crawler's launch to its first request's start at the server: the
        start a user who times the crawl sees, which pages/s (over the span) leaves out."""
        start = self.log.first_start
        return None if start is None else start - self.usage.started_at

    @property
    def latency(self) -> dict[str, Any] | None:
        """drumbeat's dispatch latency."""
        return None if self.stages is None else self.stages.get("dispatch_latency")

    def us_per_page(self, part: str) -> dict[str, float] | None:
        """drumbeat's CPU a page in µs from stages.json's ``part``: "cpu_s" (by process)
        or "seconds" (by stage), over the pages it counted."""
        if self.stages is None or not self.stages.get("pages"):
            return None
        return {k: round(v, 1) for k, v in per_page_us(self.stages, part).items()}

    @property
    def busiest_fetcher_cores(self) -> float | None:
        """The CPU the busiest fetcher process spent crawling (its startup left out),
        over the span: near 1, that process was the limit (a piped host's connection
        runs in one process); above 1, its archive thread ran beside its loop (where
        cores are spare: drumbeat.fetcher, HAND_OFF_TURNS)."""
        procs = None if self.stages is None else self.stages.get("fetcher_processes")
        if not procs or self.log.span_s <= 0:
            return None
        busiest = procs[0]  # stages.json lists them busiest first
        return (busiest["cpu_s"] - busiest["startup_cpu_s"]) / self.log.span_s

    @property
    def pages_per_s(self) -> float:
        return len(self.pages) / self.log.span_s if self.log.span_s > 0 else 0.0

    @property
    def cpu_ms_per_page(self) -> float | None:
        return 1000 * self.usage.cpu_s / len(self.pages) if self.pages else None


def read_log(path: Path) -> ServerLog:
    """The crawl's requests as nginx logged them (LOG_FORMAT)."""
    spans: list[tuple[float, float]] = []
    pages: set[str] = set()
    connections: set[str] = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue
            end, took, conn, status, uri = parts
            connections.add(conn)
            spans.append((float(end) - float(took), float(end)))
            if status == "200" and uri.split("?", 1)[0].endswith(".html"):
                # The file served: crawlers spell some names differently (%3D or =).
                pages.add(unquote(uri))
    if not spans:
        return ServerLog(pages, 0, 0.0, 0, None, 0, None)
    spans.sort()
    # Stamps have 1 ms resolution: a request that starts the millisecond the one before
    # ended did not overlap it (ends sort first), and one of "0.000 s" is in flight for an
    # instant (counted, then gone).
    events = [(e, 0) for s, e in spans if e > s] + [(s, 2) for s, e in spans if e > s]
    events += [(s, 1) for s, e in spans if e <= s]
    most = now = 0
    for _, kind in sorted(events):
        now += kind - 1  # end -1, instant 0, start +1
        most = max(most, now + (kind == 1))
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
    span = max(e for _, e in spans) - spans[0][0]
    gap = min(gaps, default=None)
    return ServerLog(pages, len(spans), span, most, gap, len(connections), spans[0][0])


class SiteBench:
    def __init__(
        self,
        work: Path,
        nginx: str,
        log: bool,
        root: Path = DOC_ROOT,
        settings: Sequence[str] = (),
    ) -> None:
        """``settings``: config file lines (``name = value``) for drumbeat's runs."""
        self.work = work
        self.settings = list(settings)
        self.nginx = nginx
        self.root = root
        self.log = log
        self.port = pick_port(ADDRESS, random.Random())
        self.front = f"http://{ADDRESS}:{self.port}{FRONT_PAGE}"
        self._made = 0  # runs so far: each has a directory of its own

    def say(self, text: str) -> None:
        if self.log:
            print(text, file=sys.stderr, flush=True)

    def run(self, crawler: str, host_delay_s: float | None = None, connections: int = 1) -> Run:
        name = (
            crawler
            if host_delay_s is None
            else f"{crawler} {host_delay_s * 1000:g} ms x{connections}"
        )
        self._made += 1
        tag = f"{name.replace(' ', '-')}-{self._made}"
        server = Nginx(
            self.nginx, self.work / f"nginx-{tag}", self.root, [ADDRESS], self.port, 1, LOG_FORMAT
        )
        self.say(f"{name}: crawling ...")
        server.start()
        try:
            stages = None
            if crawler == "wget":
                usage = self._wget(tag)
            elif crawler == "scrapy":
                usage = self._scrapy(tag)
            else:
                usage, stages = self._drumbeat(tag, host_delay_s or 0.0, connections)
        finally:
            server_cpu = server.stop()
        log = read_log(server.access_log)
        run = Run(name, crawler, host_delay_s, connections, usage, log, server_cpu, stages)
        self.say(f"{name}: {len(log.pages):,} pages, {run.pages_per_s:,.0f} pages/s")
        return run

    def _wget(self, tag: str) -> Usage:
        cmd = [
            "wget",
            "-r",
            "-l",
            "inf",
            "-nv",
            "-e",
            "robots=on",
            "--delete-after",
            "-R",
            WGET_REJECT,
            "-P",
            str(self.work / tag),
            self.front,
        ]
        return run_measured(cmd, log_path=self.work / f"{tag}.out", limit_s=LIMIT_S)

    def _scrapy(self, tag: str) -> Usage:
        config = self.work / f"{tag}-config.json"
        table = self.work / "dns-table.json"
        table.write_text(json.dumps({ADDRESS: ADDRESS}), encoding="utf-8")
        config.write_text(
            json.dumps(
                {
                    "seeds": [self.front],
                    "allowed_domains": [ADDRESS],
                    "dns_table": str(table),
                    "delay_s": 0.0,
                    "per_host": 8,  # Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN default
                    "concurrency": 16,  # and its CONCURRENT_REQUESTS default
                    "seconds": LIMIT_S,
                    "out": str(self.work / f"{tag}.json"),
                }
            ),
            encoding="utf-8",
        )
        cmd = [sys.executable, "-m", "drumbeat.bench._scrapy_spider", str(config)]
        return run_measured(cmd, log_path=self.work / f"{tag}.out", limit_s=LIMIT_S + 30)

    def _drumbeat(
        self, tag: str, host_delay_s: float, connections: int
    ) -> tuple[Usage, dict[str, Any] | None]:
        state = self.work / tag
        config = self.work / f"{tag}.toml"
        # Budget scaling may not shorten the delay: the floor is the delay itself.
        lines = [f"host_delay_min_s = {host_delay_s}", "ip_delay_min_s = 0", *self.settings]
        config.write_text("".join(f"{line}\n" for line in lines))
        cmd = [
            sys.executable,
            "-m",
            "drumbeat",
            "crawl",
            self.front,
            "--state",
            str(state),
            "--allow-loopback",
            "--scope",
            "host",
            "--host-delay",
            str(host_delay_s),
            "--ip-delay",
            "0",
            "--host-connections",
            str(connections),
            "--max-time",
            str(LIMIT_S),
            "--no-progress",
            "--config",
            str(config),
        ]
        usage = run_measured(cmd, log_path=self.work / f"{tag}.out", limit_s=LIMIT_S + 30)
        stages_path = state / "stages.json"
        stages = None
        if stages_path.exists():
            stages = json.loads(stages_path.read_text(encoding="utf-8"))
        return usage, stages


def report(runs: list[Run], elapsed_s: float, root: Path = DOC_ROOT) -> dict[str, Any]:
    """The report of ``runs``: one entry a configuration, its median run (by pages/s)
    where it ran more than once (``--rounds``), with the pages/s of every round."""
    by_name: dict[str, list[Run]] = {}
    for r in runs:
        by_name.setdefault(r.name, []).append(r)
    wgets = [r for r in runs if r.crawler == "wget"]
    base = wgets[0] if wgets else None
    out: dict[str, Any] = {
        "site": {"package": DOC_PACKAGE, "root": str(root), "front": FRONT_PAGE},
        "cpu_model": processor(),
        "rounds": max((len(rs) for rs in by_name.values()), default=0),
        "runs": {},
        "elapsed_s": round(elapsed_s, 1),
    }
    for name, made in by_name.items():
        r = _median_run(made)
        busiest = r.busiest_fetcher_cores
        out["runs"][name] = {
            "crawler": r.crawler,
            "host_delay_s": r.host_delay_s,
            "connections": r.connections,
            "pages": len(r.pages),
            "missing_vs_wget": len(base.pages - r.pages) if base else None,
            "extra_vs_wget": len(r.pages - base.pages) if base else None,
            "requests": r.log.requests,
            "span_s": round(r.log.span_s, 3),
            "pages_per_s": round(r.pages_per_s, 1),
            "wall_s": round(r.usage.wall_s, 2),
            "first_request_s": None if r.first_request_s is None else round(r.first_request_s, 2),
            "cpu_s": round(r.usage.cpu_s, 2),
            "cpu_ms_per_page": None if r.cpu_ms_per_page is None else round(r.cpu_ms_per_page, 3),
            "most_at_once": r.log.most_at_once,
            "min_gap_s": r.log.min_gap_s,
            "tcp_connections": r.log.connections,
            "server_cpu_s": r.server_cpu_s,
            "exit_code": r.usage.exit_code,
            "timed_out": r.usage.timed_out,
            "dispatch_latency": r.latency,
            "busiest_fetcher_cores": None if busiest is None else round(busiest, 2),
            "cpu_us_per_page": r.us_per_page("cpu_s"),
            "stage_us_per_page": r.us_per_page("seconds"),
            "missing_examples": sorted(base.pages - r.pages)[:3] if base else [],
            "extra_examples": sorted(r.pages - base.pages)[:3] if base else [],
            "pages_per_s_by_round": [round(m.pages_per_s, 1) for m in made],
        }
    fours = [r for r in runs if r.crawler == "drumbeat" and r.connections == 4]
    slows = [r for r in runs if r.crawler == "drumbeat" and (r.host_delay_s or 0) > 0]
    # Each round's ratio: its four-connection run against its own wget run.
    ratios = [
        round(four.pages_per_s / wget.pages_per_s, 2)
        for four, wget in zip(fours, wgets)
        if wget.pages_per_s
    ]
    out["targets"] = {
        "ratio_4_connections_to_wget": round(statistics.median(ratios), 2) if ratios else None,
        "ratio_by_round": ratios,
        "same_coverage": bool(base and fours and all(f.pages == base.pages for f in fours)),
        "pages_per_s_at_5ms": round(_median_run(slows).pages_per_s, 1) if slows else None,
    }
    return out


def _median_run(runs: list[Run]) -> Run:
    """The run of median pages/s (of an even number, the slower of the middle two)."""
    ranked = sorted(runs, key=lambda r: r.pages_per_s)
    return ranked[(len(ranked) - 1) // 2]


def print_report(rep: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table(
        title=f"One site to completion: {rep['site']['package']} on nginx, 127.0.0.1 "
        f"({rep['cpu_model']})"
    )
    cols = ("run", "pages", "missing", "extra", "pages/s", "CPU ms/page", "start s", "wall s")
    for col in (*cols, "conns", "at once", "min gap", "dispatch latency p50/p90 ms", "exit"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, r in rep["runs"].items():
        lat = r["dispatch_latency"]
        gap = r["min_gap_s"]
        table.add_row(
            name,
            f"{r['pages']:,}",
            str(r["missing_vs_wget"]),
            str(r["extra_vs_wget"]),
            f"{r['pages_per_s']:,.0f}",
            "n/a" if r["cpu_ms_per_page"] is None else f"{r['cpu_ms_per_page']:.2f}",
            "n/a" if r["first_request_s"] is None else f"{r['first_request_s']:.2f}",
            f"{r['wall_s']:.1f}",
            str(r["tcp_connections"]),
            str(r["most_at_once"]),
            "n/a" if gap is None else f"{gap * 1000:.0f} ms",
            f"{lat['p50_ms']:.1f} / {lat['p90_ms']:.1f}" if lat else "-",
            str(r["exit_code"]),
        )
    console.print(table)
    for name, r in rep["runs"].items():
        by_process, by_stage = r.get("cpu_us_per_page"), r.get("stage_us_per_page")
        if by_process and by_stage:
            stages = sorted(by_stage.items(), key=lambda kv: -kv[1])
            busiest = r.get("busiest_fetcher_cores")
            console.print(
                f"{name}, CPU µs a page: "
                + ", ".join(f"{k} {v:,.0f}" for k, v in by_process.items())
                + "; by stage: "
                + ", ".join(f"{k} {v:,.0f}" for k, v in stages if v >= 1)
                + ("" if busiest is None else f"; busiest fetcher process {busiest:.2f} cores")
            )
    if rep.get("rounds", 1) > 1:
        console.print(
            f"{rep['rounds']} rounds, each configuration by its median run; pages/s by round: "
            + "; ".join(
                f"{name} " + " / ".join(f"{v:,.0f}" for v in r["pages_per_s_by_round"])
                for name, r in rep["runs"].items()
            )
        )
    t = rep["targets"]
    by_round = t.get("ratio_by_round") or []
    console.print(
        f"Targets: host delay 0 with 4 connections >= {TARGET_RATIO_TO_WGET:g}x wget: "
        f"{_or_na(t['ratio_4_connections_to_wget'], 'x')}"
        + (f" (median of {' / '.join(f'{x}x' for x in by_round)})" if len(by_round) > 1 else "")
        + f", same pages: {t['same_coverage']}; "
        f"host delay 5 ms with 1 connection >= {TARGET_PAGES_PER_S_AT_5MS:g} pages/s: "
        f"{_or_na(t['pages_per_s_at_5ms'])}."
    )
    console.print(
        "Notes: pages = HTML pages answered 200 (nginx's log); pages/s over the first "
        "request's start to the last one's end; missing/extra against wget's set; CPU of "
        "the crawler's processes (not nginx's); start = launch to the first request; wall = "
        "launch to exit; at once = most requests in flight (1 ms "
        "stamps: a fast answer's overlap is not seen); min gap = one request's end to the "
        "next start; conns = TCP connections; pages are compared %-decoded (drumbeat spells "
        "%3D as =)."
    )


def _or_na(value: float | None, unit: str = "") -> str:
    """A target's figure, or "n/a" where the runs it needs were not made (--only)."""
    return "n/a" if value is None else f"{value}{unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="drumbeat bench site", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="wget and the two drumbeat runs the targets name"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--only",
        action="append",
        choices=RUNS,
        help="run only this configuration (repeatable; wget's coverage is then not compared)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="run the configurations N times, in turn (default 1): each is reported by its "
        "median run and the ratio to wget by the median of the rounds' ratios",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a crawl setting for drumbeat's runs, as in a config file (repeatable; "
        "host_pipeline=0 measures them without the pipeline)",
    )
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument(
        "--root",
        type=Path,
        default=None,
        help=f"the site's tree, served from its top (default {DOC_ROOT}, where "
        f"{DOC_PACKAGE} installs it; the crawls start at {FRONT_PAGE})",
    )
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if not 1 <= args.rounds <= 100:
        ap.error("--rounds must be 1..100")
    settings = setting_lines(ap, args.set)
    root = DOC_ROOT if args.root is None else args.root.resolve()
    if not (root / FRONT_PAGE.lstrip("/")).exists():
        if args.root is not None:
            print(
                f"drumbeat bench site: --root {args.root}: no {FRONT_PAGE} there", file=sys.stderr
            )
            return 2
        print(
            f"drumbeat bench site: skipped: the site ({DOC_PACKAGE}) is not installed: "
            f"{INSTALL_HINT}",
            file=sys.stderr,
        )
        return 0
    nginx = nginx_binary()
    chosen = args.only or [r for r in RUNS if not args.quick or r not in ("scrapy", "0ms-x1")]
    needs = (("nginx", nginx), ("wget", shutil.which("wget") or "wget" not in chosen))
    missing = [n for n, ok in needs if not ok]
    if "scrapy" in chosen and importlib.util.find_spec("scrapy") is None:
        missing.append("scrapy")
    if missing or nginx is None:
        print(f"drumbeat bench site needs {' and '.join(missing)}: {INSTALL_HINT}", file=sys.stderr)
        return 2
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sitebench-", dir=args.dir))
    work.chmod(0o755)
    started = time.perf_counter()
    try:
        bench = SiteBench(work, nginx, log=not args.json, root=root, settings=settings)
        runs = [
            bench.run(*RUNS[name]) for _ in range(args.rounds) for name in RUNS if name in chosen
        ]
        rep = report(runs, time.perf_counter() - started, root)
        rep["settings"] = settings
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(rep))
    else:
        print_report(rep)
    # wget exits 8 when the server answered an error (the site's robots.txt is a 404).
    return (
        0
        if all(r.usage.exit_code in (0, 8 if r.crawler == "wget" else 0) and r.pages for r in runs)
        else 1
    )
