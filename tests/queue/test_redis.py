"""drumbeat.queue.redis against a real redis-server on loopback (tests/conftest.py).

Managers and fetchers run in one event loop here, each with its own RedisLink as its own
process would have; background ticks are slowed down (``tick_s``) and the tests call
``tick()`` themselves where the order of events matters.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import pickle
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from drumbeat.fetcher_links import pack_edges, pack_found
from drumbeat.queue.base import FetchItem, FoundEdges, FoundURLs, ItemResult, Task
from drumbeat.queue.partition import partition_of_pld
from drumbeat.queue.redis import (
    CLAIM,
    FLEET_INTERVAL_S,
    MAX_FLEET_IN_FLIGHT,
    TAKE_INBOX,
    WORKER_DIED,
    ClusterError,
    Keys,
    RedisFetcherQueue,
    RedisLink,
    RedisManagerQueue,
    dumps,
    in_flight_budget,
    loads,
)
from drumbeat.testing import FakeClock, RedisServer

K = Keys()
TTL_MS = 30_000  # the fetcher's info TTL, as beat() takes it


def run(fn: Callable[[AsyncExitStack], Awaitable[Any]]) -> Any:
    """``asyncio.run(fn(stack))``, closing what the test opened on the stack at the end."""

    async def main() -> Any:
        async with AsyncExitStack() as stack:
            return await fn(stack)

    return asyncio.run(main())


async def link(stack: AsyncExitStack, url: str, **kw: Any) -> RedisLink:
    made = RedisLink(url, **kw)
    stack.push_async_callback(made.close)
    return made


async def manager(
    stack: AsyncExitStack, url: str, crawl: str = "c", part: int = 0, parts: int = 1, **kw: Any
) -> RedisManagerQueue:
    kw.setdefault("tick_s", 3600.0)  # ticks come from the test (one runs at open)
    queue = RedisManagerQueue(await link(stack, url), crawl, part, parts, **kw)
    await queue.open("{}")
    stack.push_async_callback(queue.close)
    return queue


async def fetcher(
    stack: AsyncExitStack, url: str, name: str = "f1", **kw: Any
) -> RedisFetcherQueue:
    """A fetcher queue that does not heartbeat by itself (its claims and beat() do)."""
    queue = RedisFetcherQueue(await link(stack, url), name, **kw)
    stack.push_async_callback(queue.close)
    return queue


def make_tasks(n: int, per_task: int = 1, first_id: int = 1, host: str = "h") -> list[Task]:
    out = []
    for t in range(first_id, first_id + n):
        items = [
            FetchItem(t * 100 + i, f"http://{host}{t}.test/{i}", "127.0.0.1")
            for i in range(per_task)
        ]
        out.append(Task(t, items))
    return out


def ok(task: Task, index: int, **kw: Any) -> ItemResult:
    return ItemResult(task.task_id, index, task.items[index], status=200, **kw)


async def collect_all(queue: RedisManagerQueue, n: int, timeout_s: float = 5.0) -> list[ItemResult]:
    out: list[ItemResult] = []
    end = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < end:
        out += await queue.collect(1000, 0.2)
    return out


def rows(results: list[ItemResult]) -> list[tuple[int, int, int | None, str | None]]:
    return sorted((r.task_id, r.index, r.status, r.error) for r in results)


# -- pickles --------------------------------------------------------------------------


def test_loads_builds_queue_classes() -> None:
    task = Task(3, [FetchItem(1, "http://a.test/", "10.0.0.1", depth=2)], partition=1)
    result = ItemResult(
        3,
        0,
        task.items[0],
        status=200,
        found=FoundURLs(b"\1" * 8, b"http://b.test/\n3\nv", b"\x12\0\0\0"),
        pld_edges=FoundEdges("a.test", b"\2" * 8, b"b.test", b"\6\0\0\0"),
        dropped={"scope": 2},
        log={"k": [1, 2.5, None]},
    )
    assert loads(dumps(task)) == task
    assert loads(dumps((7, [result]))) == (7, [result])
    # Results pickle by position, so a field is only ever added at the end: what an
    # older drumbeat pickled (every field but the last ones, by_partition, then
    # fetch_ended, then lane_free_at) loads with each field in its place.
    last = ["by_partition", "fetch_ended", "lane_free_at"]
    assert [f.name for f in fields(ItemResult)][-3:] == last
    cls, values = result.__reduce__()
    assert cls is ItemResult and values[-3:] == (None, False, -1.0)
    assert ItemResult(*values[:-1]) == ItemResult(*values[:-2]) == result
    assert ItemResult(*values[:-3]) == result
    # So are a task's and an item's: a pinned task, an item's lane.
    assert [f.name for f in fields(Task)][-1] == "pinned"
    assert [f.name for f in fields(FetchItem)][-2:] == ["lane", "lane_key"]
    assert Task(*task.__reduce__()[1][:-1]) == task


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("echo pwned",))


class _Spawn:
    def __reduce__(self) -> tuple[Any, ...]:
        return (subprocess.Popen, (["true"],))


@pytest.mark.parametrize(
    "blob",
    [
        pickle.dumps(_Boom()),
        pickle.dumps(_Spawn()),
        pickle.dumps([Task(1, [])], protocol=0).replace(b"drumbeat.queue.base", b"builtins"),
        pickle.dumps(Path("/etc")),
    ],
    ids=["os.system", "subprocess.Popen", "builtins.Task", "pathlib"],
)
def test_loads_refuses_any_other_class(blob: bytes) -> None:
    with pytest.raises(pickle.UnpicklingError, match="is not a queue class"):
        loads(blob)


# -- start and stop -------------------------------------------------------------------


def test_close_returns_with_a_tick_under_way(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        queue = RedisManagerQueue(await link(stack, redis_server.url), "c", 0, 1)
        await queue.open("{}")
        await asyncio.sleep(0)  # its first tick starts, sending to Redis
        await asyncio.wait_for(queue.close(), timeout=1.0)

    run(go)


# -- submit, claim, report ------------------------------------------------------------


def test_submit_claim_report_round_trip(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        url = redis_server.url
        mgr = await manager(stack, url, "c")
        other = await manager(stack, url, "d")  # numbers its tasks as "c" does
        f = await fetcher(stack, url)
        sent, sent_d = make_tasks(3, per_task=2), make_tasks(3, per_task=2, host="d")
        await mgr.submit(sent)
        await other.submit(sent_d)
        claimed: list[Task] = []
        while len(claimed) < 6:
            got = await f.claim("f1", 10, 1.0)
            assert got
            claimed += got
        ids = [t.task_id for t in claimed]
        assert len(set(ids)) == 6, "ids are made unique within the fetcher"
        by_crawl = {c: [t for t in claimed if f.crawl_of(t.task_id) == c] for c in "cd"}
        assert [t.items for t in by_crawl["c"]] == [t.items for t in sent]
        assert [t.items for t in by_crawl["d"]] == [t.items for t in sent_d]
        assert f.held_items == 12

        mine = by_crawl["c"]
        tasks_key, worker_key = K.crawl("c", "tasks"), K.worker("f1")
        await f.report("f1", [ok(mine[0], 0), ok(mine[0], 1), ok(mine[1], 0)])
        first = await collect_all(mgr, 3)
        assert rows(first) == [(1, 0, 200, None), (1, 1, 200, None), (2, 0, 200, None)]
        assert [x.item for x in first] == [sent[0].items[0], sent[0].items[1], sent[1].items[0]]
        redis = f.link.redis
        assert sorted(await redis.hkeys(tasks_key)) == [b"0:1:2:2", b"0:1:3:2"], "task 1 is over"
        assert len(await redis.lrange(worker_key, 0, -1)) == 5

        # A task whose results all came is not reported again, nor collected twice.
        await f.report("f1", [ok(mine[0], 0), ok(mine[0], 1)])
        await f.report("f1", [ok(mine[1], 1), ok(mine[2], 0), ok(mine[2], 1)])
        second = await collect_all(mgr, 3)
        assert rows(second) == [(2, 1, 200, None), (3, 0, 200, None), (3, 1, 200, None)]
        assert await mgr.collect(1000, 0.2) == []
        assert await redis.hlen(tasks_key) == 0
        assert sorted(await redis.lrange(worker_key, 0, -1)) == [
            b"d\x1f0:1:" + str(i).encode() + b":2" for i in (1, 2, 3)
        ]
        assert mgr.stats().unreported_items == 0 and mgr.stats().completed_tasks == 3
        assert f.held_items == 6

    run(go)


def test_a_result_reported_twice_does_not_end_its_task_early(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> list[tuple[Any, ...]]:
        mgr = await manager(stack, redis_server.url)
        f = await fetcher(stack, redis_server.url)
        await mgr.submit(make_tasks(1, per_task=2))
        [task] = await f.claim("f1", 1, 1.0)
        await f.report("f1", [ok(task, 0)])
        await f.report("f1", [ok(task, 0)])  # a repeated result of the same item
        assert f.held_items == 1, "item 1 is still to be reported"
        await f.report("f1", [ok(task, 1)])
        return rows(await collect_all(mgr, 2, timeout_s=1.0))

    assert run(go) == [(1, 0, 200, None), (1, 1, 200, None)]


def test_a_retried_submit_queues_its_task_once(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        mgr = await manager(stack, redis_server.url)
        f = await fetcher(stack, redis_server.url)
        [task] = make_tasks(1)
        await mgr.submit([task])
        await mgr.submit([task])
        assert await f.link.redis.llen(K.crawl("c", "pending")) == 1
        assert len(await f.claim("f1", 10, 0.5)) == 1
        assert await f.claim("f1", 10, 0.2) == []

    run(go)


# -- weighted fair claims -------------------------------------------------------------


def test_a_fetcher_counts_the_time_it_waited_for_tasks_and_reports(
    redis_server: RedisServer,
) -> None:
    # What bench cluster reads to tell "the managers were the limit" from "the fetchers
    # were": the wall time spent in claims that found nothing, and none in one that did;
    # and the time its reports waited for Redis.
    async def go(stack: AsyncExitStack) -> None:
        mgr = await manager(stack, redis_server.url)
        f = await fetcher(stack, redis_server.url)
        started = time.monotonic()
        assert await f.claim("f1", 10, 0.3) == []
        assert 0.2 <= f.waited_s <= time.monotonic() - started
        waited = f.waited_s
        await mgr.submit(make_tasks(1))
        (task,) = await f.claim("f1", 10, 1.0)
        assert f.waited_s == waited
        assert f.reporting_s == 0
        await f.report("f1", [ok(task, 0)])
        assert f.reporting_s > 0

    run(go)


def test_claims_share_crawls_by_weight_and_skip_idle_ones(redis_server: RedisServer) -> None:
    claims, p = 400, 3 / 4
    url = redis_server.url

    async def go(stack: AsyncExitStack) -> tuple[dict[str, int], list[str], int]:
        heavy = await manager(stack, url, "heavy", weight=3.0)
        light = await manager(stack, url, "light", weight=1.0)
        await manager(stack, url, "empty", weight=5.0)  # registered, nothing pending
        await heavy.submit(make_tasks(claims + 50))
        await light.submit(make_tasks(claims + 50))
        f = await fetcher(stack, url)
        share = {"heavy": 0, "light": 0}
        for _ in range(claims):
            [task] = await f.claim("f1", 1, 1.0)
            share[f.crawl_of(task.task_id)] += 1
        # Only "light" has tasks left: every claim gets one at once (work-conserving).
        redis = f.link.redis
        await redis.delete(K.crawl("heavy", "pending"))
        left = await redis.llen(K.crawl("light", "pending"))
        started = time.monotonic()
        drained = []
        for _ in range(left):
            drained += [f.crawl_of(t.task_id) for t in await f.claim("f1", 1, 1.0)]
        assert time.monotonic() - started < 0.1 * left
        return share, drained, left

    share, drained, left = run(go)
    sigma = math.sqrt(claims * p * (1 - p))
    assert abs(share["heavy"] - claims * p) < 4 * sigma, share
    assert share["heavy"] + share["light"] == claims
    assert left > 0 and drained == ["light"] * left


# -- fetchers that go away ------------------------------------------------------------


def test_a_fetcher_that_stops_heartbeating_loses_its_tasks(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        url = redis_server.url
        # Wide margins: the suite runs on busy workers, and a tick that comes late must
        # neither find "slow" dead too soon nor "live" dead at all.
        mgr = await manager(stack, url, heartbeat_timeout_s=1.0)
        f = await fetcher(stack, url, "slow", heartbeat_timeout_s=1.0)
        live = await fetcher(stack, url, "live", heartbeat_timeout_s=1.0)
        await mgr.submit(make_tasks(2, per_task=2))
        first, second = await f.claim("slow", 4, 1.0)  # 4 items: both tasks
        await f.report("slow", [ok(first, 0)])
        assert rows(await collect_all(mgr, 1)) == [(1, 0, 200, None)]
        await mgr.submit(make_tasks(1, first_id=3))
        [kept] = await live.claim("live", 1, 1.0)

        await live.beat(TTL_MS)
        await mgr.upkeep.tick()
        assert await mgr.collect(100, 0.1) == [], "not dead yet"
        for _ in range(4):  # "slow" silent for 1.2 s or more, "live" for 0.3 s at most
            await asyncio.sleep(0.3)
            await live.beat(TTL_MS)
        await mgr.upkeep.tick()
        died = await collect_all(mgr, 3)
        assert rows(died) == [
            (1, 1, None, WORKER_DIED),
            (2, 0, None, WORKER_DIED),
            (2, 1, None, WORKER_DIED),
        ]
        assert died[0].item == first.items[1]
        redis = mgr.link.redis
        assert await redis.hkeys(K.crawl("c", "tasks")) == [b"0:1:3:1"], "the live one's"
        assert await redis.exists(K.worker("slow")) == 0
        assert await redis.zrange(K.workers, 0, -1) == [b"live"]

        # Late results of a dead fetcher are not taken (the items are being retried).
        await f.report("slow", [ok(first, 1)])
        assert await mgr.collect(100, 0.2) == []
        await f.beat(TTL_MS)
        assert f.held_items == 0, "it noticed it was taken for dead"
        await f.report("slow", [ok(second, 0), ok(second, 1)])
        assert await mgr.collect(100, 0.2) == []
        assert await redis.llen(K.part("c", "results", 0)) == 0

        await live.report("live", [ok(kept, 0)])
        assert rows(await collect_all(mgr, 1)) == [(3, 0, 200, None)]
        assert mgr.stats().unreported_items == 0

    run(go)


def test_a_closing_fetcher_gives_its_tasks_back_at_once(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        mgr = await manager(stack, redis_server.url)
        f = await fetcher(stack, redis_server.url)
        await f.start()
        await mgr.submit(make_tasks(2, per_task=2))
        first, _ = await f.claim("f1", 4, 1.0)  # 4 items: both tasks
        await f.report("f1", [ok(first, 0)])
        await f.close()
        assert f.closed and await f.claim("f1", 1, 0.1) == []
        got = await collect_all(mgr, 4, timeout_s=2.0)  # no tick: no reaper involved
        assert rows(got) == [
            (1, 0, 200, None),
            (1, 1, None, WORKER_DIED),
            (2, 0, None, WORKER_DIED),
            (2, 1, None, WORKER_DIED),
        ]
        redis = mgr.link.redis
        assert await redis.hlen(K.crawl("c", "tasks")) == 0
        assert await redis.exists(K.worker("f1"), K.worker_info("f1")) == 0
        assert await redis.zcard(K.workers) == 0

    run(go)


# -- links forwarded between partitions -----------------------------------------------


def _sites_by_owner(parts: int, per_part: int) -> dict[int, list[str]]:
    owners: dict[int, list[str]] = {p: [] for p in range(parts)}
    i = 0
    while min(map(len, owners.values())) < per_part:
        site = f"site{i}.test"
        if len(owners[partition_of_pld(site, parts)]) < per_part:
            owners[partition_of_pld(site, parts)].append(site)
        i += 1
    return owners


def _page_result(task: Task, sites: list[str]) -> ItemResult:
    """A fetch of task's item 0 that found a link to each of ``sites`` (and PLD edges)."""
    links = [f"http://www.{s}/p" for s in sites]
    return ok(
        task,
        0,
        found=pack_found(links, 1, task.items[0].url),
        pld_edges=pack_edges("h1.test", sorted(sites)),
    )


async def _wait_for(cond: Callable[[], Awaitable[bool]], timeout_s: float = 2.0) -> None:
    end = time.monotonic() + timeout_s
    while not await cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.01)


def test_links_of_other_partitions_are_forwarded_until_acknowledged(
    redis_server: RedisServer,
) -> None:
    owners = _sites_by_owner(2, 3)
    url = redis_server.url

    async def go(stack: AsyncExitStack) -> None:
        m0 = await manager(stack, url, "fw", 0, 2)
        m1 = RedisManagerQueue(await link(stack, url), "fw", 1, 2, tick_s=3600.0)
        await m1.open("{}")
        f = await fetcher(stack, url)
        [task] = make_tasks(1)
        await m0.submit([task])
        [claimed] = await f.claim("f1", 1, 1.0)
        mixed = [owners[0][0], owners[1][0], owners[0][1], owners[1][1], owners[1][2]]
        await f.report("f1", [_page_result(claimed, mixed)])

        [result] = await collect_all(m0, 1)
        assert result.found is not None and result.pld_edges is not None
        assert result.found.urls() == [f"http://www.{s}/p" for s in owners[0][:2]]
        assert [t for _, t in result.pld_edges.pairs()] == sorted(owners[0][:2])
        assert m0.inbox.take() == ([], [])

        want_urls = [f"http://www.{s}/p" for s in owners[1]]
        want_targets = sorted(owners[1])
        assert await m1.collect(100, 1.0) == []  # no result of its own, but links
        urls, edges = m1.inbox.take()
        assert [u for found in urls for u in found.urls()] == want_urls
        assert [t for e in edges for _, t in e.pairs()] == want_targets
        assert all(e.source == "h1.test" for e in edges)
        assert m1.inbox.take() == ([], [])
        taken = K.part("fw", "taken", 1)
        redis = f.link.redis
        assert await redis.llen(taken) == 1
        assert await redis.llen(K.part("fw", "inbox", 1)) == 0

        # Killed before a checkpoint held them: the next run of partition 1 gets them again.
        await m1.close()
        again = await manager(stack, url, "fw", 1, 2)
        assert await again.collect(100, 1.0) == []
        urls, edges = again.inbox.take()
        assert [u for found in urls for u in found.urls()] == want_urls
        assert [t for e in edges for _, t in e.pairs()] == want_targets
        assert await redis.llen(taken) == 1
        mark = again.inbox.mark()
        assert mark == 1
        await asyncio.sleep(0.05)
        assert await redis.llen(taken) == 1, "kept until acknowledged"
        again.inbox.acknowledge(mark)

        async def trimmed() -> bool:
            return await redis.llen(taken) == 0

        await _wait_for(trimmed)
        await again.close()
        third = await manager(stack, url, "fw", 1, 2)
        assert await third.collect(100, 0.3) == []
        assert third.inbox.take() == ([], [])

    run(go)


# -- the end of a crawl ---------------------------------------------------------------


def test_the_crawl_is_done_once_every_partition_is_idle(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        m0 = await manager(stack, redis_server.url, "t", 0, 2)
        m1 = await manager(stack, redis_server.url, "t", 1, 2)
        assert m0.inbox.idle(True) is False
        await m0.upkeep.tick()
        assert m0.inbox.idle(True) is False, "partition 1 has not said it is idle"
        await m0.upkeep.tick()
        assert m0.inbox.idle(True) is False
        assert m1.inbox.idle(True) is False
        await m1.upkeep.tick()
        assert m1.inbox.idle(True) is True
        await m0.upkeep.tick()
        assert m0.inbox.idle(True) is True

    run(go)


def test_links_on_their_way_keep_the_crawl_going(redis_server: RedisServer) -> None:
    owners = _sites_by_owner(2, 1)
    url = redis_server.url

    async def go(stack: AsyncExitStack) -> None:
        m0 = await manager(stack, url, "t", 0, 2)
        m1 = await manager(stack, url, "t", 1, 2)
        f = await fetcher(stack, url)
        m1.inbox.idle(True)
        await m1.upkeep.tick()  # partition 1 has nothing left; partition 0 has a task out
        await m0.submit(make_tasks(1))
        [task] = await f.claim("f1", 1, 1.0)
        await f.report("f1", [_page_result(task, [owners[1][0]])])
        assert len(await collect_all(m0, 1)) == 1
        m0.inbox.idle(True)
        await m0.upkeep.tick()
        assert m0.inbox.idle(True) is False, "partition 1 has links in its inbox"
        await m1.upkeep.tick()  # it has not collected them yet
        await m0.upkeep.tick()
        assert m0.inbox.idle(True) is False and m1.inbox.idle(True) is False

        assert await m1.collect(100, 1.0) == []
        urls, _ = m1.inbox.take()
        assert [u for found in urls for u in found.urls()] == [f"http://www.{owners[1][0]}/p"]
        # Its links went through URL-seen and it found nothing new to fetch.
        assert m1.inbox.idle(True) is False
        await m1.upkeep.tick()
        await m0.upkeep.tick()
        assert m1.inbox.idle(True) is True and m0.inbox.idle(True) is True

    run(go)


def test_links_taken_but_not_yet_read_keep_the_crawl_going(redis_server: RedisServer) -> None:
    owners = _sites_by_owner(2, 1)
    url = redis_server.url

    async def go(stack: AsyncExitStack) -> None:
        m0 = await manager(stack, url, "t", 0, 2)
        m1 = await manager(stack, url, "t", 1, 2)
        f = await fetcher(stack, url)
        m1.inbox.idle(True)
        await m1.upkeep.tick()
        await m0.submit(make_tasks(1))
        [task] = await f.claim("f1", 1, 1.0)
        await f.report("f1", [_page_result(task, [owners[1][0]])])
        assert len(await collect_all(m0, 1)) == 1
        m0.inbox.idle(True)
        await m0.upkeep.tick()
        # The manager's collect (a background future in manager.core) takes the links;
        # the background tick runs before the manager's loop calls take() and idle().
        assert await m1.collect(100, 1.0) == []
        await m1.upkeep.tick()
        await m0.upkeep.tick()
        assert m0.inbox.idle(True) is False, "partition 1 has not read its links yet"
        urls, _ = m1.inbox.take()
        assert len(urls) == 1
        assert m1.inbox.idle(False) is False

    run(go)


# -- epochs ---------------------------------------------------------------------------


def test_a_reopened_manager_drops_the_tasks_and_results_of_its_last_run(
    redis_server: RedisServer,
) -> None:
    url = redis_server.url

    async def go(stack: AsyncExitStack) -> None:
        old = RedisManagerQueue(await link(stack, url), "e", 0, 1, tick_s=3600.0)
        await old.open("{}")
        f = await fetcher(stack, url, "f1")
        other = await fetcher(stack, url, "f2")
        await old.submit(make_tasks(5, per_task=2))
        held, done = await f.claim("f1", 4, 1.0)  # 4 items: two tasks
        [orphan] = await other.claim("f2", 1, 1.0)
        await f.report("f1", [ok(done, 0), ok(done, 1)])
        # The old run is killed (no close): a new run of partition 0 starts.
        new = await manager(stack, url, "e", 0, 1)
        assert new.epoch == old.epoch + 1
        redis = f.link.redis
        assert await redis.llen(K.crawl("e", "pending")) == 0, "its 2 pending tasks withdrawn"
        assert await redis.llen(K.part("e", "results", 0)) == 0, "old results dropped"
        assert await f.claim("f1", 10, 0.2) == []

        await new.submit(make_tasks(1, per_task=1, first_id=1))  # ids restart at 1
        [fresh] = await f.claim("f1", 1, 1.0)
        await f.report("f1", [ok(held, 0), ok(held, 1)])  # of the old run: ignored
        await other.close()  # its task of the old run comes back as an orphan: ignored
        assert await new.collect(100, 0.3) == []
        await f.report("f1", [ok(fresh, 0)])
        got = await collect_all(new, 1)
        assert rows(got) == [(1, 0, 200, None)] and got[0].item == fresh.items[0]
        assert orphan.task_id != fresh.task_id

    run(go)


# -- Redis going away -----------------------------------------------------------------


def test_a_call_waits_out_a_redis_outage(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def go(stack: AsyncExitStack) -> tuple[Any, float]:
        lk = await link(stack, redis_server.url, max_backoff_s=0.2)
        await lk.call(lambda: lk.redis.set("k", "v"), "write")
        redis_server.stop()
        restart = threading.Timer(1.0, redis_server.start)
        restart.start()
        try:
            started = time.monotonic()
            got = await lk.call(lambda: lk.redis.get("k"), "read")
            return got, time.monotonic() - started
        finally:
            restart.join()

    caplog.set_level(logging.WARNING, logger="drumbeat.cluster")
    got, waited = run(go)
    assert got == b"v", "the data came back with the server"
    assert waited >= 0.9
    messages = [r.getMessage() for r in caplog.records if r.name == "drumbeat.cluster"]
    assert len(messages) == 2, messages
    assert "unreachable" in messages[0] and "(read:" in messages[0]
    assert "reachable again" in messages[1]


def test_a_wrong_password_is_one_clear_error(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", password="right-one") as server:
        wrong = server.url.replace("right-one", "wrong-one")

        async def go(stack: AsyncExitStack) -> None:
            good = await link(stack, server.url)
            await good.check()
            bad = await link(stack, wrong)
            with pytest.raises(ClusterError) as info:
                await bad.check()
            message = str(info.value)
            assert "\n" not in message
            assert f"127.0.0.1:{server.port}" in message
            assert "wrong-one" not in message, "the password is not logged"
            none = await link(stack, server.url.replace(":right-one@", ""))
            with pytest.raises(ClusterError):
                await none.check()

        run(go)


# -- IP leases ------------------------------------------------------------------------


def test_an_ip_lease_keeps_requests_apart_cluster_wide(redis_server: RedisServer) -> None:
    delay_s = 0.2

    async def go(stack: AsyncExitStack) -> tuple[float, float, float]:
        a = await fetcher(stack, redis_server.url, "a")
        b = await fetcher(stack, redis_server.url, "b")
        inside = asyncio.Event()
        times: dict[str, float] = {}

        async def first() -> None:
            async with a.ip_lease("10.0.0.7", delay_s, lease_s=30.0):
                inside.set()
                await asyncio.sleep(0.1)
                times["leaving"] = time.monotonic()
            times["left"] = time.monotonic()

        async def second() -> None:
            await inside.wait()
            async with b.ip_lease("10.0.0.7", delay_s, lease_s=30.0):
                times["entered"] = time.monotonic()

        await asyncio.gather(first(), second())
        assert b.counters["ip_waits"] >= 1
        # Another IP is not held up.
        started = time.monotonic()
        async with b.ip_lease("10.0.0.8", delay_s, lease_s=30.0):
            assert time.monotonic() - started < 0.5  # no wait for a delay (0.2 s)
        return times["leaving"], times["left"], times["entered"]

    leaving, left, entered = run(go)
    assert entered >= leaving + delay_s - 0.003, entered - leaving
    # Not much later either (a waiter polls at most 20 ms apart; a busy machine adds some).
    assert entered <= left + delay_s + 0.15, entered - left


def test_an_ip_lease_without_delay_does_not_touch_redis(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        f = await fetcher(stack, redis_server.url)
        redis_server.stop()  # any call would wait for it

        async def lease() -> None:
            async with f.ip_lease("10.0.0.7", 0.0, lease_s=30.0):
                pass
            async with f.ip_lease("", 1.0, lease_s=30.0):
                pass

        await asyncio.wait_for(lease(), timeout=1.0)
        redis_server.start()
        assert await f.link.redis.keys("*ip:*") == []

    run(go)


# -- WARC sync ------------------------------------------------------------------------


def test_sync_without_fetchers_is_immediate(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> float:
        mgr = await manager(stack, redis_server.url, sync_timeout_s=5.0)
        started = time.monotonic()
        assert await mgr.sync() is True
        return time.monotonic() - started

    # Well under sync_timeout_s (5 s): it did not wait for fetchers. (Its INCR waits for
    # the append-only file's fsync, which beside the suite's other workers can take a
    # good part of a second: the bound leaves room for that, not for the timeout.)
    assert run(go) < 1.0


def test_sync_waits_for_every_live_fetcher_to_sync(redis_server: RedisServer) -> None:
    async def go(stack: AsyncExitStack) -> None:
        mgr = await manager(stack, redis_server.url, sync_timeout_s=5.0)
        synced: list[float] = []

        async def warc_sync() -> None:
            await asyncio.sleep(0.05)
            synced.append(time.monotonic())

        f = await fetcher(stack, redis_server.url, heartbeat_s=0.1, warc_sync=warc_sync)
        await f.start()
        started = time.monotonic()
        assert await mgr.sync() is True
        assert len(synced) == 1 and synced[0] <= time.monotonic()
        assert synced[0] - started < 1.0
        assert await mgr.sync() is True
        assert len(synced) == 2, "each request is answered"

    run(go)


def test_in_flight_budget_is_twice_the_fleet_shared_by_the_managers() -> None:
    assert in_flight_budget(100, 0, 1) == 100, "no fetcher yet: the floor"
    assert in_flight_budget(100, 800, 1) == 1600
    assert in_flight_budget(100, 800, 2) == 800
    assert in_flight_budget(100, 801, 2) == 801, "rounded up"
    assert in_flight_budget(2000, 800, 1) == 2000, "--concurrency stays a floor"
    assert in_flight_budget(100, 10**6, 1) == MAX_FLEET_IN_FLIGHT, "bounded, whatever the fleet"
    assert in_flight_budget(100, 40, 4) == 100


def test_a_manager_counts_the_live_fetchers_slots(redis_server: RedisServer) -> None:
    """Each fetcher registers its --concurrency; the manager's upkeep sums the live
    fetchers' every FLEET_INTERVAL_S and tells its face (which sizes the dispatch)."""

    async def go(stack: AsyncExitStack) -> None:
        url = redis_server.url
        clock = FakeClock()
        mgr = await manager(stack, url, clock=clock)
        big = await fetcher(stack, url, "big", slots=200)
        small = await fetcher(stack, url, "small", slots=50)
        old = await fetcher(stack, url, "old")  # registers no slots (as before this rule)
        for f in (big, small, old):
            await f.start()
        told: list[int] = []
        mgr.upkeep.on_fleet = told.append
        clock.advance(FLEET_INTERVAL_S)
        await mgr.upkeep.tick()
        assert told == [250] and mgr.fleet_slots == 250
        await small.close()  # leaves the cluster at once
        await mgr.upkeep.tick()
        assert told == [250], "counted once a FLEET_INTERVAL_S"
        clock.advance(FLEET_INTERVAL_S)
        await mgr.upkeep.tick()
        assert told == [250, 200]
        # A fetcher taken for dead and re-registering (beat) keeps its slots.
        await mgr.link.redis.delete(K.worker_info("big"))
        await mgr.link.redis.zrem(K.workers, "big")
        await big.beat(TTL_MS)
        assert await mgr.count_fleet() == 200

    run(go)


def test_a_partition_runs_one_manager_at_a_time(redis_server: RedisServer) -> None:
    """A second manager of a partition whose manager is alive is refused; the same
    manager (host and state dir) started again after a crash is not."""

    async def go(stack: AsyncExitStack) -> None:
        url = redis_server.url
        first = RedisManagerQueue(await link(stack, url), "c", 0, 1, tick_s=3600.0)
        await first.open("{}", "vm:/data/a")
        await first.upkeep.tick()  # publishes its figures, identity included
        other = RedisManagerQueue(await link(stack, url), "c", 0, 1, tick_s=3600.0)
        with pytest.raises(ClusterError, match="run by another manager"):
            await other.open("{}", "vm:/data/b")
        again = RedisManagerQueue(await link(stack, url), "c", 0, 1, tick_s=3600.0)
        await again.open("{}", "vm:/data/a")  # a restart: its old figures are still there
        assert again.epoch == first.epoch + 1
        for q in (again, first):
            await q.close()

    run(go)


def test_a_password_and_tls_are_spoken(tmp_path: Path) -> None:
    """rediss:// with a password against a TLS-only redis-server, its certificate from a
    CA given as ca_file (--redis-ca); without that CA the server is not trusted."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    chain, key, ca_pem = tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_pem))
    with RedisServer(tmp_path / "redis", password="s3cret", tls=(chain, key)) as server:
        assert server.url.startswith("rediss://:s3cret@")

        async def go(stack: AsyncExitStack) -> None:
            trusted = await link(stack, server.url, ca_file=str(ca_pem))
            await trusted.check()
            await trusted.redis.set("k", "v")
            assert await trusted.redis.get("k") == b"v"
            strange = await link(stack, server.url)  # the system's CAs only
            with pytest.raises(ClusterError, match="cannot reach Redis") as refused:
                await strange.check()
            assert "s3cret" not in str(refused.value)

        run(go)


def test_a_claim_or_take_repeated_after_a_lost_reply_gets_the_same(
    redis_server: RedisServer,
) -> None:
    """RedisLink repeats a call whose reply a connection error lost; the claim and inbox
    scripts answer a repeated request id with what they did the first time, so no task
    stays held, nor inbox entry taken, unknown to its process."""
    owners = _sites_by_owner(2, 2)
    url = redis_server.url

    async def go(stack: AsyncExitStack) -> None:
        m0 = await manager(stack, url, "rq", 0, 2)
        m1 = await manager(stack, url, "rq", 1, 2)
        f = await fetcher(stack, url)
        await m0.submit(make_tasks(3))
        first = await f.link.run_script(CLAIM, ["f1", 2, "req-1"], "claim")
        again = await f.link.run_script(CLAIM, ["f1", 2, "req-1"], "claim")
        assert len(first) == 2 + 2 * 2 and again[1:] == first[1:]
        assert await f.link.redis.llen(K.worker("f1")) == 2, "held once"
        other = await f.link.run_script(CLAIM, ["f1", 1, "req-2"], "claim")
        assert other[2] not in first[2::2], "a new request, a new task"

        [task] = make_tasks(1, first_id=9)
        await m0.submit([task])
        [claimed] = await f.claim("f1", 1, 1.0)
        await f.report("f1", [_page_result(claimed, [owners[1][0], owners[1][1]])])
        take = ["rq", 1, 128, "take-1"]
        got = await m1.link.run_script(TAKE_INBOX, take, "take")
        assert got and await m1.link.run_script(TAKE_INBOX, take, "take") == got
        assert await m1.link.redis.llen(K.part("rq", "taken", 1)) == len(got)

    run(go)
