"""PLDindegree (IRLbot §VI.B): in-degree of each pay-level domain in the PLD link graph.

Two DRUM repositories, both with RAM fixed by configuration:

* ``edges``: check+update keyed by the hash of "source PLD -> target PLD"; only the first
  sighting of an edge counts, however many pages repeat it.
* ``indegree``: check+update with merge "add" keyed by the hash of the target PLD. The
  new edges that one :meth:`PLDIndegree.pump` takes from finished edges merges are
  counted per target first, so a target gets one tuple per pump however many pages link
  to it; the count and the target PLD's name ride along as aux. Each answer carries the
  in-degree before the tuple, so every target of new edges reports its exact new
  in-degree to ``on_indegree``, once per report of the rounds ``indegree`` merged (its
  last tuple's: the others would only be overwritten).

STAR (``star.py``) takes those counts to give each PLD its budget. Like URL-seen, both roll back
to the checkpoint's manifests after a crash, so an edge is never counted twice.
"""

from __future__ import annotations

import shutil
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import xxhash

from drumbeat.drum import AuxArray, Drum, DrumResult, Gathered, Snapshot
from drumbeat.urls import xxh3_64_array

if TYPE_CHECKING:
    from drumbeat.store.durable import Durable

INDEGREE_DTYPE = np.dtype([("indegree", "<u4")])
# The manifest's format: 2 adds a count before each indegree tuple's target name (see
# _counted); format 1 (no "format" key) had one tuple per new edge and no count.
MANIFEST_FORMAT = 2
_COUNT_BYTES = 4


def pld_key(pld: str) -> int:
    return xxhash.xxh3_64_intdigest(pld.encode())


def edge_key(source: str, target: str) -> int:
    return xxhash.xxh3_64_intdigest(f"{source}\n{target}".encode())


def edge_keys(source: str, targets: Iterable[str]) -> array[int]:
    """:func:`edge_key` of (source, target) for each target, as an ``array("Q")``,
    iterated in C (no Python call per edge)."""
    prefix = source + "\n"
    return xxh3_64_array(map(str.encode, map(prefix.__add__, targets)))


OnIndegree = Callable[[list[str], list[int]], None]


class GraphManifest(TypedDict):
    """A commit of :class:`PLDIndegree`: the format and its two DRUMs' manifests."""

    format: int  # MANIFEST_FORMAT (a manifest without one is format 1)
    edges: Snapshot
    indegree: Snapshot


class PLDIndegree:
    """The two repositories, and the edges found since the last submit to ``edges``.

    Edges come in batches of a page or two where a crawl of one site finds them a few
    pages a turn: they wait in RAM, packed, until GATHER_EDGES do, for one submit (see
    drumbeat.drum.gather, as URL-seen's checks do). They go to the edges DRUM before
    anything reads it or makes it durable: :meth:`flush`, :meth:`refresh`,
    :meth:`lookup` and :meth:`commit` (the manager's journal holds them meanwhile).
    """

    GATHER_EDGES = 1024

    def __init__(
        self,
        directory: Path,
        *,
        ram_bytes: int,
        manifest: GraphManifest | None = None,
        fsync: bool | str = True,
        on_indegree: OnIndegree | None = None,
        background: bool = False,
    ) -> None:
        """``on_indegree(plds, counts)`` hears the targets of new edges and their new
        in-degrees (see the module docstring). ``background``: the edges DRUM, the large
        one, merges in a thread (see Drum); its new edges are pumped once a round ends."""
        version = MANIFEST_FORMAT if manifest is None else manifest.get("format", 1)
        if version not in (1, MANIFEST_FORMAT):
            raise ValueError(
                f"PLD graph manifest format {version} is not {MANIFEST_FORMAT}: "
                "written by another version of drumbeat"
            )
        if manifest is None and directory.exists():
            shutil.rmtree(directory)  # no checkpoint names it: a run that died before one
        half = max(ram_bytes // 2, 1 << 20)
        self.edges = Drum(
            directory / "edges",
            ram_bytes=half,
            fsync=fsync,
            manifest=None if manifest is None else manifest.get("edges"),
            background=background,
        )
        self.indegree = Drum(
            directory / "indegree",
            value_dtype=INDEGREE_DTYPE,
            merge="add",
            ram_bytes=half,
            fsync=fsync,
            manifest=None if manifest is None else manifest.get("indegree"),
        )
        self.new_edges = 0
        self.on_indegree = on_indegree
        # In-degree tuples of format 1 (the bare name of one edge's target as aux) may be
        # pending: the first pump merges and reports them before queueing any of its own.
        self._format_1_pending = version == 1
        # A pump stopped partway (budget_s): the edges DRUM's delivery under way, and the
        # targets of the new edges it has given so far.
        self._taking: Iterator[DrumResult] | None = None
        self._counts: Counter[bytes] = Counter()
        # Edges not yet given to the edges DRUM (see GATHER_EDGES), still packed.
        self._gathered: Gathered[tuple[bytes, bytes, bytes]] = Gathered(
            self.GATHER_EDGES, self._submit_gathered
        )

    def add(self, edges: Iterable[tuple[str, str]]) -> None:
        """Queue (source PLD, target PLD) edges; repeats are absorbed by the edges DRUM."""
        edges = list(edges)
        if edges:
            keys = np.fromiter((edge_key(s, t) for s, t in edges), np.uint64, len(edges))
            targets = [t.encode() for _, t in edges]
            self.add_packed(
                keys.tobytes(), b"".join(targets), array("I", map(len, targets)).tobytes()
            )

    def add_packed(self, keys: bytes, targets: bytes, lengths: bytes) -> None:
        """:meth:`add` for edges packed by fetchers (see queue.base.FoundEdges, which may
        be concatenated): ``n`` uint64 edge keys, the target PLDs back to back and ``n``
        uint32 lengths. Kept packed until they go to the edges DRUM (see GATHER_EDGES)."""
        if keys:
            self._gathered.add((keys, targets, lengths), len(keys) // 8)

    def _submit_gathered(self, gathered: list[tuple[bytes, bytes, bytes]]) -> None:
        """Give the edges DRUM the gathered edges, as one submit."""
        keys = np.frombuffer(b"".join([keys for keys, _, _ in gathered]), np.uint64)
        targets = AuxArray.from_lengths(
            b"".join([targets for _, targets, _ in gathered]),
            b"".join([lengths for _, _, lengths in gathered]),
        )
        self.edges.check_update(keys, aux=targets)

    def pump(self, budget_s: float | None = None) -> int:
        """Turn edges found new by finished merges into in-degree updates; returns how many
        were queued for the in-degrees.

        With ``budget_s``, stop once that much time has passed (after a whole chunk of
        results), to go on in a later call from the same point: the targets counted so
        far wait, and go to the in-degrees once every finished merge has been taken: a
        whole pump can hold the manager's turn too long.
        """
        self._report_format_1()
        if self._taking is None and not self.edges.results_waiting():
            # No merged round (most turns): no new edge to count, so no in-degree tuple
            # was queued and no in-degree round can have ended since the last report.
            return 0
        # One tuple per target: on a crawl's graph most new edges of a merge point to
        # targets that others of the merge point to as well (on the bench web, many
        # times more new edges a merge than PLDs). The counter holds the targets of
        # the merges taken since the last complete pump (flush and commit complete one).
        counts = self._counts
        if self._taking is None:
            # One delivery at a time: another take_results would deliver the round under
            # way again from its start.
            self._taking = self.edges.take_results()
        stop = None if budget_s is None else time.perf_counter() + budget_s
        for result in self._taking:
            counts.update(result.aux.select(np.flatnonzero(result.unique)))
            if stop is not None and time.perf_counter() >= stop:
                return 0  # the rest, and the counts, in a later call
        self._taking = None
        self._counts = Counter()
        moved = counts.total()
        if counts:
            keys = np.fromiter(map(xxhash.xxh3_64_intdigest, counts), np.uint64, len(counts))
            values = np.fromiter(counts.values(), INDEGREE_DTYPE["indegree"], len(counts))
            self.indegree.check_update(
                keys, values.view(INDEGREE_DTYPE), aux=list(map(_counted, counts.items()))
            )
        self._report_indegrees()
        self.new_edges += moved
        return moved

    def _report_format_1(self) -> None:
        """Merge and report in-degree tuples of format 1 left by the checkpoint this
        graph was opened at, once, before any tuple of the current format joins them."""
        if self._format_1_pending:
            self.indegree.flush()
            self._report_indegrees(counted=False)
            self._format_1_pending = False

    def _report_indegrees(self, counted: bool = True) -> None:
        """Report the in-degrees that the in-degree repository's finished rounds found,
        one for each target: its last tuple's. Each pump queues one tuple a target, and
        a refresh takes a few rounds of thousands of targets each, whose reports take
        a noticeable part of the manager's turn."""
        keys: list[np.ndarray] = []
        before: list[np.ndarray] = []
        items: list[bytes] = []
        # DRUM keeps every round's results on disk until they are taken, so take them even
        # when nobody listens.
        for result in self.indegree.take_results():
            if self.on_indegree is None or not len(result.unique):
                continue
            last = _last_of_each(result.keys)  # fewer items to make: one a target
            keys.append(result.keys[last])
            before.append(np.where(result.unique, 0, result.values["indegree"])[last])
            items += result.aux.select(last)
        if not keys or self.on_indegree is None:
            return
        last = _last_of_each(np.concatenate(keys))  # a later round's tuple comes later
        counts = np.concatenate(before)[last].tolist()
        items = [items[i] for i in last.tolist()]
        if counted:
            self.on_indegree(
                [item[_COUNT_BYTES:].decode() for item in items],
                [
                    b + int.from_bytes(item[:_COUNT_BYTES], "little")
                    for b, item in zip(counts, items)
                ],
            )
        else:
            self.on_indegree([item.decode() for item in items], [b + 1 for b in counts])

    @property
    def last_round_s(self) -> float:
        """Wall seconds the edges DRUM's last merge round took."""
        return self.edges.last_round_s

    def flush(self, wait: bool = True) -> None:
        """Merge everything queued in both repositories (edges first). ``wait=False``:
        the edges merge in the background, if so configured; what it finds new is
        counted by a later :meth:`pump` (the in-degrees merge now)."""
        self.merge_edges(wait=wait)
        self.pump()
        self.indegree.flush()
        self._report_indegrees()

    def merge_edges(self, wait: bool = True) -> None:
        """Merge the edges added so far (``wait=False``: in the background, if so
        configured); what the merge finds new waits for :meth:`pump`."""
        self._gathered.give()
        self.edges.flush(wait=wait)

    @property
    def queued_edges(self) -> int:
        """Edges added and not yet merged."""
        return self._gathered.items + self.edges.stats().pending

    def refresh(self) -> None:
        """What a crawl's periodic budget refresh needs, at little cost to its turn:
        start merging the edges queued (in the background, if so configured), then merge
        the in-degree tuples that pumps have queued and report them. Unlike
        :meth:`flush`, it does not pump: edges of rounds not yet wholly pumped reach the
        in-degrees by later pumps (with a budget) and are reported by the next refresh:
        a whole pump here held the turn too long."""
        self._report_format_1()
        self.merge_edges(wait=False)
        self.indegree.flush()
        self._report_indegrees()

    def lookup(self, plds: list[str]) -> dict[str, int]:
        """In-degrees of ``plds`` (0 if unknown). Forces merges: for reports and tests."""
        self.flush()
        self.indegree.check(np.fromiter(map(pld_key, plds), np.uint64, len(plds)))
        self.indegree.flush()
        counts: dict[str, int] = {}
        i = 0
        for result in self.indegree.take_results():
            for unique, value in zip(result.unique.tolist(), result.values["indegree"].tolist()):
                counts[plds[i]] = 0 if unique else int(value)
                i += 1
        return counts

    def commit(self) -> GraphManifest:
        """Durable point for a checkpoint; new edges of every merge are moved first (a
        background round is waited for)."""
        self._gathered.give()  # a checkpoint holds every edge added before it
        self.edges.settle()
        self.pump()
        return {
            "format": MANIFEST_FORMAT,
            "edges": self.edges.commit(),
            "indegree": self.indegree.commit(),
        }


def _last_of_each(keys: np.ndarray) -> np.ndarray:
    """Indices of the last occurrence of each distinct key, ascending."""
    _, first_from_end = np.unique(keys[::-1], return_index=True)
    return np.sort(len(keys) - 1 - first_from_end)


def _counted(item: tuple[bytes, int]) -> bytes:
    """An indegree tuple's aux: the count of new edges to the target, then its name."""
    name, count = item
    return count.to_bytes(_COUNT_BYTES, "little") + name


if TYPE_CHECKING:

    def _durable(graph: PLDIndegree) -> Durable[GraphManifest]:
        return graph  # PLDIndegree keeps the store contract: commit() -> its state
