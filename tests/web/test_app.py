"""The control API over a real (offline) Manager, served on loopback by aiohttp."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from drumbeat.frontier.politeness import QueuedURL
from drumbeat.manager import Manager
from drumbeat.testing import offline_manager
from drumbeat.web import WEB_JSON
from drumbeat.web.address import AddressError, WebAddress, parse_address
from drumbeat.web.app import STOP_REASON, build_app
from drumbeat.web.client import CtlError, call
from drumbeat.web.server import WebServer, write_token
from tests.imports import loaded_by

TOKEN = "t0k3n"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

Test = Callable[[Manager, aiohttp.ClientSession, str], Awaitable[None]]


def _serve(tmp_path: Path, test: Test, *, read_open: bool = True) -> None:
    async def main() -> None:
        async with offline_manager(tmp_path) as manager:
            runner = web.AppRunner(build_app(manager, TOKEN, read_open=read_open))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            try:
                async with aiohttp.ClientSession() as session:
                    await test(manager, session, base)
            finally:
                await runner.cleanup()

    asyncio.run(main())


def test_controls_through_the_api(tmp_path: Path) -> None:
    async def test(m: Manager, session: aiohttp.ClientSession, base: str) -> None:
        async with session.post(base + "/api/pause", headers=AUTH) as r:
            assert r.status == 200 and (await r.json())["paused"] is True
        assert m.controls.paused
        async with session.post(base + "/api/resume", headers=AUTH) as r:
            assert r.status == 200
        assert not m.controls.paused
        # A same-origin Origin is fine.
        async with session.post(base + "/api/checkpoint", headers={**AUTH, "Origin": base}) as r:
            assert r.status == 202
        assert m.controls.checkpoint_requested
        for bad in ({"pages_per_s": 0}, {"pages_per_s": "x"}, {"pages_per_s": True}, [1]):
            async with session.put(base + "/api/speed", json=bad, headers=AUTH) as r:
                assert r.status == 400, bad
        async with session.put(base + "/api/speed", data=b"{", headers=AUTH) as r:
            assert r.status == 400
        async with session.put(base + "/api/speed", json={"pages_per_s": 2.5}, headers=AUTH) as r:
            assert r.status == 200 and (await r.json())["speed"] == {"pages_per_s": 2.5}
        assert m.controls.speed is not None and m.controls.speed.rate == 2.5
        async with session.put(base + "/api/speed", json={"pages_per_s": None}, headers=AUTH) as r:
            assert r.status == 200
        assert m.controls.speed is None
        both = {"host": "a.test", "pld": "a.test"}
        async with session.post(base + "/api/block", json=both, headers=AUTH) as r:
            assert r.status == 400
        async with session.post(base + "/api/block", json={"pld": "a.test"}, headers=AUTH) as r:
            assert r.status == 200 and (await r.json())["changed"] is True
        async with session.delete(base + "/api/block", json={"pld": "a.test"}, headers=AUTH) as r:
            assert r.status == 200 and (await r.json())["blocks"]["plds"] == []
        async with session.get(base + "/api/host/bad%20name") as r:
            assert r.status == 400
        for i, name in enumerate(("a.test", "b.test", "c.test")):
            host = m.scheduler.host(name)
            for j in range(i + 1):
                m.scheduler.push(host, QueuedURL(f"http://{name}/{j}", 1, None))
        async with session.get(base + "/api/hosts?top=2") as r:
            hosts = (await r.json())["hosts"]
            assert [(h["host"], h["queued"]) for h in hosts] == [("c.test", 3), ("b.test", 2)]
        for bad in ("0", "x", "100000"):
            async with session.get(base + f"/api/hosts?top={bad}") as r:
                assert r.status == 400
        async with session.get(base + "/api/status") as r:
            doc = await r.json()
            assert doc["pages_done"] == 0 and "beast" in doc["queued_by_place"]
        async with session.post(base + "/api/stop", headers={"Origin": "null", **AUTH}) as r:
            assert r.status == 403
        assert m.stop_reason is None
        async with session.post(base + "/api/stop", headers=AUTH) as r:
            assert r.status == 202
        assert m.stop_reason == STOP_REASON

    _serve(tmp_path, test)


def test_metrics_parse_and_carry_no_host_labels(tmp_path: Path) -> None:
    async def test(m: Manager, session: aiohttp.ClientSession, base: str) -> None:
        m.counters.update({"status.200": 5, "status.404": 1, "error.connect": 2})
        m.counters.update({"dropped.blocked": 3, "robots.rules": 1, "bytes_fetched": 999})
        async with session.get(base + "/metrics") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        assert samples[("drumbeat_pages_total", (("class", "2xx"),))] == 5
        assert samples[("drumbeat_pages_total", (("class", "4xx"),))] == 1
        assert samples[("drumbeat_fetch_errors_total", (("reason", "connect"),))] == 2
        assert samples[("drumbeat_dropped_urls_total", (("reason", "blocked"),))] == 3
        assert samples[("drumbeat_fetched_bytes_total", ())] == 999
        assert samples[("drumbeat_queued_urls", (("place", "ram"),))] == 0
        assert samples[("drumbeat_hosts_by_state", (("state", "ready"),))] == 0
        assert ("drumbeat_drum_keys", (("drum", "urlseen"),)) in samples
        assert ("drumbeat_drum_alpha", (("drum", "robots_cache"),)) in samples
        labels = {k for (_, ls) in samples for k, _ in ls}
        assert labels <= {"class", "reason", "place", "state", "drum"}

    _serve(tmp_path, test)


def test_off_loopback_reads_need_the_token_too(tmp_path: Path) -> None:
    async def test(m: Manager, session: aiohttp.ClientSession, base: str) -> None:
        for path in ("/api/status", "/metrics", "/api/host/a.test"):
            async with session.get(base + path) as r:
                assert r.status == 401
            async with session.get(base + path, headers=AUTH) as r:
                assert r.status == 200

    _serve(tmp_path, test, read_open=False)


def test_addresses() -> None:
    assert parse_address("off") is None
    assert parse_address("8080") == WebAddress("127.0.0.1", 8080)
    assert parse_address("0.0.0.0:9000") == WebAddress("0.0.0.0", 9000)
    assert parse_address("[::1]:9000") == WebAddress("::1", 9000)
    assert WebAddress("::1", 1).loopback and WebAddress("localhost", 1).loopback
    assert not WebAddress("0.0.0.0", 1).loopback and not WebAddress("example.org", 1).loopback
    for bad in ("x", "host:", "1:99999"):
        with pytest.raises(AddressError):
            parse_address(bad)


def test_token_file_is_private_and_new_each_run(tmp_path: Path) -> None:
    first = write_token(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "web.token").st_mode) == 0o600
    assert write_token(tmp_path) != first


def test_server_files_and_ctl_errors(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with pytest.raises(CtlError, match="no crawl"):
        call(state, "GET", "/api/status")

    async def main() -> None:
        async with offline_manager(tmp_path) as manager:
            server = WebServer(manager, state, WebAddress("127.0.0.1", 0))
            url = await server.start()
            doc = json.loads((state / WEB_JSON).read_text())
            assert doc == {"url": url, "pid": os.getpid()}
            answer = await asyncio.to_thread(call, state, "POST", "/api/pause")
            assert answer["paused"] is True and manager.controls.paused
            await server.close()
            assert not (state / WEB_JSON).exists()

    asyncio.run(main())
    # A web.json left by a crawl that died: nobody answers there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (state / WEB_JSON).write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": 1}))
    with pytest.raises(CtlError, match="not running"):
        call(state, "GET", "/api/status")


def test_ctl_loads_neither_the_server_nor_the_manager() -> None:
    # One HTTP call from the shell: the standard library's client, answered at once.
    heavy = ("aiohttp", "drumbeat.manager", "drumbeat.web.server", "numpy")
    assert loaded_by("import drumbeat.cli, drumbeat.web.client", heavy) == []
