"""The crawl order in a real Manager (drumbeat.testing.offline_manager; nothing is
fetched): with ``order = "indegree"`` a URL many pages link to is dispatched before
URLs found earlier with one link each; breadth-first dispatches in the order found."""

from __future__ import annotations

import asyncio
from pathlib import Path

from drumbeat.fetcher_links import pack_found
from drumbeat.manager import Manager
from drumbeat.testing import FakeClock, offline_manager

HOST = "http://a.test"


def _found(manager: Manager) -> None:
    """Five pages' links: the first links to cold0..cold4 then hot; the others to hot."""
    pages = [pack_found([*(f"{HOST}/cold{i}" for i in range(5)), f"{HOST}/hot"], 1, f"{HOST}/")]
    pages += [pack_found([f"{HOST}/hot"], 1, f"{HOST}/p{i}") for i in range(4)]
    manager.admission.admit_found(pages)
    manager.stores.seen.flush()
    manager.admission.take_new_urls(manager.clock())
    manager.stores.robots.record(HOST, 404, None)  # no robots.txt: everything allowed


async def _dispatch_order(manager: Manager, clock: FakeClock) -> list[str]:
    order: list[str] = []
    for _ in range(30):
        manager.gate.feed(clock())
        await asyncio.sleep(0.01)  # DNS lookups (loopback SimDNS) run
        manager.dispatch.dispatch(clock())
        for item_id, (item, host) in list(manager.dispatch.in_flight.items()):
            order.append(item.url.rsplit("/", 1)[1])
            manager.scheduler.done(host, clock())
            del manager.dispatch.in_flight[item_id]
        clock.advance(1.0)
        if len(order) == 6:
            break
    return order


def _run(tmp_path: Path, order: str) -> list[str]:
    async def main() -> list[str]:
        clock = FakeClock()
        async with offline_manager(
            tmp_path,
            clock=clock,
            order=order,
            host_delay_s=1.0,
            host_delay_min_s=1.0,
            ip_delay_s=0.0,
            beast_turn_s=0,
        ) as manager:
            _found(manager)
            return await _dispatch_order(manager, clock)

    return asyncio.run(main())


def test_indegree_dispatches_the_most_linked_url_first(tmp_path: Path) -> None:
    assert _run(tmp_path / "indegree", "indegree") == ["hot", *(f"cold{i}" for i in range(5))]
    assert _run(tmp_path / "bfs", "bfs") == [*(f"cold{i}" for i in range(5)), "hot"]
