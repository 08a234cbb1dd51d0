"""The DRUM repository: the :class:`Drum` that composes its parts.

The parts, one job each: :mod:`.buffer` (the write-ahead buffer: RAM, arrival log, q
files, tuples held during a background round), :mod:`.rounds` (merge rounds),
:mod:`.delivery` (answers, in arrival order) and :mod:`.state` (``STATE.json``,
recovery, file collection).

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
*one* new file (creating a file is costly: one file per bucket and round was most
of a round's fixed cost) and the epoch's result file, fsyncs
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

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from drumbeat.drum.aux import AuxArray, AuxInput
from drumbeat.drum.buffer import HELD_SHARE, WriteAheadBuffer
from drumbeat.drum.delivery import Delivery, DrumResult
from drumbeat.drum.format import DrumError
from drumbeat.drum.merge import CHECK, CHECK_UPDATE, UPDATE, MergeFn, Merger
from drumbeat.drum.rounds import MergeRounds, Round
from drumbeat.drum.sizing import Sizing
from drumbeat.drum.state import STATE, STATE_VERSION, DrumState, Snapshot
from drumbeat.store.durable import Durable

__all__ = ["HELD_SHARE", "STATE", "STATE_VERSION", "Drum", "DrumIOError", "DrumResult", "DrumStats"]

_EMPTY = np.dtype([])
_LIST_PIECE = 1 << 16  # aux items joined at once when aux is a list of bytes


class DrumIOError(DrumError, OSError):
    """Writing failed (e.g. ENOSPC). The object is unusable; reopen the directory."""


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


class Drum:
    """A disk repository of ``uint64 key -> value`` with batched check/update.

    Opening a directory without ``manifest`` gives its latest durable state;
    with ``manifest`` (one of the last two returned by :meth:`commit`) it rolls
    back to exactly that commit.

    ``compress_log``: deflate the arrival log's blocks (all but the keys, see
    :mod:`~drumbeat.drum.format`): they are most of the bytes a crawl's URL-seen
    writes, and URLs deflate well. It costs CPU per byte of log written and read
    back on delivery, so it pays once a round writes more than the page cache
    absorbs, and costs when it does not. On by default (a crawl's URL-seen runs
    long); off for short bursts or a fast disk.

    ``background``: run merge rounds in a thread of their own, so that the caller's loop
    goes on while one merges (IRLbot merges while crawling goes on; a loop that waits
    for a round loses that round's time of crawling). A round then starts where it
    would have run (a full bucket, or ``flush(wait=False)``) and is ended by the first
    call into the repository after it has finished; its results come from
    :meth:`take_results` from then on. Tuples submitted meanwhile are held, copied, and
    added when it ends, in order; once they would pass ``HELD_SHARE`` (a quarter) of
    ``ram_bytes`` (with their aux), they are written ahead to the next epoch's arrival
    log and q files, which that epoch then starts with; only when a bucket of it would
    pass ``bucket_records`` does the submit wait for the round. Results, state and files
    are the same as without it; :meth:`commit` and a waiting :meth:`flush` wait for a
    running round, :attr:`busy` tells whether one runs. ``on_round_done`` is called, in
    the round's thread, once a background round has merged: a caller that waits for
    something to do can wake then rather than find it on its next turn.

    The parts it composes: ``state`` (:class:`~drumbeat.drum.state.DrumState`),
    ``buffer`` (:class:`~drumbeat.drum.buffer.WriteAheadBuffer`), ``rounds``
    (:class:`~drumbeat.drum.rounds.MergeRounds`) and ``delivery``
    (:class:`~drumbeat.drum.delivery.Delivery`).
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        value_dtype: np.dtype[Any] | None = None,
        merge: str | MergeFn = "overwrite",
        ram_bytes: int = 64 << 20,
        buckets: int | None = None,
        fsync: bool | str = True,
        manifest: Mapping[str, Any] | None = None,
        compress_log: bool = True,
        background: bool = False,
        on_round_done: Callable[[], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        # Merge rounds in a thread of their own (see the class docstring).
        self._background = bool(background)
        self._on_round_done = on_round_done
        self._executor: ThreadPoolExecutor | None = None
        self._running: Future[Round] | None = None  # the round in the background
        self._flush_asked = False  # flush(wait=False) came while a round ran
        self.directory.mkdir(parents=True, exist_ok=True)
        self.value_dtype = _EMPTY if value_dtype is None else np.dtype(value_dtype)
        if self.value_dtype.names is None:
            raise TypeError(f"value_dtype must be a structured dtype, got {self.value_dtype}")
        merger = Merger(self.value_dtype, merge)
        if fsync not in (True, False, "commit"):
            raise ValueError(f'fsync must be True, False or "commit", got {fsync!r}')
        record = np.dtype([("key", "<u8"), ("op", "u1"), ("value", self.value_dtype)])
        self._broken: str | None = None
        self.state = DrumState(
            self.directory,
            self.value_dtype,
            fsync=fsync,
            ram_bytes=ram_bytes,
            record_bytes=record.itemsize,
            buckets=buckets,
            manifest=manifest,
        )
        self.sizing: Sizing = self.state.sizing
        self.buffer = WriteAheadBuffer(self.state, record, self._guard, compress_log)
        self.rounds = MergeRounds(self.state, self.buffer, merger)
        self.delivery = Delivery(self.state, self.buffer, self.rounds.result)
        self.buffer.reload()
        if manifest is not None:
            self.state.write(durable=True)
        self.state.collect()

    @classmethod
    def open(
        cls, directory: Path | str, manifest: Mapping[str, Any] | None = None, **options: Any
    ) -> Drum:
        """Same as ``Drum(directory, manifest=manifest, **options)``."""
        return cls(directory, manifest=manifest, **options)

    @property
    def last_round_s(self) -> float:
        """Wall seconds of the last round, to its results."""
        return self.rounds.last_round_s

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
        self,
        keys: np.ndarray,
        values: np.ndarray | None = None,
        aux: AuxInput | None = None,
    ) -> None:
        """Queue check+update (values default to zeros, merged like an update)."""
        self.submit(np.full(len(keys), CHECK_UPDATE, np.uint8), keys, values, aux)

    def submit(
        self,
        ops: np.ndarray,
        keys: np.ndarray,
        values: np.ndarray | None = None,
        aux: AuxInput | None = None,
    ) -> None:
        """Queue a mixed batch; ``ops`` holds CHECK (0), UPDATE (1) or CHECK_UPDATE (2).

        Only buffers, except that a merge round runs (and its results become
        available to :meth:`take_results`) whenever a bucket reaches its size limit.
        """
        self._usable()
        self._settle(wait=False)
        buf = self.buffer
        keys, ops, values = buf.validate(ops, keys, values)
        items: AuxArray | Sequence[bytes] | None
        if aux is None or isinstance(aux, (AuxArray, tuple)):
            items = None if aux is None else AuxArray.of(aux)
            piece = buf.piece(items)
        else:
            # A list of bytes is joined piece by piece, for the same reason.
            items = aux
            piece = _LIST_PIECE
        if items is not None and len(items) != len(keys):
            raise ValueError(f"{len(items)} aux items for {len(keys)} keys")
        start = 0
        if self._running is not None:
            self._hold(ops, keys, values, items)
            return
        while start < len(keys):
            end = min(len(keys), start + piece, start + buf.spill_at - buf.ram_n)
            buf.add(
                ops[start:end],
                keys[start:end],
                None if values is None else values[start:end],
                None if items is None else AuxArray.of(items[start:end]),
            )
            start = end
            if buf.ram_n >= buf.spill_at:
                self._guard(buf.spill)
            if buf.full():
                self._start_round()
                if self._running is not None and start < len(keys):
                    self._hold(
                        ops[start:],
                        keys[start:],
                        None if values is None else values[start:],
                        None if items is None else items[start:],
                    )
                    return

    def _hold(
        self,
        ops: np.ndarray,
        keys: np.ndarray,
        values: np.ndarray | None,
        aux: AuxArray | Sequence[bytes] | None,
    ) -> None:
        """Keep a submit that came while a round runs in the background. Once what is
        held would pass HELD_SHARE of the RAM budget, write it ahead to the next epoch's
        files, or, when the next epoch cannot take it, wait for the round."""
        if self.buffer.hold(ops, keys, values, aux) and not self._guard(self.buffer.write_ahead):
            self._settle(wait=True)

    # ------------------------------------------------------------------ merge rounds

    def flush(self, wait: bool = True) -> None:
        """Merge everything pending now (results go to :meth:`take_results`).

        With ``background`` and ``wait=False`` the round runs in the background, after
        the one running if there is one; else this returns once it is done.
        """
        self._usable()
        if wait:
            self._settle_all()
            if self.state.live["an"] + self.buffer.arrivals_n:
                self._guard(self.rounds.run)
            return
        self._settle(wait=False)
        if self._running is not None:
            self._flush_asked = True
        elif self.state.live["an"] + self.buffer.arrivals_n:
            self._start_round()

    @property
    def busy(self) -> bool:
        """A round runs in the background (or is done and not yet ended: the next call
        into the repository ends it)."""
        return self._running is not None

    def _start_round(self) -> None:
        """A merge round: in the background when so configured, else now."""
        if not self._background:
            self._guard(self.rounds.run)
            return
        rnd = self._guard(self.rounds.begin)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="drum-round")
        self._running = self._executor.submit(self.rounds.body, rnd)
        done = self._on_round_done
        if done is not None:
            self._running.add_done_callback(lambda _: done())

    def _settle(self, wait: bool) -> None:
        """End the background round if it is done (``wait``: once it is done), then add
        the tuples held meanwhile and start a flush asked for meanwhile."""
        running = self._running
        if running is None or not (wait or running.done()):
            return
        self._running = None
        rnd = self._guard(running.result)  # its error, if it failed, breaks the object
        rnd.waited_s = time.perf_counter() - rnd.body_done
        self._guard(self.rounds.end, rnd)
        for ops, keys, values, aux in self.buffer.take_held():
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

    # ------------------------------------------------------------------ results

    def results_waiting(self) -> bool:
        """Whether :meth:`take_results` has a merged round to deliver (a background round
        that has ended is settled first): a cheap check for callers that look every turn."""
        self._usable()
        self._settle(wait=False)
        return bool(self.state.snap["results"])

    def take_results(self) -> Iterator[DrumResult]:
        """Yield the results of every merged round, oldest first, in arrival order.

        Results are read back from disk in chunks, so RAM stays bounded. A round
        counts as taken once its last chunk was yielded and the generator resumed
        (exhaust the iterator); an interrupted round is delivered again, from its
        start, by the next call -- also after reopening the repository.
        """
        self._usable()
        self._settle(wait=False)
        while self.state.snap["results"]:
            yield from self.delivery.deliver(self.state.snap["results"][0])
            self.state.snap["results"].pop(0)
            self._guard(self.state.write)
            if self._running is None:  # else the round's new files are in no state yet
                self._guard(self.state.collect)

    # ------------------------------------------------------------------ commit / state

    def commit(self) -> Snapshot:
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
        self._guard(self.buffer.flush_arrivals)
        self._guard(self.state.sync_dirty)
        manifest: Snapshot = self._guard(self.state.commit)
        self._guard(self.state.collect)
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
        c = self.state.counters
        moved = c["bytes_read"] + c["bytes_written"]
        return DrumStats(
            keys_stored=int(self.state.snap["stored"]),
            pending=int(self.buffer.pending()),
            bytes_read=c["bytes_read"],
            bytes_written=c["bytes_written"],
            merges=c["merges"],
            sort_s=c["sort_s"],
            merge_s=c["merge_s"],
            last_batch=c["last_batch"],
            checked_bytes=c["checked_bytes"],
            alpha=moved / c["checked_bytes"] if c["checked_bytes"] else 0.0,
            ram_bytes=self.sizing.ram_bytes,
            buckets=self.state.k,
            runs=len(self.state.snap["runs"]),
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
                exc.errno,
                f"DRUM write in {self.directory} failed: {exc.strerror or exc}; "
                "the repository keeps its last committed state, reopen it",
                getattr(exc, "filename", None),
            ) from exc
        except BaseException as exc:
            self._broken = repr(exc)
            raise


if TYPE_CHECKING:

    def _durable(drum: Drum) -> Durable[Snapshot]:
        return drum  # Drum keeps the store contract: commit() -> its Snapshot
