"""The manager's revisits (manager.revisiting) on a real Manager with a loopback DNS
responder; nothing is fetched: results are made here, as a fetcher reports them.

Without ``revisit`` there is no Revisiting at all; with it, pages fetched are planned,
what falls due goes through the robots gate and the politeness scheduler to a FetchItem
carrying its validators, paced at the revisit share of the fetch rate until the
frontier is done; the schedule survives a commit and reopen, and a crash after journaled
fetches keeps the policy, the revisits out and the visits since.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from pathlib import Path

from drumbeat.fetcher_links import pack_found
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
    r = Revisiting(
        manager.settings,
        state_dir,
        saved,
        manager.gate,
        manager.counters,
        place=manager.revisiting.place,
        clock=clock,
        in_flight=lambda: manager.dispatch.limit,
    )
    manager.revisiting = manager.checkpointer.revisiting = r
    manager.dispatch.on_page = r.on_item
    manager.drops.on_drop = r.on_drop
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
        assert len(r.waiting) == len(URLS)  # (a retry gets the validators too)

        # What the revisits found: a 304, an unchanged 200, a changed one.
        back = [_result(URLS[0], 304), _result(URLS[1]), _result(URLS[2], digest=8)]
        for res, item in zip(back, sorted(items, key=lambda i: i.url)):
            res.item = item
        r.record(back)
        assert sorted(r.waiting) == URLS[3:]  # those recorded are done
        c = manager.counters
        assert (c["revisit.fetched"], c["revisit.not_modified"]) == (3, 1)
        assert (c["revisit.unchanged"], c["revisit.changed"]) == (1, 1)
        r.turn(clock.advance(1.0) or clock(), idle=lambda: True)
        assert manager.counters["revisit.queued"] == 3
        manager.checkpointer.commit(Laps())()  # the schedule is in the checkpoint
        assert not manager.finished()  # a crawl with revisits never runs out of work

    async with offline_manager(tmp_path, **CHANGES) as restored:
        path = restored.checkpoints.current()
        assert path is not None
        saved = restored.checkpoints.read_meta(path).frontier or {}
        r = _revisiting(restored, clock, saved["revisits"])
        assert r.revisits.stats().queued == 3
        clock.advance(120.0)
        r.turn(clock(), idle=lambda: True)
        assert sorted(r.waiting) == URLS[:3]
        r.close()


async def _handed_out(state: Path, in_flight: int, fetches: int, idle: bool) -> int:
    """The revisits of URLS a turn hands out, all due, after a second of ``fetches``, by
    a manager of --concurrency 2 that keeps ``in_flight`` in flight."""
    clock = FakeClock(1_800_000_000.0)
    async with offline_manager(state, **CHANGES, concurrency=2) as manager:
        manager.dispatch.limit = in_flight
        r = _revisiting(manager, clock)
        r.record([_result(u) for u in URLS])
        r.turn(clock(), idle=lambda: False)
        clock.advance(60.0)
        r.turn(clock(), idle=lambda: False)  # due; no fetch rate yet
        manager.counters["fetches"] += fetches
        clock.advance(1.0)
        r.turn(clock(), idle=lambda: idle)
        return len(URLS) - manager.counters["revisit.queued"]


def test_a_turn_hands_out_the_revisit_share_of_a_fast_crawl(tmp_path: Path) -> None:
    # The share (0.2) of a second's 50 fetches is 10 revisits: all 5 due go, although
    # the crawl keeps only 2 fetches in flight (the bucket holds a turn's refill).
    assert asyncio.run(_handed_out(tmp_path, 2, fetches=50, idle=False)) == len(URLS)


def test_a_done_frontier_hands_out_what_the_manager_keeps_in_flight(tmp_path: Path) -> None:
    # No fetch rate to go by: a done frontier's turn hands out a burst of what the
    # manager keeps in flight, its --concurrency alone (2), or what a cluster's manager
    # keeps for its fleet (dispatch.limit) when that is more.
    alone = asyncio.run(_handed_out(tmp_path / "alone", 2, fetches=0, idle=True))
    fleet = asyncio.run(_handed_out(tmp_path / "fleet", 100, fetches=0, idle=True))
    assert (alone, fleet) == (2, len(URLS))


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


def test_a_crash_keeps_the_policy_the_revisits_out_and_the_visits_since(tmp_path: Path) -> None:
    """A checkpoint, then fetches journaled, then a crash (no checkpoint after them):
    the restart has the policy's threshold and site priors, gives the revisits that
    were out at the checkpoint their validators again, and has the journaled visits
    in the history, each URL queued once."""
    clock = FakeClock(time.time())
    learned = asyncio.run(_revisit_then_crash(tmp_path, clock))
    asyncio.run(_restart_after_crash(tmp_path, learned))


def _revisit(url: str, digest: int, status: int = 200) -> ItemResult:
    """A revisit's result: its item carries what the revisit was handed out with."""
    r = _result(url, status, digest=digest)
    r.item.etag, r.item.revisit_digest, r.item.revisit_date = '"e"', 7, "2023-11-14T22:13:20Z"
    return r


async def _revisit_then_crash(tmp_path: Path, clock: FakeClock) -> dict[str, object]:
    async with offline_manager(tmp_path, **CHANGES) as manager:
        for origin in ORIGINS:
            manager.stores.robots.record(origin, 404, None)
        r = _revisiting(manager, clock)
        manager.checkpointer.initial()
        assert manager.journal is not None
        # Two visits of each page, the second a change: mu and the sites' priors are learned.
        r.record([_result(u) for u in URLS])
        r.turn(clock(), idle=lambda: False)
        clock.advance(60.0)
        r.record([_revisit(rv.url, 8) for rv in r.revisits.due(len(URLS))])
        clock.advance(60.0)
        r.turn(clock(), idle=lambda: False)
        assert r.revisits.stats().queued == len(URLS) and not r.waiting
        # Due: two are handed out (the revisit share of 10 fetches/s); one leaves.
        clock.advance(600.0)
        manager.counters["fetches"] += 10
        r.turn(clock.advance(1.0) or clock(), idle=lambda: False)
        assert len(r.waiting) == 2
        await _to_scheduler(manager)
        manager.dispatch.dispatch(manager.clock() + 100.0)
        [(flying, _)] = manager.dispatch.in_flight.values()
        assert flying.etag is not None and len(r.waiting) == 2
        [queued] = [url for url in r.waiting if url != flying.url]
        learned: dict[str, object] = {
            "mu": r.policy.mu,
            "site": r.policy.sites.rate("a0.test"),
            "global": r.policy.sites.global_rate(),
            "flying": (flying.url, flying.etag),
            "queued": (queued, r.waiting[queued].etag),
        }
        manager.checkpointer.commit(Laps())()

        # After the checkpoint: the revisit in flight comes back (304); one more is
        # handed out and fetched (changed); a page is fetched for the first time.
        popped = r.revisits.due(1)
        assert len(popped) == 1 and popped[0].url not in (flying.url, queued)
        again = _revisit(popped[0].url, 9)
        back = ItemResult(0, 0, flying, status=304, log={"time": clock()})
        first = _result("http://a0.test/new")
        done = [back, again, first]
        r.record(done)
        manager.journal.note(done)
        await manager.journal.commit_now()
        learned["recorded"] = manager.counters["revisit.fetched"]
        manager.journal.close()  # a crash: no checkpoint after these
        r.close()
        return learned


async def _restart_after_crash(tmp_path: Path, learned: dict[str, object]) -> None:
    async with offline_manager(tmp_path, **CHANGES) as manager:
        r = manager.revisiting
        assert r is not None
        # The policy as it was, not relearned.
        assert r.policy.mu == learned["mu"]
        assert r.policy.sites.rate("a0.test") == learned["site"]
        assert r.policy.sites.global_rate() == learned["global"]
        # The journal's visits are in the history: the revisit that was in flight and
        # the new page are queued; the one handed out after the checkpoint is still
        # queued from the checkpoint (not twice): 5 - 2 out + 1 back + 1 new.
        assert manager.counters["revisit.fetched"] == learned["recorded"]
        r.revisits.plan()
        assert r.revisits.stats().queued == len(URLS) - 2 + 2
        assert r.revisits.history.urls == len(URLS) + 1
        # The revisit waiting at the checkpoint leaves as a conditional GET again; the
        # one in flight was journaled as done, and is skipped.
        url, etag = learned["queued"]  # type: ignore[misc]
        await _to_scheduler(manager)
        manager.dispatch.dispatch(manager.clock() + 100.0)
        [(item, _)] = manager.dispatch.in_flight.values()
        assert (item.url, item.etag) == (url, etag)
        assert item.revisit_digest == 8 and item.revisit_date is not None
        assert manager.counters["journal_skipped"] == 1
        r.close()


def test_revisits_share_their_pld_budget_with_new_urls(tmp_path: Path) -> None:
    """Due revisits enter BEAST: a PLD's budget (2 here) rations them a turn, as it
    does the PLD's new URLs; without it all six would reach the hosts' queues."""

    async def main() -> None:
        clock = FakeClock(1_800_000_000.0)
        pages = [f"http://b.test/p/{i}" for i in range(6)]
        async with offline_manager(tmp_path, budget_default=2, **CHANGES) as manager:
            r = _revisiting(manager, clock)
            r.record([_result(u) for u in pages])
            r.turn(clock(), idle=lambda: False)
            clock.advance(60.0)
            r.turn(clock(), idle=lambda: True)
            assert len(r.waiting) == len(pages)
            beast = manager.stores.beast
            assert beast.stats().placed == len(pages)
            assert len(beast.read(100)) == 2  # this turn's share of b.test
            assert beast.stats().queued == len(pages) - 2
            r.close()

    asyncio.run(main())


def test_a_revisit_dropped_by_a_cap_is_rescheduled_one_robots_disallows_is_not(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        clock = FakeClock(1_800_000_000.0)
        capped, disallowed = "http://a0.test/p/0", "http://a1.test/p/1"
        async with offline_manager(tmp_path, max_pages_per_host=1, **CHANGES) as manager:
            manager.stores.robots.record("http://a0.test", 404, None)
            manager.stores.robots.record("http://a1.test", 200, "User-agent: *\nDisallow: /p/")
            r = _revisiting(manager, clock)
            r.record([_result(capped), _result(disallowed)])
            manager.scope.count("a0.test", 100)  # its one page: a0.test is at its cap
            r.turn(clock(), idle=lambda: False)
            clock.advance(60.0)
            r.turn(clock(), idle=lambda: True)
            # The disallowed one is dropped as BEAST places it (robots rules in RAM).
            assert r.revisits.stats().queued == 0 and list(r.waiting) == [capped]
            await _to_scheduler(manager)
            manager.dispatch.dispatch(manager.clock() + 100.0)
            c = manager.counters
            assert c["dropped.robots_disallowed"] == 1 and c["dropped.max_pages_per_host"] == 1
            assert not manager.dispatch.in_flight and not r.waiting
            # The capped one is due again a new URL's interval later; the other is gone.
            assert (c["revisit.deferred"], c["revisit.dropped"]) == (1, 1)
            assert r.revisits.stats().queued == 1
            assert r.revisits.due(10) == []
            clock.advance(r.policy.default_interval_s + 1.0)
            [again] = r.revisits.due(10)
            assert (again.url, again.etag) == (capped, '"0"')
            r.close()

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
