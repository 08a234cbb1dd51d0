"""What the manager's parts share of the loop's state: each field is set by one part and
read by others."""

from __future__ import annotations

from dataclasses import dataclass

from drumbeat.runtime.pace import Pace


@dataclass(slots=True)
class LoopState:
    # Placing new URLs and re-split QF URLs into BEAST: at most their share of the loop's
    # time (Admission.take_new_urls, RobotsGate.resplit_slice).
    placing: Pace
    # Routing URLs read from BEAST, likewise (RobotsGate.feed).
    routing: Pace
    # At the last dispatch, fetch slots were left unused for want of a ready host
    # (set by Dispatcher.dispatch).
    slots_idle: bool = True
    # The fetch slots: how many items may be in flight (Dispatcher.limit).
    fetch_slots: int = 0
    # When this run resumed a checkpoint (-inf: a new crawl): the previous run may have
    # hit any host just before it stopped (set by Checkpointer.restore).
    resumed_at: float = float("-inf")
