"""The manager loop's tuning: one frozen, documented structure.

Each field gives its rule and the reason for it; the measurements behind the values are in
docs/benchmarks.md, section "Manager loop tuning".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoopTuning:
    # Host names resolved at once: DNS answers come over one socket, lookups wait in turn.
    dns_concurrency: int = 64
    # New URLs handed to BEAST at once. Placing's budget is checked between batches, so a
    # turn overruns place_budget_s by less than a batch: small enough for that, large
    # enough that the per-batch cost stays small.
    place_batch_urls: int = 2_048
    # Placing per turn of the loop: the rest of a large URL-seen delivery waits for the
    # next turns, as a turn's placing and routing must end before the fetchers finish
    # what is in flight, or they run dry.
    place_budget_s: float = 0.010
    # And at most this share of the loop's time while BEAST has URLs to give (when it has
    # none the crawl waits for these, and placing goes at full speed): turns follow each
    # other at once while URLs wait, so a turn's budget alone would let placing starve
    # the dispatches.
    place_share: float = 0.3
    # Forced merges of the PLD graph (every budget_refresh_s) take at most this share of
    # the crawl's time: they cost more as the graph grows and take CPU from the fetchers,
    # and budgets that follow the graph a little later change little.
    forced_pld_merge_share: float = 0.02
    # The same for URL-seen merges forced while the fetchers still have URLs in RAM
    # (Admission.frontier_low): a merge costs a pass over every bucket.
    early_seen_merge_share: float = 0.05
    # And while the frontier runs dry (Admission.frontier_dry), up to this share, sooner
    # than urlseen_flush_interval_s: the fetch slots would idle waiting for the merge.
    dry_seen_merge_share: float = 0.2
    # URLs read from BEAST are routed (robots rules, then their host's queue) in batches
    # of this many, at most route_budget_s per turn: a large read routed at once starves
    # the fetchers (see place_budget_s for the budget's length).
    route_batch_urls: int = 256
    route_budget_s: float = 0.010
    # And at most this share of the loop's time while the scheduler holds at least
    # route_full_speed_below of frontier_ram_urls and no fetch slot idles (below that, or
    # with slots idle, the crawl waits for these URLs: routing goes at full speed). A
    # paced BEAST turn brings half of RAM at once, which the crawl needs over the turn,
    # not in its first second.
    route_share: float = 0.1
    route_full_speed_below: float = 0.25
    # The PLD graph's new edges are counted for at most this long a turn (the rest in the
    # next turns): taking a finished edges round at once holds the loop up.
    pump_budget_s: float = 0.010
    # Idle hosts are swept out of the scheduler's RAM this often: a sweep walks every host
    # in RAM, and an idle host costs only its entry meanwhile.
    host_sweep_interval_s: float = 10.0
    # Paced BEAST turns one feed may end while each turn's URLs are dropped at once.
    max_turns_per_feed: int = 256
    # scheme://authority -> (PLD, hashes, origin, host) entries (Pricing.authority).
    pld_cache_entries: int = 65_536
    # A checkpoint fsyncs some 80 files while the loop waits. This long before one falls
    # due, a sync of the state directory's filesystem starts in a thread, so that the
    # checkpoint's fsyncs find little left dirty (Checkpointer.presync_if_due).
    presync_lead_s: float = 3.0
    # RobotsCache merges are small (one key per origin); when the scheduler runs short of
    # URLs they run this often rather than every urlseen_flush_interval_s.
    robots_flush_starving_s: float = 0.05
    # A periodic checkpoint's writer thread sleeps checkpoint_writer_nap_s after every
    # checkpoint_rows_awake rows of RAM it writes: awake throughout, it held the GIL while
    # the loop wanted it, and every call of the loop that let go of the GIL waited up to a
    # switch interval to get it back. The checkpoint goes live a little later instead.
    checkpoint_rows_awake: int = 1_000
    checkpoint_writer_nap_s: float = 0.001


TUNING = LoopTuning()
