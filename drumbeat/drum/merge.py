"""One bucket's check/merge step, vectorized with numpy (no per-key Python loops).

The semantics are those of applying the bucket's tuples one by one, in arrival
order, to a dict ``stored: key -> value``:

- every tuple reports ``unique = key not in stored`` and ``before = stored[key]``
  (zeros when absent) *before* it is applied;
- ``CHECK`` changes nothing; ``UPDATE`` and ``CHECK_UPDATE`` set
  ``stored[key] = v`` when the key is absent, else ``merge(stored[key], v)``.

To do that without a loop, equal keys are grouped by a stable sort and each
group's writers are folded with a segmented prefix scan, which is exact when
``merge`` is associative (overwrite, add and max are; a supplied function must
be too). ``stored`` is the union of the repository's sorted runs, the newest
run's value winning (:mod:`.runs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

CHECK, UPDATE, CHECK_UPDATE = 0, 1, 2
MergeFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
BUILTIN_MERGES = ("overwrite", "add", "max")


class Merger:
    """Combines structured values: ``combine(stored, incoming)`` and its segmented scan."""

    def __init__(self, value_dtype: np.dtype, merge: str | MergeFn) -> None:
        if isinstance(merge, str) and merge not in BUILTIN_MERGES:
            raise ValueError(f"merge must be one of {BUILTIN_MERGES} or a function, got {merge!r}")
        if not isinstance(merge, str) and not callable(merge):
            raise TypeError(f"merge must be a name or a callable, got {type(merge).__name__}")
        self.dtype = value_dtype
        self.merge = merge

    def combine(self, stored: np.ndarray, incoming: np.ndarray) -> np.ndarray:
        if self.merge == "overwrite":
            return incoming.copy()
        if self.merge in ("add", "max"):
            op = np.add if self.merge == "add" else np.maximum
            out = np.empty(len(stored), self.dtype)
            for name in self.dtype.names or ():
                out[name] = op(stored[name], incoming[name])
            return out
        out = np.asarray(cast(MergeFn, self.merge)(stored, incoming))
        if out.dtype != self.dtype or out.shape != stored.shape:
            raise TypeError(
                f"merge function returned {out.dtype} {out.shape}, "
                f"expected {self.dtype} {stored.shape}"
            )
        return out

    def scan(self, values: np.ndarray, starts: np.ndarray, seg: np.ndarray) -> np.ndarray:
        """Inclusive fold of ``values`` within segments (``starts``: first index of each)."""
        if self.merge == "overwrite":
            return values
        if self.merge == "add":
            out = np.empty_like(values)
            for name in self.dtype.names or ():
                col = values[name]
                c = np.cumsum(col, axis=0, dtype=col.dtype)
                out[name] = c - (c - col)[starts][seg]
            return out
        # Hillis-Steele doubling: log2(longest segment) vectorized steps.
        out = values.copy()
        rank = np.arange(len(values)) - starts[seg]
        longest = int(rank.max()) if len(rank) else 0
        d = 1
        while d <= longest:
            idx = np.flatnonzero(rank >= d)
            out[idx] = self.combine(out[idx - d], out[idx])
            d *= 2
        return out


_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """Argsort by key, ties in input order.

    ``np.sort`` of uint64 is SIMD and several times faster than ``np.argsort``, so the
    order comes from sorting ``high 32 bits of the key | input index`` as plain
    integers. That is the answer unless two different keys share their high bits
    (rare: ~n^2 / 2^33 pairs); only such runs are sorted again, by their low bits.
    """
    n = len(keys)
    if n >= 1 << 32:
        return _argsort_ties(keys)
    comp = keys & ~_LOW
    comp |= np.arange(n, dtype=np.uint64)
    comp.sort()
    order = (comp & _LOW).astype(np.intp)
    comp >>= _32
    tie = comp[1:] == comp[:-1]
    if tie.any():
        low = keys[order] & _LOW
        mixed = tie & (low[1:] != low[:-1])
        if mixed.any():
            run = np.empty(n, np.intp)
            run[0] = 0
            np.cumsum(~tie, out=run[1:])
            bad = np.zeros(int(run[-1]) + 1, bool)
            bad[run[1:][mixed]] = True
            pos = np.flatnonzero(bad[run])
            # Within a run the input indices ascend: a stable sort by (run, low bits)
            # puts equal keys in input order.
            order[pos] = order[pos][_argsort_ties((run[pos].astype(np.uint64) << _32) | low[pos])]
    return order


def _argsort_ties(keys: np.ndarray) -> np.ndarray:
    """Argsort by key, ties in input order; 2 unstable sorts beat one 'stable' (far slower)."""
    order = np.argsort(keys)
    sk = keys[order]
    same = sk[1:] == sk[:-1]
    if not same.any():
        return order
    group = np.empty(len(keys), np.uint64)
    group[0] = 0
    np.cumsum(~same, out=group[1:])
    comp = (group << np.uint64(32)) | order.astype(np.uint64)
    comp.sort()
    return (comp & np.uint64(0xFFFFFFFF)).astype(np.intp)


def merge_two(
    old_keys: np.ndarray, old_values: np.ndarray, new_keys: np.ndarray, new_values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The sorted union of two sorted runs of distinct keys; ``new`` wins a tie.

    One ``searchsorted`` of the smaller side and one insert: for a big old chunk
    and a small new one this is a copy, where sorting the union would cost
    ``log`` passes over both.
    """
    if not len(new_keys):
        return old_keys, old_values
    if not len(old_keys):
        return new_keys, new_values
    pos = np.searchsorted(old_keys, new_keys)
    inside = pos < len(old_keys)
    tie = np.zeros(len(new_keys), bool)
    tie[inside] = old_keys[pos[inside]] == new_keys[inside]
    if tie.any():
        keep = np.ones(len(old_keys), bool)
        keep[pos[tie]] = False
        old_keys, old_values = old_keys[keep], old_values[keep]
        pos = np.searchsorted(old_keys, new_keys)
    return np.insert(old_keys, pos, new_keys), np.insert(old_values, pos, new_values)


@dataclass(slots=True)
class BucketOutcome:
    unique: np.ndarray  # bool per tuple, bucket arrival order
    before: np.ndarray  # value per tuple before it was applied
    added: np.ndarray  # the keys stored for the first time, sorted
    sort_s: float


def _lookup(
    uk: np.ndarray,
    ck: np.ndarray,
    cv: np.ndarray,
    present: np.ndarray,
    stored: np.ndarray,
    has_values: bool,
) -> None:
    """Mark the keys of ``uk`` (sorted, distinct) found in the sorted chunk ``ck`` and
    take their values from ``cv`` (over any found in an older run).

    The smaller side is searched in the larger: a small delta run is looked up key
    by key in the batch, a big base chunk by the batch's keys.
    """
    lo = int(np.searchsorted(uk, ck[0]))
    hi = int(np.searchsorted(uk, ck[-1], "right"))
    if hi <= lo:
        return
    q = uk[lo:hi]
    if len(ck) < len(q):
        pos = np.searchsorted(q, ck)
        np.minimum(pos, len(q) - 1, out=pos)
        hit = q[pos] == ck
        idx = pos[hit] + lo
        present[idx] = True
        if has_values:
            stored[idx] = cv[hit]
    else:
        at = np.searchsorted(ck, q)  # < len(ck): q[-1] <= ck[-1]
        found = ck[at] == q
        present[lo:hi] |= found
        if has_values:
            stored[lo:hi][found] = cv[at[found]]


def merge_bucket(
    keys: np.ndarray,
    ops: np.ndarray,
    values: np.ndarray,
    older: Iterable[Iterable[tuple[np.ndarray, np.ndarray]]],
    cache: Iterable[tuple[np.ndarray, np.ndarray]],
    merger: Merger,
    emit: Callable[[np.ndarray, np.ndarray], None],
) -> BucketOutcome:
    """Check and merge tuples (of consecutive buckets) against the stored runs.

    ``older`` are the runs the round only reads, oldest first; ``cache`` is the
    merged stream of the newer runs it rewrites (:func:`.runs.merge_runs`). Both
    yield sorted ``(keys, values)`` chunks of distinct keys, streamed. ``emit``
    receives the new run as sorted chunks: the records of ``cache`` with every key
    whose value the tuples changed (new keys, and stored keys with their full new
    value -- the newest run holding a key has its value) merged in.

    The steps pass plain arrays to each other: the batch grouped by key
    (:func:`_groups`), its writers folded (:func:`_fold_writers`), looked up in the
    runs (:func:`_lookup`), the changes merged into the cache's stream
    (:func:`_rewrite_cache`), the outcomes put back in arrival order
    (:func:`_before`).
    """
    n = len(keys)
    if not n:
        for ck, cv in cache:
            if len(ck):
                emit(ck, cv)
        return BucketOutcome(
            np.empty(0, bool), np.empty(0, merger.dtype), np.empty(0, np.uint64), 0.0
        )
    dt = merger.dtype
    has_values = dt.itemsize > 0
    t0 = time.perf_counter()
    order = stable_argsort(keys)
    sort_s = time.perf_counter() - t0
    starts, gid, uk, writer, group_writes = _groups(keys[order], ops[order])
    fold = _fold_writers(values[order], writer, starts, gid, merger) if has_values else None

    present = np.zeros(len(uk), bool)
    stored = np.zeros(len(uk), dt)
    for run in older:
        for ck, cv in run:
            if len(ck):
                _lookup(uk, ck, cv, present, stored, has_values)
    _rewrite_cache(cache, uk, group_writes, present, stored, fold, merger, emit)

    # A tuple finds its key if it was stored or an earlier tuple of its group wrote it.
    prior_writes = np.cumsum(writer) - writer
    seen = present[gid] | (prior_writes > prior_writes[starts][gid])
    unique = np.empty(n, bool)
    unique[order] = ~seen
    before = np.zeros(n, dt)
    if fold is not None:
        before[order] = _before(gid, present, stored, fold, merger)
    added = uk[group_writes & ~present]
    return BucketOutcome(unique, before, added, sort_s)


def _groups(
    sk: np.ndarray, so: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group the sorted keys ``sk`` (ops ``so``): each group's first index, each
    tuple's group, the distinct keys, which tuples write and which groups do."""
    n = len(sk)
    first = np.empty(n, bool)
    first[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    gid = np.cumsum(first) - 1
    uk = sk[starts]
    writer = so != CHECK
    group_writes = np.add.reduceat(writer.astype(np.int64), starts) > 0
    return starts, gid, uk, writer, group_writes


class _Fold(NamedTuple):
    """Per sorted tuple: the group's last writer strictly before it (``last_excl``,
    ``has_prev``), each group's last writer, and the running fold of the group's
    writers up to each writer (``folded``, valid at writer slots)."""

    last_excl: np.ndarray
    has_prev: np.ndarray
    group_last: np.ndarray
    folded: np.ndarray


def _fold_writers(
    folded: np.ndarray, writer: np.ndarray, starts: np.ndarray, gid: np.ndarray, merger: Merger
) -> _Fold:
    """Fold the writers of each group of the sorted values ``folded`` (in place)."""
    n = len(folded)
    pos = np.arange(n)
    last_incl = np.maximum.accumulate(np.where(writer, pos, -1))
    last_excl = np.empty(n, np.intp)
    last_excl[:1] = -1
    last_excl[1:] = last_incl[:-1]
    has_prev = last_excl >= starts[gid]
    group_last = last_incl[np.r_[starts[1:], n] - 1]
    wi = np.flatnonzero(writer)
    if len(wi):
        wfirst = np.empty(len(wi), bool)
        wfirst[:1] = True
        wg = gid[wi]
        np.not_equal(wg[1:], wg[:-1], out=wfirst[1:])
        folded[wi] = merger.scan(folded[wi], np.flatnonzero(wfirst), np.cumsum(wfirst) - 1)
    return _Fold(last_excl, has_prev, group_last, folded)


def _rewrite_cache(
    cache: Iterable[tuple[np.ndarray, np.ndarray]],
    uk: np.ndarray,
    group_writes: np.ndarray,
    present: np.ndarray,
    stored: np.ndarray,
    fold: _Fold | None,
    merger: Merger,
    emit: Callable[[np.ndarray, np.ndarray], None],
) -> None:
    """Look the keys ``uk`` up in the cache's chunks and emit each chunk with the
    changes of the groups up to its last key merged in, then the changes past it."""
    lo = 0
    for ck, cv in cache:
        if not len(ck):
            continue
        _lookup(uk, ck, cv, present, stored, fold is not None)
        hi = int(np.searchsorted(uk, ck[-1], "right"))
        if hi > lo:
            wk, wv = _writes(lo, hi, uk, group_writes, present, stored, fold, merger)
            ck, cv = merge_two(ck, cv, wk, wv)
            lo = hi
        emit(ck, cv)
    if lo < len(uk):
        wk, wv = _writes(lo, len(uk), uk, group_writes, present, stored, fold, merger)
        if len(wk):
            emit(wk, wv)


def _writes(
    lo: int,
    hi: int,
    uk: np.ndarray,
    group_writes: np.ndarray,
    present: np.ndarray,
    stored: np.ndarray,
    fold: _Fold | None,
    merger: Merger,
) -> tuple[np.ndarray, np.ndarray]:
    """The records groups ``lo:hi`` change (stored values must be final there)."""
    g = lo + np.flatnonzero(group_writes[lo:hi])
    if fold is None:  # nothing to change but presence
        g = g[~present[g]]
        return uk[g], np.zeros(len(g), merger.dtype)
    out = fold.folded[fold.group_last[g]]
    found = present[g]
    if found.any():
        out[found] = merger.combine(stored[g[found]], out[found])
        old = stored[g]
        # An unchanged value need not be written again (a repeated max, say).
        same = found & (_as_bytes(out) == _as_bytes(old))
        if same.any():
            g, out = g[~same], out[~same]
    return uk[g], out


def _before(
    gid: np.ndarray, present: np.ndarray, stored: np.ndarray, fold: _Fold, merger: Merger
) -> np.ndarray:
    """Each sorted tuple's value before it was applied: the stored one folded with
    its group's earlier writers."""
    has_prev, last_excl, folded = fold.has_prev, fold.last_excl, fold.folded
    sorted_before = np.zeros(len(gid), merger.dtype)
    from_store = present[gid] & ~has_prev
    sorted_before[from_store] = stored[gid[from_store]]
    both = has_prev & present[gid]
    if both.any():
        sorted_before[both] = merger.combine(stored[gid[both]], folded[last_excl[both]])
    only = has_prev & ~present[gid]
    sorted_before[only] = folded[last_excl[only]]
    return sorted_before


def _as_bytes(values: np.ndarray) -> np.ndarray:
    return values.view(np.dtype((np.void, values.dtype.itemsize)))
