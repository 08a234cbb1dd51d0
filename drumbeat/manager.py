"""The crawl manager: owns all crawl state and decides what is fetched when.

The flow of a URL (IRLbot Fig. 2; ARCHITECTURE.md):

    links -> normalize -> scope -> URL-seen (DRUM) -> STAR budget -> BEAST queues (disk)
      -> robots check (RAM LRU, else RobotsCache DRUM) -- no rules yet --> QR (disk)
         |                                                 origin -> RobotsRequested (DRUM)
         |                                                 new -> robots-to-fetch queue (disk)
         v allowed                                         -> DNS + robots.txt -> QR replay
      politeness scheduler (RAM, host and IP heaps) -> FetchItems in Tasks for the fetchers

URLs enter RAM only as fast as they are fetched: BEAST is read when the scheduler holds
fewer than ``frontier_ram_urls`` URLs, so RAM stays bounded whatever the disk queues hold.

Everything the manager knows is saved by periodic checkpoints (see ``checkpoint.py``): the
DRUMs' and disk queues' commits, plus the URLs held in RAM. Items handed to fetchers but not
reported by checkpoint time are saved as queued, so a crash loses no URL; pages fetched after
the last checkpoint may be fetched again after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from time import perf_counter, thread_time
from typing import Callable, Iterable, Iterator, TypeVar

import numpy as np
import xxhash

from drumbeat import urls
from drumbeat.checkpoint import CheckpointMeta, Checkpoints
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.frontier.backoff import Backoff, retryable
from drumbeat.frontier.beast import Beast
from drumbeat.frontier.diskqueue import DiskQueue
from drumbeat.frontier.pldgraph import PLDIndegree
from drumbeat.frontier.politeness import HostState, PolitenessScheduler, QueuedURL
from drumbeat.frontier.qr import RobotsWaitQueue
from drumbeat.frontier.robots import (
    ALLOW_ALL,
    GIVEN_UP,
    REFUSED,
    RULES,
    UNAVAILABLE,
    RobotsEntry,
    RobotsStore,
)
from drumbeat.frontier.star import Star, irlbot_budget, pld_hash
from drumbeat.frontier.urlseen import (
    DrumURLSeen,
    decode_payload,
    encode_payload,
    encode_payloads,
    payload_url,
)
from drumbeat.pace import Pace
from drumbeat.queue.base import (
    PAGE,
    ROBOTS,
    FetchItem,
    FoundEdges,
    FoundURLs,
    ItemResult,
    ManagerQueue,
    Task,
)
from drumbeat.settings import Settings
from drumbeat.stalls import Stalls
from drumbeat.store.crawllog import CrawlLog
from drumbeat.store.durable import deferring_fsyncs, sync_filesystem

log = logging.getLogger("drumbeat.manager")
_T = TypeVar("_T")

DNS_CONCURRENCY = 64
# New URLs handed to BEAST at once: 3-8 ms of placing (1.3-3.9 µs a URL, offline, on
# bench-like URLs), so a turn overruns PLACE_BUDGET_S below by less than a batch, which is
# when the budget is checked. Batches of 8,192 let one turn's placing run to 100-200
# ms, past the budget; with 2,048 and routing batches of 256 instead of 1,024, a
# quick polite bench counted 20-24 turns of 0.1 s or more (3.0-3.4 s in all) against 23-33
# (3.3-5.1 s), in three interleaved pairs (drumbeat.stalls).
PLACE_BATCH = 2_048
# Placing per turn of the crawl loop. One DRUM round can find 600,000 URLs new, about 3 s
# of placing: done at once, it kept the loop from dispatching, and the fetchers ran dry
# (measured: a 3.9 s turn, no page fetched for 2 s). The rest waits for the next turns.
# The budget is short because a turn's placing and routing (ROUTE_BUDGET_S) must end
# before the fetchers finish what is in flight: the bench's 200 fetches are 70 ms of work
# at 3,000 pages/s, and the manager gets two thirds of a core while both fetchers are
# busy. With 25 ms each, turns that placed a large URL-seen delivery or routed a large
# BEAST read left the fetchers idle (6 % idle CPU over a polite bench minute against
# 4.7 % with 10 ms; slowest 5 s 1,718-1,850 pages/s against 2,452-2,545, at the same
# mean: two interleaved pairs).
PLACE_BUDGET_S = 0.010
# And at most this share of the loop's time while BEAST has URLs to give (when it has
# none, the crawl waits for these: placing goes at full speed). A turn's budget alone let
# placing take most of the loop's time, as turns follow each other at once while URLs
# wait: placing a delivery of 1.4 M URLs then kept the manager busy for 0.55-0.8 of a
# core for 12-18 s, and the fetchers, starved of dispatches, ran at 1,300-2,400 pages/s
# with CPU left idle (polite bench, 75 s). A checkpoint does not wait for placing (see
# DrumURLSeen.take_new): when it placed every new URL first, it waited for the placing at
# full speed, up to 15 s, holding the manager at 0.6-0.7 of a core for 6-7 s of a polite
# bench, and the run's slowest 5 s fell there.
PLACE_SHARE = 0.3
# The forced merges of the PLD graph (every budget_refresh_s) take at most this share of
# the crawl's time: they cost more as the graph grows (150-200 ms on the bench web after a
# minute), they take CPU from the fetchers (in the background, see Drum), and budgets
# that follow the graph a little later change little.
FORCED_PLD_MERGE_SHARE = 0.02
# The same for URL-seen merges forced while the fetchers still have URLs in RAM
# (Manager._frontier_low): a merge costs a pass over every bucket, more as the crawl grows.
EARLY_SEEN_MERGE_SHARE = 0.05
# URLs read from BEAST are routed (robots rules, then their host's queue) in batches of
# this many, at most ROUTE_BUDGET_S per turn: a read of half of frontier_ram_urls (50,000
# by default) took 0.7 s at once, again with the fetchers starved meanwhile (and see
# PLACE_BUDGET_S for the budget's length).
ROUTE_BATCH = 256
ROUTE_BUDGET_S = 0.010
# And at most this share of the loop's time while the scheduler holds at least
# ROUTE_FULL_SPEED_BELOW of frontier_ram_urls and no fetch slot idles (below that, or
# with slots idle, the crawl waits for these URLs: routing goes at full speed). A paced
# BEAST turn brings half of RAM at once, 45,000-48,000 URLs on the polite bench, about
# 0.25 s of routing, which the crawl needs over the turn's 10 s: routed at once, it held
# the manager at 0.6-0.85 of a core for 0.8 s after each turn began, the fetchers fell
# to 0.8-1.0 of a core between them, and pages/s to about 2,000 (half-second samples).
# The crawl uses routed URLs at ~0.02 of a core (5.6 µs a URL at 3,500 pages/s).
ROUTE_SHARE = 0.1
ROUTE_FULL_SPEED_BELOW = 0.25
# The PLD graph's new edges are counted for at most this long a turn (the rest in the
# next turns): taking a finished edges round at once took 22-76 ms on the bench.
PUMP_BUDGET_S = 0.010
# Paced BEAST turns one feed may end while each turn's URLs are dropped at once.
MAX_TURNS_PER_FEED = 256
PLD_CACHE = 65_536  # scheme://authority -> (PLD, hashes, origin, host) entries (_authority)
# A checkpoint fsyncs some 80 files (URL-seen's buckets and arrival log, BEAST's queues,
# the crawl log ...) while the loop waits. This long before one falls due, a sync of the
# state directory's filesystem starts in a thread and writes out what they hold dirty, so
# that the checkpoint's fsyncs find little left (see _presync_if_due).
PRESYNC_LEAD_S = 3.0
# RobotsCache merges are small (one key per origin); when the scheduler runs short of URLs
# they run this often rather than every urlseen_flush_interval_s.
ROBOTS_FLUSH_STARVING_S = 0.05
# A periodic checkpoint's writer thread sleeps this long after every CHECKPOINT_ROWS_AWAKE
# rows of RAM it writes (about a millisecond of Python each). Awake throughout, it held
# the GIL while the loop wanted it: every call that let go of the GIL (numpy's sorts, a
# write) waited up to a switch interval to get it back, and the loop's first turn after
# a checkpoint took 0.11-0.2 s (a re-split step of 2,048 URLs: 140 ms of wall time for
# 26 ms of CPU) on the polite bench. The checkpoint goes live a little later instead.
CHECKPOINT_ROWS_AWAKE = 1_000
CHECKPOINT_WRITER_NAP_S = 0.001


def beast_host_cap(s: Settings) -> int:
    """URLs of one host per BEAST queue: B0·τh/τh_min, the most a host's delay floor lets
    it be fetched faster than a long-tail host (IRLbot couples budget and delay); 0 (no
    cap) when hosts have no delay to bound their rate."""
    if s.host_delay_s <= 0 or s.host_delay_min_s <= 0:
        return 0
    return math.ceil(s.budget_default * s.host_delay_s / s.host_delay_min_s)


@dataclass(frozen=True, slots=True)
class ManagerStats:
    pages_done: int
    in_flight: int
    queued: int  # URLs waiting anywhere: RAM, BEAST, QR, robots checks
    queued_ram: int
    hosts: int
    seen: int
    resolving: int
    elapsed_s: float
    counters: dict[str, int]


class Manager:
    def __init__(
        self,
        settings: Settings,
        queue: ManagerQueue,
        crawl_log: CrawlLog,
        *,
        durables: Iterable[Callable[[], None]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert settings.state_dir is not None
        s = self.settings = settings
        self.queue = queue
        self.crawl_log = crawl_log
        self.durables = list(durables)  # flushed + fsynced before each checkpoint (WARC, logs)
        self.clock = clock
        self.policy = AddressPolicy(allow_loopback=s.allow_loopback, allow_private=s.allow_private)
        self.dns = DnsCache(nameserver=s.dns_server, timeout_s=s.dns_timeout_s,
                            negative_ttl_s=s.dns_negative_ttl_s)
        self.star = Star(budget=irlbot_budget(s.budget_default, s.budget_max,
                                              s.budget_indegree_floor),
                         indegree_floor=s.budget_indegree_floor, table_size=s.budget_table_plds)
        # Opened by restore(), from the checkpoint's commits:
        self.seen: DrumURLSeen | None = None
        self.plds: PLDIndegree | None = None
        self.beast: Beast | None = None
        self.robots: RobotsStore | None = None
        self.qr: RobotsWaitQueue | None = None
        self.qr_retry: RobotsWaitQueue | None = None  # URLs of origins whose robots.txt failed
        self.robots_todo: DiskQueue | None = None  # origins whose robots.txt is to be fetched
        self.backoff = Backoff(max_s=s.backoff_max_s, forgive_s=s.backoff_forgive_s,
                               max_attempts=s.fetch_max_attempts)
        self.scheduler = PolitenessScheduler(
            host_delay_s=s.host_delay_s, ip_delay_s=s.ip_delay_s,
            host_delay_min_s=s.host_delay_min_s, ip_delay_min_s=s.ip_delay_min_s,
            default_budget=s.budget_default,
        )
        # Hosts waiting for robots.txt in RAM at most (the rest wait in robots_todo).
        self.robots_ram_hosts = max(100, s.frontier_ram_urls // 10)
        self.checkpoints = Checkpoints(s.state_dir)
        self.counters: Counter[str] = Counter()
        self.seeds: list[str] = []
        self.seed_hosts: frozenset[str] = frozenset()
        self.seed_plds: frozenset[str] = frozenset()
        self._seed_pld_hashes: frozenset[int] = frozenset()
        self.pages_done = 0
        self.in_flight: dict[int, tuple[FetchItem, HostState]] = {}
        self.in_flight_pages = 0
        self._checking = 0  # URLs in a RobotsCache check, not yet answered
        # Failures so far of origins whose robots.txt failed and is being retried (each is a
        # host in RAM, so this is bounded like them).
        self._robots_failures: dict[str, int] = {}
        self._request_gens: deque[int] = deque()  # QR generation of each RobotsRequested check
        self._to_check: list[tuple[str, bytes]] = []  # RobotsCache checks, submitted in batches
        self._next_item_id = 0
        self._next_task_id = 0
        self._resolving: dict[str, asyncio.Task[None]] = {}
        self._dns_slots = asyncio.Semaphore(DNS_CONCURRENCY)
        self._started = self.clock()
        self._last_checkpoint = self._started
        self._presync: asyncio.Future[None] | None = None  # see _presync_if_due
        # A checkpoint's files being written in a thread (see _synced_checkpoint).
        self._checkpoint_writing: asyncio.Future[Path] | None = None
        self._presynced_for = float("-inf")  # the checkpoint time it was last started for
        self._resumed_at = float("-inf")  # set by restore()
        self._last_sweep = self._started
        self._last_seen_flush = float("-inf")  # the seeds are merged at once
        # URL-seen's new URLs being placed, when a turn's budget ran out (see PLACE_BUDGET_S).
        self._new_urls: Iterator[bytes] | None = None
        # URLs read from BEAST and not yet routed (see ROUTE_BUDGET_S); they count as in RAM.
        self._to_route: deque[bytes] = deque()
        self._last_robots_flush = float("-inf")
        self._last_pld_flush = self._started
        self.stop_reason: str | None = None
        self._force_stop = False
        self._wake = asyncio.Event()
        self._slots_idle = True  # at the last dispatch, fetch slots were left unused
        # Seconds spent per stage of the manager's loop, for `drumbeat bench throughput`.
        self.stage_s: Counter[str] = Counter()
        # The loop's long turns (wall time), for the operator and the benchmark.
        self.stalls = Stalls()
        self._collect_busy_s = 0.0  # wall time _collect spent applying results, last call
        self._merge_busy_s = 0.0  # wall time of _take_new_urls's DRUM merges, last call
        self._collector: asyncio.Future[list[ItemResult]] | None = None
        self._authorities: dict[bytes, tuple[str, int, int, str, str]] = {}
        self._placing = Pace(PLACE_SHARE, PLACE_BUDGET_S)
        self._routing = Pace(ROUTE_SHARE, ROUTE_BUDGET_S)

    # -- lifecycle -------------------------------------------------------------------------

    def _open(self, frontier: dict | None, urlseen: dict | None, pld: dict | None) -> None:
        """Open the disk structures at a checkpoint's commits (all None: a new crawl)."""
        s = self.settings
        d = s.state_dir
        assert d is not None
        f = frontier or {}
        # Merge rounds in the background: a round of millions of URLs took a second and
        # more, and the loop that feeds the fetchers must not wait for it. The DRUMs are
        # fsynced at commits only: a crawl always reopens them at a checkpoint's commit,
        # never at a later round, and each round's fsyncs (files, state, directory) held
        # the loop up for 0.1-0.3 s behind the WARC writes when the round was ended.
        self.seen = DrumURLSeen(d / "urlseen", ram_bytes=s.urlseen_ram_bytes, manifest=urlseen,
                                background=True, fsync="commit",
                                cache_bytes=s.urlseen_cache_bytes)
        self.plds = PLDIndegree(d / "pldgraph", ram_bytes=s.pld_ram_bytes, manifest=pld,
                                on_indegree=self.star.observe, background=True,
                                fsync="commit")
        self.beast = Beast(d / "frontier" / "beast", state=f.get("beast"),
                           queues=s.beast_queues, max_queues=s.beast_max_queues,
                           pld_slots=s.beast_pld_slots, host_cap=beast_host_cap(s),
                           host_slots=s.beast_host_slots, rebudget=self._places,
                           budgets_of=self._budgets_by_hash, turn_s=s.beast_turn(),
                           clock=self.clock, admit=self._robots_admit)
        self.robots = RobotsStore(
            d / "robots", robots_agent=s.robots_agent, expiry_s=s.robots_expiry_s,
            retry_s=s.robots_retry_s, max_attempts=s.robots_max_attempts,
            ram_entries=s.robots_ram_entries, drum_ram_bytes=s.robots_ram_bytes,
            manifest=f.get("robots"), fsync="commit",  # its DRUMs, as above
        )
        self.qr = RobotsWaitQueue(d / "frontier" / "qr", state=f.get("qr"),
                                  max_wait_s=s.robots_wait_max_s, clock=self.clock)
        self.qr_retry = RobotsWaitQueue(d / "frontier" / "qr_retry", state=f.get("qr_retry"),
                                        max_wait_s=s.robots_retry_s,
                                        min_wait_s=s.robots_retry_s, clock=self.clock)
        self.robots_todo = DiskQueue(d / "frontier" / "robots_todo", state=f.get("robots_todo"))

    def restore(self) -> bool:
        """Load the live checkpoint if there is one. Returns True when resuming."""
        path = self.checkpoints.current()
        if path is None:
            self._open(None, None, None)
            return False
        meta = self.checkpoints.read_meta(path)
        self._open(meta.frontier, meta.urlseen_manifest, meta.pld_manifest)
        self.star.load(path)
        self.counters.update(meta.counters)
        self.pages_done = meta.pages_done
        self._next_item_id = meta.next_item_id
        self._set_seeds(meta.seeds)
        # The previous run may have hit any host just before it stopped.
        self._resumed_at = self.clock()
        self.scheduler.start_no_earlier_than(
            self._resumed_at + max(self.settings.host_delay_s, self.settings.ip_delay_s)
        )
        assert self.qr is not None and self.beast is not None
        self._robots_failures = dict((meta.frontier or {}).get("robots_failures", {}))
        for origin in (meta.frontier or {}).get("robots_working", []):
            self._work_on_robots(origin, self.qr.issue())
        n = 0
        for url, depth, via, hops in self.checkpoints.read_queue(path):
            self._route(encode_payload(url, depth, via, hops))
            n += 1
        log.info("resumed from %s: %d URLs were in RAM, %d in BEAST, %d in QR; %d seen, "
                 "%d pages done", path, n, len(self.beast), len(self.qr),
                 len(self.seen) if self.seen is not None else 0, self.pages_done)
        return True

    def add_seeds(self, seeds: Iterable[str]) -> list[str]:
        """Normalize seed URLs and send them to URL-seen; returns "URL: reason" for rejects."""
        good: list[str] = []
        rejected: list[str] = []
        for raw in seeds:
            try:
                good.append(urls.normalize(raw, max_bytes=self.settings.max_url_bytes))
            except urls.URLRejected as e:
                self.counters[f"seeds_rejected.{e.reason}"] += 1
                log.warning("seed %r rejected: %s", raw, e.reason)
                rejected.append(f"{raw[:100]!r}: {e.reason}")
        self._set_seeds(self.seeds + [u for u in good if u not in self.seeds])
        self._admit(good, depth=0, via=None)
        return rejected

    def _set_seeds(self, seeds: list[str]) -> None:
        self.seeds = seeds
        hosts = {urls.host_of(u) for u in seeds}
        self.seed_hosts = frozenset(hosts)
        self.seed_plds = frozenset(urls.pld(h) for h in hosts)
        self._seed_pld_hashes = frozenset(map(pld_hash, self.seed_plds))

    def request_stop(self, reason: str, *, force: bool = False) -> None:
        """Stop dispatching; ``force`` also skips the grace period for in-flight fetches."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._force_stop = self._force_stop or force
        self._wake.set()

    async def run(self) -> str:
        """Crawl until done, a limit, or request_stop(); checkpoint; return the stop reason."""
        s = self.settings
        deadline = self._started + s.max_time_s if s.max_time_s else None
        try:
            while self.stop_reason is None:
                now = self.clock()
                if deadline is not None and now >= deadline:
                    self.request_stop("max_time")
                    break
                t0, w0 = thread_time(), perf_counter()
                self._take_new_urls(now, budget_s=PLACE_BUDGET_S)
                w1 = perf_counter()
                self._feed(now, budget_s=ROUTE_BUDGET_S)
                t1, w2 = thread_time(), perf_counter()
                self._dispatch_and_submit(now)
                self.stage_s["frontier"] += t1 - t0
                self.stage_s["scheduling"] += thread_time() - t1
                w3 = perf_counter()
                if self._finished():
                    self.request_stop("max_pages" if self._page_limit_reached() else "done")
                    break
                await self._collect(self._wait_time(now, deadline))
                w4 = perf_counter()
                if self._checkpoint_due(now):
                    # The fetchers live on what is in flight while the checkpoint's turn
                    # runs: the slots the collect just freed are filled first.
                    self._dispatch_and_submit(self.clock())
                    await self._synced_checkpoint()
                else:
                    self._presync_if_due(now)
                if now - self._last_sweep >= 10.0:
                    self.scheduler.sweep(now)
                    self._last_sweep = now
                self._note_turn(now, {
                    "merge": self._merge_busy_s, "place": w1 - w0 - self._merge_busy_s,
                    "feed": w2 - w1, "dispatch": w3 - w2, "collect": self._collect_busy_s,
                    "checkpoint+sweep": perf_counter() - w4})
            await self._drain_in_flight()
        finally:
            for t in self._resolving.values():
                t.cancel()
            if self._collector is not None:
                # Results it may still bring are lost to this run, but their items are
                # still in flight and so saved as queued: they are fetched again later.
                self._collector.cancel()
        if self._checkpoint_writing is not None:
            await self._checkpoint_writing
        await self._synced_checkpoint(final=True)
        return self.stop_reason or "done"

    def _checkpoint_due(self, now: float) -> bool:
        """Whether to checkpoint now: the interval has passed, and the last checkpoint's
        files have been written (a write that failed fails the crawl here, as it would
        have in the loop)."""
        writing = self._checkpoint_writing
        if writing is not None:
            if not writing.done():
                return False
            self._checkpoint_writing = None
            writing.result()
        return now >= self._last_checkpoint + self.settings.checkpoint_interval_s

    def _presync_if_due(self, now: float) -> None:
        """PRESYNC_LEAD_S before a checkpoint falls due, start writing out the dirty data
        of the state directory's filesystem in a thread (store.durable.sync_filesystem):
        once per checkpoint, never while the last one runs, and only where checkpoints
        are at least twice that far apart (more often, little is dirty).

        The checkpoint still fsyncs every file it relies on; what it saves is the wait.
        On the polite bench (75 s runs, the checkpoint at 60 s) its 80-85 fsyncs took
        0.05-0.18 s without a presync, 0.035-0.05 s after one (the sync itself took
        0.08-0.11 s in its thread); the checkpoint's turn took 0.21-0.42 s (mean 0.33,
        10 runs) before, 0.15-0.31 s (mean 0.23, 10 later runs, not interleaved) since.
        """
        interval = self.settings.checkpoint_interval_s
        due = self._last_checkpoint + interval
        if (interval < 2 * PRESYNC_LEAD_S or now < due - PRESYNC_LEAD_S
                or self._presynced_for == due
                or (self._presync is not None and not self._presync.done())):
            return
        self._presynced_for = due
        self._presync = asyncio.get_running_loop().run_in_executor(
            None, sync_filesystem, self.settings.state_dir)
        self._presync.add_done_callback(_presync_done)

    def _note_turn(self, now: float, parts: dict[str, float]) -> None:
        """Count a turn that kept the fetchers waiting (see drumbeat.stalls); one of a
        second or more is logged, as the crawl's pages/s show a dip there."""
        if self.stalls.turn(now - self._started, parts):
            total = sum(parts.values())
            if total >= 1.0:
                log.info("manager loop turn took %.2f s: %s", total,
                         ", ".join(f"{k} {v:.2f} s" for k, v in parts.items() if v >= 0.01))

    async def _synced_checkpoint(self, *, final: bool = False) -> None:
        """Checkpoint once the fetchers confirm their WARC records are durable.

        A checkpoint counts every collected result as done, so the records behind those
        results must be on disk first. If a fetcher does not confirm, a periodic
        checkpoint waits for the next interval; the last one is written regardless
        (losing the crawl state would cost more than a few unconfirmed records).

        The commits are made here, in the loop; a periodic checkpoint's files (the URLs
        in RAM, STAR's table, the state) are then written in a thread while the crawl
        goes on: on the polite bench that took 90-94 ms of the checkpoint's 0.21 s turn
        (67,000 URLs in RAM). The checkpoint goes live once they are written; until then
        the one before it is live, and its commits stay reopenable (every store keeps
        its last two), as no other checkpoint starts before this one is written.
        """
        laps = _Laps()
        if not await self.queue.sync():
            log.warning("fetchers did not confirm their WARC files are synced%s",
                        "; checkpointing anyway at stop" if final else "; checkpoint postponed")
            if not final:
                self._last_checkpoint = self.clock()
                return
        laps.lap("warc sync")
        if final:
            # Every edge found goes into the PLD graph (and its count), however the
            # background merges fell: a crawl's pld_edges_new is its distinct edges.
            assert self.plds is not None
            self._counting_edges(self.plds.flush)
        write = self._commit_checkpoint(laps)
        if final:
            write()
        else:
            self._checkpoint_writing = asyncio.get_running_loop().run_in_executor(None, write)

    async def _drain_in_flight(self) -> None:
        """After a stop: let in-flight fetches finish for a short grace period."""
        end = self.clock() + min(self.settings.total_timeout_s, 10.0)
        while self.in_flight and self.clock() < end and not self._force_stop:
            await self._collect(min(0.2, max(0.0, end - self.clock())))

    def _counting_edges(self, step: Callable[[], _T]) -> _T:
        """``step()`` on the PLD graph, its newly moved edges counted in pld_edges_new."""
        assert self.plds is not None
        before = self.plds.new_edges
        result = step()
        self.counters["pld_edges_new"] += self.plds.new_edges - before
        return result

    def _finished(self) -> bool:
        if self.in_flight:
            return False
        if self._page_limit_reached():
            return True
        assert self.seen is not None and self.robots is not None
        assert self.qr is not None and self.robots_todo is not None
        return not (self._resolving or self.seen.pending or self.seen.busy
                    or self._new_urls is not None
                    or self._to_route
                    or self.robots.pending or self._checking
                    or self.scheduler.queued_urls or len(self.beast or ()) or len(self.qr)
                    or len(self.qr_retry or ())
                    or len(self.robots_todo) or self.qr.working_origins())

    def _page_limit_reached(self) -> bool:
        m = self.settings.max_pages
        return m is not None and self.pages_done + self.in_flight_pages >= m

    def _wait_time(self, now: float, deadline: float | None) -> float:
        wait = 0.25
        due = self.scheduler.next_due_time()
        if (due is not None and len(self.in_flight) < self.settings.concurrency
                and not self._page_limit_reached()):
            wait = min(wait, max(0.0, due - now))
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - now))
        return wait

    async def _collect(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for results (or a DNS answer / stop request) and apply them.

        One collect() call stays outstanding across iterations and is never cancelled: a
        cancelled collect can have taken results off the queue already (asyncio.wait_for
        may swallow the cancel and return them to nobody).
        """
        if self._collector is None:
            self._collector = asyncio.ensure_future(self.queue.collect(4096, 1.0))
        if timeout_s > 0 and not self._wake.is_set() and not self._collector.done():
            waiter = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait({waiter, self._collector}, timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        else:
            await asyncio.sleep(0)  # always let fetchers and DNS answers run
        self._wake.clear()
        self._collect_busy_s = 0.0
        if not self._collector.done():
            return
        results, self._collector = self._collector.result(), None
        now = self.clock()
        started, wall = thread_time(), perf_counter()
        for r in results:
            if r.log is not None:
                self.crawl_log.append(r.log)
        logged = thread_time()
        found: list[FoundURLs] = []
        edges: list[FoundEdges] = []
        for r in results:
            self._on_result(r, now, found, edges)
        if edges:
            assert self.plds is not None
            self.plds.add_packed(b"".join(e.keys for e in edges),
                                 b"".join(e.targets for e in edges),
                                 b"".join(e.lengths for e in edges))
        applied = thread_time()
        if found:
            self._admit_found(found)
        self.stage_s["crawl_log"] += logged - started
        self.stage_s["results"] += applied - logged
        self.stage_s["urlseen"] += thread_time() - applied
        self._collect_busy_s = perf_counter() - wall

    # -- URL-seen -> STAR -> BEAST ---------------------------------------------------------

    def _admit(self, candidates: list[str], depth: int, via: str | None) -> int:
        """Send in-scope URLs to URL-seen; new ones reach BEAST via _take_new_urls.

        Returns the number of URLs submitted.
        """
        if self.settings.scope != "any":
            candidates = [u for u in candidates if self._in_scope(u)]
        assert self.seen is not None
        started = thread_time()
        n = len(candidates)
        self.counters["urlseen_cache_hits"] += self.seen.submit(
            [urls.fingerprint(u) for u in candidates],
            encode_payloads(candidates, [depth] * n, [via] * n))
        self.stage_s["urlseen"] += thread_time() - started
        return len(candidates)

    def _in_scope(self, url: str) -> bool:
        if urls.in_scope(urls.host_of(url), self.settings.scope, self.seed_hosts,
                         self.seed_plds):
            return True
        self.counters["links_out_of_scope"] += 1
        return False

    def _admit_found(self, found: list[FoundURLs]) -> None:
        """Send the URLs fetchers found to URL-seen in one batch (scoped crawls drop those
        outside the scope first)."""
        assert self.seen is not None
        if self.settings.scope != "any":
            fingerprints: list[int] = []
            payloads: list[bytes] = []
            for f in found:
                for fp, payload in zip(memoryview(f.fingerprints).cast("Q"), f.payloads_list()):
                    if self._in_scope(decode_payload(payload)[0]):
                        fingerprints.append(fp)
                        payloads.append(payload)
            self.counters["urlseen_cache_hits"] += self.seen.submit(fingerprints, payloads)
            return
        self.counters["urlseen_cache_hits"] += self.seen.submit_packed(
            b"".join(f.fingerprints for f in found), b"".join(f.payloads for f in found),
            b"".join(f.lengths for f in found))

    def _frontier_short(self) -> bool:
        """Fetch slots are idle because no host in RAM is ready (Polybot: load more when
        fewer than H hosts are ready), and BEAST has nothing more to give (now: a paced
        turn holds the next queues back, and new URLs should be placed before it ends)."""
        assert self.beast is not None
        return (self._slots_idle and not self._to_route
                and (len(self.beast) == 0 or self.beast.holding or self.scheduler.queued_urls
                     >= self.settings.frontier_ram_urls // 2))

    def _frontier_low(self) -> bool:
        """BEAST is empty and the scheduler's RAM has fallen to half of
        ``frontier_ram_urls``: the fetchers are still busy, but only with what RAM holds.

        URL-seen's pending URLs should be merged now rather than when the fetchers run
        dry. From a merge to the first page of a new host there are robots checks and a
        robots.txt fetch; on the bench web (no politeness) a merge that waited for idle
        slots delivered 166,000 URLs of 3,600 new hosts at once, and almost no page was
        fetched for 8 s."""
        assert self.beast is not None
        return len(self.beast) == 0 and self._ram_room() >= self.settings.frontier_ram_urls // 2

    def _seen_merge_due(self, now: float) -> bool:
        """URL-seen's part-filled buffers are to be merged now (see _take_new_urls)."""
        assert self.seen is not None
        if not self.seen.pending:
            return False
        since = now - self._last_seen_flush
        if since < self.settings.urlseen_flush_interval_s:
            return False
        if self._frontier_short():
            return True
        return self._frontier_low() and since >= self.seen.last_round_s / EARLY_SEEN_MERGE_SHARE

    def _take_new_urls(self, now: float, budget_s: float | None = None) -> None:
        """Move URLs that URL-seen found new into BEAST with their STAR budget.

        DRUM merges by itself when its buffers fill (the cheap, sequential case IRLbot
        designs for). A merge of a part-filled buffer costs a pass over every bucket, so
        it is forced only when the frontier runs short of URLs, at most once per
        ``urlseen_flush_interval_s``, or runs low (BEAST empty, RAM half empty), at most
        ``EARLY_SEEN_MERGE_SHARE`` of the time: small crawls and crawl ends then do not
        wait for full buffers, and large crawls, whose BEAST is never empty, never pay
        for it. URL-seen's rounds, forced or not, run in the background: their new URLs
        come out of ``take_new`` in a later turn, and the time share counts the last
        round's wall time.

        With ``budget_s``, placing stops once that much time has passed (after a whole
        batch) and goes on in the next call, from the same point of URL-seen's delivery,
        and it takes at most PLACE_SHARE of the time (see there); a re-split of BEAST's
        QF under way is stepped first, so that QF's URLs keep their places before new
        ones. Without it, every URL found new so far is placed.
        """
        seen = self.seen
        assert seen is not None
        started = perf_counter()
        if self._seen_merge_due(now):
            seen.flush(wait=False)  # its new URLs come out of take_new once it is done
            self._last_seen_flush = now
        self._counting_edges(lambda: self._step_pld_graph(now))
        self._merge_busy_s = perf_counter() - started
        if self._new_urls is None:
            self._new_urls = seen.take_new()
        stop = None
        if budget_s is not None:
            assert self.beast is not None
            granted = self._placing.allowance(budget_s, full_speed=not len(self.beast))
            if granted is None:
                return  # placing has had its share of the time
            stop = time.perf_counter() + granted
        try:
            # QF's URLs being placed again come before new ones (BEAST's order).
            while stop is not None and self.beast.resplitting:
                self.beast.resplit_step()
                if time.perf_counter() >= stop:
                    return  # the rest in the next turn
            while True:
                records = list(islice(self._new_urls, PLACE_BATCH))
                self._place(records)
                if len(records) < PLACE_BATCH:
                    break
                if stop is not None and time.perf_counter() >= stop:
                    return  # the rest in the next turn
            self._new_urls = None
        finally:
            if stop is not None:
                self._placing.spent()

    def _step_pld_graph(self, now: float) -> None:
        """Refresh the budgets when due (the edges merge in the background: budgets
        follow the in-degrees pumped so far), and move the new edges of the rounds that
        ended into the in-degrees, PUMP_BUDGET_S at a time."""
        plds = self.plds
        assert plds is not None
        if now - self._last_pld_flush >= max(self.settings.budget_refresh_s,
                                             plds.last_round_s / FORCED_PLD_MERGE_SHARE):
            plds.refresh()
            self._last_pld_flush = now
        plds.pump(budget_s=PUMP_BUDGET_S)

    def _place(self, records: list[bytes]) -> None:
        """Give URLs their STAR budget and put them into BEAST (whose ``admit`` is
        :meth:`_robots_admit`)."""
        if not records:
            return
        assert self.beast is not None
        self.beast.place_many(records, *self._places(records))
        self.counters["urls_admitted"] += len(records)

    def _robots_admit(self, payload: bytes) -> bool:
        """BEAST's ``admit``: False, with the URL dropped, when its origin's robots rules
        are in RAM, fresh, and disallow it; it is asked once the URL has a place in the
        ring, before it takes it (new, or leaving QF).

        IRLbot checks robots.txt after BEAST, so a disallowed URL takes a place in its
        PLD's budget and host cap and is dropped when read. Where many are disallowed,
        paced turns then bring few URLs that may be fetched: the throughput bench's pages
        each link into /private/, and past 200 s of a polite crawl 90 % of every turn was
        dropped there, so the crawl fell to 100-400 pages/s for 20-30 s at a time (four
        300 s runs out of four). It costs about 2.8 µs a URL allowed and 6.4-6.8 µs a URL
        dropped (bench-like URLs, rules in RAM), asked only for the URLs given a place in
        the ring: when it checked every URL placed, placing the bench's URL-seen
        deliveries (most of their URLs bound for QF) cost 5-7 µs a URL, now about 2.6.
        URLs of origins whose rules are not in RAM go on as before: :meth:`_route`
        checks every URL read.
        """
        robots = self.robots
        assert robots is not None
        # Its origin: the authority as written, userinfo and all (a URL with userinfo is
        # then decided at routing). Decoding it cost less than a lookup in _authority:
        # 2.5-2.8 against 3.0-3.2 µs a URL admitted.
        entry = robots.peek(payload[:payload.index(b"/", 8)].decode())
        if (entry is None or entry.state != RULES or not robots.is_fresh(entry)
                or entry.allows(payload_url(payload), self.settings.user_agent)):
            return True  # allowed, or decided at routing
        url, depth, via, _ = decode_payload(payload)
        self._log_drop(url, depth, via, "robots_disallowed")
        return False

    def _places(self, records: list[bytes]) -> tuple[list[int], list[int], list[int]]:
        """For each URL-seen payload, what BEAST places it by: its PLD's hash, that PLD's
        budget now, and the hash of its scheme://authority (see :meth:`_authority`). Also
        BEAST's ``rebudget`` when it re-splits QF.

        List passes over the batch rather than a call per URL: 0.39-0.47 against
        0.94-1.13 µs a URL (bench-like batches of 2,048 from 5,000 hosts, median of 100).
        """
        authorities = [payload[:payload.index(b"/", 8)] for payload in records]
        known = list(map(self._authorities.get, authorities))
        if None in known:
            known = [k if k is not None else self._authority(payload)
                     for k, payload in zip(known, records)]
        return [k[1] for k in known], self._budgets([k[0] for k in known]), \
            [k[2] for k in known]

    def _authority(self, payload: bytes) -> tuple[str, int, int, str, str]:
        """What the manager needs of a URL-seen payload's scheme://authority: the URL's
        PLD, its hash, the authority's hash (BEAST's host cap), the URL's origin (robots
        rules) and host (politeness). Cached by that authority (a page's links mostly
        share a few, a BEAST read brings many URLs of each), in at most PLD_CACHE
        entries. Routing took origin_of and host_of of every URL before: 7.4-8.4 against
        6.4-7.0 µs a URL routed now (bench-like URLs, offline manager)."""
        authority = payload[:payload.index(b"/", 8)]  # normalized: a path follows it
        known = self._authorities.get(authority)
        if known is None:
            if len(self._authorities) >= PLD_CACHE:
                self._authorities.clear()
            url = authority.decode() + "/"
            host = urls.host_of(url)
            pld = urls.pld(host)
            known = self._authorities[authority] = (
                pld, pld_hash(pld), xxhash.xxh3_64_intdigest(authority), urls.origin_of(url),
                host)
        return known

    def _budgets(self, plds: list[str]) -> list[int]:
        """STAR's budgets; in a crawl scoped to the seeds' hosts or PLDs, which the operator
        chose, those PLDs get the maximum (spam cannot enter through the scope anyway)."""
        return self._seeds_at_max(plds, self.star.budgets(plds), self.seed_plds)

    def _budgets_by_hash(self, hashes: np.ndarray) -> list[int]:
        """:meth:`_budgets` of PLDs given by their hashes (BEAST's ``budgets_of``: a
        re-split of QF places its URLs again by the hashes kept with them)."""
        plds = hashes.tolist()
        return self._seeds_at_max(plds, self.star.budgets_by_hash(plds),
                                  self._seed_pld_hashes)

    def _seeds_at_max(self, plds: list, budgets: list[int], seeds: frozenset) -> list[int]:
        """``budgets``, with the maximum for the PLDs in ``seeds`` in a scoped crawl."""
        if self.settings.scope == "any":
            return budgets
        top = self.settings.budget_max
        return [top if pld in seeds else b for pld, b in zip(plds, budgets)]

    # -- the robots loop -------------------------------------------------------------------

    def _feed(self, now: float, budget_s: float | None = None) -> None:
        """Move URLs towards the scheduler: robots answers, QR replays, then BEAST.

        Reads from disk only while the scheduler holds fewer than ``frontier_ram_urls``;
        BEAST is read in batches of at least half of that, when RAM has fallen to half, or
        of at least a sixteenth while fetch slots sit idle for want of a ready host
        (Polybot: load the next batch when fewer than H hosts are ready). Without the
        second rule, RAM holding a few hosts with many URLs each would cap the crawl at
        one page per host delay per host until half of it had drained.

        With ``budget_s``, URLs read from BEAST are routed for that long (after a whole
        batch), the rest in the next calls, first thing; they count as in RAM meanwhile.
        """
        robots, qr, beast = self.robots, self.qr, self.beast
        assert robots is not None and qr is not None and beast is not None
        self._submit_checks()
        starving = self._slots_idle
        interval = ROBOTS_FLUSH_STARVING_S if starving else self.settings.urlseen_flush_interval_s
        if robots.pending and now - self._last_robots_flush >= interval:
            # Two rounds: checks that find no rules make requests, answered by the second.
            for _ in range(2):
                robots.flush()
                self._take_robots_answers()
            self._last_robots_flush = now
        else:
            self._take_robots_answers()
        self._load_robots_work()
        stop = None if budget_s is None else time.perf_counter() + budget_s
        route_stop = self._route_slice(budget_s, starving)
        routed_s = self._route_read(route_stop)
        room = self._ram_room()
        for name, waiting in (("qr", qr), ("qr_retry", self.qr_retry)):
            if room > 0 and waiting is not None and len(waiting):
                replayed = waiting.replay(room)
                self.counters[f"{name}_replayed"] += len(replayed)
                self.counters[f"{name}_repeats"] = waiting.repeats
                for payload in replayed:
                    self._route(payload)
                room -= len(replayed)
        ram = self.settings.frontier_ram_urls
        if (room >= ram // 2 or (starving and room >= ram // 16)) and len(beast):
            # A paced BEAST turn ends early once what it brought is crawled: no URL waits
            # for a robots check, and no host in RAM is waiting to be sent a URL within its
            # normal delay (hosts in back-off or with a long Crawl-delay would otherwise
            # hold the turn, and so would a host stuck in a slow fetch). A turn whose URLs
            # all leave at once (dropped: robots, a refused host) is followed by the next.
            resplit_stop = self._resplit_slice(stop, starving)
            try:
                for _ in range(MAX_TURNS_PER_FEED):
                    drained = (beast.holding and not self._to_route and not self._checking
                               and not self.scheduler.due_within(
                                   now + self.settings.host_delay_s))
                    payloads = beast.read(room, drained=drained,
                                          resplit=resplit_stop is not None)
                    self._to_route.extend(payloads)
                    routed_s += self._route_read(route_stop)
                    room = self._ram_room()
                    if (resplit_stop is not None and beast.resplitting and room > 0
                            and time.perf_counter() < resplit_stop):
                        continue  # QF is being placed again, a step per read
                    if not payloads or room <= 0 or not beast.holding:
                        break
            finally:
                if stop is not None and resplit_stop is not None:
                    self._placing.spent()
        if budget_s is not None and route_stop is not None:
            self._routing.spent(routed_s)
        self._submit_checks()

    def _route_slice(self, budget_s: float | None, starving: bool) -> float | None:
        """Until when (a perf_counter time) this feed may route URLs read from BEAST;
        ``inf``: no limit (no ``budget_s``: a checkpoint's feed); None: not in this feed.

        With a budget, routing takes ROUTE_SHARE of the time while the scheduler holds
        enough URLs (see there), else the whole budget (still counted). With a slice
        granted, call ``self._routing.spent(seconds routed)`` once the feed is done.
        """
        if budget_s is None:
            return float("inf")
        full = (starving or self.scheduler.queued_urls
                < self.settings.frontier_ram_urls * ROUTE_FULL_SPEED_BELOW)
        granted = self._routing.allowance(budget_s, full_speed=full)
        return None if granted is None else time.perf_counter() + granted

    def _resplit_slice(self, stop: float | None, starving: bool) -> float | None:
        """Until when (a perf_counter time) this feed's BEAST reads may place steps of a
        re-split of QF; None: none at all. Without a budget (``stop`` None) there is no
        limit.

        Placing QF's URLs again is placing, and it shares placing's pace (PLACE_SHARE).
        Unpaced, a re-split of 1.4 M URLs took 0.16-0.44 of a core for 19 s of a polite
        bench, with the fetchers short of CPU, and that stretch held the run's slowest 5 s.
        Three interleaved pairs of polite benches (75 s): slowest 5 s 1,550, 1,946, 2,108
        pages a second unpaced against 2,071, 2,124, 2,461 paced; means 2,346, 2,885,
        3,118 against 2,799, 2,858, 3,245. Paced, the re-split of 1.5 M URLs took 21 s.

        It goes at full speed while fetch slots idle for want of a ready host: the crawl
        then waits for its URLs (reading stops at the current queue until the re-split is
        done). With a budget granted, call ``self._placing.spent()`` once the reads are
        done."""
        assert self.beast is not None
        if stop is None:
            return float("inf")
        if not self.beast.resplitting:
            # A re-split that starts in this feed's reads waits for the next turn's slice.
            return None
        granted = self._placing.allowance(max(0.0, stop - time.perf_counter()),
                                          full_speed=starving)
        return None if granted is None else time.perf_counter() + granted

    def _ram_room(self) -> int:
        """URLs the scheduler's RAM may still take: what it holds, what awaits a robots
        check and what was read from BEAST but not yet routed count against it."""
        return (self.settings.frontier_ram_urls - self.scheduler.queued_urls - self._checking
                - len(self._to_route))

    def _route_read(self, stop: float | None) -> float:
        """Route URLs read from BEAST, in batches, until ``stop`` (a perf_counter time,
        checked after each batch; ``inf``: all of them; None: none); the seconds it took."""
        pending = self._to_route
        if not pending or stop is None:
            return 0.0
        started = now = time.perf_counter()
        while pending:
            for _ in range(min(ROUTE_BATCH, len(pending))):
                self._route(pending.popleft())
            now = time.perf_counter()
            if now >= stop:
                break
        return now - started

    def _submit_checks(self) -> None:
        if self._to_check:
            assert self.robots is not None
            origins, payloads = zip(*self._to_check)
            self.robots.check(list(origins), list(payloads))
            self._to_check = []

    def _take_robots_answers(self) -> None:
        robots, qr, todo = self.robots, self.qr, self.robots_todo
        assert robots is not None and qr is not None and todo is not None
        unknown: list[str] = []
        for payload, origin, entry in robots.take_checked():
            self._checking -= 1
            if entry is not None:
                self._route(payload, origin, entry)
            else:
                # The request is counted in the URL's QR generation now, so the generation
                # cannot be replayed before the answer.
                self._wait_for_robots(payload)
                unknown.append(origin)
                self._request_gens.append(qr.issue())
        if unknown:
            robots.request(unknown)
        for origin, new in robots.take_requested():
            # After a restart RobotsRequested may answer requests of the previous run.
            gen = self._request_gens.popleft() if self._request_gens else None
            if new:
                self.counters["robots_requested"] += 1
                todo.append(f"{-1 if gen is None else gen}\n{origin}".encode())
            elif gen is not None:
                qr.settle(gen)  # already requested: that request's generation answers it

    def _load_robots_work(self) -> None:
        """Bring origins whose robots.txt is to be fetched from disk into the scheduler."""
        qr, todo = self.qr, self.robots_todo
        assert qr is not None and todo is not None
        room = self.robots_ram_hosts - len(qr.working_origins())
        if room <= 0 or not len(todo):
            return
        for record in todo.read(room):
            gen, origin = record.decode().split("\n", 1)
            if qr.is_working(origin):
                qr.settle(int(gen))  # asked twice (e.g. expired rules): one fetch answers both
            else:
                self._work_on_robots(origin, int(gen))

    def _work_on_robots(self, origin: str, gen: int | None) -> None:
        """Put ``origin``'s robots.txt in its host's queue (front); DNS first if needed."""
        assert self.qr is not None
        self.qr.working(origin, gen)
        host = self._host(urls.host_of(origin))
        self.scheduler.push(host, QueuedURL(origin + "/robots.txt", 0, None, robots=True),
                            front=True)

    def _route(self, payload: bytes, origin: str | None = None,
               entry: RobotsEntry | None = None) -> None:
        """Send a URL on by its origin's robots rules: to its host's queue, dropped, into QR
        (rules coming), or to a RobotsCache check (rules not in RAM)."""
        robots, qr = self.robots, self.qr
        assert robots is not None and qr is not None
        url, depth, via, hops = decode_payload(payload)
        _, _, _, own_origin, host_name = self._authority(payload)
        if origin is None:
            origin = own_origin
            entry = robots.get(origin)
        if entry is None:
            if qr.is_working(origin):
                self._wait_for_robots(payload)
            else:
                self._to_check.append((origin, payload))
                self._checking += 1
            return
        if not robots.is_fresh(entry):
            if entry.state == UNAVAILABLE:  # its retry is under way (see _on_robots)
                self._wait_for_robots(payload, retry=True)
                return
            if not qr.is_working(origin):
                self.counters["robots_expired"] += 1
                self.robots_todo.append(f"{qr.issue()}\n{origin}".encode())  # type: ignore[union-attr]
            self._wait_for_robots(payload)
            return
        state = entry.state
        if state in (RULES, ALLOW_ALL):
            if entry.allows(url, self.settings.user_agent):
                self._push_page(url, depth, via, entry, hops, host_name)
            else:
                self._log_drop(url, depth, via, "robots_disallowed")
        elif state == UNAVAILABLE:
            self._wait_for_robots(payload, retry=True)
        elif state == GIVEN_UP:
            self._log_drop(url, depth, via, "robots_unavailable")
        elif state == REFUSED:
            self._log_drop(url, depth, via, entry.text)

    def _wait_for_robots(self, payload: bytes, *, retry: bool = False) -> None:
        """Park a URL in QR (or, while its origin's robots.txt awaits a retry, in QR-retry)."""
        waiting = self.qr_retry if retry else self.qr
        assert waiting is not None
        waiting.add(payload)
        self.counters["qr_retry_waited" if retry else "qr_waited"] += 1

    def _push_page(self, url: str, depth: int, via: str | None, entry: RobotsEntry,
                   hops: int, host_name: str) -> None:
        host = self._host(host_name)
        self._raise_host_delay(host, entry)
        self.scheduler.push(host, QueuedURL(url, depth, via, hops=hops))

    def _host(self, name: str) -> HostState:
        """The host's scheduler state, created with its PLD's budget; DNS started if new."""
        host = self.scheduler.hosts.get(name)
        if host is None:
            # Delays follow STAR alone: a scoped crawl's budget boost is not a licence to
            # hit the operator's chosen sites harder.
            host = self.scheduler.host(name, budget=self.star.budget(urls.pld(name)))
            # The previous run may have hit this host just before it stopped.
            host.due = max(host.due, self._resumed_at + host.delay_s)
        if host.ip is None and name not in self._resolving:
            self._resolving[name] = asyncio.ensure_future(self._resolve(host))
        return host

    async def _resolve(self, host: HostState) -> None:
        try:
            async with self._dns_slots:
                answer = await self.dns.resolve(host.name)
            reason = answer.error or self.policy.refusal(answer.ip or "")
            if reason is None:
                self.scheduler.set_ip(host, answer.ip)
                self.counters["hosts_resolved"] += 1
                return
            self.counters[f"hosts_failed.{reason}"] += 1
            log.info("host %s refused: %s", host.name, reason)
            self._refuse(host, reason, answer.ip)
        finally:
            self._resolving.pop(host.name, None)
            self._wake.set()

    def _refuse(self, host: HostState, reason: str, ip: str | None) -> None:
        """The host cannot be fetched: answer its robots requests with the refusal (so its
        URLs waiting in QR are dropped with ``reason``), drop its queued pages."""
        assert self.robots is not None and self.qr is not None
        for q in self.scheduler.drain(host):
            if q.robots:
                origin = urls.origin_of(q.url)
                self.robots.record_refused(origin, reason, self.settings.dns_negative_ttl_s)
                self._robots_failures.pop(origin, None)
                self.qr.answered(origin)
            else:
                self._log_drop(q.url, q.depth, q.via, reason, ip=ip)
        # Forget the host: a later URL of it resolves again (the DNS cache answers
        # negatives from memory until their TTL runs out).
        if not host.busy:
            self.scheduler.forget(host)

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch_and_submit(self, now: float) -> None:
        parts = self.queue.partitions
        by_part: list[list[FetchItem]] = [[] for _ in range(parts)]
        limit = self.settings.concurrency
        # Past the page limit nothing is sent (robots.txt included): a host released
        # unused would otherwise come straight back from next_ready.
        self._slots_idle = False
        while len(self.in_flight) < limit and not self._page_limit_reached():
            host = self.scheduler.next_ready(now)
            if host is None:
                # Politeness, not fetching, is what limits the crawl now: it needs more
                # hosts in RAM (see _frontier_short).
                self._slots_idle = True
                break
            q = self.scheduler.pop_url(host)
            if q.robots:
                item = self._new_item(q.url, host, ROBOTS, 0, None)
            else:
                self.in_flight_pages += 1
                item = self._new_item(q.url, host, PAGE, q.depth, q.via)
                item.attempts, item.hops = q.attempts, q.hops
            self.in_flight[item.item_id] = (item, host)
            # A host's items share a partition: one fetcher, one keep-alive connection.
            by_part[hash(host.name) % parts].append(item)
        size = self.settings.task_max_items
        tasks = []
        for part, items in enumerate(by_part):
            for i in range(0, len(items), size):
                tasks.append(Task(self._next_task_id, items[i:i + size], part))
                self._next_task_id += 1
        if not tasks:
            return
        # LocalTaskQueue.submit never blocks; a remote queue would be awaited by a task.
        asyncio.ensure_future(self.queue.submit(tasks))

    def _new_item(self, url: str, host: HostState, kind: str, depth: int,
                  via: str | None) -> FetchItem:
        item = FetchItem(self._next_item_id, url, host.ip or "", kind, depth, via)
        self._next_item_id += 1
        return item

    # -- results ---------------------------------------------------------------------------

    def _on_result(self, r: ItemResult, now: float, found: list[FoundURLs],
                   edges: list[FoundEdges]) -> None:
        """Apply one result; the URLs and PLD edges it found are added to ``found`` and
        ``edges``, for one URL-seen and one PLD-graph batch per collect."""
        entry = self.in_flight.pop(r.item.item_id, None)
        if entry is None:
            return  # a duplicate report of work already accounted for
        item, host = entry
        if item.kind == ROBOTS:
            self.scheduler.done(host, now, self._on_robots(r, host))
            return
        self.in_flight_pages -= 1
        self.counters["fetches"] += 1
        self.counters[f"status.{r.status}" if r.status is not None else f"error.{r.error}"] += 1
        if retryable(r.status, r.error):
            self.scheduler.done(host, now, self._back_off(r, host, now))
            return
        self.pages_done += 1 if r.status is not None else 0
        for reason, n in r.dropped.items():
            self.counters[f"links_dropped.{reason}"] += n
        if r.pld_edges is not None:
            edges.append(r.pld_edges)
        if r.found is not None and len(r.found):
            found.append(r.found)
        self.scheduler.done(host, now)

    def _back_off(self, r: ItemResult, host: HostState, now: float) -> float:
        """The host asked us to slow down or failed: retry the URL later (or give it up);
        returns the host's delay before its next request."""
        item = r.item
        delay = self.backoff.failed(host, now, r.retry_after_s)
        self.counters["backoffs"] += 1
        attempts = item.attempts + 1
        if self.backoff.may_retry(attempts):
            self.counters["retries"] += 1
            self.scheduler.push(host, QueuedURL(item.url, item.depth, item.via,
                                                attempts=attempts, hops=item.hops), front=True)
        else:
            self._log_drop(item.url, item.depth, item.via, "retries_exhausted", ip=host.ip)
        if host.failures > 1:
            log.info("host %s backs off %.1f s after %d failures (last: %s)", host.name,
                     delay, host.failures, r.status or r.error)
        return delay

    def _on_robots(self, r: ItemResult, host: HostState) -> float | None:
        """Record a robots.txt answer; returns the host's next delay if not the usual one."""
        assert self.robots is not None and self.qr is not None
        origin = urls.origin_of(r.item.url)
        # An answer cut short (timeout, reset) is a failed fetch, not a short robots.txt:
        # its missing lines could disallow what the part received allows.
        status = r.status if r.error is None else None
        entry = self.robots.record(origin, status, r.robots_text,
                                   failures=self._robots_failures.pop(origin, 0))
        self.qr.answered(origin)
        self.counters["robots_fetches"] += 1
        self.counters[f"robots.{entry.state}"] += 1
        if entry.state == UNAVAILABLE:
            # Retried when the entry expires; the URLs wait in QR meanwhile. Not counted in
            # a QR generation: a retry minutes away must not hold other URLs back.
            self._robots_failures[origin] = entry.attempts
            self._work_on_robots(origin, None)
            return max(host.delay_s, entry.expires_at - time.time())
        self._raise_host_delay(host, entry)
        return None

    def _raise_host_delay(self, host: HostState, entry: RobotsEntry) -> bool:
        """Honour a robots Crawl-delay longer than the host delay (capped). True if raised."""
        delay = entry.crawl_delay(self.settings.user_agent)
        if delay is None:
            return False
        capped = min(delay, self.settings.crawl_delay_max_s)
        if capped <= host.delay_s:
            return False
        host.delay_s = capped
        # Learnt from the restored robots cache: the previous run may have hit this host
        # just before it stopped.
        host.due = max(host.due, self._resumed_at + capped)
        return True

    def _log_drop(self, url: str, depth: int, via: str | None, reason: str, *,
                  ip: str | None = None) -> None:
        self.counters[f"dropped.{reason}"] += 1
        self.crawl_log.append_drop(time.time(), url, depth, via, reason, ip)

    # -- checkpoint ------------------------------------------------------------------------

    def checkpoint(self, laps: _Laps | None = None) -> Path:
        """Write a checkpoint of everything the manager knows; ``laps`` gets the time
        each part took."""
        return self._commit_checkpoint(laps or _Laps())()

    def _commit_stores(self, laps: _Laps) -> CheckpointMeta:
        """Commit the crawl log and every store; return the checkpoint's state naming
        their commits."""
        for sync in self.durables:
            sync()
        self.crawl_log.sync()
        laps.lap("logs")
        seen, plds, beast, robots, qr, todo = (self.seen, self.plds, self.beast, self.robots,
                                               self.qr, self.robots_todo)
        assert seen is not None and plds is not None and beast is not None
        assert robots is not None and qr is not None and todo is not None
        # Answers already merged go to their next stage first, so that the commits and the
        # RAM rows below describe one moment. URL-seen's new URLs need not: its commit
        # notes how far their placing got (DrumURLSeen.take_new). Nor do the URLs read
        # from BEAST and not yet routed: they are saved with the RAM rows (routing up to
        # half of RAM here held the checkpoint's turn for a quarter of a second).
        self._submit_checks()
        robots.flush()
        self._take_robots_answers()
        robots.flush()
        self._take_robots_answers()
        assert self._checking == 0, self._checking
        laps.lap("answers")
        urlseen_manifest = seen.commit()
        laps.lap("urlseen")
        pld_manifest = self._counting_edges(plds.commit)  # moves every round's new edges
        laps.lap("plds")
        return CheckpointMeta(
            urlseen_manifest=urlseen_manifest,
            pld_manifest=pld_manifest,
            frontier={
                "beast": beast.commit(),
                "robots": robots.commit(),
                "qr": qr.commit(),
                "qr_retry": self.qr_retry.commit(),  # type: ignore[union-attr]
                "robots_todo": todo.commit(),
                "robots_working": qr.working_origins(),
                "robots_failures": self._robots_failures,
            },
            seeds=self.seeds,
            pages_done=self.pages_done,
            next_item_id=self._next_item_id,
            counters=dict(self.counters),
            time=time.time(),
        )

    def _commit_checkpoint(self, laps: _Laps) -> Callable[[], Path]:
        """Commit every store and take what a checkpoint holds of RAM; return the call
        that writes the checkpoint's files and makes it live (it touches nothing the
        crawl changes: it may run in another thread).

        The commits' fsyncs are deferred (store.durable.deferring_fsyncs): the call syncs
        their filesystems before it writes the checkpoint, which only then goes live.
        Made in the loop, they held the checkpoint's turn for 0-0.15 s (the crawl log
        alone) behind the WARC writes of the fetchers.
        """
        with deferring_fsyncs() as pending:
            meta = self._commit_stores(laps)
        laps.lap("frontier")
        # The objects, not rows: neither a queued URL nor an item in flight changes once
        # made. Rows of 72,000 URLs in RAM took 49 ms to make here (the polite bench).
        flying = [item for item, _ in self.in_flight.values()]
        queued = list(self.scheduler.iter_queued())
        unrouted = list(self._to_route)
        save_star = self.star.saver()
        self._last_checkpoint = self.clock()
        laps.lap("ram")

        def write() -> Path:
            pending.sync()
            laps.lap("sync")
            rows = _ram_rows(flying, queued, unrouted)
            path = self.checkpoints.write(meta, _napping(rows, CHECKPOINT_ROWS_AWAKE,
                                                         CHECKPOINT_WRITER_NAP_S),
                                          [save_star])
            laps.lap("write")
            if laps.total() >= 1.0:  # the fetchers may have run dry: say where it went
                log.info("checkpoint took %.2f s: %s", laps.total(), laps)
            return path

        return write

    def stats(self) -> ManagerStats:
        ram = self.scheduler.queued_urls + len(self._to_route)
        disk = self._checking + sum(len(x) for x in (self.beast, self.qr, self.qr_retry)
                                    if x is not None)
        return ManagerStats(
            pages_done=self.pages_done,
            in_flight=len(self.in_flight),
            queued=ram + disk,
            queued_ram=ram,
            hosts=len(self.scheduler.hosts),
            seen=len(self.seen) if self.seen is not None else 0,
            resolving=len(self._resolving),
            elapsed_s=self.clock() - self._started,
            counters=dict(self.counters),
        )


def _presync_done(future: asyncio.Future[None]) -> None:
    """Log a failed presync (the checkpoint's own fsyncs do not depend on it)."""
    if not future.cancelled() and future.exception() is not None:
        log.warning("writing out the state directory before a checkpoint failed: %s",
                    future.exception())


def _ram_rows(flying: list[FetchItem], queued: list[QueuedURL],
              unrouted: list[bytes]) -> Iterator[tuple]:
    """Checkpoint rows (checkpoint.read_queue) of the pages in flight, then of the URLs
    queued in RAM, then of those read from BEAST and not yet routed (payloads):
    [url, depth, via], hops appended if any."""
    # Unreported pages first: they were next in line.
    for item in flying:
        if item.kind == PAGE:
            yield (item.url, item.depth, item.via, item.hops)[:4 if item.hops else 3]
    for q in queued:
        if not q.robots:
            yield (q.url, q.depth, q.via, q.hops)[:4 if q.hops else 3]
    for payload in unrouted:
        url, depth, via, hops = decode_payload(payload)
        yield (url, depth, via, hops)[:4 if hops else 3]


def _napping(rows: Iterable[_T], awake: int, nap_s: float, *,
             sleep: Callable[[float], None] = time.sleep) -> Iterator[_T]:
    """``rows``, the thread asleep ``nap_s`` after every ``awake`` of them (see
    CHECKPOINT_ROWS_AWAKE)."""
    it = iter(rows)
    while chunk := list(islice(it, awake)):
        yield from chunk
        if len(chunk) == awake:
            sleep(nap_s)


class _Laps:
    """Wall-clock time of the consecutive parts of a job, named as each one ends."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self._last = perf_counter()

    def lap(self, name: str) -> None:
        now = perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self._last
        self._last = now

    def total(self) -> float:
        return sum(self.parts.values())

    def __str__(self) -> str:
        return ", ".join(f"{name} {s:.2f} s" for name, s in self.parts.items())
