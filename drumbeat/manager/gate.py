"""The robots gate: URLs read from BEAST (or replayed from QR) go on by their origin's
robots rules to their host's queue in the politeness scheduler, into QR while the rules
are coming, or are dropped. It also brings robots.txt fetches and DNS lookups of new
hosts into the scheduler, and records robots.txt answers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable

from drumbeat import urls
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.frontier.politeness import HostState, PolitenessScheduler, QueuedURL
from drumbeat.frontier.robots import (
    ALLOW_ALL,
    GIVEN_UP,
    REFUSED,
    RULES,
    UNAVAILABLE,
    RobotsEntry,
    RobotsStore,
)
from drumbeat.frontier.star import Star
from drumbeat.frontier.urlseen import decode_payload, payload_url
from drumbeat.manager.pricing import Pricing
from drumbeat.manager.state import LoopState
from drumbeat.manager.stores import Drops, Stores
from drumbeat.manager.tuning import LoopTuning
from drumbeat.queue.base import ItemResult
from drumbeat.settings import Settings

log = logging.getLogger("drumbeat.manager")


def robots_admitter(robots: RobotsStore, drop: Callable[..., None]) -> Callable[[bytes], bool]:
    """BEAST's ``admit``: False, with the URL dropped, when its origin's robots rules are
    in RAM, fresh, and disallow it; it is asked once the URL has a place in the ring,
    before it takes it (new, or leaving QF).

    IRLbot checks robots.txt after BEAST, so a disallowed URL takes a place in its PLD's
    budget and host cap and is dropped when read. Where many are disallowed, paced turns
    then bring few URLs that may be fetched, and the crawl slows to a crawl
    (docs/benchmarks.md). It is asked only for the URLs given a place in the ring, as
    asking for every URL placed costs more than it saves. URLs of origins whose rules are
    not in RAM go on as before: :meth:`RobotsGate.route` checks every URL read.
    """

    def admit(payload: bytes) -> bool:
        # Its origin: the authority as written, userinfo and all (a URL with userinfo is
        # then decided at routing). Decoding it costs less than a lookup in
        # Pricing.authority.
        entry = robots.peek(payload[: payload.index(b"/", 8)].decode())
        if (
            entry is None
            or entry.state != RULES
            or not robots.is_fresh(entry)
            or entry.allows(payload_url(payload))
        ):
            return True  # allowed, or decided at routing
        url, depth, via, _ = decode_payload(payload)
        drop(url, depth, via, "robots_disallowed")
        return False

    return admit


class RobotsGate:
    def __init__(
        self,
        settings: Settings,
        tuning: LoopTuning,
        stores: Stores,
        pricing: Pricing,
        scheduler: PolitenessScheduler,
        star: Star,
        state: LoopState,
        drops: Drops,
        counters: Counter[str],
        wake: Callable[[], None],
    ) -> None:
        s = self.settings = settings
        self.tuning = tuning
        self.robots = stores.robots
        self.qr = stores.qr
        self.qr_retry = stores.qr_retry
        self.robots_todo = stores.robots_todo
        self.beast = stores.beast
        self.scheduler = scheduler
        self.star = star
        self.state = state
        self.counters = counters
        self._drop = drops.drop
        self._authority = pricing.authority
        self.robots_admit = robots_admitter(stores.robots, drops.drop)
        self.policy = AddressPolicy(allow_loopback=s.allow_loopback, allow_private=s.allow_private)
        self.dns = DnsCache(
            nameserver=s.dns_server, timeout_s=s.dns_timeout_s, negative_ttl_s=s.dns_negative_ttl_s
        )
        # Hosts waiting for robots.txt in RAM at most (the rest wait in robots_todo).
        self.robots_ram_hosts = max(100, s.frontier_ram_urls // 10)
        self.checking = 0  # URLs in a RobotsCache check, not yet answered
        # Failures so far of origins whose robots.txt failed and is being retried (each is a
        # host in RAM, so this is bounded like them).
        self.robots_failures: dict[str, int] = {}
        self._request_gens: deque[int] = deque()  # QR generation of each RobotsRequested check
        self.to_check: list[tuple[str, bytes]] = []  # RobotsCache checks, submitted in batches
        self.resolving: dict[str, asyncio.Task[None]] = {}
        self._dns_slots = asyncio.Semaphore(tuning.dns_concurrency)
        self._last_robots_flush = float("-inf")
        # URLs read from BEAST and not yet routed (see route_budget_s); they count as in RAM.
        self.to_route: deque[bytes] = deque()
        # Fingerprints of URLs fetched after the last checkpoint, as the journal's replay
        # found (drumbeat.manager.journal): each is skipped once, when it reaches a host's
        # queue again. Empty but after a crash.
        self.done: set[int] = set()
        self.wake = wake  # a host was resolved or refused: the loop may dispatch

    def _robots_interval(self) -> float:
        """The least time between two flushes of the robots checks."""
        if self.state.slots_idle:
            return self.tuning.robots_flush_starving_s
        return self.settings.urlseen_flush_interval_s

    def robots_due_s(self, now: float) -> float | None:
        """Seconds until :meth:`feed` would flush the robots checks pending, submitted or
        still to submit (None: none are): a loop that waits for work waits no longer."""
        if not (self.robots.pending or self.to_check):
            return None
        return max(0.0, self._last_robots_flush + self._robots_interval() - now)

    def feed(self, now: float, budget_s: float | None = None) -> None:
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
        robots, qr, beast, t = self.robots, self.qr, self.beast, self.tuning
        self.submit_checks()
        starving = self.state.slots_idle
        if robots.pending and now - self._last_robots_flush >= self._robots_interval():
            # Two rounds: checks that find no rules make requests, answered by the second.
            for _ in range(2):
                robots.flush()
                self.take_robots_answers()
            self._last_robots_flush = now
        else:
            self.take_robots_answers()
        self._load_robots_work()
        stop = None if budget_s is None else time.perf_counter() + budget_s
        route_stop = self.route_slice(budget_s, starving)
        routed_s = self.route_read(route_stop)
        room = self.ram_room()
        for name, waiting in (("qr", qr), ("qr_retry", self.qr_retry)):
            if room > 0 and len(waiting):
                replayed = waiting.replay(room)
                self.counters[f"{name}_replayed"] += len(replayed)
                self.counters[f"{name}_repeats"] = waiting.repeats
                for payload in replayed:
                    self.route(payload)
                room -= len(replayed)
        ram = self.settings.frontier_ram_urls
        if (room >= ram // 2 or (starving and room >= ram // 16)) and len(beast):
            # A paced BEAST turn ends early once what it brought is crawled: no URL waits
            # for a robots check, and no host in RAM is waiting to be sent a URL within its
            # normal delay (hosts in back-off or with a long Crawl-delay would otherwise
            # hold the turn, and so would a host stuck in a slow fetch). A turn whose URLs
            # all leave at once (dropped: robots, a refused host) is followed by the next.
            resplit_stop = self.resplit_slice(stop, starving)
            try:
                for _ in range(t.max_turns_per_feed):
                    drained = (
                        beast.holding
                        and not self.to_route
                        and not self.checking
                        and not self.scheduler.due_within(now + self.settings.host_delay_s)
                    )
                    payloads = beast.read(room, drained=drained, resplit=resplit_stop is not None)
                    self.to_route.extend(payloads)
                    routed_s += self.route_read(route_stop)
                    room = self.ram_room()
                    if (
                        resplit_stop is not None
                        and beast.resplitting
                        and room > 0
                        and time.perf_counter() < resplit_stop
                    ):
                        continue  # QF is being placed again, a step per read
                    if not payloads or room <= 0 or not beast.holding:
                        break
            finally:
                if stop is not None and resplit_stop is not None:
                    self.state.placing.spent()
        if budget_s is not None and route_stop is not None:
            self.state.routing.spent(routed_s)
        self.submit_checks()

    def route_slice(self, budget_s: float | None, starving: bool) -> float | None:
        """Until when (a perf_counter time) this feed may route URLs read from BEAST;
        ``inf``: no limit (no ``budget_s``: a checkpoint's feed); None: not in this feed.

        With a budget, routing takes ``route_share`` of the time while the scheduler holds
        enough URLs (see LoopTuning), else the whole budget (still counted). With a slice
        granted, call ``state.routing.spent(seconds routed)`` once the feed is done.
        """
        if budget_s is None:
            return float("inf")
        full = (
            starving
            or self.scheduler.queued_urls
            < self.settings.frontier_ram_urls * self.tuning.route_full_speed_below
        )
        granted = self.state.routing.allowance(budget_s, full_speed=full)
        return None if granted is None else time.perf_counter() + granted

    def resplit_slice(self, stop: float | None, starving: bool) -> float | None:
        """Until when (a perf_counter time) this feed's BEAST reads may place steps of a
        re-split of QF; None: none at all. Without a budget (``stop`` None) there is no
        limit.

        Placing QF's URLs again is placing, and it shares placing's pace (place_share):
        unpaced, a large re-split took CPU from the fetchers for many seconds
        (docs/benchmarks.md). It goes at full speed while fetch slots idle for want of a
        ready host: the crawl then waits for its URLs (reading stops at the current
        queue until the re-split is done). With a budget granted, call
        ``state.placing.spent()`` once the reads are done."""
        if stop is None:
            return float("inf")
        if not self.beast.resplitting:
            # A re-split that starts in this feed's reads waits for the next turn's slice.
            return None
        granted = self.state.placing.allowance(
            max(0.0, stop - time.perf_counter()), full_speed=starving
        )
        return None if granted is None else time.perf_counter() + granted

    def ram_room(self) -> int:
        """URLs the scheduler's RAM may still take: what it holds, what awaits a robots
        check and what was read from BEAST but not yet routed count against it."""
        return (
            self.settings.frontier_ram_urls
            - self.scheduler.queued_urls
            - self.checking
            - len(self.to_route)
        )

    def route_read(self, stop: float | None) -> float:
        """Route URLs read from BEAST, in batches, until ``stop`` (a perf_counter time,
        checked after each batch; ``inf``: all of them; None: none); the seconds it took."""
        pending = self.to_route
        if not pending or stop is None:
            return 0.0
        batch = self.tuning.route_batch_urls
        started = now = time.perf_counter()
        while pending:
            for _ in range(min(batch, len(pending))):
                self.route(pending.popleft())
            now = time.perf_counter()
            if now >= stop:
                break
        return now - started

    def submit_checks(self) -> None:
        if self.to_check:
            origins, payloads = zip(*self.to_check)
            self.robots.check(list(origins), list(payloads))
            self.to_check = []

    def take_robots_answers(self) -> None:
        robots, qr, todo = self.robots, self.qr, self.robots_todo
        unknown: list[str] = []
        for payload, origin, entry in robots.take_checked():
            self.checking -= 1
            if entry is not None:
                self.route(payload, origin, entry)
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
        room = self.robots_ram_hosts - len(qr.working_origins())
        if room <= 0 or not len(todo):
            return
        for record in todo.read(room):
            gen, origin = record.decode().split("\n", 1)
            if qr.is_working(origin):
                qr.settle(int(gen))  # asked twice (e.g. expired rules): one fetch answers both
            else:
                self.work_on_robots(origin, int(gen))

    def work_on_robots(self, origin: str, gen: int | None) -> None:
        """Put ``origin``'s robots.txt in its host's queue (front); DNS first if needed."""
        self.qr.working(origin, gen)
        host = self.host(urls.host_of(origin))
        self.scheduler.push(
            host, QueuedURL(origin + "/robots.txt", 0, None, robots=True), front=True
        )

    def route(
        self, payload: bytes, origin: str | None = None, entry: RobotsEntry | None = None
    ) -> None:
        """Send a URL on by its origin's robots rules: to its host's queue, dropped, into QR
        (rules coming), or to a RobotsCache check (rules not in RAM)."""
        robots, qr = self.robots, self.qr
        url, depth, via, hops = decode_payload(payload)
        _, _, _, own_origin, host_name = self._authority(payload)
        if origin is None:
            origin = own_origin
            entry = robots.get(origin)
        if entry is None:
            if qr.is_working(origin):
                self._wait_for_robots(payload)
            else:
                self.to_check.append((origin, payload))
                self.checking += 1
            return
        if not robots.is_fresh(entry):
            if entry.state == UNAVAILABLE:  # its retry is under way (see on_robots)
                self._wait_for_robots(payload, retry=True)
                return
            if not qr.is_working(origin):
                self.counters["robots_expired"] += 1
                self.robots_todo.append(f"{qr.issue()}\n{origin}".encode())
            self._wait_for_robots(payload)
            return
        state = entry.state
        if state in (RULES, ALLOW_ALL):
            if entry.allows(url):
                self._push_page(url, depth, via, entry, hops, host_name)
            else:
                self._drop(url, depth, via, "robots_disallowed")
        elif state == UNAVAILABLE:
            self._wait_for_robots(payload, retry=True)
        elif state == GIVEN_UP:
            self._drop(url, depth, via, "robots_unavailable")
        elif state == REFUSED:
            self._drop(url, depth, via, entry.text)

    def _wait_for_robots(self, payload: bytes, *, retry: bool = False) -> None:
        """Park a URL in QR (or, while its origin's robots.txt awaits a retry, in QR-retry)."""
        waiting = self.qr_retry if retry else self.qr
        waiting.add(payload)
        self.counters["qr_retry_waited" if retry else "qr_waited"] += 1

    def _push_page(
        self, url: str, depth: int, via: str | None, entry: RobotsEntry, hops: int, host_name: str
    ) -> None:
        if self.done and self._was_done(url):
            return
        host = self.host(host_name)
        self.raise_host_delay(host, entry)
        self.scheduler.push(host, QueuedURL(url, depth, via, hops=hops))

    def _was_done(self, url: str) -> bool:
        """The URL was fetched after the last checkpoint, before a crash (once)."""
        fp = urls.fingerprint(url)
        if fp not in self.done:
            return False
        self.done.discard(fp)
        self.counters["journal_skipped"] += 1
        return True

    def host(self, name: str) -> HostState:
        """The host's scheduler state, created with its PLD's budget; DNS started if new."""
        host = self.scheduler.hosts.get(name)
        if host is None:
            # Delays follow STAR alone: a scoped crawl's budget boost is not a licence to
            # hit the operator's chosen sites harder.
            host = self.scheduler.host(name, budget=self.star.budget(urls.pld(name)))
            # The previous run may have hit this host just before it stopped.
            host.due = max(host.due, self.state.resumed_at + host.delay_s)
        if host.ip is None and name not in self.resolving:
            self.resolving[name] = asyncio.ensure_future(self._resolve(host))
        return host

    async def _resolve(self, host: HostState) -> None:
        try:
            async with self._dns_slots:
                answer = await self.dns.resolve(host.name)
            ip = answer.ip or ""
            reason = answer.error or self.policy.refusal(ip)
            if reason is None:
                self.scheduler.set_ip(host, ip)
                self.counters["hosts_resolved"] += 1
                return
            self.counters[f"hosts_failed.{reason}"] += 1
            log.info("host %s refused: %s", host.name, reason)
            self.refuse(host, reason, answer.ip)
        finally:
            self.resolving.pop(host.name, None)
            self.wake()

    def refuse(self, host: HostState, reason: str, ip: str | None) -> None:
        """The host cannot be fetched: answer its robots requests with the refusal (so its
        URLs waiting in QR are dropped with ``reason``), drop its queued pages."""
        for q in self.scheduler.drain(host):
            if q.robots:
                origin = urls.origin_of(q.url)
                self.robots.record_refused(origin, reason, self.settings.dns_negative_ttl_s)
                self.robots_failures.pop(origin, None)
                self.qr.answered(origin)
            else:
                self._drop(q.url, q.depth, q.via, reason, ip=ip)
        # Forget the host: a later URL of it resolves again (the DNS cache answers
        # negatives from memory until their TTL runs out).
        if not host.busy:
            self.scheduler.forget(host)

    def lift_refusals(self, reason: str, still_refused: Callable[[str], bool]) -> int:
        """Expire the RAM's refusals for ``reason`` of origins whose host is no longer
        ``still_refused``: their next URL asks for robots.txt again. (A refusal only on
        disk lasts its TTL.) Returns how many were lifted."""
        lifted = 0
        for origin in self.robots.origins_in_ram(REFUSED, reason):
            if not still_refused(urls.host_of(origin)):
                self.robots.record_refused(origin, reason, 0.0)
                lifted += 1
        return lifted

    def on_robots(self, r: ItemResult, host: HostState) -> float | None:
        """Record a robots.txt answer; returns the host's next delay if not the usual one."""
        origin = urls.origin_of(r.item.url)
        # An answer cut short (timeout, reset) is a failed fetch, not a short robots.txt:
        # its missing lines could disallow what the part received allows.
        status = r.status if r.error is None else None
        entry = self.robots.record(
            origin, status, r.robots_text, failures=self.robots_failures.pop(origin, 0)
        )
        self.qr.answered(origin)
        self.counters["robots_fetches"] += 1
        self.counters[f"robots.{entry.state}"] += 1
        if entry.state == UNAVAILABLE:
            # Retried when the entry expires; the URLs wait in QR meanwhile. Not counted in
            # a QR generation: a retry minutes away must not hold other URLs back.
            self.robots_failures[origin] = entry.attempts
            self.work_on_robots(origin, None)
            return max(host.delay_s, entry.expires_at - time.time())
        self.raise_host_delay(host, entry)
        return None

    def raise_host_delay(self, host: HostState, entry: RobotsEntry) -> bool:
        """Honour a robots Crawl-delay longer than the host delay (capped). True if raised."""
        delay = entry.crawl_delay()
        if delay is None:
            return False
        capped = min(delay, self.settings.crawl_delay_max_s)
        if capped <= host.delay_s:
            return False
        host.delay_s = capped
        # Learnt from the restored robots cache: the previous run may have hit this host
        # just before it stopped.
        host.due = max(host.due, self.state.resumed_at + capped)
        return True
