"""The control API and ``/metrics`` as an aiohttp application over a running Manager.

Access: a state-changing call (POST, PUT, DELETE) needs ``Authorization: Bearer TOKEN``
(401 without) and is refused (403) when its ``Origin`` header names another origin than
this server's, so a web page the operator visits cannot steer the crawl. Reads (GET) need
the token too unless the server listens on loopback only (``read_open``).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from drumbeat.manager.controls import BLOCK_KINDS, ControlError
from drumbeat.manager.hostinfo import host_report, top_hosts
from drumbeat.web.dashboard import Dashboard
from drumbeat.web.metrics import CONTENT_TYPE, exposition, registry_for
from drumbeat.web.pages import PageServer
from drumbeat.web.status import Rates, status_report

if TYPE_CHECKING:
    from drumbeat.manager import Manager

STOP_REASON = "stop_requested"  # Manager.stop_reason of POST /api/stop
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}")
TOP_HOSTS_MAX = 1000
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(manager: Manager, token: str, *, read_open: bool) -> web.Application:
    """The application; ``read_open``: GETs need no token (loopback only)."""
    api = ControlApi(manager)
    app = web.Application(middlewares=[guard(token, read_open)])
    app.on_shutdown.append(api.pages.shutdown)
    app.add_routes(
        [
            *api.pages.routes(),
            web.get("/api/history", api.history),
            web.get("/api/status", api.status),
            web.get("/api/host/{name}", api.host),
            web.get("/api/hosts", api.hosts),
            web.post("/api/pause", api.pause),
            web.post("/api/resume", api.resume),
            web.post("/api/checkpoint", api.checkpoint),
            web.post("/api/stop", api.stop),
            web.put("/api/speed", api.speed),
            web.post("/api/block", api.block),
            web.delete("/api/block", api.unblock),
            web.get("/metrics", api.metrics),
        ]
    )
    return app


def guard(token: str, read_open: bool, *, where: str = "STATE/web.token") -> Any:
    """The access rules (module docstring) as a middleware; ``where``: where the token
    is, for the 401's message."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        safe = request.method in _SAFE
        if safe and (request.path == "/" or request.path.startswith("/static/")):
            return await handler(request)  # the page's own files hold no crawl data
        if not safe:
            origin = request.headers.get("Origin")
            if origin is not None and origin != f"{request.scheme}://{request.host}":
                return error(403, "cross-origin request refused")
        if not (safe and read_open):
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return error(401, f"needs Authorization: Bearer TOKEN ({where})")
        return await handler(request)

    return guard


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        doc = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(
            text='{"error": "the body must be a JSON object"}', content_type="application/json"
        ) from None
    if not isinstance(doc, dict):
        raise web.HTTPBadRequest(
            text='{"error": "the body must be a JSON object"}', content_type="application/json"
        )
    return doc


class ControlApi:
    """The handlers: each reads or sets the manager's Controls (or asks it to stop)."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.controls = manager.controls
        self.rates = Rates(manager)
        self.dashboard = Dashboard(manager, self.rates)
        self.registry = registry_for(manager, self.dashboard)
        self.pages = PageServer(self._snapshot)

    async def _snapshot(self) -> bytes:
        return self.dashboard.snapshot_bytes()

    async def history(self, request: web.Request) -> web.Response:
        """``?span=hour|day|month|all``: the crawl's history (drumbeat.stats.History)."""
        try:
            doc = self.manager.history.span(request.query.get("span", "hour"))
        except ValueError as e:
            return error(400, str(e))
        return web.json_response(doc)

    def _controls_doc(self) -> dict[str, Any]:
        c = self.controls.stats()
        return {
            "paused": c.paused,
            "speed": {"pages_per_s": c.pages_per_s},
            "blocks": c.blocks,
        }

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(status_report(self.manager, self.rates))

    async def host(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if not _HOST_NAME.fullmatch(name):
            return error(400, "not a host name")
        return web.json_response(host_report(self.manager, name))

    async def hosts(self, request: web.Request) -> web.Response:
        """``?top=N`` (default 20): the hosts in RAM with the most URLs queued."""
        try:
            n = int(request.query.get("top", "20"))
        except ValueError:
            return error(400, "top: a whole number")
        if not 0 < n <= TOP_HOSTS_MAX:
            return error(400, f"top: 1 to {TOP_HOSTS_MAX}")
        return web.json_response({"hosts": top_hosts(self.manager, n)})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=exposition(self.registry), headers={"Content-Type": CONTENT_TYPE})

    async def pause(self, request: web.Request) -> web.Response:
        self.controls.pause()
        return web.json_response(self._controls_doc())

    async def resume(self, request: web.Request) -> web.Response:
        self.controls.resume()
        return web.json_response(self._controls_doc())

    async def checkpoint(self, request: web.Request) -> web.Response:
        self.controls.request_checkpoint()
        return web.json_response({"checkpoint_requested": True}, status=202)

    async def stop(self, request: web.Request) -> web.Response:
        self.manager.request_stop(STOP_REASON)
        return web.json_response({"stopping": True}, status=202)

    async def speed(self, request: web.Request) -> web.Response:
        doc = await _body(request)
        rate = doc.get("pages_per_s")
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0
        ):
            return error(400, "pages_per_s: a number > 0, or null for no ceiling")
        self.controls.set_speed(rate, self.manager.clock())
        return web.json_response(self._controls_doc())

    async def block(self, request: web.Request) -> web.Response:
        return await self._block(request, add=True)

    async def unblock(self, request: web.Request) -> web.Response:
        return await self._block(request, add=False)

    async def _block(self, request: web.Request, *, add: bool) -> web.Response:
        doc = await _body(request)
        given = [k for k in BLOCK_KINDS if k in doc]
        if len(given) != 1:
            return error(400, 'give one of {"host": ...}, {"pld": ...}, {"regex": ...}')
        kind = given[0]
        try:
            if add:
                changed = self.controls.block(kind, doc[kind])
            else:
                changed = self.controls.unblock(kind, doc[kind])
        except ControlError as e:
            return error(400, str(e))
        except OSError as e:
            return error(500, f"cannot save the blocks: {e}")
        return web.json_response({"changed": changed, **self._controls_doc()})
