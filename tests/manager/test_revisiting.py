"""The manager's revisits (manager.revisiting) on a real Manager with a loopback DNS
responder; nothing is fetched: results are made here, as a fetcher reports them.

Without ``revisit`` there is no Revisiting at all; with it, pages fetched are planned,
what falls due goes through the robots gate and the politeness scheduler to a FetchItem
carrying its validators, paced at the revisit share of the fetch rate until the
frontier is done; the schedule survives a commit and reopen.
"""

from __future__ import annotations

import asyncio
from array import array
from pathlib import Path

from drumbeat.fetcher import pack_found
from drumbeat.manager import Manager
from drumbeat.manager.checkpointer import Laps
from drumbeat.manager.revisiting import Revisiting
from drumbeat.queue.base import PAGE, ROBOTS, FetchItem, ItemResult
from drumbeat.testing import FakeClock, offline_manager
from drumbeat.urls import fingerprint

ORIGINS = [f"http://a{i}.test" for i in range(5)]
URLS = [f"{o}/p/{i}" for i, o in enumerate(ORIGINS)]
CHANGES = {"revisit": True, "revisit_min_interval_s": 10.0, "revisit_max_interval_s": 60.0}


def _result(url: str, status: int = 200, *, kind: str = PAGE, digest: int = 7) -> ItemResult:
    item = FetchItem(0, url, "127.0.0.1", kind, 2, None)
    return ItemResult(
        0,
        0,
        item,
        status=status,
        digest=digest,
        etag=f'"{url[-1]}"',
        last_modified="Wed, 21 Oct 2015 07:28:00 GMT",
        log={"time": 1_700_000_000.0},
    )


def _revisiting(manager: Manager, clock: FakeClock, saved: dict | None = None) -> Revisiting:
    """The manager's Revisiting, on a FakeClock (the manager's own runs on wall time)."""
    assert manager.revisiting is not None
    manager.revisiting.close()
    state_dir = manager.settings.state_dir
    assert state_dir is not None
    r = Revisiting(manager.settings, state_dir, saved, manager.gate, manager.counters, clock=clock)
    manager.revisiting = manager.checkpointer.revisiting = r
    manager.dispatch.on_page = r.on_item
    return r


async def _to_scheduler(manager: Manager) -> None:
    """Route what waits for robots rules and let DNS answer."""
    for _ in range(10):
        manager.gate.feed(manager.clock() + 10.0)
        await asyncio.sleep(0.01)


def test_without_revisit_there_is_no_revisiting(tmp_path: Path) -> None:
    async def main() -> None:
        async with offline_manager(tmp_path) as manager:
            assert manager.revisiting is None and manager.dispatch.on_page is None

    asyncio.run(main())


def test_due_revisits_reach_the_fetchers_with_their_validators(tmp_path: Path) -> None:
    asyncio.run(_due_revisits(tmp_path))


async def _due_revisits(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)
    async with offline_manager(tmp_path, **CHANGES) as manager:
        for origin in ORIGINS:
            manager.stores.robots.record(origin, 404, None)  # no robots.txt: all allowed
        r = _revisiting(manager, clock)
        # Pages fetched: planned; a 503 (retried) and a robots.txt are not.
        r.record([_result(u) for u in URLS])
        r.record([_result(URLS[0] + "x", 503), _result(URLS[0] + "y", kind=ROBOTS)])
        r.turn(clock(), idle=lambda: False)
        assert manager.counters["revisit.queued"] == len(URLS)
        assert manager.counters["revisit.scheduled"] == len(URLS)

        # Due, but no fetch rate yet: nothing is handed out while new URLs remain.
        clock.advance(60.0)
        r.turn(clock(), idle=lambda: False)
        assert manager.counters["revisit.queued"] == len(URLS)
        # Ten fetches a second for a second: the revisit share (0.2) is two revisits.
        manager.counters["fetches"] += 10
        clock.advance(1.0)
        r.turn(clock(), idle=lambda: False)
        assert manager.counters["revisit.queued"] == len(URLS) - 2
        # The frontier done: the rest at once (up to the concurrency).
        clock.advance(1.0)
        r.turn(clock(), idle=lambda: True)
        assert manager.counters["revisit.queued"] == 0 and len(r.waiting) == len(URLS)

        await _to_scheduler(manager)
        assert manager.scheduler.queued_urls == len(URLS)
        items: list[FetchItem] = []
        for k in range(len(URLS)):  # the hosts share an IP: one request at a time
            now = manager.clock() + 100.0 * (k + 1)
            manager.dispatch.dispatch(now)
            [(item, _)] = manager.dispatch.in_flight.values()
            items.append(item)
            manager.dispatch.on_result(ItemResult(0, 0, item, status=200), now, [], [])
        assert sorted(i.url for i in items) == URLS
        for item in items:
            assert item.kind == PAGE and item.depth == 2  # the depth it was found at
            assert item.etag == f'"{item.url[-1]}"'
            assert item.last_modified == "Wed, 21 Oct 2015 07:28:00 GMT"
            assert item.revisit_digest == 7
            assert item.revisit_date == "2023-11-14T22:13:20Z"
        assert not r.waiting

        # What the revisits found: a 304, an unchanged 200, a changed one.
        back = [_result(URLS[0], 304), _result(URLS[1]), _result(URLS[2], digest=8)]
        for res, item in zip(back, sorted(items, key=lambda i: i.url)):
            res.item = item
        r.record(back)
        c = manager.counters
        assert (c["revisit.fetched"], c["revisit.not_modified"]) == (3, 1)
        assert (c["revisit.unchanged"], c["revisit.changed"]) == (1, 1)
        r.turn(clock.advance(1.0) or clock(), idle=lambda: True)
        assert manager.counters["revisit.queued"] == 3
        manager.checkpointer.commit(Laps())()  # the schedule is in the checkpoint
        assert not manager.finished()  # a crawl with revisits never runs out of work

    async with offline_manager(tmp_path, **CHANGES) as restored:
        r = _revisiting(restored, clock, (restored._resume_meta_frontier or {})["revisits"])
        assert r.revisits.stats().queued == 3
        clock.advance(120.0)
        r.turn(clock(), idle=lambda: True)
        assert sorted(r.waiting) == URLS[:3]
        r.close()


def test_a_revisit_crawl_is_never_done_but_its_page_limit_stops_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with offline_manager(tmp_path / "a", **CHANGES) as manager:
            assert manager.revisiting is not None
            assert not manager.finished()  # nothing queued, yet not done
            manager.revisiting.close()
        async with offline_manager(tmp_path / "b", max_pages=0, **CHANGES) as manager:
            assert manager.finished()
            assert manager.revisiting is not None
            manager.revisiting.close()

    asyncio.run(main())


def test_a_sitemap_lastmod_makes_a_known_url_due_and_waits_for_a_new_one(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        clock = FakeClock(1_800_000_000.0)  # wall time: sitemap dates are compared with it
        async with offline_manager(tmp_path, **CHANGES) as manager:
            manager.stores.robots.record(ORIGINS[0], 404, None)
            r = _revisiting(manager, clock)
            r.record([_result(URLS[0])])
            r.turn(clock(), idle=lambda: False)
            assert manager.counters["revisit.queued"] == 1
            # A sitemap lists it, changed after its visit, and a URL not fetched yet.
            clock.advance(30.0)
            sitemap = _result(ORIGINS[0] + "/sitemap.xml")
            new = ORIGINS[0] + "/new"
            sitemap.found = pack_found([URLS[0], new], 3, sitemap.item.url)
            # (By fingerprint; a cluster partition's found keeps only its own URLs.)
            elsewhere = fingerprint("http://b.test/")
            fps = array("Q", [fingerprint(new), elsewhere, fingerprint(URLS[0])])
            times = array("d", [clock() - 100.0, clock() - 1.0, clock() - 5.0])
            sitemap.lastmods = fps.tobytes() + times.tobytes()
            r.record([sitemap])
            assert manager.counters["revisit.sitemap_lastmods"] == 2
            clock.advance(1.0)
            r.turn(clock(), idle=lambda: True)
            assert manager.counters["revisit.lastmod_due"] == 1
            # Due at once (its last visit is over revisit_min_interval_s ago), without
            # validators: the sitemap says it changed. The new URL is not revisited.
            assert list(r.waiting) == [URLS[0]]
            assert r.waiting[URLS[0]].etag is None and r.waiting[URLS[0]].depth == 3
            r.close()

    asyncio.run(main())
