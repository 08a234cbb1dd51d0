"""The standalone deployment: one manager, its fetchers on this machine, one state dir.

State directory layout::

    DIR/lock               held (flock) while a crawl runs: one crawl per directory
    DIR/checkpoints/       the manager's checkpoints (see checkpoint.py)
    DIR/journal/           the fetches done since the last checkpoint (manager/journal.py)
    DIR/warc/              WARC 1.1 files, gzip per record
    DIR/crawl.log          JSON lines, one per fetch attempt or dropped URL
    DIR/drumbeat.log       diagnostics (INFO and above)
    DIR/stages.json        where the last run's time went, per stage (written at its end)
    DIR/runs.jsonl         where each run began in crawl.log, and its clean end (store.summary)
    DIR/refused_seeds.jsonl  seeds to try again on the next run (see seedrefusals.py)
    DIR/blocks.json        the operator's blocks (manager/controls.py)
    DIR/web.json, DIR/web.token  the control API's address and token (drumbeat.web)

Fetching runs in ``fetchers`` child processes (one per core by default), or on the
manager's own event loop when ``fetchers`` is 0.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import re
import signal
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drumbeat import compiled_modules
from drumbeat.queue.base import Inbox, ManagerQueue
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.queue.process import ProcessTaskQueue, WorkerFailed
from drumbeat.runtime import allocator
from drumbeat.settings import Settings, SettingsError, save_for_resume
from drumbeat.store.seedrefusals import SeedRefusals, SeedWatchingLog
from drumbeat.store.summary import CRAWL_LOG_NAME, note_run_end, note_run_start
from drumbeat.store.warc import WarcWriter, recover_directory
from drumbeat.web.address import WebAddress

if TYPE_CHECKING:
    from drumbeat.manager import Manager
    from drumbeat.progress import Progress
    from drumbeat.web.server import WebServer

STAGES_NAME = "stages.json"
# The manager's event loop hands out all work, and it wakes often for little (a batch of
# results, a task sent); its background threads (DRUM merges, the checkpoint's writer)
# run Python for tenths of a second. Each wake then waits for the GIL up to the switch
# interval, 5 ms by default, and the fetchers wait for the loop: a tenth of that keeps the
# loop answering beside a busy thread at a small cost to the thread (``drumbeat bench gil``;
# docs/benchmarks.md).
MANAGER_SWITCH_INTERVAL_S = 0.0005

log = logging.getLogger("drumbeat")


class CrawlError(RuntimeError):
    """The crawl could not run (not a crawl that ran into bad input)."""


@dataclass(frozen=True)
class CrawlOutcome:
    stop_reason: str
    resumed: bool
    pages_done: int
    queued: int
    state_dir: Path
    elapsed_s: float
    pages_this_run: int = 0
    seeds_refused: str | None = None  # one line on the seeds this run refused, if any
    all_seeds_refused: bool = False  # every seed tried this run was refused, none fetched


def read_seeds_file(path: Path) -> list[str]:
    """One URL per line (UTF-8, a byte order mark allowed); blank lines and lines starting
    with '#' are ignored."""
    try:
        lines = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()
    except OSError as e:
        raise SettingsError(f"setting 'seeds_file': cannot read {path}: {e.strerror}") from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_HOST_PORT = re.compile(r"[^:/?#]+:[0-9]+(?:[/?#]|$)")


def with_scheme(seed: str) -> str:
    """``seed`` with ``http://`` in front when it has no scheme, as wget and curl read
    ``example.org/a`` or ``localhost:8080``; a scheme other than http(s), such as
    ``mailto:``, is kept so that the seed is rejected naming it."""
    if "://" in seed:
        return seed
    if seed.startswith("//"):
        return "http:" + seed
    if _SCHEME.match(seed) and not _HOST_PORT.match(seed):
        return seed
    return "http://" + seed


@contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CrawlError(f"{state_dir} is in use by another drumbeat crawl") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def _setup_logging(state_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(state_dir / "drumbeat.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("drumbeat")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    return handler


@dataclass(frozen=True)
class Fetching:
    """How a manager reaches its fetchers: the task queue, what to sync before a
    checkpoint (in-process WARC files), the fetchers' stats, and a cluster's inbox."""

    queue: ManagerQueue
    durables: list[Callable[[], None]]
    stats: Callable[[], list[dict[str, Any]]]
    inbox: Inbox | None = None


FetchingFactory = Callable[[Settings, int], AbstractAsyncContextManager[Fetching]]


@dataclass(frozen=True)
class Deployment:
    """What differs between the standalone crawl and a cluster manager: where fetching
    happens (``fetching(settings, processes)``), which seeds this manager keeps, and a
    hook that sees the manager once built (a cluster publishes its figures)."""

    fetching: FetchingFactory
    keep_seed: Callable[[str], bool] | None = None
    on_manager: Callable[[Manager], None] | None = None
    local_fetchers: bool = True  # fetcher processes of this machine (settings.fetchers)


def run_crawl(
    settings: Settings, deployment: Deployment | None = None, web: WebAddress | None = None
) -> CrawlOutcome:
    """Run (or resume) the crawl in ``settings.state_dir`` until done, a limit, a signal
    or a stop through the control API.

    ``deployment``: the standalone one (fetchers on this machine) by default. ``web``:
    where to serve the control API and /metrics (drumbeat.web); None: nowhere."""
    deployment = deployment or Deployment(_fetching)
    state_dir = settings.state_dir
    if state_dir is None:
        raise SettingsError("setting 'state_dir' is required (--state DIR)")
    with _state_lock(state_dir):
        save_for_resume(settings)
        sys.setswitchinterval(MANAGER_SWITCH_INTERVAL_S)
        handler = _setup_logging(state_dir)
        try:
            try:
                import uvloop
            except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
                return asyncio.run(_crawl(settings, state_dir, deployment, web))
            return uvloop.run(_crawl(settings, state_dir, deployment, web))
        finally:
            logging.getLogger("drumbeat").removeHandler(handler)
            handler.close()


async def _crawl(
    settings: Settings, state_dir: Path, deployment: Deployment, web: WebAddress | None
) -> CrawlOutcome:
    started = time.monotonic()
    warc_dir = state_dir / "warc"
    warc_dir.mkdir(exist_ok=True)
    for rec in recover_directory(warc_dir):
        log.warning("recovered WARC file after a crash: %s", rec)
    log_path = state_dir / CRAWL_LOG_NAME
    crawl_log = SeedWatchingLog(log_path)
    if crawl_log.repaired_bytes:
        log.warning("cut a torn last line (%d bytes) off crawl.log", crawl_log.repaired_bytes)
    note_run_start(state_dir, log_path.stat().st_size)
    refusals = crawl_log.refusals = SeedRefusals(state_dir)
    try:
        outcome = await _run(settings, state_dir, crawl_log, refusals, started, deployment, web)
    except BaseException:
        refusals.close()
        raise
    finally:
        crawl_log.close()
    refusals.finish()  # closes its file too
    note_run_end(state_dir)
    return outcome


async def _run(
    settings: Settings,
    state_dir: Path,
    crawl_log: SeedWatchingLog,
    refusals: SeedRefusals,
    started: float,
    deployment: Deployment,
    web: WebAddress | None = None,
) -> CrawlOutcome:
    fetchers = settings.fetcher_processes() if deployment.local_fetchers else 0
    async with deployment.fetching(settings, fetchers) as fetching:
        # The manager's modules are imported once the fetcher processes are started, so
        # that those import theirs meanwhile: a crawl's first request comes sooner.
        from drumbeat.manager import Manager

        fetcher_stats = fetching.stats
        manager = Manager(
            settings,
            fetching.queue,
            crawl_log,
            durables=[*fetching.durables, refusals.sync],
            journal_syncs=fetching.durables,
            inbox=fetching.inbox,
        )
        if deployment.on_manager is not None:
            deployment.on_manager(manager)
        try:
            start = _begin(settings, state_dir, manager, refusals, deployment, fetchers)
            reason, progress = await _drive(settings, state_dir, manager, web)
        finally:
            await manager.dns.close()
    # The fetchers have stopped: their last stats are in.
    return _finish(
        state_dir,
        manager,
        refusals,
        start,
        fetchers=fetchers,
        fetcher_stats=fetcher_stats,
        progress=progress,
        reason=reason,
        started=started,
    )


@dataclass(frozen=True)
class _RunStart:
    """What a run's end reports against: whether it resumed, the pages done and the
    manager's CPU time when it began (stages.json counts this run's only), and the seeds
    it tried (the refused seeds' report)."""

    resumed: bool
    pages_before: int
    cpu_before: float
    tried: int


def _begin(
    settings: Settings,
    state_dir: Path,
    manager: Manager,
    refusals: SeedRefusals,
    deployment: Deployment,
    fetchers: int,
) -> _RunStart:
    """Restore the last checkpoint, add this run's seeds and log what the run starts from."""
    resumed = manager.restore()
    pages_before = manager.pages_done
    cpu_before = time.process_time()
    tried = _add_seeds(settings, manager, refusals, resumed, deployment.keep_seed)
    log.info(
        "%s crawl in %s with %d fetcher processes: %d seeds to try; malloc: %s; compiled: %s",
        "resuming" if resumed else "starting",
        state_dir,
        fetchers,
        tried,
        allocator.in_use(),
        ", ".join(compiled_modules()) or "none (pure Python)",
    )
    return _RunStart(resumed, pages_before, cpu_before, tried)


async def _drive(
    settings: Settings, state_dir: Path, manager: Manager, web: WebAddress | None
) -> tuple[str, Progress]:
    """Run the manager until it stops; its stop reason and the progress display.

    The first SIGINT or SIGTERM stops the crawl gracefully, a second one at once; the
    control API (when ``web``) and the progress display live as long as the run."""
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        manager.request_stop("signal", force=signals > 1)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    from drumbeat.progress import Progress

    server = None if web is None else await _serve(manager, state_dir, web)
    progress = Progress(settings, manager, sys.stderr)
    progress_task = asyncio.ensure_future(progress.run())
    try:
        reason = await manager.run()
    except WorkerFailed as e:
        raise CrawlError(str(e)) from None
    finally:
        if server is not None:
            await server.close()
        progress_task.cancel()
        await asyncio.gather(progress_task, return_exceptions=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return reason, progress


def _finish(
    state_dir: Path,
    manager: Manager,
    refusals: SeedRefusals,
    start: _RunStart,
    *,
    fetchers: int,
    fetcher_stats: Callable[[], list[dict[str, Any]]],
    progress: Progress,
    reason: str,
    started: float,
) -> CrawlOutcome:
    """Once the fetchers have stopped: write stages.json, the progress's last words and
    the refused seeds' report, and return what the run did."""
    pages = manager.pages_done - start.pages_before
    write_stages(
        state_dir / STAGES_NAME,
        manager,
        fetchers,
        fetcher_stats(),
        pages=pages,
        manager_cpu_s=time.process_time() - start.cpu_before,
    )
    progress.final()
    stats = manager.stats()
    report = refusals.report(start.tried)
    if report:
        log.warning("%s", report)
    return CrawlOutcome(
        reason,
        start.resumed,
        stats.pages_done,
        stats.queued + stats.in_flight,
        state_dir,
        time.monotonic() - started,
        pages,
        report,
        all_seeds_refused=bool(report)
        and len(refusals.refused) >= start.tried
        and pages == 0
        and reason == "done",
    )


async def _serve(manager: Manager, state_dir: Path, address: WebAddress) -> WebServer:
    """Start the control API (its address on stderr and in web.json)."""
    from drumbeat.web.server import WebServer

    server = WebServer(manager, state_dir, address)
    try:
        url = await server.start()
    except OSError as e:
        raise CrawlError(f"--web {address.host}:{address.port}: cannot listen: {e}") from None
    print(
        f"drumbeat: control API at {url} (token in {state_dir / 'web.token'})",
        file=sys.stderr,
    )
    log.info("control API at %s", url)
    return server


def _add_seeds(
    settings: Settings,
    manager: Manager,
    refusals: SeedRefusals,
    resumed: bool,
    keep: Callable[[str], bool] | None = None,
) -> int:
    """Send this run's seeds to URL-seen and earlier runs' refused seeds past it (see
    seedrefusals); returns how many seeds this run tries (``keep``: those of them this
    manager crawls, in a cluster)."""
    seeds = list(settings.seeds)
    if settings.seeds_file is not None:
        seeds += read_seeds_file(settings.seeds_file)
    seeds = [with_scheme(s) for s in seeds]
    known = len(manager.seeds)
    rejected = manager.add_seeds(seeds, keep)
    for line in rejected:
        print(f"drumbeat crawl: warning: seed {line}", file=sys.stderr)
    if not resumed and not manager.seeds:
        raise SettingsError(
            "no usable seed URLs: give http(s) URLs, --seeds FILE, "
            "or the state dir of a crawl to resume"
        )
    if refusals.pending:
        log.info("trying again %d seeds an earlier run refused", len(refusals.pending))
        manager.readmit(refusals.pending)
    mine = [u for u in manager.seeds[known:] if keep is None or keep(u)]
    return len(set(mine) | set(refusals.pending))


@asynccontextmanager
async def _fetching(settings: Settings, processes: int) -> AsyncIterator[Fetching]:
    """The task queue to the fetchers, the manager's durables, and the fetchers' stats.

    ``processes`` 0 runs one Fetcher on this event loop; otherwise that many fetcher
    processes (``python -m drumbeat.worker``) each write their own WARC files.
    """
    assert settings.state_dir is not None
    if processes > 0:
        try:
            env = allocator.preload_env(allocator.library(settings.allocator))
        except allocator.AllocatorMissing as e:
            raise SettingsError(str(e)) from None
        queue = ProcessTaskQueue(
            [sys.executable, "-m", "drumbeat.worker"], settings, processes, env=env
        )
        await queue.start()
        try:
            yield Fetching(queue, [], queue.worker_stats)
        finally:
            await queue.close()
        return
    # Only an in-process fetcher needs the fetcher's code (parsers, WARC writer, HTTP
    # client): a manager with fetcher processes starts sooner without it.
    from drumbeat.fetcher import CONTENT_INDEX_DIR, Fetcher, open_content_index, open_http

    local = LocalTaskQueue()
    http, dns = open_http(settings)
    warc = WarcWriter(
        settings.state_dir / "warc",
        max_file_bytes=settings.warc_max_file_bytes,
        gzip_level=settings.warc_gzip_level,
    )
    content = open_content_index(settings, settings.state_dir / CONTENT_INDEX_DIR)
    fetcher = Fetcher(settings, local, http, warc, content=content)
    running = asyncio.ensure_future(fetcher.run())

    def stats() -> list[dict[str, Any]]:
        s = fetcher.stats()
        return [
            {
                "name": fetcher.worker,
                "fetched": s.fetched,
                "errors": s.errors,
                "stage_s": s.stage_s,
                "cpu_s": 0.0,
                "allocator": allocator.in_use(),
                "compiled": compiled_modules(),
            }
        ]

    try:
        yield Fetching(local, [warc.sync], stats)
    finally:
        await local.close()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await http.close()
        await dns.close()
        warc.close()
        if content is not None:
            content.close()


def write_stages(
    path: Path,
    manager: Manager,
    fetchers: int,
    fetcher_stats: list[dict[str, Any]],
    *,
    pages: int,
    manager_cpu_s: float,
) -> None:
    """Write where this run's time went (``stages.json``; see ``drumbeat bench throughput``).

    ``seconds`` holds the time of each stage summed over processes: the fetchers' warc,
    parse, normalize and handoff; ``fetch`` is the rest of the fetchers' CPU time (HTTP
    and the event loop); the manager's urlseen, frontier, scheduling, results, crawl_log
    and handoff. With ``fetchers`` 0 everything ran in one process and ``fetch`` is what
    is left of that process's CPU time. ``allocator``: the malloc each process ran on;
    ``compiled``: the modules each ran compiled (see setup.py).
    ``switch_interval_s``: the manager's GIL switch interval (MANAGER_SWITCH_INTERVAL_S).
    ``stalls``: the manager's long loop turns (drumbeat.runtime.stalls).
    ``dispatch_latency``: from a host's delay passing to its next request's start, in
    ms (drumbeat.manager.dispatch; null where not measured: IP delays on).
    ``fetcher_processes``: each fetcher process's fetches and CPU seconds, of which
    ``startup_cpu_s`` before its first task, busiest first (a one-site crawl's
    connections each keep one busy: drumbeat.frontier.politeness, pipeline); none with
    ``fetchers`` 0.
    """
    seconds: defaultdict[str, float] = defaultdict(float)
    fetcher_cpu = 0.0
    for s in fetcher_stats:
        for stage, spent in s.get("stage_s", {}).items():
            seconds[stage] += spent
        fetcher_cpu += s.get("cpu_s", 0.0)
    fetcher_busy = sum(seconds.values())
    for stage, spent in manager.stage_s.items():
        seconds[stage] += spent
    handoff = getattr(manager.queue, "handoff_s", 0.0)
    seconds["handoff"] += handoff
    if fetchers == 0:
        seconds["fetch"] = max(0.0, manager_cpu_s - sum(seconds.values()))
    else:
        seconds["fetch"] = max(0.0, fetcher_cpu - fetcher_busy)
    doc = {
        "pages": pages,
        "fetchers": fetchers,
        "cpu_s": {"manager": round(manager_cpu_s, 3), "fetchers": round(fetcher_cpu, 3)},
        "allocator": {
            "manager": allocator.in_use(),
            "fetchers": sorted({s.get("allocator", "system") for s in fetcher_stats}),
        },
        "compiled": {
            "manager": compiled_modules(),
            "fetchers": sorted({m for s in fetcher_stats for m in s.get("compiled", [])}),
        },
        "seconds": {k: round(v, 4) for k, v in sorted(seconds.items())},
        "switch_interval_s": sys.getswitchinterval(),
        "stalls": manager.stalls.as_dict(),
        "dispatch_latency": manager.dispatch.latency_summary(),
        "fetcher_processes": sorted(
            (
                {
                    "fetched": s.get("fetched", 0),
                    "cpu_s": round(s.get("cpu_s", 0.0), 3),
                    "startup_cpu_s": round(s.get("startup_cpu_s", 0.0), 3),
                }
                for s in (fetcher_stats if fetchers else [])  # 0: all in this process
            ),
            key=lambda p: p["cpu_s"] - p["startup_cpu_s"],
            reverse=True,
        ),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
