"""A fetcher process: ``python -m drumbeat.worker``, started by the manager's ProcessTaskQueue.

It reads frames from stdin (see :mod:`drumbeat.queue.process`): first ``("init", (name,
settings))``, then tasks, sync requests and stop. It runs a :class:`drumbeat.fetcher.Fetcher`
with its own HTTP client and its own WARC file (named with its pid) in the crawl's
``warc/`` directory, and sends results, with the crawl-log lines, back on stdout. The WARC
file is fsynced off the event loop when the manager asks (each journal commit and
checkpoint) and, with the journal off, every WARC_SYNC_INTERVAL_S, so fetching never
waits for the disk.

It ignores SIGINT and SIGTERM: the manager decides when fetching stops (a Ctrl-C reaches
the whole process group). When stdin closes (the manager stopped or was killed), it
stops fetching, closes its WARC file and exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import Any

from drumbeat import compiled_modules
from drumbeat.fetch.client import HttpClient
from drumbeat.fetcher import CONTENT_INDEX_DIR, Fetcher, open_content_index, open_http
from drumbeat.queue.process import WorkerQueue, read_frame
from drumbeat.runtime import allocator
from drumbeat.runtime.gctune import tune_gc
from drumbeat.settings import Settings
from drumbeat.store.dedup import ContentIndex
from drumbeat.store.warc import WarcWriter

log = logging.getLogger("drumbeat.worker")

WARC_SYNC_INTERVAL_S = 1.0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Frames own the real stdout; anything else printed goes to stderr instead.
    frames_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(_serve(frames_out))
    return uvloop.run(_serve(frames_out))


async def _serve(frames_out: Any) -> int:
    reader, writer = await _open_pipes(frames_out)
    frame = await read_frame(reader)
    if frame is None:
        return 0
    kind, (name, settings) = pickle.loads(frame)
    assert kind == "init" and isinstance(settings, Settings)
    assert settings.state_dir is not None
    _log_to(settings.state_dir / "drumbeat.log", name)

    http, dns = open_http(settings)
    warc = WarcWriter(
        settings.state_dir / "warc",
        max_file_bytes=settings.warc_max_file_bytes,
        gzip_level=settings.warc_gzip_level,
    )
    fetcher, queue, content = _open_fetcher(settings, name, writer, http, warc)
    tune_gc()
    running = asyncio.ensure_future(fetcher.run())
    # With the journal on, the manager asks for a sync every journal_commit_s, which
    # keeps what a checkpoint's sync finds small: no periodic sync of our own then.
    syncing = asyncio.ensure_future(_sync_often(warc) if not settings.journal else _idle())
    # The sync requests being answered, in order: tasks keep coming in meanwhile (the
    # manager's journal asks every journal_commit_s).
    answering: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    answering.set_result(None)
    try:
        while True:
            frame = await read_frame(reader)
            if frame is None:
                break
            started = time.thread_time()
            kind, body = pickle.loads(frame)
            queue.handoff_s += time.thread_time() - started
            if kind == "tasks":
                queue.add_tasks(body)
            elif kind == "sync":
                queue.flush()  # the results written before it go to the manager first
                answering = asyncio.ensure_future(_answer_sync(warc, queue, body, answering))
            elif kind == "stop":
                break
    finally:
        await queue.close()
        running.cancel()
        syncing.cancel()
        await asyncio.gather(running, syncing, answering, return_exceptions=True)
        queue.flush(with_stats=True)  # the last stats
        warc.close()
        if content is not None:
            content.close()
        await http.close()
        await dns.close()
        try:
            await writer.drain()
        except ConnectionError:
            pass  # the manager is gone; nothing more to tell it
        writer.close()
    return 0


async def _open_pipes(frames_out: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams on the manager's pipes: frames in on stdin, frames out on ``frames_out``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, frames_out
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _log_to(path: Path, name: str) -> None:
    """Log INFO and above to the crawl's drumbeat.log, each line naming this process."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s %(name)s[{name}]: %(message)s")
    )
    logging.getLogger("drumbeat").addHandler(handler)
    logging.getLogger("drumbeat").setLevel(logging.INFO)


def _open_fetcher(
    settings: Settings, name: str, writer: asyncio.StreamWriter, http: HttpClient, warc: WarcWriter
) -> tuple[Fetcher, WorkerQueue, ContentIndex | None]:
    """This process's Fetcher, the queue it talks to the manager through (whose stats
    frames carry the fetcher's figures) and its content index, if any (close it)."""
    assert settings.state_dir is not None
    fetcher: Fetcher | None = None
    malloc, compiled = allocator.in_use(), compiled_modules()
    # The CPU this process spent starting (imports, the manager's settings): cpu_s less
    # this is what the crawl itself cost it.
    startup_cpu_s = time.process_time()

    def stats() -> dict[str, Any]:
        assert fetcher is not None
        s = fetcher.stats()
        return {
            "name": name,
            "pid": os.getpid(),
            "active": s.active,
            "fetched": s.fetched,
            "errors": s.errors,
            "stage_s": s.stage_s | {"handoff": queue.handoff_s},
            "cpu_s": time.process_time(),
            "startup_cpu_s": startup_cpu_s,
            "allocator": malloc,
            "compiled": compiled,
        }

    queue = WorkerQueue(writer, stats)
    content = open_content_index(settings, settings.state_dir / CONTENT_INDEX_DIR)
    fetcher = Fetcher(settings, queue, http, warc, worker=name, content=content)
    return fetcher, queue, content


async def _answer_sync(
    warc: WarcWriter, queue: WorkerQueue, seq: object, before: asyncio.Future[None]
) -> None:
    """fsync the WARC file off the event loop (fetching goes on), then confirm ``seq``
    after the requests before it; a failed sync is not confirmed (the manager waits for
    the confirmation, then goes on without it, warning)."""
    await before
    try:
        await warc.sync_off_loop()
    except OSError as e:
        log.error("WARC sync failed: %s", e)
        return
    queue.send(("synced", seq))


async def _idle() -> None:
    await asyncio.Event().wait()


async def _sync_often(warc: WarcWriter) -> None:
    """fsync the WARC file every WARC_SYNC_INTERVAL_S, off the event loop, so that the
    sync a checkpoint waits for finds little to write. (The kernel would write the bytes
    in 30 s or so; a checkpoint's fsync of that much took seconds, during which the
    manager dispatched nothing.)"""
    while True:
        await asyncio.sleep(WARC_SYNC_INTERVAL_S)
        try:
            await warc.sync_off_loop()
        except OSError as e:  # the checkpoint's own sync reports it, and is waited for
            log.warning("periodic WARC sync failed: %s", e)


if __name__ == "__main__":
    raise SystemExit(main())
