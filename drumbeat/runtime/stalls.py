"""The manager's long loop turns: while one runs, no task reaches the fetchers.

The manager's loop is the only place tasks are handed out. The fetches in flight last
about a tenth of a second at full speed, so a turn that merges a DRUM, places a batch
into BEAST or writes a checkpoint for longer than that leaves the fetchers idle. A crawl
operator sees those turns here (``stages.json``, ``drumbeat bench throughput``): how
many, how long in all, which part of the turn took the time, and the worst ones.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

DEFAULT_THRESHOLD_S = 0.1  # about what the fetches in flight last at full speed
WORST_KEPT = 8


class Stalls:
    """Turns whose busy time reached ``threshold_s``, with fixed memory (``keep`` worst)."""

    def __init__(self, threshold_s: float = DEFAULT_THRESHOLD_S, keep: int = WORST_KEPT) -> None:
        self.threshold_s = threshold_s
        self._keep = keep
        self.count = 0
        self.seconds = 0.0
        self.by_part: Counter[str] = Counter()  # seconds of each part, in long turns only
        self._worst: list[tuple[float, float, str]] = []  # min-heap of (seconds, at, part)

    def turn(self, at_s: float, parts: dict[str, float]) -> bool:
        """Note one turn, ``at_s`` seconds into the crawl, with its busy ``parts`` (name ->
        seconds); returns whether it was long. Short turns cost one sum."""
        total = sum(parts.values())
        if total < self.threshold_s:
            return False
        self.count += 1
        self.seconds += total
        self.by_part.update(parts)
        entry = (total, at_s, max(parts, key=parts.__getitem__))
        if len(self._worst) < self._keep:
            heapq.heappush(self._worst, entry)
        else:
            heapq.heappushpop(self._worst, entry)
        return True

    def worst(self) -> list[tuple[float, float, str]]:
        """The longest turns kept, longest first: (seconds, at_s, the part that took most)."""
        return sorted(self._worst, reverse=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "threshold_s": self.threshold_s,
            "turns": self.count,
            "seconds": round(self.seconds, 3),
            "by_part_s": {k: round(v, 3) for k, v in self.by_part.most_common()},
            "worst": [
                {"s": round(s, 3), "at_s": round(at, 1), "part": part}
                for s, at, part in self.worst()
            ],
        }
