"""A fetcher's notice that a request ended (ItemResult.fetch_ended) frees its host at once:
the host's next URL leaves while the page is still archived and parsed, and the page's
result, when it comes, counts the page and frees nothing more. A real Manager on a temp
state dir (drumbeat.testing.offline_manager); nothing is fetched, results are made up."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from drumbeat.frontier.politeness import QueuedURL
from drumbeat.manager import Manager
from drumbeat.queue.base import FetchItem, ItemResult
from drumbeat.testing import ANSWER, FakeClock, offline_manager


def _sent(manager: Manager) -> list[int]:
    return sorted(manager.dispatch.in_flight)


def _notice(item: FetchItem, status: int = 200) -> ItemResult:
    return ItemResult(
        0, 0, item, status=status, held_s=0.001, end_key=42, log=None, fetch_ended=True
    )


def _with_host(
    tmp_path: Path,
    test: Callable[[Manager, FakeClock], Coroutine[Any, Any, None]],
    delay_s: float = 0.0,
    pages: int = 3,
) -> None:
    """``test(manager, clock)`` with one host (one connection, not piped: see
    test_pipeline) holding ``pages`` pages."""

    async def main() -> None:
        clock = FakeClock()
        async with offline_manager(
            tmp_path,
            clock=clock,
            host_delay_s=delay_s,
            host_delay_min_s=delay_s,
            ip_delay_s=0.0,
            host_pipeline=0,
        ) as m:
            h = m.scheduler.host("a.test")
            m.scheduler.set_ip(h, ANSWER)
            for i in range(pages):
                m.scheduler.push(h, QueuedURL(f"http://a.test/p/{i}", 1, None))
            await test(m, clock)

    asyncio.run(main())


def test_the_next_url_leaves_at_the_notice_and_the_result_counts_once(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        d = m.dispatch
        d.dispatch(clock())
        [first] = _sent(m)
        item = d.in_flight[first][0]
        assert item.report_now and item.announce_end  # more queued, and no delay
        clock.advance(0.01)
        d.on_fetch_ended(_notice(item), clock())
        d.on_fetch_ended(_notice(item), clock())  # twice: the second changes nothing
        d.dispatch(clock())
        assert _sent(m) == [first, first + 1]  # the page is parsed meanwhile
        assert m.counters["fetches"] == 0 and d.pages_done == 0

        clock.advance(0.01)
        d.on_result(ItemResult(0, 0, item, status=200, held_s=0.005), clock(), [], [])
        d.dispatch(clock())
        # Counted now, once; its host is busy with the second request, and stays so.
        assert m.counters["fetches"] == 1 and d.pages_done == 1
        assert _sent(m) == [first + 1]

        second = d.in_flight[first + 1][0]
        d.on_result(ItemResult(0, 0, second, status=200), clock(), [], [])
        d.dispatch(clock())  # an item with no notice frees its host at its result
        assert _sent(m) == [first + 2] and m.counters["fetches"] == 2

    _with_host(tmp_path, test)


def test_a_failed_result_after_its_notice_is_retried_and_frees_nothing(tmp_path: Path) -> None:
    """A fetcher that dies after its notice: the page is fetched again (its links were
    lost), and the request under way to its host keeps the host busy."""

    async def test(m: Manager, clock: FakeClock) -> None:
        d = m.dispatch
        d.dispatch(clock())
        [first] = _sent(m)
        item = d.in_flight[first][0]
        d.on_fetch_ended(_notice(item), clock())
        d.dispatch(clock())
        assert _sent(m) == [first, first + 1]
        d.on_result(ItemResult(0, 0, item, error="fetcher_died"), clock(), [], [])
        clock.advance(60.0)
        d.dispatch(clock())
        assert _sent(m) == [first + 1]  # still one request at a time
        assert m.counters["retries"] == 1
        host = m.scheduler.hosts["a.test"]
        assert [q.url for q in host.queue][-1] == item.url

    _with_host(tmp_path, test)


def test_ends_are_announced_where_the_delay_would_not_hide_the_parsing(tmp_path: Path) -> None:
    """A host's delay of 5 ms hides pages archived and parsed in less (its next URL leaves
    at the result, early, and waits out the rest): no notice, which would only cost CPU.
    Once results show pages held longer than the delay, ends are announced. The result of
    an announced end may wait at its fetcher for others (fetcher.GATHER_S): it does not
    count in the average."""

    async def test(m: Manager, clock: FakeClock) -> None:
        d = m.dispatch
        announced = []
        for _ in range(12):  # one page at a time, each held 20 ms at its fetcher
            d.dispatch(clock())
            [sent] = _sent(m)
            item = d.in_flight[sent][0]
            assert item.report_now
            announced.append(item.announce_end)
            d.on_result(ItemResult(0, 0, item, status=200, held_s=0.02), clock(), [], [])
            clock.advance(1.0)
        assert 0.005 < d.held_s < 0.02  # a moving average of the results' held_s
        first = announced.index(True)
        assert first > 0 and all(announced[first:]), announced
        held_s = d.held_s
        d.dispatch(clock())
        [sent] = _sent(m)
        item = d.in_flight[sent][0]
        assert item.announce_end
        d.on_result(ItemResult(0, 0, item, status=200, held_s=1.0), clock(), [], [])
        assert d.held_s == held_s

    _with_host(tmp_path, test, delay_s=0.005, pages=14)


def test_a_cluster_manager_asks_for_no_notice(tmp_path: Path) -> None:
    """A cluster's fetchers report a request's end with its result (a notice would cost a
    Redis round trip a page), so its managers ask for none (drumbeat.cluster)."""

    async def test(m: Manager, clock: FakeClock) -> None:
        m.dispatch.announce_ends = False
        m.dispatch.dispatch(clock())
        [sent] = _sent(m)
        item = m.dispatch.in_flight[sent][0]
        assert item.report_now and not item.announce_end

    _with_host(tmp_path, test)
