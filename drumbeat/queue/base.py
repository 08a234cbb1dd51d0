"""What moves between the manager and the fetchers, and the queue that moves it.

The manager submits :class:`Task` s (a handful of :class:`FetchItem` s, each already
resolved to an IP and cleared by politeness); fetchers claim tasks, fetch, and report
one :class:`ItemResult` per item, in batches. A task is owned by the queue until every
item is reported (server-side ownership, as in BloomReach's design): a fetcher that goes
away loses nothing, its unreported items can be handed out again. The manager keeps its
own record of what it submitted and has not seen reported, so a checkpoint can re-queue
exactly those items; results are idempotent because URL-seen absorbs duplicates.

Everything here is plain data (str, int, float, lists, dicts) so that a Redis-backed
queue can serialize it without touching manager or fetcher logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PAGE = "page"
ROBOTS = "robots"

_T = TypeVar("_T", bound="DataclassInstance")


def _pickled_as_fields(cls: type[_T]) -> type[_T]:
    """Pickle instances of the dataclass ``cls`` as ``cls(*fields)``.

    The default for a slots dataclass calls Python helpers that walk ``fields()`` for
    every object, both ways; results cross a process boundary in their thousands a
    second, so this halves the cost of pickling and unpickling a result.
    """
    values = attrgetter(*(f.name for f in fields(cls)))

    def reduce(self: _T) -> tuple[type[_T], tuple[object, ...]]:
        return cls, values(self)

    # setattr: mypy forbids assigning to a method of a class (the point here).
    setattr(cls, "__reduce__", reduce)  # noqa: B010
    return cls


@_pickled_as_fields
@dataclass(slots=True)
class FetchItem:
    item_id: int  # unique within a crawl, assigned by the manager; results refer to it
    url: str
    ip: str  # the manager resolved and guard-checked it; the fetcher connects exactly there
    kind: str = PAGE  # PAGE | ROBOTS
    depth: int = 0
    via: str | None = None  # the page the URL was discovered on
    attempts: int = 0  # earlier fetches of this URL that failed and were retried
    hops: int = 0  # consecutive redirects that led here; Settings.max_redirects caps them
    # The host's next request waits for this result, soon: a fetcher process reports it at
    # once rather than with the next batch of results (queue.process.WorkerQueue).
    report_now: bool = False
    # In a cluster, the IP's delay this manager keeps (its PLD's scaled τs): fetchers keep
    # requests to the IP that far apart cluster-wide, hosts of other partitions included.
    ip_delay_s: float = 0.0
    # A revisit's validators, as the page's last fetch was served with them (None: none):
    # the fetch is a conditional GET, and a 304 means the page is unchanged
    # (drumbeat.revisit). Last, with defaults: older pickles of a FetchItem still load.
    etag: str | None = None
    last_modified: str | None = None
    # A revisit's last fetch: its payload's digest64 (0: unknown) and its WARC date (a
    # revisit record refers to it; None: unknown).
    revisit_digest: int = 0
    revisit_date: str | None = None
    # An item the manager sent before its host's delay was over (frontier.politeness,
    # early_s): the request waits ``after_s`` past the end of the host's previous fetch
    # where the fetcher that gets it made that fetch and remembers its end by
    # ``after_key`` (ItemResult.end_key), else ``wait_s`` (the delay still to run when the
    # manager sent it) from the item's arrival. Durations, never times: a fetcher's clock
    # need not agree with the manager's. 0: no wait.
    wait_s: float = 0.0
    after_key: int = 0
    after_s: float = 0.0
    # Announce the request's end before archiving and parsing the page (FetcherQueue.
    # fetch_ended): its host's delay is shorter than that work, so the next request
    # would wait for it. Last, with a default: older pickles of a FetchItem still load.
    announce_end: bool = False
    # A host whose delays are 0 has requests queued at the fetchers behind each of its
    # connections (Settings.host_pipeline, frontier.politeness): ``lane`` numbers the
    # connection (-1: none), for the manager; ``lane_key`` (0: none) is what a fetcher
    # keeps them apart by: of the items with one key, one at a time is fetched, each
    # started the moment the one before it has ended (no round trip to the manager).
    lane: int = -1
    lane_key: int = 0


@_pickled_as_fields
@dataclass(slots=True)
class Task:
    task_id: int
    items: list[FetchItem]
    # Tasks of one partition (see ManagerQueue.partitions) go to one fetcher while the
    # load allows, so a host's requests reuse that fetcher's keep-alive connection.
    partition: int = 0
    # Its items have lanes (FetchItem.lane_key): it goes to its partition's fetcher
    # whatever the load, where the items queued before it on their lanes are (a queue
    # that pins partitions; see ManagerQueue.pins_partitions).
    pinned: bool = False


@_pickled_as_fields
@dataclass(slots=True)
class FoundURLs:
    """The URLs one fetch found, packed for URL-seen so that the manager does no per-URL
    Python work on them: ``n`` xxh3 fingerprints (uint64, native order) and ``n``
    payloads ``url \\n depth \\n via [\\n hops]`` back to back with their lengths (uint32)."""

    fingerprints: bytes
    payloads: bytes
    lengths: bytes

    def __len__(self) -> int:
        return len(self.fingerprints) // 8

    def payloads_list(self) -> list[bytes]:
        """The payloads, one bytes each, in the order found."""
        out, start = [], 0
        for n in memoryview(self.lengths).cast("I"):
            out.append(self.payloads[start : start + n])
            start += n
        return out

    def urls(self) -> list[str]:
        """The URLs, in the order found (decodes every payload: for tests and scoping)."""
        return [p.split(b"\n", 1)[0].decode() for p in self.payloads_list()]


@_pickled_as_fields
@dataclass(slots=True)
class FoundEdges:
    """A page's PLD-graph edges, packed for PLDindegree so that the manager does no
    per-edge Python work: the ``source`` PLD, ``n`` edge keys (uint64, native order: see
    frontier.pldgraph.edge_key) and the ``n`` distinct target PLDs (sorted, none the
    source) back to back in UTF-8 with their lengths (uint32)."""

    source: str
    keys: bytes
    targets: bytes
    lengths: bytes

    def __len__(self) -> int:
        return len(self.keys) // 8

    def pairs(self) -> list[tuple[str, str]]:
        """The (source PLD, target PLD) edges (for tests and reports)."""
        out, start = [], 0
        for n in memoryview(self.lengths).cast("I"):
            out.append((self.source, self.targets[start : start + n].decode()))
            start += n
        return out


@_pickled_as_fields
@dataclass(slots=True)
class ItemResult:
    """The outcome of one FetchItem. ``status`` is None when no HTTP response arrived."""

    task_id: int
    index: int  # position of the item in its task
    item: FetchItem
    status: int | None = None
    error: str | None = None  # stable reason string, e.g. "connect", "dns:nxdomain"
    found: FoundURLs | None = None  # normalized absolute URLs (page links, Location)
    pld_edges: FoundEdges | None = None  # the page's links between PLDs
    dropped: dict[str, int] = field(default_factory=dict)  # links dropped by reason
    robots_text: str | None = None  # ROBOTS items: the body, decoded, size-capped
    body_bytes: int = 0
    retry_after_s: float | None = None  # the answer's Retry-After, in seconds from now
    log: dict[str, object] | None = None  # the crawl-log line of this fetch; the manager writes it
    # Seconds from the fetch's end to its report leaving the fetcher (archiving, parsing):
    # the manager runs the host's delay from that much before it got the result, which is
    # still no earlier than the fetch's end (a duration: no clocks compared).
    held_s: float = 0.0
    # The page's relevance in [0, 1] from the crawl's focus function (--focus; None:
    # no focus set, or not an HTML page): the priority of the links in ``found``.
    focus: float | None = None
    # With Settings.revisit, a page's: its payload's digest64 (drumbeat.revisit; 0: none,
    # a 304 or a truncated body) and the validators it was served with.
    digest: int = 0
    etag: str | None = None
    last_modified: str | None = None
    # With Settings.revisit, for the revisit history (drumbeat.revisit.history): an HTML
    # page's 64-bit simhash (Settings.near_dup; 0: none), and a sitemap's <lastmod>s: the
    # ``n`` fingerprints (uint64) of the URLs of ``found`` that have one, then their ``n``
    # dates in seconds since the epoch (float64), native order. By fingerprint, not by
    # position: a cluster keeps in ``found`` only its own partition's URLs.
    simhash: int = 0
    lastmods: bytes | None = None
    # A random key (0: none) under which the fetcher remembers when this fetch ended, for
    # its host's next item, sent early, to wait from (FetchItem.after_key): random, so
    # that no other fetcher, nor this one after a restart of either side, has it.
    end_key: int = 0
    # A cluster fetcher's page links and edges instead of ``found`` and ``pld_edges``,
    # packed apart for each partition that owns some (queue.partition.Splitter): its
    # queue keeps the task's own partition's in those two and forwards the others, and
    # sends None here. Last: results pickle by position (_pickled_as_fields), so a new
    # field goes at the end, where results an older drumbeat pickled still load.
    by_partition: dict[int, tuple[FoundURLs | None, FoundEdges | None]] | None = None
    # A notice that the item's request has ended, ahead of its result (FetcherQueue.
    # fetch_ended): only its host's politeness reads it (status, held_s, end_key, and the
    # log's "time" and "fetch_ms"); the result follows, as for any item.
    fetch_ended: bool = False
    # An item with a lane (FetchItem.lane_key): when (wall clock) the request before it
    # on its lane ended at this fetcher, -1 if none did; its start less that is the
    # pipeline's hand-off (the dispatch latency of a request queued behind another).
    lane_free_at: float = -1.0


@dataclass(frozen=True, slots=True)
class QueueStats:
    pending_tasks: int
    owned_tasks: int
    unreported_items: int
    results_waiting: int
    submitted_tasks: int
    completed_tasks: int


class ManagerQueue(Protocol):
    """The manager's side of the task hand-off."""

    @property
    def partitions(self) -> int:
        """How many partitions tasks may be put in (``Task.partition`` in
        ``range(partitions)``): the manager puts all items of a host in one, and the
        queue prefers one fetcher per partition. 1 when it makes no difference."""

    @property
    def pins_partitions(self) -> bool:
        """Whether a pinned task (``Task.pinned``) always reaches the one fetcher that
        gets its partition's other pinned tasks while any of them is unreported: the
        manager then queues a host's requests behind one another there (FetchItem.lane).
        False where fetchers claim tasks as they come (a cluster)."""

    async def submit(self, tasks: Sequence[Task]) -> None:
        """Make tasks available to fetchers, in order."""

    async def collect(self, max_results: int, timeout_s: float) -> list[ItemResult]:
        """Take up to ``max_results`` results, waiting up to ``timeout_s`` for the first."""

    async def sync(self) -> bool:
        """Make what fetchers wrote for every result collected so far durable (WARC).

        Called before each checkpoint. False if that could not be confirmed in time.
        """


class FetcherQueue(Protocol):
    """The fetcher's side of the task hand-off: all a Fetcher uses (a fetcher process's
    end of the pipes implements only this)."""

    async def claim(self, worker: str, max_tasks: int, timeout_s: float) -> list[Task]:
        """Take up to ``max_tasks`` tasks, waiting up to ``timeout_s`` for the first;
        empty on timeout or when the queue is closed."""

    async def report(self, worker: str, results: Sequence[ItemResult]) -> None:
        """Hand back item results."""

    async def fetch_ended(self, worker: str, notice: ItemResult) -> None:
        """The request of ``notice``'s item has ended, well: its host's next request
        need not wait for the page to be archived and parsed (``notice.fetch_ended``).
        Sent for items marked ``announce_end``; a queue may ignore it (the result then
        frees the host), never drop the result that follows."""

    @property
    def closed(self) -> bool:
        """True once the queue was closed."""


class TaskQueue(ManagerQueue, FetcherQueue, Protocol):
    """Task hand-off with server-side ownership. All methods are safe to call concurrently."""

    async def claim(self, worker: str, max_tasks: int, timeout_s: float) -> list[Task]:
        """Fetcher: take up to ``max_tasks`` tasks, waiting up to ``timeout_s`` for the first.

        The queue records ``worker`` as the owner until every item is reported.
        Returns an empty list on timeout or when the queue is closed.
        """

    async def report(self, worker: str, results: Sequence[ItemResult]) -> None:
        """Fetcher: hand back item results; a task completes when all its items are reported."""

    async def release(self, worker: str) -> int:
        """Give the unreported items of ``worker``'s tasks back to the pending tasks.

        Called when a fetcher stops (gracefully or, in a cluster, on a missed heartbeat).
        Returns the number of items returned.
        """

    def stats(self) -> QueueStats: ...

    @property
    def closed(self) -> bool:
        """True once close() was called."""

    async def close(self) -> None:
        """Wake every waiter; later claims and collects return empty lists."""


class Inbox(Protocol):
    """What a cluster's manager gets besides results: the links and PLD edges that pages
    of other partitions found for its own (queue.partition), and whether the crawl as a
    whole is done. Entries taken stay in the cluster's store until the manager's journal
    or a live checkpoint holds them, so a manager killed at any instant loses none."""

    def take(self) -> tuple[list[FoundURLs], list[FoundEdges]]:
        """What arrived since the last call (delivered by the queue's collect())."""

    def mark(self) -> int:
        """How far take() has handed entries out: a commit (journal or checkpoint) made
        after them holds them."""

    def acknowledge(self, mark: int) -> None:
        """What was handed out before ``mark`` is durable: forget it."""

    def idle(self, finished: bool) -> bool:
        """Note whether this manager has nothing left; True once no partition has."""
