"""The crawl's history rings (drumbeat.stats.History): buckets, wrap-around, the spans,
and the round trip through a checkpoint's directory."""

from __future__ import annotations

import numpy as np
import pytest

from drumbeat.stats import HISTORY_SERIES, RINGS, History
from drumbeat.testing import FakeClock

DAY = 86_400
START = 1_700_000_000.0  # an epoch second well past zero, minute- and hour-unaligned


def pages(h: History, span: str) -> list[int]:
    return h.span(span)["series"]["pages"]


def test_observe_counts_increases_into_every_ring():
    clock = FakeClock(START)
    h = History(clock=clock)
    h.observe((10, 0, 0, 0, 0))  # a baseline only: the totals this run started from
    assert pages(h, "hour") == []
    for _ in range(3):
        clock.advance(1)
        h.observe((h_total := 10 + 2 * (int(clock()) - int(START)), 0, 0, 0, 0))
    assert h_total == 16
    hour = h.span("hour")
    assert hour["period_s"] == 1 and hour["start"] == int(START) + 1
    assert hour["series"]["pages"] == [2, 2, 2]
    # The other rings hold the same counts in coarser buckets.
    assert sum(pages(h, "day")) == sum(pages(h, "month")) == sum(pages(h, "all")) == 6
    assert set(hour["series"]) == set(HISTORY_SERIES)


def test_totals_going_down_reset_the_baseline():
    clock = FakeClock(START)
    h = History(clock=clock)
    h.observe((100, 0, 0, 0, 0))
    clock.advance(1)
    h.observe((5, 0, 0, 0, 0))
    clock.advance(1)
    h.observe((8, 0, 0, 0, 0))
    assert sum(pages(h, "hour")) == 3


def test_rings_are_fixed_size_and_forget_the_oldest():
    clock = FakeClock(START)
    h = History(clock=clock)
    h.add((1, 0, 0, 0, 0))
    clock.advance(3599)
    h.add((1, 0, 0, 0, 0))
    assert len(pages(h, "hour")) == 3600 and sum(pages(h, "hour")) == 2
    clock.advance(1)  # the first second falls out of the hour
    assert sum(pages(h, "hour")) == 1 and len(pages(h, "hour")) == 3600
    clock.advance(2 * 3600)  # a gap longer than the ring: all zeros, same size
    h.add((0, 0, 0, 0, 0))
    assert pages(h, "hour") == [0] * 3600
    assert sum(pages(h, "day")) == 2  # still within the day
    clock.advance(40 * DAY)
    assert sum(pages(h, "month")) == 0 and sum(pages(h, "all")) == 2
    for ring in RINGS:
        assert len(h.span(ring.name)["series"]["pages"]) <= ring.slots


def test_days_are_kept_for_years():
    clock = FakeClock(START)
    h = History(clock=clock)
    for _ in range(400):
        h.add((1, 0, 0, 0, 0))
        clock.advance(DAY)
    all_ = h.span("all")
    assert all_["period_s"] == DAY and sum(all_["series"]["pages"]) == 400
    assert all_["start"] == int(START) // DAY * DAY


def test_an_unknown_span_is_refused():
    with pytest.raises(ValueError, match="hour, day, month, all"):
        History().span("week")


def test_saved_with_a_checkpoint_and_restored(tmp_path):
    clock = FakeClock(START)
    h = History(clock=clock)
    for i in range(5):
        h.add((i, 100 * i, i, 1, 0))
        clock.advance(1)
    save = h.saver()
    h.add((1000, 0, 0, 0, 0))  # after the saver was taken: not in the file
    save(tmp_path)
    assert (tmp_path / History.FILE).exists()

    again = History(clock=clock)
    assert again.load(tmp_path)
    assert again.span("hour") == {**h.span("hour"), "series": again.span("hour")["series"]}
    assert again.span("hour")["series"]["pages"] == [0, 1, 2, 3, 4, 0]
    assert sum(again.span("hour")["series"]["bytes"]) == 1000
    assert sum(again.span("day")["series"]["errors"]) == 5
    # A restart goes on counting from what it loaded.
    clock.advance(1)
    again.add((7, 0, 0, 0, 0))
    assert again.span("hour")["series"]["pages"][-1] == 7


def test_series_are_matched_by_name_and_bad_files_ignored(tmp_path):
    clock = FakeClock(START)
    h = History(("bytes", "pages"), clock=clock)
    h.add((5, 3))
    h.saver()(tmp_path)
    other = History(clock=clock)
    assert other.load(tmp_path)
    assert other.span("hour")["series"]["pages"] == [3]
    assert other.span("hour")["series"]["errors"] == [0]

    (tmp_path / History.FILE).write_bytes(b"not an npz")
    assert not History().load(tmp_path)
    assert not History().load(tmp_path / "missing")
    np.savez(tmp_path / History.FILE, version=np.int64(99))
    assert not History().load(tmp_path)
