"""A piped host (delays 0; Settings.host_pipeline): the manager sends each of its
connections' lanes its share of the host's queue at once, in pinned tasks, and a lane's
notice that a request ended lets one more go on that lane. A real Manager on a temp state
dir (drumbeat.testing.offline_manager); nothing is fetched, results are made up."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from drumbeat.frontier.politeness import QueuedURL
from drumbeat.manager import Manager
from drumbeat.queue.base import FetchItem, ItemResult, Task
from drumbeat.testing import ANSWER, FakeClock, offline_manager


def _sent(manager: Manager) -> list[FetchItem]:
    return sorted(
        (item for item, _ in manager.dispatch.in_flight.values()), key=lambda i: i.item_id
    )


async def _tasks(manager: Manager) -> list[Task]:
    await asyncio.sleep(0)  # the submit under way
    return await manager.queue.claim("test", 1000, 0.01)  # type: ignore[attr-defined]


def _with_site(
    tmp_path: Path,
    test: Callable[[Manager, FakeClock], Coroutine[Any, Any, None]],
    **changes: object,
) -> None:
    async def main() -> None:
        clock = FakeClock()
        settings: dict[str, object] = {
            "host_delay_s": 0.0,
            "host_delay_min_s": 0.0,
            "ip_delay_s": 0.0,
            "host_connections": 2,
            "host_pipeline": 2,
            **changes,
        }
        async with offline_manager(tmp_path, clock=clock, **settings) as m:
            h = m.scheduler.host("a.test")
            m.scheduler.set_ip(h, ANSWER)
            for i in range(20):
                m.scheduler.push(h, QueuedURL(f"http://a.test/p/{i}", 1, None))
            await test(m, clock)

    asyncio.run(main())


def _notice(item: FetchItem) -> ItemResult:
    return ItemResult(0, 0, item, status=200, held_s=0.001, fetch_ended=True)


def test_each_lane_gets_its_share_of_the_site_in_pinned_tasks(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        d = m.dispatch
        d.dispatch(clock())
        sent = _sent(m)
        assert Counter(i.lane for i in sent) == {0: 3, 1: 3}  # 2 connections x (1 + 2)
        keys = {i.lane: i.lane_key for i in sent}
        assert len(set(keys.values())) == 2 and 0 not in keys.values()
        assert all(i.lane_key == keys[i.lane] for i in sent)
        assert all(i.report_now and i.announce_end for i in sent)
        tasks = await _tasks(m)
        assert tasks and all(t.pinned for t in tasks)
        assert sorted(i.item_id for t in tasks for i in t.items) == [i.item_id for i in sent]

        # Notices of two lane-1 requests' ends: the lanes are refilled once a place a
        # lane is free, in one dispatch: two more go on lane 1, none on lane 0.
        first_on_1, second_on_1 = [i for i in sent if i.lane == 1][:2]
        clock.advance(0.01)
        d.on_fetch_ended(_notice(first_on_1), clock())
        d.dispatch(clock())
        assert [i.item_id for i in _sent(m)] == [i.item_id for i in sent]  # none new yet
        d.on_fetch_ended(_notice(second_on_1), clock())
        d.dispatch(clock())
        more = [i for i in _sent(m) if i.item_id not in {s.item_id for s in sent}]
        assert [(i.lane, i.lane_key) for i in more] == [(1, keys[1])] * 2

    _with_site(tmp_path, test)


def test_a_requests_hand_off_on_its_lane_is_the_dispatch_latency(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        d = m.dispatch
        d.dispatch(clock())
        first, second = [i for i in _sent(m) if i.lane == 0][:2]  # second: queued behind
        clock.advance(0.01)
        d.on_result(
            ItemResult(0, 0, first, status=200, log={"time": 100.0, "fetch_ms": 1.0}),
            clock(),
            [],
            [],
        )
        behind = ItemResult(
            0, 1, second, status=200, log={"time": 100.0025, "fetch_ms": 1.0}, lane_free_at=100.001
        )
        d.on_result(behind, clock(), [], [])
        summary = d.latency_summary()
        assert summary is not None and summary["samples"] == 1
        assert abs(summary["mean_ms"] - 1.5) < 1e-6

    _with_site(tmp_path, test)


def test_a_sites_robots_request_goes_alone(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        h = m.scheduler.hosts["a.test"]
        m.scheduler.push(h, QueuedURL("http://a.test/robots.txt", 0, None, robots=True), front=True)
        d = m.dispatch
        d.dispatch(clock())
        [robots] = _sent(m)
        assert robots.kind == "robots" and robots.lane == 0

    _with_site(tmp_path, test)


def test_no_pipeline_sends_one_request_a_connection(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        m.dispatch.dispatch(clock())
        sent = _sent(m)
        assert len(sent) == 2 and all(i.lane == -1 and not i.lane_key for i in sent)
        assert not any(t.pinned for t in await _tasks(m))

    _with_site(tmp_path, test, host_pipeline=0)


def test_no_host_is_piped_while_the_fetch_slots_are_the_limit(tmp_path: Path) -> None:
    """A broad crawl without delays has hosts to spare: a request queued behind another
    would hold a fetch slot that another host could use."""

    async def test(m: Manager, clock: FakeClock) -> None:
        for n in range(10):
            h = m.scheduler.host(f"b{n}.test")
            m.scheduler.set_ip(h, ANSWER)
            for i in range(3):
                m.scheduler.push(h, QueuedURL(f"http://b{n}.test/p/{i}", 1, None))
        d = m.dispatch
        d.dispatch(clock())
        first = _sent(m)
        assert len(first) == 4 and not m.state.slots_idle  # the slots are the limit
        for item in first:
            d.on_result(ItemResult(0, 0, item, status=200), clock(), [], [])
        d.dispatch(clock())
        later = _sent(m)
        assert len(later) == 4 and all(i.lane == -1 and not i.lane_key for i in later)

    _with_site(tmp_path, test, concurrency=4, host_connections=1)
