"""The dashboard's page and its event stream, for a crawl's server (``app``) and a
cluster's (``cluster``): GET / and /static/NAME serve the package's files
(drumbeat/web/static/), GET /api/events a snapshot a second as server-sent events."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

# Pages following /api/events at once: each costs a socket and a write a second (the
# snapshot itself is shared); one more is refused with 503.
SSE_CLIENTS_MAX = 8
SSE_EVERY_S = 1.0
# The dashboard's files (package data): the page, served at /.
STATIC = {
    "index.html": "text/html",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}
# The page may load and connect to this server only: no CDN, no other site, no inline
# script (a token typed into the page goes nowhere but this server's API).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class PageServer:
    """Serves the page and streams ``snapshot()`` (JSON bytes; the caller makes it cheap
    to ask for often: it is asked once a second per page)."""

    def __init__(self, snapshot: Callable[[], Awaitable[bytes]]) -> None:
        self.snapshot = snapshot
        self.files = {
            name: (resources.files("drumbeat.web") / "static" / name).read_bytes()
            for name in STATIC
        }
        self.sse_clients = 0
        self.closing = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.page),
            web.get("/static/{name}", self.static),
            web.get("/api/events", self.events),
        ]

    async def shutdown(self, app: web.Application) -> None:
        """The server closes: end the event streams (they would hold its shutdown)."""
        self.closing.set()

    async def page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        return web.Response(
            body=self.files[name],
            content_type=STATIC[name],
            charset="utf-8",
            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"},
        )

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: a snapshot a second, until the client goes or the server
        closes."""
        if self.sse_clients >= SSE_CLIENTS_MAX:
            return web.json_response(
                {"error": f"at most {SSE_CLIENTS_MAX} dashboards at once"}, status=503
            )
        self.sse_clients += 1
        try:
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
            )
            await resp.prepare(request)
            while not self.closing.is_set():
                await resp.write(b"data: " + await self.snapshot() + b"\n\n")
                try:
                    await asyncio.wait_for(self.closing.wait(), SSE_EVERY_S)
                except TimeoutError:
                    pass
        except ConnectionResetError:
            pass  # the page went away
        finally:
            self.sse_clients -= 1
        return resp
