"""The scope rules in a real Manager on a temp state dir (drumbeat.testing.offline_manager):
links dropped in admission before URL-seen, queued URLs dropped at dispatch, caps counted
from results. Nothing is fetched; results are handed to the dispatcher as fetchers would."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from drumbeat.fetcher_links import pack_found
from drumbeat.frontier.politeness import QueuedURL
from drumbeat.frontier.urlseen import payload_url
from drumbeat.manager import Manager
from drumbeat.manager.hostinfo import host_report
from drumbeat.queue.base import ItemResult
from drumbeat.testing import ANSWER, FakeClock, offline_manager


def _queue(manager: Manager, host: str, pages: int) -> None:
    h = manager.scheduler.host(host)
    manager.scheduler.set_ip(h, ANSWER)
    for i in range(pages):
        manager.scheduler.push(h, QueuedURL(f"http://{host}/p/{i}", 1, None))


def _run(
    tmp_path: Path, test: Callable[[Manager, FakeClock], Awaitable[None]], **changes: Any
) -> None:
    async def main() -> None:
        clock = FakeClock()
        async with offline_manager(
            tmp_path,
            clock=clock,
            host_delay_s=1.0,
            host_delay_min_s=1.0,
            ip_delay_s=0.0,
            **changes,
        ) as manager:
            await test(manager, clock)

    asyncio.run(main())


def _finish_all(m: Manager, clock: FakeClock, body_bytes: int = 100) -> None:
    """Every item in flight comes back fetched (200, ``body_bytes`` of body)."""
    for item, _ in list(m.dispatch.in_flight.values()):
        r = ItemResult(0, 0, item, status=200, body_bytes=body_bytes)
        m.dispatch.on_result(r, clock(), [], [])


def test_links_are_dropped_before_urlseen_by_reason(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        before = m.stores.seen.pending
        page = "http://a.test/"
        links = [
            "http://a.test/keep",
            "http://a.test/doc.pdf",  # excluded
            "http://b.org/",  # not included
            "http://www.blocked.test/x",  # blocklist
        ]
        m.admission.admit_found([pack_found(links, 2, page), pack_found(links, 3, page)])
        c = m.counters
        assert c["links_dropped.max_depth"] == 4  # the second page's links: all of them
        assert (c["links_dropped.exclude"], c["links_dropped.include"]) == (1, 1)
        assert c["links_dropped.blocklist"] == 1
        assert m.stores.seen.pending == before + 1
        # Seeds are the operator's choice: the link rules pass them.
        assert m.admission.admit(["http://b.org/"], depth=0, via=None) == 1
        assert m.admission.admit(["http://b.org/x"], depth=1, via=page) == 0

    bl = tmp_path / "bl.txt"
    bl.write_text("blocked.test\n")
    _run(
        tmp_path,
        test,
        include=[r"\.test/"],
        exclude=[r"\.pdf$"],
        max_depth=2,
        blocklist_file=str(bl),
    )


def test_a_host_at_its_page_cap_has_its_queue_dropped(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        _queue(m, "a.test", 5)
        _queue(m, "b.test", 1)
        for _ in range(2):
            m.dispatch.dispatch(clock())
            _finish_all(m, clock)
            clock.advance(5.0)
        assert m.counters.get("dropped.max_pages_per_host", 0) == 0
        m.dispatch.dispatch(clock())
        assert not m.dispatch.in_flight
        assert m.counters["dropped.max_pages_per_host"] == 3
        report = host_report(m, "a.test")
        assert (report["state"], report["reason"]) == ("out_of_scope", "max_pages_per_host")
        # Its links are dropped before URL-seen from now on.
        m.admission.admit_found([pack_found(["http://a.test/new"], 1, "http://b.test/")])
        assert m.counters["links_dropped.max_pages_per_host"] == 1

    _run(tmp_path, test, max_pages_per_host=2)


def test_the_byte_cap_counts_bodies(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        _queue(m, "a.test", 4)
        m.dispatch.dispatch(clock())
        _finish_all(m, clock, body_bytes=600)
        clock.advance(5.0)
        m.dispatch.dispatch(clock())
        assert m.dispatch.in_flight  # 600 < 1000
        _finish_all(m, clock, body_bytes=600)
        clock.advance(5.0)
        m.dispatch.dispatch(clock())
        assert not m.dispatch.in_flight
        assert m.counters["dropped.max_bytes_per_host"] == 2

    _run(tmp_path, test, max_bytes_per_host=1000)


def test_the_blocklist_drops_queued_urls_at_dispatch(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        _queue(m, "www.spam.test", 2)
        _queue(m, "ok.test", 1)
        m.scheduler.push(m.scheduler.hosts["ok.test"], QueuedURL("http://ok.test/cal/1", 1, None))
        m.dispatch.dispatch(clock())
        assert sorted(h.name for _, h in m.dispatch.in_flight.values()) == ["ok.test"]
        assert m.counters["dropped.blocklist"] == 2
        _finish_all(m, clock)
        clock.advance(5.0)
        m.dispatch.dispatch(clock())
        assert not m.dispatch.in_flight  # ok.test's /cal/1 dropped, not sent
        assert m.counters["dropped.blocklist"] == 3

    bl = tmp_path / "bl.txt"
    bl.write_text("spam.test\nre:/cal/\\d\n")
    _run(tmp_path, test, blocklist_file=str(bl))


def test_no_rules_leave_dispatch_and_admission_as_they_were(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        assert m.dispatch.scope is None
        # What admission asks of each link and each page's depth: nothing.
        scope = m.admission.scope
        assert not scope.per_link and not scope.at_dispatch and scope.max_depth is None
        m.admission.admit_found([pack_found(["http://a.test/x"], 9, "http://a.test/")])
        assert not [k for k in m.counters if k.startswith("links_dropped.")]

    _run(tmp_path, test)


def test_cap_counts_resume_from_the_checkpoint(tmp_path: Path) -> None:
    async def count_and_checkpoint(m: Manager, clock: FakeClock) -> None:
        _queue(m, "a.test", 3)
        for _ in range(2):
            m.dispatch.dispatch(clock())
            _finish_all(m, clock)
            clock.advance(5.0)
        await m.checkpointer.synced(final=True)
        assert (m.checkpoints.current() / "scope_max_pages_per_host.bin").exists()

    async def resumed(m: Manager, clock: FakeClock) -> None:
        assert m.scope.host_reason("a.test") == "max_pages_per_host"
        assert m.scope.host_reason("b.test") is None

    _run(tmp_path, count_and_checkpoint, max_pages_per_host=2)
    _run(tmp_path, resumed, max_pages_per_host=2)


def test_host_scope_keeps_the_seed_hosts_links_in_order(tmp_path: Path) -> None:
    """``scope = "host"``: of a batch of pages' links, those on a seed's host (any scheme
    or port) reach URL-seen, in the order found and with their payloads; the others
    are counted as dropped."""

    async def test(m: Manager, clock: FakeClock) -> None:
        m.pricing.set_seeds(["http://a.test/", "http://[::1]:8080/"])
        page = "http://a.test/p"
        links = [
            "http://a.test/1",
            "http://b.test/",
            "https://a.test:8443/2",
            "http://a.test.b.test/x",
            "http://[::1]/3",
            "http://b.test/a.test/",
            "http://a.test/4?x=/y",
        ]
        m.admission.admit_found(
            [pack_found(links, 2, page), pack_found(links[1:2], 2, page), pack_found([], 2, page)]
        )
        assert m.counters["links_dropped.scope"] == 4
        m.stores.seen.flush()
        payloads = list(m.stores.seen.take_new())
        assert [payload_url(p) for p in payloads] == [
            "http://a.test/1",
            "https://a.test:8443/2",
            "http://[::1]/3",
            "http://a.test/4?x=/y",
        ]
        assert all(p.endswith(b"\n2\n" + page.encode()) for p in payloads)

    _run(tmp_path, test, scope="host")


def test_host_scope_keeps_each_kept_links_fingerprint_with_it(tmp_path: Path) -> None:
    """Dropped links anywhere in a page's batch (first, last, in runs): each kept link
    reaches URL-seen with its own fingerprint, so the same links found again are all
    known, and only the kept ones came out new."""

    async def test(m: Manager, clock: FakeClock) -> None:
        m.pricing.set_seeds(["http://a.test/"])
        page = "http://a.test/p"
        pattern = "oiioooiiioio"  # i: on the seed's host, o: off it
        links = [f"http://{'a' if c == 'i' else 'b'}.test/{k}" for k, c in enumerate(pattern)]
        inside = [u for u, c in zip(links, pattern) if c == "i"]
        m.admission.admit_found([pack_found(links, 2, page)])
        m.stores.seen.flush()
        assert [payload_url(p) for p in m.stores.seen.take_new()] == inside
        assert m.counters["links_dropped.scope"] == pattern.count("o")
        fresh = [f"http://a.test/new{k}" for k in range(3)]
        m.admission.admit_found([pack_found(inside[::-1] + fresh, 3, page)])
        m.stores.seen.flush()
        assert [payload_url(p) for p in m.stores.seen.take_new()] == fresh

    _run(tmp_path, test, scope="host")


def test_host_scope_is_decided_again_when_the_seeds_change(tmp_path: Path) -> None:
    """The scope's verdicts outlive one batch (a link on a host already found in the
    scope is admitted by its prefix) until the seeds that decide them change."""

    async def test(m: Manager, clock: FakeClock) -> None:
        m.pricing.set_seeds(["http://a.test/"])
        page = "http://a.test/p"
        links = ["http://a.test/1", "http://a.test:8080/2", "http://a.testx/3", "http://b.test/4"]
        for depth in (2, 3):  # the second batch meets the prefixes the first one found
            m.admission.admit_found([pack_found(links, depth, page)])
        assert m.counters["links_dropped.scope"] == 4
        m.pricing.set_seeds(["http://b.test/"])
        # New paths on the old hosts: the links of the batches before are in URL-seen's
        # cache, and dropped as seen whatever the scope says now.
        again = ["http://a.test/5", "http://a.test:8080/6", "http://a.testx/3", "http://b.test/4"]
        hits = m.counters["urlseen_cache_hits"]
        m.admission.admit_found([pack_found(again + links[:2], 4, page)])
        assert m.counters["links_dropped.scope"] == 4 + 3
        assert m.counters["urlseen_cache_hits"] == hits + 2
        m.stores.seen.flush()
        admitted = [(payload_url(p), p.split(b"\n")[1]) for p in m.stores.seen.take_new()]
        assert admitted == [
            ("http://a.test/1", b"2"),
            ("http://a.test:8080/2", b"2"),
            ("http://b.test/4", b"4"),
        ]

    _run(tmp_path, test, scope="host")


@pytest.mark.parametrize("cache_bytes", [64 * 1024, 0])
def test_links_urlseen_knows_are_dropped_as_seen_before_the_scope_is_asked(
    tmp_path: Path, cache_bytes: int
) -> None:
    """A link in URL-seen's cache passed the scope when it was sent: found again, it is
    dropped as seen without being looked at. Without the cache every copy is looked at;
    what is admitted is the same."""

    async def test(m: Manager, clock: FakeClock) -> None:
        m.pricing.set_seeds(["http://a.test/"])
        page = "http://a.test/p"
        links = ["http://a.test/1", "http://b.test/2", "http://a.test/3"]
        before = m.stores.seen.pending
        for depth in (2, 3):
            m.admission.admit_found([pack_found(links, depth, page)])
        c = m.counters
        assert c["links_dropped.scope"] == 2  # b.test is never sent, never known
        assert c["urlseen_cache_hits"] == (2 if cache_bytes else 0)
        assert m.stores.seen.pending == before + (2 if cache_bytes else 4)
        m.stores.seen.flush()
        admitted = [payload_url(p) for p in m.stores.seen.take_new()]
        assert admitted == ["http://a.test/1", "http://a.test/3"]

    _run(tmp_path, test, scope="host", urlseen_cache_bytes=cache_bytes)
