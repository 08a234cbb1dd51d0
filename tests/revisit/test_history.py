from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drumbeat.drum import Drum
from drumbeat.parse.simhash import simhash
from drumbeat.revisit.history import RECORD, HistoryStore, change_stats, fold, hints, visit


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


def _events(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """``n`` URLs' ``k``-th events: visits with digests, simhashes (some none) and
    Last-Modified dates (some none), or sitemap lastmods (no visit), times rising in k."""
    t = np.sort(rng.uniform(0, 100, n)) + k * 100
    simh = rng.integers(1, 1 << 62, n, dtype=np.uint64)
    simh[rng.random(n) < 0.3] = 0
    mod = np.where(rng.random(n) < 0.5, t - rng.uniform(0, 150, n), 0.0)
    out = visit(t, rng.integers(1, 3, n, dtype=np.uint64), modified_s=mod, simhashes=simh)
    hint = rng.random(n) < 0.3
    out[hint] = hints(t[hint] - rng.uniform(0, 150, int(hint.sum())))
    return out


def test_fold_with_simhashes_dates_and_lastmods_is_associative() -> None:
    rng = np.random.default_rng(2)
    n = 2000
    a, b, c = (_events(rng, n, k) for k in range(3))
    left, right = fold(fold(a, b), c), fold(a, fold(b, c))
    for name in RECORD.names or ():
        np.testing.assert_allclose(left[name], right[name], err_msg=name)


def _text(words: list[str]) -> int:
    h = simhash(" ".join(words))
    assert h is not None
    return h


def test_a_change_is_one_beyond_near_duplicate_distance_when_both_have_a_simhash() -> None:
    words = [f"w{i}" for i in range(400)]
    base = _text(words)
    near = _text([*words[:-4], *(f"edited{i}" for i in range(4))])  # 4 words of 400
    far = _text([f"x{i}" for i in range(400)])
    assert 0 < bin(base ^ near).count("1") <= 3 < bin(base ^ far).count("1")
    first = visit([0.0], [11], simhashes=[base])
    cases = [  # (the next visit's digest, its simhash, counted as a change)
        (12, near, False),  # another payload, the same page to a reader
        (13, far, True),
        (11, 0, False),  # no simhash (a 304, say): the digests decide
        (14, 0, True),
    ]
    for digest, later, change in cases:
        h = fold(first, visit([10.0], [digest], simhashes=[later]))[0]
        assert (h["changes"], h["unchanged_s"]) == ((1, 0.0) if change else (0, 10.0))
    # Where near-duplicates must be exact (near_dup_distance 0), the edit is a change.
    h = fold(first, visit([10.0], [12], simhashes=[near]), near=0)[0]
    assert h["changes"] == 1


def test_dated_changes_and_sitemap_lastmods_in_the_history(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h", fsync=False, near_bits=0)
    # URL 1: a lastmod before its first visit, its visit at 100, a newer lastmod (150),
    # then a visit at 200 that sees a change: dated at 150 (50 s known unchanged).
    store.record([1], hints([40.0]), [b"hint"])
    store.record([1], visit([100.0], [5]), [b"v1"])
    store.record([1], hints([150.0]), [b"hint"])
    store.record([1], visit([200.0], [6]), [b"v2"])
    # URL 2: its Last-Modified dates the change; a stale one (before the visit before)
    # and one in the future say nothing.
    store.record([2, 2], visit([100.0, 200.0], [5, 6], modified_s=[0.0, 180.0]), [b"", b""])
    store.record([2], visit([300.0], [7], modified_s=[150.0]), [b""])
    store.record([2], visit([400.0], [8], modified_s=[500.0]), [b""])
    store.flush()
    taken = list(store.take())
    assert [v.before_visits for v in taken] == [0, 0, 1, 1, 0, 1, 2, 3]
    one = taken[3].history
    assert (one["visits"], one["changes"], one["dated"]) == (2, 1, 1)
    assert (one["dated_s"], one["since_s"], one["sitemap_s"]) == (100.0, 50.0, 150.0)
    seen = change_stats(one)
    assert (seen.dated, seen.dated_s, seen.since_s, seen.changed_s) == (1, 100.0, 50.0, 100.0)
    two = taken[-1].history
    assert (two["visits"], two["changes"], two["dated"], two["since_s"]) == (4, 3, 1, 20.0)


def test_a_history_of_an_older_record_layout_starts_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = np.dtype([(name, RECORD[name]) for name in RECORD.names[:10]])  # 72 bytes
    drum = Drum(tmp_path / "h", value_dtype=old, merge="overwrite", fsync=False)
    drum.check_update(np.array([3], np.uint64), np.zeros(1, old), aux=[b""])
    drum.flush()
    manifest = drum.commit()
    drum.close()
    store = HistoryStore(tmp_path / "h", fsync=False, manifest=manifest)
    assert "starting it anew" in caplog.text
    store.record([3], visit([1.0], [1]), [b""])
    store.flush()
    (v,) = store.take()
    assert v.before is None and v.history["visits"] == 1
    store.close()
