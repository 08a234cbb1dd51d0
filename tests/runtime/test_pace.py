"""Pace: slices of work that take at most a share of the wall time (a fake clock)."""

from __future__ import annotations

import pytest

from drumbeat.runtime.pace import Pace
from drumbeat.testing import FakeClock


def _run(
    pace: Pace,
    clock: FakeClock,
    seconds: float,
    step_s: float,
    other_s: float,
    full_speed: bool = False,
) -> float:
    """A loop that always has work: each turn does the other work (``other_s``), then
    asks for a slice of 10 ms and works in steps of ``step_s`` (at least one) until the
    slice is over. Returns the share of the time spent working."""
    worked = 0.0
    end = clock.now + seconds
    while clock.now < end:
        clock.now += other_s
        granted = pace.allowance(0.010, full_speed=full_speed)
        if granted is None:
            continue
        start = clock.now
        clock.now += step_s
        while clock.now - start < granted:
            clock.now += step_s
        worked += clock.now - start
        pace.spent()
    return worked / seconds


@pytest.mark.parametrize(
    ("share", "step_s", "other_s"),
    [(0.3, 0.003, 0.001), (0.3, 0.0005, 0.0002), (0.5, 0.004, 0.002), (0.1, 0.002, 0.0001)],
)
def test_work_that_always_waits_gets_its_share_of_the_time(
    share: float, step_s: float, other_s: float
) -> None:
    clock = FakeClock(100.0)
    pace = Pace(share, 0.010, clock=clock)
    assert _run(pace, clock, 100.0, step_s, other_s) == pytest.approx(share, abs=0.01)


def test_a_slice_is_at_most_the_burst_and_what_was_saved() -> None:
    clock = FakeClock(100.0)
    pace = Pace(0.25, 0.010, clock=clock)
    assert pace.allowance(0.050) == 0.010  # it starts with a burst saved
    clock.now += 0.010
    pace.spent()
    assert pace.allowance(0.050) == pytest.approx(0.0025)  # saved while it worked
    clock.now += 0.0025
    pace.spent()
    clock.now += 0.004
    assert pace.allowance(0.050) == pytest.approx(0.001 + 0.000625)
    pace.spent()
    clock.now += 10.0  # idle: saves up to the burst, no more
    assert pace.allowance(0.050) == 0.010
    assert pace.allowance(0.004) == 0.004


def test_no_slice_while_the_time_saved_is_spent_and_a_slice_of_zero_is_one_step() -> None:
    clock = FakeClock(100.0)
    pace = Pace(0.5, 0.010, clock=clock)
    assert pace.allowance(0.0) == 0.0  # granted: the caller does one step
    clock.now += 0.030  # the step overran the slice by far: 0.010 + 0.015 - 0.030 saved
    pace.spent()
    assert pace.allowance(0.010) is None
    pace.spent()  # nothing was granted: nothing is counted
    clock.now += 0.004
    assert pace.allowance(0.010) is None  # -0.003 saved
    clock.now += 0.017
    assert pace.allowance(0.010) == pytest.approx(0.0055)


def test_full_speed_grants_what_is_asked_and_counts_it() -> None:
    clock = FakeClock(100.0)
    pace = Pace(0.2, 0.010, clock=clock)
    assert _run(pace, clock, 10.0, 0.003, 0.001, full_speed=True) > 0.7
    # The debt is at most one burst: a slice comes again after burst / share seconds.
    assert pace.allowance(0.010) is None
    clock.now += 0.010 / 0.2 + 0.001
    assert pace.allowance(0.010) == pytest.approx(0.0002)


@pytest.mark.parametrize(("share", "burst"), [(0.0, 0.01), (1.5, 0.01), (0.5, 0.0)])
def test_bad_arguments_are_refused(share: float, burst: float) -> None:
    with pytest.raises(ValueError):
        Pace(share, burst)


def test_a_slice_worked_in_parts_counts_only_the_seconds_used() -> None:
    # A slice whose work ran in parts, with other work between (the manager's routing
    # around BEAST's reads), is charged the seconds it says it used.
    clock = FakeClock(100.0)
    pace = Pace(0.1, 0.010, clock=clock)
    assert pace.allowance(0.010) == 0.010
    clock.now += 0.050  # 50 ms went by, 2 ms of them routing
    pace.spent(0.002)
    assert pace.allowance(0.010) == 0.010  # 10 - 2 + 5 ms saved: capped at the burst
    clock.now += 0.050
    pace.spent(0.050)  # all of it: a debt of 45 ms, cut to one burst
    clock.now += 0.100  # 10 ms saved pays the debt back, and nothing more
    assert pace.allowance(0.010) is None
    clock.now += 0.001
    assert pace.allowance(0.010) == pytest.approx(0.0001)
