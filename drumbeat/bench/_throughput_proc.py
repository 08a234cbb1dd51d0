"""A crawler as a child process, measured: CPU from ``wait4``, peak RSS of its process tree.

CPU is the child's ``wait4`` rusage (user + system), which includes every descendant the
child waited for (fetcher processes are joined before a crawl exits). RSS is sampled
every ``interval_s`` from ``/proc/<pid>/status`` (``VmRSS``) of the child and all its
descendants and summed; the peak is the largest sum (shared pages count once per
process, as ``ps`` shows them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_INTERVAL_S = 0.5
_KILL_GRACE_S = 15.0  # after SIGTERM at the time limit, SIGKILL
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Usage:
    exit_code: int
    started_at: float  # epoch seconds
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int
    max_processes: int
    timed_out: bool


def per_page_us(stages: dict[str, Any], part: str = "seconds") -> dict[str, float]:
    """A crawl's stages.json ``part`` of CPU seconds ("seconds": by stage, "cpu_s": by
    process) as µs a page over the pages it counted; {} where it counted none."""
    pages = stages.get("pages") or 0
    if not pages:
        return {}
    return {k: 1e6 * v / pages for k, v in stages.get(part, {}).items()}


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # The command name may hold spaces and parentheses: fields follow the last ")".
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    children = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_s(
    root: int, children: dict[int, list[int]] | None = None, *, include_root: bool = True
) -> float:
    """CPU seconds (user + system) of ``root``'s live process tree, from ``/proc/<pid>/stat``:
    each process's own time and its reaped children's, so a child that exits and is waited
    for keeps counting (in its parent). ``include_root=False``: the descendants only.
    ``children`` is a :func:`children_map` to reuse across several roots."""
    children = _children_map() if children is None else children
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        if pid == root and not include_root:
            continue
        total += _stat_ticks(f"/proc/{pid}/stat", 4)  # utime stime cutime cstime
    return total / _CLOCK_TICKS


def thread_cpu_s(pid: int, tid: int) -> float:
    """CPU seconds (user + system) of thread ``tid`` of process ``pid`` (0 once gone)."""
    return _stat_ticks(f"/proc/{pid}/task/{tid}/stat", 2) / _CLOCK_TICKS  # utime stime


def _stat_ticks(path: str, count: int) -> int:
    """The sum of the first ``count`` CPU times (clock ticks: utime, stime, cutime,
    cstime) in a ``/proc`` stat file; 0 where it is gone (the process exited meanwhile)."""
    try:
        with open(path, "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return sum(int(x) for x in fields[11 : 11 + count])


def children_map() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, for every process now."""
    return _children_map()


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0  # exited, or a zombie (no VmRSS line)


class TreeSampler:
    """Samples the summed RSS of ``root``'s process tree from a thread until ``stop``."""

    def __init__(self, root: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.root = root
        self.interval_s = interval_s
        self.peak_rss_bytes = 0
        self.max_processes = 0
        self.pids: list[int] = []  # the tree at the last sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = process_tree(self.root)
            rss = [r for r in map(_rss_bytes, pids) if r]
            self.pids = pids
            self.peak_rss_bytes = max(self.peak_rss_bytes, sum(rss))
            self.max_processes = max(self.max_processes, len(rss))
            self._stop.wait(self.interval_s)


def run_measured(
    cmd: Sequence[str],
    *,
    log_path: Path,
    limit_s: float,
    during: Callable[[TreeSampler], None] | None = None,
) -> Usage:
    """Run ``cmd`` (stdout and stderr to ``log_path``) to its end and measure it.

    At ``limit_s`` the child's process group gets SIGTERM, ``_KILL_GRACE_S`` later SIGKILL.
    ``during(sampler)`` runs in this thread while the child runs (e.g. to profile it)."""
    started_at, started = time.time(), time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    timed_out = threading.Event()

    def terminate(sig: int) -> None:
        timed_out.set()
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    timers = [
        threading.Timer(limit_s, terminate, (signal.SIGTERM,)),
        threading.Timer(limit_s + _KILL_GRACE_S, terminate, (signal.SIGKILL,)),
    ]
    sampler = TreeSampler(proc.pid)
    sampler.start()
    for t in timers:
        t.daemon = True
        t.start()
    try:
        if during is not None:
            during(sampler)
        _, status, rusage = os.wait4(proc.pid, 0)
    finally:
        for t in timers:
            t.cancel()
        sampler.stop()
    # wait4 reaped the child: tell Popen so it does not wait for it again.
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Usage(
        exit_code=proc.returncode,
        started_at=started_at,
        wall_s=time.monotonic() - started,
        cpu_s=rusage.ru_utime + rusage.ru_stime,
        peak_rss_bytes=sampler.peak_rss_bytes,
        max_processes=sampler.max_processes,
        timed_out=timed_out.is_set(),
    )


class ApiPoller:
    """A client of a running crawl's control API, as a dashboard left open would be: once
    a second, GET /api/status, /api/hosts?top=20 and /metrics, from a thread, until
    :meth:`stop` or the crawl's server closes. It waits for ``state/web.json`` (the crawl
    writes it at start and removes it before it closes its server: a call that fails
    after that is the crawl's end, not a failure)."""

    PATHS = ("/api/status", "/api/hosts?top=20", "/metrics")

    def __init__(self, state: Path, interval_s: float = 1.0) -> None:
        self.state = state
        self.interval_s = interval_s
        self.rounds = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="api-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from drumbeat.web import WEB_JSON
        from drumbeat.web.client import CtlError, find

        while not self._stop.wait(self.interval_s):
            try:
                url, token = find(self.state)
            except CtlError:
                continue  # not started yet
            self.rounds += 1
            for path in self.PATHS:
                req = urllib.request.Request(url + path)
                req.add_header("Authorization", f"Bearer {token}")
                try:
                    with urllib.request.urlopen(req, timeout=5.0) as resp:
                        resp.read()
                except OSError:  # URLError and HTTPError are OSErrors
                    if not (self.state / WEB_JSON).exists():
                        return  # the crawl closed its server (web.json goes first): done
                    self.failed += 1
