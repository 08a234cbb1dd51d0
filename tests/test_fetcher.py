"""Fetcher.process against a real aiohttp server on loopback: fetch -> WARC -> log line -> links.

Every test runs with both HTTP backends (``backend``: AiohttpClient and CurlHttpClient).
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from drumbeat import fetcher as fetcher_module
from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.fetch.response import FetchResponse
from drumbeat.fetcher import Fetcher, open_http
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.queue.base import PAGE, ROBOTS, FetchItem, ItemResult, Task
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings
from drumbeat.store.warc import WarcWriter, iter_records
from drumbeat.urls import fingerprint

PAGE_HTML = (
    b"<html><body><a href='/a'>a</a><a href='b?x=1#f'>b</a>"
    b"<a rel=nofollow href='/secret'>s</a><a href='mailto:x@y'>m</a>"
    b"<a href='http://other.test/'>o</a></body></html>"
)


CLIENTS = {"aiohttp": AiohttpClient, "curl": CurlHttpClient}
_client_class: list[type] = [AiohttpClient]


@pytest.fixture(autouse=True, params=sorted(CLIENTS))
def backend(request: pytest.FixtureRequest):
    _client_class[0] = CLIENTS[request.param]
    yield request.param
    _client_class[0] = AiohttpClient


async def chunked_gzip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/html; charset=utf-8", "Content-Encoding": "gzip"}
    )
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    data = gzip.compress(PAGE_HTML)
    for i in range(0, len(data), 50):
        await resp.write(data[i : i + 50])
    await resp.write_eof()
    return resp


async def redirect(request: web.Request) -> web.Response:
    return web.Response(status=302, headers={"Location": "../landing/./x#frag"})


async def binary(request: web.Request) -> web.Response:
    return web.Response(body=bytes(range(256)) * 40, content_type="text/html")


async def robots(request: web.Request) -> web.Response:
    return web.Response(text="User-agent: *\nDisallow: /private/\n")


# /when/{name}: the server's monotonic clock as each request arrived and as it was answered
ARRIVALS: dict[str, float] = {}
ANSWERED: dict[str, float] = {}


async def when(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    ARRIVALS[name] = time.monotonic()
    resp = web.Response(text="<html><body>now</body></html>", content_type="text/html")
    ANSWERED[name] = time.monotonic()
    return resp


# /span/{name}?s=S: the server's monotonic clock as the request arrived and as it was
# answered, S seconds later
SPANS: dict[str, tuple[float, float]] = {}


async def span(request: web.Request) -> web.Response:
    arrived = time.monotonic()
    await asyncio.sleep(float(request.query["s"]))
    SPANS[request.match_info["name"]] = (arrived, time.monotonic())
    return web.Response(text="<html><body>spanned</body></html>", content_type="text/html")


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query["s"]))
    return web.Response(text="<html><body>late</body></html>", content_type="text/html")


async def one_by_one(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
    return [await fetcher.process(0, i, item) for i, item in enumerate(items)]


def run_fetches(
    tmp_path: Path,
    items: list[FetchItem],
    fetch_all=one_by_one,
    settings: Settings | None = None,
):
    """``fetch_all(fetcher, items)`` with a fetcher of a loopback server's pages (PORT in
    the items' URLs is its port); by default Fetcher.process item by item. ``settings``:
    the fetcher's (default: loopback allowed)."""

    async def go():
        app = web.Application()
        app.router.add_get("/chunked", chunked_gzip)
        app.router.add_get("/dir/redirect", redirect)
        app.router.add_get("/binary", binary)
        app.router.add_get("/robots.txt", robots)
        app.router.add_get("/when/{name}", when)
        app.router.add_get("/slow", slow)
        app.router.add_get("/span/{name}", span)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        http = _client_class[0](
            user_agent="drumbeat-test", policy=AddressPolicy(allow_loopback=True), resolver=None
        )
        warc = WarcWriter(tmp_path / "warc")
        fetcher = Fetcher(settings or Settings(allow_loopback=True), LocalTaskQueue(), http, warc)
        try:
            for item in items:
                item.url = item.url.replace("PORT", str(port))
            return port, await fetch_all(fetcher, items)
        finally:
            await http.close()
            warc.close()
            await runner.cleanup()

    (tmp_path / "warc").mkdir()
    return asyncio.run(go())


async def fetch_through_run(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
    queue = fetcher.queue
    running = asyncio.ensure_future(fetcher.run())
    await queue.submit([Task(0, items)])
    results: list[ItemResult] = []
    for _ in range(100):  # 100 s at most
        results += await queue.collect(4096, 1.0)
        if len(results) == len(items):
            break
    await queue.close()
    await running
    return sorted(results, key=lambda r: r.index)


def test_page_links_warc_and_log(tmp_path: Path):
    port, [r] = run_fetches(
        tmp_path,
        [FetchItem(1, "http://localhost:PORT/chunked", "127.0.0.1", PAGE, 2, "http://s.test/")],
    )
    base = f"http://localhost:{port}"
    assert r.status == 200 and r.error is None
    assert r.found is not None
    assert r.found.urls() == [f"{base}/a", f"{base}/b?x=1", "http://other.test/"]
    # Packed for URL-seen as the manager would have: fingerprints and payloads.
    assert list(memoryview(r.found.fingerprints).cast("Q")) == [
        fingerprint(u) for u in r.found.urls()
    ]
    first = r.found.payloads[: memoryview(r.found.lengths).cast("I")[0]]
    assert first == encode_payload(f"{base}/a", 3, f"{base}/chunked")
    assert r.dropped.get("nofollow") == 1 and r.dropped.get("scheme") == 1
    assert r.pld_edges is not None and r.pld_edges.pairs() == [("localhost", "other.test")]
    entry = json.loads(json.dumps(r.log))  # the manager writes it as JSON
    assert entry["status"] == 200 and entry["depth"] == 2 and entry["via"] == "http://s.test/"
    assert entry["ip"] == "127.0.0.1" and entry["warc"]
    [path] = (tmp_path / "warc").glob("*.warc.gz")
    with open(path, "rb") as f:
        records = []
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response":
                # Framing is gone from the stored body, so the head must not announce it.
                assert rec.http_headers.get_header("Transfer-Encoding") is None
                assert rec.http_headers.get_header("X-Crawler-Transfer-Encoding") == "chunked"
            records.append((rec.rec_type, rec.content_stream().read()))
    responses = [body for kind, body in records if kind == "response"]
    # The body was sent chunked and gzipped; a WARC reader must get the page back intact.
    assert responses == [PAGE_HTML]


def test_redirect_location_is_a_link_and_odd_bodies_are_harmless(tmp_path: Path):
    port, (redir, binary_page) = run_fetches(
        tmp_path,
        [
            FetchItem(1, "http://localhost:PORT/dir/redirect", "127.0.0.1"),
            FetchItem(2, "http://localhost:PORT/binary", "127.0.0.1"),
        ],
    )
    assert redir.status == 302 and redir.found is not None
    assert redir.found.urls() == [f"http://localhost:{port}/landing/x"]
    assert binary_page.status == 200 and binary_page.found is None


def test_robots_item_returns_text(tmp_path: Path):
    _, [r] = run_fetches(
        tmp_path, [FetchItem(1, "http://localhost:PORT/robots.txt", "127.0.0.1", ROBOTS)]
    )
    assert r.status == 200 and "Disallow: /private/" in (r.robots_text or "")
    assert r.found is None


def test_run_gives_what_process_gives_item_by_item(tmp_path: Path):
    """Fetcher.run archives and parses the pages fetched in one turn of the loop as a
    batch, pass by pass; each item's result is the one process() makes alone."""
    items = [
        FetchItem(1, "http://localhost:PORT/chunked", "127.0.0.1", PAGE, 2, "http://s.test/"),
        FetchItem(2, "http://localhost:PORT/dir/redirect", "127.0.0.1"),
        FetchItem(3, "http://localhost:PORT/binary", "127.0.0.1"),
        FetchItem(4, "http://localhost:PORT/robots.txt", "127.0.0.1", ROBOTS),
        FetchItem(5, "http://localhost:PORT/chunked", "127.0.0.1", PAGE, 0, None),
    ]

    async def both_ways(fetcher: Fetcher, items: list[FetchItem]):
        alone = await one_by_one(fetcher, items)
        (tmp_path / "run").mkdir()
        warc = WarcWriter(tmp_path / "run")
        try:
            batched = Fetcher(fetcher.settings, LocalTaskQueue(), fetcher.http, warc)
            return alone, await fetch_through_run(batched, items)
        finally:
            warc.close()

    def essence(r: ItemResult) -> tuple:
        log = {k: v for k, v in (r.log or {}).items() if k not in ("time", "fetch_ms", "warc")}
        found = r.found and (r.found.fingerprints, r.found.payloads, r.found.lengths)
        return (
            r.index,
            r.status,
            r.error,
            found,
            r.pld_edges and r.pld_edges.pairs(),
            r.dropped,
            r.robots_text,
            log,
        )

    port, (alone, together) = run_fetches(tmp_path, items, both_ways)
    assert [essence(r) for r in together] == [essence(r) for r in alone]
    assert [r.status for r in together] == [200, 302, 200, 200, 200]
    assert together[0].found is not None and together[0].found.urls() == [
        f"http://localhost:{port}/a",
        f"http://localhost:{port}/b?x=1",
        "http://other.test/",
    ]
    assert together[1].found is not None and together[1].found.urls() == [
        f"http://localhost:{port}/landing/x"
    ]
    assert "Disallow: /private/" in (together[3].robots_text or "")
    assert all(r.log and r.log["warc"] for r in together)
    [path] = (tmp_path / "run").glob("*.warc.gz")
    with open(path, "rb") as f:
        kinds = [rec.rec_type for rec in ArchiveIterator(f)]
    assert kinds.count("response") == 5 and kinds.count("request") == 5


def test_an_item_sent_early_waits_its_wait_before_the_request(tmp_path: Path):
    """FetchItem.wait_s (the host's delay still to run when the manager sent it), where
    the fetcher does not know the host's previous fetch: the request reaches the server
    no sooner than that long after the item reached the fetcher; an item without a wait
    goes at once."""
    wait_s = 0.3
    items = [
        FetchItem(1, "http://127.0.0.1:PORT/when/stamped", "127.0.0.1", wait_s=wait_s),
        FetchItem(2, "http://127.0.0.1:PORT/when/plain", "127.0.0.1"),
    ]
    sent: list[float] = []

    async def submitted(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
        sent.append(time.monotonic())
        return await fetch_through_run(fetcher, items)

    ARRIVALS.clear()
    _, results = run_fetches(tmp_path, items, submitted)
    assert [r.status for r in results] == [200, 200]
    assert ARRIVALS["stamped"] - sent[0] >= wait_s
    # Generous: the item without a wait is not held back by the other's.
    assert ARRIVALS["plain"] < ARRIVALS["stamped"]


@pytest.mark.parametrize("announced", [False, True])
def test_an_item_sent_early_waits_from_its_hosts_previous_fetch_here(tmp_path: Path, announced):
    """FetchItem.after_key names the host's previous fetch, made by this fetcher: the
    request waits ``after_s`` past that fetch's end (as the server saw it: no sooner),
    not ``wait_s`` from the item's arrival. The key comes with the previous fetch's
    result, or with its notice where its end was announced (FetchItem.announce_end)."""
    after_s = 0.3
    items = [
        FetchItem(
            1,
            "http://127.0.0.1:PORT/when/first",
            "127.0.0.1",
            report_now=True,
            announce_end=announced,
        ),
        FetchItem(2, "http://127.0.0.1:PORT/when/next", "127.0.0.1", wait_s=30.0),
    ]

    async def one_then_the_other(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
        queue = fetcher.queue
        running = asyncio.ensure_future(fetcher.run())
        await queue.submit([Task(0, [items[0]])])
        [first] = await queue.collect(1, 10.0)  # the notice, if announced
        assert first.fetch_ended == announced and first.end_key != 0
        items[1].after_key, items[1].after_s = first.end_key, after_s
        await queue.submit([Task(1, [items[1]])])
        results: list[ItemResult] = [] if announced else [first]
        while len(results) < 2:
            results += await queue.collect(4, 10.0)  # long before wait_s
        await queue.close()
        await running
        assert not any(r.fetch_ended for r in results)
        return sorted(results, key=lambda r: r.item.item_id)

    ARRIVALS.clear()
    _, results = run_fetches(tmp_path, items, one_then_the_other)
    assert [r.status for r in results] == [200, 200]
    assert ARRIVALS["next"] - ANSWERED["first"] >= after_s


def test_the_items_of_a_lane_are_fetched_one_after_another(tmp_path: Path):
    """Items with one FetchItem.lane_key (a piped host's connection) reach the server one
    at a time, each as the one before it ends, in the order they came; another lane runs
    beside them. Each item after the first on its lane carries
    when the one before it ended (ItemResult.lane_free_at), its start soon after."""
    lane_a, lane_b = 11, 22
    items = [
        FetchItem(
            i, f"http://127.0.0.1:PORT/span/{name}?s=0.1", "127.0.0.1", lane=lane % 3, lane_key=lane
        )
        for i, (name, lane) in enumerate(
            [("a0", lane_a), ("a1", lane_a), ("b0", lane_b), ("a2", lane_a), ("b1", lane_b)]
        )
    ]
    items.append(FetchItem(5, "http://127.0.0.1:PORT/span/free?s=0.1", "127.0.0.1"))
    SPANS.clear()
    _, results = run_fetches(tmp_path, items, fetch_through_run)
    assert [r.status for r in results] == [200] * 6
    a, b = [SPANS[n] for n in ("a0", "a1", "a2")], [SPANS[n] for n in ("b0", "b1")]
    for lane in (a, b):
        for before, after in itertools.pairwise(lane):
            assert after[0] >= before[1]  # never two at once, in their order
    assert b[0][0] < a[0][1]  # the other lane ran beside
    by_id = {r.item.item_id: r for r in results}
    assert by_id[0].lane_free_at == by_id[2].lane_free_at == -1.0
    assert by_id[5].lane_free_at == -1.0
    for i in (1, 3, 4):
        started = by_id[i].log["time"]
        assert 0 <= started - by_id[i].lane_free_at < 0.09


class _TimedComplete:
    """Fetcher.complete, recording each call's thread, items and monotonic start and end;
    the first call with a lane item first sleeps ``hold_s`` (a long parse)."""

    def __init__(self, fetcher: Fetcher, monkeypatch: pytest.MonkeyPatch, hold_s: float) -> None:
        self.calls: list[tuple[str, list[int], float, float]] = []
        self.held = asyncio.Event()  # set (in the loop) as the long one begins
        self._hold_s, self._real = hold_s, fetcher.complete
        self._loop = asyncio.get_running_loop()
        monkeypatch.setattr(fetcher, "complete", self._complete)

    def _complete(self, batch: list) -> list[ItemResult]:
        started = time.monotonic()
        if any(item.lane_key for _, _, item, _ in batch) and not self.held.is_set():
            self._loop.call_soon_threadsafe(self.held.set)
            time.sleep(self._hold_s)
        results = self._real(batch)
        ids = [item.item_id for _, _, item, _ in batch]
        self.calls.append((threading.current_thread().name, ids, started, time.monotonic()))
        return results


@pytest.mark.parametrize("cores_spare", [True, False])
def test_a_lanes_batch_is_archived_beside_the_loop_where_cores_are_spare(
    tmp_path: Path, monkeypatch, cores_spare: bool
):
    """Where a host's connections are fewer than the fetcher processes (a core each by
    default: cores are spare), a batch with a lane under way is archived and parsed in
    the fetcher's archive thread, and the loop goes on meanwhile: the lane's next
    request is sent and answered while the first page is still being parsed (here
    0.4 s). Where they are not, the batch runs in the loop, which waits for it. A batch
    without a lane item is archived in the loop either way."""
    items = [
        FetchItem(i, f"http://127.0.0.1:PORT/span/{name}?s=0.05", "127.0.0.1", lane=0, lane_key=7)
        for i, name in enumerate(["first", "next"])
    ]
    items.append(FetchItem(2, "http://127.0.0.1:PORT/span/free?s=0", "127.0.0.1"))
    settings = Settings(allow_loopback=True, host_connections=2, fetchers=3 if cores_spare else 2)

    async def lane_then_free(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
        timed = _TimedComplete(fetcher, monkeypatch, 0.4)
        queue = fetcher.queue
        running = asyncio.ensure_future(fetcher.run())
        results: list[ItemResult] = []
        for task_id, part in enumerate([items[:2], items[2:]]):
            await queue.submit([Task(task_id, part)])
            for _ in range(100):  # 100 s at most
                results += await queue.collect(4096, 1.0)
                if len(results) == len(items[: 2 + task_id]):
                    break
        await queue.close()
        await running
        calls.extend(timed.calls)
        return results

    calls: list[tuple[str, list[int], float, float]] = []
    SPANS.clear()
    _, results = run_fetches(tmp_path, items, lane_then_free, settings)
    assert sorted(r.status for r in results) == [200] * 3
    first_parsed = next(end for _, ids, _, end in calls if 0 in ids)
    threads = {i: thread for thread, ids, _, _ in calls for i in ids}
    main = threading.main_thread().name
    if cores_spare:
        assert SPANS["next"][1] < first_parsed  # answered while "first" was parsed
        assert threads[0].startswith("archive") and threads[1].startswith("archive")
    else:
        assert SPANS["next"][1] > first_parsed  # the loop waited for the parse
        assert threads[0] == threads[1] == main
    assert threads[2] == main


def test_stopping_a_fetcher_waits_for_the_batch_in_its_archive_thread(tmp_path: Path, monkeypatch):
    """Fetcher.stop returns only once the batch in its archive thread is archived: the
    caller then closes the WARC files, which no late write may reach."""
    items = [FetchItem(0, "http://127.0.0.1:PORT/span/only?s=0", "127.0.0.1", lane_key=7)]
    stopped: list[float] = []

    async def stop_while_parsing(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
        timed = _TimedComplete(fetcher, monkeypatch, 0.3)
        fetcher.start(Task(0, items))
        await asyncio.wait_for(timed.held.wait(), 10.0)
        await fetcher.stop()
        stopped.append(time.monotonic())
        calls.extend(timed.calls)
        return []

    calls: list[tuple[str, list[int], float, float]] = []
    run_fetches(tmp_path, items, stop_while_parsing, Settings(allow_loopback=True, fetchers=2))
    [(thread, ids, _, end)] = calls
    assert thread.startswith("archive") and ids == [0]
    assert end <= stopped[0]


def test_a_page_its_host_waits_for_is_announced_as_its_request_ends(tmp_path: Path):
    """An item marked announce_end (its host's next request waits for it, and its delay
    would not hide the page's archiving and parsing) is announced when its request ends
    (FetcherQueue.fetch_ended), before that work: the notice carries the status and when
    the request started, and the result follows as for any item. A failure worth a
    retry is not announced (its result decides the back-off), nor is an item not
    marked, even one reported at once."""
    items = [
        FetchItem(
            1,
            "http://127.0.0.1:PORT/when/announced",
            "127.0.0.1",
            report_now=True,
            announce_end=True,
        ),
        FetchItem(2, "http://127.0.0.1:PORT/when/plain", "127.0.0.1", report_now=True),
        FetchItem(3, "http://127.0.0.1:1/refused", "127.0.0.1", announce_end=True),
    ]

    async def each_alone(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
        queue = fetcher.queue
        running = asyncio.ensure_future(fetcher.run())
        out: list[ItemResult] = []
        for task_id, item in enumerate(items):
            await queue.submit([Task(task_id, [item])])
            got: list[ItemResult] = []
            while not got or got[-1].fetch_ended:
                got += await queue.collect(4, 10.0)
            out += got
        await queue.close()
        await running
        return out

    ARRIVALS.clear()
    _, results = run_fetches(tmp_path, items, each_alone)
    notice, first, second, third = results
    assert notice.fetch_ended and notice.item.item_id == 1 and notice.status == 200
    assert notice.log is not None and notice.log["time"] == first.log["time"]
    assert notice.end_key != 0 and notice.found is None
    assert not first.fetch_ended and first.item.item_id == 1 and first.status == 200
    assert second.item.item_id == 2 and not second.fetch_ended
    assert third.item.item_id == 3 and third.error == "connect" and not third.fetch_ended


@pytest.mark.parametrize("last", ["announced", "awaited", "batch full"])
def test_announced_pages_wait_for_each_other_to_be_archived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last: str
):
    """A page whose end was announced is archived and reported with the next ones
    (fetcher.GATHER_S, here a minute) while other fetches of the fetcher are under way.
    The wait ends when none is left (all three in one batch, once the slow one is
    answered), when an item that was not announced comes in (its host waits for its
    result, which goes out at once with the page that waited; the slow one follows),
    or when GATHER_ITEMS pages wait (here 2)."""
    monkeypatch.setattr(fetcher_module, "GATHER_S", 60.0)
    if last == "batch full":
        monkeypatch.setattr(fetcher_module, "GATHER_ITEMS", 2)
    slow_s = 0.5
    quick = FetchItem(1, "http://127.0.0.1:PORT/when/quick", "127.0.0.1")
    late = FetchItem(2, f"http://127.0.0.1:PORT/slow?s={slow_s}", "127.0.0.1")
    other = FetchItem(3, "http://127.0.0.1:PORT/when/other", "127.0.0.1")
    for item in (quick, late, other):
        item.report_now = item.announce_end = True
    other.announce_end = last != "awaited"
    batches: list[tuple[list[int], float]] = []  # item ids, seconds since submitted

    async def watched(fetcher: Fetcher, items: list[FetchItem]) -> list[ItemResult]:
        report = fetcher.queue.report
        started = time.monotonic()

        async def noted(worker: str, results: Sequence[ItemResult]) -> None:
            batches.append((sorted(r.item.item_id for r in results), time.monotonic() - started))
            await report(worker, results)

        fetcher.queue.report = noted  # type: ignore[method-assign]
        running = asyncio.ensure_future(fetcher.run())
        await fetcher.queue.submit([Task(0, items)])
        results: list[ItemResult] = []
        while len(results) < len(items):  # the results, not the notices
            results += [r for r in await fetcher.queue.collect(8, 10.0) if not r.fetch_ended]
        await fetcher.queue.close()
        await running
        return sorted(results, key=lambda r: r.index)

    _, results = run_fetches(tmp_path, [quick, late, other], watched)
    assert [r.status for r in results] == [200, 200, 200]
    if last == "announced":
        [(ids, at)] = batches
        assert ids == [1, 2, 3] and slow_s <= at < 10
    else:
        [(first, at), (then, _)] = batches
        assert first == [1, 3] and at < slow_s and then == [2]


def test_a_failing_item_does_not_take_its_batch_with_it(tmp_path: Path):
    """An item that trips over a bug gets an internal error and no log line; the pages
    archived and parsed with it are not affected, and archived once."""
    warc = WarcWriter(tmp_path)
    fetcher = Fetcher(Settings(), LocalTaskQueue(), None, warc)  # type: ignore[arg-type]
    url = "http://s.test/p"

    def fetched(index: int, head: object = b"HTTP/1.1 200 OK\r\n\r\n", body: object = PAGE_HTML):
        resp = FetchResponse(
            url=url,
            ip="127.0.0.1",
            fetch_time=1.0,
            status=200,
            request_head=b"GET /p HTTP/1.1\r\nHost: s.test\r\n\r\n",
            response_head=head,
            body=body,  # type: ignore[arg-type]
            decoded=PAGE_HTML,
            content_type="text/html",
        )
        return 0, index, FetchItem(index, url, "127.0.0.1"), resp

    # Fields of the wrong type stand for bugs: one breaks the result, one the WARC write.
    results = fetcher.complete(
        [fetched(0), fetched(1, body=None), fetched(2), fetched(3, head=None), fetched(4)]
    )
    warc.close()
    assert [r.error for r in results] == [
        None,
        "internal:TypeError",
        None,
        "internal:TypeError",
        None,
    ]
    assert results[1].log is None and results[3].log is None
    good = [results[0], results[2], results[4]]
    for r in good:
        assert r.log is not None and r.log["warc"]
        assert r.found is not None and r.found.urls() == [
            "http://s.test/a",
            "http://s.test/b?x=1",
            "http://other.test/",
        ]
    [path] = tmp_path.glob("*.warc.gz")
    offsets = [rec.offset for rec in iter_records(path) if rec.rec_type == "response"]
    assert sorted(int(r.log["warc"].rsplit(":", 1)[1]) for r in good) == offsets


def test_open_http_picks_the_backend_of_the_http_client_setting(backend: str):
    async def go():
        http, dns = open_http(Settings(http_client=backend))
        try:
            return type(http)
        finally:
            await http.close()
            await dns.close()

    assert asyncio.run(go()) is CLIENTS[backend]


def test_the_oldest_fetch_ends_are_forgotten_first(tmp_path: Path, monkeypatch):
    """Ends are kept for the items sent early after them, at most ENDS_KEPT: an item
    after a forgotten end waits from its arrival, one after a kept end from that end."""
    monkeypatch.setattr("drumbeat.fetcher.ENDS_KEPT", 2)
    fetcher = Fetcher(Settings(), LocalTaskQueue(), None, WarcWriter(tmp_path))  # type: ignore[arg-type]
    first, second, third = (fetcher._note_end(end) for end in (10.0, 20.0, 30.0))
    waiting = FetchItem(1, "http://s.test/p", "127.0.0.1", wait_s=5.0, after_s=1.0)
    waiting.after_key = first
    before = time.monotonic()
    assert fetcher._start_at(waiting) >= before + 5.0  # forgotten: 5 s from now
    waiting.after_key = second
    assert fetcher._start_at(waiting) == 21.0
    waiting.after_key = third
    assert fetcher._start_at(waiting) == 31.0
