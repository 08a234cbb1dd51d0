"""DRUM's delivery of answers: a merged epoch's results, read back in arrival order.

Keys, ops and aux come back from the epoch's arrival log; each tuple's ``(unique,
value)`` from its result file, which is in arrival order (an epoch merged from RAM) or
holds a run per bucket, put back in arrival order here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drumbeat.drum.aux import AuxArray
from drumbeat.drum.buffer import WriteAheadBuffer, as_void
from drumbeat.drum.format import HEADER_SIZE, iter_blocks, iter_blocks_at
from drumbeat.drum.state import DrumState, ResultEntry


@dataclass(frozen=True, slots=True)
class DrumResult:
    """Outcomes of consecutive tuples of one merge round, in global arrival order.

    ``unique[i]``: the key was not stored before tuple ``i`` (of several tuples
    with one key in a round only the first can be unique). ``values[i]``: the
    value stored for the key just before tuple ``i`` was applied (zeros when
    unique) -- for a ``check`` on a duplicate, the stored value. ``aux[i]``:
    the aux bytes given with tuple ``i`` (``b""`` when none); ``aux`` is an
    :class:`AuxArray` (``aux.select(np.flatnonzero(unique))`` gives the new ones).
    """

    epoch: int
    keys: np.ndarray
    ops: np.ndarray
    unique: np.ndarray
    values: np.ndarray
    aux: AuxArray

    def __len__(self) -> int:
        return len(self.keys)


class Delivery:
    """Reads merged epochs' results back (state ``st``, arrival blocks via ``buf``)."""

    def __init__(self, st: DrumState, buf: WriteAheadBuffer, result: np.dtype[Any]) -> None:
        self.st = st
        self.buf = buf
        self.result = result

    def deliver(self, entry: ResultEntry) -> Iterator[DrumResult]:
        """The results of the merged epoch ``entry``, in chunks, in arrival order."""
        e = entry["epoch"]
        if not entry["a"]:
            return
        r_path = self.st.file("r", e)
        res_streams = {}
        start = HEADER_SIZE
        for b, length in enumerate(entry["r"]):
            if length:
                res_streams[b] = _Stream(self.st, r_path, start, start + length, self.result)
            start += length
        # Per delivered tuple: its result record, key and op, plus ~40 bytes of
        # sorting scratch; aux is a view of the arrival block, already in RAM.
        step = max(1, self.st.sizing.chunk_bytes // (self.result.itemsize + 49))
        a_path = self.st.file("a", e)
        for at, n, payload in iter_blocks_at(a_path, b"a", end=entry["a"]):
            self.st.counters["bytes_read"] += len(payload) + 12
            keys, ops, _, aux = self.buf.arrival_block(a_path, at, n, payload)
            for s in range(0, n, step):
                t = slice(s, s + step)
                if entry["arrival"]:
                    res = (
                        res_streams[0].take(len(keys[t]))
                        if res_streams
                        else np.empty(0, self.result)
                    )
                    res = res.copy()
                else:
                    res = self._reorder(keys[t], res_streams)
                yield DrumResult(
                    e, keys[t].copy(), ops[t].copy(), res["unique"], res["value"], aux[t]
                )

    def _reorder(self, keys: np.ndarray, res_streams: dict[int, _Stream]) -> np.ndarray:
        """The results of ``keys`` (bucket mode: a run per bucket), in arrival order."""
        ids = self.buf.bucket_of(keys)
        # Stable by bucket: the records of bucket b, in its arrival order, go to
        # the positions of b's tuples, in order.
        order = np.argsort(ids, kind="stable")
        counts = np.bincount(ids, minlength=self.st.k)
        recs = [res_streams[b].take(int(counts[b])) for b in np.flatnonzero(counts).tolist()]
        out = np.empty(len(keys), self.result)
        as_void(out)[order] = as_void(np.concatenate(recs))
        return out


class _Stream:
    """Reads exactly ``n`` records at a time from blocks in ``[start, end)`` of a file."""

    def __init__(
        self, st: DrumState, path: Path, start: int, end: int, dtype: np.dtype[Any]
    ) -> None:
        self.st = st
        self.blocks = iter_blocks(path, b"r", start=start, end=end)
        self.dtype = dtype
        self.left: np.ndarray = np.empty(0, dtype)
        self.pos = 0

    def _next(self) -> None:
        n, payload = next(self.blocks)
        self.st.counters["bytes_read"] += len(payload) + 12
        self.left = np.frombuffer(payload, self.dtype, n)
        self.pos = 0

    def take(self, n: int) -> np.ndarray:
        parts = []
        while n:
            if self.pos == len(self.left):
                self._next()
            got = self.left[self.pos : self.pos + n]
            self.pos += len(got)
            n -= len(got)
            parts.append(got)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
