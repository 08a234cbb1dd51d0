"""Writing out the state directory's dirty data ahead of a checkpoint (Manager's presync,
store.durable.sync_filesystem): once per checkpoint, TUNING.presync_lead_s before it falls due,
in a thread, never two at once.

A real Manager on a temp state dir with a hand-driven clock; nothing is fetched.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drumbeat.manager import TUNING
from drumbeat.manager.checkpointer import Laps
from drumbeat.store.durable import sync_filesystem
from drumbeat.testing import FakeClock, offline_manager


def test_sync_filesystem_syncs_an_existing_path_and_names_a_missing_one(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100_000)
    sync_filesystem(tmp_path)
    sync_filesystem(tmp_path / "f")
    with pytest.raises(OSError) as e:
        sync_filesystem(tmp_path / "missing")
    assert "missing" in str(e.value)


def test_a_presync_starts_once_per_checkpoint_just_before_it_falls_due(tmp_path: Path) -> None:
    asyncio.run(_presync_once_per_checkpoint(tmp_path))


async def _presync_once_per_checkpoint(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    async with offline_manager(tmp_path, clock=clock, checkpoint_interval_s=60.0) as manager:
        due = manager.checkpointer.last_checkpoint + 60.0
        manager.checkpointer.presync_if_due(due - TUNING.presync_lead_s - 0.1)
        assert manager.checkpointer.presync is None  # too early

        manager.checkpointer.presync_if_due(due - TUNING.presync_lead_s)
        first = manager.checkpointer.presync
        assert first is not None
        manager.checkpointer.presync_if_due(due - 1.0)
        assert manager.checkpointer.presync is first  # not twice while one runs
        await first  # the real sync, in a thread: it succeeds
        manager.checkpointer.presync_if_due(due - 0.5)
        assert manager.checkpointer.presync is first  # nor twice for one checkpoint

        clock.now = due
        manager.checkpointer.commit(Laps())()  # the next one falls due an interval later
        next_due = manager.checkpointer.last_checkpoint + 60.0
        manager.checkpointer.presync_if_due(next_due - TUNING.presync_lead_s - 0.1)
        assert manager.checkpointer.presync is first
        manager.checkpointer.presync_if_due(next_due - TUNING.presync_lead_s)
        assert manager.checkpointer.presync is not first
        await manager.checkpointer.presync


def test_no_presync_where_checkpoints_come_often(tmp_path: Path) -> None:
    asyncio.run(_no_presync_when_often(tmp_path))


async def _no_presync_when_often(tmp_path: Path) -> None:
    interval = 2 * TUNING.presync_lead_s - 0.5
    async with offline_manager(tmp_path, checkpoint_interval_s=interval) as manager:
        for before in (TUNING.presync_lead_s, 1.0, 0.0):
            cp = manager.checkpointer
            cp.presync_if_due(cp.last_checkpoint + interval - before)
        assert manager.checkpointer.presync is None
