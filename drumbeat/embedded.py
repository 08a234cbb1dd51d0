"""The embedded deployment: one manager and one fetcher on one event loop, one state dir.

State directory layout::

    DIR/lock               held (flock) while a crawl runs: one crawl per directory
    DIR/checkpoints/       the manager's checkpoints (see checkpoint.py)
    DIR/warc/              WARC 1.1 files, gzip per record
    DIR/crawl.log          JSON lines, one per fetch attempt or dropped URL
    DIR/drumbeat.log       diagnostics (INFO and above)
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import HttpClient
from drumbeat.fetcher import Fetcher
from drumbeat.manager import Manager
from drumbeat.progress import Progress
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings, SettingsError, save_for_resume
from drumbeat.store.crawllog import CrawlLog
from drumbeat.store.warc import WarcWriter, recover_directory

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


def read_seeds_file(path: Path) -> list[str]:
    """One URL per line; blank lines and lines starting with '#' are ignored."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise SettingsError(f"setting 'seeds_file': cannot read {path}: {e.strerror}") from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


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


def run_crawl(settings: Settings) -> CrawlOutcome:
    """Run (or resume) the crawl in ``settings.state_dir`` until done, a limit, or a signal."""
    state_dir = settings.state_dir
    if state_dir is None:
        raise SettingsError("setting 'state_dir' is required (--state DIR)")
    with _state_lock(state_dir):
        save_for_resume(settings)
        handler = _setup_logging(state_dir)
        try:
            try:
                import uvloop
                runner = uvloop.run
            except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
                runner = asyncio.run
            return runner(_crawl(settings, state_dir))
        finally:
            logging.getLogger("drumbeat").removeHandler(handler)
            handler.close()


async def _crawl(settings: Settings, state_dir: Path) -> CrawlOutcome:
    started = time.monotonic()
    warc_dir = state_dir / "warc"
    warc_dir.mkdir(exist_ok=True)
    for rec in recover_directory(warc_dir):
        log.warning("recovered WARC file after a crash: %s", rec)
    crawl_log = CrawlLog(state_dir / "crawl.log")
    if crawl_log.repaired_bytes:
        log.warning("cut a torn last line (%d bytes) off crawl.log", crawl_log.repaired_bytes)
    warc = WarcWriter(warc_dir, max_file_bytes=settings.warc_max_file_bytes,
                      gzip_level=settings.warc_gzip_level)
    queue = LocalTaskQueue()
    policy = AddressPolicy(allow_loopback=settings.allow_loopback,
                           allow_private=settings.allow_private)
    # The fetcher's own resolver serves robots.txt redirects to other hosts only; page
    # fetches go to the IP the manager resolved.
    fetcher_dns = DnsCache(nameserver=settings.dns_server, timeout_s=settings.dns_timeout_s,
                           negative_ttl_s=settings.dns_negative_ttl_s)
    http = HttpClient(
        user_agent=settings.user_agent,
        policy=policy,
        resolver=fetcher_dns,
        max_connections=settings.concurrency,
        connect_timeout_s=settings.connect_timeout_s,
        read_timeout_s=settings.read_timeout_s,
        total_timeout_s=settings.total_timeout_s,
        max_body_bytes=settings.max_body_bytes,
        max_decoded_bytes=settings.max_decoded_bytes,
    )
    manager = Manager(settings, queue, crawl_log, durables=[warc.sync])
    fetcher = Fetcher(settings, queue, http, warc, crawl_log)
    try:
        resumed = manager.restore()
        seeds = list(settings.seeds)
        if settings.seeds_file is not None:
            seeds += read_seeds_file(settings.seeds_file)
        rejected = manager.add_seeds(seeds)
        for line in rejected:
            print(f"drumbeat crawl: warning: seed {line}", file=sys.stderr)
        if not resumed and not manager.seeds:
            raise SettingsError("no usable seed URLs: give http(s) URLs, --seeds FILE, "
                                "or the state dir of a crawl to resume")
        log.info("%s crawl in %s: %d seeds given, %d rejected",
                 "resuming" if resumed else "starting", state_dir, len(seeds), len(rejected))

        loop = asyncio.get_running_loop()
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            manager.request_stop("signal", force=signals > 1)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        fetch_task = asyncio.ensure_future(fetcher.run())
        progress = Progress(settings, manager, fetcher, sys.stderr)
        progress_task = asyncio.ensure_future(progress.run())
        try:
            reason = await manager.run()
        finally:
            progress_task.cancel()
            await queue.close()
            fetch_task.cancel()
            await asyncio.gather(fetch_task, progress_task, return_exceptions=True)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        progress.final()
        stats = manager.stats()
        return CrawlOutcome(reason, resumed, stats.pages_done, stats.queued + stats.in_flight,
                            state_dir, time.monotonic() - started)
    finally:
        await http.close()
        await fetcher_dns.close()
        await manager.dns.close()
        warc.close()
        crawl_log.close()
