"""The crawl manager: owns all crawl state and decides what is fetched when.

Per URL: normalize -> scope -> URL-seen (new only) -> host queue -> DNS (once per host,
guarded) -> robots.txt (once per origin, before any page of it) -> politeness (host and
IP delays) -> a FetchItem in a Task for the fetchers. Results come back through the task
queue; their links take the same path.

Everything the manager knows is saved by periodic checkpoints (see ``checkpoint.py``). Items
handed to fetchers but not reported by checkpoint time are saved as queued, so a crash loses
no URL; pages fetched after the last checkpoint may be fetched again after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from drumbeat import urls
from drumbeat.checkpoint import CheckpointMeta, Checkpoints
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.frontier.pldgraph import PLDIndegree
from drumbeat.frontier.politeness import HostState, PolitenessScheduler, QueuedURL
from drumbeat.frontier.robots import GIVEN_UP, UNAVAILABLE, RobotsCache, RobotsEntry
from drumbeat.frontier.urlseen import DrumURLSeen, decode_payload, encode_payloads
from drumbeat.queue.base import PAGE, ROBOTS, FetchItem, ItemResult, Task, TaskQueue
from drumbeat.settings import Settings
from drumbeat.store.crawllog import CrawlLog

log = logging.getLogger("drumbeat.manager")

DNS_CONCURRENCY = 64
MAX_SKIPS_PER_HOST_VISIT = 1000  # robots-disallowed URLs dropped in one go before yielding


@dataclass(frozen=True, slots=True)
class ManagerStats:
    pages_done: int
    in_flight: int
    queued: int
    hosts: int
    seen: int
    resolving: int
    elapsed_s: float
    counters: dict[str, int]


class Manager:
    def __init__(
        self,
        settings: Settings,
        queue: TaskQueue,
        crawl_log: CrawlLog,
        *,
        durables: Iterable[Callable[[], None]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert settings.state_dir is not None
        self.settings = settings
        self.queue = queue
        self.crawl_log = crawl_log
        self.durables = list(durables)  # flushed + fsynced before each checkpoint (WARC, logs)
        self.clock = clock
        self.policy = AddressPolicy(
            allow_loopback=settings.allow_loopback, allow_private=settings.allow_private
        )
        self.dns = DnsCache(
            nameserver=settings.dns_server,
            timeout_s=settings.dns_timeout_s,
            negative_ttl_s=settings.dns_negative_ttl_s,
        )
        self.robots = RobotsCache(
            user_agent=settings.user_agent,
            expiry_s=settings.robots_expiry_s,
            retry_s=settings.robots_retry_s,
            max_attempts=settings.robots_max_attempts,
        )
        self.seen: DrumURLSeen | None = None  # opened by restore()
        self.plds: PLDIndegree | None = None  # opened by restore()
        self._last_seen_flush = self.clock()
        self.scheduler = PolitenessScheduler(
            host_delay_s=settings.host_delay_s, ip_delay_s=settings.ip_delay_s
        )
        self.checkpoints = Checkpoints(settings.state_dir)
        self.counters: Counter[str] = Counter()
        self.seeds: list[str] = []
        self.seed_hosts: frozenset[str] = frozenset()
        self.seed_plds: frozenset[str] = frozenset()
        self.pages_done = 0
        self.in_flight: dict[int, tuple[FetchItem, HostState]] = {}
        self.in_flight_pages = 0
        self._next_item_id = 0
        self._next_task_id = 0
        self._resolving: dict[str, asyncio.Task[None]] = {}
        self._dns_slots = asyncio.Semaphore(DNS_CONCURRENCY)
        self._started = self.clock()
        self._last_checkpoint = self._started
        self._resumed_at = float("-inf")  # set by restore()
        self._last_sweep = self._started
        self.stop_reason: str | None = None
        self._force_stop = False
        self._wake = asyncio.Event()
        self._collector: asyncio.Future[list[ItemResult]] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def _open_seen(self, manifest: dict | None) -> DrumURLSeen:
        assert self.settings.state_dir is not None
        return DrumURLSeen(self.settings.state_dir / "urlseen",
                           ram_bytes=self.settings.urlseen_ram_bytes, manifest=manifest)

    def _open_plds(self, manifest: dict | None) -> PLDIndegree:
        assert self.settings.state_dir is not None
        return PLDIndegree(self.settings.state_dir / "pldgraph",
                           ram_bytes=self.settings.pld_ram_bytes, manifest=manifest)

    def restore(self) -> bool:
        """Load the live checkpoint if there is one. Returns True when resuming."""
        path = self.checkpoints.current()
        if path is None:
            self.seen = self._open_seen(None)
            self.plds = self._open_plds(None)
            return False
        meta = self.checkpoints.read_meta(path)
        self.seen = self._open_seen(meta.urlseen_manifest)
        self.plds = self._open_plds(meta.pld_manifest)
        self.robots.load(path)
        self.counters.update(meta.counters)
        self.pages_done = meta.pages_done
        self._next_item_id = meta.next_item_id
        self._set_seeds(meta.seeds)
        # The previous run may have hit any host just before it stopped.
        self._resumed_at = self.clock()
        self.scheduler.start_no_earlier_than(
            self._resumed_at + max(self.settings.host_delay_s, self.settings.ip_delay_s)
        )
        for url, depth, via in self.checkpoints.read_queue(path):
            self._enqueue(url, depth, via)
        log.info("resumed from %s: %d queued, %d seen, %d pages done",
                 path, self.scheduler.queued_urls, len(self.seen), self.pages_done)
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
                self._take_new_urls(now)
                self._dispatch_and_submit(now)
                if self._finished():
                    self.request_stop("max_pages" if self._page_limit_reached() else "done")
                    break
                await self._collect(self._wait_time(now, deadline))
                if now - self._last_checkpoint >= s.checkpoint_interval_s:
                    self.checkpoint()
                if now - self._last_sweep >= 10.0:
                    self.scheduler.sweep(now)
                    self._last_sweep = now
            await self._drain_in_flight()
        finally:
            for t in self._resolving.values():
                t.cancel()
            if self._collector is not None:
                # Results it may still bring are lost to this run, but their items are
                # still in flight and so saved as queued: they are fetched again later.
                self._collector.cancel()
        self.checkpoint()
        return self.stop_reason or "done"

    async def _drain_in_flight(self) -> None:
        """After a stop: let in-flight fetches finish for a short grace period."""
        end = self.clock() + min(self.settings.total_timeout_s, 10.0)
        while self.in_flight and self.clock() < end and not self._force_stop:
            await self._collect(min(0.2, max(0.0, end - self.clock())))

    def _finished(self) -> bool:
        if self.in_flight:
            return False
        if self._page_limit_reached():
            return True
        if self._resolving or (self.seen is not None and self.seen.pending):
            return False
        return self.scheduler.queued_urls == 0

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
        if not self._collector.done():
            return
        results, self._collector = self._collector.result(), None
        now = self.clock()
        for r in results:
            self._on_result(r, now)

    # -- admission -------------------------------------------------------------------------

    def _admit(self, candidates: list[str], depth: int, via: str | None) -> int:
        """Send in-scope URLs to URL-seen; new ones reach the frontier via _take_new_urls.

        Returns the number of URLs submitted.
        """
        scope = self.settings.scope
        if scope != "any":
            kept = []
            for u in candidates:
                if urls.in_scope(urls.host_of(u), scope, self.seed_hosts, self.seed_plds):
                    kept.append(u)
                else:
                    self.counters["links_out_of_scope"] += 1
            candidates = kept
        assert self.seen is not None
        n = len(candidates)
        self.seen.submit([urls.fingerprint(u) for u in candidates],
                         encode_payloads(candidates, [depth] * n, [via] * n))
        return len(candidates)

    def _take_new_urls(self, now: float) -> None:
        """Move URLs that URL-seen found new into the frontier, merging first if it is due.

        DRUM merges by itself when its buffers fill (the cheap, sequential case IRLbot
        designs for). A merge of a part-filled buffer costs a pass over every bucket, so
        it is forced only when the frontier runs short of URLs, at most once per
        ``urlseen_flush_interval_s``: small crawls and crawl ends then do not wait for
        full buffers, and large crawls never pay for it.
        """
        seen = self.seen
        assert seen is not None
        if (seen.pending and self.scheduler.queued_urls < self.settings.concurrency
                and now - self._last_seen_flush >= self.settings.urlseen_flush_interval_s):
            seen.flush()
            self._last_seen_flush = now
        assert self.plds is not None
        self.counters["pld_edges_new"] += self.plds.pump()
        admitted = 0
        for payload in seen.take_new():
            self._enqueue(*decode_payload(payload))
            admitted += 1
        self.counters["urls_admitted"] += admitted

    def _enqueue(self, url: str, depth: int, via: str | None) -> None:
        name = urls.host_of(url)
        host = self.scheduler.host(name)
        self.scheduler.push(host, QueuedURL(url, depth, via))
        if host.ip is None and name not in self._resolving:
            self._resolving[name] = asyncio.ensure_future(self._resolve(host))

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
            for q in self.scheduler.drain(host):
                self._log_drop(q, reason, ip=answer.ip)
            # Forget the host: a later URL of it resolves again (the DNS cache answers
            # negatives from memory until their TTL runs out).
            if not host.busy and self.scheduler.hosts.get(host.name) is host:
                del self.scheduler.hosts[host.name]
        finally:
            self._resolving.pop(host.name, None)
            self._wake.set()

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch_and_submit(self, now: float) -> None:
        items: list[FetchItem] = []
        limit = self.settings.concurrency
        # Past the page limit nothing is sent (robots.txt included): a host released
        # unused would otherwise come straight back from next_ready.
        while len(self.in_flight) < limit and not self._page_limit_reached():
            host = self.scheduler.next_ready(now)
            if host is None:
                break
            item = self._choose(host, now)
            if item is not None:
                self.in_flight[item.item_id] = (item, host)
                items.append(item)
        if not items:
            return
        size = self.settings.task_max_items
        tasks = []
        for i in range(0, len(items), size):
            tasks.append(Task(self._next_task_id, items[i:i + size]))
            self._next_task_id += 1
        # LocalTaskQueue.submit never blocks; a remote queue would be awaited by a task.
        asyncio.ensure_future(self.queue.submit(tasks))

    def _choose(self, host: HostState, now: float) -> FetchItem | None:
        """Pick what to send to a ready host: its robots.txt, a page, or nothing."""
        skipped = 0
        while host.queue and skipped < MAX_SKIPS_PER_HOST_VISIT:
            q = host.queue[0]
            origin = urls.origin_of(q.url)
            entry = self.robots.get(origin)
            if entry is None:
                return self._new_item(urls.robots_url(q.url), host, ROBOTS, q.depth, None)
            if entry.state == UNAVAILABLE:
                self.scheduler.delay_until(host, now + max(0.0, entry.expires_at - time.time()))
                return None
            if entry.state == GIVEN_UP:
                self._log_drop(self.scheduler.pop_url(host), "robots_unavailable", ip=host.ip)
                skipped += 1
                continue
            if not entry.allows(q.url, self.settings.user_agent):
                self._log_drop(self.scheduler.pop_url(host), "robots_disallowed", ip=host.ip)
                skipped += 1
                continue
            if self._raise_host_delay(host, entry) and now < self._resumed_at + host.delay_s:
                # Crawl-delay learnt from the restored robots cache: the previous run may
                # have hit this host just before it stopped.
                self.scheduler.delay_until(host, self._resumed_at + host.delay_s)
                return None
            if self._page_limit_reached():
                break
            self.scheduler.pop_url(host)
            self.in_flight_pages += 1
            return self._new_item(q.url, host, PAGE, q.depth, q.via)
        self.scheduler.release(host)
        return None

    def _new_item(self, url: str, host: HostState, kind: str, depth: int,
                  via: str | None) -> FetchItem:
        item = FetchItem(self._next_item_id, url, host.ip or "", kind, depth, via)
        self._next_item_id += 1
        return item

    # -- results ---------------------------------------------------------------------------

    def _on_result(self, r: ItemResult, now: float) -> None:
        entry = self.in_flight.pop(r.item.item_id, None)
        if entry is None:
            return  # a duplicate report of work already accounted for
        item, host = entry
        if item.kind == ROBOTS:
            self._on_robots(r, host)
        else:
            self.in_flight_pages -= 1
            self.pages_done += 1 if r.status is not None else 0
            self.counters["fetches"] += 1
            self.counters[f"status.{r.status}" if r.status is not None else f"error.{r.error}"] += 1
            for reason, n in r.dropped.items():
                self.counters[f"links_dropped.{reason}"] += n
            if r.pld_edges:
                assert self.plds is not None
                self.plds.add(r.pld_edges)
            if r.links:
                self._admit(r.links, item.depth + 1, item.url)
        self.scheduler.done(host, now)

    def _on_robots(self, r: ItemResult, host: HostState) -> None:
        origin = urls.origin_of(r.item.url)
        entry = self.robots.record(origin, r.status, r.robots_text)
        self.counters["robots_fetches"] += 1
        self.counters[f"robots.{entry.state}"] += 1
        self._raise_host_delay(host, entry)

    def _raise_host_delay(self, host: HostState, entry: RobotsEntry) -> bool:
        """Honour a robots Crawl-delay longer than the host delay (capped). True if raised."""
        delay = entry.crawl_delay(self.settings.user_agent)
        if delay is None:
            return False
        capped = min(delay, self.settings.crawl_delay_max_s)
        if capped <= host.delay_s:
            return False
        host.delay_s = capped
        return True

    def _log_drop(self, q: QueuedURL, reason: str, *, ip: str | None) -> None:
        self.counters[f"dropped.{reason}"] += 1
        self.crawl_log.append({
            "time": time.time(), "url": q.url, "kind": PAGE, "status": None, "error": reason,
            "bytes": 0, "content_type": None, "fetch_ms": None, "ip": ip, "depth": q.depth,
            "via": q.via, "truncated": False, "warc": None,
        })

    # -- checkpoint ------------------------------------------------------------------------

    def checkpoint(self) -> Path:
        for sync in self.durables:
            sync()
        self.crawl_log.sync()
        assert self.seen is not None
        # Merged results not yet taken go to the frontier first, so that the manifest and
        # the queue below describe one moment.
        self._take_new_urls(self.clock())
        meta = CheckpointMeta(
            urlseen_manifest=self.seen.commit(),
            pld_manifest=self.plds.commit() if self.plds is not None else None,
            seeds=self.seeds,
            pages_done=self.pages_done,
            next_item_id=self._next_item_id,
            counters=dict(self.counters),
            time=time.time(),
        )
        path = self.checkpoints.write(meta, self._queued_rows(), [self.robots.save])
        self._last_checkpoint = self.clock()
        return path

    def _queued_rows(self) -> Iterable[tuple[str, int, str | None]]:
        # Unreported pages first: they were next in line.
        for item, _ in self.in_flight.values():
            if item.kind == PAGE:
                yield item.url, item.depth, item.via
        for q in self.scheduler.iter_queued():
            yield q.url, q.depth, q.via

    def stats(self) -> ManagerStats:
        return ManagerStats(
            pages_done=self.pages_done,
            in_flight=len(self.in_flight),
            queued=self.scheduler.queued_urls,
            hosts=len(self.scheduler.hosts),
            seen=len(self.seen) if self.seen is not None else 0,
            resolving=len(self._resolving),
            elapsed_s=self.clock() - self._started,
            counters=dict(self.counters),
        )
