"""The DRUM repository: buffering, merge rounds, durable state, result delivery.

Directory layout (file formats in :mod:`drumbeat.drum.format`)::

    STATE.json                 the repository state (below), replaced atomically
    q-EEEEEEEE-BBBB.drum       spilled records of epoch E, bucket B (append-only)
    a-EEEEEEEE.drum            arrival log of epoch E: key, op, value and aux of every tuple
    c-GGGGGGGG.drum            the sorted run written by the round that made generation G:
                               one section per bucket it holds records of, in bucket order
    r-EEEEEEEE.drum            results of merging epoch E, in arrival order or a run per bucket

``STATE.json`` is JSON followed by a line with the zlib.crc32 of the JSON in
hex. It holds the state format version (5), value dtype and bucket count, the
``current`` snapshot and the last two ``commits`` (snapshots returned by
:meth:`Drum.commit`). A snapshot names the sorted ``runs``, oldest first, each
with its generation and, per bucket, its section's offset, length and record
count; the number of distinct keys ``stored``; the size of every run file; the
valid lengths of the pending files of the current epoch and how many of its
tuples were spilled to q files (``sn``); the merged epochs whose results were
not yet taken, and the counters. Files no snapshot refers to are deleted. A
directory of an older state format is refused with an error that says so.

The stored records are a *base* run and a few *delta* runs (LSM-like; at most
:data:`~drumbeat.drum.runs.MAX_RUNS`). A key may be in several runs; the newest
run holding it has its value. A round looks its tuples up in every run and
writes one new run: the records its tuples changed (new keys, and stored keys
with their full new value -- an ``add`` to a key of the base writes base value +
increment), merged with the newest runs it *folds* (:mod:`drumbeat.drum.runs`:
deltas by size tiers, the base once the deltas reach a quarter of it). A round
thus writes about its own delta, not the whole repository; it still reads every
run.

An *epoch* is the set of tuples merged in one round. Every tuple goes to the
arrival log, in arrival order; it is the write-ahead log of the epoch and the
source of result delivery (keys, ops and aux come back from it, so delivering
only adds each tuple's ``(unique, value)``). Tuples are also held in one RAM
buffer, allocated once and reused by every epoch, of a quarter of ``ram_bytes``
(at most ``bucket_records``). An epoch that fits is merged from RAM (*arrival
mode*): its results are written in arrival order and delivered without any
reordering. When the buffer fills, its tuples are spilled to the per-bucket q
files -- always a prefix of the arrival log, ``sn`` tuples long -- and the epoch
is in *bucket mode*, IRLbot's: a round starts when the fullest bucket reaches
``bucket_records``, and results are written as a run per bucket and put back in
arrival order on delivery. Reopening reloads the tuples after ``sn`` from the
arrival log into RAM.

A round merges *units* of consecutive buckets together (about
:data:`~drumbeat.drum.sizing.UNIT_RECORDS` tuples: a run's sections of the
unit, concatenated, are one sorted stream), writes the new run as sections of
*one* new file (creating a file costs ~1.5 ms here, so one file per bucket and
round was most of a round's fixed cost) and the epoch's result file, fsyncs
them and the epoch's arrival log and q files, then switches ``STATE.json``
(fsync, rename, fsync of the directory) to the new run set. A kill at any
instant leaves either the old state (the round is redone from the arrival log
and q files) or the new.

With ``fsync="commit"`` rounds write and rename the same files but fsync
nothing; :meth:`Drum.commit` fsyncs every file written since the previous
commit (and the directory) before it switches the state. A killed process
loses nothing (the kernel still has the data), but after a power failure or
kernel crash only commits are durable: reopen with the last commit's
manifest, whose files are never deleted before a later commit is durable.
With ``fsync=False`` nothing is ever fsynced.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drumbeat.drum.aux import AuxArray, AuxInput
from drumbeat.drum.format import (
    HEADER_SIZE,
    DrumCorruptError,
    DrumError,
    arrival_parts,
    arrival_rest,
    block_parts,
    check_header,
    encode_footer,
    encode_header,
    iter_blocks,
    iter_blocks_at,
    write_parts,
)
from drumbeat.drum.merge import CHECK, CHECK_UPDATE, UPDATE, MergeFn, Merger, merge_bucket
from drumbeat.drum.runs import Chunk, fold_start, merge_runs
from drumbeat.drum.sizing import UNIT_RECORDS, Sizing, plan
from drumbeat.store import durable

STATE = "STATE.json"
_SPARE_KINDS = ("a", "c")  # obsolete files of these kinds are kept to be overwritten
STATE_VERSION = 5  # 5: data files of format 6 (compressed arrival log)
_FILE_RE = re.compile(r"^([qacr])-(\d{4,8})(?:-(\d{4,8}))?\.drum$")
_EMPTY = np.dtype([])
_LIVE = ("q", "qn", "sn", "a", "an")  # snapshot fields that change while tuples are queued
_LIST_PIECE = 1 << 16  # aux items joined at once when aux is a list of bytes
# Tuples submitted while a background round runs are held in RAM up to this share of
# ram_bytes (with their aux); past it they are written ahead to the next epoch's files
# (Drum._write_ahead), and a submit waits for the round only when that epoch is full.
# On the polite throughput bench URL-seen's submits arrive at about 14 MB/s and its
# bucket-mode rounds 75-90 s into the crawl took 1.7-2.6 s: before the write-ahead, a
# submit then waited 0.23-1.0 s with a quarter held (16 MB of 64), in 9 of 19 runs.
# Written ahead instead (two traced runs, a round of 3.1 s in one): 16 MB took 76-81 ms
# of the manager's turn, and no submit waited.
HELD_SHARE = 0.25


_Plan = tuple[list[dict], list[dict]]  # a round's runs: (only read, rewritten with its delta)
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray]  # tuples as (keys, ops, values)


class DrumIOError(DrumError, OSError):
    """Writing failed (e.g. ENOSPC). The object is unusable; reopen the directory."""


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


@dataclass(frozen=True, slots=True)
class DrumStats:
    """Counters since the repository was created (they survive reopening)."""

    keys_stored: int
    pending: int  # tuples buffered or on disk, not yet merged
    bytes_read: int
    bytes_written: int
    merges: int
    sort_s: float
    merge_s: float
    last_batch: int  # tuples in the last merge round
    checked_bytes: int  # key + aux bytes of every tuple submitted
    alpha: float  # (bytes_read + bytes_written) / checked_bytes: Theorem 2's alpha(n, R)
    ram_bytes: int
    buckets: int
    runs: int  # sorted runs the keys are in: a base and up to MAX_RUNS - 1 deltas
    base_rewrites: int  # merge rounds that rewrote the base run (folded every run)


def _name(kind: str, a: int, b: int | None = None) -> str:
    return f"{kind}-{a:08d}.drum" if b is None else f"{kind}-{a:08d}-{b:04d}.drum"


def _cache_file(gen: int) -> str:
    return f"c-{gen:08d}.drum"


def _units(pending: np.ndarray, limit: int, every: bool = False) -> list[list[int]]:
    """Runs of consecutive buckets with pending tuples (``every``: all buckets), each
    holding at most ``limit`` tuples (or one bucket): merging a run at once pays the
    per-merge fixed costs once."""
    units: list[list[int]] = []
    total = limit
    for b in range(len(pending)) if every else np.flatnonzero(pending).tolist():
        n = int(pending[b])
        if total + n > limit or not units:
            units.append([])
            total = 0
        units[-1].append(b)
        total += n
    return units


class Drum:
    """A disk repository of ``uint64 key -> value`` with batched check/update.

    Opening a directory without ``manifest`` gives its latest durable state;
    with ``manifest`` (one of the last two returned by :meth:`commit`) it rolls
    back to exactly that commit.

    ``compress_log``: deflate the arrival log's blocks (all but the keys, see
    :mod:`~drumbeat.drum.format`). It was ~91 of the ~94 bytes written per URL
    of 78 bytes in ``bench drum`` at 100 M stored / 50 M checked; compressed, 29
    (the bench's synthetic URLs deflate ~7x; real ones less). Costs ~1 s of CPU
    per GB of log written and ~0.5 s per GB read back on delivery (isal level 1
    here: level 0 deflates no faster and inflates slower). Measured on one core
    (1 GiB RAM; disk ~365 MB/s, 24 GiB RAM, dirty_ratio 20 %): it pays once a
    round writes more than the page cache absorbs -- 10 M stored / 100 M checked,
    3.0 M URLs/s with it, 2.5 M without -- and costs when it does not: 100 M /
    50 M 2.35-2.64 M vs 2.61-3.21 M, 10 M / 2 M 3.1 M vs 4.2 M. On by default
    (a crawl's URL-seen runs long); off for short bursts or a fast disk.

    ``background``: run merge rounds in a thread of their own, so that the caller's loop
    goes on while one merges (IRLbot merges while crawling goes on; a round of a few
    million URLs took about a second here, a second of crawling lost in a loop that
    waits for it). A round then starts where it would have run (a full bucket, or
    ``flush(wait=False)``) and is ended by the first call into the repository after it
    has finished; its results come from :meth:`take_results` from then on. Tuples
    submitted meanwhile are held, copied, and added when it ends, in order; once they
    would pass ``HELD_SHARE`` (a quarter) of ``ram_bytes`` (with their aux), they are
    written ahead to the next epoch's arrival log and q files, which that epoch then
    starts with; only when a bucket of it would pass ``bucket_records`` does the
    submit wait for the round. Results, state and files are the same as without it;
    :meth:`commit` and a waiting :meth:`flush` wait for a running round, :attr:`busy`
    tells whether one runs.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        value_dtype: np.dtype | None = None,
        merge: str | MergeFn = "overwrite",
        ram_bytes: int = 64 << 20,
        buckets: int | None = None,
        fsync: bool | str = True,
        manifest: dict | None = None,
        compress_log: bool = True,
        background: bool = False,
    ) -> None:
        self.directory = Path(directory)
        # Merge rounds in a thread of their own (see the class docstring).
        self._background = bool(background)
        self._executor: ThreadPoolExecutor | None = None
        self._running: Future[_Round] | None = None  # the round in the background
        # Submits that came while it runs: (ops, keys, values, aux), added when it ends.
        self._held: list[tuple[Any, ...]] = []
        self._held_n = 0
        self._held_bytes = 0
        # The next epoch's live fields once held tuples were written ahead (_write_ahead).
        self._next: dict[str, Any] | None = None
        self._flush_asked = False  # flush(wait=False) came while a round ran
        self.last_round_s = 0.0  # wall seconds of the last round, to its results
        self._round_read = 0  # bytes the running round has read
        # Deflate the arrival log's blocks (all but the keys; see format). Either way
        # the directory reads back the same: each block says how it is stored.
        self._compress_log = bool(compress_log)
        self._log_scratch = bytearray()  # joins a block's columns before deflating
        self.directory.mkdir(parents=True, exist_ok=True)
        self.value_dtype = _EMPTY if value_dtype is None else np.dtype(value_dtype)
        if self.value_dtype.names is None:
            raise TypeError(f"value_dtype must be a structured dtype, got {self.value_dtype}")
        self._merger = Merger(self.value_dtype, merge)
        if fsync not in (True, False, "commit"):
            raise ValueError(f'fsync must be True, False or "commit", got {fsync!r}')
        self._fsync = bool(fsync)  # at commits
        self._fsync_rounds = fsync is True  # also in merge rounds and deliveries
        self._rec = np.dtype([("key", "<u8"), ("op", "u1"), ("value", self.value_dtype)])
        self._res = np.dtype([("unique", "?"), ("value", self.value_dtype)])
        self._broken: str | None = None
        self._dirty: set[Path] = set()
        self._spares: dict[str, Path] = {}  # kind -> obsolete file kept for reuse
        self._added = 0  # keys stored for the first time by the running round
        state = self._load(buckets)
        self.sizing: Sizing = plan(
            ram_bytes, self._rec.itemsize, buckets if state is None else state["buckets"]
        )
        self._k = self.sizing.buckets
        self._shift = np.uint64(64 - self.sizing.bits)
        if state is None:
            state = self._create()
        self._commits: list[dict] = state["commits"]
        if manifest is not None:
            self._snap = self._select_manifest(manifest)
            self._commits = [c for c in self._commits if c["seq"] <= self._snap["seq"]]
        else:
            self._snap = state["current"]
        self._counters: dict[str, Any] = dict(self._snap["counters"])
        self._recover()
        self._live = {key: copy.deepcopy(self._snap[key]) for key in _LIVE}
        # Tuples of the epoch not spilled to q files, in arrival order: (keys, ops,
        # values or None). At most a quarter of the RAM (Theorem 2's 2k buffers of
        # M bytes, half of them for records) and one merge unit.
        self._spill_at = max(1, min(self.sizing.bucket_records,
                                    self.sizing.ram_bytes // 4 // self._rec.itemsize))
        self._ram_keys: np.ndarray | None = None  # and _ram_ops, _ram_ids, _ram_values
        self._ram_n = 0
        self._ram_bn = np.zeros(self._k, np.int64)  # RAM tuples per bucket
        # Arrival log buffer, per submitted piece: (keys, aux lengths, ops, values, aux).
        self._arrivals: list[tuple[Any, ...]] = []
        self._arrivals_n = 0
        self._arrivals_bytes = 0
        # Per tuple in the arrival log besides its aux: key, aux length, op, value.
        self._arrival_bytes = 13 + self.value_dtype.itemsize
        self._reload()
        if manifest is not None:
            self._write_state(durable=True)
        self._gc()

    @classmethod
    def open(cls, directory: Path | str, manifest: dict | None = None, **options: Any) -> Drum:
        """Same as ``Drum(directory, manifest=manifest, **options)``."""
        return cls(directory, manifest=manifest, **options)

    # ------------------------------------------------------------------ input

    def check(self, keys: np.ndarray, aux: AuxInput | None = None) -> None:
        """Queue checks; outcomes come from :meth:`take_results` after a merge."""
        self.submit(np.full(len(keys), CHECK, np.uint8), keys, None, aux)

    def update(
        self, keys: np.ndarray, values: np.ndarray | None, aux: AuxInput | None = None
    ) -> None:
        """Queue updates: insert, or ``merge(stored, value)`` into the stored value."""
        self.submit(np.full(len(keys), UPDATE, np.uint8), keys, values, aux)

    def check_update(
        self, keys: np.ndarray, values: np.ndarray | None = None,
        aux: AuxInput | None = None,
    ) -> None:
        """Queue check+update (values default to zeros, merged like an update)."""
        self.submit(np.full(len(keys), CHECK_UPDATE, np.uint8), keys, values, aux)

    def submit(
        self, ops: np.ndarray, keys: np.ndarray, values: np.ndarray | None = None,
        aux: AuxInput | None = None,
    ) -> None:
        """Queue a mixed batch; ``ops`` holds CHECK (0), UPDATE (1) or CHECK_UPDATE (2).

        Only buffers, except that a merge round runs (and its results become
        available to :meth:`take_results`) whenever a bucket reaches its size limit.
        """
        self._usable()
        self._settle(wait=False)
        keys, ops, values = self._validate(ops, keys, values)
        if aux is None or isinstance(aux, (AuxArray, tuple)):
            aux = None if aux is None else AuxArray.of(aux)
            piece = self._piece(aux)
        else:
            # A list of bytes is joined piece by piece, for the same reason.
            piece = _LIST_PIECE
        if aux is not None and len(aux) != len(keys):
            raise ValueError(f"{len(aux)} aux items for {len(keys)} keys")
        start = 0
        if self._running is not None:
            self._hold(ops, keys, values, aux)
            return
        while start < len(keys):
            end = min(len(keys), start + piece, start + self._spill_at - self._ram_n)
            self._add(
                ops[start:end], keys[start:end],
                None if values is None else values[start:end],
                None if aux is None else AuxArray.of(aux[start:end]),
            )
            start = end
            if self._ram_n >= self._spill_at:
                self._guard(self._spill)
            if self._live["sn"] and int((np.asarray(self._live["qn"]) + self._ram_bn).max()) \
                    >= self.sizing.bucket_records:
                self._start_round()
                if self._running is not None and start < len(keys):
                    self._hold(ops[start:], keys[start:],
                               None if values is None else values[start:],
                               None if aux is None else aux[start:])
                    return

    def _piece(self, aux: AuxArray | None) -> int:
        """Tuples per piece of a submit: arrival-log blocks of about chunk_bytes (each
        is read back into a fresh buffer, and small buffers are recycled by malloc, see
        sizing)."""
        per = self._arrival_bytes + (aux.nbytes / max(1, len(aux)) if aux else 0)
        return max(1, int(self.sizing.chunk_bytes // per))

    def _hold(self, ops: np.ndarray, keys: np.ndarray, values: np.ndarray | None,
              aux: Any) -> None:
        """Keep (a copy of) a submit that came while a round runs in the background. Once
        what is held would pass HELD_SHARE of the RAM budget, write it ahead to the next
        epoch's files, or, when the next epoch cannot take it, wait for the round."""
        if isinstance(aux, AuxArray):
            aux = AuxArray(aux.blob, aux.offsets.copy())  # the blob is immutable bytes
        elif aux is not None:
            aux = list(aux)
        self._held.append((ops.copy(), keys.copy(), None if values is None else values.copy(),
                           aux))
        self._held_n += len(keys)
        self._held_bytes += self._rec.itemsize * len(keys) + (
            0 if aux is None else aux.nbytes if isinstance(aux, AuxArray)
            else sum(map(len, aux)))
        if self._held_bytes >= self.sizing.ram_bytes * HELD_SHARE \
                and not self._guard(self._write_ahead):
            self._settle(wait=True)

    def _write_ahead(self) -> bool:
        """Move the held tuples to the next epoch's arrival log and q files, as a spill
        would, so that a long background round does not make submits wait; the next
        epoch starts with them (``_round_end``). Return False, writing nothing, when they
        would fill a bucket of the next epoch past ``bucket_records``: that epoch's round
        is then due, and the submit waits for the running one.

        The round does not touch these files, and a state names them only once the
        round has ended: a crash before that leaves them unnamed (reopening deletes
        them; they were never committed). They go to the q files in groups of whole
        submits of about half a RAM buffer, so the work arrays stay small.
        """
        k, e = self._k, self._snap["epoch"] + 1
        nxt = self._next or {"q": [0] * k, "qn": [0] * k, "sn": 0, "a": 0, "an": 0}
        counts = np.zeros(k, np.int64)
        for _, keys, _, _ in self._held:
            counts += np.bincount(self._bucket_of(keys), minlength=k)
        if int((np.asarray(nxt["qn"]) + counts).max()) > self.sizing.bucket_records:
            return False
        group: list[_Columns] = []
        group_n = 0
        log: list[tuple[Any, ...]] = []
        log_n = log_bytes = 0
        for i, (ops, keys, values, aux) in enumerate(self._held):
            if values is None:
                values = np.zeros(len(keys), self.value_dtype)
            aux = None if aux is None else AuxArray.of(aux)
            piece = self._piece(aux)
            for s in range(0, len(keys), piece):
                t = min(len(keys), s + piece)
                part = None if aux is None else AuxArray.of(aux[s:t])
                lengths, data = _log_columns(part, t - s)
                self._counters["checked_bytes"] += 8 * (t - s) + len(data)
                log.append((keys[s:t], lengths, ops[s:t], values[s:t], data))
                log_n += t - s
                log_bytes += self._arrival_bytes * (t - s) + len(data)
                if log_bytes >= self.sizing.chunk_bytes:
                    self._log_block(log, log_n, log_bytes, e, nxt)
                    log, log_n, log_bytes = [], 0, 0
            group.append((keys, ops, values))
            group_n += len(keys)
            if group_n >= self._spill_at // 2 or i == len(self._held) - 1:
                if log:  # the log is always ahead of the q files (sn is its prefix)
                    self._log_block(log, log_n, log_bytes, e, nxt)
                    log, log_n, log_bytes = [], 0, 0
                columns = [np.concatenate([g[j] for g in group]) for j in range(3)]
                ids = self._bucket_of(columns[0])
                self._write_q(_by_bucket(*columns, ids, np.bincount(ids, minlength=k)),
                              e, nxt)
                group, group_n = [], 0
        self._next = nxt
        self._held = []
        self._held_n = self._held_bytes = 0
        return True

    def _validate(self, ops, keys, values):
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

    def _add(self, ops, keys, values, aux: AuxArray | None) -> None:
        m = len(keys)
        keys, ops, values = self._keep(keys, ops, values)
        # The arrival log holds every tuple in arrival order: results are delivered
        # from it, and tuples not spilled to q files are reloaded from it on open.
        lengths, data = _log_columns(aux, m)
        self._counters["checked_bytes"] += 8 * m + len(data)
        self._arrivals.append((keys, lengths, ops, values, data))
        self._arrivals_n += m
        self._arrivals_bytes += self._arrival_bytes * m + len(data)
        if self._arrivals_bytes >= self.sizing.chunk_bytes:
            self._guard(self._flush_arrivals)

    def _keep(self, keys: np.ndarray, ops: np.ndarray, values: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copy tuples into the RAM buffer, after those held (values None: zeros);
        return views of them there (the caller may reuse its arrays)."""
        a, b = self._ram_n, self._ram_n + len(keys)
        if self._ram_keys is None:
            # Allocated once and reused by every epoch: the pages stay mapped, so the
            # buffer costs no page faults after the first epoch (and RAM stays fixed).
            cap = self._spill_at
            self._ram_keys = np.empty(cap, np.uint64)
            self._ram_ops = np.empty(cap, np.uint8)
            self._ram_ids = np.empty(cap, np.uint16)
            self._ram_values = np.empty(cap, self.value_dtype)
        self._ram_keys[a:b] = keys
        self._ram_ops[a:b] = ops
        if self.value_dtype.itemsize:
            self._ram_values[a:b] = 0 if values is None else values
        ids = self._ram_ids[a:b]
        if self._k > 1:
            ids[:] = keys >> self._shift
        else:
            ids[:] = 0
        self._ram_n = b
        self._ram_bn += np.bincount(ids, minlength=self._k)
        return self._ram_keys[a:b], self._ram_ops[a:b], self._ram_values[a:b]

    def _bucket_of(self, keys: np.ndarray) -> np.ndarray:
        if self._k == 1:
            return np.zeros(len(keys), np.uint16)
        return (keys >> self._shift).astype(np.uint16)

    def _ram_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The RAM tuples as (keys, ops, values, bucket ids), in arrival order (views)."""
        n = self._ram_n
        if self._ram_keys is None:
            return (np.empty(0, np.uint64), np.empty(0, np.uint8),
                    np.empty(0, self.value_dtype), np.empty(0, np.uint16))
        return self._ram_keys[:n], self._ram_ops[:n], self._ram_values[:n], self._ram_ids[:n]

    def _clear_ram(self) -> None:
        self._ram_n = 0
        self._ram_bn[:] = 0

    # ------------------------------------------------------------------ disk appends

    def _append(self, path: Path, length: int, kind: bytes, bucket: int, itemsize: int,
                *block: bytes | memoryview) -> int:
        """Write the buffers of ``block`` (from :func:`block_parts`) at ``length`` of
        ``path`` (creating it); return the new length."""
        if length == 0:
            spare = self._take_spare(kind.decode())
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
        self._dirty.add(path)
        self._counters["bytes_written"] += written
        return length + written

    def _spill(self) -> None:
        """Move the RAM tuples to per-bucket q files (the epoch is then in bucket mode).

        They are a prefix of the arrival log: ``sn`` counts them, so reopening
        reloads only the tuples after it.
        """
        self._flush_arrivals()  # it holds views of the RAM buffer, which is reused
        self._write_q(self._ram_by_bucket(), self._snap["epoch"], self._live)
        self._clear_ram()

    def _write_q(self, by_bucket: dict[int, _Columns], epoch: int, live: dict) -> None:
        """Append tuples per bucket to the q files of ``epoch``, whose valid lengths and
        counts are in ``live`` (the tuples are spilled: ``sn`` counts them too)."""
        for b, (keys, ops, values) in by_bucket.items():
            live["q"][b] = self._append(self.directory / _name("q", epoch, b), live["q"][b],
                                        b"q", b, self._rec.itemsize,
                                        *block_parts(len(keys), [keys, ops, values]))
            live["qn"][b] += len(keys)
            live["sn"] += len(keys)

    def _flush_arrivals(self) -> None:
        if not self._arrivals:
            return
        self._log_block(self._arrivals, self._arrivals_n, self._arrivals_bytes,
                        self._snap["epoch"], self._live)
        self._arrivals.clear()
        self._arrivals_n = 0
        self._arrivals_bytes = 0

    def _log_block(self, pieces: list[tuple[Any, ...]], n: int, nbytes: int, epoch: int,
                   live: dict) -> None:
        """Append ``pieces`` (keys, aux lengths, ops, values, aux data) of ``n`` tuples
        and about ``nbytes`` as one block to the arrival log of ``epoch``, whose valid
        length and count are ``live["a"]`` and ``live["an"]``."""
        keys, lengths, ops, values, data = zip(*pieces)
        rest: list = [_cat(lengths), _cat(ops)]
        if self.value_dtype.itemsize:
            rest.append(_cat(values))
        if self._compress_log and len(self._log_scratch) < nbytes:
            self._log_scratch = bytearray(nbytes)  # grows to ~2 chunks
        block = block_parts(n, arrival_parts(_cat(keys).astype("<u8", copy=False),
                                             [*rest, *data], self._compress_log,
                                             self._log_scratch))
        path = self.directory / _name("a", epoch)
        live["a"] = self._append(path, live["a"], b"a", 0, 0, *block)
        live["an"] += n

    def _arrival_block(self, path: Path, at: int, n: int, payload: bytes
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, AuxArray]:
        """(keys, ops, values, aux) of the arrival-log block at offset ``at`` of ``path``
        (views of ``payload``, or of its inflated rest)."""
        vsize = self.value_dtype.itemsize
        keys = np.frombuffer(payload, "<u8", n)
        rest, o = arrival_rest(path, at, n, payload)
        lengths = np.frombuffer(rest, "<u4", n, offset=o)
        ops = np.frombuffer(rest, "u1", n, offset=o + 4 * n)
        values = np.frombuffer(rest, self.value_dtype, n, offset=o + 5 * n) if vsize else \
            np.empty(n, self.value_dtype)
        offsets = np.empty(n + 1, np.int64)
        offsets[0] = o + (self._arrival_bytes - 8) * n
        np.cumsum(lengths, out=offsets[1:])
        offsets[1:] += offsets[0]
        if int(offsets[-1]) != len(rest):
            raise DrumCorruptError(path, f"arrival block at offset {at}: aux lengths "
                                   "do not match its size")
        return keys, ops, values, AuxArray(rest, offsets)

    def _reload(self) -> None:
        """Put the current epoch's tuples that are not in q files back in RAM."""
        live = self._live
        skip = live["sn"]
        if live["an"] == skip:
            return
        path = self.directory / _name("a", self._snap["epoch"])
        for at, n, payload in iter_blocks_at(path, b"a", end=live["a"]):
            self._counters["bytes_read"] += len(payload) + 12
            if skip >= n:
                skip -= n
                continue
            keys, ops, values, _ = self._arrival_block(path, at, n, payload)
            while skip < n:  # reopened with less RAM: spill as submit() would
                end = min(n, skip + self._spill_at - self._ram_n)
                self._keep(keys[skip:end], ops[skip:end], values[skip:end])
                skip = end
                if self._ram_n >= self._spill_at:
                    self._spill()
            skip = 0

    def _sync_dirty(self) -> None:
        if self._fsync:
            for path in sorted(self._dirty):
                durable.fsync_path(path)
        self._dirty.clear()

    # ------------------------------------------------------------------ merge rounds

    def flush(self, wait: bool = True) -> None:
        """Merge everything pending now (results go to :meth:`take_results`).

        With ``background`` and ``wait=False`` the round runs in the background, after
        the one running if there is one; else this returns once it is done.
        """
        self._usable()
        if wait:
            self._settle_all()
            if self._live["an"] + self._arrivals_n:
                self._guard(self._round)
            return
        self._settle(wait=False)
        if self._running is not None:
            self._flush_asked = True
        elif self._live["an"] + self._arrivals_n:
            self._start_round()

    @property
    def busy(self) -> bool:
        """A round runs in the background (or is done and not yet ended: the next call
        into the repository ends it)."""
        return self._running is not None

    def _start_round(self) -> None:
        """A merge round: in the background when so configured, else now."""
        if not self._background:
            self._guard(self._round)
            return
        rnd = self._guard(self._round_begin)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="drum-round")
        self._running = self._executor.submit(self._round_body, rnd)

    def _settle(self, wait: bool) -> None:
        """End the background round if it is done (``wait``: once it is done), then add
        the tuples held meanwhile and start a flush asked for meanwhile."""
        running = self._running
        if running is None or not (wait or running.done()):
            return
        self._running = None
        rnd = self._guard(running.result)  # its error, if it failed, breaks the object
        rnd.waited_s = time.perf_counter() - rnd.body_done
        self._guard(self._round_end, rnd)
        held, self._held = self._held, []
        self._held_n = self._held_bytes = 0
        for ops, keys, values, aux in held:
            self.submit(ops, keys, values, aux)  # may start a round, and hold again
        if self._flush_asked and self._running is None:
            self._flush_asked = False
            self.flush(wait=False)

    def settle(self) -> None:
        """Wait for background rounds to end (their results then come from
        :meth:`take_results`) and add the tuples held meanwhile."""
        self._usable()
        self._settle_all()

    def _settle_all(self) -> None:
        while self._running is not None:
            self._settle(wait=True)

    def _round(self) -> None:
        """A whole merge round, now (see :meth:`_round_begin`)."""
        self._round_end(self._round_body(self._round_begin()))

    def _round_begin(self) -> _Round:
        """The first part of a round, in the caller's thread: the arrival log written,
        the round's files opened, its plan made. :meth:`_round_body` may then run in
        another thread, as long as nothing adds tuples, spills or collects files until
        :meth:`_round_end` (see ``background``)."""
        # RAM tuples are merged straight from RAM: a crash before the round completes
        # finds them in the arrival log again.
        self._flush_arrivals()
        snap, e = self._snap, self._snap["epoch"]
        started = time.perf_counter()
        r_path = self.directory / _name("r", e)
        r_file = open(r_path, "wb")
        self._dirty.add(r_path)
        runs = snap["runs"]
        j = fold_start([sum(r["counts"]) for r in runs])
        plan = (runs[:j], runs[j:])  # runs only read, runs rewritten with the delta
        rebase = j == 0 and bool(runs)
        # The spare is the largest obsolete run (see _gc): worth overwriting only by a
        # new base; a delta run is small, and cutting a big spare down costs as much as
        # unlinking it.
        writer = _CacheWriter(self.directory / _cache_file(e + 1), self._shift, self._k,
                              self.value_dtype, self.sizing.chunk_bytes,
                              (lambda: self._take_spare("c")) if rebase else (lambda: None))
        return _Round(e, started, r_file, writer, plan, rebase, arrival=not self._live["sn"])

    def _round_body(self, rnd: _Round) -> _Round:
        """The merge itself: reads runs and the epoch's tuples, writes the new run and the
        results. Touches no state the caller's thread uses meanwhile (``_round_read``
        counts its reads apart from deliveries')."""
        self._added = 0
        self._round_read = 0
        try:
            rnd.r_file.write(encode_header(b"r", 0, self._res.itemsize))
            if rnd.arrival:
                rnd.r_lens, rnd.sort_s = self._merge_ram(rnd.r_file, rnd.writer, rnd.plan)
            else:
                rnd.r_lens = [0] * self._k
                ram = self._ram_by_bucket()
                pending = np.asarray(self._live["qn"]) + self._ram_bn
                # Folding rewrites the folded runs of every bucket, pending tuples or not.
                for unit in _units(pending, UNIT_RECORDS, every=bool(rnd.plan[1])):
                    rnd.sort_s += self._merge_unit(unit, rnd.epoch, rnd.r_file, rnd.r_lens,
                                                   rnd.writer, ram, rnd.plan)
            rnd.r_size = rnd.r_file.tell()
            rnd.c_size = rnd.writer.close(self._fsync_rounds)
        finally:
            rnd.r_file.close()
            if not rnd.writer.closed:
                rnd.writer.abort()
        rnd.added, rnd.read = self._added, self._round_read
        rnd.body_done = time.perf_counter()
        return rnd

    def _round_end(self, rnd: _Round) -> None:
        """The last part of a round, in the caller's thread: the new run and the epoch's
        results go into the state, which is written; the next epoch begins."""
        snap, live, e = self._snap, self._live, rnd.epoch
        writer, plan = rnd.writer, rnd.plan
        self._counters["bytes_read"] += rnd.read
        self._counters["bytes_written"] += rnd.r_size
        new_runs = list(plan[0])
        if writer.sections:
            if not self._fsync_rounds:
                self._dirty.add(writer.path)
            self._counters["bytes_written"] += rnd.c_size
            run: dict[str, Any] = {"gen": e + 1, "offs": [0] * self._k,
                                   "sizes": [0] * self._k, "counts": [0] * self._k}
            for b, (offset, length, count) in writer.sections.items():
                run["offs"][b], run["sizes"][b], run["counts"][b] = offset, length, count
            new_runs.append(run)
            snap["files"][str(e + 1)] = rnd.c_size
        snap["runs"] = new_runs
        live_gens = {str(r["gen"]) for r in new_runs}
        snap["files"] = {g: n for g, n in snap["files"].items() if g in live_gens}
        snap["stored"] += rnd.added
        self._clear_ram()
        if self._fsync_rounds:
            self._sync_dirty()
        snap["results"].append({"epoch": e, "a": live["a"], "an": live["an"], "r": rnd.r_lens,
                                "arrival": rnd.arrival})
        snap["epoch"] = e + 1
        for key in ("q", "qn"):
            snap[key] = [0] * self._k
        snap["sn"] = snap["a"] = snap["an"] = 0
        # The tuples written ahead while the round ran begin the new epoch.
        self._live = self._next or {key: copy.deepcopy(snap[key]) for key in _LIVE}
        self._next = None
        c = self._counters
        c["merges"] += 1
        c["base_rewrites"] += rnd.rebase
        c["last_batch"] = live["an"]
        c["sort_s"] += rnd.sort_s
        # A round run in the background may have waited, done, to be ended here.
        self.last_round_s = rnd.body_done - rnd.started
        c["merge_s"] += time.perf_counter() - rnd.started - rnd.waited_s - rnd.sort_s
        self._write_state()
        self._gc()

    def _merge_ram(self, r_file: Any, writer: _CacheWriter, plan: _Plan
                   ) -> tuple[list[int], float]:
        """Merge an epoch held wholly in RAM (no spill) in units of consecutive buckets.

        Its results are put back in arrival order and written as one run, which is
        delivered without reordering.
        """
        keys, ops, values, ids = self._ram_columns()
        order = np.argsort(ids, kind="stable")  # u16: radix sort
        counts = self._ram_bn
        ends = np.cumsum(counts).tolist()
        res = np.empty(len(keys), self._res)
        sort_s = 0.0
        for unit in _units(counts, UNIT_RECORDS, every=bool(plan[1])):
            idx = order[ends[unit[0]] - int(counts[unit[0]]):ends[unit[-1]]]
            out = self._merge_stream(unit, keys[idx], ops[idx], values[idx], writer, plan)
            _as_void(res)[idx] = _as_void(self._results(out))
            sort_s += out.sort_s
        return [self._write_blocks(r_file, res)], sort_s

    def _merge_stream(self, unit: list[int], keys: np.ndarray, ops: np.ndarray,
                      values: np.ndarray, writer: _CacheWriter, plan: _Plan) -> Any:
        """Merge tuples of the consecutive buckets ``unit`` with their runs, one stream:
        looked up in every run, written to the new run with the folded runs."""
        older = [self._run_chunks(run, unit) for run in plan[0]]
        cache = merge_runs([self._run_chunks(run, unit) for run in plan[1]])
        try:
            out = merge_bucket(keys, ops, values, older, cache, self._merger, writer.write)
        finally:
            for stream in (cache, *older):
                stream.close()  # generators holding old run files open
        writer.end_section()
        self._added += len(out.added)
        return out

    def _results(self, out: Any) -> np.ndarray:
        res = np.empty(len(out.unique), self._res)
        res["unique"] = out.unique
        if self.value_dtype.itemsize:
            res["value"] = out.before
        return res

    def _ram_by_bucket(self) -> dict[int, _Columns]:
        """The RAM tuples per bucket in arrival order, as columns (keys, ops, values)."""
        return _by_bucket(*self._ram_columns(), self._ram_bn)

    def _merge_unit(self, unit: list[int], e: int, r_file: Any, r_lens: list[int],
                    writer: _CacheWriter, ram: dict[int, _Columns], plan: _Plan) -> float:
        """Merge the pending tuples of the consecutive buckets ``unit`` (in q files, then
        in RAM) as one sorted stream; return sort seconds."""
        live = self._live
        parts: list[_Columns] = []
        counts = []
        for b in unit:
            n = len(parts)
            if live["q"][b]:
                parts.extend(self._read_q(self.directory / _name("q", e, b), live["q"][b]))
            if b in ram:
                parts.append(ram[b])
            counts.append(sum(len(p[0]) for p in parts[n:]))
        if parts:
            keys, ops, values = (np.concatenate([p[i] for p in parts]) for i in range(3))
        else:
            keys, ops, values = (np.empty(0, np.uint64), np.empty(0, np.uint8),
                                 np.empty(0, self.value_dtype))
        out = self._merge_stream(unit, keys, ops, values, writer, plan)
        res = self._results(out)
        start = 0
        for b, n in zip(unit, counts):
            r_lens[b] = self._write_blocks(r_file, res[start:start + n])
            start += n
        return out.sort_s

    def _read_q(self, path: Path, end: int) -> list[_Columns]:
        """The blocks of a q file as columns (keys, ops, values), in order."""
        vdt = self.value_dtype
        parts = []
        for at, n, p in iter_blocks_at(path, b"q", end=end):
            if len(p) != n * self._rec.itemsize:
                raise DrumCorruptError(path, f"block at offset {at}: {len(p)} bytes "
                                       f"for {n} records")
            values = np.frombuffer(p, vdt, n, offset=9 * n) if vdt.itemsize else \
                np.empty(n, vdt)
            parts.append((np.frombuffer(p, "<u8", n), np.frombuffer(p, "u1", n, offset=8 * n),
                          values))
        self._round_read += end
        return parts

    def _run_chunks(self, run: dict, unit: list[int]) -> Iterator[Chunk]:
        """The sections of ``run`` for the consecutive buckets ``unit``: one sorted stream."""
        for b in unit:
            if run["sizes"][b]:
                yield from self._section_chunks(run["gen"], run["offs"][b], run["sizes"][b])

    def _section_chunks(self, gen: int, start: int, size: int) -> Iterator[Chunk]:
        path = self.directory / _cache_file(gen)
        vdt = self.value_dtype
        for n, payload in iter_blocks(path, b"c", start=start, end=start + size, footer=True):
            self._round_read += len(payload) + 12
            keys = np.frombuffer(payload, "<u8", n)
            values = np.frombuffer(payload, vdt, n, offset=8 * n) if vdt.itemsize else \
                np.zeros(n, vdt)
            yield keys, values

    def _write_blocks(self, f: Any, recs: np.ndarray) -> int:
        """Append ``recs`` to ``f`` in blocks of at most ``chunk_bytes``; return bytes written."""
        per = max(1, self.sizing.chunk_bytes // max(1, recs.dtype.itemsize))
        start = f.tell()
        for s in range(0, len(recs), per):
            part = recs[s:s + per]
            write_parts(f, block_parts(len(part), [part]))
        return f.tell() - start

    # ------------------------------------------------------------------ results

    def take_results(self) -> Iterator[DrumResult]:
        """Yield the results of every merged round, oldest first, in arrival order.

        Results are read back from disk in chunks, so RAM stays bounded. A round
        counts as taken once its last chunk was yielded and the generator resumed
        (exhaust the iterator); an interrupted round is delivered again, from its
        start, by the next call -- also after reopening the repository.
        """
        self._usable()
        self._settle(wait=False)
        while self._snap["results"]:
            entry = self._snap["results"][0]
            yield from self._deliver(entry)
            self._snap["results"].pop(0)
            self._guard(self._write_state)
            if self._running is None:  # else the round's new files are in no state yet
                self._guard(self._gc)

    def _deliver(self, entry: dict) -> Iterator[DrumResult]:
        e = entry["epoch"]
        if not entry["a"]:
            return
        r_path = self.directory / _name("r", e)
        res_streams = {}
        start = HEADER_SIZE
        for b, length in enumerate(entry["r"]):
            if length:
                res_streams[b] = _Stream(self, r_path, start, start + length, self._res)
            start += length
        # Per delivered tuple: its result record, key and op, plus ~40 bytes of
        # sorting scratch; aux is a view of the arrival block, already in RAM.
        step = max(1, self.sizing.chunk_bytes // (self._res.itemsize + 49))
        a_path = self.directory / _name("a", e)
        for at, n, payload in iter_blocks_at(a_path, b"a", end=entry["a"]):
            self._counters["bytes_read"] += len(payload) + 12
            keys, ops, _, aux = self._arrival_block(a_path, at, n, payload)
            for s in range(0, n, step):
                t = slice(s, s + step)
                if entry["arrival"]:
                    res = res_streams[0].take(len(keys[t])) if res_streams else \
                        np.empty(0, self._res)
                    res = res.copy()
                else:
                    res = self._reorder(keys[t], res_streams)
                yield DrumResult(e, keys[t].copy(), ops[t].copy(), res["unique"], res["value"],
                                 aux[t])

    def _reorder(self, keys: np.ndarray, res_streams: dict) -> np.ndarray:
        """The results of ``keys`` (bucket mode: a run per bucket), in arrival order."""
        ids = self._bucket_of(keys)
        # Stable by bucket: the records of bucket b, in its arrival order, go to
        # the positions of b's tuples, in order.
        order = np.argsort(ids, kind="stable")
        counts = np.bincount(ids, minlength=self._k)
        recs = [res_streams[b].take(int(counts[b])) for b in np.flatnonzero(counts).tolist()]
        out = np.empty(len(keys), self._res)
        _as_void(out)[order] = _as_void(np.concatenate(recs))
        return out

    # ------------------------------------------------------------------ commit / state

    def commit(self) -> dict:
        """Make every tuple queued so far durable and return a JSON-able manifest.

        A tuple is *acknowledged* once a ``commit()`` called after it returned:
        it survives a crash and is replayed (merged) by the next round after
        reopening. Tuples queued after the last commit may be lost by a crash,
        unless a merge round already consumed them (rounds are durable too;
        with ``fsync="commit"`` only against a killed process, see the module).
        Reopening with this manifest restores exactly this state as long as it
        is one of the last two commits (older generations are deleted then).
        """
        self._usable()
        self._settle_all()
        self._guard(self._flush_arrivals)
        self._guard(self._sync_dirty)
        snap = self._snap
        for key in _LIVE:
            snap[key] = copy.deepcopy(self._live[key])
        snap["seq"] += 1
        snap["id"] = secrets.token_hex(8)
        snap["counters"] = dict(self._counters)
        manifest = copy.deepcopy(snap)
        self._commits = (self._commits + [copy.deepcopy(snap)])[-2:]
        self._guard(self._write_state, True)
        self._guard(self._gc)
        return manifest

    def close(self) -> None:
        """Forget buffered tuples that were not committed. A background round is waited
        for, not ended: its files are in no state, and reopening removes them."""
        if self._running is not None:
            wait_for_futures([self._running])
            self._running = None
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
        self._broken = "closed"

    def __enter__(self) -> Drum:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> DrumStats:
        c = self._counters
        moved = c["bytes_read"] + c["bytes_written"]
        return DrumStats(
            keys_stored=int(self._snap["stored"]),
            pending=int(self._live["an"] + self._arrivals_n + self._held_n
                        + (self._next["an"] if self._next else 0)),
            bytes_read=c["bytes_read"], bytes_written=c["bytes_written"], merges=c["merges"],
            sort_s=c["sort_s"], merge_s=c["merge_s"], last_batch=c["last_batch"],
            checked_bytes=c["checked_bytes"],
            alpha=moved / c["checked_bytes"] if c["checked_bytes"] else 0.0,
            ram_bytes=self.sizing.ram_bytes, buckets=self._k, runs=len(self._snap["runs"]),
            base_rewrites=c["base_rewrites"],
        )

    def _usable(self) -> None:
        if self._broken is not None:
            raise DrumError(f"DRUM {self.directory} is unusable ({self._broken}); reopen it")

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a state-changing step; any failure leaves the object unusable.

        After a failed write the in-RAM view no longer matches the disk, so the
        only safe continuation is to reopen from ``STATE.json``.
        """
        try:
            return fn(*args)
        except OSError as exc:
            self._broken = repr(exc)  # not the exception: its traceback pins open files
            raise DrumIOError(
                exc.errno, f"DRUM write in {self.directory} failed: {exc.strerror or exc}; "
                "the repository keeps its last committed state, reopen it",
                getattr(exc, "filename", None),
            ) from exc
        except BaseException as exc:
            self._broken = repr(exc)
            raise

    def _state_path(self) -> Path:
        return self.directory / STATE

    def _load(self, buckets: int | None) -> dict | None:
        """The directory's state, or None for a new repository."""
        path = self._state_path()
        if not path.exists():
            if any(_FILE_RE.match(p.name) for p in self.directory.iterdir()):
                raise DrumCorruptError(path, "missing, but DRUM data files are present")
            return None
        raw = path.read_bytes()
        body, _, crc = raw.rstrip(b"\n").rpartition(b"\n")
        try:
            if int(crc, 16) != zlib.crc32(body):
                raise ValueError("checksum mismatch")
            state = json.loads(body)
        except ValueError as exc:
            raise DrumCorruptError(path, f"unreadable state ({exc})") from None
        if state.get("format") != STATE_VERSION:
            raise DrumError(
                f"{path} is in DRUM state format {state.get('format')}, this drumbeat reads "
                f"only format {STATE_VERSION}: the directory was written by another version "
                "(there is no converter; start it anew)")
        stored = np.dtype(_descr(state["value_dtype"]))
        if stored != self.value_dtype:
            raise ValueError(f"{self.directory} stores values of {stored}, not {self.value_dtype}")
        if buckets is not None and buckets != state["buckets"]:
            raise ValueError(f"{self.directory} has {state['buckets']} buckets, not {buckets}")
        return state

    def _create(self) -> dict:
        k = self._k
        self._snap = {
            "seq": 0, "id": "", "epoch": 1, "runs": [], "stored": 0, "files": {},
            "q": [0] * k, "qn": [0] * k, "sn": 0, "a": 0, "an": 0, "results": [],
            "counters": {"bytes_read": 0, "bytes_written": 0, "merges": 0, "sort_s": 0.0,
                         "merge_s": 0.0, "last_batch": 0, "checked_bytes": 0,
                         "base_rewrites": 0},
        }
        self._commits = []
        self._counters = dict(self._snap["counters"])
        self._write_state(durable=True)
        return {"buckets": k, "current": self._snap, "commits": []}

    def _write_state(self, durable: bool = False) -> None:
        """Replace STATE.json; fsynced if ``durable`` (commits) or rounds are synced too."""
        self._snap["counters"] = dict(self._counters)
        state = {
            "format": STATE_VERSION,
            "value_dtype": np.lib.format.dtype_to_descr(self.value_dtype),
            "buckets": self._k,
            "current": self._snap,
            "commits": self._commits,
        }
        _write_state_file(self._state_path(), state,
                          self._fsync if durable else self._fsync_rounds)

    def _select_manifest(self, manifest: dict) -> dict:
        for c in self._commits:
            if c["seq"] == manifest.get("seq") and c["id"] == manifest.get("id"):
                return copy.deepcopy(c)
        raise DrumError(
            f"manifest (commit {manifest.get('seq')}) is not one of the last two commits of "
            f"{self.directory}; its files are gone"
        )

    def _recover(self) -> None:
        """Cut pending files back to the snapshot and check that every file it names exists."""
        snap, e = self._snap, self._snap["epoch"]
        for b in range(self._k):
            _cut(self.directory / _name("q", e, b), snap["q"][b], b"q")
        for run in snap["runs"]:
            if str(run["gen"]) not in snap["files"]:
                raise DrumCorruptError(self._state_path(), f"run {run['gen']} has no file")
        for gen, size in snap["files"].items():
            path = self.directory / _cache_file(int(gen))
            check_header(path, b"c")
            if path.stat().st_size != size:
                raise DrumCorruptError(path, f"{path.stat().st_size} bytes, state says {size}")
        _cut(self.directory / _name("a", e), snap["a"], b"a")
        for entry in snap["results"]:
            ep = entry["epoch"]
            _need(self.directory / _name("a", ep), entry["a"], b"a")
            if entry["a"]:
                _need(self.directory / _name("r", ep), HEADER_SIZE + sum(entry["r"]), b"r")

    def _gc(self) -> None:
        """Delete files that neither the current state nor a kept commit refers to."""
        keep: set[str] = {_name("a", self._snap["epoch"])}
        keep.update(_name("q", self._snap["epoch"], b) for b in range(self._k))
        for snap in [self._snap, *self._commits]:
            keep.update(_refs(snap, self._k))
        for path in self.directory.iterdir():
            if path in self._spares.values():  # also one kept earlier in this loop
                continue
            match = _FILE_RE.match(path.name)
            if (match and path.name not in keep) or path.name.endswith(".tmp"):
                kind = match.group(1) if match else ""
                spare = self._spares.get(kind)
                if kind in _SPARE_KINDS and (spare is None or (
                        kind == "c" and path.stat().st_size > spare.stat().st_size)):
                    # Kept for the next file of its kind: overwriting a file costs no
                    # new pages and no freed blocks (unlinking an 800 MB cache took
                    # ~0.3 s here, and fresh page-cache pages are slow on this VM).
                    # Of obsolete runs the largest, an old base, is kept for the next base.
                    self._spares[kind] = path.with_name(f"spare-{kind}.tmp")
                    os.replace(path, self._spares[kind])
                else:
                    path.unlink(missing_ok=True)
                self._dirty.discard(path)

    def _take_spare(self, kind: str) -> Path | None:
        """An obsolete file of ``kind`` to be renamed and overwritten, if one was kept."""
        return self._spares.pop(kind, None)


def _by_bucket(keys: np.ndarray, ops: np.ndarray, values: np.ndarray, ids: np.ndarray,
               counts: np.ndarray) -> dict[int, _Columns]:
    """Tuples per bucket (``ids``, ``counts`` tuples in each) in their order, as columns.

    Columns, not packed records: gathering three plain arrays is about half the
    work of building and gathering 9-byte records (a spill of 16 M tuples
    took ~1.1 s that way, ~0.7 s this way here).
    """
    order = np.argsort(ids, kind="stable")  # u16: radix sort
    keys = np.take(keys, order).astype("<u8", copy=False)
    ops = np.take(ops, order)
    values = _take_records(values, order) if values.dtype.itemsize else \
        np.empty(len(order), values.dtype)
    end = np.cumsum(counts)
    out = {}
    for b in np.flatnonzero(counts).tolist():
        s, t = int(end[b] - counts[b]), int(end[b])
        out[b] = (keys[s:t], ops[s:t], values[s:t])
    return out


def _log_columns(aux: AuxArray | None, n: int) -> tuple[np.ndarray, bytes | memoryview]:
    """The arrival log's aux columns of ``n`` tuples: their lengths and their bytes."""
    if aux is None:
        return np.zeros(n, "<u4"), b""
    return aux.lengths().astype("<u4"), aux.data()


def _refs(snap: dict, k: int) -> set[str]:
    e = snap["epoch"]
    names = {_cache_file(int(g)) for g in snap["files"]}
    names.update(_name("q", e, b) for b in range(k) if snap["q"][b])
    if snap["a"]:
        names.add(_name("a", e))
    for entry in snap["results"]:
        names.add(_name("a", entry["epoch"]))
        names.add(_name("r", entry["epoch"]))
    return names


def _cut(path: Path, length: int, kind: bytes) -> None:
    """Truncate an append-only file to its recorded valid length (0: remove it)."""
    if not length:
        path.unlink(missing_ok=True)
        return
    _need(path, length, kind)
    with open(path, "r+b") as f:
        f.truncate(length)


def _need(path: Path, length: int, kind: bytes) -> None:
    if not length:
        return
    check_header(path, kind)
    size = path.stat().st_size
    if size < length:
        raise DrumCorruptError(path, f"truncated: {size} bytes, {length} recorded")


def _write_state_file(path: Path, state: dict, fsync: bool) -> None:
    body = json.dumps(state, separators=(",", ":")).encode()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(body + b"\n" + f"{zlib.crc32(body):08x}\n".encode())
        if fsync:
            f.flush()
            durable.fsync(f.fileno())
    if fsync:
        # New data files must be reachable before the state names them.
        durable.fsync_dir(path.parent)
    os.replace(tmp, path)
    if fsync:
        durable.fsync_dir(path.parent)


def _descr(d: Any) -> Any:
    """JSON turns the dtype descr's tuples into lists; numpy wants tuples back."""
    if isinstance(d, list):
        return [tuple(_descr(x) for x in item) if isinstance(item, list) else item for item in d]
    return d


def _as_void(recs: np.ndarray) -> np.ndarray:
    """The records as opaque fixed-size items: numpy moves those with memcpy,
    while indexing a structured array copies field by field (~4x slower)."""
    return recs.view(np.dtype((np.void, recs.dtype.itemsize)))


def _take_records(recs: np.ndarray, order: np.ndarray) -> np.ndarray:
    return np.take(_as_void(recs), order).view(recs.dtype)


def _cat(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _describe(x: object) -> str:
    if isinstance(x, np.ndarray):
        return f"ndarray {x.dtype} {x.shape}"
    return type(x).__name__


@dataclass(slots=True)
class _Round:
    """A merge round between its parts (:meth:`Drum._round_begin`, ``_round_body``,
    ``_round_end``)."""

    epoch: int
    started: float  # perf_counter
    r_file: Any
    writer: _CacheWriter
    plan: _Plan
    rebase: bool
    arrival: bool  # merged from RAM (no spill): results in arrival order
    r_lens: list[int] | None = None
    sort_s: float = 0.0
    r_size: int = 0
    c_size: int = 0
    added: int = 0
    read: int = 0
    body_done: float = 0.0
    waited_s: float = 0.0  # done, before it was ended


class _CacheWriter:
    """Writes one round's cache file: a section (blocks of at most ``chunk_bytes``, then a
    footer) per bucket, in bucket order; the file is created on the first write.

    ``sections`` maps each bucket written to ``(offset, length, records)``.
    """

    def __init__(self, path: Path, shift: np.uint64, buckets: int, value_dtype: np.dtype,
                 chunk_bytes: int, take_spare: Callable[[], Path | None]) -> None:
        self.path = path
        self.take_spare = take_spare
        self.shift = shift
        self.buckets = buckets
        self.itemsize = value_dtype.itemsize
        self.per = max(1, chunk_bytes // (8 + value_dtype.itemsize))
        self.f: Any = None
        self.bucket = -1  # bucket of the open section
        self.start = 0
        self.total = 0
        self.sections: dict[int, tuple[int, int, int]] = {}
        self.closed = False

    def write(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Append sorted records (keys ascending across calls)."""
        if not len(keys):
            return
        if self.buckets == 1:
            self._write_bucket(0, keys, values)
            return
        first, last = int(keys[0] >> self.shift), int(keys[-1] >> self.shift)
        if first == last:
            self._write_bucket(first, keys, values)
            return
        bounds = np.arange(first + 1, last + 1, dtype=np.uint64) << self.shift
        cuts = [0, *np.searchsorted(keys, bounds).tolist(), len(keys)]
        for b, s, e in zip(range(first, last + 1), cuts, cuts[1:]):
            if e > s:
                self._write_bucket(b, keys[s:e], values[s:e])

    def _write_bucket(self, b: int, keys: np.ndarray, values: np.ndarray) -> None:
        if b != self.bucket:
            self.end_section()
            if self.f is None:
                spare = self.take_spare()
                if spare is None:
                    self.f = open(self.path, "wb")
                else:  # overwritten from the start, cut to size on close
                    os.replace(spare, self.path)
                    self.f = open(self.path, "r+b")
                self.f.write(encode_header(b"c", 0, self.itemsize))
            self.bucket, self.start, self.total = b, self.f.tell(), 0
        for s in range(0, len(keys), self.per):
            k, v = keys[s:s + self.per], values[s:s + self.per]
            write_parts(self.f, block_parts(len(k), [k.astype("<u8", copy=False), v]))
            self.total += len(k)

    def end_section(self) -> None:
        """Close the open section with its footer (a merge unit ends)."""
        if self.bucket < 0:
            return
        self.f.write(encode_footer(self.total))
        self.sections[self.bucket] = (self.start, self.f.tell() - self.start, self.total)
        self.bucket = -1

    def close(self, fsync: bool) -> int:
        """Finish the file (if any section was written); return its size."""
        self.closed = True
        if self.f is None:
            return 0
        self.end_section()
        self.f.truncate()
        self.f.flush()
        if fsync:
            durable.fsync(self.f.fileno())
        size = self.f.tell()
        self.f.close()
        return size

    def abort(self) -> None:
        """Drop the unfinished file (closing may fail again on a full disk)."""
        self.closed = True
        if self.f is not None:
            try:
                self.f.close()
            except OSError:
                pass
        self.path.unlink(missing_ok=True)


class _Stream:
    """Reads exactly ``n`` records at a time from blocks in ``[start, end)`` of a file."""

    def __init__(self, drum: Drum, path: Path, start: int, end: int, dtype: np.dtype) -> None:
        self.drum = drum
        self.blocks = iter_blocks(path, b"r", start=start, end=end)
        self.dtype = dtype
        self.left = np.empty(0, dtype)
        self.pos = 0

    def _next(self) -> None:
        n, payload = next(self.blocks)
        self.drum._counters["bytes_read"] += len(payload) + 12
        self.left = np.frombuffer(payload, self.dtype, n)
        self.pos = 0

    def take(self, n: int) -> np.ndarray:
        parts = []
        while n:
            if self.pos == len(self.left):
                self._next()
            got = self.left[self.pos:self.pos + n]
            self.pos += len(got)
            n -= len(got)
            parts.append(got)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
