"""STAR (IRLbot §VI.B): each PLD's crawl budget from its in-degree in the PLD graph.

A PLD's budget B(x) = F(d_x) is how many of its URLs BEAST lets into each of its queues.
Spammers can mint pages and subdomains for free but not links from other pay-level domains,
so a PLD earns budget only through distinct linking PLDs.

RAM is fixed: only PLDs whose in-degree passed ``indegree_floor`` can have a budget above the
default, so only those are kept, at most ``table_size`` of them (the smallest in-degree is
evicted when full). The in-degrees come exact from PLDindegree's DRUM (each merge of new
edges reports their targets' new counts), so a PLD evicted and linked again comes back with
its true count.

Seeds are trusted (:class:`SeedTrust`, setting ``trust_seeds``, on by default). Spam
resistance is for what the crawl discovers; a seed list is the operator's choice. STAR
alone budgets a PLD with no links from other PLDs at B0, however many of its hosts are
seeds: 5,000 seeded subdomains of one university would share the budget and the BEAST
place of one long-tail site. A larger budget alone does not help, as BEAST keeps one place
a PLD: with the host cap, a host whose place is full moves its whole PLD's place on to the
next queue, so the PLD's other hosts get one queue's worth each and the rest of their URLs
go to QF. So each seed host is a PLD of its own in BEAST (its own place and host cap),
with its PLD's STAR budget: every seed host passes as many URLs a turn as a site of its
own would, as many as its delay lets it be fetched in that turn. Hosts the crawl finds in
a seed PLD share that PLD's place and STAR budget, as any discovered host. In a crawl
scoped to the seeds' hosts or PLDs (spam cannot enter through the scope) the seeds' units
get at least the maximum budget. Politeness delays still follow STAR alone: trust buys a
seed room in the queues, never a shorter delay. ``trust_seeds = false`` restores pure STAR
(one place and budget a PLD) for seeds.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import xxhash

BudgetFn = Callable[[int], int]


def pld_hash(pld: str) -> int:
    """The 64-bit hash a PLD is known by in BEAST (and in :meth:`Star.budgets_by_hash`)."""
    return xxhash.xxh3_64_intdigest(pld.encode())


def irlbot_budget(default: int, maximum: int, floor: int) -> BudgetFn:
    """IRLbot's shape: ``default`` for the long tail (in-degree <= ``floor``), then growing
    linearly with in-degree (``default * d / floor``) up to ``maximum``."""

    def budget(indegree: int) -> int:
        if indegree <= floor:
            return default
        return min(maximum, default * indegree // floor)

    return budget


class Star:
    FILE = "star.json"

    def __init__(self, *, budget: BudgetFn, indegree_floor: int, table_size: int) -> None:
        self._budget = budget
        self.floor = indegree_floor
        self.table_size = table_size
        self._indegree: dict[str, int] = {}  # only PLDs above the floor
        self._budget_of: dict[str, int] = {}  # the budget of each PLD in _indegree
        self._budget_by_hash: dict[int, int] = {}  # the same by pld_hash
        self.default = budget(0)

    def observe(self, plds: Sequence[str], indegrees: Sequence[int]) -> None:
        """New exact in-degrees (in order; a later count of the same PLD wins)."""
        table, budgets, budget = self._indegree, self._budget_of, self._budget
        by_hash = self._budget_by_hash
        for pld, d in zip(plds, indegrees):
            if d > self.floor:
                table[pld] = d
                b = budget(d)
                if budgets.get(pld) != b:  # hashed only when its budget changes
                    budgets[pld] = by_hash[pld_hash(pld)] = b
        if len(table) > self.table_size:
            for pld, _ in heapq.nsmallest(
                len(table) - self.table_size, table.items(), key=lambda kv: kv[1]
            ):
                del table[pld], budgets[pld]
                by_hash.pop(pld_hash(pld), None)

    def indegree(self, pld: str) -> int:
        """The PLD's in-degree if above the floor and kept, else 0 (it has the default)."""
        return self._indegree.get(pld, 0)

    def budget(self, pld: str) -> int:
        return self._budget_of.get(pld, self.default)

    def budgets(self, plds: Iterable[str]) -> list[int]:
        """:meth:`budget` of each PLD, in one pass (BEAST places URLs in batches). The
        budgets are kept, not computed per URL: 0.02 against 0.18 µs a URL (batches of
        2,048 from 5,000 PLDs above the floor)."""
        return list(map(self._budget_of.get, plds, repeat(self.default)))

    def budgets_by_hash(self, hashes: Iterable[int]) -> list[int]:
        """:meth:`budgets` of the PLDs of these :func:`pld_hash` values (two PLDs of one
        hash, a chance of 2**-64 a pair, share the later one's budget)."""
        return list(map(self._budget_by_hash.get, hashes, repeat(self.default)))

    def __len__(self) -> int:
        return len(self._indegree)

    def top(self, n: int) -> list[tuple[str, int, int]]:
        """The ``n`` kept PLDs of the highest in-degree: (PLD, in-degree, budget)."""
        best = heapq.nlargest(n, self._indegree.items(), key=lambda kv: kv[1])
        return [(pld, d, self._budget_of[pld]) for pld, d in best]

    def save(self, directory: Path) -> None:
        self.saver()(directory)

    def saver(self) -> Callable[[Path], None]:
        """A call that saves the table as it is now into a directory, whatever happens
        to the table meanwhile (a checkpoint writes it in another thread)."""
        table = dict(self._indegree)

        def save(directory: Path) -> None:
            with open(directory / self.FILE, "w", encoding="utf-8") as f:
                json.dump(table, f)

        return save

    def load(self, directory: Path) -> None:
        path = directory / self.FILE
        if path.exists():
            self._indegree = {
                str(k): int(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()
            }
            self._budget_of = {pld: self._budget(d) for pld, d in self._indegree.items()}
            self._budget_by_hash = {pld_hash(pld): b for pld, b in self._budget_of.items()}


class SeedTrust:
    """Where BEAST budgets a URL, and the budget, for the operator's seeds (see the module
    docstring). A *unit* is what a BEAST place and budget belong to: a PLD, or a seed host
    of its own.

    RAM: one entry a seed host (and a seed PLD in a scoped crawl), as the seed list."""

    def __init__(self, *, enabled: bool, scoped_budget: int | None) -> None:
        """``scoped_budget``: the least budget of the seeds' units in a crawl scoped to the
        seeds (None: the crawl is not scoped)."""
        self.enabled = enabled
        self.scoped_budget = scoped_budget
        self._pld_of: dict[str, str] = {}  # unit -> the PLD whose STAR budget it has
        self._pld_of_hash: dict[int, str] = {}  # the same by pld_hash(unit)

    def set_seed_hosts(self, hosts: Iterable[str], pld_of: Callable[[str], str]) -> None:
        """The seed list's hosts, and the function that names a host's PLD."""
        units: dict[str, str] = {}
        if self.enabled:
            for host in hosts:
                pld = pld_of(host)
                # A host that is its PLD is that unit already: kept out, so a crawl whose
                # seeds are such takes the fast path in :meth:`budgets`.
                if host != pld or self.scoped_budget is not None:
                    units[host] = pld
                if self.scoped_budget is not None:
                    units[pld] = pld
        self._pld_of = units
        self._pld_of_hash = {pld_hash(unit): pld for unit, pld in units.items()}

    def unit(self, host: str, pld: str) -> str:
        """The unit a URL of ``host`` (of ``pld``) is placed and budgeted by in BEAST."""
        return host if host in self._pld_of else pld

    def budgets(
        self, units: Sequence[str], budgets: list[int], star_budget: Callable[[str], int]
    ) -> list[int]:
        """``budgets`` (STAR's, of ``units`` in order) with the seeds' units given theirs:
        a seed host its PLD's STAR budget, at least ``scoped_budget`` in a scoped crawl."""
        return self._raise(units, budgets, star_budget, self._pld_of)

    def budgets_by_hash(
        self, hashes: Sequence[int], budgets: list[int], star_budget: Callable[[str], int]
    ) -> list[int]:
        """:meth:`budgets` of units given by their :func:`pld_hash`."""
        return self._raise(hashes, budgets, star_budget, self._pld_of_hash)

    def _raise(
        self,
        keys: Sequence[object],
        budgets: list[int],
        star_budget: Callable[[str], int],
        pld_of: Mapping[Any, str],
    ) -> list[int]:
        if not pld_of:
            return budgets
        floor = self.scoped_budget or 0
        get = pld_of.get
        return [
            b if (pld := get(k)) is None else max(star_budget(pld), floor)
            for k, b in zip(keys, budgets)
        ]

    def __len__(self) -> int:
        return len(self._pld_of)
