"""End-to-end (issue 46): one bad URL must not starve its host's ordinary pages.

A real aiohttp server on 127.0.0.1 serves a front page that links to a slow page (past
the crawl's timeout), a 429 and a 503 (each with ``Retry-After``) and ordinary pages; a
real ``drumbeat crawl`` subprocess crawls it with a short host delay. The server's own
log of requests says what was fetched when: a failed URL is retried behind the host's
other URLs, ``Retry-After`` is honoured as given, and the failures of different URLs do
not stack into one long back-off.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from drumbeat.checkpoint import read_counters
from tests.e2e.test_crawl import read_log

ORDINARY = 20
RETRY_AFTER_S = 2  # the case says 5; smaller keeps the test short
TIMEOUT_S = 1.0  # the crawl's total timeout: the slow page takes longer
SLOW_S = 3.0
HOST_DELAY_S = 0.05
ATTEMPTS = 3
FAILING = ("/slow", "/429", "/503")
CONFIG = f"""\
checkpoint_interval_s = 0.5
connect_timeout_s = {TIMEOUT_S}
read_timeout_s = {TIMEOUT_S}
total_timeout_s = {TIMEOUT_S}
fetch_max_attempts = {ATTEMPTS}
backoff_max_s = 30.0
# One BEAST queue holds every link of the front page: all of them are in the host's queue
# before the first failure comes back.
budget_default = 50
"""


@dataclass
class BadHost:
    """The server: every request's arrival (monotonic seconds, path) and status sent."""

    requests: list[tuple[float, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, path: str, status: int) -> None:
        with self.lock:
            self.requests.append((time.monotonic(), path, status))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/robots.txt":
            self.note(path, 404)
            return web.Response(status=404)
        if path == "/slow":
            self.note(path, 200)
            await asyncio.sleep(SLOW_S)
            return web.Response(text="<html>late</html>", content_type="text/html")
        if path in ("/429", "/503"):
            status = int(path[1:])
            self.note(path, status)
            return web.Response(status=status, headers={"Retry-After": str(RETRY_AFTER_S)})
        self.note(path, 200)
        links = (
            ""
            if path != "/"
            else "".join(
                f'<a href="{u}">x</a>' for u in [*FAILING, *(f"/p/{i}" for i in range(ORDINARY))]
            )
        )
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")


@contextmanager
def serve(host: BadHost) -> Iterator[int]:
    """``host`` on 127.0.0.1 in a thread of its own; yields the port."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", host.handle)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    ready.wait(10)
    try:
        yield int(holder["port"])  # type: ignore[call-overload]
    finally:
        runner = holder["runner"]
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_ordinary_pages_are_not_held_behind_a_failing_urls_retries(tmp_path: Path) -> None:
    host = BadHost()
    state = tmp_path / "state"
    config = tmp_path / "state.toml"
    config.write_text(CONFIG)
    with serve(host) as port:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "drumbeat",
                "crawl",
                f"http://127.0.0.1:{port}/",
                "--state",
                str(state),
                "--allow-loopback",
                "--host-delay",
                str(HOST_DELAY_S),
                "--ip-delay",
                str(HOST_DELAY_S),
                "--config",
                str(config),
                "--no-progress",
                "--max-time",
                "120",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    requests = host.requests
    paths = [p for _, p, _ in requests]
    ordinary = [f"/p/{i}" for i in range(ORDINARY)]
    # Every ordinary page was fetched, once, and answered.
    assert sorted(p for p in paths if p.startswith("/p/")) == sorted(ordinary)
    fetched = {e["url"].split(str(port), 1)[1] for e in read_log(state) if e["status"] == 200}
    assert set(ordinary) <= fetched
    # Ordering: no failing URL is asked again before every ordinary page has been.
    last_ordinary = max(paths.index(p) for p in ordinary)
    for bad in FAILING:
        tries = [i for i, p in enumerate(paths) if p == bad]
        assert len(tries) == ATTEMPTS, (bad, paths)
        assert tries[1] > last_ordinary, (bad, paths)
    # Retry-After is honoured: the host's next request comes no sooner than it said.
    for (t, path, status), (t_next, _, _) in itertools.pairwise(requests):
        if status in (429, 503):
            assert t_next - t >= RETRY_AFTER_S - 0.05, (path, t_next - t)
    # A generous bound (the machine is shared): the issue asks for 90 s with Retry-After 5.
    start = requests[0][0]
    done = max(t for t, p, _ in requests if p in ordinary)
    assert done - start < 60, done - start
    counters = read_counters(state)
    assert counters["dropped.retries_exhausted"] == len(FAILING)
