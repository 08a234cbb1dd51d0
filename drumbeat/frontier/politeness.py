"""Per-host URL queues and the two-heap politeness scheduler (IRLbot §VII.A).

A host is *due* when its own delay τh has passed since its last request completed; it is
*ready* when, in addition, its server IP is idle and the IP's delay τs has passed. One heap
orders hosts by due time, and IPs by the time their line is served: a due host whose IP
is busy, not yet due or already has a line, waits in that IP's line (first come, first
served), and the IP enters the heap at its due time once it is idle, to hand its next
request to the first host of the line. So a host waiting for its IP costs one heap entry
in all, however many hosts share the IP (re-offering every parked host each time the IP
freed cost five heap operations a page on the throughput benchmark's web, 10 hosts an
IP). Delays run from the moment a request's result is back, so queueing latency between
manager and fetcher can only make gaps longer: the spacing seen by the server is never
below the delay.

A host whose delay is short (``early_s``: the manager's is
``manager.dispatch.EARLY_BELOW_S``) is offered as soon as its request completes, its
delay still to run: the item carries the wait (:meth:`PolitenessScheduler.wait_s`) and
the fetcher keeps it before the request, so the hand-off overlaps the delay instead of
adding to it. The fetcher counts the delay from the previous fetch's end where it made
that fetch (``FetchItem.after_s``), else the rest from the item's arrival, after the
manager read its clock: either way the gap is never shorter than the delay.

With ``ip_delay_s == 0`` IPs impose nothing (several hosts of one IP may be fetched at
once); otherwise at most one request per IP is in flight.

``host_connections`` (IRLbot's rule is 1, the default): up to that many requests to one
host in flight at once. With 1, τh runs from the previous request's completion, as above.
With more (an operator's own servers), τh spaces request *starts* instead, as Scrapy's
DOWNLOAD_DELAY does: a completion frees a connection, and the next start still waits τh
after the one before. The IP rule is unchanged (with ``ip_delay_s > 0``, one request per IP
at a time), so several connections to a host need ``ip_delay_s == 0`` too. Starts are
spaced where they are dispatched: the hand-off to the fetchers may bring two starts at the
server a little closer (the "a busy Scrapy" caveat of ``drumbeat bench throughput``).

``pipeline`` (the manager's ``Settings.host_pipeline``): a host whose delays are all 0 (τh,
τs, no Crawl-delay) and that has not failed lately is *piped*: each of its connections is a
lane, and up to ``pipeline`` more requests queue behind each one at the fetchers
(``FetchItem.lane_key``), so that a request starts the moment the one before it on its lane
has ended instead of after a round trip through the manager, which on one fast site is
most of a request's time. At most ``host_connections`` requests are still under way at
once: the fetcher that gets a lane's items (the queue pins them to one) fetches them one
after another. A piped host is offered again once it has as many free places as lanes,
so that one dispatch refills them all. Whether a host is piped is decided when it has
nothing in flight; one that stops qualifying (robots.txt gave it a Crawl-delay, or a
request failed) takes no new request until its piped ones are all back, and its delay
then runs from the last one's end. Its robots.txt request goes alone (:meth:`hold`):
nothing is sent after it until its rules are known. While ``piping`` is off (the
manager's dispatcher turns it off while the crawl's fetch slots, not its hosts, are what
limits it: a queued request would hold a slot another host could use), no host starts
being piped, and a piped one queues nothing more behind its lanes: one request a lane,
as many as its connections.

Budgets (IRLbot §VII.A): a host of a PLD with budget B gets τh·B0/B, no less than
``host_delay_min_s``; an IP gets τs·B0/(average budget of its hosts in RAM), no less than
``ip_delay_min_s``. Well-linked sites are so crawled faster and do not clog RAM; the long
tail (budget B0) keeps the full delays. Robots Crawl-delay raises a host's delay again.

The per-host URL deques live in RAM; the manager fills them from BEAST's disk queues only
as fast as they are fetched, so their total stays under its configured bound.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import final


@dataclass(slots=True)
class QueuedURL:
    url: str
    depth: int
    via: str | None
    robots: bool = False  # the origin's robots.txt, not a page
    attempts: int = 0  # fetches of this URL that failed and are being retried
    hops: int = 0  # redirects that led to this URL (queue.base.FetchItem.hops)


@final  # final: the scheduler tells the two kinds of heap entry apart by type() is
@dataclass(slots=True, eq=False)
class HostState:
    name: str
    ip: str | None = None
    queue: deque[QueuedURL] = field(default_factory=deque)
    due: float = 0.0  # earliest next request (monotonic seconds)
    delay_s: float = 0.0  # this host's τh (scaled by budget, raised by robots Crawl-delay)
    budget: int = 0  # its PLD's budget when it entered RAM (sets the IP's τs)
    busy: bool = False  # no request may start now: host_connections are outstanding
    in_flight: int = 0  # requests (or decisions about one) outstanding
    blocked: bool = False  # waiting for DNS or for something else outside the scheduler
    heap_token: int = -1  # matches the live heap entry; stale entries are skipped
    parked: bool = False  # in its IP's line (IPState.parked)
    failures: int = 0  # recent failures, for the back-off (frontier.backoff)
    failed_at: float = float("-inf")
    failure: str = ""  # the last failure's status or error, for the operator
    # Dispatch latency (manager.dispatch): when the next request could leave (wall clock,
    # -1: not measured now) and the least item id that request will have.
    free_at: float = -1.0
    free_item: int = 0
    # The last request whose result came back (manager.dispatch): the key its fetcher
    # remembers its end by (ItemResult.end_key, 0: none) and the end its delay runs from
    # (monotonic seconds); an item sent early refers to them.
    last_key: int = 0
    last_end: float = 0.0
    # A piped host's requests outstanding on each lane (None: not piped), and the lane of
    # the request it was last offered for (next_ready), which the caller sends it on.
    lanes: list[int] | None = None
    lane: int = -1
    held: bool = False  # a piped host's robots.txt request is out: nothing more (hold)


@final
@dataclass(slots=True, eq=False)
class IPState:
    due: float = 0.0
    busy: bool = False
    parked: deque[HostState] = field(default_factory=deque)  # the line of hosts waiting
    heap_token: int = -1  # as HostState's: the IP is in the heap to serve its line


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    hosts: int
    ips: int
    queued_urls: int
    busy_hosts: int
    hosts_in_heap: int


def scaled_delay(base_s: float, floor_s: float, budget: float, default_budget: int) -> float:
    """IRLbot's delay for a budget: ``base_s`` at the default budget, shrinking in
    proportion to a larger one, never below ``floor_s`` (nor above ``base_s``)."""
    if budget <= default_budget:
        return base_s
    return max(min(floor_s, base_s), base_s * default_budget / budget)


class PolitenessScheduler:
    def __init__(
        self,
        *,
        host_delay_s: float,
        ip_delay_s: float,
        host_delay_min_s: float | None = None,
        ip_delay_min_s: float | None = None,
        default_budget: int = 1,
        host_connections: int = 1,
        early_s: float = 0.0,
        pipeline: int = 0,
    ) -> None:
        """``early_s``: a host whose delay is at most this is offered that delay early,
        the moment its previous request completes (see :meth:`wait_s`); 0: never. Only
        with one connection a host: the request it waits for is over, so a wait counted
        from the item's arrival at any fetcher is never short; starts of requests in
        flight at once on several fetchers could not be spaced that way. ``pipeline``:
        requests queued behind each connection of a piped host (the module docstring;
        0: none)."""
        if host_connections < 1:
            raise ValueError("host_connections must be >= 1")
        if pipeline < 0:
            raise ValueError("pipeline must be >= 0")
        self.host_connections = host_connections
        self.pipeline = pipeline
        self.piping = True  # hosts may be piped now (see the module docstring)
        self.early_s = early_s if host_connections == 1 else 0.0
        self.host_delay_s = host_delay_s
        self.ip_delay_s = ip_delay_s
        self.host_delay_min_s = host_delay_s if host_delay_min_s is None else host_delay_min_s
        self.ip_delay_min_s = ip_delay_s if ip_delay_min_s is None else ip_delay_min_s
        self.default_budget = default_budget
        self.hosts: dict[str, HostState] = {}
        self.ips: dict[str, IPState] = {}
        self._ip_budgets: dict[str, list[int]] = {}  # ip -> [hosts in RAM, sum of budgets]
        self._heap: list[tuple[float, int, HostState | IPState]] = []
        self._tokens = itertools.count()
        self._start_floor = 0.0
        self.queued_urls = 0

    # -- adding work -------------------------------------------------------------------

    def host(self, name: str, budget: int | None = None) -> HostState:
        """The host's state, created (blocked until :meth:`set_ip`) with its budget's τh."""
        h = self.hosts.get(name)
        if h is None:
            b = self.default_budget if budget is None else budget
            delay = scaled_delay(self.host_delay_s, self.host_delay_min_s, b, self.default_budget)
            h = self.hosts[name] = HostState(name, delay_s=delay, budget=b, blocked=True)
        return h

    def forget(self, host: HostState) -> None:
        """Drop an idle host's state (it has no queue; kept while a request is in flight,
        whose completion must find it)."""
        if self.hosts.get(host.name) is host and not host.in_flight:
            del self.hosts[host.name]
            self._unlink_ip(host)

    def ip_delay(self, ip: str) -> float:
        """τs for ``ip``, from the average budget of its hosts in RAM."""
        n, total = self._ip_budgets.get(ip, (0, 0))
        avg = total / n if n else self.default_budget
        return scaled_delay(self.ip_delay_s, self.ip_delay_min_s, avg, self.default_budget)

    def push(self, host: HostState, item: QueuedURL, *, front: bool = False) -> None:
        if front:
            host.queue.appendleft(item)
        else:
            host.queue.append(item)
        self.queued_urls += 1
        self._schedule(host)

    def pop_url(self, host: HostState) -> QueuedURL:
        self.queued_urls -= 1
        return host.queue.popleft()

    def drain(self, host: HostState) -> list[QueuedURL]:
        """Remove and return every queued URL of ``host``."""
        items = list(host.queue)
        host.queue.clear()
        self.queued_urls -= len(items)
        return items

    def set_ip(self, host: HostState, ip: str) -> None:
        """The host's IP is known: it may be scheduled."""
        self._unlink_ip(host)
        host.ip = ip
        load = self._ip_budgets.setdefault(ip, [0, 0])
        load[0] += 1
        load[1] += host.budget
        host.blocked = False
        self._schedule(host)

    def block(self, host: HostState) -> None:
        """Take ``host`` out of scheduling (e.g. while its IP is re-resolved); see set_ip."""
        if host.busy:
            self.release(host)
        host.blocked = True
        host.heap_token = -1

    def delay_until(self, host: HostState, when: float) -> None:
        """Nothing is sent now; do not offer ``host`` before ``when`` (e.g. a robots retry)."""
        host.due = max(host.due, when)
        self.release(host)

    def start_no_earlier_than(self, when: float) -> None:
        """After a restart: offer no host and no IP before ``when``.

        The previous run may have hit any host just before it died, so the first request
        of every host waits one full delay.
        """
        self._start_floor = when

    # -- dispatch ------------------------------------------------------------------------

    def next_ready(self, now: float) -> HostState | None:
        """Pop a host that may be sent a request now, marking it (and its IP) busy.

        The caller then either sends one request and later calls :meth:`done`, or calls
        :meth:`release` / :meth:`delay_until` if it decides to send nothing.
        """
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, token, entry = heapq.heappop(heap)
            if token != entry.heap_token:
                continue
            entry.heap_token = -1
            if type(entry) is IPState:
                h = self._serve_line(entry, now)
                if h is not None:
                    return h
                continue
            h = entry
            if h.busy or h.blocked or not h.queue:
                continue
            if h.due > now and self._offered_at(h) > now:
                self._schedule(h)  # its delay grew since it was pushed
                continue
            if self.ip_delay_s > 0:
                ip = self.ips.get(h.ip or "")
                if ip is None:
                    ip = self.ips[h.ip or ""] = IPState(due=self._start_floor)
                if ip.busy or ip.due > now or ip.parked:
                    self._park(h, ip)
                    continue
                ip.busy = True
            self._start(h, now)
            return h
        return None

    def _start(self, h: HostState, now: float) -> None:
        """``h`` sends one request at ``now``: mark it busy as its connections say."""
        if not h.in_flight:
            h.lanes = [0] * self.host_connections if self._pipes(h) else None
        if h.lanes is None and self.host_connections == 1:
            h.in_flight = 1
            h.busy = True
        else:
            self._start_one(h, now)

    def _pipes(self, h: HostState) -> bool:
        """Whether ``h`` may start being piped now (the module docstring)."""
        return self.piping and self._qualifies(h)

    def _qualifies(self, h: HostState) -> bool:
        """Whether ``h``'s politeness allows it to be piped: delays 0, no recent failure."""
        return self.pipeline > 0 and self.ip_delay_s <= 0 and h.delay_s <= 0 and not h.failures

    def _start_one(self, h: HostState, now: float) -> None:
        """``h`` sends one more request at ``now`` (host_connections > 1, or piped): the
        next start waits τh, and the host is back in the heap for it while a connection
        (a piped host: a place on a lane) is free."""
        h.in_flight += 1
        h.due = now + h.delay_s
        lanes = h.lanes
        if lanes is None:
            limit = self.host_connections
        else:
            h.lane = lane = lanes.index(min(lanes))
            lanes[lane] += 1
            # One that stopped qualifying is sent nothing more until its lanes are empty;
            # without piping, nothing queues behind its lanes.
            if not self._qualifies(h):
                limit = 0
            else:
                limit = len(lanes) * (1 + self.pipeline if self.piping else 1)
        if h.in_flight >= limit:
            h.busy = True
        elif len(h.queue) > 1:  # the caller takes one URL now
            self._push_heap(h, max(h.due, self._start_floor))

    def _park(self, h: HostState, ip: IPState) -> None:
        """Put ``h`` at the end of ``ip``'s line (once), served when the IP is idle and due."""
        if not h.parked:
            h.parked = True
            ip.parked.append(h)
        if not ip.busy:
            self._arm(ip)

    def _arm(self, ip: IPState) -> None:
        """Put ``ip`` in the heap at its due time (if it is not there), to serve its line."""
        if ip.heap_token == -1:
            ip.heap_token = next(self._tokens)
            heapq.heappush(self._heap, (max(ip.due, self._start_floor), ip.heap_token, ip))

    def _serve_line(self, ip: IPState, now: float) -> HostState | None:
        """The first host of ``ip``'s line that may be sent a request, busy with its IP; or
        None. Hosts that left the line's conditions meanwhile (blocked, re-resolved to
        another IP, nothing queued, due later) leave the line, and the heap gets them back
        when they may go again (:meth:`_schedule`)."""
        if ip.busy:
            return None  # freeing it serves the line
        if ip.due > now:
            self._arm(ip)
            return None
        parked = ip.parked
        while parked:
            h = parked.popleft()
            h.parked = False
            if (
                h.busy
                or h.blocked
                or not h.queue
                or self._offered_at(h) > now
                or self.ips.get(h.ip or "") is not ip
            ):
                self._schedule(h)
                continue
            h.heap_token = -1  # an entry it may also have in the heap is void now
            ip.busy = True
            self._start(h, now)
            return h
        return None

    def due_within(self, when: float) -> bool:
        """Some host that is not waiting for a request in flight has queued URLs and may
        be sent one before ``when`` (hosts waiting only for their IP or DNS count: their
        due time has passed). Hosts held back longer (back-off, a long Crawl-delay) do not
        count, nor do busy ones (a slow fetch must not hold the caller)."""
        return any(h.queue and not h.busy and h.due <= when for h in self.hosts.values())

    def next_due_time(self) -> float | None:
        """When the earliest host in the heap becomes due (stale entries may make it early)."""
        return self._heap[0][0] if self._heap else None

    def done(
        self, host: HostState, now: float, delay_s: float | None = None, lane: int = -1
    ) -> None:
        """A request to ``host`` has completed at ``now``: start both delays from here
        (with host_connections > 1, τh already runs from the request's start; a
        ``delay_s`` given, such as a back-off, still runs from now). ``lane``: the
        request's lane, where its host is piped (HostState.lane when it was offered)."""
        host.busy = False
        lanes = host.lanes
        if lanes is None and self.host_connections == 1:
            host.in_flight = 0
            host.due = now + (host.delay_s if delay_s is None else delay_s)
        else:
            host.in_flight = max(0, host.in_flight - 1)
            if delay_s is not None and now + delay_s > host.due:
                host.due = now + delay_s
                host.heap_token = -1  # an entry it has in the heap is too early now
            if lanes is not None:
                if self._leave_lane(host, lane):
                    if not self._qualifies(host) and now + host.delay_s > host.due:
                        # No longer piped: its delay runs from this end, as one
                        # connection's does.
                        host.due = now + host.delay_s
                        host.heap_token = -1
                elif not self._qualifies(host) or host.held:
                    host.busy = True  # nothing more until its lanes are empty, or its rules known
                elif not self.piping and host.in_flight >= len(lanes):
                    host.busy = True  # nothing queued behind its lanes now
                elif host.in_flight > len(lanes) * self.pipeline:
                    # Refilled a place a lane at a time: one dispatch, one frame a lane's
                    # fetcher, where a place at a time would cost each a turn and a frame.
                    host.busy = True
        self._free_ip(host, now + self.ip_delay(host.ip or ""))
        self._schedule(host)

    @staticmethod
    def _leave_lane(host: HostState, lane: int) -> bool:
        """One of piped ``host``'s requests, on ``lane``, is over or was never sent (its
        in_flight already counted down): free its place. True when the host has none
        left, and so is piped no more."""
        lanes = host.lanes
        assert lanes is not None
        if 0 <= lane < len(lanes) and lanes[lane]:
            lanes[lane] -= 1
        if host.in_flight:
            return False
        host.lanes = None
        return True

    def hold(self, host: HostState) -> None:
        """Send ``host`` nothing more until :meth:`unhold` (a piped host's robots.txt
        request goes alone: its rules may give it a delay)."""
        host.held = host.busy = True

    def unhold(self, host: HostState) -> None:
        """End :meth:`hold`; the :meth:`done` that follows frees ``host`` as it may."""
        host.held = False

    def release(self, host: HostState) -> None:
        """Nothing was sent to ``host`` after :meth:`next_ready`: free it without a delay
        (with host_connections > 1 the start's τh stands: a wait too long, never short)."""
        host.busy = False
        host.in_flight = max(0, host.in_flight - 1)
        if host.lanes is not None:
            self._leave_lane(host, host.lane)
        ip = self.ips.get(host.ip or "") if self.ip_delay_s > 0 else None
        self._free_ip(host, ip.due if ip else 0.0)
        self._schedule(host)

    def _free_ip(self, host: HostState, due: float) -> None:
        if self.ip_delay_s <= 0:
            return
        ip = self.ips.get(host.ip or "")
        if ip is None or not ip.busy:
            return
        ip.busy = False
        ip.due = max(ip.due, due)
        if ip.parked:
            self._arm(ip)

    def wait_s(self, host: HostState, now: float) -> float:
        """How long a request to ``host``, which :meth:`next_ready` offered at ``now``,
        must still wait for its delay to pass: above 0 only for a host offered early
        (``early_s``). The fetcher waits that long after the item reaches it."""
        return host.due - now if self.early_s and host.due > now else 0.0

    def _offered_at(self, h: HostState) -> float:
        """When ``h`` may be offered (its IP aside): at its due time, or early by its
        whole delay when that is short (``early_s``)."""
        early = self.early_s
        return h.due - h.delay_s if early and h.delay_s <= early else h.due

    def _schedule(self, h: HostState) -> None:
        if h.busy or h.blocked or not h.queue or h.heap_token != -1:
            return
        self._push_heap(h, max(self._offered_at(h), self._start_floor))

    def _push_heap(self, h: HostState, when: float) -> None:
        h.heap_token = next(self._tokens)
        heapq.heappush(self._heap, (when, h.heap_token, h))

    # -- upkeep ----------------------------------------------------------------------------

    def sweep(self, now: float) -> int:
        """Forget idle hosts and IPs whose delays have run out (their state is no longer needed)."""
        gone = [
            name
            for name, h in self.hosts.items()
            if not h.queue and not h.in_flight and not h.blocked and h.due <= now
        ]
        for name in gone:
            self._unlink_ip(self.hosts.pop(name))
        for key in [
            k for k, ip in self.ips.items() if not ip.busy and not ip.parked and ip.due <= now
        ]:
            del self.ips[key]
        return len(gone)

    def _unlink_ip(self, host: HostState) -> None:
        load = self._ip_budgets.get(host.ip or "")
        if load is None:
            return
        load[0] -= 1
        load[1] -= host.budget
        if load[0] <= 0:
            del self._ip_budgets[host.ip or ""]

    def iter_queued(self) -> Iterator[QueuedURL]:
        for h in self.hosts.values():
            yield from h.queue

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            hosts=len(self.hosts),
            ips=len(self.ips),
            queued_urls=self.queued_urls,
            busy_hosts=sum(1 for h in self.hosts.values() if h.in_flight),
            hosts_in_heap=sum(1 for h in self.hosts.values() if h.heap_token != -1),
        )
