"""A host whose delay is short (manager.dispatch.EARLY_BELOW_S) gets its next URL as soon
as its previous fetch is reported, stamped with the wait the fetcher must still keep: a
real Manager on a temp state dir (drumbeat.testing.offline_manager); nothing is fetched,
results are made up."""

from __future__ import annotations

import asyncio
from pathlib import Path

from drumbeat.frontier.politeness import QueuedURL
from drumbeat.manager import Manager
from drumbeat.queue.base import FetchItem, ItemResult
from drumbeat.testing import ANSWER, FakeClock, offline_manager


def _sent(manager: Manager) -> list[FetchItem]:
    return sorted(
        (item for item, _ in manager.dispatch.in_flight.values()), key=lambda i: i.item_id
    )


def _run(tmp_path: Path, delay_s: float, connections: int = 1) -> tuple[FetchItem, list[FetchItem]]:
    """Queue 3 pages of one host, send the first, report it done 1 ms after its fetch
    ended with end key 42 and dispatch 1 ms later: (the first item, what is in flight)."""
    out: list[tuple[FetchItem, list[FetchItem]]] = []

    async def main() -> None:
        clock = FakeClock()
        async with offline_manager(
            tmp_path,
            clock=clock,
            host_delay_s=delay_s,
            host_delay_min_s=delay_s,
            ip_delay_s=0.0,
            host_connections=connections,
        ) as m:
            h = m.scheduler.host("a.test")
            m.scheduler.set_ip(h, ANSWER)
            for i in range(3):
                m.scheduler.push(h, QueuedURL(f"http://a.test/p/{i}", 1, None))
            m.dispatch.dispatch(clock())
            [first] = _sent(m)  # with several connections, the next start waits τh
            clock.advance(1.0)
            result = ItemResult(0, 0, first, status=200, held_s=0.001, end_key=42)
            m.dispatch.on_result(result, clock(), [], [])
            clock.advance(0.001)
            m.dispatch.dispatch(clock())
            out.append((first, _sent(m)))

    asyncio.run(main())
    return out[0]


def test_a_short_delay_sends_the_next_url_at_once_with_its_wait(tmp_path: Path) -> None:
    first, [item] = _run(tmp_path, 0.005)
    assert first.wait_s == 0.0  # nothing before it
    # The delay runs from the fetch's end, 1 ms before the report and 2 ms before now.
    assert abs(item.wait_s - 0.003) < 1e-9
    assert item.after_key == 42 and abs(item.after_s - 0.005) < 1e-9


def test_a_long_delay_waits_at_the_manager(tmp_path: Path) -> None:
    _, sent = _run(tmp_path, 1.0)
    assert sent == []


def test_several_connections_are_not_sent_early(tmp_path: Path) -> None:
    """Starts of requests in flight at once, on several fetchers, could not be spaced by
    waits counted at each: the manager's own clock spaces them."""
    first, sent = _run(tmp_path, 0.005, connections=2)
    assert [item.item_id for item in sent] == [first.item_id + 1]
    assert all(item.wait_s == 0.0 and item.after_key == 0 for item in sent)
