"""A share of the wall time for one kind of work in a loop (a token bucket of seconds).

The manager's loop does some work in slices, a turn at a time (placing what URL-seen
found new, for one): each slice has a budget, so no turn is long. A budget per turn does
not bound the share of time, though: while work waits, turns follow each other at once
and the slices add up to most of the loop's time. :class:`Pace` grants a slice only out
of time saved up at ``share`` of the wall clock, at most ``burst`` seconds of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Pace:
    """Slices of work that take at most ``share`` of the time, in slices of at most
    ``burst`` seconds (of ``clock``, wall time)."""

    def __init__(
        self, share: float, burst: float, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        if not burst > 0:
            raise ValueError(f"burst must be > 0, got {burst}")
        self.share = share
        self.burst = burst
        self._clock = clock
        self._saved = burst  # seconds of work granted and not yet used
        self._at = clock()  # when _saved was last brought up to date
        self._granted = False  # a slice is under way, from _at

    def allowance(self, want: float, *, full_speed: bool = False) -> float | None:
        """Seconds the next slice may take, ``want`` or less (a slice of 0 s does one
        step of the work); None while the time saved up is spent: skip the work this
        turn. ``full_speed`` grants ``want`` now, for work that is urgent, and still
        counts it. Call :meth:`spent` after a slice granted."""
        now = self._clock()
        self._saved = min(self.burst, self._saved + (now - self._at) * self.share)
        self._at = now
        self._granted = full_speed or self._saved > 0
        if not self._granted:
            return None
        return want if full_speed else min(want, self._saved)

    def spent(self, used: float | None = None) -> None:
        """The slice granted by the last :meth:`allowance` is over: its time is used up,
        or only ``used`` seconds of it (the work ran in parts, with other work between)."""
        if not self._granted:
            return
        now = self._clock()
        elapsed = now - self._at
        # Saved at ``share`` of the time all along, used all through the slice (or for
        # ``used`` of it); a slice that overran leaves a debt, of at most one burst.
        saved = self._saved + elapsed * self.share - (elapsed if used is None else used)
        self._saved = min(self.burst, max(saved, -self.burst))
        self._at = now
        self._granted = False
