"""Aux data in compact form: one byte string and ``n + 1`` int64 offsets.

DRUM carries an opaque byte string with every tuple. Millions of small
``bytes`` objects cost RAM per object and Python time each time they
are split, moved or regrouped, so aux travels as :class:`AuxArray` instead:
item ``i`` is ``blob[offsets[i]:offsets[i + 1]]``. Slicing shares the blob;
only reading an item back creates a ``bytes`` object.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union, overload

import numpy as np

AuxInput = Union[Sequence[bytes], tuple[Any, np.ndarray], "AuxArray"]


@dataclass(frozen=True, slots=True, eq=False)
class AuxArray:
    """``n`` byte strings: item ``i`` is ``blob[offsets[i]:offsets[i + 1]]``.

    ``offsets`` is a non-decreasing int64 array of length ``n + 1`` (it need not
    start at 0: a slice keeps the blob and narrows the offsets). Compares equal
    to another AuxArray or a sequence holding the same byte strings.
    """

    blob: bytes
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> bytes: ...

    @overload
    def __getitem__(self, i: slice) -> AuxArray: ...

    def __getitem__(self, i: int | slice) -> bytes | AuxArray:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise ValueError("AuxArray slices must be contiguous")
            return AuxArray(self.blob, self.offsets[start : max(start, stop) + 1])
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"aux index {i} out of range for {n} items")
        return self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AuxArray):
            return self.tolist() == other.tolist()
        if isinstance(other, Sequence) and not isinstance(other, (bytes, str)):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equality by content, like a list

    def __repr__(self) -> str:
        return f"AuxArray({len(self)} items, {self.nbytes} bytes)"

    @property
    def nbytes(self) -> int:
        """Bytes of aux text (not counting the offsets)."""
        return int(self.offsets[-1] - self.offsets[0])

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def data(self) -> memoryview:
        """The items' bytes back to back, without copying."""
        return memoryview(self.blob)[int(self.offsets[0]) : int(self.offsets[-1])]

    def tolist(self) -> list[bytes]:
        """Every item as ``bytes``."""
        o = self.offsets.tolist()
        blob = self.blob
        return [blob[s:e] for s, e in itertools.pairwise(o)]

    def select(self, indices: np.ndarray) -> list[bytes]:
        """The items at ``indices`` (e.g. ``np.flatnonzero(result.unique)``), in that order."""
        idx = np.asarray(indices, np.intp)
        blob = self.blob
        return [
            blob[s:e] for s, e in zip(self.offsets[idx].tolist(), self.offsets[idx + 1].tolist())
        ]

    def take(self, indices: np.ndarray) -> AuxArray:
        """The items at ``indices``, in that order, as a new AuxArray.

        One slice an item, joined: faster than a byte-index gather in numpy, which
        also needs 8 bytes of scratch a byte taken."""
        idx = np.asarray(indices, np.intp)
        starts, ends = self.offsets[idx], self.offsets[idx + 1]
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        blob = self.blob
        return AuxArray(
            b"".join([blob[s:e] for s, e in zip(starts.tolist(), ends.tolist())]), offsets
        )

    @classmethod
    def concat(cls, parts: Sequence[AuxArray]) -> AuxArray:
        """The items of ``parts``, in order, as one AuxArray (one copy of the bytes)."""
        if len(parts) == 1:
            return parts[0]
        lengths = np.concatenate([part.lengths() for part in parts])
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(b"".join([part.data() for part in parts]), offsets)

    @classmethod
    def from_strs(cls, items: Sequence[str]) -> AuxArray:
        """The UTF-8 encodings of ``items``, with one join and one encode.

        Character counts are byte counts when every item is ASCII (URLs and host
        names in their normalized form are); that holds exactly when the totals
        agree, since any other character takes at least two bytes.
        """
        n = len(items)
        blob = "".join(items).encode()
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, items), np.int64, n), out=offsets[1:])
        if offsets[-1] != len(blob):
            return cls.of([item.encode() for item in items])
        return cls(blob, offsets)

    @classmethod
    def from_lengths(cls, blob: bytes, lengths: bytes) -> AuxArray:
        """Items back to back in ``blob``, their lengths a native uint32 array in
        ``lengths`` (as fetchers pack what they found)."""
        sizes = np.frombuffer(lengths, np.uint32)
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(blob, offsets)

    @classmethod
    def empty(cls, n: int) -> AuxArray:
        """``n`` empty items."""
        return cls(b"", np.zeros(n + 1, np.int64))

    @classmethod
    def of(cls, aux: AuxInput) -> AuxArray:
        """Accept a sequence of ``bytes``, a ``(blob, offsets)`` pair or an AuxArray.

        ``blob`` may be anything ``bytes()`` accepts (bytes, bytearray, a uint8
        array); it is copied unless it is ``bytes``, so the caller may reuse it.
        """
        if isinstance(aux, AuxArray):
            return aux
        if isinstance(aux, tuple) and len(aux) == 2 and isinstance(aux[1], np.ndarray):
            blob, offsets = aux
            blob = (
                blob
                if isinstance(blob, bytes)
                else (blob.tobytes() if isinstance(blob, np.ndarray) else bytes(blob))
            )
            offsets = np.ascontiguousarray(offsets, np.int64)
            if offsets.ndim != 1 or len(offsets) < 1:
                raise ValueError("aux offsets must be a 1-d array of n + 1 positions")
            if len(offsets) > 1 and (
                offsets[0] < 0 or offsets[-1] > len(blob) or (np.diff(offsets) < 0).any()
            ):
                raise ValueError("aux offsets must be non-decreasing positions within the blob")
            return cls(blob, offsets)
        n = len(aux)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, aux), np.int64, n), out=offsets[1:])
        return cls(b"".join(aux), offsets)
