"""Small submits gathered into one, for a caller that sends a DRUM a few items at a time.

Each DRUM submit has a fixed cost (its buffer's bookkeeping, a dozen numpy calls on
small arrays), which dominates where a crawl of one site finds a page or two of links a
turn. A caller keeps its small parts in a :class:`Gathered`, in whatever packed form is
cheapest for it to keep, and gives them to its DRUM as one submit once ``limit`` items
wait, and before anything reads the DRUM or makes it durable (a flush, a commit). A
process killed before then loses them as it would lose the DRUM's own buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Gathered"]

T = TypeVar("T")


class Gathered(Generic[T]):
    """Parts waiting for one submit: ``submit`` gets them all, in the order added."""

    __slots__ = ("_limit", "_parts", "_submit", "items")

    def __init__(self, limit: int, submit: Callable[[list[T]], None]) -> None:
        self._limit = limit
        self._submit = submit
        self._parts: list[T] = []
        self.items = 0  # the items the waiting parts hold

    def add(self, part: T, items: int) -> None:
        """Keep ``part`` (of ``items`` items); submit everything once ``limit`` wait."""
        self._parts.append(part)
        self.items += items
        if self.items >= self._limit:
            self.give()

    def give(self) -> None:
        """Submit the waiting parts now, if any."""
        parts = self._parts
        if parts:
            self._parts, self.items = [], 0
            self._submit(parts)
