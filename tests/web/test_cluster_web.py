"""`drumbeat web --redis`: the cluster's read-only dashboard, over a real redis-server.

The counts are written as the fetchers write them (drumbeat.stats.StatsWriter, per crawl)
and rolled up as the managers roll them up; the crawls and fetchers come from the real
drumbeat.cluster.cluster_status. The end-to-end test serves a real cluster crawl.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from redis.asyncio import Redis

from drumbeat.cluster import cluster_status
from drumbeat.stats import StatsReader, StatsWriter
from drumbeat.testing import FakeClock, RedisServer
from drumbeat.web.cluster import ClusterView, build_cluster_app
from tests.web.chromium import chromium, find_chromium
from tests.web.test_dashboard import read_event
from tests.web.test_dashboard_browser import until

PREFIX = "drumbeat:"
T0 = 1_700_000_000.0  # an epoch time on a minute's start


def test_cluster_history_and_snapshot(redis_server: RedisServer) -> None:
    async def main() -> None:
        clock = FakeClock(T0)
        redis = Redis.from_url(redis_server.url)
        try:
            writer = StatsWriter(redis, PREFIX, "host:1", clock=clock)
            for crawl, pages in (("c1", 5), ("c2", 7)):
                writer.add(crawl, "fetched", pages)
                writer.add(crawl, "bytes", 100 * pages)
            writer.add("c1", "errors", 2)
            await writer.flush()
            clock.advance(70)  # into the next minute: the first one is settled
            reader = StatsReader(redis, PREFIX, clock=clock)
            assert await reader.roll_up() > 0

            def status() -> object:
                return cluster_status(redis_server.url, PREFIX)

            one = ClusterView(status, reader, "c1")
            hour = await one.history("hour")
            assert hour["period_s"] == 60 and len(hour["series"]["pages"]) == 60
            assert sum(hour["series"]["pages"]) == 5
            assert sum(hour["series"]["bytes"]) == 500 and sum(hour["series"]["errors"]) == 2
            every = ClusterView(status, reader)
            assert sum((await every.history("day"))["series"]["pages"]) == 12
            assert sum((await every.history("all"))["series"]["pages"]) == 12
            with pytest.raises(ValueError, match="hour, day, month, all"):
                await every.history("week")
            snap = json.loads(await every.snapshot_bytes())
            assert snap["mode"] == "cluster" and snap["crawls"] == []
            assert snap["fetchers"] == [] and "error" not in snap

            runner = web.AppRunner(build_cluster_app(every, "tok", read_open=True))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            try:
                async with aiohttp.ClientSession() as session:
                    async with session.get(base + "/") as r:
                        assert r.status == 200 and 'id="crawls"' in await r.text()
                    async with session.get(base + "/api/events") as r:
                        assert (await read_event(r))["mode"] == "cluster"
                    async with session.get(base + "/api/history?span=week") as r:
                        assert r.status == 400
                    async with session.post(
                        base + "/api/pause", headers={"Authorization": "Bearer tok"}
                    ) as r:
                        assert r.status == 404  # read-only: no controls
            finally:
                await runner.cleanup()
        finally:
            await redis.aclose()

    asyncio.run(main())


def test_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "drumbeat", "web", "--redis", "redis://127.0.0.1:1/0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "cannot reach Redis" in out.stderr


async def in_browser(base: str, profile: Path) -> list[dict[str, object]]:
    """The cluster's page in headless Chromium: its crawl listed; the console errors."""
    async with chromium(profile) as page:
        await page.call("Page.navigate", url=base + "/")
        await until(
            page,
            "[...document.querySelectorAll('#crawls td')].some(td => td.textContent === 'test')",
            30,
            "the crawl in the table",
        )
        assert await page.evaluate("document.getElementById('state').textContent") == ("crawl test")
        assert await page.evaluate("document.querySelector('.crawl-only').hidden")
        return page.errors()


@pytest.mark.e2e
def test_drumbeat_web_serves_a_cluster_crawl(tmp_path: Path) -> None:
    from drumbeat.simweb.model import SimWebConfig
    from drumbeat.simweb.server import run_in_thread
    from tests.e2e.test_cluster import fetcher_cmd, manager_cmd

    config = SimWebConfig(seed=3, hosts=12, ips=4, pages_per_host=60)
    with run_in_thread(config) as simweb, RedisServer(tmp_path / "redis") as redis:
        procs = [
            subprocess.Popen(
                fetcher_cmd(redis, tmp_path / "fetchers", heartbeat="15"),
                stderr=subprocess.DEVNULL,
            ),
            subprocess.Popen(
                manager_cmd(simweb, redis, tmp_path / "m0", "0/1", heartbeat="15"),
                stderr=subprocess.DEVNULL,
            ),
        ]
        server = subprocess.Popen(
            [sys.executable, "-m", "drumbeat", "web", "--redis", redis.url, "--crawl", "test"],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stderr is not None
            line = server.stderr.readline()
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            assert found, line
            base = found.group(0)
            end = time.monotonic() + 60
            crawls: list[dict[str, object]] = []
            while time.monotonic() < end:
                with urllib.request.urlopen(base + "/api/status", timeout=10) as resp:
                    crawls = json.loads(resp.read())["crawls"]
                if crawls and int(crawls[0]["pages_done"]) > 0:  # type: ignore[call-overload]
                    break
                time.sleep(0.5)
            assert crawls and crawls[0]["crawl"] == "test"
            assert int(crawls[0]["pages_done"]) > 0  # type: ignore[call-overload]
            with urllib.request.urlopen(base + "/api/history?span=day", timeout=10) as resp:
                assert json.loads(resp.read())["period_s"] == 3600
            if find_chromium() is not None:
                assert asyncio.run(in_browser(base, tmp_path / "profile")) == []
        finally:
            for p in [server, *procs]:
                p.terminate()
            for p in [server, *procs]:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
