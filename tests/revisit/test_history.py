from __future__ import annotations

from pathlib import Path

import numpy as np

from drumbeat.revisit.history import RECORD, HistoryStore, change_stats, fold, visit


def test_fold_is_associative_as_drums_merge_needs() -> None:
    rng = np.random.default_rng(1)
    n = 500
    a, b, c = (
        visit(np.sort(rng.uniform(0, 100, n)) + k * 100, rng.integers(1, 3, n, dtype=np.uint64))
        for k in range(3)
    )
    left, right = fold(fold(a, b), c), fold(a, fold(b, c))
    for name in RECORD.names or ():
        np.testing.assert_allclose(left[name], right[name])


def test_visits_fold_into_a_history(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h", fsync=False)
    # URL 1: digest 5 at t=10 and 20 (no change), 7 at t=50 (a change, 30 s interval)
    store.record([1, 2, 1], visit([10.0, 10.0, 20.0], [5, 6, 5]), [b"a", b"b", b"c"])
    store.flush()
    first = list(store.take())
    assert [(v.fingerprint, v.payload, v.before is None) for v in first] == [
        (1, b"a", True),
        (2, b"b", True),
        (1, b"c", False),
    ]
    store.record([1], visit([50.0], [7], etags=[99], modified_s=[1.7e9]), [b"d"])
    store.flush()
    (last,) = store.take()
    h = last.history
    assert (h["first_s"], h["last_s"], h["visits"], h["changes"]) == (10.0, 50.0, 3, 1)
    assert (h["digest"], h["etag"], h["modified_s"]) == (7, 99, 1.7e9)
    seen = change_stats(h)
    assert (seen.intervals, seen.changed, seen.changed_s, seen.unchanged_s) == (2, 1, 30, 10)
    assert last.before is not None and last.before["visits"] == 2
    assert store.urls == 2


def test_history_reopens_at_its_commit(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h", fsync=False)
    store.record([3], visit([1.0], [1]), [b""])
    store.flush()
    list(store.take())
    manifest = store.commit()
    store.record([3], visit([2.0], [2]), [b""])  # not committed: lost on reopening
    store.close()
    again = HistoryStore(tmp_path / "h", fsync=False, manifest=manifest)
    again.record([3], visit([4.0], [1]), [b""])
    again.flush()
    (v,) = again.take()
    assert (v.history["visits"], v.history["changes"], v.history["unchanged_s"]) == (2, 0, 3.0)
