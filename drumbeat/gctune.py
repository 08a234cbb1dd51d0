"""Garbage-collector settings for long-running crawl processes (manager and fetchers)."""

from __future__ import annotations

import gc

# Allocations (net of frees) between two young-generation collections; CPython's is 700.
GEN0_THRESHOLD = 10_000


def tune_gc() -> None:
    """Run the cyclic collector less often, and never over what start-up built.

    A crawl process allocates mostly short-lived objects that reference counting frees.
    With CPython's default threshold the collector runs hundreds of times a minute, and
    the objects each run promotes bring on full collections over every live object.
    Measured in a fetcher process (``drumbeat bench throughput --quick``, polite): 6 %
    of its CPU went to the collector with the defaults (800 young, 70 middle and 7 full
    collections of ~60 ms each in 30 s), 1.2 % with this (16 young ones). Cyclic garbage
    is still collected, after at most ``GEN0_THRESHOLD`` allocations.

    Call it once the process has set itself up: ``gc.freeze`` moves every object alive
    then (modules, settings, connections pools) out of the collector's sight for good.
    """
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, 10, 10)
