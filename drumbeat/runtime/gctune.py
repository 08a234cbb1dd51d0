"""Garbage-collector settings for long-running crawl processes (manager and fetchers)."""

from __future__ import annotations

import gc

# Allocations (net of frees) between two young-generation collections; CPython's is 700.
GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Run the cyclic collector less often, and never over what start-up built.

    A crawl process allocates mostly short-lived objects that reference counting frees.
    With CPython's default threshold the collector runs hundreds of times a minute, and
    the objects each run promotes bring on full collections over every live object: in
    a fetcher process the defaults cost a clear share of its CPU, this a small fraction
    of it. Cyclic garbage is still collected, after at most ``GEN0_THRESHOLD``
    allocations.

    Call it once the process has set itself up: ``gc.freeze`` moves every object alive
    then (modules, settings, connections pools) out of the collector's sight for good.
    """
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, 10, 10)
