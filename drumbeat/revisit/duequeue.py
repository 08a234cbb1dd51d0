"""The due-time queue of revisits: URLs kept on disk until their revisit falls due.

A hierarchical timing wheel whose slots are :class:`~drumbeat.frontier.diskqueue.DiskQueue`
FIFOs. A slot of level ``l`` holds the entries due within one tick of ``slot_s * FANOUT**l``
seconds; each level keeps at most ``FANOUT`` ticks ahead of the wheel's cursor, so an
entry goes to the lowest level whose window reaches its due time; one due later than the
top level's window waits in the *far* FIFO, spread over the wheel once the window reaches
the earliest of its due times. As time passes, a higher slot whose tick begins is
spread over the lower levels, and a level-0 slot whose tick begins is moved whole to the
*ready* FIFO, where :meth:`DueQueue.pop` takes entries. An entry is thus written at most
``levels + 1`` times, and nothing ever scans the queue for what is due.

Bounded RAM: at most ``FANOUT * levels`` slots and the ready FIFO exist at once, each
with DiskQueue's write and read buffers of ``buffer_bytes``. Entries within one level-0
tick come out in the order they arrived, not by due time: ``slot_s`` is the schedule's
resolution.

An entry (a DiskQueue record)::

    due_s        f8  when the revisit falls due (the crawl's clock, seconds)
    fingerprint  u8  the URL's 64-bit fingerprint
    payload      the rest: the caller's bytes (the URL, its validators, ...)

Directory layout: ``ready/``, ``far-0/`` or ``far-1/`` and one ``L-T/`` per slot (level
``L``, absolute tick ``T``), each a DiskQueue. :meth:`DueQueue.commit` returns the state
to reopen with (the cursor and each FIFO's state); reopening with the latest commit
restores its contents (the FIFOs read out since then are kept until the next commit for
that).
"""

from __future__ import annotations

import math
import shutil
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from drumbeat.frontier.diskqueue import DiskQueue, QueueState

FANOUT = 16  # ticks a level holds ahead of the cursor; the next level's tick is 16 times longer
LEVELS = 6  # with 60-s slots the top level's slots are two years long
_ENTRY = struct.Struct("<dQ")
_FAR = (-1, -1)  # _place's answer for an entry beyond the top level's window
_CHUNK = 4096  # entries moved at once when a slot is spread or made ready


@dataclass(frozen=True, slots=True)
class Due:
    """An entry of the queue."""

    due_s: float
    fingerprint: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class DueQueueStats:
    queued: int  # entries in the queue, ready or not
    ready: int  # entries due by the cursor, waiting for pop
    slots: int  # slot FIFOs open
    cursor_s: float  # the start of the first level-0 tick not yet made ready


class DueQueueState(TypedDict):
    """A committed state of a :class:`DueQueue` (JSON; checkpoints hold it as is)."""

    cursor: int  # the first level-0 tick not yet made ready
    ready: QueueState
    far_name: str  # the directory of the far FIFO (far-0 and far-1 take turns)
    far: QueueState
    far_min: float  # the earliest due time in the far FIFO
    slots: dict[str, QueueState]  # "LEVEL-TICK" -> that slot's FIFO


class DueQueue:
    """Entries kept until their due time (see the module docstring), in ``directory``
    (which it owns: ``state=None`` starts empty at time ``now_s``, wiping it)."""

    def __init__(
        self,
        directory: Path,
        *,
        slot_s: float = 60.0,
        now_s: float = 0.0,
        levels: int = LEVELS,
        state: DueQueueState | None = None,
        buffer_bytes: int = 64 << 10,
        segment_bytes: int = 16 << 20,
        fsync: bool = True,
    ) -> None:
        if slot_s <= 0 or levels < 1:
            raise ValueError(f"slot_s must be positive and levels at least 1 ({slot_s}, {levels})")
        self.directory = Path(directory)
        self.slot_s = slot_s
        self.levels = levels
        self._buffer_bytes = buffer_bytes
        self._segment_bytes = segment_bytes
        self._fsync = fsync
        self._slots: dict[tuple[int, int], DiskQueue] = {}
        self._drained: list[Path] = []  # FIFOs read out since the last commit
        # Those read out before it: the commit before the last one may still be the one
        # a crash restores (a checkpoint's commits go live only once its files are
        # written), so what it names is kept until the next commit.
        self._drained_before: list[Path] = []
        if state is None:
            if self.directory.exists():
                shutil.rmtree(self.directory)
            self.directory.mkdir(parents=True)
            self._cursor = math.floor(now_s / slot_s)
            self._ready = self._open("ready", None)
            self._far = self._open("far-0", None)
            self._far_min = math.inf  # the earliest due time in the far FIFO
        else:
            self._cursor = int(state["cursor"])
            self._ready = self._open("ready", state["ready"])
            self._far = self._open(state["far_name"], state["far"])
            self._far_min = float(state["far_min"])
            for name, sub in state["slots"].items():
                level, tick = map(int, name.split("-"))
                self._slots[level, tick] = self._open(name, sub)
            kept = {"ready", state["far_name"], *state["slots"]}
            for path in self.directory.iterdir():
                if path.name not in kept:
                    shutil.rmtree(path, ignore_errors=True)

    def _open(self, name: str, state: QueueState | None) -> DiskQueue:
        return DiskQueue(
            self.directory / name,
            state=state,
            buffer_bytes=self._buffer_bytes,
            segment_bytes=self._segment_bytes,
            fsync=self._fsync,
        )

    # -- placing -------------------------------------------------------------------------

    def push(self, due_s: float, fingerprint: int, payload: bytes = b"") -> None:
        """Queue one entry."""
        self.extend(((due_s, fingerprint, payload),))

    def extend(self, entries: Iterable[tuple[float, int, bytes]]) -> None:
        """Queue entries ``(due_s, fingerprint, payload)``."""
        records = []
        for due_s, fp, payload in entries:
            if not math.isfinite(due_s):
                raise ValueError(f"due time must be finite, got {due_s}")
            records.append(_ENTRY.pack(due_s, fp) + payload)
        self._spread(records)

    def _spread(self, records: list[bytes]) -> None:
        """Put entries in their slots (relative to the cursor)."""
        groups: dict[tuple[int, int] | None, list[bytes]] = {}
        far: list[bytes] = []
        for r in records:
            due_s = _ENTRY.unpack_from(r)[0]
            where = self._place(math.floor(due_s / self.slot_s))
            if where == _FAR:
                far.append(r)
                self._far_min = min(self._far_min, due_s)
            else:
                groups.setdefault(where, []).append(r)
        for where, rs in groups.items():
            self._fifo(where).extend(rs)
        if far:
            self._far.extend(far)

    def _place(self, tick: int) -> tuple[int, int] | None:
        """The slot for an entry due in level-0 tick ``tick`` (None: ready, _FAR: far)."""
        cursor = self._cursor
        if tick < cursor:
            return None
        for level in range(self.levels):
            span = FANOUT**level
            own = tick // span
            first = -(-cursor // span)  # the first tick of this level not yet begun
            if first <= own < first + FANOUT:
                return level, own
        return _FAR

    def _fifo(self, where: tuple[int, int] | None) -> DiskQueue:
        if where is None:
            return self._ready
        fifo = self._slots.get(where)
        if fifo is None:
            fifo = self._slots[where] = self._open(f"{where[0]}-{where[1]}", None)
        return fifo

    # -- time passing --------------------------------------------------------------------

    def advance(self, now_s: float) -> None:
        """Make everything due by ``now_s``'s level-0 tick ready."""
        self._advance_to(math.floor(now_s / self.slot_s))

    def _advance_to(self, last_tick: int) -> None:
        while True:
            nxt = self._next_slot()
            if nxt is None or nxt[1] * FANOUT ** nxt[0] > last_tick:
                break
            self._open_slot(nxt)
        self._cursor = max(self._cursor, last_tick + 1)
        self._spread_far()

    def _spread_far(self) -> None:
        """Spread the far FIFO over the wheel once the top level's window reaches its
        earliest entry (those still beyond it go back to a new far FIFO)."""
        top = FANOUT ** (self.levels - 1)
        window_end = (-(-self._cursor // top) + FANOUT) * top
        if not len(self._far) or math.floor(self._far_min / self.slot_s) >= window_end:
            return
        old = self._far
        name = "far-1" if old.directory.name == "far-0" else "far-0"
        self._far, self._far_min = self._open(name, None), math.inf
        while records := old.read(_CHUNK):
            self._spread(records)
        self._drop(old)

    def _next_slot(self) -> tuple[int, int] | None:
        """The slot whose tick begins first (the higher level first on a tie: its
        entries may belong in the lower slot)."""
        if not self._slots:
            return None
        return min(self._slots, key=lambda s: (s[1] * FANOUT ** s[0], -s[0]))

    def _open_slot(self, slot: tuple[int, int]) -> None:
        """The tick of ``slot`` begins: spread its entries over the lower levels, or make
        them ready (level 0)."""
        level, tick = slot
        fifo = self._slots.pop(slot)
        self._cursor = max(self._cursor, tick * FANOUT**level)
        while records := fifo.read(_CHUNK):
            if level == 0:
                self._ready.extend(records)
            else:
                groups: dict[tuple[int, int] | None, list[bytes]] = {}
                for r in records:
                    due_s = _ENTRY.unpack_from(r)[0]
                    where = self._place(math.floor(due_s / self.slot_s))
                    groups.setdefault(where, []).append(r)
                for where, rs in groups.items():
                    self._fifo(where).extend(rs)
        if level == 0:
            self._cursor = max(self._cursor, tick + 1)
        self._drop(fifo)

    def _drop(self, fifo: DiskQueue) -> None:
        """A FIFO read to its end: its files go at the next commit (the last one may
        still need them)."""
        fifo.close()
        self._drained.append(fifo.directory)

    # -- taking --------------------------------------------------------------------------

    def pop(self, n: int, now_s: float, *, early: bool = False) -> list[Due]:
        """Up to ``n`` entries due by ``now_s`` (to ``slot_s``), in order of their
        ticks. ``early``: when fewer are due, make up the number from the entries due
        next (the wheel's cursor then runs ahead of ``now_s``)."""
        self.advance(now_s)
        out = self._ready.read(n)
        while early and len(out) < n:
            nxt = self._next_slot()
            if nxt is not None:
                self._open_slot(nxt)
                self._spread_far()
            elif len(self._far):
                self._advance_to(math.floor(self._far_min / self.slot_s))
            else:
                break
            out += self._ready.read(n - len(out))
        unpack, size = _ENTRY.unpack_from, _ENTRY.size
        return [Due(*unpack(r), r[size:]) for r in out]  # type: ignore[call-arg]

    def __len__(self) -> int:
        return len(self._ready) + len(self._far) + sum(len(q) for q in self._slots.values())

    def stats(self) -> DueQueueStats:
        return DueQueueStats(
            len(self), len(self._ready), len(self._slots), self._cursor * self.slot_s
        )

    def commit(self) -> DueQueueState:
        """Make the queue durable; the state to reopen it with (the FIFOs read out
        before the previous commit are deleted: it, or this one, reopens)."""
        state: DueQueueState = {
            "cursor": self._cursor,
            "ready": self._ready.commit(),
            "far_name": self._far.directory.name,
            "far": self._far.commit(),
            "far_min": self._far_min,
            "slots": {f"{lv}-{t}": q.commit() for (lv, t), q in self._slots.items()},
        }
        live = {self._ready.directory, self._far.directory}
        live |= {q.directory for q in self._slots.values()}
        for path in self._drained_before:
            if path not in live:  # (far-0 and far-1 take turns)
                shutil.rmtree(path, ignore_errors=True)
        self._drained_before, self._drained = self._drained, []
        return state

    def close(self) -> None:
        self._ready.close()
        self._far.close()
        for q in self._slots.values():
            q.close()
