"""BEAST: budget enforcement over disk queues (IRLbot §VII.B, Fig. 5, Theorem 7).

Queues Q0..Q(j-1) form a ring read in order; QF holds URLs over budget. Reading is
from the *current* queue, which (unless turns are paced, below) never receives new URLs.
A PLD x with budget Bx puts its next Bx URLs into the queue after the current one, the
next Bx into the one after, and so on around the ring (wrapping, but never back into the
current queue); URLs that do not fit go to QF. When the last queue of the ring has been
emptied, the ring grows to ``min(2j, max_queues)`` queues, reading restarts at Q0, and QF
is read in full and its URLs are placed again, in order, with their budgets at that
moment, exactly as if they arrived then (so a PLD's old URLs come before its newer
ones); what does not fit goes back to QF. Nothing is ever discarded: a URL over budget
is only delayed. QF keeps each URL's PLD and host hashes with it (DiskQueue keys), so
that a re-split asks only for budgets (``budgets_of``) and sends the URLs that stay in
QF, most of them, back packed, with no Python object a URL, which is far cheaper than
one object a URL.

The re-split runs in steps of ``RESPLIT_BATCH`` URLs: one when the pass ends, then one
at the start of each :meth:`read` call (unless told not to: a caller may pace the steps)
or :meth:`resplit_step`. QF grows with the crawl (IRLbot: most URLs of a large crawl
wait there), and a re-split at once would stop the caller's loop for as long as placing
all of QF takes. While it runs, reading goes on in the current queue but never past it,
so the URLs come out in the same order as with a re-split at once, as long as no new URL
is placed meanwhile (a caller that has new ones to place takes the steps first: see
:attr:`resplitting`).

Turns. Every time a queue becomes current, the turn number ``T`` grows by one. Ring
pass p starts at turn ``S``, so queue i is read at turn ``S + i`` in this pass and
at ``S + j + i`` in the next one. A PLD's place is kept as (turn of the queue its next
URL goes to, URLs already put there); it is *live* while ``T < turn <= T + j - 1``,
which maps to queue ``turn - S`` (this pass) or ``turn - S - j`` (next pass). A
budget below 1 counts as 1.

Paced turns (IRLbot §VI.B: "Budget Bx represents the number of pages that are allowed
to pass from x ... to crawling threads every T time units"). In IRLbot a turn lasts as
long as crawling its queue takes (Theorem 6: T = E[Bx]V/S). Here a queue is done once it
has been *read* into the manager's RAM, which for short queues (early in a crawl, a small
web) is long before it is fetched: turns then follow each other in moments and a PLD gets
Bx URLs again at every one, i.e. no budget at all. With ``turn_s > 0``:

* the current queue, once empty, stays current until ``turn_s`` seconds have passed since
  its first record was read, so a PLD passes at most Bx URLs per ``turn_s``; meanwhile
  :meth:`read` returns what it has and :attr:`holding` is true. A queue that was empty
  when it became current takes no time;
* the caller ends a turn early with ``read(n, drained=True)`` when what was read has been
  crawled (IRLbot's end of a turn; the manager: no host in RAM is due within τh), so the
  pacing never idles a crawl;
* the current queue is a place too: a PLD with budget left in it (e.g. one just found)
  puts its next URLs there, to be read in this turn, rather than wait up to ``turn_s``
  for the next queue. Its count there is kept until the turn ends, so "Bx per turn"
  holds; a place is live while ``T <= turn <= T + j - 1`` (all j queues).

Where queues are long, reading one takes longer than ``turn_s`` anyway and pacing never
binds. The time already spent in the current turn is part of the commit.

Fixed RAM: the places live in a table of ``pld_slots`` entries indexed by
``pld_hash % pld_slots`` (numpy arrays: PLD hash tag u64, turn i64, count u32). An
entry that is not live is free. Two PLDs whose live entries collide *share* one
entry, i.e. one budget: both are delayed sooner, none is dropped
(``BeastStats.slot_collisions`` counts these placements).

Host cap. With ``host_cap > 0`` a second table of ``host_slots`` entries does the same
per host: at most ``host_cap`` URLs of one host go into one queue, whatever its PLD's
budget, and the URL goes to the later of the two places. IRLbot couples budgets to
crawl delays (a PLD with budget B gets τh·B0/B) so that a queue turn admits no more of
a host than can be fetched while it is read; where τh has a floor, a larger budget no
longer speeds the host up, and its extra URLs per turn would only fill RAM with hosts
that must wait, leaving too few hosts to fetch from. The manager sets
``host_cap = B0·τh/τh_min``. Colliding hosts share a cap (delayed, never dropped). With
paced turns the host's places, like the PLD's, include the current queue.

Order within a queue (frontier.order): with an order policy of more than one band, each
ring queue is one FIFO per band, read highest band first, and the policy gives each
record its band where it is placed (QF's records again at each re-split, from what the
policy knows then). With one band (breadth-first, the default) a ring queue is one FIFO,
on disk and in its commit exactly as before bands existed, and placing does no per-URL
work for them. The bands of one queue share its write buffer's RAM.

Directory layout::

    qNNN/               ring queue N (a :class:`~drumbeat.frontier.diskqueue.DiskQueue`);
                        its band 0 where the order has bands
    qNNN-bB/            band B > 0 of ring queue N
    qf/                 QF (each record keyed by its PLD hash and host hash, u64 each)
    budget-KKKKKKKK.npz  the table at commit K: arrays ``tag``, ``turn``, ``count``
    order-KKKKKKKK.npz   the order policy's tables at commit K (a policy with bands)

:meth:`Beast.commit` commits every queue, writes the table to a new file (temporary
name, fsync, rename, directory fsync) and returns a JSON-able state naming it; the
tables of the last two commits are kept, so either of the last two states reopens.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np

from drumbeat.frontier.diskqueue import DiskQueue, PackedRecords, QueueState
from drumbeat.frontier.order import OrderPolicy, load_tables, save_tables
from drumbeat.runtime import tables
from drumbeat.store import durable

FORMAT_VERSION = 1
_MASK64 = (1 << 64) - 1
# QF URLs placed again per read() call during a re-split: a short enough hold of the
# manager's loop.
RESPLIT_BATCH = 2048
# rebudget(records) -> (PLD hashes, budgets, host hashes or None), one of each a record.
Rebudget = Callable[[list[bytes]], tuple[Sequence[int], Sequence[int], Sequence[int] | None]]
# budgets_of(PLD hashes, uint64) -> the budget of each.
BudgetsOf = Callable[[np.ndarray], Sequence[int]]
# A ring queue's write buffer (DiskQueue's default), shared among its bands.
_QUEUE_BUFFER_BYTES = 1 << 20
# Batches of fewer records than this skip Places.full_from_start: numpy's fixed cost
# would outweigh what the loop saves.
_FULL_CHECK_MIN = 64


class BandsState(TypedDict):
    """A ring queue's commit where it has several bands (see :class:`_BandedQueue`)."""

    bands: list[QueueState]


# A ring queue's commit: with one band, the band's own state (as before bands existed).
RingQueueState = QueueState | BandsState


class BeastCounters(TypedDict):
    placed: int
    deferred_to_qf: int
    qf_rescans: int
    slot_collisions: int
    host_deferrals: NotRequired[int]  # the last three: not in older states
    refused: NotRequired[int]
    turns: NotRequired[int]


class BeastState(TypedDict):
    """A commit of :class:`Beast` (JSON; checkpoints hold it as is)."""

    format: int  # FORMAT_VERSION
    commit: int  # the commit's number, which names its table files
    table: str  # the PLD and host tables' file
    pld_slots: int
    queues: int  # j, queues in the ring
    pass_start: int
    current: int  # the queue being read
    ring: list[RingQueueState]
    qf: QueueState
    resplit_left: NotRequired[int]  # QF records still to place again (not in older states)
    order: NotRequired[str]  # the crawl order whose tables were saved (with bands only)
    order_table: NotRequired[str]
    turn_elapsed_s: NotRequired[float | None]  # seconds the turn had run; None: not begun
    counters: BeastCounters


@dataclass(frozen=True, slots=True)
class BeastStats:
    queues: int  # j, queues in the ring
    current: int  # index of the queue being read
    qf_records: int  # records waiting in QF
    queued: int  # records anywhere (ring and QF), not yet read
    placed: int  # records given to place_many()
    deferred_to_qf: int  # appends to QF, at placement and again at re-splits
    qf_rescans: int  # times QF was read in full and split (begun, for the last one)
    qf_resplit_left: int  # QF records still to place in the re-split under way
    slot_collisions: int  # placements that shared a live table entry with another PLD
    bytes_written: int  # bytes appended to all queues incl. QF (Theorem 7)
    bytes_read: int  # bytes read from all queues incl. QF
    host_deferrals: int  # placements put in a later queue by the host cap
    refused: int  # records dropped as admit() refused them a place in the ring
    turns: int  # queues made current so far (incl. re-split passes)
    holding: bool  # the current queue is empty and its turn has not run its time


def theorem7_bound(pages_per_s: float, url_bytes: float, links_per_page: float) -> float:
    """Upper bound 2Sb(2L-1) on BEAST's disk I/O in bytes/s (IRLbot Theorem 7).

    ``pages_per_s`` is S, ``url_bytes`` is b, ``links_per_page`` is L (unique links).
    """
    return 2 * pages_per_s * url_bytes * (2 * links_per_page - 1)


def _hashes(values: Sequence[int]) -> np.ndarray:
    """``values`` as uint64, each taken modulo 2**64."""
    try:
        return np.array(values, np.uint64)
    except OverflowError:  # a negative or too large Python int
        return np.array([int(v) & _MASK64 for v in values], np.uint64)


def _keys(plds: np.ndarray, hosts: np.ndarray | None) -> np.ndarray:
    """QF's key of each record: its PLD hash and its host hash (0: none), as 16 bytes."""
    keys = np.zeros((len(plds), 2), "<u8")
    keys[:, 0] = plds
    if hosts is not None:
        keys[:, 1] = hosts
    return keys


def _at(records: Sequence[bytes] | PackedRecords, index: np.ndarray) -> list[bytes]:
    """The records at ``index``."""
    if isinstance(records, PackedRecords):
        return records.records(index)
    return [records[i] for i in index.tolist()]


def _table_name(commit: int) -> str:
    return f"budget-{commit:08d}.npz"


def _order_name(commit: int) -> str:
    return f"order-{commit:08d}.npz"


def _drop_tables(directory: Path, commit: int) -> None:
    """Delete the table files in ``directory`` other than those of commit ``commit`` and
    the one before (either of the last two states reopens)."""
    keep = {_table_name(commit), _table_name(commit - 1)}
    keep |= {_order_name(commit), _order_name(commit - 1)}
    for path in [*directory.glob("budget-*.npz*"), *directory.glob("order-*.npz*")]:
        if path.name not in keep:
            path.unlink()


class Beast:
    """BEAST queues in ``directory`` (which it owns).

    ``state=None`` starts empty with ``queues`` queues, wiping ``directory``; a state
    from :meth:`commit` (one of the last two) reopens exactly that commit.
    ``rebudget(records) -> (pld_hashes, budgets, host_hashes or None)`` is asked again
    for each batch of QF records at a re-split, as budgets may have grown since (one call
    a batch: the caller looks up what a batch shares once). With ``budgets_of(pld_hashes)
    -> budgets`` the hashes a record was placed with, kept with it in QF, are used again
    and only the budgets are asked for, so that the records staying in QF (most of them)
    go back without a Python object each; ``rebudget`` is then asked only about records
    QF holds without their hashes (queued by an older version). ``host_cap`` (0: none) limits
    the URLs of one host per queue (see the module docstring); it applies to the URLs
    whose host hash is given. ``turn_s`` (0: off) is the least length of a turn in
    seconds of ``clock`` (see "Paced turns" in the module docstring).

    ``admit(record) -> bool`` (None: all) is asked about a record once it has a place in
    the ring, before it takes it, whether it arrives or comes out of QF: a record it
    refuses is dropped (its caller says why) and takes no place. A check made there
    (the manager's robots rules) keeps refused URLs from taking the places of URLs that
    may be crawled, and runs only for the records that get one: most URLs of a large
    crawl wait in QF, and are asked about when they leave it.

    ``order`` (None: breadth-first) gives each record placed its band (frontier.order);
    its tables are committed and reopened with BEAST's.
    """

    def __init__(
        self,
        directory: Path,
        *,
        state: BeastState | None = None,
        queues: int = 2,
        max_queues: int = 64,
        pld_slots: int = 1 << 20,
        host_cap: int = 0,
        host_slots: int = 1 << 20,
        fsync: bool = True,
        rebudget: Rebudget,
        budgets_of: BudgetsOf | None = None,
        turn_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        admit: Callable[[bytes], bool] | None = None,
        order: OrderPolicy | None = None,
    ) -> None:
        if not 1 <= queues <= max_queues:
            raise ValueError(f"need 1 <= queues <= max_queues, got {queues}, {max_queues}")
        if max_queues < 2:
            # One queue is always the current one: with a ring of one, nothing could
            # ever be placed and QF would never drain.
            raise ValueError("max_queues must be at least 2")
        if not turn_s >= 0:
            raise ValueError(f"turn_s must be >= 0, got {turn_s}")
        self.directory = Path(directory)
        self.max_queues = max_queues
        self._places = Places(pld_slots, host_cap, host_slots)
        self._fsync = fsync
        self._rebudget = rebudget
        self._budgets_of = budgets_of
        self._admit = admit
        self.order = order if order is not None else OrderPolicy()
        self._bands = self.order.bands
        self.turn_s = turn_s
        self._clock = clock
        # When the current queue's first record was read (None: not yet, or it was empty).
        self._turn_started: float | None = None
        self._turns = 0
        self._host_deferrals = 0
        if state is None:
            if self.directory.exists():
                shutil.rmtree(self.directory)
            self.directory.mkdir(parents=True)
            self._j, self._start, self._cur, self._commits = queues, 0, 0, 0
            self._ring = [self._new_queue(i) for i in range(queues)]
            self._qf = DiskQueue(self.directory / "qf", fsync=fsync)
            self._index_queues()
            self._placed = self._deferred = self._rescans = self._collisions = 0
            self._refused = 0
            self._resplit_left = 0
        else:
            self._reopen(state)

    # -- placing -----------------------------------------------------------------------

    def place_many(
        self,
        records: Sequence[bytes],
        pld_hashes: Sequence[int],
        budgets: Sequence[int],
        host_hashes: Sequence[int] | None = None,
    ) -> None:
        """Queue URL records, in order: record i of PLD ``pld_hashes[i]`` with budget
        ``budgets[i]`` (from STAR), and of host ``host_hashes[i]`` if the host cap is to
        apply (a host hash of 0, taken modulo 2**64, counts as none)."""
        self._spread_checked(records, pld_hashes, budgets, host_hashes, new=True)
        self._placed += len(records)

    def _spread_checked(
        self,
        records: Sequence[bytes],
        pld_hashes: Sequence[int],
        budgets: Sequence[int],
        host_hashes: Sequence[int] | None,
        *,
        new: bool,
    ) -> None:
        """:meth:`_spread` of arguments checked and made arrays (hashes modulo 2**64)."""
        if not len(records) == len(pld_hashes) == len(budgets):
            raise ValueError("records, pld_hashes and budgets differ in length")
        if host_hashes is not None and len(host_hashes) != len(records):
            raise ValueError("records and host_hashes differ in length")
        self._spread(
            records,
            _hashes(pld_hashes),
            np.array(budgets, np.int64),
            None if host_hashes is None else _hashes(host_hashes),
            new=new,
        )

    def _spread(
        self,
        records: Sequence[bytes] | PackedRecords,
        plds: np.ndarray,
        budgets: np.ndarray,
        hosts: np.ndarray | None,
        *,
        new: bool = False,
    ) -> None:
        """Place each record (of PLD hash ``plds[i]`` with ``budgets[i]``, of host hash
        ``hosts[i]`` if hosts are given, and not 0), appending to each queue once. The
        records bound for QF go there with their two hashes as their key (a host hash of
        0 for none): packed records, from QF, go back as they came.

        A record goes to its PLD's current queue until the PLD has had ``budget`` (at
        least 1) records there, then to the next queue; with the host cap, also to a queue
        its host has had fewer than the cap in, the later of the two. A queue beyond the
        ring means QF. :meth:`Places.place` places the records one by one; it sees only
        the records :meth:`Places.full_from_start` does not find bound for QF, and only
        those are made Python ints, which makes placing URLs bound for QF cheaper.
        ``new``: the records are placed for the first time (the order policy counts them).
        """
        now = self._start + self._cur
        first = now if self.turn_s > 0 else now + 1  # paced: the current queue is open
        beyond = now + self._j
        given_hosts = hosts
        bands = None
        if self._bands > 1:
            listed = records.records() if isinstance(records, PackedRecords) else records
            bands = self.order.band_of(listed, plds, hosts, new)
        if self._places.host_cap == 0:
            hosts = None  # no cap: host places are neither checked nor kept
        if len(records) >= _FULL_CHECK_MIN:
            to_qf, collisions, deferrals = self._places.full_from_start(
                plds, budgets, hosts, first, beyond
            )
            looped = np.flatnonzero(~to_qf)
        else:
            to_qf, collisions, deferrals = np.zeros(len(records), bool), 0, 0
            looped = np.arange(len(records))
        self._collisions += collisions
        self._host_deferrals += deferrals
        if bands is None:
            to_qf[self._place_each(records, looped, plds, budgets, hosts, first, beyond)] = True
        else:
            # Band by band, the highest first: as if a batch's URLs arrived in that order,
            # so its higher bands also get their PLD's earlier queues.
            looped_bands = bands[looped]
            for band in range(self._bands - 1, -1, -1):
                some = looped[looped_bands == band]
                if len(some):
                    bound = self._place_each(
                        records, some, plds, budgets, hosts, first, beyond, band
                    )
                    to_qf[bound] = True
        qf: PackedRecords | list[bytes]
        if isinstance(records, PackedRecords):
            qf = records.select(to_qf)
            self._qf.extend_packed(qf)
        else:
            qf = list(compress(records, to_qf.tolist()))
            if qf:
                self._qf.extend(
                    qf, _keys(plds[to_qf], None if given_hosts is None else given_hosts[to_qf])
                )
        self._deferred += len(qf)

    def _place_each(
        self,
        records: Sequence[bytes] | PackedRecords,
        looped: np.ndarray,
        plds: np.ndarray,
        budgets: np.ndarray,
        hosts: np.ndarray | None,
        first: int,
        beyond: int,
        band: int = 0,
    ) -> list[int]:
        """:meth:`_spread`'s records at ``looped``, given their places one by one by
        :meth:`Places.place` (the queues' turns ``first`` to ``beyond - 1``) and put in
        band ``band`` of their queues, one append a queue; returns those bound for QF."""
        batches, also_to_qf, collisions, deferrals, refused = self._places.place(
            records, looped, plds, budgets, hosts, self._start, self._j, first, beyond, self._admit
        )
        self._collisions += collisions
        self._host_deferrals += deferrals
        self._refused += refused
        for queue, batch in zip(self._ring, batches):
            if batch:
                queue.extend(batch, band)
        return also_to_qf

    @property
    def places(self) -> Places:
        """The part that gives records their places: its tables (``tag``, ``turn`` and
        ``count`` of each PLD slot, ``hturn`` and ``hcount`` of each host slot) hold each
        PLD's and host's latest place, as a commit saves them. For reading (tests compare
        them across commits): :meth:`place_many` and :meth:`read` change them."""
        return self._places

    # -- reading -----------------------------------------------------------------------

    def read(self, n: int, *, drained: bool = False, resplit: bool = True) -> list[bytes]:
        """Up to ``n`` records in crawl order; fewer when nothing is queued, when the current
        queue is empty while a re-split of QF is under way (each call places a step of
        it), or, with paced turns, when the current queue is empty and its turn has not
        run its time.

        Moves on to the next queue when the current one is empty (and its turn is over)
        and, after the last one, re-splits QF, so records waiting only in QF are still
        returned. ``drained``: everything read before has been crawled, so the turn may
        end now (only before this call has returned anything: the records it returns
        are not crawled yet). ``resplit=False``: this call places no step of a re-split
        (a caller pacing the re-split takes the steps when its pace allows); reading
        still stops at the current queue while one is under way.
        """
        out: list[bytes] = []
        if self._resplit_left and resplit:
            self.resplit_step()
        while len(out) < n:
            queue = self._ring[self._cur]
            if len(queue):
                if self._turn_started is None:
                    self._turn_started = self._clock()
                out.extend(queue.read(n - len(out)))
            elif self._resplit_left:
                break  # QF may still have URLs for this queue: the next calls place them
            elif len(self) and ((drained and not out) or not self._turn_running()):
                self._advance()
                if self._resplit_left and resplit:
                    self.resplit_step()
            else:
                break
        return out

    def _turn_running(self) -> bool:
        """The current turn has not yet lasted ``turn_s`` since its first read."""
        started = self._turn_started
        return self.turn_s > 0 and started is not None and self._clock() - started < self.turn_s

    @property
    def resplitting(self) -> bool:
        """A re-split of QF is under way: :meth:`read` places a step of it per call."""
        return self._resplit_left > 0

    @property
    def holding(self) -> bool:
        """Records are queued, but none may be read before the current turn is over."""
        return (
            not len(self._ring[self._cur])
            and not self._resplit_left
            and bool(len(self))
            and self._turn_running()
        )

    def _advance(self) -> None:
        self._turn_started = None
        self._turns += 1
        if self._cur + 1 < self._j:
            self._cur += 1
            return
        # The last queue is empty: a new pass over a grown ring, then QF re-placed.
        self._start += self._j
        self._cur = 0
        grown = min(2 * self._j, self.max_queues)
        self._ring.extend(self._new_queue(i) for i in range(self._j, grown))
        self._index_queues()
        self._j = grown
        self._rescans += 1
        self._resplit_left = len(self._qf)  # what is appended from now on waits a pass

    def resplit_step(self) -> None:
        """Place the next RESPLIT_BATCH of the QF records the re-split under way has still
        to place (fewer where QF's records change from kept hashes to none; nothing when
        no re-split is under way). :meth:`read` calls it; a caller that places new
        records can call it first, so that QF's come before them."""
        if not self._resplit_left:
            return
        packed = self._qf.read_packed(min(self._resplit_left, RESPLIT_BATCH))
        self._resplit_left = 0 if not len(packed) else self._resplit_left - len(packed)
        if not len(packed):
            return
        if packed.keys is None or self._budgets_of is None:
            batch = packed.records()
            self._spread_checked(batch, *self._rebudget(batch), new=False)
            return
        hashes = packed.keys.view("<u8")  # PLD hash, host hash
        plds, hosts = hashes[:, 0], hashes[:, 1]
        self._spread(packed, plds, np.array(self._budgets_of(plds), np.int64), hosts)

    def __len__(self) -> int:
        """Records queued anywhere (ring and QF), not yet read."""
        return sum(map(len, self._disk_queues))

    def stats(self) -> BeastStats:
        queues: list[DiskQueue | _BandedQueue] = [*self._ring, self._qf]
        return BeastStats(
            queues=self._j,
            current=self._cur,
            qf_records=len(self._qf),
            queued=len(self),
            placed=self._placed,
            deferred_to_qf=self._deferred,
            qf_rescans=self._rescans,
            qf_resplit_left=self._resplit_left,
            slot_collisions=self._collisions,
            bytes_written=sum(q.bytes_written for q in queues),
            bytes_read=sum(q.bytes_read for q in queues),
            host_deferrals=self._host_deferrals,
            refused=self._refused,
            turns=self._turns,
            holding=self.holding,
        )

    # -- commits -----------------------------------------------------------------------

    def commit(self) -> BeastState:
        """Make the queues and the table durable; return the state to reopen with."""
        ring = [q.commit() for q in self._ring]
        qf = self._qf.commit()
        self._commits += 1
        name = _table_name(self._commits)
        self._places.save(self.directory / name, self._fsync)
        order_table = None
        if self._bands > 1:
            order_table = _order_name(self._commits)
            save_tables(self.order, self.directory / order_table, self._fsync)
        _drop_tables(self.directory, self._commits)
        state: BeastState = {
            "format": FORMAT_VERSION,
            "commit": self._commits,
            "table": name,
            "pld_slots": self._places.slots,
            "queues": self._j,
            "pass_start": self._start,
            "current": self._cur,
            "ring": ring,
            "qf": qf,
            "resplit_left": self._resplit_left,
            # Seconds the current turn has run (None: it has read nothing yet).
            "turn_elapsed_s": (
                None if self._turn_started is None else self._clock() - self._turn_started
            ),
            "counters": {
                "placed": self._placed,
                "deferred_to_qf": self._deferred,
                "qf_rescans": self._rescans,
                "slot_collisions": self._collisions,
                "host_deferrals": self._host_deferrals,
                "refused": self._refused,
                "turns": self._turns,
            },
        }
        if order_table is not None:
            state["order"], state["order_table"] = self.order.name, order_table
        return state

    def _reopen(self, state: BeastState) -> None:
        if state.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"BEAST state format {state.get('format')!r}, expected {FORMAT_VERSION}"
            )
        if state["pld_slots"] != self._places.slots:
            raise ValueError(
                f"the checkpoint's budget table has {state['pld_slots']} slots, "
                f"pld_slots is {self._places.slots}"
            )
        self._j, self._start, self._cur = state["queues"], state["pass_start"], state["current"]
        self._commits = state["commit"]
        counters = state["counters"]
        self._placed, self._deferred = counters["placed"], counters["deferred_to_qf"]
        self._rescans, self._collisions = counters["qf_rescans"], counters["slot_collisions"]
        self._host_deferrals = counters.get("host_deferrals", 0)
        self._turns = counters.get("turns", 0)
        self._refused = counters.get("refused", 0)
        self._resplit_left = state.get("resplit_left", 0)  # none before re-splits in steps
        # The turn goes on where it was (states from before paced turns have no entry).
        elapsed = state.get("turn_elapsed_s")
        self._turn_started = None if elapsed is None else self._clock() - elapsed
        self._places.load(self.directory / state["table"])
        # The order's tables, where the same policy wrote them (another one starts empty).
        if state.get("order") == self.order.name and self._bands > 1:
            load_tables(self.order, self.directory / state["order_table"])
        _drop_tables(self.directory, self._commits)
        for path in self.directory.glob("q[0-9][0-9][0-9]*"):
            if int(path.name[1:4]) >= self._j:
                # A queue (or a band of one) of a ring grown after this commit.
                shutil.rmtree(path)
        self._ring = [
            _BandedQueue(self._queue_dir(i), self._bands, self._fsync, s)
            for i, s in enumerate(state["ring"])
        ]
        self._qf = DiskQueue(self.directory / "qf", state=state["qf"], fsync=self._fsync)
        self._index_queues()

    def _index_queues(self) -> None:
        """List every DiskQueue (each band of each ring queue, and QF) once, for
        :meth:`__len__`: the manager asks it several times a turn, and summing the ring
        queue by ring queue was most of its cost. Called whenever the ring changes."""
        self._disk_queues: list[DiskQueue] = [q for ring in self._ring for q in ring.queues]
        self._disk_queues.append(self._qf)

    def _queue_dir(self, index: int) -> Path:
        return self.directory / f"q{index:03d}"

    def _new_queue(self, index: int) -> _BandedQueue:
        return _BandedQueue(self._queue_dir(index), self._bands, self._fsync)

    def close(self) -> None:
        """Close every queue (buffers written, nothing committed)."""
        for q in self._ring:
            q.close()
        self._qf.close()

    def __repr__(self) -> str:
        return (
            f"<Beast {self.directory} [queue {self._cur} of {self._j} | "
            f"{len(self)} queued, {len(self._qf)} in QF]>"
        )


class _BandedQueue:
    """One ring queue: a DiskQueue per band, band 0 in ``directory`` and band B in
    ``directory``-bB, read highest band first (see "Order within a queue" in the module
    docstring). Its commit is band 0's state where there is one band (as before bands
    existed), else ``{"bands": [state of each band]}``. Reopened with fewer bands than
    its commit had, it keeps them all (their records are still read); with more, the
    new bands start empty. Each band's buffers are the queue's divided among the bands."""

    def __init__(
        self, directory: Path, bands: int, fsync: bool, state: RingQueueState | None = None
    ) -> None:
        states: list[QueueState | None]
        if state is not None and "bands" in state:
            states = list(state["bands"])
        else:
            states = [state]
        n = max(bands, len(states))
        states += [None] * (n - len(states))
        buffer = _QUEUE_BUFFER_BYTES // n
        self.queues = [
            DiskQueue(
                directory if b == 0 else directory.with_name(f"{directory.name}-b{b}"),
                state=s,
                fsync=fsync,
                buffer_bytes=buffer,
            )
            for b, s in enumerate(states)
        ]
        self._one = self.queues[0] if n == 1 else None

    def extend(self, records: list[bytes], band: int = 0) -> None:
        self.queues[band].extend(records)

    def read(self, n: int) -> list[bytes]:
        if self._one is not None:
            return self._one.read(n)
        out: list[bytes] = []
        for queue in reversed(self.queues):
            if len(out) >= n:
                break
            if len(queue):
                out.extend(queue.read(n - len(out)))
        return out

    def __len__(self) -> int:
        return sum(map(len, self.queues))

    @property
    def bytes_written(self) -> int:
        return sum(q.bytes_written for q in self.queues)

    @property
    def bytes_read(self) -> int:
        return sum(q.bytes_read for q in self.queues)

    def commit(self) -> RingQueueState:
        if self._one is not None:
            return self._one.commit()
        return {"bands": [q.commit() for q in self.queues]}

    def close(self) -> None:
        for q in self.queues:
            q.close()


class Places:
    """BEAST's places in fixed RAM (see "Fixed RAM" and "Host cap" in the module
    docstring): the PLD table (hash tag, turn, count) and the host table (turn and count
    only: colliding hosts simply share a cap), with their commits' table files. It gives
    records their places (:meth:`place`; :meth:`full_from_start` finds, in numpy's
    passes, those whose place is full from the start); Beast writes them to its queues."""

    def __init__(self, pld_slots: int, host_cap: int, host_slots: int) -> None:
        if pld_slots < 1 or host_slots < 1:
            raise ValueError("pld_slots and host_slots must be at least 1")
        if host_cap < 0:
            raise ValueError("host_cap must be >= 0")
        self.slots, self.host_cap, self.host_slots = pld_slots, host_cap, host_slots
        self.tag = tables.zeros(pld_slots, np.uint64)
        self.turn = tables.zeros(pld_slots, np.int64)
        self.count = tables.zeros(pld_slots, np.uint32)
        self.hturn = tables.zeros(host_slots if host_cap else 1, np.int64)
        self.hcount = tables.zeros(host_slots if host_cap else 1, np.uint32)
        # memoryviews give the per-URL loop Python ints at list speed; numpy owns the RAM.
        self.mtag, self.mturn, self.mcount = self.tag.data, self.turn.data, self.count.data
        self.mhturn, self.mhcount = self.hturn.data, self.hcount.data

    def full_from_start(
        self,
        plds: np.ndarray,
        budgets: np.ndarray,
        hosts: np.ndarray | None,
        first: int,
        beyond: int,
    ) -> tuple[np.ndarray, int, int]:
        """Which records go to QF because their place is full from the start of the
        batch, with the slot collisions and host deferrals :meth:`place` would have
        counted for them. Once a large crawl's sites have filled their places in
        the ring, most URLs placed (new ones, and QF's at a re-split) are such; here they
        cost numpy's passes rather than the loop's turn.

        A record whose PLD's place is full (the last queue of the ring, its budget used)
        goes to QF and changes no place, so the next records of its PLD do the same; so
        does a record whose host's place is full, counting a deferral (its PLD's place is
        before the host's). That holds for every such record, in any order, as long as no
        record the loop does see shares its PLD's place (one could move it).
        """
        slot = plds % np.uint64(self.slots)
        turn = self.turn[slot]
        full = (turn == beyond - 1) & (self.count[slot] >= np.maximum(budgets, 1))
        host_full = np.zeros_like(full)
        if hosts is not None:
            hslot = hosts % np.uint64(self.host_slots)
            host_full = (
                (self.hturn[hslot] == beyond - 1)
                & (self.hcount[hslot] >= self.host_cap)
                & ~full
                & (hosts != 0)
            )
        either = full | host_full
        fast = either & ~np.isin(slot, slot[~either])
        collisions = int(np.count_nonzero(fast & (turn >= first) & (self.tag[slot] != plds)))
        deferrals = int(np.count_nonzero(fast & host_full))
        return fast, collisions, deferrals

    def place(
        self,
        records: Sequence[bytes] | PackedRecords,
        looped: np.ndarray,
        plds: np.ndarray,
        budgets: np.ndarray,
        hosts: np.ndarray | None,
        start: int,
        j: int,
        first: int,
        beyond: int,
        admit: Callable[[bytes], bool] | None,
    ) -> tuple[list[list[bytes]], list[int], int, int, int]:
        """Place the records at ``looped`` one by one (record i of PLD hash ``plds[i]``
        with ``budgets[i]``, of host hash ``hosts[i]`` where hosts are given and it is not
        0) in the ring of ``j`` queues whose pass started at turn ``start``, in the queues
        of turns ``first`` to ``beyond - 1``, as :meth:`Beast._spread` says; ``admit``
        may refuse a record its place. Returns the records for each queue, in ring order,
        the indices of those bound for QF, and the slot collisions, host deferrals and
        refusals met. One loop with the tables in locals, as it runs for every URL a
        crawl finds new: a method call per URL was clearly slower."""
        slots, tags, turns, counts = self.slots, self.mtag, self.mturn, self.mcount
        host_cap, host_slots = self.host_cap, self.host_slots
        host_turns, host_counts = self.mhturn, self.mhcount
        collisions = deferrals = refused = 0
        batches: list[list[bytes]] = [[] for _ in range(j)]
        also_to_qf: list[int] = []
        items = zip(
            looped.tolist(),
            _at(records, looped),
            plds[looped].tolist(),
            budgets[looped].tolist(),
            repeat(0) if hosts is None else hosts[looped].tolist(),
        )
        for i, record, pld, budget, host in items:
            slot = pld % slots
            turn = turns[slot]
            if turn >= first:
                if tags[slot] != pld:
                    collisions += 1
                used = counts[slot]
            else:
                turn, used = first, 0
            if used and used >= budget:  # used >= max(budget, 1)
                turn, used = turn + 1, 0
            if host:
                hslot = host % host_slots
                hturn = host_turns[hslot]
                if hturn >= first:
                    hused = host_counts[hslot]
                else:
                    hturn, hused = first, 0
                if hused >= host_cap:
                    hturn, hused = hturn + 1, 0
                if hturn > turn:
                    # The host is full where its PLD has room: a later queue for both.
                    deferrals += 1
                    turn, used = hturn, 0
                elif turn > hturn:
                    hused = 0
            if turn >= beyond:
                also_to_qf.append(i)
                continue
            if admit is not None and not admit(record):
                refused += 1
                continue
            if host:
                host_turns[hslot], host_counts[hslot] = turn, hused + 1
            tags[slot], turns[slot], counts[slot] = pld, turn, used + 1
            index = turn - start
            batches[index if index < j else index - j].append(record)
        return batches, also_to_qf, collisions, deferrals, refused

    def tables(self) -> dict[str, np.ndarray]:
        """The budget and host tables, as saved at a commit (see _used_slots)."""
        return {
            **_used_slots({"tag": self.tag, "turn": self.turn, "count": self.count}),
            **_used_slots({"host_turn": self.hturn, "host_count": self.hcount}, "host_"),
        }

    def save(self, path: Path, fsync: bool) -> None:
        """Write :meth:`tables` to ``path`` (temporary name, fsync, rename, directory
        fsync)."""
        durable.save_npz(path, self.tables(), durable=fsync)

    def load(self, path: Path) -> None:
        """Fill the (zeroed) tables from the table file ``path`` of as many PLD slots."""
        with np.load(path) as table:
            loaded = _load_slots(table, {"tag": self.tag, "turn": self.turn, "count": self.count})
            assert loaded, "the caller checks pld_slots"
            # A host table of another size (or none, from an older checkpoint) is not
            # reused: hosts start with no places, which can only admit them sooner.
            if "host_turn" in table:
                _load_slots(table, {"host_turn": self.hturn, "host_count": self.hcount}, "host_")


def _used_slots(arrays: dict[str, np.ndarray], prefix: str = "") -> dict[str, np.ndarray]:
    """Parallel table arrays to save: only their used slots (not all zeros) with the
    slots' indices (``prefix + "used"``) and the arrays' length, when fewer than half are
    used; else whole. The tables are large by default and a crawl of a few thousand sites
    uses a small share of their slots: written whole, they were much of a checkpoint's
    time."""
    length = len(next(iter(arrays.values())))
    used = np.flatnonzero(np.logical_or.reduce([a != 0 for a in arrays.values()]))
    if 2 * len(used) >= length:
        return dict(arrays)
    return {
        prefix + "used": used,
        prefix + "slots": np.array(length),
        **{name: a[used] for name, a in arrays.items()},
    }


def _load_slots(
    table: Mapping[str, np.ndarray], arrays: dict[str, np.ndarray], prefix: str = ""
) -> bool:
    """Fill zeroed ``arrays`` from a table file saved by :func:`_used_slots` (or whole, as
    older commits were); False, with nothing filled, when it has another length."""
    length = len(next(iter(arrays.values())))
    if prefix + "used" in table:
        if int(table[prefix + "slots"]) != length:
            return False
        used = table[prefix + "used"]
        for name, a in arrays.items():
            a[used] = table[name]
        return True
    if len(table[next(iter(arrays))]) != length:
        return False
    for name, a in arrays.items():
        a[:] = table[name]
    return True


if TYPE_CHECKING:

    def _durable(beast: Beast) -> durable.Durable[BeastState]:
        return beast  # Beast keeps the store contract: commit() -> its state
