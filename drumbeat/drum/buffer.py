"""DRUM's write-ahead buffer: the tuples of the epoch being filled.

Every tuple goes to the epoch's arrival log (its write-ahead log and the source of
result delivery) and to one RAM buffer, allocated once and reused by every epoch; when
the buffer fills, its tuples are spilled to per-bucket q files. Tuples submitted while a
background round runs are held, and past ``HELD_SHARE`` of the RAM written ahead to the
next epoch's files. See :mod:`drumbeat.drum.repository` for the layout and the modes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from drumbeat.drum.aux import AuxArray
from drumbeat.drum.format import (
    HEADER_SIZE,
    DrumCorruptError,
    arrival_parts,
    arrival_rest,
    block_parts,
    encode_header,
    iter_blocks_at,
    write_parts,
)
from drumbeat.drum.merge import CHECK_UPDATE
from drumbeat.drum.state import DrumState, Live, empty_live

# Tuples submitted while a background round runs are held in RAM up to this share of
# ram_bytes (with their aux); past it they are written ahead to the next epoch's files
# (WriteAheadBuffer.write_ahead), and a submit waits for the round only when that epoch is
# full. A submit that waits for a long bucket-mode round stalls the crawl's loop; writing
# the held tuples ahead costs the loop far less than that wait.
HELD_SHARE = 0.25

Columns = tuple[np.ndarray, np.ndarray, np.ndarray]  # tuples as (keys, ops, values)
# A submit held while a round runs: (ops, keys, values or None, aux or None).
Held = tuple[np.ndarray, np.ndarray, "np.ndarray | None", "AuxArray | list[bytes] | None"]
# A piece of the arrival log's buffer: (keys, aux lengths, ops, values, aux data).
LogPiece = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "bytes | memoryview"]
Guard = Callable[..., Any]


class WriteAheadBuffer:
    """The epoch's tuples: RAM buffer, arrival log and q files, and those held meanwhile.

    ``guard`` runs a state-changing step so that a failure leaves the repository
    unusable (:meth:`Drum._guard <drumbeat.drum.repository.Drum._guard>`).
    """

    def __init__(
        self, st: DrumState, record: np.dtype[Any], guard: Guard, compress_log: bool
    ) -> None:
        self.st = st
        self.record = record
        self.value_dtype = st.value_dtype
        self.sizing = st.sizing
        self.k = st.k
        self.shift = np.uint64(64 - st.sizing.bits)
        self.guard = guard
        # Deflate the arrival log's blocks (all but the keys; see format). Either way
        # the directory reads back the same: each block says how it is stored.
        self.compress_log = bool(compress_log)
        self.log_scratch = bytearray()  # joins a block's columns before deflating
        # Submits that came while a round runs: added when it ends.
        self.held: list[Held] = []
        self.held_n = 0
        self.held_bytes = 0
        # The next epoch's live fields once held tuples were written ahead (write_ahead).
        self.next: Live | None = None
        # Tuples of the epoch not spilled to q files, in arrival order: (keys, ops,
        # values or None). At most a quarter of the RAM (Theorem 2's 2k buffers of
        # M bytes, half of them for records) and one merge unit.
        self.spill_at = max(
            1, min(self.sizing.bucket_records, self.sizing.ram_bytes // 4 // record.itemsize)
        )
        self.ram_keys: np.ndarray | None = None  # and ram_ops, ram_ids, ram_values
        self.ram_ops = self.ram_ids = self.ram_values = np.empty(0)
        self.ram_n = 0
        self.ram_bn = np.zeros(self.k, np.int64)  # RAM tuples per bucket
        # Arrival log buffer, per submitted piece.
        self.arrivals: list[LogPiece] = []
        self.arrivals_n = 0
        self.arrivals_bytes = 0
        # Per tuple in the arrival log besides its aux: key, aux length, op, value.
        self.arrival_bytes = 13 + self.value_dtype.itemsize

    def pending(self) -> int:
        """Tuples submitted and not yet merged."""
        return (
            self.st.live["an"]
            + self.arrivals_n
            + self.held_n
            + (self.next["an"] if self.next else 0)
        )

    def validate(
        self, ops: Any, keys: Any, values: Any
    ) -> Columns | tuple[np.ndarray, np.ndarray, None]:
        if not isinstance(keys, np.ndarray) or keys.dtype != np.uint64 or keys.ndim != 1:
            raise TypeError(f"keys must be a 1-d numpy uint64 array, got {_describe(keys)}")
        n = len(keys)
        ops = np.asarray(ops)
        if ops.dtype != np.uint8 or ops.shape != (n,):
            raise TypeError(f"ops must be a uint8 array of length {n}, got {_describe(ops)}")
        if n and int(ops.max()) > CHECK_UPDATE:
            raise ValueError("ops must be CHECK (0), UPDATE (1) or CHECK_UPDATE (2)")
        if values is not None:
            if not isinstance(values, np.ndarray) or values.dtype != self.value_dtype:
                raise TypeError(
                    f"values must be a numpy array of {self.value_dtype}, got {_describe(values)}"
                )
            if values.shape != (n,):
                raise ValueError(f"{len(values)} values for {n} keys")
        return keys, ops, values

    def piece(self, aux: AuxArray | None) -> int:
        """Tuples per piece of a submit: arrival-log blocks of about chunk_bytes (each
        is read back into a fresh buffer, and small buffers are recycled by malloc, see
        sizing)."""
        per = self.arrival_bytes + (aux.nbytes / max(1, len(aux)) if aux else 0)
        return max(1, int(self.sizing.chunk_bytes // per))

    def add(
        self, ops: np.ndarray, keys: np.ndarray, values: np.ndarray | None, aux: AuxArray | None
    ) -> None:
        """Buffer tuples: in RAM, and in the arrival log."""
        m = len(keys)
        keys, ops, values = self.keep(keys, ops, values)
        # The arrival log holds every tuple in arrival order: results are delivered
        # from it, and tuples not spilled to q files are reloaded from it on open.
        lengths, data = _log_columns(aux, m)
        self.st.counters["checked_bytes"] += 8 * m + len(data)
        self.arrivals.append((keys, lengths, ops, values, data))
        self.arrivals_n += m
        self.arrivals_bytes += self.arrival_bytes * m + len(data)
        if self.arrivals_bytes >= self.sizing.chunk_bytes:
            self.guard(self.flush_arrivals)

    def keep(self, keys: np.ndarray, ops: np.ndarray, values: np.ndarray | None) -> Columns:
        """Copy tuples into the RAM buffer, after those held (values None: zeros);
        return views of them there (the caller may reuse its arrays)."""
        a, b = self.ram_n, self.ram_n + len(keys)
        if self.ram_keys is None:
            # Allocated once and reused by every epoch: the pages stay mapped, so the
            # buffer costs no page faults after the first epoch (and RAM stays fixed).
            cap = self.spill_at
            self.ram_keys = np.empty(cap, np.uint64)
            self.ram_ops = np.empty(cap, np.uint8)
            self.ram_ids = np.empty(cap, np.uint16)
            self.ram_values = np.empty(cap, self.value_dtype)
        self.ram_keys[a:b] = keys
        self.ram_ops[a:b] = ops
        if self.value_dtype.itemsize:
            self.ram_values[a:b] = 0 if values is None else values
        ids = self.ram_ids[a:b]
        if self.k > 1:
            ids[:] = keys >> self.shift
        else:
            ids[:] = 0
        self.ram_n = b
        self.ram_bn += np.bincount(ids, minlength=self.k)
        return self.ram_keys[a:b], self.ram_ops[a:b], self.ram_values[a:b]

    def bucket_of(self, keys: np.ndarray) -> np.ndarray:
        if self.k == 1:
            return np.zeros(len(keys), np.uint16)
        return (keys >> self.shift).astype(np.uint16)

    def ram_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The RAM tuples as (keys, ops, values, bucket ids), in arrival order (views)."""
        n = self.ram_n
        if self.ram_keys is None:
            return (
                np.empty(0, np.uint64),
                np.empty(0, np.uint8),
                np.empty(0, self.value_dtype),
                np.empty(0, np.uint16),
            )
        return self.ram_keys[:n], self.ram_ops[:n], self.ram_values[:n], self.ram_ids[:n]

    def ram_by_bucket(self) -> dict[int, Columns]:
        """The RAM tuples per bucket in arrival order, as columns (keys, ops, values)."""
        return by_bucket(*self.ram_columns(), self.ram_bn)

    def clear_ram(self) -> None:
        self.ram_n = 0
        self.ram_bn[:] = 0

    def full(self) -> bool:
        """A bucket of a spilled epoch reached ``bucket_records``: a round is due."""
        live = self.st.live
        return (
            bool(live["sn"])
            and int((np.asarray(live["qn"]) + self.ram_bn).max()) >= self.sizing.bucket_records
        )

    # ------------------------------------------------------------------ disk appends

    def append(
        self,
        path: Path,
        length: int,
        kind: bytes,
        bucket: int,
        itemsize: int,
        *block: bytes | memoryview,
    ) -> int:
        """Write the buffers of ``block`` (from :func:`block_parts`) at ``length`` of
        ``path`` (creating it); return the new length."""
        if length == 0:
            spare = self.st.take_spare(kind.decode())
            if spare is not None:
                # Bytes past the valid length recorded in the state are never read.
                os.replace(spare, path)
            with open(path, "wb" if spare is None else "r+b") as f:
                f.write(encode_header(kind, bucket, itemsize))
                written = HEADER_SIZE + write_parts(f, block)
        else:
            with open(path, "r+b") as f:
                f.seek(length)
                written = write_parts(f, block)
        self.st.dirty.add(path)
        self.st.counters["bytes_written"] += written
        return length + written

    def spill(self) -> None:
        """Move the RAM tuples to per-bucket q files (the epoch is then in bucket mode).

        They are a prefix of the arrival log: ``sn`` counts them, so reopening
        reloads only the tuples after it.
        """
        self.flush_arrivals()  # it holds views of the RAM buffer, which is reused
        self.write_q(self.ram_by_bucket(), self.st.snap["epoch"], self.st.live)
        self.clear_ram()

    def write_q(self, by_bucket: dict[int, Columns], epoch: int, live: Live) -> None:
        """Append tuples per bucket to the q files of ``epoch``, whose valid lengths and
        counts are in ``live`` (the tuples are spilled: ``sn`` counts them too)."""
        for b, (keys, ops, values) in by_bucket.items():
            live["q"][b] = self.append(
                self.st.file("q", epoch, b),
                live["q"][b],
                b"q",
                b,
                self.record.itemsize,
                *block_parts(len(keys), [keys, ops, values]),
            )
            live["qn"][b] += len(keys)
            live["sn"] += len(keys)

    def flush_arrivals(self) -> None:
        if not self.arrivals:
            return
        self.log_block(
            self.arrivals, self.arrivals_n, self.arrivals_bytes, self.st.snap["epoch"], self.st.live
        )
        self.arrivals.clear()
        self.arrivals_n = 0
        self.arrivals_bytes = 0

    def log_block(
        self, pieces: list[LogPiece], n: int, nbytes: int, epoch: int, live: Live
    ) -> None:
        """Append ``pieces`` (keys, aux lengths, ops, values, aux data) of ``n`` tuples
        and about ``nbytes`` as one block to the arrival log of ``epoch``, whose valid
        length and count are ``live["a"]`` and ``live["an"]``."""
        keys, lengths, ops, values, data = zip(*pieces)
        rest: list[Any] = [_cat(lengths), _cat(ops)]
        if self.value_dtype.itemsize:
            rest.append(_cat(values))
        if self.compress_log and len(self.log_scratch) < nbytes:
            self.log_scratch = bytearray(nbytes)  # grows to ~2 chunks
        block = block_parts(
            n,
            arrival_parts(
                _cat(keys).astype("<u8", copy=False),
                [*rest, *data],
                self.compress_log,
                self.log_scratch,
            ),
        )
        path = self.st.file("a", epoch)
        live["a"] = self.append(path, live["a"], b"a", 0, 0, *block)
        live["an"] += n

    def arrival_block(
        self, path: Path, at: int, n: int, payload: bytes
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, AuxArray]:
        """(keys, ops, values, aux) of the arrival-log block at offset ``at`` of ``path``
        (views of ``payload``, or of its inflated rest)."""
        vsize = self.value_dtype.itemsize
        keys = np.frombuffer(payload, "<u8", n)
        rest, o = arrival_rest(path, at, n, payload)
        lengths = np.frombuffer(rest, "<u4", n, offset=o)
        ops = np.frombuffer(rest, "u1", n, offset=o + 4 * n)
        values = (
            np.frombuffer(rest, self.value_dtype, n, offset=o + 5 * n)
            if vsize
            else np.empty(n, self.value_dtype)
        )
        offsets = np.empty(n + 1, np.int64)
        offsets[0] = o + (self.arrival_bytes - 8) * n
        np.cumsum(lengths, out=offsets[1:])
        offsets[1:] += offsets[0]
        if int(offsets[-1]) != len(rest):
            raise DrumCorruptError(
                path, f"arrival block at offset {at}: aux lengths do not match its size"
            )
        return keys, ops, values, AuxArray(rest, offsets)

    def reload(self) -> None:
        """Put the current epoch's tuples that are not in q files back in RAM."""
        live = self.st.live
        skip = live["sn"]
        if live["an"] == skip:
            return
        path = self.st.file("a", self.st.snap["epoch"])
        for at, n, payload in iter_blocks_at(path, b"a", end=live["a"]):
            self.st.counters["bytes_read"] += len(payload) + 12
            if skip >= n:
                skip -= n
                continue
            keys, ops, values, _ = self.arrival_block(path, at, n, payload)
            while skip < n:  # reopened with less RAM: spill as submit() would
                end = min(n, skip + self.spill_at - self.ram_n)
                self.keep(keys[skip:end], ops[skip:end], values[skip:end])
                skip = end
                if self.ram_n >= self.spill_at:
                    self.spill()
            skip = 0

    # ------------------------------------------------------------------ held tuples

    def hold(
        self,
        ops: np.ndarray,
        keys: np.ndarray,
        values: np.ndarray | None,
        aux: AuxArray | Sequence[bytes] | None,
    ) -> bool:
        """Keep (a copy of) a submit that came while a round runs in the background;
        return whether what is held now passes HELD_SHARE of the RAM budget (then
        :meth:`write_ahead` is due)."""
        if isinstance(aux, AuxArray):
            aux = AuxArray(aux.blob, aux.offsets.copy())  # the blob is immutable bytes
        elif aux is not None:
            aux = list(aux)
        self.held.append((ops.copy(), keys.copy(), None if values is None else values.copy(), aux))
        self.held_n += len(keys)
        self.held_bytes += self.record.itemsize * len(keys) + (
            0 if aux is None else aux.nbytes if isinstance(aux, AuxArray) else sum(map(len, aux))
        )
        return self.held_bytes >= self.sizing.ram_bytes * HELD_SHARE

    def take_held(self) -> list[Held]:
        """The held submits, in order; none is held after."""
        held, self.held = self.held, []
        self.held_n = self.held_bytes = 0
        return held

    def write_ahead(self) -> bool:
        """Move the held tuples to the next epoch's arrival log and q files, as a spill
        would, so that a long background round does not make submits wait; the next
        epoch starts with them (``MergeRounds.end``). Return False, writing nothing, when
        they would fill a bucket of the next epoch past ``bucket_records``: that epoch's
        round is then due, and the submit waits for the running one.

        The round does not touch these files, and a state names them only once the
        round has ended: a crash before that leaves them unnamed (reopening deletes
        them; they were never committed). They go to the q files in groups of whole
        submits of about half a RAM buffer, so the work arrays stay small.
        """
        k, e = self.k, self.st.snap["epoch"] + 1
        nxt = self.next or empty_live(k)
        counts = np.zeros(k, np.int64)
        for _, keys, _, _ in self.held:
            counts += np.bincount(self.bucket_of(keys), minlength=k)
        if int((np.asarray(nxt["qn"]) + counts).max()) > self.sizing.bucket_records:
            return False
        group: list[Columns] = []
        group_n = 0
        log: list[LogPiece] = []
        log_n = log_bytes = 0
        for i, (ops, keys, values, held_aux) in enumerate(self.held):
            if values is None:
                values = np.zeros(len(keys), self.value_dtype)
            aux = None if held_aux is None else AuxArray.of(held_aux)
            piece = self.piece(aux)
            for s in range(0, len(keys), piece):
                t = min(len(keys), s + piece)
                part = None if aux is None else AuxArray.of(aux[s:t])
                lengths, data = _log_columns(part, t - s)
                self.st.counters["checked_bytes"] += 8 * (t - s) + len(data)
                log.append((keys[s:t], lengths, ops[s:t], values[s:t], data))
                log_n += t - s
                log_bytes += self.arrival_bytes * (t - s) + len(data)
                if log_bytes >= self.sizing.chunk_bytes:
                    self.log_block(log, log_n, log_bytes, e, nxt)
                    log, log_n, log_bytes = [], 0, 0
            group.append((keys, ops, values))
            group_n += len(keys)
            if group_n >= self.spill_at // 2 or i == len(self.held) - 1:
                if log:  # the log is always ahead of the q files (sn is its prefix)
                    self.log_block(log, log_n, log_bytes, e, nxt)
                    log, log_n, log_bytes = [], 0, 0
                keys_, ops_, values_ = (np.concatenate([g[j] for g in group]) for j in range(3))
                ids = self.bucket_of(keys_)
                self.write_q(
                    by_bucket(keys_, ops_, values_, ids, np.bincount(ids, minlength=k)), e, nxt
                )
                group, group_n = [], 0
        self.next = nxt
        self.held = []
        self.held_n = self.held_bytes = 0
        return True


def by_bucket(
    keys: np.ndarray, ops: np.ndarray, values: np.ndarray, ids: np.ndarray, counts: np.ndarray
) -> dict[int, Columns]:
    """Tuples per bucket (``ids``, ``counts`` tuples in each) in their order, as columns.

    Columns, not packed records: gathering three plain arrays is about half the
    work of building and gathering 9-byte records.
    """
    order = np.argsort(ids, kind="stable")  # u16: radix sort
    keys = np.take(keys, order).astype("<u8", copy=False)
    ops = np.take(ops, order)
    values = (
        take_records(values, order) if values.dtype.itemsize else np.empty(len(order), values.dtype)
    )
    end = np.cumsum(counts)
    out = {}
    for b in np.flatnonzero(counts).tolist():
        s, t = int(end[b] - counts[b]), int(end[b])
        out[b] = (keys[s:t], ops[s:t], values[s:t])
    return out


def as_void(recs: np.ndarray) -> np.ndarray:
    """The records as opaque fixed-size items: numpy moves those with memcpy,
    while indexing a structured array copies field by field (several times slower)."""
    return recs.view(np.dtype((np.void, recs.dtype.itemsize)))


def take_records(recs: np.ndarray, order: np.ndarray) -> np.ndarray:
    return np.take(as_void(recs), order).view(recs.dtype)


def _log_columns(aux: AuxArray | None, n: int) -> tuple[np.ndarray, bytes | memoryview]:
    """The arrival log's aux columns of ``n`` tuples: their lengths and their bytes."""
    if aux is None:
        return np.zeros(n, "<u4"), b""
    return aux.lengths().astype("<u4"), aux.data()


def _cat(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _describe(x: object) -> str:
    if isinstance(x, np.ndarray):
        return f"ndarray {x.dtype} {x.shape}"
    return type(x).__name__
