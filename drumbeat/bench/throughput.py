"""``drumbeat bench throughput``: pages/s of drumbeat and Scrapy on one nginx-served web.

Issue 5's benchmark. One run:

1. **The web.** A static tree (``_throughput_web``): ``--hosts`` host names (default
   5,000, each its own pay-level domain), every one serving the same ~20 KB pages with
   ~60 links (40 same-host relative, 20 to other hosts, one into a robots-disallowed
   path), robots.txt per host. nginx, started here with its own config, listens only on
   ``IPS`` addresses 127.77.x.y on one port; a ``SimDNS`` thread maps each name to one of
   them (about ``hosts / IPS`` names per address). A fresh nginx (and access log) per crawl.
2. **The crawls,** each for warm-up + ``--seconds`` from the same few hundred front pages,
   one after another: drumbeat (``drumbeat crawl``, WARC on, its defaults otherwise) and
   Scrapy (``_scrapy_spider``), each polite (1 s per host; drumbeat's per-IP delay sized so
   an address allows twice the rate its hosts do; robots obeyed) and with politeness off
   (no delays, for the ceiling; robots still obeyed).
   drumbeat's IRLbot budget scaling would shorten the delays of well-linked sites, so its
   floors are set to the delays: both crawlers keep exactly 1 s per host.
3. **The figures.** Pages/s over the steady part: the first ``warmup`` seconds after the
   crawler's first page (start-up, robots.txt of the seed hosts, fan-out to all hosts)
   are left out, then pages (HTTP responses to page requests: drumbeat's crawl.log,
   Scrapy's parsed responses) are counted for ``--seconds``; the slowest 5 s window of
   that part is shown too. CPU seconds per page (user + system of the crawler and every
   process it waited for, over the whole run), peak RSS (summed over the crawler's
   process tree, sampled every 0.5 s), drumbeat's time per page by stage (its
   ``stages.json``, "n/a" if absent), and politeness from nginx's access log (``$msec``
   per request): the smallest gap between two requests to one host, the hosts hit closer
   than the host delay, and requests robots.txt disallowed; and, from its
   ``$connection_requests``, requests per TCP connection (keep-alive reuse).

``--web one-pld`` (issue 46): the same tree, but every host a subdomain of one pay-level
domain (``h00042.campus.test``), so no link reaches that PLD from another one, and every
host a seed (``--seeds`` overrides): an organisation's sites given as the seed list. Its
pages/s are compared with the default web's from as many seeds (``--seeds 5000``), run
back to back on one machine.

``--quick``: 25 s measured per crawl (30 s with warm-up). ``--tiny`` (tests): 50 hosts,
3 s. ``--json`` prints the same figures as one JSON object. ``--profile`` samples each
process of each drumbeat crawl with py-spy for a while in its steady part and prints
where its CPU goes.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drumbeat.bench._settings import setting_lines
from drumbeat.bench._throughput_dns import DnsThread
from drumbeat.bench._throughput_proc import (
    ApiPoller,
    TreeSampler,
    Usage,
    per_page_us,
    run_measured,
)
from drumbeat.bench._throughput_web import (
    ONE_PLD,
    Nginx,
    ServerLog,
    WebShape,
    build_tree,
    nginx_binary,
    pick_port,
    read_access_log,
)

INSTALL_HINT = "run scripts/install-bench (installs nginx and the bench extras, Scrapy among them)"
HOST_DELAY_S = 1.0
IPS = 500
PAGES_PER_HOST = 500  # > 70 s x 1 page/s: no host runs dry
SEEDS = 300
WINDOW_S = 5.0  # the slowest window of this length in the steady part is reported too
START_SLACK_S = 5.0  # crawl time limit beyond warm-up + measured seconds (start-up)
LIMIT_SLACK_S = 30.0  # then the benchmark stops the crawler itself
TARGET_PAGES_PER_S = 3000.0
TARGET_RATIO = 40.0
CRAWLERS = ("drumbeat", "scrapy")
# distinct: each host its own PLD; one-pld: every host a subdomain of ONE_PLD.
WEBS = ("distinct", "one-pld")


@dataclass(frozen=True, slots=True)
class Plan:
    mode: str
    seconds: float  # measured (steady) seconds per crawl
    warmup_s: float
    hosts: int
    seeds: int
    ips: int
    crawlers: tuple[str, ...]
    politeness: tuple[bool, ...]  # True: polite run, False: no delays
    concurrency: int  # drumbeat --concurrency
    fetchers: int | None  # drumbeat --fetchers (None: its default)
    scrapy_concurrency: int
    nginx_workers: int
    profile: bool
    http_client: str = "curl"  # drumbeat's http_client setting
    poll_api: bool = False  # a client reads drumbeat's API and /metrics every second
    web: str = "distinct"  # one of WEBS
    settings: tuple[str, ...] = ()  # extra config-file lines for drumbeat (--set)


@dataclass(frozen=True, slots=True)
class Rate:
    """Pages in a crawl, and the rate over its steady part (see the module docstring)."""

    pages: int
    steady_pages: int
    pages_per_s: float
    slowest_window_pages_per_s: float
    window_pages: tuple[int, ...]  # pages in each window of the steady part
    first_page_s: float | None  # after the crawler started


@dataclass(frozen=True, slots=True)
class CrawlRun:
    crawler: str
    polite: bool
    host_delay_s: float
    ip_delay_s: float
    rate: Rate
    usage: Usage
    server: ServerLog
    server_cpu_s: float | None
    stages: dict[str, Any] | None  # drumbeat's stages.json
    extra: dict[str, Any]  # crawler-specific facts (Scrapy's stats, drumbeat's flags)
    log_tail: str  # the crawler's last output lines when it failed

    @property
    def cpu_ms_per_page(self) -> float | None:
        return 1000 * self.usage.cpu_s / self.rate.pages if self.rate.pages else None


def steady_rate(times: list[float], started: float, warmup_s: float, seconds: float) -> Rate:
    """Rate of ``times`` (epoch seconds) from ``warmup_s`` after the first to ``seconds`` later.

    A crawl that stops early counts as zero pages for the rest of the window."""
    if not times:
        return Rate(0, 0, 0.0, 0.0, (), None)
    times = sorted(times)
    start = times[0] + warmup_s
    window = min(WINDOW_S, seconds)
    counts = Counter(int((t - start) // window) for t in times if start <= t < start + seconds)
    windows = tuple(counts.get(k, 0) for k in range(max(1, int(seconds // window))))
    steady = sum(counts.values())
    return Rate(
        pages=len(times),
        steady_pages=steady,
        pages_per_s=steady / seconds,
        slowest_window_pages_per_s=min(windows) / window,
        window_pages=windows,
        first_page_s=times[0] - started,
    )


def ip_delay_for(shape: WebShape, host_delay_s: float) -> float:
    """τs such that one address allows twice the rate its hosts' delays allow together."""
    return round(host_delay_s / (2 * shape.hosts_per_ip()), 3)


def crawl_has_flag(flag: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "drumbeat", "crawl", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return flag in done.stdout


class Bench:
    """One benchmark run: the web, its DNS and the crawls, in ``work``."""

    def __init__(self, plan: Plan, work: Path, nginx: str, log: bool) -> None:
        self.plan = plan
        self.work = work
        self.nginx = nginx
        self.log = log
        self.shape = WebShape.make(
            plan.hosts,
            PAGES_PER_HOST,
            plan.ips,
            plan.seeds,
            pld=ONE_PLD if plan.web == "one-pld" else None,
        )
        self.docroot = work / "web"
        self.port = 0
        self.dns: DnsThread | None = None
        self.table_file = work / "dns-table.json"
        self.seeds_file = work / "seeds.txt"
        self.fetchers_flag = crawl_has_flag("--fetchers") if "drumbeat" in plan.crawlers else False

    def say(self, text: str) -> None:
        if self.log:
            print(text, file=sys.stderr, flush=True)

    def crawl_seconds(self) -> float:
        return self.plan.warmup_s + self.plan.seconds + START_SLACK_S

    def prepare(self, dns: DnsThread) -> None:
        """Pick the port, write the tree (its absolute links carry the port), the seeds and
        the DNS table for Scrapy."""
        self.dns = dns
        self.port = pick_port(self.shape.ip(0), random.Random())
        build_tree(self.docroot, self.shape, self.port)
        self.seeds_file.write_text(
            "\n".join(self.shape.seed_urls(self.port)) + "\n", encoding="utf-8"
        )
        self.table_file.write_text(json.dumps(self.shape.dns_table()), encoding="utf-8")

    def run(self, crawler: str, polite: bool) -> CrawlRun:
        tag = f"{crawler}-{'polite' if polite else 'off'}"
        server = Nginx(
            self.nginx,
            self.work / f"nginx-{tag}",
            self.docroot,
            self.shape.addresses(),
            self.port,
            self.plan.nginx_workers,
        )
        host_delay = HOST_DELAY_S if polite else 0.0
        ip_delay = ip_delay_for(self.shape, host_delay) if polite else 0.0
        self.say(f"{tag}: crawling for {self.crawl_seconds():.0f} s ...")
        server.start()
        try:
            if crawler == "drumbeat":
                result = self._drumbeat(tag, polite, host_delay, ip_delay)
            else:
                result = self._scrapy(tag, polite, host_delay)
        finally:
            server_cpu = server.stop()
        times, usage, stages, extra, log_path = result
        rate = steady_rate(times, usage.started_at, self.plan.warmup_s, self.plan.seconds)
        failed = usage.exit_code != 0 or not times
        tail = _tail(log_path) if failed else ""
        run = CrawlRun(
            crawler=crawler,
            polite=polite,
            host_delay_s=host_delay,
            ip_delay_s=ip_delay,
            rate=rate,
            usage=usage,
            server=read_access_log(server.access_log, host_delay),
            server_cpu_s=server_cpu,
            stages=stages,
            extra=extra,
            log_tail=tail,
        )
        self.say(
            f"{tag}: {rate.pages_per_s:,.0f} pages/s steady, {rate.pages:,} pages"
            + (f" (exit {usage.exit_code})" if usage.exit_code else "")
        )
        return run

    def _drumbeat(
        self, tag: str, polite: bool, host_delay: float, ip_delay: float
    ) -> tuple[list[float], Usage, dict | None, dict, Path]:
        state = self.work / tag
        config = self.work / f"{tag}.toml"
        # Budget scaling may not shorten the delays: the floors are the delays themselves.
        config.write_text(
            f"host_delay_min_s = {host_delay}\nip_delay_min_s = {ip_delay}\n"
            f'http_client = "{self.plan.http_client}"\n'
            + "".join(f"{line}\n" for line in self.plan.settings),
            encoding="utf-8",
        )
        assert self.dns is not None
        cmd = [
            sys.executable,
            "-m",
            "drumbeat",
            "crawl",
            "--seeds",
            str(self.seeds_file),
            "--state",
            str(state),
            "--dns-server",
            self.dns.address,
            "--allow-loopback",
            "--max-time",
            str(self.crawl_seconds()),
            "--no-progress",
            "--host-delay",
            str(host_delay),
            "--ip-delay",
            str(ip_delay),
            "--concurrency",
            str(self.plan.concurrency),
            "--config",
            str(config),
        ]
        if self.fetchers_flag and self.plan.fetchers is not None:
            cmd += ["--fetchers", str(self.plan.fetchers)]
        log_path = self.work / f"{tag}.out"
        profile: dict[str, Any] = {}
        during = (lambda sampler: self._profile(sampler, profile)) if self.plan.profile else None
        poller = ApiPoller(state) if self.plan.poll_api else None
        if poller is not None:
            poller.start()
        try:
            usage = run_measured(
                cmd, log_path=log_path, limit_s=self.crawl_seconds() + LIMIT_SLACK_S, during=during
            )
        finally:
            if poller is not None:
                poller.stop()
        times = crawl_log_page_times(state / "crawl.log")
        stages_path = state / "stages.json"
        stages = (
            json.loads(stages_path.read_text(encoding="utf-8")) if stages_path.exists() else None
        )
        extra: dict[str, Any] = {
            "concurrency": self.plan.concurrency,
            "fetchers": self.plan.fetchers if self.fetchers_flag else None,
            "fetchers_flag": self.fetchers_flag,
            "http_client": self.plan.http_client,
            "warc_bytes": _tree_bytes(state / "warc"),
        }
        if profile:
            extra["profile"] = profile
        if poller is not None:
            extra["api_polls"] = {"rounds": poller.rounds, "failed": poller.failed}
        return times, usage, stages, extra, log_path

    def _scrapy(
        self, tag: str, polite: bool, host_delay: float
    ) -> tuple[list[float], Usage, dict | None, dict, Path]:
        out = self.work / f"{tag}.json"
        config = self.work / f"{tag}-config.json"
        concurrency = self.plan.scrapy_concurrency
        config.write_text(
            json.dumps(
                {
                    "seeds": self.shape.seed_urls(self.port),
                    "dns_table": str(self.table_file),
                    "delay_s": host_delay,
                    "per_host": 1 if polite else concurrency,
                    "concurrency": concurrency,
                    "seconds": self.crawl_seconds(),
                    "out": str(out),
                }
            ),
            encoding="utf-8",
        )
        cmd = [sys.executable, "-m", "drumbeat.bench._scrapy_spider", str(config)]
        log_path = self.work / f"{tag}.out"
        usage = run_measured(cmd, log_path=log_path, limit_s=self.crawl_seconds() + LIMIT_SLACK_S)
        result = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        stats = result.get("stats", {})
        keep = (
            "response_received_count",
            "downloader/request_count",
            "robotstxt/request_count",
            "dupefilter/filtered",
            "scheduler/enqueued",
            "finish_reason",
        )
        extra = {
            "concurrency": concurrency,
            "per_host": 1 if polite else concurrency,
            "stats": {k: stats[k] for k in keep if k in stats},
        }
        return result.get("page_times", []), usage, None, extra, log_path

    def _profile(self, sampler: TreeSampler, into: dict[str, Any]) -> None:
        """py-spy each process of the crawl for a third of the measured part (10 s at most);
        ``into`` gets each process's top functions by role."""
        py_spy = shutil.which("py-spy")
        if py_spy is None:
            into["error"] = "py-spy is not installed"
            return
        time.sleep(self.plan.warmup_s + self.plan.seconds / 3)
        duration = max(1, int(min(10.0, self.plan.seconds / 3)))
        procs = {}
        for pid in sampler.pids:
            out = self.work / f"profile-{pid}.txt"
            procs[pid] = (
                out,
                subprocess.Popen(
                    [
                        py_spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--duration",
                        str(duration),
                        "--format",
                        "raw",
                        "--output",
                        str(out),
                        "--rate",
                        "100",
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        for pid, (out, proc) in procs.items():
            proc.wait()
            role = "manager" if pid == sampler.root else f"child {pid}"
            into[role] = _top_frames(out) if out.exists() else {"error": "no samples"}


def crawl_log_page_times(path: Path) -> list[float]:
    """When each 2xx page of the ``crawl.log`` at ``path`` was fetched (none if there is
    no file). Part lines (one read while the crawl writes it, or cut by a kill) are
    skipped, even one that is valid JSON."""
    times: list[float] = []
    if not path.exists():
        return times
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed crawl
            if not isinstance(entry, dict):
                continue  # part of a line that is valid JSON all the same (a number)
            # Successful responses only, as Scrapy's spider sees them.
            if entry.get("kind") == "page" and 200 <= (entry.get("status") or 0) < 300:
                times.append(entry["time"])
    return times


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _top_frames(path: Path, top: int = 15) -> dict[str, Any]:
    """Shares of samples by function from py-spy's raw (collapsed) stacks, one
    ``frame;...;frame COUNT`` per line, frames ``function (file:line)``: ``self`` counts
    the innermost frame, ``inclusive`` every function on the stack once, leaving out the
    entry chain (functions on nearly every stack: ``main``, ``asyncio.run`` ...)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        # The same function at other lines is one function.
        frames = [f.rsplit(":", 1)[0] + ")" if f.endswith(")") else f for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return {"samples": 0, "self": [], "inclusive": []}
    entry = 0.95 * max(inclusive.values())
    below = [(f, n) for f, n in inclusive.most_common() if n < entry][:top]
    return {
        "samples": total,
        "self": [(f, n / total) for f, n in own.most_common(top)],
        "inclusive": [(f, n / total) for f, n in below],
    }


# ------------------------------------------------------------------ report


def interpreter() -> dict[str, Any]:
    """The Python that ran both crawlers (``sys.executable``): its version, path, and
    where its libpython comes from: ``"static"`` when no libpython shared library is
    mapped into this process (it is linked into the executable), else that library.

    Both crawlers are CPU-bound Python, so the build matters. On this project's
    machines a default pyenv build (libpython shared, no ``--enable-optimizations``)
    took 1.3-1.7 times as long over pure-Python loops as Debian's ``/usr/bin/python3.11``
    (built with PGO and LTO, libpython static), the same minor version.
    """
    libpython = "static"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = "/" + line.partition("/")[2].rstrip("\n")  # a mapped file's path
                if "/libpython" in path:
                    libpython = path
                    break
    except OSError:
        libpython = "unknown"
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "libpython": libpython,
    }


def processor() -> str:
    """The CPU that ran the benchmark, from the first processor in ``/proc/cpuinfo``: its
    model name, family and model numbers and clock ("unknown" where there is no such file).

    Figures are comparable only on one CPU. A virtual machine's model name can be as bare
    as "AMD EPYC", so the family and model numbers are given too (they tell the
    generation): the fetchers used 303-362 µs a page on an AMD EPYC of family 26, against
    473-599 on the machine of an earlier session, for the same code.
    """
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the end of the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return "unknown"
    name = fields.get("model name") or fields.get("vendor_id") or platform.machine() or "unknown"
    numbers = [f"{k} {fields[k]}" for k in ("cpu family", "model") if k in fields]
    if "cpu MHz" in fields:  # whole MHz as the kernel wrote them: no parse to fail
        numbers.append(f"{fields['cpu MHz'].partition('.')[0]} MHz")
    return f"{name} ({', '.join(numbers)})" if numbers else name


def report(plan: Plan, bench: Bench, runs: list[CrawlRun], elapsed_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {
        "mode": plan.mode,
        "seconds": plan.seconds,
        "warmup_s": plan.warmup_s,
        "web": {
            "kind": plan.web,
            "pld": bench.shape.pld,
            "hosts": bench.shape.hosts,
            "pages_per_host": bench.shape.pages + 1,
            "ips": bench.shape.ips,
            "hosts_per_ip": bench.shape.hosts_per_ip(),
            "seeds": bench.shape.seeds,
            "port": bench.port,
            "nginx_workers": plan.nginx_workers,
        },
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": processor(),
        "python": interpreter(),
        "runs": {f"{r.crawler}-{'polite' if r.polite else 'off'}": _run_dict(r) for r in runs},
        "elapsed_s": elapsed_s,
    }
    ratios = {}
    for polite in plan.politeness:
        ours = _find(runs, "drumbeat", polite)
        peer = _find(runs, "scrapy", polite)
        if ours and peer and peer.rate.pages_per_s > 0:
            ratios["polite" if polite else "off"] = ours.rate.pages_per_s / peer.rate.pages_per_s
    out["ratio_drumbeat_to_scrapy"] = ratios
    polite_run = _find(runs, "drumbeat", True)
    out["targets"] = {
        "pages_per_s": TARGET_PAGES_PER_S,
        "ratio": TARGET_RATIO,
        "pages_per_s_reached": bool(
            polite_run
            and polite_run.rate.slowest_window_pages_per_s >= TARGET_PAGES_PER_S
            and plan.seconds >= 60
        ),
        "ratio_reached": bool(ratios.get("polite", 0) >= TARGET_RATIO),
    }
    return out


def _find(runs: list[CrawlRun], crawler: str, polite: bool) -> CrawlRun | None:
    return next((r for r in runs if r.crawler == crawler and r.polite == polite), None)


def _run_dict(r: CrawlRun) -> dict[str, Any]:
    stages = None
    if r.stages is not None:
        pages = r.stages.get("pages") or 0
        seconds = r.stages.get("seconds", {})
        stages = {
            **r.stages,
            "pages": pages,
            "seconds": seconds,
            "us_per_page": per_page_us(r.stages),
        }
    return {
        "crawler": r.crawler,
        "polite": r.polite,
        "host_delay_s": r.host_delay_s,
        "ip_delay_s": r.ip_delay_s,
        **dataclasses.asdict(r.rate),
        "cpu_s": r.usage.cpu_s,
        "cpu_ms_per_page": r.cpu_ms_per_page,
        "peak_rss_bytes": r.usage.peak_rss_bytes,
        "processes": r.usage.max_processes,
        "wall_s": r.usage.wall_s,
        "exit_code": r.usage.exit_code,
        "timed_out": r.usage.timed_out,
        "server": dataclasses.asdict(r.server),
        "server_cpu_s": r.server_cpu_s,
        "stages": stages,
        **r.extra,
        **({"log_tail": r.log_tail} if r.log_tail else {}),
    }


def print_report(rep: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console(width=160)
    console.print(_runs_table(rep))
    python = rep["python"]
    console.print(
        f"Both crawlers ran on {python['implementation']} {python['version']} "
        f"({python['executable']}; libpython {python['libpython']})"
    )
    for mode, ratio in rep["ratio_drumbeat_to_scrapy"].items():
        console.print(
            f"drumbeat / Scrapy, politeness {'on' if mode == 'polite' else 'off'}: {ratio:.1f}x"
        )
    for name, r in rep["runs"].items():
        if r["crawler"] == "drumbeat":
            _print_stages(console, name, r["stages"])
    for name, r in rep["runs"].items():
        if r.get("log_tail"):
            console.print(f"[bold]{name} failed[/bold]; last output:\n{r['log_tail']}")
    for name, r in rep["runs"].items():
        if "profile" in r:
            _print_profile(console, name, r["profile"])
    targets = rep["targets"]
    console.print(
        f"Targets: >= {targets['pages_per_s']:,.0f} pages/s sustained for 60 s with politeness "
        f"on: {'reached' if targets['pages_per_s_reached'] else 'not reached'}; >= "
        f"{targets['ratio']:.0f}x Scrapy: "
        f"{'reached' if targets['ratio_reached'] else 'not reached'}."
    )
    console.print(
        "Notes: polite = 1 s per host (both crawlers; drumbeat's budget scaling floored at the "
        "delay), drumbeat's IP delay = host delay / (2 x hosts per IP); off = no delays. "
        "Pages/s counts page responses (not robots.txt) from the crawler's own records over "
        "the measured part; warm-up starts at the crawler's first page. CPU and peak RSS "
        "include every process of the crawler. Gaps are from nginx's $msec log (1 ms "
        "resolution), robots.txt requests included. drumbeat resolves names through the "
        "benchmark's DNS responder; Scrapy through a resolver class that maps names from the "
        "same table (it cannot be pointed at a DNS server) and fails any other name. Scrapy "
        "runs its default scheduler without cookies or retries, one request per host in "
        "flight when polite; its delay runs from one request's dispatch to the next, so a "
        "busy Scrapy can send two requests closer than the delay."
    )
    console.print(f"{rep['mode']} run, {rep['elapsed_s']:.0f} s")


def _runs_table(rep: dict[str, Any]) -> Any:
    """The table of runs: rate, CPU, memory and what the server saw."""
    from rich.table import Table

    web = rep["web"]
    one_pld = f" of one PLD ({web['pld']})" if web.get("pld") else ""
    table = Table(
        title=f"Throughput on {web['hosts']:,} hosts{one_pld} x "
        f"{web['pages_per_host']} pages, {web['seeds']:,} seeds "
        f"(nginx, {web['ips']} loopback IPs), {rep['seconds']:.0f} s measured "
        f"after {rep['warmup_s']:.0f} s warm-up, {rep['cpus']} CPUs "
        f"({rep['cpu_model']})"
    )
    for col in (
        "run",
        "pages/s",
        "slowest 5 s",
        "pages",
        "CPU ms/page",
        "peak RSS MB",
        "procs",
        "req/conn",
        "min gap/host",
        "hosts < delay",
        "robots viol.",
        "HTTP errors",
        "exit",
    ):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, r in rep["runs"].items():
        gap = r["server"]["min_gap_s"]
        polite = r["polite"]
        table.add_row(
            name,
            f"{r['pages_per_s']:,.0f}",
            f"{r['slowest_window_pages_per_s']:,.0f}",
            f"{r['pages']:,}",
            "n/a" if r["cpu_ms_per_page"] is None else f"{r['cpu_ms_per_page']:.2f}",
            f"{r['peak_rss_bytes'] / 2**20:,.0f}",
            str(r["processes"]),
            f"{r['server']['requests'] / max(1, r['server']['connections']):.1f}",
            "n/a" if gap is None else f"{gap:.3f} s",
            str(r["server"]["hosts_under_delay"]) if polite else "-",
            str(r["server"]["disallowed"]),
            str(r["server"]["errors"]),
            str(r["exit_code"]),
        )
    return table


def _print_stages(console: Any, name: str, stages: dict[str, Any] | None) -> None:
    """A drumbeat run's time per page by stage, and what else its stages.json says."""
    from rich.table import Table

    if stages is None:
        console.print(f"{name}: stage breakdown n/a (no stages.json)")
        return
    malloc = stages.get("allocator") or {}
    compiled = ", ".join((stages.get("compiled") or {}).get("fetchers", []))
    st = Table(
        title=f"{name}: time per page by stage (summed over processes, "
        f"{stages['pages']:,} pages; malloc: manager "
        f"{malloc.get('manager', 'n/a')}, fetchers "
        f"{'/'.join(malloc.get('fetchers', [])) or 'n/a'})"
    )
    st.add_column("stage")
    st.add_column("µs/page", justify="right")
    st.add_column("seconds", justify="right")
    for stage, us in stages["us_per_page"].items():
        st.add_row(stage, f"{us:,.1f}", f"{stages['seconds'][stage]:,.2f}")
    console.print(st)
    console.print(
        f"{name}: compiled in the fetchers: {compiled or 'nothing, pure Python (see setup.py)'}"
    )
    stalls = stages.get("stalls")
    if stalls:
        _print_stalls(console, name, stalls)
    others = {
        k: v
        for k, v in stages.items()
        if k not in ("pages", "seconds", "us_per_page", "allocator", "compiled", "stalls")
    }
    if others:
        console.print(f"{name}, stages.json also says: {json.dumps(others)}")


def _print_stalls(console: Any, name: str, stalls: dict[str, Any]) -> None:
    """One line on the manager's long loop turns (drumbeat.runtime.stalls)."""
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in stalls["by_part_s"].items() if v >= 0.005)
    worst = ", ".join(
        f"{w['s']:.2f} s at {w['at_s']:.0f} s ({w['part']})" for w in stalls["worst"][:3]
    )
    console.print(
        f"{name}: manager turns >= {stalls['threshold_s']:g} s (the fetchers may "
        f"wait): {stalls['turns']}, {stalls['seconds']:.2f} s in all"
        + (f" ({parts}); longest: {worst}" if stalls["turns"] else "")
    )


def _print_profile(console: Any, run: str, profile: dict[str, Any]) -> None:
    from rich.table import Table

    if "error" in profile:
        console.print(f"profile of {run}: {profile['error']}")
        return
    for role, prof in profile.items():
        if "error" in prof or not prof["self"]:
            console.print(f"profile of {run}, {role}: {prof.get('error', 'no samples')}")
            continue
        table = Table(
            title=f"py-spy, {run}, {role}: share of {prof['samples']} samples (busy threads only)"
        )
        table.add_column("function (self)")
        table.add_column("self", justify="right")
        table.add_column("function (inclusive)")
        table.add_column("incl.", justify="right")
        for (own, own_share), (incl, incl_share) in zip(prof["self"], prof["inclusive"]):
            table.add_row(own, f"{100 * own_share:.1f} %", incl, f"{100 * incl_share:.1f} %")
        console.print(table)


# ------------------------------------------------------------------ command line


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="drumbeat bench throughput", description=__doc__.splitlines()[0]
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick", action="store_true", help="about 30 s per crawl (25 s measured) instead of 70 s"
    )
    mode.add_argument("--tiny", action="store_true", help="50 hosts, 3 s measured: a smoke test")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--only", choices=CRAWLERS, help="run one crawler (default: both)")
    ap.add_argument(
        "--politeness",
        choices=("on", "off", "both"),
        default="both",
        help="polite runs, runs without delays, or both (default)",
    )
    ap.add_argument(
        "--seconds",
        type=float,
        help="seconds measured per crawl, after warm-up (default 60; --quick 25)",
    )
    ap.add_argument("--hosts", type=int, help="host names in the web (default 5000)")
    ap.add_argument(
        "--web",
        choices=WEBS,
        default="distinct",
        help="distinct: each host its own pay-level domain (default); one-pld: "
        "every host a subdomain of one PLD, no links from other PLDs",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        help=f"front pages the crawls start from (default {SEEDS}; with --web one-pld every host)",
    )
    ap.add_argument("--concurrency", type=int, default=200, help="drumbeat --concurrency")
    ap.add_argument(
        "--fetchers",
        type=int,
        default=None,
        help="drumbeat --fetchers (default: its own, one per core)",
    )
    ap.add_argument(
        "--scrapy-concurrency", type=int, default=500, help="Scrapy CONCURRENT_REQUESTS"
    )
    ap.add_argument("--nginx-workers", type=int, default=1)
    ap.add_argument(
        "--http-client",
        choices=("aiohttp", "curl"),
        default="curl",
        help="drumbeat's HTTP client (its http_client setting; default curl)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="py-spy each drumbeat crawl's processes and print the top functions",
    )
    ap.add_argument(
        "--poll-api",
        action="store_true",
        help="while drumbeat crawls, read its /api/status, /api/hosts and /metrics every "
        "second, as a dashboard would (the control API's cost, A/B against a run without)",
    )
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a drumbeat setting for its crawls, as a config-file line (TOML value), "
        "e.g. --set journal=false for an A/B; repeatable",
    )
    args = ap.parse_args(argv)
    args.set = setting_lines(ap, args.set)
    return args


def make_plan(args: argparse.Namespace) -> Plan:
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    seconds, warmup, hosts, seeds = {
        "full": (60.0, 10.0, 5000, SEEDS),
        "quick": (25.0, 5.0, 5000, SEEDS),
        "tiny": (3.0, 1.0, 50, 10),
    }[mode]
    hosts = args.hosts or hosts
    seeds = args.seeds or (hosts if args.web == "one-pld" else seeds)
    return Plan(
        mode=mode,
        seconds=args.seconds or seconds,
        warmup_s=warmup,
        hosts=hosts,
        seeds=min(seeds, hosts),
        ips=min(IPS, max(1, hosts // 5)),
        crawlers=(args.only,) if args.only else CRAWLERS,
        politeness={"on": (True,), "off": (False,), "both": (True, False)}[args.politeness],
        concurrency=args.concurrency,
        fetchers=args.fetchers,
        scrapy_concurrency=args.scrapy_concurrency,
        nginx_workers=args.nginx_workers,
        profile=args.profile,
        http_client=args.http_client,
        poll_api=args.poll_api,
        web=args.web,
        settings=tuple(args.set),
    )


def missing_tools(plan: Plan) -> list[str]:
    missing = [] if nginx_binary() else ["nginx"]
    if "scrapy" in plan.crawlers and importlib.util.find_spec("scrapy") is None:
        missing.append("scrapy")
    return missing


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan = make_plan(args)
    missing = missing_tools(plan)
    if missing:
        print(
            f"drumbeat bench throughput needs {' and '.join(missing)}: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    nginx = nginx_binary()
    assert nginx is not None
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)  # --dir may name a new directory
    work = Path(tempfile.mkdtemp(prefix="throughputbench-", dir=args.dir))
    # nginx's workers run as an unprivileged user when started by root: they must read the tree.
    work.chmod(0o755)
    t0 = time.perf_counter()
    try:
        bench = Bench(plan, work, nginx, log=not args.json)
        runs = []
        with DnsThread(bench.shape.dns_table()) as dns:
            bench.prepare(dns)
            for polite in plan.politeness:
                for crawler in plan.crawlers:
                    runs.append(bench.run(crawler, polite))
        rep = report(plan, bench, runs, time.perf_counter() - t0)
    finally:
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(rep))
    else:
        print_report(rep)
    return 0 if all(r.usage.exit_code == 0 and r.rate.pages for r in runs) else 1
