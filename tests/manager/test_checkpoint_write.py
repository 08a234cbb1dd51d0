"""A periodic checkpoint commits in the manager's loop and writes its files in a thread
while the crawl goes on (Checkpointer.synced): it holds the moment of its
commits, goes live once written, and no other starts before it is.

A real Manager on a temp state dir with a hand-driven clock; nothing is fetched.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from drumbeat.frontier.star import Star
from drumbeat.testing import FakeClock, offline_manager


def test_a_checkpoint_is_written_in_a_thread_as_it_was_committed(tmp_path: Path) -> None:
    asyncio.run(_written_in_a_thread(tmp_path))


async def _written_in_a_thread(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    async with offline_manager(tmp_path, clock=clock, checkpoint_interval_s=60.0) as manager:
        live = manager.checkpoints.current()
        release, writing_in = threading.Event(), []
        write = manager.checkpoints.write

        def held_write(*args):  # type: ignore[no-untyped-def]
            writing_in.append(threading.current_thread())
            assert release.wait(10)
            return write(*args)

        manager.checkpoints.write = held_write  # type: ignore[method-assign]
        manager.star.observe(["before.test"], [50])
        manager.counters["marker"] = 1
        clock.now += 60.0
        assert manager.checkpointer.due(clock())
        await manager.checkpointer.synced()  # returns with the files still to write
        pending = manager.checkpointer.writing
        assert pending is not None and not pending.done()
        assert manager.checkpoints.current() == live
        # The crawl goes on meanwhile; none of this is in the checkpoint being written.
        manager.star.observe(["after.test"], [70])
        manager.counters["marker"] = 2
        clock.now += 600.0
        assert not manager.checkpointer.due(clock())  # not while one is being written

        release.set()
        path = await pending
        assert writing_in and writing_in[0] is not threading.main_thread()
        assert manager.checkpoints.current() == path != live
        assert manager.checkpoints.read_meta(path).counters["marker"] == 1
        table = json.loads((path / Star.FILE).read_text())
        assert "before.test" in table and "after.test" not in table
        assert manager.checkpointer.due(clock())
        assert manager.checkpointer.writing is None

        # The last one, at a stop, is written before it returns.
        await manager.checkpointer.synced(final=True)
        final = manager.checkpoints.current()
        assert final != path and manager.checkpoints.read_meta(final).counters["marker"] == 2


def test_a_checkpoints_commits_leave_their_fsyncs_to_its_writer_thread(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The commits in the loop fsync nothing; the writer thread syncs their filesystem
    before the checkpoint goes live, and the checkpoint reopens with what was queued."""
    asyncio.run(_fsyncs_in_the_writer(tmp_path, monkeypatch))


async def _fsyncs_in_the_writer(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    from drumbeat.store import durable

    fsynced_in: list[threading.Thread] = []
    synced_in: list[threading.Thread] = []
    fsync, sync = os.fsync, durable.DeferredSyncs.sync

    def recorded_fsync(fd: int) -> None:
        fsynced_in.append(threading.current_thread())
        fsync(fd)

    def recorded_sync(self):  # type: ignore[no-untyped-def]
        synced_in.append(threading.current_thread())
        assert len(self) >= 1  # the state directory's filesystem
        sync(self)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(durable.DeferredSyncs, "sync", recorded_sync)
    clock = FakeClock(1000.0)
    async with offline_manager(tmp_path, clock=clock, checkpoint_interval_s=60.0) as manager:
        manager.admission.admit(
            [f"http://site{i}.test/p/{j}" for i in range(20) for j in range(50)], 1, None
        )
        manager.stores.seen.flush()
        manager.admission.take_new_urls(clock())  # into BEAST's queues
        manager.crawl_log.append_drop(clock(), "http://dropped.test/", 1, None, "marker")
        live = manager.checkpoints.current()
        clock.now += 60.0
        fsynced_in.clear()
        await manager.checkpointer.synced()  # the commits, in the loop
        assert threading.main_thread() not in fsynced_in
        path = await manager.checkpointer.writing  # type: ignore[misc]
        assert synced_in and synced_in[0] is not threading.main_thread()
        assert manager.checkpoints.current() == path != live
        assert manager.stats().queued == 1_000
    async with offline_manager(tmp_path, checkpoint_interval_s=60.0) as again:
        assert again.stats().queued == 1_000


def test_the_writer_naps_between_chunks_of_rows_and_writes_every_one() -> None:
    """The writer thread lets the loop have the GIL (LoopTuning.checkpoint_rows_awake): a nap after
    each whole chunk of rows, none after a part chunk, no row lost or reordered."""
    from drumbeat.manager.checkpointer import napping

    naps: list[float] = []
    assert list(napping(range(2_500), 1_000, 0.001, sleep=naps.append)) == list(range(2_500))
    assert naps == [0.001, 0.001]
    naps.clear()
    assert list(napping(iter(range(2_000)), 1_000, 0.002, sleep=naps.append)) == list(range(2_000))
    assert naps == [0.002, 0.002]
    assert list(napping([], 1_000, 0.001, sleep=naps.append)) == []
