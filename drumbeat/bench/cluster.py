"""``drumbeat bench cluster``: pages/s, CPU per page by role and Redis cost per page of the
Redis cluster (managers and fetcher processes) against the standalone crawl, on one
nginx-served web (does the cluster scale with fetchers and managers, and what does
Redis cost).

One run:

1. **The web** of ``drumbeat bench throughput`` (``_throughput_web``): ``--hosts`` host
   names (default 5,000, each its own pay-level domain) of ~20 KB pages with ~60 links,
   nginx on ``IPS`` loopback addresses 127.77.x.y, a ``SimDNS`` thread mapping the names.
   A fresh nginx per configuration.
2. **The configurations,** one after another on the same web, each from the same seeds
   with politeness off (host and IP delays 0, their budget-scaling floors too; robots.txt
   obeyed), fresh state and, for the cluster, a fresh ``redis-server``
   (``drumbeat.testing.RedisServer``, append-only file fsynced ``--redis-fsync``):
   ``standalone`` (``drumbeat crawl --fetchers 1``, the baseline), then ``MmPf``: M
   ``drumbeat manager`` processes (``--partition I/M``) and one ``drumbeat fetcher
   --processes P``. Every fetcher process has ``CONCURRENCY`` fetches in flight at most
   (``--concurrency`` of ``drumbeat fetcher``; the standalone crawl's is ``CONCURRENCY``
   x P); a manager keeps its default in-flight budget, sized to the fleet (twice the
   fetchers' slots, shared by the managers: queue.redis.in_flight_budget).
3. **The figures,** over the steady window: ``warmup`` seconds after the first page of
   any manager, the next ``--seconds``. Pages/s counts 2xx page lines of the managers'
   ``crawl.log`` files together. Every ``SAMPLE_S`` a thread of this process samples the
   CPU time of each role's process trees (``/proc/<pid>/stat``: manager processes,
   fetcher processes, redis-server, nginx), Redis's ``INFO`` (commands processed,
   network bytes in + out, ``used_memory``; this sampler's own commands and bytes taken
   out) and the managers' figures in Redis (``queued``: URLs in their frontiers); the
   window's figures are the differences between its two ends, interpolated between
   samples. Redis memory per queued URL: ``used_memory`` at the window's end less
   ``used_memory`` before the first manager started, over the URLs the managers hold
   queued then; and per frontier URL, over the URLs their URL-seen knows less the pages
   fetched (the queued ones and the new ones URL-seen holds until the queues run low).
   Task latency: each manager's ``dispatch_latency`` (``stages.json``, the
   whole run: a host's delay passing to its next request's start at a fetcher). The
   fetchers' wall time (their stage files, whole run): the share they waited for tasks
   with room for more (the managers were the limit), had every slot taken (their
   ``--concurrency`` was), and waited for their reports to reach Redis (their parsing
   waited meanwhile).

Ratios: each configuration's pages/s against ``standalone`` and against ``1m1f``; growth
per added fetcher process, ``(rate / rate(M managers, 1 process) - 1) / (P - 1)``, and per
added manager, ``(rate / rate(1 manager, P processes) - 1) / (M - 1)``: the issue's target
is 0.8 for each until a manager's core is the limit, and at most 1 byte of Redis memory
per queued URL. Each growth is also given over the same pages (``..._same_pages``): the
two rates over the pages both runs fetched in their windows, from each run's page clock
(when it had fetched how many pages). A crawl's cost a page falls as its hosts age, and
in the same seconds a faster run gets further: a ratio of the windows' rates favours it.
On a machine with fewer cores than the processes of a configuration (nginx and Redis
count too) the cores, not the design, cap the growth: "cores busy" shows how many the
configuration kept busy.

``--quick``: 15 s measured after 5 s warm-up (about 3 min in all). ``--tiny`` (tests): 50
hosts, 2 s. ``--scaling``: for a 16-core machine, 1 manager with 1, 2, 4, 8 and 12 fetcher
processes, 2 and 4 managers with 8 and 12 (``scripts/device-cluster-scaling.sh``).
``--json`` prints the figures as one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drumbeat.bench._throughput_dns import DnsThread
from drumbeat.bench._throughput_proc import children_map, thread_cpu_s, tree_cpu_s
from drumbeat.bench._throughput_web import Nginx, WebShape, build_tree, nginx_binary, pick_port
from drumbeat.bench.throughput import (
    INSTALL_HINT,
    PAGES_PER_HOST,
    Rate,
    _tail,
    crawl_log_page_times,
    interpreter,
    processor,
    steady_rate,
)
from drumbeat.cluster import STAGES_DIR
from drumbeat.queue.redis import Keys

CRAWL = "bench"
CONCURRENCY = 200  # fetches in flight per fetcher process
SAMPLE_S = 0.5
# The managers' figures summed into each sample: what in flight holds a crawl back (its
# limit, or its hosts: one connection each).
IN_FLIGHT_FIGURES = ("in_flight", "in_flight_limit", "busy_hosts")
START_SLACK_S = 8.0  # --max-time beyond warm-up + measured seconds (start-up)
# --max-time + this: the benchmark stops a manager (or crawl) itself, SIGTERM then SIGKILL
# this long after; a fetcher gets as long from SIGTERM to SIGKILL.
LIMIT_SLACK_S = 20.0
TARGET_GROWTH = 0.8  # of one more fetcher process's / manager's share
# Points of a run's page clock (when it had fetched how many pages), for comparing two
# runs over the same pages; and the least share of the smaller of two windows' pages that
# such a comparison must span.
PAGE_CLOCK_POINTS = 200
SAME_PAGES_MIN_SHARE = 0.25
TARGET_BYTES_PER_QUEUED_URL = 1.0
ROLES = ("manager", "fetchers", "redis", "nginx")
# The managers' main threads (their event loops) apart: the part of a manager that
# cannot spread over cores, so its busy share (per manager) says when a manager's core
# is the limit. Its CPU is inside "manager" too: it is left out of "cores busy".
LOOP_ROLE = "manager loop"
FSYNC = ("always", "everysec", "no")
# which part of a process tree a role is (MAIN: the process's main thread alone)
TREE, ROOT, BELOW, MAIN = "tree", "root", "below", "main"


@dataclass(frozen=True, slots=True)
class Config:
    managers: int  # 0: the standalone crawl
    processes: int  # fetcher processes (the standalone crawl's --fetchers)

    @property
    def name(self) -> str:
        if self.managers == 0:
            return "standalone" if self.processes == 1 else f"standalone{self.processes}"
        return f"{self.managers}m{self.processes}f"


DEFAULT_CONFIGS = (Config(0, 1), Config(1, 1), Config(1, 2), Config(2, 2))
SCALING_CONFIGS = (
    Config(0, 1),
    *(Config(1, p) for p in (1, 2, 4, 8, 12)),
    *(Config(m, p) for m in (2, 4) for p in (8, 12)),
)


@dataclass(frozen=True, slots=True)
class Plan:
    mode: str
    seconds: float  # measured (steady) seconds per configuration
    warmup_s: float
    hosts: int
    seeds: int
    ips: int
    configs: tuple[Config, ...]
    nginx_workers: int
    redis_fsync: str
    pages_per_host: int = PAGES_PER_HOST
    start_slack_s: float = START_SLACK_S
    limit_slack_s: float = LIMIT_SLACK_S

    def max_time_s(self) -> float:
        return self.warmup_s + self.seconds + self.start_slack_s


@dataclass(slots=True)
class Sample:
    at: float  # epoch seconds
    cpu_s: dict[str, float]  # role -> CPU seconds so far
    redis: dict[str, float] | None = None  # commands, net_bytes, used_memory (crawl's own)
    queued: int | None = None  # URLs the managers hold queued (their figures in Redis)
    # URLs URL-seen knows less the pages fetched: the frontier, with the new URLs that
    # wait in URL-seen's output to be queued (managers take them as their queues run low)
    frontier: int | None = None
    # The managers' items in flight, their limit, and the hosts those items are for (sums)
    in_flight: dict[str, int] | None = None


@dataclass(slots=True)
class ConfigRun:
    config: Config
    rate: Rate
    window: tuple[float, float] | None  # epoch seconds
    samples: list[Sample]
    baseline_memory: int | None  # Redis used_memory before the first manager
    latency: list[dict[str, Any] | None]  # each manager's dispatch_latency
    allocators: dict[str, list[str]]  # role -> malloc of its processes
    exit_codes: dict[str, int | None]  # process name (crawl, fetcher, managerI) -> code
    stopped: list[str]  # the processes the benchmark had to stop: they outlived the limit
    log_tail: str = ""
    # The fetchers' CPU by stage over their whole run, in µs a fetch (their stage files)
    fetcher_stages: dict[str, float] | None = None
    # The share of the cluster fetchers' wall time they had room and no task, or no room
    fetcher_wall: dict[str, float] | None = None
    page_clock: list[tuple[int, float]] | None = None  # see page_clock()
    # Pages fetched before the steady window began, and by its end
    window_page_range: tuple[int, int] | None = None


class RedisProbe:
    """A tiny RESP client for ``INFO`` and the managers' figures, counting its own commands
    and bytes so that they can be taken out of Redis's totals."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._file = self._sock.makefile("rb")
        self.commands = 0
        self.sent = 0
        self.received = 0

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def call(self, *args: str) -> bytes | None:
        parts = [f"*{len(args)}\r\n".encode()]
        for a in args:
            raw = a.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
        request = b"".join(parts)
        self._sock.sendall(request)
        self.commands += 1
        self.sent += len(request)
        head = self._file.readline()
        self.received += len(head)
        if head.startswith(b"$"):
            n = int(head[1:])
            if n < 0:
                return None
            body = self._file.read(n + 2)
            self.received += len(body)
            return body[:-2]
        if head.startswith(b"-"):
            raise RuntimeError(f"redis: {head.decode(errors='replace').strip()}")
        return head[1:].strip()

    def info(self) -> dict[str, float]:
        """The crawl's commands and network bytes so far (this probe's left out, the INFO
        being answered included as Redis counts it), and ``used_memory``."""
        commands, sent, received = self.commands, self.sent, self.received
        text = (self.call("INFO", "stats", "memory") or b"").decode()
        values = dict(
            line.split(":", 1) for line in text.splitlines() if ":" in line and line[0] != "#"
        )
        request = self.sent - sent  # read by Redis before it answered
        return {
            "commands": int(values["total_commands_processed"]) - commands,
            "net_bytes": int(values["total_net_input_bytes"])
            - (sent + request)
            + int(values["total_net_output_bytes"])
            - received,
            "used_memory": int(values["used_memory"]),
        }


class Sampler:
    """Samples each role's CPU time (and Redis, when there is one) from a thread."""

    def __init__(
        self,
        roles: dict[str, list[tuple[int, str]]],  # role -> (root pid, TREE / ROOT / BELOW)
        probe: RedisProbe | None,
        figure_keys: Sequence[str],
    ) -> None:
        self.roles = roles
        self.probe = probe
        self.figure_keys = list(figure_keys)
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> Sample:
        children = children_map()
        cpu = {
            role: sum(_cpu_s(pid, part, children) for pid, part in roots)
            for role, roots in self.roles.items()
        }
        out = Sample(time.time(), cpu)
        if self.probe is not None:
            out.redis = self.probe.info()
            queued = frontier = 0
            in_flight = dict.fromkeys(IN_FLIGHT_FIGURES, 0)
            for key in self.figure_keys:
                raw = self.probe.call("HGET", key, "json")
                figures = json.loads(raw) if raw else {}
                queued += int(figures.get("queued", 0))
                frontier += max(0, int(figures.get("seen", 0)) - int(figures.get("pages_done", 0)))
                for name in IN_FLIGHT_FIGURES:
                    in_flight[name] += int(figures.get(name, 0))
            out.queued, out.frontier, out.in_flight = queued, frontier, in_flight
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except (OSError, RuntimeError, ValueError, KeyError):
                pass  # Redis going away at the end; the samples so far stand
            self._stop.wait(SAMPLE_S)


def _cpu_s(pid: int, part: str, children: dict[int, list[int]]) -> float:
    """CPU seconds of ``pid``'s tree (TREE), of ``pid`` alone (ROOT), of its descendants
    (BELOW) or of its main thread (MAIN)."""
    if part == MAIN:
        return thread_cpu_s(pid, pid)
    below = tree_cpu_s(pid, children, include_root=False)
    if part == BELOW:
        return below
    whole = tree_cpu_s(pid, children)
    return whole if part == TREE else whole - below


def at(samples: list[Sample], t: float, value: Any) -> float | None:
    """``value(sample)`` at epoch ``t``, interpolated between the samples around it (None
    where ``t`` is outside them or a value is missing)."""
    for a, b in itertools.pairwise(samples):
        if a.at <= t <= b.at:
            va, vb = value(a), value(b)
            if va is None or vb is None:
                return None
            share = (t - a.at) / (b.at - a.at) if b.at > a.at else 0.0
            return float(va + share * (vb - va))
    return None


def _allocator(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            text = maps.read()
    except OSError:
        return "gone"
    return next((name for name in ("mimalloc", "jemalloc") if f"lib{name}" in text), "system")


class Bench:
    """One benchmark run: the web, its DNS and the configurations, in ``work``."""

    def __init__(self, plan: Plan, work: Path, nginx: str, log: bool) -> None:
        self.plan = plan
        self.work = work
        self.nginx = nginx
        self.log = log
        self.shape = WebShape.make(plan.hosts, plan.pages_per_host, plan.ips, plan.seeds)
        self.docroot = work / "web"
        self.seeds_file = work / "seeds.txt"
        self.config_file = work / "crawl.toml"
        self.port = 0
        self.dns_address = ""

    def say(self, text: str) -> None:
        if self.log:
            print(text, file=sys.stderr, flush=True)

    def prepare(self, dns: DnsThread) -> None:
        self.dns_address = dns.address
        self.port = pick_port(self.shape.ip(0), random.Random())
        build_tree(self.docroot, self.shape, self.port)
        self.seeds_file.write_text(
            "\n".join(self.shape.seed_urls(self.port)) + "\n", encoding="utf-8"
        )
        # Politeness off, budget scaling included: its floors are the delays (0).
        self.config_file.write_text(
            'host_delay_min_s = 0.0\nip_delay_min_s = 0.0\nhttp_client = "curl"\n',
            encoding="utf-8",
        )

    def crawl_args(self, state: Path, concurrency: int | None) -> list[str]:
        """``concurrency``: the crawl's --concurrency; None: its default."""
        return [
            "--seeds",
            str(self.seeds_file),
            "--state",
            str(state),
            "--dns-server",
            self.dns_address,
            "--allow-loopback",
            "--max-time",
            str(self.plan.max_time_s()),
            "--no-progress",
            "--host-delay",
            "0",
            "--ip-delay",
            "0",
            *(("--concurrency", str(concurrency)) if concurrency is not None else ()),
            "--config",
            str(self.config_file),
        ]

    def run(self, cfg: Config) -> ConfigRun:
        server = Nginx(
            self.nginx,
            self.work / f"nginx-{cfg.name}",
            self.docroot,
            self.shape.addresses(),
            self.port,
            self.plan.nginx_workers,
        )
        self.say(f"{cfg.name}: crawling for {self.plan.max_time_s():.0f} s ...")
        server.start()
        try:
            assert server.pid is not None
            nginx_role = [(server.pid, TREE)]
            if cfg.managers == 0:
                run = self._standalone(cfg, nginx_role)
            else:
                run = self._cluster(cfg, nginx_role)
        finally:
            server.stop()
        self.say(
            f"{cfg.name}: {run.rate.pages_per_s:,.0f} pages/s steady, {run.rate.pages:,} pages"
        )
        return run

    def _standalone(self, cfg: Config, nginx_role: list[tuple[int, str]]) -> ConfigRun:
        state = self.work / cfg.name
        # As many fetches in flight per fetcher process as a cluster fetcher runs.
        concurrency = CONCURRENCY * cfg.processes
        cmd = [sys.executable, "-m", "drumbeat", "crawl", *self.crawl_args(state, concurrency)]
        cmd += ["--fetchers", str(cfg.processes)]
        procs = _Processes(self.work / cfg.name)
        crawl = procs.start(cmd, "crawl")
        # The crawl's process is its manager; its children are the fetcher processes.
        roles = {
            "manager": [(crawl.pid, ROOT)],
            LOOP_ROLE: [(crawl.pid, MAIN)],
            "fetchers": [(crawl.pid, BELOW)],
            "nginx": nginx_role,
        }
        sampler = Sampler(roles, None, ())
        return self._measure(cfg, procs, [crawl], None, sampler, [state], None, standalone=True)

    def _cluster(self, cfg: Config, nginx_role: list[tuple[int, str]]) -> ConfigRun:
        from drumbeat.testing import RedisServer

        work = self.work / cfg.name
        with RedisServer(work / "redis") as redis:
            probe = RedisProbe(redis.port)
            try:
                probe.call("CONFIG", "SET", "appendfsync", self.plan.redis_fsync)
                baseline = int(probe.info()["used_memory"])
                procs = _Processes(work)
                fetcher = procs.start(
                    [
                        *(sys.executable, "-m", "drumbeat", "fetcher", "--redis", redis.url),
                        *("--state", str(work / "fetchers")),
                        *("--processes", str(cfg.processes)),
                        *("--concurrency", str(CONCURRENCY)),
                    ],
                    "fetcher",
                )
                states = [work / f"m{i}" for i in range(cfg.managers)]
                managers = [
                    procs.start(
                        [
                            *(sys.executable, "-m", "drumbeat", "manager"),
                            *("--redis", redis.url, "--crawl", CRAWL),
                            *("--partition", f"{i}/{cfg.managers}"),
                            *self.crawl_args(state, None),
                        ],
                        f"manager{i}",
                    )
                    for i, state in enumerate(states)
                ]
                assert redis.proc is not None
                roles = {
                    "manager": [(m.pid, TREE) for m in managers],
                    LOOP_ROLE: [(m.pid, MAIN) for m in managers],
                    "fetchers": [(fetcher.pid, TREE)],
                    "redis": [(redis.proc.pid, TREE)],
                    "nginx": nginx_role,
                }
                keys = [Keys().part(CRAWL, "mgr", i) for i in range(cfg.managers)]
                sampler = Sampler(roles, probe, keys)
                return self._measure(cfg, procs, managers, fetcher, sampler, states, baseline)
            finally:
                probe.close()

    def _measure(
        self,
        cfg: Config,
        procs: _Processes,
        crawls: list[subprocess.Popen[bytes]],
        fetcher: subprocess.Popen[bytes] | None,
        sampler: Sampler,
        states: list[Path],
        baseline: int | None,
        *,
        standalone: bool = False,
    ) -> ConfigRun:
        """Sample until the crawls (standalone or managers) end, then stop the fetchers."""
        sampler.start()
        allocators: dict[str, list[str]] = {}
        stopped: list[str] = []
        grace = self.plan.limit_slack_s
        try:
            allocators, stopped = self._watch(crawls, fetcher, standalone)
        finally:
            sampler.stop()
            if fetcher is not None and procs.stop(fetcher, grace):
                stopped.append("fetcher")
            procs.stop_all(grace)
        times = sorted(t for state in states for t in crawl_log_page_times(state / "crawl.log"))
        started = sampler.samples[0].at if sampler.samples else time.time()
        rate = steady_rate(times, started, self.plan.warmup_s, self.plan.seconds)
        window = window_range = None
        if times:
            begin = times[0] + self.plan.warmup_s
            window = (begin, begin + self.plan.seconds)
            window_range = (
                bisect_left(times, begin),
                bisect_left(times, begin + self.plan.seconds),
            )
        codes = {n: p.returncode for (p, _), n in zip(procs.started, procs.names)}
        # A process the benchmark stopped ran its crawl to the end and then hung (see the
        # report's notes): its figures stand.
        bad = [f"{n} exited {c}" for n, c in codes.items() if c != 0 and n not in stopped]
        failed = bad + ([] if times else ["no pages"])
        stage_files = (
            [states[0] / "stages.json"]
            if standalone
            else sorted((self.work / cfg.name / "fetchers" / STAGES_DIR).glob("*.json"))
        )
        return ConfigRun(
            config=cfg,
            rate=rate,
            window=window,
            samples=sampler.samples,
            baseline_memory=baseline,
            latency=[_latency(state) for state in states],
            allocators=allocators,
            exit_codes=codes,
            stopped=stopped,
            log_tail=f"{', '.join(failed)}\n{procs.tails()}" if failed else "",
            fetcher_stages=_fetcher_stages(stage_files, standalone),
            fetcher_wall=_fetcher_wall(stage_files),
            page_clock=page_clock(times),
            window_page_range=window_range,
        )

    def _watch(
        self, crawls: list[subprocess.Popen[bytes]], fetcher: Any, standalone: bool
    ) -> tuple[dict[str, list[str]], list[str]]:
        """Wait for ``crawls`` to end (stopping them at the limit: their names are returned
        too); note the allocators of the processes halfway through."""
        deadline = time.monotonic() + self.plan.max_time_s() + self.plan.limit_slack_s
        stopped: list[str] = []
        look_at = time.monotonic() + self.plan.max_time_s() / 2
        allocators: dict[str, list[str]] = {}
        while any(p.poll() is None for p in crawls):
            now = time.monotonic()
            if not allocators and now >= look_at:
                children = children_map()
                if standalone:
                    pids = {"manager": [crawls[0].pid], "fetchers": children.get(crawls[0].pid, [])}
                else:
                    kids = children.get(fetcher.pid, []) or [fetcher.pid]
                    pids = {"manager": [p.pid for p in crawls], "fetchers": kids}
                allocators = {role: sorted(map(_allocator, ps)) for role, ps in pids.items()}
            if now >= deadline:
                for i, p in enumerate(crawls):
                    if p.poll() is None:
                        stopped.append("crawl" if standalone else f"manager{i}")
                        p.send_signal(signal.SIGTERM)
                for p in crawls:
                    try:
                        p.wait(self.plan.limit_slack_s)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
            time.sleep(0.1)
        return allocators, stopped


class _Processes:
    """The processes of one configuration, each in its own session, output to ``DIR/*.out``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.names: list[str] = []
        work.mkdir(parents=True, exist_ok=True)

    def start(self, cmd: list[str], name: str) -> subprocess.Popen[bytes]:
        log = self.work / f"{name}.out"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append((proc, log))
        self.names.append(name)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace_s: float) -> bool:
        """SIGTERM, then SIGKILL to its whole session after ``grace_s``; True when it had
        to be killed."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        killed = False
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            killed = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # children left behind, if any
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        return killed

    def stop_all(self, grace_s: float) -> None:
        for proc, _ in self.started:
            if proc.returncode is None:
                self.stop(proc, grace_s)

    def tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{_tail(log)}" for _, log in self.started)


# The stages of a standalone crawl's stages.json that its fetcher processes ran ("handoff"
# sums both sides of the pipes there, so it is left out).
_FETCHER_STAGES = frozenset({"warc", "parse", "normalize", "pack", "dedup", "focus", "fetch"})


def _fetcher_stages(paths: list[Path], standalone: bool) -> dict[str, float] | None:
    """µs a fetch per stage, summed over the fetcher processes' stage files (a
    cluster's ``stages/*.json``, or a standalone crawl's ``stages.json``)."""
    pages = 0
    seconds: dict[str, float] = {}
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        pages += int(doc.get("pages", 0))
        for stage, spent in doc.get("seconds", {}).items():
            if not standalone or stage in _FETCHER_STAGES:
                seconds[stage] = seconds.get(stage, 0.0) + float(spent)
    if not pages:
        return None
    return {stage: round(1e6 * spent / pages, 1) for stage, spent in sorted(seconds.items())}


def _fetcher_wall(paths: list[Path]) -> dict[str, float] | None:
    """The share of the fetcher processes' wall time (their stage files' ``wall_s``, summed)
    they waited for tasks with room for more, had every slot taken, and waited for their
    reports to reach Redis: the first says the managers were the limit, the second the
    fetchers' ``--concurrency``, the third Redis's round trips."""
    totals: dict[str, float] = {}
    for path in paths:
        try:
            wall = json.loads(path.read_text(encoding="utf-8")).get("wall_s") or {}
        except (OSError, ValueError):
            continue
        for key, value in wall.items():
            totals[key] = totals.get(key, 0.0) + float(value)
    up = totals.pop("up", 0.0)
    if up <= 0:
        return None
    return {key: round(value / up, 3) for key, value in sorted(totals.items())}


def _latency(state: Path) -> dict[str, Any] | None:
    path = state / "stages.json"
    if not path.exists():
        return None
    value = json.loads(path.read_text(encoding="utf-8")).get("dispatch_latency")
    return value if isinstance(value, dict) else None


# ------------------------------------------------------------------ figures


def figures(run: ConfigRun, seconds: float) -> dict[str, Any]:
    """One configuration's figures over its steady window (see the module docstring)."""
    cfg, rate, samples = run.config, run.rate, run.samples
    out: dict[str, Any] = {
        "managers": cfg.managers,
        "processes": cfg.processes,
        "pages": rate.pages,
        "steady_pages": rate.steady_pages,
        "pages_per_s": rate.pages_per_s,
        "slowest_window_pages_per_s": rate.slowest_window_pages_per_s,
        "window_pages": list(rate.window_pages),
        "first_page_s": rate.first_page_s,
        "cpu_ms_per_page": {},
        "cores_busy": {},
        "redis": None,
        "in_flight": None,
        "dispatch_latency": run.latency,
        "allocators": run.allocators,
        "exit_codes": run.exit_codes,
        "stopped_by_bench": run.stopped,
        "fetcher_stages_us": run.fetcher_stages,
        "fetcher_wall_share": run.fetcher_wall,
        "page_clock": run.page_clock,
        "window_page_range": run.window_page_range,
    }
    if run.window is None or not rate.steady_pages:
        return out
    begin, end = run.window
    out["window_complete"] = bool(samples) and samples[-1].at >= end
    for role in (*ROLES, LOOP_ROLE):
        a = at(samples, begin, lambda s, role=role: s.cpu_s.get(role))
        b = at(samples, end, lambda s, role=role: s.cpu_s.get(role))
        if a is None or b is None:
            continue
        out["cpu_ms_per_page"][role] = 1000 * (b - a) / rate.steady_pages
        out["cores_busy"][role] = (b - a) / seconds
    loops = out["cores_busy"].pop(LOOP_ROLE, None)
    out["cpu_ms_per_page"].pop(LOOP_ROLE, None)
    # A manager's main thread near 1 core: that manager's core is the limit.
    out["manager_loop_busy"] = None if loops is None else loops / max(1, cfg.managers)
    if run.baseline_memory is not None:
        out["redis"] = _redis_figures(run, begin, end)
        out["in_flight"] = in_flight_means(samples, begin, end)
    if run.log_tail:
        out["log_tail"] = run.log_tail
    return out


def in_flight_means(samples: list[Sample], begin: float, end: float) -> dict[str, float] | None:
    """The means of the managers' in-flight figures (IN_FLIGHT_FIGURES, summed over the
    managers) in the samples taken from ``begin`` to ``end``; None without any."""
    within = [s.in_flight for s in samples if begin <= s.at <= end and s.in_flight]
    if not within:
        return None
    return {name: sum(f[name] for f in within) / len(within) for name in IN_FLIGHT_FIGURES}


def _redis_figures(run: ConfigRun, begin: float, end: float) -> dict[str, Any]:
    pages = run.rate.steady_pages
    samples = [s for s in run.samples if s.redis is not None]

    def delta(key: str) -> float | None:
        a = at(samples, begin, lambda s: s.redis[key])
        b = at(samples, end, lambda s: s.redis[key])
        return None if a is None or b is None else b - a

    commands, net = delta("commands"), delta("net_bytes")
    last = next((s for s in reversed(samples) if s.at <= end and s.queued is not None), None)
    memory = queued = frontier = None
    if last is not None and last.redis is not None and run.baseline_memory is not None:
        memory = int(last.redis["used_memory"]) - run.baseline_memory
        queued, frontier = last.queued, last.frontier
    return {
        "ops_per_page": None if commands is None else commands / pages,
        "bytes_per_page": None if net is None else net / pages,
        "used_memory_bytes": memory,
        "queued_urls": queued,
        "bytes_per_queued_url": memory / queued if memory is not None and queued else None,
        "frontier_urls": frontier,
        "bytes_per_frontier_url": memory / frontier if memory is not None and frontier else None,
        "memory_trace": _memory_trace(samples, run.baseline_memory, end),
    }


def _memory_trace(
    samples: list[Sample], baseline: int | None, end: float, points: int = 12
) -> list[tuple[float, int, int, int]]:
    """(seconds since the first sample, Redis memory above the baseline, URLs queued,
    frontier URLs) at up to ``points`` samples spread over the run up to ``end``: does
    Redis memory stay flat while the frontier grows?"""
    kept = [s for s in samples if s.at <= end and s.queued is not None and s.redis is not None]
    if baseline is None or not kept:
        return []
    step = max(1, len(kept) // points)
    chosen = [*kept[::step][: points - 1], kept[-1]]
    t0 = kept[0].at
    return [
        (
            round(s.at - t0, 1),
            int(s.redis["used_memory"]) - baseline,
            int(s.queued or 0),
            int(s.frontier or 0),
        )
        for s in chosen
        if s.redis is not None
    ]


def page_clock(times: Sequence[float], points: int = PAGE_CLOCK_POINTS) -> list[tuple[int, float]]:
    """(pages, seconds since the first page) at up to ``points`` + 1 page counts spread
    over the sorted page ``times``: when the run had fetched how many pages."""
    n = len(times)
    counts = sorted({max(1, round(n * k / points)) for k in range(points + 1)}) if n else []
    return [(k, times[k - 1] - times[0]) for k in counts]


def clock_at(clock: Sequence[Sequence[float]], pages: float) -> float | None:
    """When (seconds since the first page) ``clock`` had ``pages`` pages, interpolated
    between its points; None outside them."""
    for (k0, t0), (k1, t1) in itertools.pairwise(clock):
        if k0 <= pages <= k1:
            return t0 if k1 == k0 else t0 + (t1 - t0) * (pages - k0) / (k1 - k0)
    return None


def same_pages_ratio(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, int, int] | None:
    """Configuration ``a``'s pages/s over ``b``'s, each over the same pages: those both
    fetched in their steady windows (from the later window's start to the earlier end,
    counted in pages), with that range; None where it is short or a clock is missing.

    A crawl's cost a page changes as it goes: the young hosts of its first minutes give
    more new links a page (robots checks and BEAST's work in the manager) than older
    ones. Over the same seconds a faster configuration crawls further into each host, so
    a ratio of the steady windows' rates favours it; over the same pages it does not.
    """
    a_range, b_range = a.get("window_page_range"), b.get("window_page_range")
    a_clock, b_clock = a.get("page_clock"), b.get("page_clock")
    if not (a_range and b_range and a_clock and b_clock):
        return None
    (a_lo, a_hi), (b_lo, b_hi) = a_range, b_range
    lo, hi = max(a_lo, b_lo), min(a_hi, b_hi)
    if hi <= lo or hi - lo < SAME_PAGES_MIN_SHARE * min(a_hi - a_lo, b_hi - b_lo):
        return None
    spans = []
    for clock in (a_clock, b_clock):
        start, end = clock_at(clock, lo), clock_at(clock, hi)
        if start is None or end is None or end <= start:
            return None
        spans.append(end - start)
    return spans[1] / spans[0], lo, hi


def ratios(configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pages/s against ``standalone`` and ``1m1f``; growth per added fetcher process and
    per added manager, over the same seconds and over the same pages (see the module
    docstring and :func:`same_pages_ratio`)."""
    rate = {name: c["pages_per_s"] for name, c in configs.items()}
    by_shape = {(c["managers"], c["processes"]): name for name, c in configs.items()}

    def over(name: str, ref: str | None) -> float | None:
        return rate[name] / rate[ref] if ref and rate.get(ref) else None

    def same(name: str, ref: str | None, added: int) -> tuple[float | None, list[int] | None]:
        found = same_pages_ratio(configs[name], configs[ref]) if ref else None
        if found is None:
            return None, None
        r, lo, hi = found
        return (r - 1) / added, [lo, hi]

    out: dict[str, dict[str, Any]] = {}
    for name, c in configs.items():
        m, p = c["managers"], c["processes"]
        per_fetcher = per_manager = None
        same_fetcher = same_manager = fetcher_pages = manager_pages = None
        if m and p > 1:
            r = over(name, by_shape.get((m, 1)))
            per_fetcher = None if r is None else (r - 1) / (p - 1)
            same_fetcher, fetcher_pages = same(name, by_shape.get((m, 1)), p - 1)
        if m > 1:
            r = over(name, by_shape.get((1, p)))
            per_manager = None if r is None else (r - 1) / (m - 1)
            same_manager, manager_pages = same(name, by_shape.get((1, p)), m - 1)
        out[name] = {
            "vs_standalone": over(name, by_shape.get((0, 1))),
            "vs_1m1f": over(name, by_shape.get((1, 1))),
            "growth_per_added_fetcher": per_fetcher,
            "growth_per_added_manager": per_manager,
            "growth_per_added_fetcher_same_pages": same_fetcher,
            "growth_per_added_manager_same_pages": same_manager,
            "same_pages_fetcher": fetcher_pages,
            "same_pages_manager": manager_pages,
        }
    return out


def report(plan: Plan, bench: Bench, runs: list[ConfigRun], elapsed_s: float) -> dict[str, Any]:
    configs = {r.config.name: figures(r, plan.seconds) for r in runs}
    rats = ratios(configs)
    memory = [
        c["redis"]["bytes_per_queued_url"]
        for c in configs.values()
        if c["redis"] and c["redis"]["bytes_per_queued_url"] is not None
    ]
    return {
        "mode": plan.mode,
        "seconds": plan.seconds,
        "warmup_s": plan.warmup_s,
        "web": {
            "hosts": bench.shape.hosts,
            "pages_per_host": bench.shape.pages + 1,
            "ips": bench.shape.ips,
            "seeds": bench.shape.seeds,
            "nginx_workers": plan.nginx_workers,
        },
        "concurrency_per_process": CONCURRENCY,
        "redis_fsync": plan.redis_fsync,
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": processor(),
        "python": interpreter(),
        "configs": configs,
        "ratios": rats,
        "targets": {
            "growth": TARGET_GROWTH,
            "bytes_per_queued_url": TARGET_BYTES_PER_QUEUED_URL,
            "memory_reached": bool(memory) and max(memory) <= TARGET_BYTES_PER_QUEUED_URL,
        },
        "elapsed_s": elapsed_s,
    }


# ------------------------------------------------------------------ printing


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def print_report(rep: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=170)
    web = rep["web"]
    table = Table(
        title=f"Cluster on {web['hosts']:,} hosts x {web['pages_per_host']} pages "
        f"(nginx, {web['ips']} loopback IPs, {web['nginx_workers']} workers), politeness off, "
        f"{rep['seconds']:.0f} s measured after {rep['warmup_s']:.0f} s warm-up, "
        f"{rep['cpus']} CPUs ({rep['cpu_model']}), Redis appendfsync {rep['redis_fsync']}"
    )
    columns = [
        "config", "pages/s", "slowest 5 s", "x standalone", "x 1m1f", "+/fetcher",
        "+/manager", "CPU ms/page mgr", "fetchers", "redis", "nginx", "cores busy",
        "Redis ops/page", "bytes/page", "B/queued URL", "latency p50/p90 ms",
    ]  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col == "config" else "right")
    for name, c in rep["configs"].items():
        r = rep["ratios"][name]
        cpu = c["cpu_ms_per_page"]
        redis = c["redis"] or {}
        lat = " ".join(
            f"{x['p50_ms']:.0f}/{x['p90_ms']:.0f}" if x else "n/a" for x in c["dispatch_latency"]
        )
        table.add_row(
            name,
            f"{c['pages_per_s']:,.0f}",
            f"{c['slowest_window_pages_per_s']:,.0f}",
            _num(r["vs_standalone"], ".2f"),
            _num(r["vs_1m1f"], ".2f"),
            _num(r["growth_per_added_fetcher"], ".2f"),
            _num(r["growth_per_added_manager"], ".2f"),
            _num(cpu.get("manager"), ".3f"),
            _num(cpu.get("fetchers"), ".3f"),
            _num(cpu.get("redis"), ".3f"),
            _num(cpu.get("nginx"), ".3f"),
            _num(sum(c["cores_busy"].values()) if c["cores_busy"] else None, ".2f"),
            _num(redis.get("ops_per_page"), ".2f"),
            _num(redis.get("bytes_per_page"), ",.0f"),
            _num(redis.get("bytes_per_queued_url"), ".3f"),
            lat,
        )
    console.print(table)
    _print_notes(console, rep)


def _print_notes(console: Any, rep: dict[str, Any]) -> None:
    for name, c in rep["configs"].items():
        busy = ", ".join(f"{k} {v:.2f}" for k, v in c["cores_busy"].items())
        if c.get("manager_loop_busy") is not None:
            busy += f" (main thread of each manager {c['manager_loop_busy']:.2f})"
        if c.get("fetcher_stages_us"):
            busy += "; fetchers' µs a fetch by stage: " + ", ".join(
                f"{k} {v:,.0f}" for k, v in c["fetcher_stages_us"].items()
            )
        if c.get("fetcher_wall_share"):
            busy += "; share of the fetchers' time " + ", ".join(
                f"{k.replace('_', ' ')} {v:.0%}" for k, v in c["fetcher_wall_share"].items()
            )
        if c.get("in_flight"):
            f = c["in_flight"]
            busy += (
                f"; in flight {f['in_flight']:,.0f} of {f['in_flight_limit']:,.0f}, "
                f"on {f['busy_hosts']:,.0f} hosts"
            )
        redis = c["redis"] or {}
        memory = redis.get("used_memory_bytes")
        console.print(
            f"{name}: cores busy by role: {busy or 'n/a'}; malloc "
            + (", ".join(f"{k} {'/'.join(v)}" for k, v in c["allocators"].items()) or "n/a")
            + (
                f"; Redis memory {memory:,} B for {redis.get('queued_urls') or 0:,} queued URLs"
                if memory is not None
                else ""
            )
            + ("" if c.get("window_complete", True) else "; the window outlasted the crawl")
            + (
                f"; {', '.join(c['stopped_by_bench'])} did not exit after the crawl: stopped "
                "by the benchmark (the figures stand; a stopped manager leaves no latency)"
                if c["stopped_by_bench"]
                else ""
            )
        )
        if c.get("log_tail"):
            console.print(f"[bold]{name} failed[/bold] (exit {c['exit_codes']}):\n{c['log_tail']}")
    same = [
        f"{name} {r[f'growth_per_added_{kind}_same_pages']:+.2f} a {kind} "
        f"(pages {r[f'same_pages_{kind}'][0]:,}-{r[f'same_pages_{kind}'][1]:,})"
        for name, r in rep["ratios"].items()
        for kind in ("fetcher", "manager")
        if r.get(f"growth_per_added_{kind}_same_pages") is not None
    ]
    if same:
        console.print(
            "Growth over the same pages (each pair over the pages both fetched in their "
            "windows, where the hosts are as old in both): " + "; ".join(same) + "."
        )
    t = rep["targets"]
    console.print(
        f"Targets: growth >= {t['growth']:.1f} per added fetcher process (until a manager's "
        f"core is the limit) and per added manager; Redis <= "
        f"{t['bytes_per_queued_url']:g} byte per queued URL: "
        f"{'reached' if t['memory_reached'] else 'not reached'}."
    )
    python = rep["python"]
    console.print(
        f"Notes: {rep['concurrency_per_process']} fetches in flight per fetcher process; a "
        f"manager keeps twice the fetchers' slots in flight, shared by the managers (the "
        f"standalone crawl: the fetchers' slots). CPU ms/page is "
        f"over the steady window, per role (every process of it); 'cores busy' sums the "
        f"roles' CPU over the window's seconds: near {rep['cpus']} the machine, not the "
        f"design, is the limit. Redis ops and bytes (in + out) per page leave out this "
        f"benchmark's own INFO calls. Latency: each manager's dispatch latency over its "
        f"whole run. Python {python['version']} ({python['executable']}). "
        f"{rep['mode']} run, {rep['elapsed_s']:.0f} s."
    )


# ------------------------------------------------------------------ command line


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="drumbeat bench cluster", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="15 s measured per configuration")
    mode.add_argument("--tiny", action="store_true", help="50 hosts, 2 s measured: a smoke test")
    ap.add_argument(
        "--scaling",
        action="store_true",
        help="1 manager with 1-12 fetcher processes, 2 and 4 with 8 and 12 (a 16-core machine)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--configs",
        metavar="NAME,...",
        type=parse_configs,
        help="the configurations to run, e.g. standalone,1m1f,2m8f (MmPf: M managers, P "
        "fetcher processes; default standalone,1m1f,1m2f,2m2f)",
    )
    ap.add_argument("--seconds", type=float, help="seconds measured per configuration")
    ap.add_argument("--hosts", type=int, help="host names in the web (default 5000)")
    ap.add_argument(
        "--pages-per-host",
        type=int,
        default=PAGES_PER_HOST,
        help=f"pages in each host's tree (default {PAGES_PER_HOST}); more makes the frontier "
        "grow faster, to measure Redis memory per queued URL at tens of millions queued",
    )
    ap.add_argument("--nginx-workers", type=int, default=None, help="default 1 (--scaling: 4)")
    ap.add_argument(
        "--redis-fsync",
        choices=FSYNC,
        default="always",
        help="Redis appendfsync (default always, as drumbeat.testing.RedisServer starts it)",
    )
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    return ap.parse_args(argv)


def parse_configs(text: str) -> tuple[Config, ...]:
    """``standalone,standalone4,1m2f,...`` -> configurations (``standaloneP``: the
    standalone crawl with P fetcher processes); ArgumentTypeError otherwise (``--configs``
    is parsed with it, so a bad one is a usage error).

    A configuration may be named once: each run's state, Redis and crawl name are its
    configuration's, so a second run of it would resume the first's crawl. For another
    round, run the benchmark again."""
    out: list[Config] = []
    for name in text.split(","):
        m = re.fullmatch(r"(\d+)m(\d+)f", name.strip())
        alone = re.fullmatch(r"standalone(\d*)", name.strip())
        if alone and int(alone[1] or 1) >= 1:
            out.append(Config(0, int(alone[1] or 1)))
        elif m and int(m[1]) >= 1 and int(m[2]) >= 1:
            out.append(Config(int(m[1]), int(m[2])))
        else:
            raise argparse.ArgumentTypeError(f"no configuration {name.strip()!r}")
        if out[-1] in out[:-1]:
            raise argparse.ArgumentTypeError(
                f"{name.strip()!r} is named twice; name each configuration once "
                "(run the benchmark again for another round)"
            )
    return tuple(out)


def make_plan(args: argparse.Namespace) -> Plan:
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    seconds, warmup, hosts, seeds = {
        "full": (60.0, 10.0, 5000, 300),
        "quick": (15.0, 5.0, 5000, 300),
        "tiny": (2.0, 1.0, 50, 10),
    }[mode]
    hosts = args.hosts or hosts
    return Plan(
        mode=mode + ("-scaling" if args.scaling else ""),
        seconds=args.seconds or seconds,
        warmup_s=warmup,
        hosts=hosts,
        seeds=min(seeds, hosts),
        ips=min(500, max(1, hosts // 5)),
        configs=args.configs
        if args.configs
        else SCALING_CONFIGS
        if args.scaling
        else DEFAULT_CONFIGS,
        start_slack_s=2.5 if mode == "tiny" else START_SLACK_S,
        limit_slack_s=4.0 if mode == "tiny" else LIMIT_SLACK_S,
        nginx_workers=args.nginx_workers or (4 if args.scaling else 1),
        redis_fsync=args.redis_fsync,
        pages_per_host=max(1, args.pages_per_host),
    )


def missing_tools() -> list[str]:
    missing = [] if nginx_binary() else ["nginx"]
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    return missing


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan = make_plan(args)
    missing = missing_tools()
    if missing:
        print(
            f"drumbeat bench cluster needs {' and '.join(missing)}: {INSTALL_HINT}; "
            "redis-server: scripts/test installs it",
            file=sys.stderr,
        )
        return 2
    nginx = nginx_binary()
    assert nginx is not None
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="clusterbench-", dir=args.dir))
    work.chmod(0o755)  # nginx's workers may run as another user: they must read the tree
    t0 = time.perf_counter()
    runs: list[ConfigRun] = []
    try:
        bench = Bench(plan, work, nginx, log=not args.json)
        with DnsThread(bench.shape.dns_table()) as dns:
            bench.prepare(dns)
            for cfg in plan.configs:
                runs.append(bench.run(cfg))
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
    return 0 if all(r.rate.pages and not r.log_tail for r in runs) else 1
