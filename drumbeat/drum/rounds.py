"""DRUM's merge rounds: an epoch's tuples merged with the sorted runs into a new run.

A round has three parts: :meth:`MergeRounds.begin` and :meth:`MergeRounds.end` run in the
caller's thread, :meth:`MergeRounds.body` (the merge itself) may run in another while
nothing adds tuples, spills or collects files. See :mod:`drumbeat.drum.repository` for
units, folding and the files a round writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from drumbeat.drum.buffer import Columns, WriteAheadBuffer, as_void
from drumbeat.drum.format import (
    DrumCorruptError,
    block_parts,
    encode_footer,
    encode_header,
    iter_blocks,
    iter_blocks_at,
    write_parts,
)
from drumbeat.drum.merge import Merger, merge_bucket
from drumbeat.drum.runs import Chunk, fold_start, merge_runs
from drumbeat.drum.sizing import UNIT_RECORDS
from drumbeat.drum.state import DrumState, Run, cache_file, live_of
from drumbeat.store import durable

Plan = tuple[list[Run], list[Run]]  # a round's runs: (only read, rewritten with its delta)


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


class MergeRounds:
    """Runs the merge rounds of one repository (state ``st``, tuples in ``buf``)."""

    def __init__(self, st: DrumState, buf: WriteAheadBuffer, merger: Merger) -> None:
        self.st = st
        self.buf = buf
        self.merger = merger
        self.value_dtype = st.value_dtype
        self.result = np.dtype([("unique", "?"), ("value", self.value_dtype)])
        self.last_round_s = 0.0  # wall seconds of the last round, to its results
        self._added = 0  # keys stored for the first time by the running round
        self._read = 0  # bytes the running round has read

    def run(self) -> None:
        """A whole merge round, now."""
        self.end(self.body(self.begin()))

    def begin(self) -> Round:
        """The first part of a round, in the caller's thread: the arrival log written,
        the round's files opened, its plan made. :meth:`body` may then run in
        another thread, as long as nothing adds tuples, spills or collects files until
        :meth:`end` (see ``background``)."""
        st = self.st
        # RAM tuples are merged straight from RAM: a crash before the round completes
        # finds them in the arrival log again.
        self.buf.flush_arrivals()
        snap, e = st.snap, st.snap["epoch"]
        started = time.perf_counter()
        r_path = st.file("r", e)
        r_file = open(r_path, "wb")
        st.dirty.add(r_path)
        runs = snap["runs"]
        j = fold_start([sum(r["counts"]) for r in runs])
        plan = (runs[:j], runs[j:])  # runs only read, runs rewritten with the delta
        rebase = j == 0 and bool(runs)
        # The spare is the largest obsolete run (see DrumState.collect): worth
        # overwriting only by a new base; a delta run is small, and cutting a big spare
        # down costs as much as unlinking it.
        writer = CacheWriter(
            st.directory / cache_file(e + 1),
            self.buf.shift,
            st.k,
            self.value_dtype,
            st.sizing.chunk_bytes,
            (lambda: st.take_spare("c")) if rebase else (lambda: None),
        )
        return Round(e, started, r_file, writer, plan, rebase, arrival=not st.live["sn"])

    def body(self, rnd: Round) -> Round:
        """The merge itself: reads runs and the epoch's tuples, writes the new run and the
        results. Touches no state the caller's thread uses meanwhile (its reads are
        counted apart from deliveries')."""
        self._added = 0
        self._read = 0
        try:
            rnd.r_file.write(encode_header(b"r", 0, self.result.itemsize))
            if rnd.arrival:
                rnd.r_lens, rnd.sort_s = self._merge_ram(rnd.r_file, rnd.writer, rnd.plan)
            else:
                rnd.r_lens = [0] * self.st.k
                ram = self.buf.ram_by_bucket()
                pending = np.asarray(self.st.live["qn"]) + self.buf.ram_bn
                # Folding rewrites the folded runs of every bucket, pending tuples or not.
                for unit in _units(pending, UNIT_RECORDS, every=bool(rnd.plan[1])):
                    rnd.sort_s += self._merge_unit(
                        unit, rnd.epoch, rnd.r_file, rnd.r_lens, rnd.writer, ram, rnd.plan
                    )
            rnd.r_size = rnd.r_file.tell()
            rnd.c_size = rnd.writer.close(self.st.fsync_rounds)
        finally:
            rnd.r_file.close()
            if not rnd.writer.closed:
                rnd.writer.abort()
        rnd.added, rnd.read = self._added, self._read
        rnd.body_done = time.perf_counter()
        return rnd

    def end(self, rnd: Round) -> None:
        """The last part of a round, in the caller's thread: the new run and the epoch's
        results go into the state, which is written; the next epoch begins."""
        st = self.st
        snap, live, e = st.snap, st.live, rnd.epoch
        writer, plan = rnd.writer, rnd.plan
        st.counters["bytes_read"] += rnd.read
        st.counters["bytes_written"] += rnd.r_size
        new_runs = list(plan[0])
        if writer.sections:
            if not st.fsync_rounds:
                st.dirty.add(writer.path)
            st.counters["bytes_written"] += rnd.c_size
            run: Run = {"gen": e + 1, "offs": [0] * st.k, "sizes": [0] * st.k, "counts": [0] * st.k}
            for b, (offset, length, count) in writer.sections.items():
                run["offs"][b], run["sizes"][b], run["counts"][b] = offset, length, count
            new_runs.append(run)
            snap["files"][str(e + 1)] = rnd.c_size
        snap["runs"] = new_runs
        live_gens = {str(r["gen"]) for r in new_runs}
        snap["files"] = {g: n for g, n in snap["files"].items() if g in live_gens}
        snap["stored"] += rnd.added
        self.buf.clear_ram()
        if st.fsync_rounds:
            st.sync_dirty()
        snap["results"].append(
            {
                "epoch": e,
                "a": live["a"],
                "an": live["an"],
                "r": rnd.r_lens or [],
                "arrival": rnd.arrival,
            }
        )
        snap["epoch"] = e + 1
        snap["q"], snap["qn"] = [0] * st.k, [0] * st.k
        snap["sn"] = snap["a"] = snap["an"] = 0
        # The tuples written ahead while the round ran begin the new epoch.
        st.live = self.buf.next or live_of(snap)
        self.buf.next = None
        c = st.counters
        c["merges"] += 1
        c["base_rewrites"] += rnd.rebase
        c["last_batch"] = live["an"]
        c["sort_s"] += rnd.sort_s
        # A round run in the background may have waited, done, to be ended here.
        self.last_round_s = rnd.body_done - rnd.started
        c["merge_s"] += time.perf_counter() - rnd.started - rnd.waited_s - rnd.sort_s
        st.write()
        st.collect()

    def _merge_ram(
        self, r_file: IO[bytes], writer: CacheWriter, plan: Plan
    ) -> tuple[list[int], float]:
        """Merge an epoch held wholly in RAM (no spill) in units of consecutive buckets.

        Its results are put back in arrival order and written as one run, which is
        delivered without reordering.
        """
        keys, ops, values, ids = self.buf.ram_columns()
        order = np.argsort(ids, kind="stable")  # u16: radix sort
        counts = self.buf.ram_bn
        ends = np.cumsum(counts).tolist()
        res = np.empty(len(keys), self.result)
        sort_s = 0.0
        for unit in _units(counts, UNIT_RECORDS, every=bool(plan[1])):
            idx = order[ends[unit[0]] - int(counts[unit[0]]) : ends[unit[-1]]]
            out = self._merge_stream(unit, keys[idx], ops[idx], values[idx], writer, plan)
            as_void(res)[idx] = as_void(self._results(out))
            sort_s += out.sort_s
        return [self.write_blocks(r_file, res)], sort_s

    def _merge_stream(
        self,
        unit: list[int],
        keys: np.ndarray,
        ops: np.ndarray,
        values: np.ndarray,
        writer: CacheWriter,
        plan: Plan,
    ) -> Any:
        """Merge tuples of the consecutive buckets ``unit`` with their runs, one stream:
        looked up in every run, written to the new run with the folded runs."""
        older = [self._run_chunks(run, unit) for run in plan[0]]
        cache = merge_runs([self._run_chunks(run, unit) for run in plan[1]])
        try:
            out = merge_bucket(keys, ops, values, older, cache, self.merger, writer.write)
        finally:
            for stream in (cache, *older):
                stream.close()  # generators holding old run files open
        writer.end_section()
        self._added += len(out.added)
        return out

    def _results(self, out: Any) -> np.ndarray:
        res = np.empty(len(out.unique), self.result)
        res["unique"] = out.unique
        if self.value_dtype.itemsize:
            res["value"] = out.before
        return res

    def _merge_unit(
        self,
        unit: list[int],
        e: int,
        r_file: IO[bytes],
        r_lens: list[int],
        writer: CacheWriter,
        ram: dict[int, Columns],
        plan: Plan,
    ) -> float:
        """Merge the pending tuples of the consecutive buckets ``unit`` (in q files, then
        in RAM) as one sorted stream; return sort seconds."""
        live = self.st.live
        parts: list[Columns] = []
        counts = []
        for b in unit:
            n = len(parts)
            if live["q"][b]:
                parts.extend(self._read_q(self.st.file("q", e, b), live["q"][b]))
            if b in ram:
                parts.append(ram[b])
            counts.append(sum(len(p[0]) for p in parts[n:]))
        if parts:
            keys, ops, values = (np.concatenate([p[i] for p in parts]) for i in range(3))
        else:
            keys, ops, values = (
                np.empty(0, np.uint64),
                np.empty(0, np.uint8),
                np.empty(0, self.value_dtype),
            )
        out = self._merge_stream(unit, keys, ops, values, writer, plan)
        res = self._results(out)
        start = 0
        for b, n in zip(unit, counts):
            r_lens[b] = self.write_blocks(r_file, res[start : start + n])
            start += n
        return float(out.sort_s)

    def _read_q(self, path: Path, end: int) -> list[Columns]:
        """The blocks of a q file as columns (keys, ops, values), in order."""
        vdt = self.value_dtype
        parts = []
        for at, n, p in iter_blocks_at(path, b"q", end=end):
            if len(p) != n * self.buf.record.itemsize:
                raise DrumCorruptError(
                    path, f"block at offset {at}: {len(p)} bytes for {n} records"
                )
            values = np.frombuffer(p, vdt, n, offset=9 * n) if vdt.itemsize else np.empty(n, vdt)
            parts.append(
                (np.frombuffer(p, "<u8", n), np.frombuffer(p, "u1", n, offset=8 * n), values)
            )
        self._read += end
        return parts

    def _run_chunks(self, run: Run, unit: list[int]) -> Generator[Chunk, None, None]:
        """The sections of ``run`` for the consecutive buckets ``unit``: one sorted stream."""
        for b in unit:
            if run["sizes"][b]:
                yield from self._section_chunks(run["gen"], run["offs"][b], run["sizes"][b])

    def _section_chunks(self, gen: int, start: int, size: int) -> Iterator[Chunk]:
        path = self.st.directory / cache_file(gen)
        vdt = self.value_dtype
        for n, payload in iter_blocks(path, b"c", start=start, end=start + size, footer=True):
            self._read += len(payload) + 12
            keys = np.frombuffer(payload, "<u8", n)
            values = (
                np.frombuffer(payload, vdt, n, offset=8 * n) if vdt.itemsize else np.zeros(n, vdt)
            )
            yield keys, values

    def write_blocks(self, f: IO[bytes], recs: np.ndarray) -> int:
        """Append ``recs`` to ``f`` in blocks of at most ``chunk_bytes``; return bytes written."""
        per = max(1, self.st.sizing.chunk_bytes // max(1, recs.dtype.itemsize))
        start = f.tell()
        for s in range(0, len(recs), per):
            part = recs[s : s + per]
            write_parts(f, block_parts(len(part), [part]))
        return f.tell() - start


@dataclass(slots=True)
class Round:
    """A merge round between its parts (:meth:`MergeRounds.begin`, ``body``, ``end``)."""

    epoch: int
    started: float  # perf_counter
    r_file: IO[bytes]
    writer: CacheWriter
    plan: Plan
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


class CacheWriter:
    """Writes one round's cache file: a section (blocks of at most ``chunk_bytes``, then a
    footer) per bucket, in bucket order; the file is created on the first write.

    ``sections`` maps each bucket written to ``(offset, length, records)``.
    """

    def __init__(
        self,
        path: Path,
        shift: np.uint64,
        buckets: int,
        value_dtype: np.dtype[Any],
        chunk_bytes: int,
        take_spare: Callable[[], Path | None],
    ) -> None:
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
            k, v = keys[s : s + self.per], values[s : s + self.per]
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
        size: int = self.f.tell()
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
