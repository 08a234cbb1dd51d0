"""The dispatcher under the operator's controls, and the host report: a real Manager on a
temp state dir (drumbeat.testing.offline_manager); nothing is fetched, the items handed
out are counted in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from drumbeat.frontier.politeness import QueuedURL
from drumbeat.frontier.robots import REFUSED
from drumbeat.manager import Manager
from drumbeat.manager.hostinfo import host_report
from drumbeat.testing import ANSWER, FakeClock, offline_manager


def _queue(manager: Manager, host: str, pages: int, *, robots: bool = False) -> None:
    h = manager.scheduler.host(host)
    manager.scheduler.set_ip(h, ANSWER)
    if robots:
        manager.scheduler.push(h, QueuedURL(f"http://{host}/robots.txt", 0, None, robots=True))
    for i in range(pages):
        manager.scheduler.push(h, QueuedURL(f"http://{host}/p/{i}", 1, None))


def _hosts_in_flight(manager: Manager) -> list[str]:
    return sorted(h.name for _, h in manager.dispatch.in_flight.values())


def _run(tmp_path: Path, test: Callable[[Manager, FakeClock], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = FakeClock()
        async with offline_manager(
            tmp_path, clock=clock, host_delay_s=1.0, host_delay_min_s=1.0, ip_delay_s=0.0
        ) as manager:
            await test(manager, clock)

    asyncio.run(main())


def test_pause_holds_every_request_and_resume_lets_them_go(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        _queue(m, "a.test", 3)
        _queue(m, "b.test", 3)
        m.controls.pause()
        m.dispatch.dispatch(clock())
        assert not m.dispatch.in_flight
        assert host_report(m, "a.test")["state"] == "paused"
        m.controls.resume()
        m.dispatch.dispatch(clock())
        assert _hosts_in_flight(m) == ["a.test", "b.test"]
        assert host_report(m, "a.test")["state"] == "in_flight"

    _run(tmp_path, test)


def test_speed_ceiling_dispatches_at_most_its_rate(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        for i in range(20):
            _queue(m, f"h{i}.test", 1)
        m.controls.set_speed(4, clock())
        m.dispatch.dispatch(clock())
        assert len(m.dispatch.in_flight) == 1  # one saved up at the start
        clock.advance(0.5)
        m.dispatch.dispatch(clock())
        assert len(m.dispatch.in_flight) == 3
        clock.advance(10.0)
        m.dispatch.dispatch(clock())
        assert len(m.dispatch.in_flight) == 7  # at most one second's worth saved
        m.controls.set_speed(None, clock())
        m.dispatch.dispatch(clock())
        assert len(m.dispatch.in_flight) == 20

    _run(tmp_path, test)


def test_a_blocked_host_is_dropped_with_its_robots_and_can_be_lifted(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        _queue(m, "bad.test", 3, robots=True)
        _queue(m, "good.test", 2)
        m.gate.qr.working("http://bad.test", None)
        m.controls.block("host", "bad.test")
        assert host_report(m, "bad.test")["state"] == "blocked"
        m.dispatch.dispatch(clock())
        assert _hosts_in_flight(m) == ["good.test"]
        assert m.counters["dropped.blocked"] == 3
        entry = m.stores.robots.peek("http://bad.test")
        assert entry is not None and entry.state == REFUSED and entry.text == "blocked"
        assert m.stores.robots.is_fresh(entry)
        assert not m.gate.qr.is_working("http://bad.test")  # its QR URLs go too

        m.controls.unblock("host", "bad.test")
        entry = m.stores.robots.peek("http://bad.test")
        assert entry is not None and not m.stores.robots.is_fresh(entry)

    _run(tmp_path, test)


def test_a_pld_block_and_a_regex_block(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        _queue(m, "www.spam.test", 2)
        _queue(m, "ok.test", 1)
        m.scheduler.push(m.scheduler.hosts["ok.test"], QueuedURL("http://ok.test/cal/1", 1, None))
        _queue(m, "other.test", 1)
        m.controls.block("pld", "spam.test")
        m.controls.block("regex", r"/cal/\d")
        m.dispatch.dispatch(clock())
        assert _hosts_in_flight(m) == ["ok.test", "other.test"]
        assert m.counters["dropped.blocked"] == 2
        for item, host in list(m.dispatch.in_flight.values()):
            m.scheduler.done(host, clock())
            del m.dispatch.in_flight[item.item_id]
        clock.advance(5.0)
        m.dispatch.dispatch(clock())
        assert not m.dispatch.in_flight  # ok.test's /cal/1 dropped, not sent
        assert m.counters["dropped.blocked"] == 3

    _run(tmp_path, test)


def test_host_report_says_why_a_host_waits(tmp_path: Path) -> None:
    async def test(m: Manager, clock: FakeClock) -> None:
        assert host_report(m, "nowhere.test")["state"] == "unknown"
        _queue(m, "a.test", 2)
        assert host_report(m, "a.test")["state"] == "ready"
        m.dispatch.dispatch(clock())
        (_item, host), *_ = m.dispatch.in_flight.values()
        m.scheduler.done(host, clock())
        report = host_report(m, "a.test")
        assert report["state"] == "waiting" and report["in_s"] == 1.0
        host.failures, host.failure = 1, "503"
        report = host_report(m, "a.test")
        assert report["state"] == "backed_off" and report["reason"] == "503"
        _queue(m, "r.test", 1)
        m.scheduler.push(
            m.scheduler.hosts["r.test"],
            QueuedURL("http://r.test/robots.txt", 0, None, robots=True),
            front=True,
        )
        assert host_report(m, "r.test")["state"] == "robots"

    _run(tmp_path, test)
