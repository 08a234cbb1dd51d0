"""QR (IRLbot §IV.C, Fig. 2): URLs waiting on disk for their origin's robots.txt.

A URL whose origin has no robots rules yet is appended here while one request for that
origin's robots.txt is made (:meth:`issue`, counted in the generation the URL joins).
URLs are grouped in *generations*. A generation is replayed (read back, in order, and sent
through the robots check again) once every robots request issued up to then, in it or
before it, has been answered; a generation takes arrivals for at most ``gen_s``, so a
steady stream of new hosts cannot hold it open. So in steady state each URL passes
through QR once; a generation older than ``max_wait_s`` is
replayed anyway, so one slow robots.txt cannot hold the others back (its URLs then simply
come back here, counted as repeats). URLs of an origin whose robots.txt failed and will be
retried later wait in a second instance with ``min_wait_s`` = the retry delay, so they
neither hold others back nor cycle quickly.

RAM holds one small record per generation and one per robots request being worked on;
the URLs themselves are on disk (:class:`DiskQueue`), crash-consistent with the checkpoint.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from drumbeat.frontier.diskqueue import DiskQueue, QueueState

if TYPE_CHECKING:
    from drumbeat.store.durable import Durable


class WaitQueueState(TypedDict):
    """A commit of :class:`RobotsWaitQueue` (JSON; checkpoints hold it as is)."""

    queue: QueueState
    gens: list[list[int]]  # [generation, records] of each generation not yet replayed
    next_gen: int


@dataclass(slots=True)
class _Generation:
    gen: int
    records: int  # appended and not yet replayed
    opened_at: float


class RobotsWaitQueue:
    def __init__(
        self,
        directory: Path,
        *,
        state: WaitQueueState | None,
        max_wait_s: float,
        min_wait_s: float = 0.0,
        gen_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        fsync: bool = True,
    ) -> None:
        self.queue = DiskQueue(directory, state=state["queue"] if state else None, fsync=fsync)
        self.max_wait_s = max_wait_s
        self.gen_s = gen_s  # a generation takes arrivals for this long at most
        self.min_wait_s = min_wait_s  # no generation is replayed younger than this
        self.clock = clock
        self._gens: deque[_Generation] = deque()
        self._next_gen = 0
        if state:
            # After a restart nothing is known to be outstanding: replay restored
            # generations at once (their URLs may pass a second time).
            self._gens.extend(_Generation(g, n, float("-inf")) for g, n in state["gens"])
            self._next_gen = state["next_gen"]
        self._issued: dict[int, int] = {}  # generation -> robots requests not yet answered
        self._working: dict[str, int] = {}  # origin being requested -> its generation
        self.repeats = 0  # URLs replayed before their robots.txt was answered

    # -- URLs ------------------------------------------------------------------------------

    def add(self, payload: bytes) -> None:
        gen = self._open_generation()
        gen.records += 1
        self.queue.append(payload)

    def replay(self, n: int) -> list[bytes]:
        """Up to ``n`` URLs of generations that are due, oldest first."""
        out: list[bytes] = []
        now = self.clock()
        while self._gens and len(out) < n:
            g = self._gens[0]
            if g.records == 0:
                if len(self._gens) == 1:
                    break  # the open generation, empty
                self._gens.popleft()
                continue
            if not self._due(g, now):
                break
            if len(self._gens) == 1:
                self._open_new(now)  # close it: later arrivals wait for later answers
            take = min(g.records, n - len(out))
            out.extend(self.queue.read(take))
            g.records -= take
            if g.records == 0:
                self._gens.popleft()
        return out

    def _due(self, g: _Generation, now: float) -> bool:
        if now - g.opened_at < self.min_wait_s:
            return False
        waiting = any(n for gen, n in self._issued.items() if gen <= g.gen)
        if waiting and now - g.opened_at >= self.max_wait_s:
            self.repeats += g.records
            return True
        return not waiting

    def _open_generation(self) -> _Generation:
        now = self.clock()
        if not self._gens or now - self._gens[-1].opened_at >= self.gen_s:
            return self._open_new(now)
        return self._gens[-1]

    def _open_new(self, now: float) -> _Generation:
        g = _Generation(self._next_gen, 0, now)
        self._next_gen += 1
        self._gens.append(g)
        return g

    def __len__(self) -> int:
        return len(self.queue)

    # -- robots requests -------------------------------------------------------------------

    def issue(self) -> int:
        """A robots request is issued now; returns its generation (answer with
        :meth:`working` when it is being worked on, then :meth:`answered`)."""
        gen = self._open_generation().gen
        self._issued[gen] = self._issued.get(gen, 0) + 1
        return gen

    def working(self, origin: str, gen: int | None) -> None:
        """``origin``'s request (of generation ``gen``; None = not counted) is being worked on."""
        self._working[origin] = -1 if gen is None else gen

    def is_working(self, origin: str) -> bool:
        return origin in self._working

    def working_origins(self) -> list[str]:
        return list(self._working)

    def answered(self, origin: str) -> None:
        self.settle(self._working.pop(origin, -1))

    def settle(self, gen: int) -> None:
        """One request of generation ``gen`` needs no answer any more."""
        n = self._issued.get(gen)
        if n is None:
            return
        if n <= 1:
            del self._issued[gen]
        else:
            self._issued[gen] = n - 1

    # -- durability ------------------------------------------------------------------------

    def commit(self) -> WaitQueueState:
        return {
            "queue": self.queue.commit(),
            "gens": [[g.gen, g.records] for g in self._gens if g.records],
            "next_gen": self._next_gen,
        }

    def close(self) -> None:
        self.queue.close()


if TYPE_CHECKING:

    def _durable(queue: RobotsWaitQueue) -> Durable[WaitQueueState]:
        return queue  # RobotsWaitQueue keeps the store contract: commit() -> its state
