"""Writing out the state directory's dirty data ahead of a checkpoint (Manager's presync,
store.durable.sync_filesystem): once per checkpoint, PRESYNC_LEAD_S before it falls due,
in a thread, never two at once.

A real Manager on a temp state dir with a hand-driven clock; nothing is fetched.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drumbeat.bench.offline_manager import offline_manager
from drumbeat.manager import PRESYNC_LEAD_S
from drumbeat.store.durable import sync_filesystem


def test_sync_filesystem_syncs_an_existing_path_and_names_a_missing_one(
        tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100_000)
    sync_filesystem(tmp_path)
    sync_filesystem(tmp_path / "f")
    with pytest.raises(OSError) as e:
        sync_filesystem(tmp_path / "missing")
    assert "missing" in str(e.value)


def test_a_presync_starts_once_per_checkpoint_just_before_it_falls_due(
        tmp_path: Path) -> None:
    asyncio.run(_presync_once_per_checkpoint(tmp_path))


async def _presync_once_per_checkpoint(tmp_path: Path) -> None:
    clock = [1000.0]
    async with offline_manager(tmp_path, clock=lambda: clock[0],
                               checkpoint_interval_s=60.0) as manager:
        due = manager._last_checkpoint + 60.0
        manager._presync_if_due(due - PRESYNC_LEAD_S - 0.1)
        assert manager._presync is None  # too early

        manager._presync_if_due(due - PRESYNC_LEAD_S)
        first = manager._presync
        assert first is not None
        manager._presync_if_due(due - 1.0)
        assert manager._presync is first  # not twice while one runs
        await first  # the real sync, in a thread: it succeeds
        manager._presync_if_due(due - 0.5)
        assert manager._presync is first  # nor twice for one checkpoint

        clock[0] = due
        manager.checkpoint()  # the next one falls due an interval later
        next_due = manager._last_checkpoint + 60.0
        manager._presync_if_due(next_due - PRESYNC_LEAD_S - 0.1)
        assert manager._presync is first
        manager._presync_if_due(next_due - PRESYNC_LEAD_S)
        assert manager._presync is not first
        await manager._presync


def test_no_presync_where_checkpoints_come_often(tmp_path: Path) -> None:
    asyncio.run(_no_presync_when_often(tmp_path))


async def _no_presync_when_often(tmp_path: Path) -> None:
    interval = 2 * PRESYNC_LEAD_S - 0.5
    async with offline_manager(tmp_path, checkpoint_interval_s=interval) as manager:
        for before in (PRESYNC_LEAD_S, 1.0, 0.0):
            manager._presync_if_due(manager._last_checkpoint + interval - before)
        assert manager._presync is None
