"""Crawl order within BEAST's budgets: a policy gives each URL placed a priority band.

BEAST (frontier.beast) decides *when* a PLD may pass URLs (its budget per queue turn);
within a queue, the order is the policy's. A policy cannot keep a priority per URL in a
heap: RAM is bounded by configuration, never by crawl size, and the frontier on disk is
read sequentially. So it gives each URL a *band* (0 .. ``bands - 1``, higher first) when
BEAST places it, from what is known at that moment, and each BEAST queue keeps one disk
FIFO per band, read highest band first. A low band is never starved: a queue is emptied
before the next one becomes current, so a URL waits at most one ring turn more than it
would in breadth-first order (and a paced turn lets each PLD add at most its budget).

What a policy knows lives in a count-min sketch (Cormode and Muthukrishnan) of fixed
size, keyed by a URL's fingerprint (or a site's hash): the sketch never under-counts and
over-counts a key by at most e/width of the total, with probability 1 - e^-rows. Its
tables are saved with BEAST's commits (:meth:`OrderPolicy.tables`, ``load``); the links
of the fetches after a checkpoint come back through the journal's replay, which admits
them again.

Policies (survey §4.1, Olston and Najork; Cho, Garcia-Molina and Page 1998; Abiteboul,
Preda and Cobena 2003 for OPIC; Baeza-Yates et al. 2005 for larger-sites-first):

* ``bfs``: one band; BEAST's queues are FIFOs, today's order exactly, and no per-URL
  work is added anywhere.
* ``indegree``: links found to the URL so far, counted per link as pages report them
  (a backlink count, which approximates PageRank early in a crawl). Only the links known
  when URL-seen first finds the URL new count (it is placed then, once): within its
  URL-seen merge round, most of a popular URL's links come in together.
* ``opic``: On-line Page Importance Computation: every fetched page hands its cash
  (1, plus what its in-links gave it) in equal shares to its links; a URL's band is the
  cash it has when placed. Cash is not taken back from a fetched page (a sketch cannot
  subtract reliably), which makes this OPIC's "history" rather than its current cash.
* ``larger-sites``: URLs found new per site (host; PLD where no host is known) so far:
  a site that has shown many URLs is likely large, and a large site's pages are fetched
  first (its long queue takes longest at its host delay).
* ``focus``: the relevance the operator's function gave the best page linking to the
  URL (``--focus``; the fetcher scores each HTML page): a best-first focused crawl
  (Chakrabarti et al. 1999), with the score in [0, 1] cut into equal bands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from drumbeat import urls
from drumbeat.settings import ORDERS, Settings
from drumbeat.store import durable

SKETCH_ROWS = 4
# Cash a fetched page hands out in OPIC (shared among its links): one unit a page, as
# OPIC starts every page with the same cash.
OPIC_PAGE_CASH = 1.0
# The cash of a link from a page of this many links is band 0's floor in OPIC: a
# link from a page of typical out-degree, seen once, is the common case.
OPIC_BASE_LINKS = 32


class URLSketch:
    """A count-min sketch of ``rows`` x ``width`` float32 counters keyed by uint64
    (a URL's fingerprint, a site's hash); every operation is over a numpy array of keys,
    so no Python object is made a key. ``add`` sums (counts, cash), ``raise_to`` keeps
    the maximum (a best score); ``get`` is the least counter of the key's rows, which
    is never below the true sum (or maximum)."""

    def __init__(self, width: int, rows: int = SKETCH_ROWS) -> None:
        if width < 64 or width & (width - 1):
            raise ValueError(f"the sketch width must be a power of 2 >= 64, got {width}")
        self.width, self.rows = width, rows
        self.table = np.zeros((rows, width), np.float32)
        self._offsets = (np.arange(rows, dtype=np.uint64) * np.uint64(width))[:, None]

    def _cells(self, keys: np.ndarray) -> np.ndarray:
        """The flat index of each key's counter in each row, (rows, n). Double hashing
        (Kirsch and Mitzenmacher): the two halves of the key give every row's slot."""
        keys = keys.astype(np.uint64, copy=False)
        h1 = keys & np.uint64(0xFFFFFFFF)
        h2 = (keys >> np.uint64(32)) | np.uint64(1)
        i = np.arange(self.rows, dtype=np.uint64)[:, None]
        return ((h1 + i * h2) & np.uint64(self.width - 1)) + self._offsets

    def add(self, keys: np.ndarray, amounts: np.ndarray | float = 1.0) -> None:
        cells = self._cells(keys)
        flat = self.table.reshape(-1)
        weights = np.broadcast_to(np.asarray(amounts, np.float32), keys.shape)
        for row in cells:
            np.add.at(flat, row, weights)

    def raise_to(self, keys: np.ndarray, values: np.ndarray | float) -> None:
        cells = self._cells(keys)
        flat = self.table.reshape(-1)
        weights = np.broadcast_to(np.asarray(values, np.float32), keys.shape)
        for row in cells:
            np.maximum.at(flat, row, weights)

    def get(self, keys: np.ndarray) -> np.ndarray:
        cells = self._cells(keys)
        values: np.ndarray = self.table.reshape(-1)[cells].min(axis=0)
        return values

    def tables(self, name: str) -> dict[str, np.ndarray]:
        """The counters to save: only those not zero, with their flat indices (a small
        crawl touches few of the ``rows * width``)."""
        flat = self.table.reshape(-1)
        used = np.flatnonzero(flat)
        return {f"{name}_used": used, f"{name}_values": flat[used]}

    def load(self, saved: Mapping[str, np.ndarray], name: str) -> None:
        """Take the counters :meth:`tables` saved (kept only where the shape is the
        same: a sketch of another width starts empty, which only forgets priorities)."""
        self.table[:] = 0
        used = saved.get(f"{name}_used")
        if used is None or (len(used) and int(used.max()) >= self.table.size):
            return
        self.table.reshape(-1)[used] = saved[f"{name}_values"]


def _log2_bands(values: np.ndarray, bands: int, floor: float = 1.0) -> np.ndarray:
    """Band ``floor(log2(value / floor))``, clipped to 0 .. bands - 1: an order of
    magnitude (base 2) a band, as in-degrees and site sizes spread over several."""
    ratio = np.maximum(values / floor, 1.0)
    return np.minimum(np.log2(ratio).astype(np.int8), bands - 1).astype(np.int8)


def record_fingerprints(records: Sequence[bytes]) -> np.ndarray:
    """The fingerprint (urls.fingerprint) of each URL-seen payload's URL."""
    fps = urls.xxh3_64_array(p[: p.index(b"\n")] for p in records)
    return np.frombuffer(fps, np.uint64)


class OrderPolicy:
    """Breadth-first, and the contract of every policy.

    ``bands``: how many bands BEAST keeps per queue (1: plain FIFOs). ``observes_links``:
    admission calls :meth:`links` for every page's links before sending them to
    URL-seen. ``focused``: the manager passes each page's focus score to :meth:`links`.
    """

    name = "bfs"
    observes_links = False
    focused = False

    def __init__(self, bands: int = 1) -> None:
        if bands < 1:
            raise ValueError(f"bands must be >= 1, got {bands}")
        self.bands = bands

    def links(self, page: int, targets: np.ndarray, score: float | None = None) -> None:
        """A fetched page (fingerprint ``page``) links to ``targets`` (fingerprints,
        uint64); ``score``: its focus score, for a focused policy."""

    def links_of_pages(self, pages: np.ndarray, targets: np.ndarray, counts: np.ndarray) -> None:
        """:meth:`links` of many pages at once (one batch of admission): page ``i``
        (fingerprint ``pages[i]``) links to the next ``counts[i]`` of ``targets``."""
        start = 0
        for page, n in zip(pages.tolist(), counts.tolist()):
            self.links(page, targets[start : start + n])
            start += n

    def band_of(
        self, records: Sequence[bytes], plds: np.ndarray, hosts: np.ndarray | None, new: bool
    ) -> np.ndarray | None:
        """The band of each URL-seen payload BEAST places (int8), or None for all 0.
        ``plds``/``hosts``: its PLD and host hashes (host 0 or None: not known); ``new``:
        first placed (else QF's URLs placed again at a re-split)."""
        return None

    def tables(self) -> dict[str, np.ndarray]:
        """What the policy knows, as arrays to save with BEAST's commit."""
        return {}

    def load(self, saved: Mapping[str, np.ndarray]) -> None:
        """Take what :meth:`tables` saved."""


class _Sketched(OrderPolicy):
    """A policy whose knowledge is one URLSketch."""

    def __init__(self, bands: int, sketch_width: int) -> None:
        super().__init__(bands)
        self.sketch = URLSketch(sketch_width)

    def tables(self) -> dict[str, np.ndarray]:
        return self.sketch.tables(self.name)

    def load(self, saved: Mapping[str, np.ndarray]) -> None:
        self.sketch.load(saved, self.name)


class InDegree(_Sketched):
    name = "indegree"
    observes_links = True

    def links(self, page: int, targets: np.ndarray, score: float | None = None) -> None:
        self.sketch.add(targets)

    def links_of_pages(self, pages: np.ndarray, targets: np.ndarray, counts: np.ndarray) -> None:
        self.sketch.add(targets)

    def band_of(
        self, records: Sequence[bytes], plds: np.ndarray, hosts: np.ndarray | None, new: bool
    ) -> np.ndarray | None:
        return _log2_bands(self.sketch.get(record_fingerprints(records)), self.bands)


class Opic(_Sketched):
    name = "opic"
    observes_links = True

    def links(self, page: int, targets: np.ndarray, score: float | None = None) -> None:
        if not len(targets):
            return
        self.links_of_pages(np.array([page], np.uint64), targets, np.array([len(targets)]))

    def links_of_pages(self, pages: np.ndarray, targets: np.ndarray, counts: np.ndarray) -> None:
        linking = counts > 0
        pages, counts = pages[linking], counts[linking]
        if not len(pages):
            return
        # Each page's cash as it was before the batch: a link between two pages of one
        # batch passes its share to the next batch's pages only (one sketch read and one
        # update a batch rather than a page).
        cash = OPIC_PAGE_CASH + self.sketch.get(pages)
        self.sketch.add(targets, np.repeat(cash / counts, counts))

    def band_of(
        self, records: Sequence[bytes], plds: np.ndarray, hosts: np.ndarray | None, new: bool
    ) -> np.ndarray | None:
        cash = self.sketch.get(record_fingerprints(records))
        return _log2_bands(cash, self.bands, OPIC_PAGE_CASH / OPIC_BASE_LINKS)


class LargerSites(_Sketched):
    name = "larger-sites"

    def band_of(
        self, records: Sequence[bytes], plds: np.ndarray, hosts: np.ndarray | None, new: bool
    ) -> np.ndarray | None:
        sites = plds if hosts is None else np.where(hosts != 0, hosts, plds)
        if new:
            self.sketch.add(sites)
        # Site sizes spread over more orders of magnitude than in-degrees: two a band.
        sizes = self.sketch.get(sites)
        return _log2_bands(np.sqrt(sizes), self.bands)


class Focus(_Sketched):
    name = "focus"
    focused = True

    def links(self, page: int, targets: np.ndarray, score: float | None = None) -> None:
        if score is not None and len(targets):
            self.sketch.raise_to(targets, min(max(score, 0.0), 1.0))

    def band_of(
        self, records: Sequence[bytes], plds: np.ndarray, hosts: np.ndarray | None, new: bool
    ) -> np.ndarray | None:
        scores = self.sketch.get(record_fingerprints(records))
        return np.minimum((scores * self.bands).astype(np.int8), self.bands - 1).astype(np.int8)


_POLICIES: dict[str, type[_Sketched]] = {p.name: p for p in (InDegree, Opic, LargerSites, Focus)}


def make_order(name: str, *, bands: int, sketch_width: int) -> OrderPolicy:
    """The policy ``name`` (ORDERS, or "focus"); ``bfs`` has one band whatever ``bands``."""
    if name == "bfs":
        return OrderPolicy()
    if name not in _POLICIES:
        raise ValueError(f"no crawl order {name!r}: one of {', '.join([*ORDERS, 'focus'])}")
    return _POLICIES[name](bands, sketch_width)


def policy_for(s: Settings) -> OrderPolicy:
    """The crawl's policy: ``focus`` where a focus function is set, else ``order``."""
    name = "focus" if s.focus is not None else s.order
    return make_order(name, bands=s.order_bands, sketch_width=s.order_sketch_width)


def save_tables(policy: OrderPolicy, path: Path, fsync: bool) -> None:
    """Write the policy's tables to ``path`` (temporary name, fsync, rename, directory
    fsync), as BEAST writes its own."""
    durable.save_npz(path, policy.tables(), durable=fsync)


def load_tables(policy: OrderPolicy, path: Path) -> None:
    with np.load(path) as saved:
        policy.load({k: saved[k] for k in saved.files})
