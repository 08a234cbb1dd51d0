"""``drumbeat web --redis URL``: the dashboard of a whole cluster, read-only (issue 50).

It reads what the cluster keeps in Redis already: the nodes' counters rolled up to
minutes, hours and days (drumbeat.stats) and the crawls, managers' figures and fetchers
(``status``: drumbeat.cluster.cluster_status, handed in by the caller, as the cluster's
floor is above this one). Nothing here writes to Redis and there is no control API: a
crawl is steered through its managers' own servers (``--web``).

The snapshot is built at most once a second, however many pages watch, and only while
one does. ``/api/history`` reads the tiers: the last hour per minute, the last day per
hour, the last 30 days per day (the cluster keeps seconds for five minutes only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from redis.exceptions import RedisError

from drumbeat.queue.redis import ClusterError
from drumbeat.stats import StatsReader
from drumbeat.web.address import WebAddress
from drumbeat.web.app import error, guard
from drumbeat.web.pages import PageServer

log = logging.getLogger("drumbeat.web")

StatusFn = Callable[[], Awaitable[dict[str, Any]]]
SNAPSHOT_EVERY_S = 1.0
# /api/history's spans and the Redis tier each is read from.
SPAN_TIERS = {"hour": "minute", "day": "hour", "month": "day", "all": "day"}
# The dashboard's series and the cluster's counters they come from (queue.redis counts
# them per crawl at the fetchers).
SERIES = {"pages": "fetched", "bytes": "bytes", "errors": "errors"}


class ClusterView:
    """The cluster's snapshot and history, for ``crawl`` only when given."""

    def __init__(
        self,
        status: StatusFn,
        reader: StatsReader,
        crawl: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.status = status
        self.reader = reader
        self.crawl = crawl
        self.clock = clock
        self._bytes = b""
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def snapshot_bytes(self) -> bytes:
        """The snapshot as JSON, rebuilt when the last is a second old."""
        async with self._lock:
            now = self.clock()
            if now - self._at >= SNAPSHOT_EVERY_S:
                try:
                    doc = await self.snapshot()
                except (ClusterError, RedisError, OSError) as e:
                    doc = {"mode": "cluster", "time": time.time(), "error": str(e)}
                self._bytes = json.dumps(doc, separators=(",", ":")).encode()
                self._at = now
            return self._bytes

    async def snapshot(self) -> dict[str, Any]:
        status = await self.status()
        crawls = [c for c in status["crawls"] if self.crawl in (None, c["crawl"])]

        def rate(counter: str) -> float:
            return round(sum(float(c.get("rates", {}).get(counter, 0.0)) for c in crawls), 2)

        return {
            "mode": "cluster",
            "time": time.time(),
            "crawl": self.crawl,
            "redis": status.get("redis"),
            "redis_used_memory": status.get("redis_used_memory"),
            "pages_done": sum(c["pages_done"] for c in crawls),
            "rates": {
                "pages_per_s": rate(SERIES["pages"]),
                "bytes_per_s": rate(SERIES["bytes"]),
                "errors_per_s": rate(SERIES["errors"]),
            },
            "crawls": [_crawl_row(c) for c in crawls],
            "fetchers": status["fetchers"],
        }

    async def history(self, span: str) -> dict[str, Any]:
        tier = SPAN_TIERS.get(span)
        if tier is None:
            raise ValueError(f"span: one of {', '.join(SPAN_TIERS)}")
        doc = await self.reader.series(tier, self.crawl)
        got = doc["series"]
        n = len(next(iter(got.values()), []))
        empty = [0] * n
        return {
            "span": span,
            "period_s": doc["period_s"],
            "start": doc["start"],
            "series": {name: got.get(counter, empty) for name, counter in SERIES.items()},
        }


def _crawl_row(c: dict[str, Any]) -> dict[str, Any]:
    managers = c.get("managers", [])

    def total(key: str) -> int:
        return sum(int(m.get(key) or 0) for m in managers)

    return {
        "crawl": c["crawl"],
        "weight": c.get("weight"),
        "partitions": c.get("partitions"),
        "managers_alive": sum(1 for m in managers if m.get("alive")),
        "done": c.get("done"),
        "pages_done": c.get("pages_done", 0),
        "pages_per_s": round(c.get("rates", {}).get(SERIES["pages"], 0.0), 2),
        "in_flight": total("in_flight"),
        "queued": total("queued"),
        "seen": total("seen"),
        "hosts": total("hosts"),
        "tasks_pending": c.get("tasks_pending", 0),
    }


def build_cluster_app(view: ClusterView, token: str, *, read_open: bool) -> web.Application:
    """The read-only application; ``read_open``: GETs need no token (loopback only)."""
    pages = PageServer(view.snapshot_bytes)
    app = web.Application(middlewares=[guard(token, read_open, where="--token-file")])
    app.on_shutdown.append(pages.shutdown)

    async def history(request: web.Request) -> web.Response:
        try:
            doc = await view.history(request.query.get("span", "hour"))
        except ValueError as e:
            return error(400, str(e))
        except (ClusterError, RedisError, OSError) as e:
            return error(503, f"cannot read the cluster's Redis: {e}")
        return web.json_response(doc)

    async def status(request: web.Request) -> web.Response:
        return web.Response(body=await view.snapshot_bytes(), content_type="application/json")

    app.add_routes(
        [*pages.routes(), web.get("/api/history", history), web.get("/api/status", status)]
    )
    return app


async def serve_cluster(
    view: ClusterView, address: WebAddress, token: str, *, on_ready: Callable[[str], None]
) -> None:
    """Serve the cluster's dashboard at ``address`` until SIGINT or SIGTERM."""
    app = build_cluster_app(view, token, read_open=address.loopback)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, address.host, address.port)
        await site.start()
        host = f"[{address.host}]" if ":" in address.host else address.host
        on_ready(f"http://{host}:{runner.addresses[0][1]}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
