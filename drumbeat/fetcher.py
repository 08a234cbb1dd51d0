"""The fetcher: a stateless worker that turns tasks into archived fetches and found links.

For each FetchItem of a claimed task it fetches the URL from the IP the manager chose,
writes the exchange to WARC, extracts links from HTML (or takes the Location of a
redirect: drumbeat.fetcher_links), and reports an ItemResult that carries the fetch's
crawl-log line (the manager writes the log, so that it stays one file whatever the
number of fetcher processes). It keeps no crawl state: if it dies, the task queue hands
its unreported items out again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from time import thread_time

from drumbeat.fetch.client import ClientOptions, HttpClient, client_class, validators
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.response import FetchResponse
from drumbeat.fetcher_links import LinkExtractor
from drumbeat.frontier.backoff import retryable
from drumbeat.parse.links import PageReferences
from drumbeat.parse.simhash import simhashes
from drumbeat.queue.base import PAGE, ROBOTS, FetcherQueue, FetchItem, ItemResult, Task
from drumbeat.revisit.revisits import digest64
from drumbeat.settings import Settings
from drumbeat.store.dedup import ContentIndex
from drumbeat.store.warc import (
    IDENTICAL_PAYLOAD_DIGEST,
    SERVER_NOT_MODIFIED,
    Revisit,
    WarcLocation,
    WarcWriter,
    sha1_label,
    warc_date,
)

log = logging.getLogger("drumbeat.fetcher")

# The content index's directory in a state directory (a cluster fetcher's has one
# ``content/{crawl}.lmdb`` per crawl instead): see drumbeat.store.dedup.
CONTENT_INDEX_DIR = "content.lmdb"
# Fetch ends remembered for the next items of their hosts (Fetcher._note_end): RAM stays
# bounded; an item whose host's previous end was forgotten waits from its arrival (longer).
ENDS_KEPT = 4096
# A fetched page whose request's end was announced (FetchItem.announce_end) holds back no
# request of its host, so its archiving and parsing wait up to GATHER_S, while other
# fetches of this fetcher are under way, for GATHER_ITEMS such pages: a batch costs less
# CPU a page than pages one by one, and is reported in one frame (docs/benchmarks.md,
# "One site"). Any other item ends the wait: a result someone waits for goes at once.
# GATHER_ITEMS is high so that GATHER_S, not a count, mostly ends the wait: a batch then
# grows with the rate pages come at (a piped host's lanes fill one while the last one
# is parsed), and fewer, larger batches cost the fetcher and the manager less a page.
GATHER_S = 0.005
GATHER_ITEMS = 16
# A lane's hand-off (FetchItem.lane_key: curl notices a request's end, the lane passes to
# its next item, whose request starts and is sent) takes a few turns of the event loop.
# A batch archived and parsed in the loop holds the hand-offs until it is done, and the
# lanes' connections sit idle meanwhile. Where the crawl's lanes leave cores spare (fewer
# connections a host than fetcher processes, one a core by default), a batch with lanes
# under way is archived and parsed in a thread of the fetcher's own instead: the loop
# keeps handing the lanes on, and lexbor's parse, SHA-1 and gzip, which release the GIL,
# run beside it, so the process serving a lane uses more than one core. Where every core
# has a lane, the thread would only add its cost (the two threads share the GIL), so the
# archiver lets the hand-offs already due run first (HAND_OFF_TURNS), then blocks the
# loop. Batches without lanes (a crawl of many hosts, the cluster) stay in the loop.
# docs/benchmarks.md, "One site", has the figures.
HAND_OFF_TURNS = 4


class _Lane:
    """The requests of one lane (FetchItem.lane_key) at a fetcher: one at a time, in
    their order of arrival."""

    __slots__ = ("free_at", "lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()  # FIFO: its waiters are woken in turn
        self.users = 0  # items holding or waiting for the lock: at 0 the lane is dropped
        self.free_at = -1.0  # when (wall clock) its last request ended; -1: none yet


@dataclass(frozen=True, slots=True)
class FetcherStats:
    active: int
    fetched: int
    errors: dict[str, int]
    stage_s: dict[str, float]  # CPU seconds of this thread per stage: warc, parse, normalize


def open_http(settings: Settings) -> tuple[HttpClient, DnsCache]:
    """The HTTP client a fetcher uses, with its own resolver (close both when done).

    ``settings.http_client`` picks the class (CurlHttpClient or AiohttpClient: one
    contract, drumbeat.fetch.client). The resolver serves robots.txt redirects to other
    hosts only; page fetches go to the IP the manager resolved.
    """
    dns = DnsCache(
        nameserver=settings.dns_server,
        timeout_s=settings.dns_timeout_s,
        negative_ttl_s=settings.dns_negative_ttl_s,
    )
    http = client_class(settings.http_client)(
        ClientOptions.from_settings(settings),
        policy=AddressPolicy(
            allow_loopback=settings.allow_loopback, allow_private=settings.allow_private
        ),
        resolver=dns,
    )
    return http, dns


class Fetcher:
    def __init__(
        self,
        settings: Settings,
        queue: FetcherQueue,
        http: HttpClient,
        warc: WarcWriter,
        *,
        worker: str = "fetcher-0",
        pace: Callable[[FetchItem], AbstractAsyncContextManager[None]] | None = None,
        slots: asyncio.Semaphore | None = None,
        content: ContentIndex | None = None,
        partitions: int = 1,
    ) -> None:
        """``pace``: each request runs inside ``pace(item)`` (a cluster's IP leases).
        ``slots``: the fetches that may run at once (default: ``settings.concurrency``
        of this fetcher's own; a cluster's fetcher process shares one among its crawls).
        ``content``: the index of archived payloads and page fingerprints shared by
        the fetchers of this state directory (:func:`open_content_index`); None: no
        duplicate detection. ``partitions``: the crawl's managers (a cluster's), for
        whom a page's links are packed apart."""
        self.settings = settings
        self.content = content
        self.pace = pace
        self.queue = queue
        self.http = http
        self.warc = warc
        self.worker = worker
        self._slots = slots or asyncio.Semaphore(settings.concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self._under_way = 0  # items waiting for their start or being fetched
        # Fetched items waiting for _archive_fetched, which runs while any wait.
        self._fetched: list[tuple[int, int, FetchItem, FetchResponse]] = []
        self._urgent = 0  # of those, the items whose end was not announced
        self._archiver: asyncio.Task[None] | None = None
        # Lanes' batches go to the archive thread (made at the first): see HAND_OFF_TURNS.
        self._lanes_in_thread = settings.host_connections < settings.fetcher_processes()
        self._archive_thread: ThreadPoolExecutor | None = None
        self._gathering: asyncio.Future[None] | None = None  # the archiver's wait (GATHER_S)
        # When recent fetches whose host's next item may be sent early ended (monotonic
        # seconds by ItemResult.end_key): that item waits from there.
        # An OrderedDict: dropping the oldest from a plain dict scans the holes its
        # earlier deletions left at the front, a cost that grows with ENDS_KEPT.
        self._ends: OrderedDict[int, float] = OrderedDict()
        # The lanes with items here (FetchItem.lane_key), and when the request before
        # each item fetched on a lane ended (ItemResult.lane_free_at), by item id until
        # its result is made. Both hold only items under way.
        self._lanes: dict[int, _Lane] = {}
        self._lane_free_at: dict[int, float] = {}
        self._keys = random.Random()
        self.fetched = 0
        self.errors: Counter[str] = Counter()
        self.stage_s: defaultdict[str, float] = defaultdict(float)  # CPU seconds
        self.duplicates = (
            Duplicates(settings, content, warc, self.stage_s) if content is not None else None
        )
        self.extractor = LinkExtractor(
            settings,
            self.stage_s,
            self.errors,
            text=self.duplicates is not None and self.duplicates.near,
            partitions=partitions,
        )
        self._revisit = settings.revisit  # pages' digests and validators, for the manager

    async def run(self) -> None:
        """Claim and run tasks until the queue is closed or this coroutine is cancelled."""
        try:
            while True:
                tasks = await self.queue.claim(self.worker, max_tasks=16, timeout_s=0.5)
                if not tasks and self.queue.closed:
                    break
                for task in tasks:
                    self.start(task)
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Cancel the fetches under way (their items are not reported). A batch being
        archived in the archive thread is finished first: its files are then closed
        safely."""
        pending = [*self._running, *filter(None, [self._archiver])]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self._archive_thread is not None:
            # A batch cancelled above runs on in the thread: its end is waited for here,
            # off the loop.
            thread, self._archive_thread = self._archive_thread, None
            await asyncio.to_thread(thread.shutdown)

    def start(self, task: Task) -> None:
        """Fetch the task's items (within the concurrency limit); results go to the queue."""
        for index, item in enumerate(task.items):
            t = asyncio.ensure_future(self._run_item(task.task_id, index, item))
            self._running.add(t)
            t.add_done_callback(self._running.discard)

    async def _run_item(self, task_id: int, index: int, item: FetchItem) -> None:
        self._under_way += 1
        try:
            resp = await self._fetch_when_due(item)
        except Exception as e:  # a bug must cost one URL, not a stuck crawl
            self._lane_free_at.pop(item.item_id, None)
            await self.queue.report(self.worker, [_internal_error(task_id, index, item, e)])
            return
        finally:
            self._under_way -= 1
        announced = (
            item.announce_end and item.kind == PAGE and not retryable(resp.status, resp.error)
        )
        if announced:
            # Its host's next request may leave now, while this page is archived and
            # parsed (a failure waits for its result, which decides the back-off).
            await self.queue.fetch_ended(self.worker, self._notice(task_id, index, item, resp))
        # Archived and parsed with the other pages fetched in this turn of the loop
        # (most pages are in batches of 10-60): a stage run over a batch keeps its code
        # and data in the CPU's caches (docs/benchmarks.md, "Fetcher").
        self._fetched.append((task_id, index, item, resp))
        if not announced:
            self._urgent += 1
        if self._archiver is None:
            self._archiver = asyncio.ensure_future(self._archive_fetched())
        elif not announced or len(self._fetched) >= GATHER_ITEMS or not self._under_way:
            self._end_gathering()  # someone waits, the batch is full, or no more will come

    async def _fetch_when_due(self, item: FetchItem) -> FetchResponse:
        """``item``'s response, fetched once its wait is over and a fetch slot is free
        (and, in a cluster, within its pace)."""
        if item.wait_s > 0:
            # The manager sent the item before its host's delay was over: the wait holds
            # no fetch slot. The clock is read again after each sleep: a loop's timers
            # (uvloop's count whole milliseconds from the loop's cached time) may fire
            # a little early.
            until = self._start_at(item)
            while (left := until - time.monotonic()) > 0:
                await asyncio.sleep(left)
        if item.lane_key:
            return await self._fetch_on_lane(item)
        return await self._fetch_in_slot(item)

    async def _fetch_on_lane(self, item: FetchItem) -> FetchResponse:
        """``item``'s response, fetched once the items before it on its lane are: the
        manager queued it behind them, so that it starts the moment the last ends."""
        key = item.lane_key
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.users += 1
        try:
            async with lane.lock:
                self._lane_free_at[item.item_id] = lane.free_at
                try:
                    return await self._fetch_in_slot(item)
                finally:
                    lane.free_at = time.time()
        finally:
            lane.users -= 1
            if not lane.users:
                del self._lanes[key]

    async def _fetch_in_slot(self, item: FetchItem) -> FetchResponse:
        async with self._slots:
            if self.pace is None:
                return await self._fetch(item)
            async with self.pace(item):
                return await self._fetch(item)

    def _notice(self, task_id: int, index: int, item: FetchItem, resp: FetchResponse) -> ItemResult:
        """The notice that ``item``'s request has ended (FetcherQueue.fetch_ended)."""
        held_s = _held_s(resp, time.time())
        return ItemResult(
            task_id,
            index,
            item,
            status=resp.status,
            log={"time": resp.fetch_time, "fetch_ms": round(resp.elapsed_ms, 3)},
            held_s=held_s,
            end_key=self._note_end(time.monotonic() - held_s),
            fetch_ended=True,
        )

    def _start_at(self, item: FetchItem) -> float:
        """When (monotonic seconds) ``item``, sent early (FetchItem.wait_s), may start:
        its host's delay past the end of its previous fetch, where this fetcher made it
        (exact, on its own clock); else the delay still to run when the manager sent the
        item, counted from now, after the item reached this fetcher (longer, never
        short)."""
        end = self._ends.pop(item.after_key, None) if item.after_key else None
        if end is None:
            return time.monotonic() + item.wait_s
        return end + item.after_s

    def _note_end(self, end: float) -> int:
        """Remember ``end`` (monotonic seconds) under a new random key, returned (the last
        ``ENDS_KEPT`` are kept)."""
        ends = self._ends
        key = self._keys.getrandbits(63) or 1
        ends[key] = end
        if len(ends) > ENDS_KEPT:
            ends.popitem(last=False)  # the oldest
        return key

    async def _archive_fetched(self) -> None:
        """Archive, parse and report the fetched pages, batch by batch, until none wait."""
        try:
            while self._fetched:
                if not self._urgent and len(self._fetched) < GATHER_ITEMS and self._under_way:
                    await self._gather()
                in_thread = self._lanes_in_thread and (
                    bool(self._lanes) or any(f[2].lane_key for f in self._fetched)
                )
                if self._lanes and not in_thread:
                    for _ in range(HAND_OFF_TURNS):
                        await asyncio.sleep(0)
                batch, self._fetched, self._urgent = self._fetched, [], 0
                results = (
                    await self._complete_in_thread(batch) if in_thread else self.complete(batch)
                )
                now, mono = time.time(), time.monotonic()
                lane_free_at = self._lane_free_at
                for (_, _, item, resp), result in zip(batch, results):
                    result.held_s = _held_s(resp, now)
                    if item.lane_key:
                        result.lane_free_at = lane_free_at.pop(item.item_id, -1.0)
                    if item.report_now:  # its host's next item may wait from its end
                        result.end_key = self._note_end(mono - result.held_s)
                await self.queue.report(self.worker, results)
        finally:
            self._archiver = None

    async def _complete_in_thread(
        self, batch: list[tuple[int, int, FetchItem, FetchResponse]]
    ) -> list[ItemResult]:
        """:meth:`complete` of ``batch``, run in the archive thread while the loop goes on."""
        if self._archive_thread is None:
            self._archive_thread = ThreadPoolExecutor(1, thread_name_prefix="archive")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._archive_thread, self.complete, batch)

    async def _gather(self) -> None:
        """Wait up to GATHER_S for more fetched items (see GATHER_S)."""
        loop = asyncio.get_running_loop()
        waiter = self._gathering = loop.create_future()
        timer = loop.call_later(GATHER_S, self._end_gathering)
        try:
            await waiter
        finally:
            timer.cancel()
            self._gathering = None

    def _end_gathering(self) -> None:
        waiter = self._gathering
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def process(self, task_id: int, index: int, item: FetchItem) -> ItemResult:
        """Fetch, archive, log and parse one item. Never raises for bad input or network trouble."""
        [result] = self.complete([(task_id, index, item, await self._fetch(item))])
        return result

    async def _fetch(self, item: FetchItem) -> FetchResponse:
        if item.kind == ROBOTS:
            return await self.http.fetch_robots(
                item.url, item.ip or None, max_bytes=self.settings.robots_max_bytes
            )
        # A revisit's validators make it a conditional GET (None: a plain one).
        return await self.http.fetch(
            item.url, item.ip or None, etag=item.etag, last_modified=item.last_modified
        )

    def complete(
        self, fetched: list[tuple[int, int, FetchItem, FetchResponse]]
    ) -> list[ItemResult]:
        """The results of fetched items, in three passes over them all: the exchanges
        written to WARC, then each HTML page parsed for its references, then those
        joined, normalized and packed (a pass keeps one library's code and data in the
        CPU's caches). An item that trips over a bug gets an ``internal:`` error and no
        log line, content that breaks the parser a ``parse_error``; the other items are
        not affected."""
        results: list[ItemResult] = []
        for task_id, index, item, resp in fetched:
            try:
                results.append(self._result(task_id, index, item, resp))
            except Exception as e:
                results.append(_internal_error(task_id, index, item, e))
        started = thread_time()
        self._archive(fetched, results)
        archived = thread_time()
        pages: list[tuple[FetchItem, ItemResult, PageReferences]] = []
        for (_, _, item, resp), result in zip(fetched, results):
            if result.log is None:
                continue  # an internal error, reported as it is
            if self.duplicates is not None and self.duplicates.links_known(item, result):
                continue
            found = self.extractor.references(item, result, resp)
            if found is not None:
                pages.append((item, result, found))
        if self.duplicates is not None and self.duplicates.near:
            pages = self.duplicates.near_copies(pages)
        for item, result, found in pages:
            self.extractor.links(item, result, found)
        self.stage_s["warc"] += archived - started
        # "parse" is both passes; the time spent normalizing (links) is reported apart.
        self.stage_s["parse"] += thread_time() - archived
        return results

    def _result(self, task_id: int, index: int, item: FetchItem, resp: FetchResponse) -> ItemResult:
        """The item's result with its crawl-log line (``"warc"`` is set by _archive)."""
        result = ItemResult(
            task_id,
            index,
            item,
            status=resp.status,
            error=resp.error,
            body_bytes=len(resp.body),
            retry_after_s=resp.retry_after_s,
        )
        if resp.status is not None:
            self.fetched += 1
        else:
            self.errors[resp.error or "unknown"] += 1
        result.log = {
            "time": resp.fetch_time,
            "url": item.url,
            "kind": item.kind,
            "status": resp.status,
            "error": resp.error,
            "bytes": len(resp.body),
            "content_type": resp.content_type,
            "fetch_ms": round(resp.elapsed_ms, 3),
            "ip": resp.ip,
            "depth": item.depth,
            "via": item.via,
            "truncated": resp.truncated,
            "warc": None,
        }
        if self._revisit and item.kind == PAGE and resp.status is not None:
            result.etag, result.last_modified = validators(resp.headers)
            if resp.status != 304 and not resp.truncated:
                result.digest = digest64(resp.body)
        return result

    def _archive(
        self, fetched: list[tuple[int, int, FetchItem, FetchResponse]], results: list[ItemResult]
    ) -> None:
        """Write every exchange that got a response to WARC, all in one call, and its
        location into the log line (or ``warc_write``, when the disk refused it)."""
        todo = [
            i
            for i, (result, (_, _, _, resp)) in enumerate(zip(results, fetched))
            if result.log is not None and resp.status is not None
        ]
        revisits, digests = (None, None)
        if self.duplicates is not None:
            revisits, digests = self.duplicates.copies(
                [fetched[i][3] for i in todo], [results[i] for i in todo]
            )
        if self._revisit:
            revisits = _revisit_records([fetched[i] for i in todo], revisits, digests)
        locations: list[WarcLocation | Exception]
        try:
            locations = list(
                self.warc.write_fetches(
                    [fetched[i][3] for i in todo], revisits=revisits, digests=digests
                )
            )
        except Exception:  # a bug in one exchange (nothing was written): find which
            locations = []
            for j, i in enumerate(todo):
                task_id, index, item, resp = fetched[i]
                try:
                    locations += self.warc.write_fetches(
                        [resp],
                        revisits=None if revisits is None else revisits[j : j + 1],
                        digests=None if digests is None else digests[j : j + 1],
                    )
                except Exception as e:
                    results[i] = _internal_error(task_id, index, item, e)
                    locations.append(e)
        for i, location in zip(todo, locations):
            result = results[i]
            if isinstance(location, OSError):  # a full disk must not lose the log line
                log.error("WARC write failed for %s: %s", result.item.url, location)
                result.error = "warc_write"
            elif result.log is not None:  # None: an internal error
                result.log["warc"] = str(location)
        if self.duplicates is not None and revisits is not None and digests is not None:
            self.duplicates.record([fetched[i][3] for i in todo], revisits, digests, locations)

    def stats(self) -> FetcherStats:
        return FetcherStats(
            len(self._running) + len(self._fetched),
            self.fetched,
            dict(self.errors),
            dict(self.stage_s),
        )


class Duplicates:
    """A fetcher's duplicate detection, batch by batch, over the content index that the
    fetchers of its state directory share (drumbeat.store.dedup): exact copies of an
    archived payload (``settings.dedup``: written as revisit records) and near copies
    of an earlier page's text (``settings.near_dup``: marked in the crawl log). Its CPU
    time goes to ``stage_s["dedup"]``, out of the stage it ran in."""

    def __init__(
        self,
        settings: Settings,
        content: ContentIndex,
        warc: WarcWriter,
        stage_s: defaultdict[str, float],
    ) -> None:
        self.exact = settings.dedup
        self.near = settings.near_dup
        self._settings = settings
        self._content = content
        self._warc = warc
        self._stage_s = stage_s

    def links_known(self, item: FetchItem, result: ItemResult) -> bool:
        """Whether the page's links are those of the copy archived first, and so are
        not extracted again (unless ``dedup_follow_links``): it is a revisit of another
        URL in the same directory of the same origin, against which the same relative
        links resolve to the same URLs (a copy on another host or path links elsewhere).
        A revisit of its own URL is the page fetched again because its result was lost
        (a fetcher killed, its task handed out again): its links may never have reached
        the manager. robots.txt is always read."""
        earlier = result.log.get("revisit_of") if result.log is not None else None
        return (
            isinstance(earlier, str)
            and earlier != item.url
            and _directory(earlier) == _directory(item.url)
            and item.kind != ROBOTS
            and not self._settings.dedup_follow_links
        )

    def record(
        self,
        responses: list[FetchResponse],
        revisits: list[Revisit | None],
        digests: list[str | None],
        locations: list[WarcLocation | Exception],
    ) -> None:
        """Record in the content index the payloads just archived in full. The records
        go to the OS first: a process killed after that loses none of them, so the
        index never names a record that is not in a WARC file."""
        started = thread_time()
        entries = [
            (digest, r.url, warc_date(r.fetch_time))
            for r, revisit, digest, location in zip(responses, revisits, digests, locations)
            if digest is not None and revisit is None and isinstance(location, WarcLocation)
        ]
        if entries:
            try:
                self._warc.flush()
                self._content.add_payloads(entries)
            except Exception as e:  # a broken index must not stop archiving
                log.error("content index failed, payloads not recorded: %r", e)
        self._count(thread_time() - started)

    def _count(self, cpu_s: float, within: str = "warc") -> None:
        """Count ``cpu_s`` spent within stage ``within`` as the "dedup" stage's."""
        self._stage_s["dedup"] += cpu_s
        self._stage_s[within] -= cpu_s

    def copies(
        self, responses: list[FetchResponse], results: list[ItemResult]
    ) -> tuple[list[Revisit | None] | None, list[str | None] | None]:
        """Which of ``responses`` carry a payload already archived: a revisit for each
        of those (and ``revisit_of`` in its log line), and the payload digest of each
        one checked (both None when duplicates are not looked for). A payload twice in
        ``responses`` is archived in full the first time.

        Only complete 2xx payloads count: a truncated one is not the payload the
        server sends."""
        if not self.exact:
            return None, None
        started = thread_time()
        digests = [
            sha1_label(r.body)
            if r.status is not None and 200 <= r.status < 300 and r.body and not r.truncated
            else None
            for r in responses
        ]
        checked = [i for i, digest in enumerate(digests) if digest is not None]
        try:
            earlier = self._content.find_payloads([digests[i] or "" for i in checked])
        except Exception as e:  # a broken index must not stop archiving
            log.error("content index failed, archiving in full: %r", e)
            return None, digests
        revisits: list[Revisit | None] = [None] * len(responses)
        in_batch: dict[str, tuple[str, str]] = {}
        for i, prior in zip(checked, earlier):
            digest, r = digests[i] or "", responses[i]
            prior = prior or in_batch.get(digest)
            if prior is None:
                in_batch[digest] = (r.url, warc_date(r.fetch_time))
                continue
            uri, date = prior
            revisits[i] = Revisit(IDENTICAL_PAYLOAD_DIGEST, uri, date, digest)
            log_line = results[i].log
            if log_line is not None:
                log_line["revisit_of"] = uri
                if self._settings.revisit:  # the record the revisit schedule refers to
                    log_line["revisit_of_date"] = date
        self._count(thread_time() - started)
        return revisits, digests

    def near_copies(
        self, pages: list[tuple[FetchItem, ItemResult, PageReferences]]
    ) -> list[tuple[FetchItem, ItemResult, PageReferences]]:
        """Mark each page whose text is a near copy of an earlier page's
        (``near_dup_of`` in its log line); return the pages whose links are followed."""
        started = thread_time()
        texts = []
        for _, _, found in pages:
            texts.append(found.text or "")
            found.text = None
        entries: list[tuple[int, str]] = []
        checked: list[ItemResult] = []
        for (item, result, _), fingerprint in zip(pages, simhashes(texts)):
            if fingerprint is not None:
                entries.append((fingerprint, item.url))
                checked.append(result)
                if self._settings.revisit:  # the revisit history compares visits by it
                    result.simhash = fingerprint
        try:
            earlier = self._content.near(entries)
        except Exception as e:  # a broken index must not stop the crawl
            log.error("content index failed, no near-duplicate check: %r", e)
            earlier = [None] * len(entries)
        for result, near in zip(checked, earlier):
            if near is not None and result.log is not None:
                result.log["near_dup_of"] = near
        elapsed = thread_time() - started
        self._count(elapsed, "parse")
        if self._settings.near_dup_follow_links:
            return pages
        return [p for p in pages if p[1].log is None or "near_dup_of" not in p[1].log]


def open_content_index(settings: Settings, path: Path) -> ContentIndex | None:
    """The content index at ``path`` as ``settings`` configure it, or None when neither
    exact nor near duplicates are looked for, or when it cannot be opened (logged: the
    crawl goes on, archiving every payload in full)."""
    if not (settings.dedup or settings.near_dup):
        return None
    try:
        return ContentIndex(
            path,
            max_bytes=settings.content_index_max_bytes,
            blocks=settings.near_dup_blocks,
            distance=settings.near_dup_distance,
        )
    except Exception as e:  # lmdb.Error or OSError: a full or read-only disk
        log.error("content index %s does not open, no duplicate detection: %r", path, e)
        return None


def _directory(url: str) -> str:
    """The URL up to its path's last "/": the base its relative links resolve against."""
    path = url.partition("#")[0].partition("?")[0]
    return path[: path.rfind("/") + 1]


def _revisit_records(
    fetched: list[tuple[int, int, FetchItem, FetchResponse]],
    revisits: list[Revisit | None] | None,
    digests: list[str | None] | None,
) -> list[Revisit | None] | None:
    """``revisits`` (one per exchange of ``fetched``, or None for none) with the revisits
    of the crawl's revisit schedule (drumbeat.revisit) made revisit records: a 304
    answering a conditional GET (server-not-modified: no digest of the empty body), and
    a 200 whose payload is the one the revisit was handed out with
    (identical-payload-digest; Duplicates may have made it one already). Each refers to
    the URL's last fetch by its date, and is archived in full when that is unknown."""
    out = revisits
    for j, (_, _, item, resp) in enumerate(fetched):
        if item.revisit_date is None or (out is not None and out[j] is not None):
            continue
        revisit = None
        if resp.status == 304 and (item.etag or item.last_modified):
            revisit = Revisit(SERVER_NOT_MODIFIED, item.url, item.revisit_date)
        elif (
            resp.status == 200
            and item.revisit_digest
            and not resp.truncated
            and digest64(resp.body) == item.revisit_digest
        ):
            digest = digests[j] if digests is not None else None
            revisit = Revisit(
                IDENTICAL_PAYLOAD_DIGEST,
                item.url,
                item.revisit_date,
                digest or sha1_label(resp.body),
            )
        if revisit is not None:
            if out is None:
                out = [None] * len(fetched)
            out[j] = revisit
    return out


def _held_s(resp: FetchResponse, now: float) -> float:
    """Seconds from ``resp``'s fetch's end to ``now`` (wall clock), at most a minute and
    never below 0: a wall clock may jump."""
    return min(max(0.0, now - resp.fetch_time - resp.elapsed_ms / 1000), 60.0)


def _internal_error(task_id: int, index: int, item: FetchItem, e: Exception) -> ItemResult:
    """The result of an item that tripped over a bug (``e``, logged with its traceback)."""
    log.exception("internal error on %s", item.url, exc_info=e)
    return ItemResult(task_id, index, item, error=f"internal:{type(e).__name__}")
