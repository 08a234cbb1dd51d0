"""Dispatch and results: hosts the politeness scheduler finds ready send their next URL to
the fetchers, in tasks by partition; each result comes back to its host, and pages that
failed in a way worth retrying go back to it with the host backing off.

The dispatch latency is measured here: for a host whose next URL waits for a fetch to
complete, the time from the moment its delay has passed (the fetch's end at the fetcher,
plus the delay; with host_connections > 1, from its end or the next start the delay
allows, whichever is later) to the next request's start at the fetcher. Both ends are the
fetchers' wall clocks (one machine). It is what the server sees beyond the politeness
delay: reporting, the manager's turn, the hand-off. Only measured with ``ip_delay_s`` 0,
where nothing but the host's own delay holds its next request back. For a piped host
(frontier.politeness: its requests queue at the fetchers behind one another) it is the
fetcher's hand-off from one request's end to the start of the next queued behind it
(ItemResult.lane_free_at).
"""

from __future__ import annotations

import asyncio
import logging
import random
from array import array
from collections import Counter
from collections.abc import Callable

from drumbeat.frontier.backoff import Backoff, retryable
from drumbeat.frontier.politeness import HostState, PolitenessScheduler, QueuedURL
from drumbeat.frontier.scope import BLOCKLIST, Scope
from drumbeat.manager.controls import BLOCKED, Controls
from drumbeat.manager.gate import RobotsGate
from drumbeat.manager.state import LoopState
from drumbeat.manager.stores import Drops
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

log = logging.getLogger("drumbeat.manager")

# A host whose delay is this short has its results reported at once (FetchItem.report_now):
# the fetcher processes' batching (up to queue.process.RESULT_DELAY_S) would be a large
# share of such a delay, and nothing next to a longer one. Where the delay is shorter
# than the pages' archiving and parsing (Dispatcher.held_s), the requests' ends are also
# announced before that work (FetchItem.announce_end, on_fetch_ended); a longer one hides
# that work already, and a notice would only cost CPU.
REPORT_NOW_BELOW_S = 0.25
# A host whose delay is at most this is sent its next URL the moment its previous fetch's
# end is known (its notice, or its result), with the rest of the delay to wait at the
# fetcher (FetchItem.wait_s, after_s): the hand-off then overlaps the delay. A fetch slot
# held that long costs nothing next to a broad crawl's delays of a second or more, which
# keep the plain rule.
EARLY_BELOW_S = 0.05
# The weight of each new result in Dispatcher.held_s.
HELD_WEIGHT = 0.05
# Dispatch latency samples kept (a uniform sample of them all once full: RAM stays bounded).
LATENCY_SAMPLES = 65_536


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        queue: ManagerQueue,
        scheduler: PolitenessScheduler,
        gate: RobotsGate,
        state: LoopState,
        drops: Drops,
        counters: Counter[str],
        controls: Controls | None = None,
        scope: Scope | None = None,
    ) -> None:
        """``controls``: the operator's pause, speed and blocks (none by default);
        ``scope``: the scope rules that act at dispatch and count results (none)."""
        s = self.settings = settings
        self.queue = queue
        self.scheduler = scheduler
        if not queue.pins_partitions:
            # Fetchers take tasks as they come: a lane's items could meet on none.
            scheduler.pipeline = 0
        self.state = state
        self.counters = counters
        self._on_robots = gate.on_robots
        self._refuse = gate.refuse
        self._drop = drops.drop
        self._note_failure = drops.note_failure
        self.controls = controls or Controls()
        # The blocklist and the caps (frontier.scope); None without them.
        self.scope = scope if scope is not None and scope.at_dispatch else None
        self.backoff = Backoff(
            max_s=s.backoff_max_s, forgive_s=s.backoff_forgive_s, max_attempts=s.fetch_max_attempts
        )
        self.pages_done = 0
        self.limit = s.concurrency
        self.in_flight: dict[int, tuple[FetchItem, HostState]] = {}
        # Items in flight whose notice freed their host (on_fetch_ended).
        self._ended: set[int] = set()
        # How long the fetchers hold a result reported at once (ItemResult.held_s: the
        # page's archiving and parsing), a moving average.
        self.held_s = 0.0
        self.in_flight_pages = 0
        self.next_item_id = 0
        self._next_task_id = 0
        self._submits: set[asyncio.Future[None]] = set()  # task submits under way
        # A cluster's fetchers pace IPs cluster-wide by the delay each item carries.
        self.stamp_ip_delays = False
        # Fetchers announce requests' ends where asked (FetchItem.announce_end); a
        # cluster's report them with their results, and asks for none.
        self.announce_ends = True
        # A focused crawl's pages' scores and links, to the crawl order (None: no focus).
        self.on_focus: Callable[[FoundURLs, float], None] | None = None
        # Dispatch latency (module docstring): each waiting host holds when its next
        # request could leave (HostState.free_at), so what waits is bounded by RAM's hosts.
        self._measure = s.ip_delay_s == 0
        self.latency_s = array("d")
        self.latency_seen = 0
        self._rng = random.Random(0)
        # With revisits (manager.revisiting): called with each page's item as it leaves,
        # to give a revisit its validators. None: no revisits, no call.
        self.on_page: Callable[[FetchItem], None] | None = None

    @property
    def limit(self) -> int:
        """Fetches in flight at most: settings.concurrency, or in a cluster what its fleet
        of fetchers calls for (queue.redis.in_flight_budget, set by the manager's face).
        The loop's state holds it (LoopState.fetch_slots): admission reads it there."""
        return self.state.fetch_slots

    @limit.setter
    def limit(self, slots: int) -> None:
        self.state.fetch_slots = slots

    def busy_hosts(self) -> int:
        """Hosts with a request in flight (each counted once, whatever its connections)."""
        return len({id(host) for _, host in self.in_flight.values()})

    def page_limit_reached(self) -> bool:
        m = self.settings.max_pages
        return m is not None and self.pages_done + self.in_flight_pages >= m

    def dispatch(self, now: float) -> None:
        """Send the next URL of each ready host to the fetchers, up to :attr:`limit`."""
        parts = self.queue.partitions
        by_part: list[list[FetchItem]] = [[] for _ in range(parts)]
        pinned: list[list[FetchItem]] | None = None  # piped hosts' items, by partition
        limit = self.limit
        controls = self.controls
        if controls.paused:
            return  # in-flight fetches finish; nothing new leaves
        speed = controls.speed
        allowed = -1 if speed is None else speed.available(now)
        sent = 0
        blocking = controls.blocking
        scope = self.scope
        on_page = self.on_page
        early, wait_s = self.scheduler.early_s > 0, self.scheduler.wait_s
        if scope is not None:
            scope.tick()
        # Past the page limit nothing is sent (robots.txt included): a host released
        # unused would otherwise come straight back from next_ready.
        # Hosts are piped (frontier.politeness) only while the crawl lacks ready hosts
        # for its fetch slots, as the last dispatch found: where they are plenty (a broad
        # crawl without delays), a request queued behind another holds a slot idle.
        self.scheduler.piping = self.state.slots_idle
        self.state.slots_idle = False
        while len(self.in_flight) < limit and not self.page_limit_reached() and sent != allowed:
            host = self.scheduler.next_ready(now)
            if host is None:
                # Politeness, not fetching, is what limits the crawl now: it needs more
                # hosts in RAM (see Admission.frontier_short).
                self.state.slots_idle = True
                break
            q = self.scheduler.pop_url(host)
            if blocking and self._blocked(host, q):
                continue
            if scope is not None and self._out_of_scope(scope, host, q):
                continue
            sent += 1
            if q.robots:
                item = self._new_item(q.url, host, ROBOTS, 0, None)
            else:
                self.in_flight_pages += 1
                item = self._new_item(q.url, host, PAGE, q.depth, q.via)
                item.attempts, item.hops = q.attempts, q.hops
                if on_page is not None:
                    on_page(item)
            if host.queue and host.delay_s < REPORT_NOW_BELOW_S:
                item.report_now = True
                # A delay shorter than a page's archiving and parsing would not hide
                # them: the fetcher announces the request's end (on_fetch_ended).
                item.announce_end = self.announce_ends and host.delay_s <= self.held_s
            if early and (wait := wait_s(host, now)) > 0:
                item.wait_s = wait
                item.after_key, item.after_s = host.last_key, host.due - host.last_end
            if self.stamp_ip_delays and host.ip:
                item.ip_delay_s = self.scheduler.ip_delay(host.ip)
            self.in_flight[item.item_id] = (item, host)
            lanes = host.lanes
            if lanes is None:
                # A host's items share a partition: one fetcher, one keep-alive
                # connection; with host_connections > 1, its k-th request in flight goes
                # to the next partition k (fetchers share its parsing, each with its
                # keep-alive connections).
                by_part[(hash(host.name) + host.in_flight - 1) % parts].append(item)
                continue
            # A piped host: lane k's items go to partition k past the host's, pinned to
            # that fetcher, which fetches them one after another.
            lane = item.lane = host.lane
            item.lane_key = hash((host.name, lane)) or 1
            if q.robots:
                self.scheduler.hold(host)  # its rules may give the host a delay
            if pinned is None:
                pinned = [[] for _ in range(parts)]
            pinned[(hash(host.name) + lane) % parts].append(item)
        if speed is not None:
            speed.take(sent)
        size = self.settings.task_max_items
        tasks = []
        for part, items in enumerate(by_part):
            for i in range(0, len(items), size):
                tasks.append(Task(self._next_task_id, items[i : i + size], part))
                self._next_task_id += 1
        for part, items in enumerate(pinned or ()):
            for i in range(0, len(items), size):
                tasks.append(Task(self._next_task_id, items[i : i + size], part, pinned=True))
                self._next_task_id += 1
        if not tasks:
            return
        # LocalTaskQueue.submit never blocks; a remote queue would be awaited by a task,
        # held here until done (the loop keeps only weak references to tasks).
        submit = asyncio.ensure_future(self.queue.submit(tasks))
        self._submits.add(submit)
        submit.add_done_callback(self._submits.discard)

    def _blocked(self, host: HostState, q: QueuedURL) -> bool:
        """Drop ``q`` (returned by next_ready and pop_url) if the operator blocked it, and
        free ``host``: a blocked host's queue goes with it (its robots.txt requests are
        answered ``blocked``, so the URLs waiting for them in QR are dropped too)."""
        blocks = self.controls.blocks
        if blocks.host_blocked(host.name):
            self.scheduler.push(host, q, front=True)
            self.scheduler.release(host)
            self._refuse(host, BLOCKED, host.ip)
            return True
        if q.robots or not blocks.url_blocked(q.url):
            return False
        self._drop(q.url, q.depth, q.via, BLOCKED, ip=host.ip)
        self.scheduler.release(host)
        return True

    def _out_of_scope(self, scope: Scope, host: HostState, q: QueuedURL) -> bool:
        """Drop the page ``q`` (returned by next_ready and pop_url) if the blocklist or a
        cap says so, and free ``host`` (its other URLs come to the same test). A host
        the blocklist names is refused before its robots.txt is fetched, as a blocked
        one is (``_blocked``); the refusal lasts ``dns_negative_ttl_s``."""
        if q.robots:
            if not scope.host_blocklisted(host.name):
                return False
            self.scheduler.push(host, q, front=True)
            self.scheduler.release(host)
            self._refuse(host, BLOCKLIST, host.ip)
            return True
        reason = scope.dispatch_reason(host.name, q.url)
        if reason is None:
            return False
        self._drop(q.url, q.depth, q.via, reason, ip=host.ip)
        self.scheduler.release(host)
        return True

    def _new_item(
        self, url: str, host: HostState, kind: str, depth: int, via: str | None
    ) -> FetchItem:
        item = FetchItem(self.next_item_id, url, host.ip or "", kind, depth, via)
        self.next_item_id += 1
        return item

    def on_result(
        self, r: ItemResult, now: float, found: list[FoundURLs], edges: list[FoundEdges]
    ) -> None:
        """Apply one result; the URLs and PLD edges it found are added to ``found`` and
        ``edges``, for one URL-seen and one PLD-graph batch per collect."""
        entry = self.in_flight.pop(r.item.item_id, None)
        if entry is None:
            return  # a duplicate report of work already accounted for
        item, host = entry
        # The result frees the host, unless its notice did already (on_fetch_ended):
        # later requests to the host may be under way, and its politeness is done with
        # this one.
        free = not self._ended or item.item_id not in self._ended
        if free:
            ended = self._fetch_end(r, host, now)
        else:
            self._ended.remove(item.item_id)
            ended = now - r.held_s
        if item.report_now and not item.announce_end:
            # Reported at once: held_s is the page's archiving and parsing. (The result of
            # an announced end may wait for others to be archived with: fetcher.GATHER_S.)
            self.held_s += HELD_WEIGHT * (r.held_s - self.held_s)
        if item.lane >= 0:
            self._sample_hand_off(r)
        if item.kind == ROBOTS:
            if item.lane >= 0:
                self.scheduler.unhold(host)
            self.scheduler.done(host, ended, self._on_robots(r, host), item.lane)
            if r.found is not None and len(r.found):
                found.append(r.found)  # the sitemaps it names (Settings.sitemaps)
            for reason, n in r.dropped.items():
                self.counters[f"links_dropped.{reason}"] += n
            self._note_free(r, host, now)
            return
        self.in_flight_pages -= 1
        self.counters["fetches"] += 1
        self.counters["bytes_fetched"] += r.body_bytes
        self.counters[f"status.{r.status}" if r.status is not None else f"error.{r.error}"] += 1
        if retryable(r.status, r.error):
            delay = self._back_off(r, host, now)
            if free:
                self.scheduler.done(host, ended, delay, item.lane)
                self._note_free(r, host, now)
            return
        self.pages_done += 1 if r.status is not None else 0
        if self.scope is not None and r.status is not None:
            self.scope.count(host.name, r.body_bytes)
        for reason, n in r.dropped.items():
            self.counters[f"links_dropped.{reason}"] += n
        if r.pld_edges is not None:
            edges.append(r.pld_edges)
        if r.found is not None and len(r.found):
            found.append(r.found)
            if r.focus is not None and self.on_focus is not None:
                self.on_focus(r.found, r.focus)
        self.backoff.succeeded(host)
        if free:
            self.scheduler.done(host, ended, lane=item.lane)
            self._note_free(r, host, now)

    def on_fetch_ended(self, r: ItemResult, now: float) -> None:
        """A fetcher's notice that ``r``'s request has ended (ItemResult.fetch_ended):
        its host is free now, as its result would free it, and the result that follows
        does the rest."""
        entry = self.in_flight.get(r.item.item_id)
        if entry is None or r.item.item_id in self._ended:
            return
        item, host = entry
        if item.kind == ROBOTS:
            return  # its rules, which set the host's delays, come with its result
        self._ended.add(item.item_id)
        self.scheduler.done(host, self._fetch_end(r, host, now), lane=item.lane)
        self._note_free(r, host, now)

    def _fetch_end(self, r: ItemResult, host: HostState, now: float) -> float:
        """Take the end of ``r``'s fetch as its host's last (its notice's or its
        result's, whichever frees the host): the host's delays run from there, not from
        when word of it got here. Returns it, after the dispatch latency's sample."""
        if self._measure:
            self._sample_latency(r, host, now)
        ended = now - r.held_s
        host.last_key, host.last_end = r.end_key, ended
        return ended

    def _sample_latency(self, r: ItemResult, host: HostState, now: float) -> None:
        """A sample of the dispatch latency, if ``r``'s request was one its host's delay
        held back (see the module docstring)."""
        if host.free_at < 0 or r.item.item_id < host.free_item or r.log is None:
            return
        free_at, host.free_at = host.free_at, -1.0
        started = r.log.get("time")
        if isinstance(started, float):
            self._add_latency(started - free_at)

    def _sample_hand_off(self, r: ItemResult) -> None:
        """A sample of the dispatch latency of ``r``'s item, if it was queued behind
        another on its lane at its fetcher (``lane_free_at``, else -1: the lane was
        empty when it came): from that one's end to its start."""
        started = r.log.get("time") if r.log is not None else None
        if self._measure and r.lane_free_at >= 0 and isinstance(started, float):
            self._add_latency(max(0.0, started - r.lane_free_at))

    def _add_latency(self, sample: float) -> None:
        self.latency_seen += 1
        if len(self.latency_s) < LATENCY_SAMPLES:
            self.latency_s.append(sample)
        else:  # reservoir sampling: every sample so far equally likely kept
            k = self._rng.randrange(self.latency_seen)
            if k < LATENCY_SAMPLES:
                self.latency_s[k] = sample

    def _note_free(self, r: ItemResult, host: HostState, now: float) -> None:
        """``host``'s next URL waits for its delay to pass after ``r``: note when it may
        leave, to be compared with when it does (_sample_latency)."""
        if not self._measure or not host.queue or r.log is None or host.lanes is not None:
            return  # (a piped host's next request is sampled at the fetcher)
        started, ms = r.log.get("time"), r.log.get("fetch_ms")
        if not isinstance(started, float) or not isinstance(ms, float | int):
            return
        # The first wait counts (a later completion, with several connections, would
        # overwrite it before the request it waits for comes back).
        if host.free_at < 0:
            # The host's due time counts from the fetch's end as the manager places it
            # (on_result), not from now: the report's time held at the fetcher and on
            # its way would count as latency otherwise.
            host.free_at = started + ms / 1000 + max(0.0, host.due - (now - r.held_s))
            host.free_item = self.next_item_id

    def latency_summary(self) -> dict[str, float | int] | None:
        """Dispatch latency in milliseconds: samples, mean and percentiles; None when
        nothing was measured."""
        if not self.latency_s:
            return None
        ms = sorted(1000 * x for x in self.latency_s)

        def pct(p: float) -> float:
            return round(ms[min(len(ms) - 1, int(p * len(ms)))], 3)

        return {
            "samples": self.latency_seen,
            "mean_ms": round(sum(ms) / len(ms), 3),
            "p50_ms": pct(0.5),
            "p90_ms": pct(0.9),
            "p99_ms": pct(0.99),
            "max_ms": round(ms[-1], 3),
        }

    def _back_off(self, r: ItemResult, host: HostState, now: float) -> float:
        """The host asked us to slow down or failed: retry the URL after the host's other
        URLs (or give it up); returns the host's delay before its next request."""
        item = r.item
        delay = self.backoff.failed(host, now, r.retry_after_s)
        host.failure = str(r.status or r.error)
        self._note_failure(item.url, host.failure)
        self.counters["backoffs"] += 1
        attempts = item.attempts + 1
        if self.backoff.may_retry(attempts):
            self.counters["retries"] += 1
            self.scheduler.push(
                host, QueuedURL(item.url, item.depth, item.via, attempts=attempts, hops=item.hops)
            )
        else:
            self._drop(item.url, item.depth, item.via, "retries_exhausted", ip=host.ip)
        if host.failures > 1:
            log.info(
                "host %s backs off %.1f s after %d failures (last: %s)",
                host.name,
                delay,
                host.failures,
                r.status or r.error,
            )
        return delay
