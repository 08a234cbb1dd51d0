"""Sorted runs: merging them (newest wins) and the fold policy that bounds their number."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.drum.merge import merge_two
from drumbeat.drum.runs import BASE_FRACTION, MAX_RUNS, fold_start, merge_runs

VALUE = np.dtype([("n", "<i8")])


def run_of(items: dict[int, int], chunk: int) -> list[tuple[np.ndarray, np.ndarray]]:
    keys = np.array(sorted(items), np.uint64)
    values = np.zeros(len(keys), VALUE)
    values["n"] = [items[k] for k in keys.tolist()]
    return [(keys[s : s + chunk], values[s : s + chunk]) for s in range(0, len(keys), chunk)]


runs_st = st.lists(
    st.dictionaries(st.integers(0, 60), st.integers(0, 999), max_size=30), max_size=6
)


@settings(max_examples=300, deadline=None)
@given(runs=runs_st, chunks=st.lists(st.integers(1, 7), min_size=6, max_size=6))
def test_merge_runs_is_a_dict_update_in_run_order(
    runs: list[dict[int, int]], chunks: list[int]
) -> None:
    model: dict[int, int] = {}
    for r in runs:
        model.update(r)
    out = list(merge_runs([run_of(r, c) for r, c in zip(runs, chunks)]))
    keys = np.concatenate([k for k, _ in out]) if out else np.empty(0, np.uint64)
    values = np.concatenate([v["n"] for _, v in out]) if out else np.empty(0, np.int64)
    assert keys.tolist() == sorted(model)
    assert values.tolist() == [model[k] for k in sorted(model)]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.integers(0, 99), st.integers(0, 9)),
    st.dictionaries(st.integers(0, 99), st.integers(10, 19)),
)
def test_merge_two_new_wins(old: dict[int, int], new: dict[int, int]) -> None:
    ((ok, ov),) = run_of(old, 1000) or [(np.empty(0, np.uint64), np.empty(0, VALUE))]
    ((nk, nv),) = run_of(new, 1000) or [(np.empty(0, np.uint64), np.empty(0, VALUE))]
    keys, values = merge_two(ok, ov, nk, nv)
    model = {**old, **new}
    assert keys.tolist() == sorted(model)
    assert values["n"].tolist() == [model[k] for k in sorted(model)]


@settings(max_examples=200, deadline=None)
@given(base=st.integers(0, 10**7), deltas=st.lists(st.integers(1, 10**5), min_size=1, max_size=400))
def test_fold_policy_bounds_runs_and_rewrites(base: int, deltas: list[int]) -> None:
    """Rounds adding deltas of these sizes (no overlap): at most MAX_RUNS runs, and the
    records written stay a small multiple of the deltas plus the base rewrites."""
    runs = [base] if base else []
    written = 0
    rebases = 0
    for d in deltas:
        j = fold_start(runs)
        assert 0 <= j <= len(runs)
        if j == 0 and runs:
            rebases += 1
            assert sum(runs[1:]) >= BASE_FRACTION * runs[0]
        new = d + sum(runs[j:])
        written += new
        runs = [*runs[:j], new]
        assert len(runs) <= MAX_RUNS
    # The base is rewritten only after the deltas grew by a quarter of it, so its
    # rewrites cost at most (1 + 1/f) times what was added; the deltas' tiers add a
    # logarithmic factor (< MAX_RUNS).
    total = base + sum(deltas)
    assert written <= (1 + 1 / BASE_FRACTION) * total + MAX_RUNS * sum(deltas)
    if base and sum(deltas) < BASE_FRACTION * base:
        assert rebases == 0  # a big base is not rewritten for small rounds
