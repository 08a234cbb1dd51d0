"""The dashboard's server side over a real (offline) Manager: the page and its files,
the event stream, the history API, the shared snapshot, and the history's round trip
through a checkpoint."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from drumbeat.frontier.politeness import QueuedURL
from drumbeat.manager import Manager
from drumbeat.manager.stores import RECENT_PROBLEMS
from drumbeat.testing import FakeClock, offline_manager
from drumbeat.web.app import build_app
from drumbeat.web.dashboard import Dashboard
from drumbeat.web.pages import SSE_CLIENTS_MAX
from drumbeat.web.status import Rates
from tests.web.test_app import AUTH, TOKEN, _serve


async def read_event(resp: aiohttp.ClientResponse) -> dict[str, object]:
    """The next server-sent event's data, as JSON."""
    data = b""
    while True:
        line = await asyncio.wait_for(resp.content.readline(), 10)
        assert line, "the stream ended"
        if line == b"\n":
            break
        assert line.startswith(b"data: ")
        data += line[6:]
    doc = json.loads(data)
    assert isinstance(doc, dict)
    return doc


def test_the_page_and_its_files_need_no_token(tmp_path: Path) -> None:
    async def test(m: Manager, session: aiohttp.ClientSession, base: str) -> None:
        async with session.get(base + "/") as r:
            assert r.status == 200 and r.content_type == "text/html"
            assert "connect-src 'self'" in r.headers["Content-Security-Policy"]
            page = await r.text()
        assert 'id="pages-done"' in page and "http" not in page.replace('"http', "")
        for name in ("dashboard.js", "dashboard.css"):
            async with session.get(base + "/static/" + name) as r:
                assert r.status == 200
                assert "https://" not in await r.text()  # nothing from another site
        async with session.get(base + "/static/..%2Fapp.py") as r:
            assert r.status == 404
        async with session.get(base + "/static/nothing.js") as r:
            assert r.status == 404
        # The crawl's data does need it here (not loopback).
        for path in ("/api/events", "/api/history"):
            async with session.get(base + path) as r:
                assert r.status == 401

    _serve(tmp_path, test, read_open=False)


def test_the_event_stream_sends_a_snapshot_a_second(tmp_path: Path) -> None:
    async def test(m: Manager, session: aiohttp.ClientSession, base: str) -> None:
        m.counters.update({"error.connect": 2, "status.200": 3})
        m.scheduler.push(m.scheduler.host("a.test"), QueuedURL("http://a.test/", 1, None))
        async with session.get(base + "/api/events", headers=AUTH) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            first = await read_event(r)
            started = time.monotonic()
            second = await read_event(r)
            gap = time.monotonic() - started
        assert 0.5 < gap < 5
        assert second["time"] > first["time"]
        assert first["errors"] == {"connect": 2}
        assert first["status_classes"] == {"2xx": 3}
        assert first["queued"]["ram"] == 1
        assert first["beast"]["queues"] >= 1 and first["beast"]["qf"] == 0
        assert first["hosts"]["total"] == 1 and not first["hosts"]["estimated"]
        assert first["top_hosts"][0]["host"] == "a.test"
        drums = {d["name"]: d for d in first["drums"]}
        assert set(drums) >= {"urlseen", "robots_cache", "pld_edges"}
        assert first["controls"]["paused"] is False

    _serve(tmp_path, test)


def test_event_streams_are_capped_and_end_with_the_server(tmp_path: Path) -> None:
    async def main() -> None:
        async with offline_manager(tmp_path) as manager:
            runner = web.AppRunner(build_app(manager, TOKEN, read_open=True))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with aiohttp.ClientSession() as session:
                streams = [await session.get(base + "/api/events") for _ in range(SSE_CLIENTS_MAX)]
                for s in streams:
                    assert s.status == 200
                    await read_event(s)
                async with session.get(base + "/api/events") as r:
                    assert r.status == 503
                streams.pop().close()
                # The server sees the client go at its next write, within a second or so.
                for _ in range(50):
                    again = await session.get(base + "/api/events")
                    if again.status == 200:
                        break
                    again.close()
                    await asyncio.sleep(0.1)
                assert again.status == 200
                streams.append(again)
                began = time.monotonic()
                await runner.cleanup()
                assert time.monotonic() - began < 10  # the open streams do not hold it
                for s in streams:
                    s.close()

    asyncio.run(main())


def test_history_api(tmp_path: Path) -> None:
    async def test(m: Manager, session: aiohttp.ClientSession, base: str) -> None:
        m.history.add((5, 500, 5, 1, 0))
        async with session.get(base + "/api/history?span=day") as r:
            doc = await r.json()
        assert r.status == 200 and doc["period_s"] == 60
        assert doc["series"]["pages"] == [5] and doc["series"]["bytes"] == [500]
        async with session.get(base + "/api/history") as r:
            assert (await r.json())["span"] == "hour"
        async with session.get(base + "/api/history?span=week") as r:
            assert r.status == 400 and "hour, day, month, all" in (await r.json())["error"]

    _serve(tmp_path, test)


def test_the_snapshot_is_built_at_most_once_a_second(tmp_path: Path) -> None:
    async def main() -> None:
        clock = FakeClock()
        async with offline_manager(tmp_path) as m:
            dash = Dashboard(m, Rates(m), clock=clock)
            first = dash.snapshot_bytes()
            m.counters["status.200"] += 1
            clock.advance(0.5)
            assert dash.snapshot_bytes() is first  # however many pages ask
            clock.advance(0.5)
            second = dash.snapshot_bytes()
            assert second is not first
            assert json.loads(second)["status_classes"] == {"2xx": 1}

    asyncio.run(main())


def test_recent_errors_name_their_urls_newest_first(tmp_path: Path) -> None:
    async def main() -> None:
        async with offline_manager(tmp_path) as m:
            dash = Dashboard(m, Rates(m))
            m.drops.note_failure("http://a.test/x", "timeout")
            m.drops.drop("http://b.test/y", 1, None, "robots_disallowed")
            recent = dash.snapshot()["recent_errors"]
            assert [(e["kind"], e["url"], e["reason"]) for e in recent] == [
                ("dropped", "http://b.test/y", "robots_disallowed"),
                ("failed", "http://a.test/x", "timeout"),
            ]
            assert m.counters["dropped.robots_disallowed"] == 1
            assert "error.timeout" not in m.counters  # the fetch's own result counts it
            for i in range(RECENT_PROBLEMS + 5):
                m.drops.note_failure(f"http://a.test/{i}", "timeout")
            assert len(dash.snapshot()["recent_errors"]) == RECENT_PROBLEMS  # bounded

    asyncio.run(main())


def test_history_survives_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        async with offline_manager(tmp_path) as m:
            m.history.add((7, 700, 7, 1, 2))
            m.checkpointer.initial()
        async with offline_manager(tmp_path) as again:
            hour = again.history.span("hour")
            assert sum(hour["series"]["pages"]) == 7
            assert sum(again.history.span("all")["series"]["dropped"]) == 2

    asyncio.run(main())
