"""End-to-end: `drumbeat crawl --host-connections N` (a real subprocess) against one site,
an aiohttp server on 127.0.0.1 that records when each request's handler starts and ends.

Checked from the server's side: never more than N requests at once; with N = 1 each
request starts at least the host delay after the previous one ended, with N > 1 each starts
at least the host delay after the previous start; and every page is fetched.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

PAGES = 40
SERVE_S = 0.1  # each answer takes this long: requests overlap when allowed
SLACK_S = 0.002  # the server's stamps come a little after the bytes arrive
# Starts of overlapping requests come on different connections: the server's loop may
# stamp one late, the next on time.
START_SLACK_S = 0.01


@dataclass
class Site:
    port: int = 0
    # (start, end) of each page or robots.txt request, monotonic seconds
    spans: list[tuple[float, float]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def _page(n: int) -> str:
    links = "".join(f'<a href="/p/{(n * 7 + k) % PAGES}.html">x</a>' for k in range(1, 4))
    return f"<!DOCTYPE html><html><body><h1>{n}</h1>{links}</body></html>"


def _app(site: Site) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        await asyncio.sleep(SERVE_S)
        path = request.path
        if path == "/robots.txt":
            resp = web.Response(text="User-agent: *\nDisallow: /private/\n")
        elif path == "/":
            # Every page at once: the host's queue is long enough to overlap requests.
            links = "".join(f'<a href="/p/{n}.html">{n}</a>' for n in range(PAGES))
            resp = web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")
        elif path.startswith("/p/") and path.endswith(".html"):
            resp = web.Response(text=_page(int(path[3:-5])), content_type="text/html")
        else:
            resp = web.Response(status=404)
        site.spans.append((started, time.monotonic()))
        site.paths.append(path)
        return resp

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(s), access_log=None)

    async def start() -> None:
        await runner.setup()
        tcp = web.TCPSite(runner, "127.0.0.1", 0)
        await tcp.start()
        s.port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()))
    thread.start()
    ready.wait(10)
    try:
        yield s
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _crawl(site: Site, state: Path, connections: int, delay: float, fetchers: str) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "drumbeat",
        "crawl",
        f"http://127.0.0.1:{site.port}/",
        "--state",
        str(state),
        "--allow-loopback",
        "--scope",
        "host",
        "--host-delay",
        str(delay),
        "--ip-delay",
        "0",
        "--host-connections",
        str(connections),
        "--fetchers",
        fetchers,
        "--no-progress",
        "--max-time",
        "60",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "crawl stopped (done)" in proc.stderr
    return json.loads((state / "stages.json").read_text())


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


# Delays under manager.dispatch.EARLY_BELOW_S: each item leaves as the fetch before it
# is reported, and the fetcher waits the rest of the delay (FetchItem.wait_s). With no
# delay its fetcher announces the end before parsing the page (Dispatcher.on_fetch_ended):
# the next request may start while the page before it is parsed, never while it is
# fetched.
@pytest.mark.parametrize(
    ("fetchers", "delay"), [("0", 0.02), ("2", 0.02), ("2", 0.005), ("0", 0.0), ("2", 0.0)]
)
def test_one_connection_waits_the_delay_after_each_request(site, tmp_path, fetchers, delay):
    stages = _crawl(site, tmp_path / "state", 1, delay, fetchers)
    assert sorted(p for p in site.paths if p.startswith("/p/")) == sorted(
        f"/p/{n}.html" for n in range(PAGES)
    )
    spans = sorted(site.spans)
    assert _most_at_once(spans) == 1
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
    assert min(gaps) >= delay - SLACK_S
    latency = stages["dispatch_latency"]
    assert latency is not None and latency["samples"] >= PAGES // 2


# Starts 30 ms apart, stamped by a server thread: other tests' load would delay its stamps.
@pytest.mark.alone
@pytest.mark.parametrize("fetchers", ["0", "2"])
def test_several_connections_overlap_with_starts_spaced(site, tmp_path, fetchers):
    delay = 0.03
    _crawl(site, tmp_path / "state", 3, delay, fetchers)
    assert sorted(p for p in site.paths if p.startswith("/p/")) == sorted(
        f"/p/{n}.html" for n in range(PAGES)
    )
    spans = sorted(site.spans)
    assert 2 <= _most_at_once(spans) <= 3
    starts = [s for s, _ in spans]
    assert min(b - a for a, b in itertools.pairwise(starts)) >= delay - START_SLACK_S


# Delays 0: the host is piped (Settings.host_pipeline), its requests queued at the fetchers
# behind its connections; the fetchers still run no more than the connections at once.
# With 4 fetcher processes, more than the connections, each archives its lane's pages in
# a thread beside its event loop (drumbeat.fetcher, HAND_OFF_TURNS).
@pytest.mark.parametrize("fetchers", ["0", "2", "4"])
def test_several_connections_piped_at_delay_0_never_run_more_at_once(site, tmp_path, fetchers):
    stages = _crawl(site, tmp_path / "state", 3, 0.0, fetchers)
    assert sorted(p for p in site.paths if p.startswith("/p/")) == sorted(
        f"/p/{n}.html" for n in range(PAGES)
    )
    assert 2 <= _most_at_once(sorted(site.spans)) <= 3
    latency = stages["dispatch_latency"]
    assert latency is not None and latency["samples"] >= PAGES // 2
