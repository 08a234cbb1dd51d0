import asyncio
import json
import random
from collections import Counter

import numpy as np
import pytest
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError

from drumbeat.stats import (
    SECOND_KEEP_S,
    SETTLE_S,
    TIERS,
    StatsReader,
    StatsWriter,
    grouping,
    node_role,
    selection,
)
from drumbeat.testing import FakeClock

P = "drumbeat:"
DAY = 86_400


def _run(redis_server, go, *clients):
    """Run ``go(client, ...)`` with ``clients`` fresh connections to the test server."""

    async def main():
        conns = [redis.asyncio.Redis.from_url(redis_server.url) for _ in range(clients[0])]
        try:
            await go(*conns)
        finally:
            for conn in conns:
                await conn.aclose()

    asyncio.run(main())


def test_selection_sums_the_rows_each_group_picks():
    rows = [("crawlA/0", "a"), ("h1:10", "a"), ("h2:20", "b"), ("h1:10", "b")]
    groups = [
        lambda r: r[1] == "a",  # all nodes of queue a
        lambda r: node_role(r[0]) == "fetcher",  # all fetchers
        lambda r: False,
    ]
    s = selection(rows, groups)
    assert s.tolist() == [[1, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]]
    counts = np.array([[1, 10], [2, 20], [4, 40], [8, 80]])  # rows x (pages, bytes)
    assert (s @ counts).tolist() == [[3, 30], [14, 140], [0, 0]]


def test_grouping_is_the_selection_of_a_partition():
    labels = ["b", "a", "b", "c"]
    names, s = grouping(labels)
    assert names == ["a", "b", "c"]
    assert s.tolist() == [[0, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]]
    assert (s == selection(labels, [lambda x, n=n: x == n for n in names])).all()
    assert s.sum(axis=0).tolist() == [1, 1, 1, 1]  # each row in exactly one group
    assert grouping([])[1].shape == (0, 0)


def test_two_writers_add_up_per_second(redis_server):
    clock = FakeClock()

    async def go(r1, r2):
        a = StatsWriter(r1, P, "crawlA/0", clock=clock)
        b = StatsWriter(r2, P, "h1:10", clock=clock)
        for _ in range(3):
            a.add("crawlA", "pages")
        b.add("crawlA", "pages", 5)
        b.add("crawlA", "bytes", 1000)
        b.add("crawlA", "bytes", 24)
        assert a.pending == 1 and b.pending == 2
        await asyncio.gather(a.flush(), b.flush())
        assert a.pending == 0
        a.add("crawlA", "pages", 2)  # the same second, a second flush: adds, not overwrites
        await a.flush()
        raw = await r1.hgetall(f"{P}stats:s:1000")
        assert raw == {
            b"crawlA/0|crawlA|pages": b"5",
            b"h1:10|crawlA|pages": b"5",
            b"h1:10|crawlA|bytes": b"1024",
        }
        assert 0 < await r1.ttl(f"{P}stats:s:1000") <= SECOND_KEEP_S + 60
        clock.advance(1)
        snap = await StatsReader(r1, P, clock=clock).snapshot(window_s=1)
        assert snap.total == {"pages": 10, "bytes": 1024}

    _run(redis_server, go, 2)


def test_rates_per_queue_node_and_role(redis_server):
    clock = FakeClock()

    async def go(r):
        manager = StatsWriter(r, P, "crawlA/0", clock=clock)
        f1 = StatsWriter(r, P, "h1:10", clock=clock)
        f2 = StatsWriter(r, P, "h2:20", clock=clock)
        for _ in range(10):  # 10 seconds
            manager.add("crawlA", "tasks_claimed", 2)
            f1.add("crawlA", "pages", 3)
            f1.add("crawlB", "pages", 1)
            f2.add("crawlB", "pages", 4)
            f2.add("crawlB", "errors", 1)
            clock.advance(1)
        for w in (manager, f1, f2):
            await w.flush()
        f1.add("crawlA", "pages", 1000)  # the current second: not complete, not in the rates
        await f1.flush()
        snap = await StatsReader(r, P, clock=clock).snapshot(window_s=10)
        assert snap.queues == {
            "crawlA": {"tasks_claimed": 2.0, "pages": 3.0},
            "crawlB": {"pages": 5.0, "errors": 1.0},
        }
        assert snap.nodes == {
            "crawlA/0": {"tasks_claimed": 2.0},
            "h1:10": {"pages": 4.0},
            "h2:20": {"pages": 4.0, "errors": 1.0},
        }
        assert snap.roles == {
            "manager": {"tasks_claimed": 2.0},
            "fetcher": {"pages": 8.0, "errors": 1.0},
        }
        assert snap.total == {"tasks_claimed": 2.0, "pages": 8.0, "errors": 1.0}
        half = await StatsReader(r, P, clock=clock).snapshot(window_s=20)
        assert half.total == {"tasks_claimed": 1.0, "pages": 4.0, "errors": 0.5}
        with pytest.raises(ValueError, match="window_s"):
            await StatsReader(r, P, clock=clock).snapshot(window_s=SECOND_KEEP_S + 1)

    _run(redis_server, go, 1)


async def _write_random(writers, clock, seconds, flush_every, rng, on_flush=None):
    """``seconds`` seconds of random counts from ``writers``; returns the per-second model
    {(second, queue, counter): n}."""
    model: Counter = Counter()
    for i in range(seconds):
        for w in writers:
            for queue in ("crawlA", "crawlB"):
                for counter in ("pages", "bytes"):
                    if rng.random() < 0.5:
                        n = rng.randrange(1, 1000)
                        w.add(queue, counter, n)
                        model[int(clock()), queue, counter] += n
        clock.advance(1)
        if (i + 1) % flush_every == 0:
            await asyncio.gather(*(w.flush() for w in writers))
            if on_flush is not None:
                await on_flush()
    await asyncio.gather(*(w.flush() for w in writers))
    return model


async def _tier_buckets(r, tier):
    """{(bucket, queue, counter): n} read from the tier's keys."""
    out = {}
    async for key in r.scan_iter(match=f"{P}stats:{tier.code}:*"):
        bucket = int(key.rsplit(b":", 1)[1])
        for field, n in (await r.hgetall(key)).items():
            queue, counter = field.decode().split("|")
            out[bucket, queue, counter] = int(n)
    return out


def _model_buckets(model, period_s):
    out: Counter = Counter()
    for (second, queue, counter), n in model.items():
        out[second // period_s, queue, counter] += n
    return dict(out)


def test_roll_up_tiers_equal_the_per_second_sums(redis_server):
    # Across the end of a minute, an hour and a UTC day.
    clock = FakeClock(20 * DAY - 150.0)
    rng = random.Random(7)

    async def go(r):
        writers = [StatsWriter(r, P, node, clock=clock) for node in ("crawlA/0", "h:1", "h:2")]
        reader = StatsReader(r, P, clock=clock)
        folded = []

        async def roll():
            folded.append(await reader.roll_up())

        model = await _write_random(writers, clock, 280, 7, rng, on_flush=roll)
        clock.advance(SETTLE_S + 1)
        folded.append(await reader.roll_up())
        assert await reader.roll_up() == 0  # idempotent: nothing new to fold
        assert sum(folded) >= 280
        for tier in TIERS:
            assert await _tier_buckets(r, tier) == _model_buckets(model, tier.period_s), tier
        snap = await reader.snapshot()
        for tier in TIERS:
            expected: Counter = Counter()
            last = int(clock()) // tier.period_s
            for (bucket, queue, counter), n in _model_buckets(model, tier.period_s).items():
                if bucket > last - tier.span:
                    expected[queue, counter] += n
            got = {(q, c): n for q, cs in snap.tiers[tier.name].items() for c, n in cs.items()}
            assert got == dict(expected), tier
        assert len({second // DAY for second, _, _ in model}) == 2

    _run(redis_server, go, 1)


def test_concurrent_roll_ups_do_not_double_count(redis_server):
    clock = FakeClock()
    rng = random.Random(11)

    async def go(*conns):
        writers = [StatsWriter(conns[0], P, f"h:{i}", clock=clock) for i in range(3)]
        model = await _write_random(writers, clock, 120, 10, rng)
        readers = [StatsReader(conn, P, clock=clock) for conn in conns for _ in range(2)]
        for _ in range(3):
            clock.advance(37)
            await asyncio.gather(*(w.flush() for w in writers))  # alive, no counts
            folded = await asyncio.gather(*(reader.roll_up() for reader in readers))
            assert sum(1 for n in folded if n) == 1  # one of them folded, the rest had none
        for tier in TIERS:
            assert await _tier_buckets(conns[0], tier) == _model_buckets(model, tier.period_s)

    _run(redis_server, go, 4)


def test_memory_stays_bounded_over_three_hours(redis_server):
    clock = FakeClock()

    async def keys_by_kind(r):
        kinds: Counter = Counter()
        async for key in r.scan_iter(match=f"{P}*"):
            kinds[key.decode()[len(P) :].split(":")[1]] += 1
        return kinds

    async def go(r):
        writers = [StatsWriter(r, P, node, clock=clock) for node in ("crawlA/0", "h:1", "h:2")]
        reader = StatsReader(r, P, clock=clock)
        sizes = []
        for minute in range(180):
            for _ in range(60):
                for w in writers:
                    w.add("crawlA", "pages")
                    w.add("crawlA", "bytes", 100)
                clock.advance(1)
            await asyncio.gather(*(w.flush() for w in writers))
            await reader.roll_up()
            if minute % 30 == 29:
                kinds = await keys_by_kind(r)
                sizes.append((kinds["s"], kinds["m"]))
        # Seconds: those kept, those not yet complete; minutes: those kept and the current.
        assert kinds["s"] == SECOND_KEEP_S + SETTLE_S
        assert kinds["m"] == TIERS[0].kept + 1
        assert kinds["h"] == 4 and kinds["d"] == 1  # hours 0 to 3 of the epoch, day 0
        assert await r.dbsize() == sum(kinds.values())  # nothing else, nothing outside P
        assert sizes[-3] == sizes[-2] == sizes[-1]  # steady from minute 90 on
        snap = await reader.snapshot()
        settled = int(clock()) - SETTLE_S  # rolled up to here
        first_minute = int(clock()) // 60 - 59  # the last 60 minutes, the current included
        assert snap.tiers["minute"]["crawlA"]["pages"] == 3 * (settled - first_minute * 60)
        assert snap.tiers["hour"]["crawlA"]["pages"] == 3 * (180 * 60 - SETTLE_S)

    _run(redis_server, go, 1)


def test_a_node_that_stops_writing_drops_out_of_alive(redis_server):
    clock = FakeClock()

    async def go(r):
        a = StatsWriter(r, P, "h:1", clock=clock)
        b = StatsWriter(r, P, "h:2", clock=clock)
        reader = StatsReader(r, P, clock=clock, alive_s=10)
        await a.flush()  # a flush with no counts still says the node is alive
        await b.flush()
        clock.advance(6)
        await a.flush()
        assert (await reader.snapshot()).alive == {"h:1": 0.0, "h:2": 6.0}
        clock.advance(6)
        await a.flush()
        assert (await reader.snapshot()).alive == {"h:1": 0.0}
        await b.flush()  # back again
        assert set((await reader.snapshot()).alive) == {"h:1", "h:2"}
        clock.advance(2 * DAY)  # long gone: forgotten, the set stays bounded
        await a.flush()
        assert await r.zrange(f"{P}stats:alive", 0, -1) == [b"h:1"]

    _run(redis_server, go, 1)


def test_snapshot_as_dict_is_plain_json(redis_server):
    clock = FakeClock()

    async def go(r):
        w = StatsWriter(r, P, "crawlA/0", clock=clock)
        w.add("crawlA", "links_forwarded", 7)
        clock.advance(SETTLE_S + 1)
        await w.flush()
        reader = StatsReader(r, P, clock=clock)
        await reader.roll_up()
        data = (await reader.snapshot()).as_dict()
        assert json.loads(json.dumps(data)) == data
        assert data["tiers"]["day"] == {"crawlA": {"links_forwarded": 7}}
        assert data["total"] == {"links_forwarded": 0.7}  # 7 in the last 10 s
        assert data["alive"] == {"crawlA/0": 0.0}

    _run(redis_server, go, 1)


def test_bad_names_are_refused_in_one_line():
    clock = FakeClock()
    with pytest.raises(ValueError, match="node name"):
        StatsWriter(None, P, "", clock=clock)
    w = StatsWriter(None, P, "h:1", clock=clock)
    with pytest.raises(ValueError, match="queue name"):
        w.add("a|b", "pages")
    with pytest.raises(ValueError, match="counter name"):
        w.add("crawlA", "")
    assert w.pending == 0


def test_counts_survive_a_flush_while_redis_is_down(redis_server):
    clock = FakeClock()

    async def go(r):
        w = StatsWriter(r, P, "h:1", clock=clock)
        w.add("crawlA", "pages", 3)
        redis_server.stop()
        with pytest.raises(RedisConnectionError):
            await w.flush()
        w.add("crawlA", "pages", 2)
        redis_server.start()
        await w.flush()
        assert await r.hgetall(f"{P}stats:s:1000") == {b"h:1|crawlA|pages": b"5"}

    _run(redis_server, go, 1)
