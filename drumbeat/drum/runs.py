"""Sorted runs: which runs a merge round rewrites, and merging runs (newest wins).

A repository's stored records are a *base* run plus a few smaller *delta* runs,
oldest first, LSM-like (see ``repository``). A key may be in several runs; the
newest run holding it has its value. Every merge round reads all runs (its
batch is looked up in each) and writes one new run: the records its tuples
changed, merged with the newest runs it *folds*. :func:`fold_start` picks them:

- all runs, base included, once the deltas hold ``BASE_FRACTION`` of the
  base's records: the base is rewritten every ``BASE_FRACTION * base / delta``
  rounds, so its cost per round is ``delta * (1 + f) / f`` records, not ``base``;
- otherwise the longest suffix of deltas in which each run is at most
  ``TIER_RATIO`` times all newer ones together (size-tiered, like a binary
  counter: a record is rewritten ``O(log(f * base / delta))`` times before it
  reaches the base);
- and always enough that at most ``MAX_RUNS`` runs remain.

The round's own delta is not known before it has looked everything up, so a
new run is folded by the *next* round: :func:`fold_start` sees only the runs
already written.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator

import numpy as np

from drumbeat.drum.merge import merge_two, stable_argsort

BASE_FRACTION = 0.25
TIER_RATIO = 2
MAX_RUNS = 8

Chunk = tuple[np.ndarray, np.ndarray]  # sorted distinct keys, their values


def fold_start(counts: list[int]) -> int:
    """Index of the first of the runs (record ``counts``, oldest first) that the
    next round rewrites together with its delta; ``len(counts)``: none."""
    m = len(counts)
    if m <= 1:
        return m
    if sum(counts[1:]) >= BASE_FRACTION * counts[0]:
        return 0
    # The newest delta is folded only together with its predecessor: folded alone
    # into every round's delta it would be rewritten each round as it grows.
    j, newer = m, counts[m - 1]
    while j - 2 >= 1 and counts[j - 2] <= TIER_RATIO * newer:
        newer += counts[j - 2]
        j -= 1
    if j < m:
        j -= 1
    if j >= MAX_RUNS:  # this round adds a run: keep at most MAX_RUNS
        j = MAX_RUNS - 2
    return j


def merge_runs(runs: list[Iterable[Chunk]]) -> Generator[Chunk, None, None]:
    """Merge sorted runs (oldest first, each a stream of sorted chunks of distinct keys)
    into one sorted stream of distinct keys, the newest run's value winning.

    Streams in slabs: each step takes, from every run, its records up to the
    smallest last key of the runs' current chunks, so RAM is one chunk per run.
    """
    its: list[Iterator[Chunk] | None] = [iter(r) for r in runs]
    bufs: list[Chunk | None] = [None] * len(its)
    while True:
        for i, it in enumerate(its):
            while it is not None and (bufs[i] is None or not len(bufs[i][0])):  # type: ignore[index]
                chunk = next(it, None)
                if chunk is None:
                    its[i] = None
                    bufs[i] = None
                    break
                bufs[i] = chunk
        live = [i for i, b in enumerate(bufs) if b is not None]
        if not live:
            return
        if len(live) == 1:
            (i,) = live
            yield bufs[i]  # type: ignore[misc]
            yield from its[i]  # type: ignore[misc]
            return
        edge = min(bufs[i][0][-1] for i in live)  # type: ignore[index]
        parts: list[Chunk] = []
        for i in live:
            keys, values = bufs[i]  # type: ignore[misc]
            cut = int(np.searchsorted(keys, edge, "right"))
            parts.append((keys[:cut], values[:cut]))
            bufs[i] = (keys[cut:], values[cut:])
        yield _fold(parts)


def _fold(parts: list[Chunk]) -> Chunk:
    """Union of sorted chunks (oldest first), newest wins: the small newer ones are
    merged first, so the big old one is copied once."""
    parts = [p for p in parts if len(p[0])]
    if len(parts) > 2:
        keys = np.concatenate([p[0] for p in parts[1:]])
        values = np.concatenate([p[1] for p in parts[1:]])
        order = stable_argsort(keys)  # ties: older first
        keys, values = keys[order], values[order]
        last = np.ones(len(keys), bool)
        last[:-1] = keys[1:] != keys[:-1]
        parts = [parts[0], (keys[last], values[last])]
    if len(parts) == 1:
        return parts[0]
    return merge_two(*parts[0], *parts[1])
