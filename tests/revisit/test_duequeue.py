from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from drumbeat.revisit.duequeue import FANOUT, DueQueue


def test_entries_come_out_when_due_and_not_before(tmp_path: Path) -> None:
    rng = random.Random(1)
    queue = DueQueue(tmp_path / "q", slot_s=60.0, levels=4, fsync=False)
    entries = [(rng.uniform(0, 3e6), i, b"u%d" % i) for i in range(5000)]
    queue.extend(entries)
    assert len(queue) == 5000
    got: dict[int, tuple[float, bytes]] = {}
    now = 0.0
    while now < 3.1e6:
        now += 997.0
        for e in queue.pop(10_000, now):
            assert e.due_s < (math.floor(now / 60) + 1) * 60  # never before its tick
            assert e.due_s > now - 997 - 60  # and not late: it was not due at the last pop
            got[e.fingerprint] = (e.due_s, e.payload)
        assert queue.stats().slots <= FANOUT * 4  # bounded: no slot per tick
    assert got == {i: (due, p) for due, i, p in entries}
    assert len(queue) == 0


def test_a_past_due_entry_is_ready_at_once_and_far_ones_wait(tmp_path: Path) -> None:
    queue = DueQueue(tmp_path / "q", slot_s=10.0, now_s=1000.0, levels=2, fsync=False)
    queue.push(5.0, 1, b"old")
    queue.push(1e9, 2, b"far")  # beyond the top level's window: parked in its last slot
    assert [e.payload for e in queue.pop(10, 1000.0)] == [b"old"]
    assert queue.pop(10, 1e8) == []
    assert [e.payload for e in queue.pop(10, 1e9)] == [b"far"]


def test_early_pop_takes_the_next_due(tmp_path: Path) -> None:
    queue = DueQueue(tmp_path / "q", slot_s=10.0, fsync=False)
    queue.extend([(500.0, 1, b""), (90_000.0, 2, b""), (100.0, 3, b"")])
    assert queue.pop(2, 0.0) == []
    assert [e.fingerprint for e in queue.pop(2, 0.0, early=True)] == [3, 1]


def test_reopens_at_its_commit(tmp_path: Path) -> None:
    queue = DueQueue(tmp_path / "q", slot_s=10.0, fsync=False)
    queue.extend([(float(t), t, b"x") for t in range(0, 100_000, 500)])
    queue.pop(5, 1000.0)
    state = queue.commit()
    queue.pop(50, 30_000.0)  # taken after the commit: given again after reopening
    queue.close()
    again = DueQueue(tmp_path / "q", slot_s=10.0, state=state, fsync=False)
    assert len(again) == 200 - 3
    assert [e.fingerprint for e in again.pop(1000, 1e6)] == list(range(1500, 100_000, 500))


def test_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        DueQueue(tmp_path / "q", slot_s=0)
    queue = DueQueue(tmp_path / "q", fsync=False)
    with pytest.raises(ValueError):
        queue.push(math.inf, 1)


def test_the_commit_before_the_last_still_reopens(tmp_path: Path) -> None:
    # A checkpoint's commits go live only once its files are written: a crash before
    # then restores the one before, whose FIFOs may have been read out since.
    q = DueQueue(tmp_path / "due", slot_s=1.0, now_s=0.0, fsync=False)
    q.extend([(0.5, 1, b"a"), (5.0, 2, b"b"), (40.0, 3, b"c")])
    before = q.commit()
    assert [e.fingerprint for e in q.pop(10, 10.0)] == [1, 2]
    q.commit()
    q.close()
    again = DueQueue(tmp_path / "due", slot_s=1.0, state=before, fsync=False)
    assert len(again) == 3
    assert [e.fingerprint for e in again.pop(10, 100.0)] == [1, 2, 3]
    again.close()
