"""Serving a synthetic web: HTTP on every IP of the web, DNS on 127.0.0.1, one process.

All IPs share one port. Requests are routed by the ``Host`` header (port stripped,
case-insensitive); an unknown host gets 404. Every request is recorded as a
``RequestRecord`` in ``SimWeb.requests`` and, when a log path is given, appended to
it as one JSON object per line, flushed per line, so another process can follow it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from aiohttp import web

from drumbeat.simweb import hostile
from drumbeat.simweb.dns import DnsFault, SimDNS
from drumbeat.simweb.model import Page, PageKind, SimWebConfig, SimWebModel
from drumbeat.simweb.render import Renderer

_BIND_ATTEMPTS = 50


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the server saw it on arrival."""

    time: float  # time.time() when the handler started
    host: str  # Host header, lower-case, without port
    path: str  # raw path with query
    status: int
    server_ip: str  # local address the connection arrived on
    method: str
    accept: str = ""  # the Accept header


Handler = Callable[[web.BaseRequest, Page, Renderer], Awaitable[web.StreamResponse]]


async def _html(request: web.BaseRequest, page: Page, renderer: Renderer) -> web.StreamResponse:
    response = web.Response(body=renderer.body(page), content_type="text/html", charset="utf-8")
    if page.x_robots_tag is not None:
        for value in page.x_robots_tag.split("\n"):  # one header a line
            response.headers.add("X-Robots-Tag", value)
    return response


async def _xml(request: web.BaseRequest, page: Page, renderer: Renderer) -> web.StreamResponse:
    assert page.content_type is not None
    return web.Response(body=renderer.body(page), content_type=page.content_type)


async def _redirect(request: web.BaseRequest, page: Page, renderer: Renderer) -> web.StreamResponse:
    assert page.location_header is not None
    return web.Response(status=page.status, headers={"Location": page.location_header})


async def _binary(request: web.BaseRequest, page: Page, renderer: Renderer) -> web.StreamResponse:
    return web.Response(body=renderer.body(page), content_type="application/octet-stream")


async def _missing(request: web.BaseRequest, page: Page, renderer: Renderer) -> web.StreamResponse:
    return web.Response(
        status=404, body=renderer.body(page), content_type="text/html", charset="utf-8"
    )


# One handler per page kind; a hostile behaviour (slow body, bomb, ...) is a new
# PageKind in the model plus an entry here.
HANDLERS: dict[PageKind, Handler] = {
    "html": _html,
    "redirect": _redirect,
    "binary": _binary,
    "garbage": _html,  # garbage is served as if it were HTML; that is its point
    "missing": _missing,
    "sitemap": _xml,
    "sitemap_index": _xml,
    "sitemap_gz": _xml,
    "sitemap_broken": _xml,
    "feed": _xml,
}


class SimWeb:
    """A running synthetic web: HTTP servers on the model's IPs plus its DNS responder."""

    def __init__(self, config: SimWebConfig, request_log: str | Path | None = None) -> None:
        self._config = config
        self._request_log = Path(request_log) if request_log is not None else None
        self._log_file: IO[str] | None = None
        self._requests: list[RequestRecord] = []
        self._model: SimWebModel | None = None
        self._renderer: Renderer | None = None
        self._runner: web.ServerRunner | None = None
        self._dns: SimDNS | None = None
        self._hostile: hostile.HostileServer | None = None

    async def start(self) -> None:
        """Bind every IP (retrying the shared port on collision), then start DNS."""
        web_ips = SimWebModel(self._config).ips
        hostile_ips = hostile.addresses() if self._config.hostile else ()
        sockets = _bind_all(web_ips + hostile_ips, self._config.port)
        web_sockets, hostile_sockets = sockets[: len(web_ips)], sockets[len(web_ips) :]
        port = sockets[0].getsockname()[1]
        self._model = SimWebModel(dataclasses.replace(self._config, port=port))
        self._renderer = Renderer(self._model)
        if self._request_log is not None:
            self._log_file = self._request_log.open("a", encoding="utf-8")
        self._runner = web.ServerRunner(web.Server(self._handle), handle_signals=False)
        await self._runner.setup()
        for sock in web_sockets:
            await web.SockSite(self._runner, sock).start()
        records = self._model.dns_records()
        faults: dict[str, DnsFault] = {}
        if self._config.hostile:
            # Hostile connections are not recorded in `requests`: most are not HTTP.
            self._hostile = hostile.HostileServer(
                self._config.tld, port, interval_s=self._config.hostile_interval_s
            )
            await self._hostile.start(hostile_sockets)
            records.update(hostile.dns_records(self._config.tld))
            faults = hostile.dns_faults(self._config.tld)
        self._dns = SimDNS(records, fallback=self._model.resolve, faults=faults)
        await self._dns.start("127.0.0.1", self._config.dns_port)

    async def stop(self) -> None:
        if self._dns is not None:
            self._dns.close()
            self._dns = None
        if self._hostile is not None:
            await self._hostile.close()
            self._hostile = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @property
    def model(self) -> SimWebModel:
        """The model with the bound port filled in (only after ``start``)."""
        if self._model is None:
            raise RuntimeError("SimWeb is not started")
        return self._model

    @property
    def port(self) -> int:
        return self.model.config.port

    @property
    def hostile_server(self) -> hostile.HostileServer:
        """The server of the hostile hosts (only after ``start`` with ``config.hostile``)."""
        if self._hostile is None:
            raise RuntimeError("SimWeb is not started with hostile hosts")
        return self._hostile

    @property
    def dns_address(self) -> str:
        """``"127.0.0.1:PORT"`` of the DNS responder."""
        if self._dns is None:
            raise RuntimeError("SimWeb is not started")
        return self._dns.address

    @property
    def seeds(self) -> list[str]:
        return self.model.seeds()

    @property
    def requests(self) -> list[RequestRecord]:
        """A snapshot of every request served so far, in arrival order."""
        return list(self._requests)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        arrived = time.time()
        model, renderer = self.model, self._renderer
        assert renderer is not None
        host = _host_of(request)
        path = request.raw_path
        if model.host(host) is None:
            response: web.StreamResponse = web.Response(status=404, text="unknown host\n")
        elif path == "/robots.txt":
            robots = model.robots(host)
            response = web.Response(
                status=robots.status, body=robots.body, content_type="text/plain"
            )
        else:
            if model.config.latency_s > 0:
                await asyncio.sleep(model.config.latency_s)
            page = model.page(host, path)
            response = await HANDLERS[page.kind](request, page, renderer)
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        self._record(
            RequestRecord(
                time=arrived,
                host=host,
                path=path,
                status=response.status,
                server_ip=sockname[0] if sockname else "",
                method=request.method,
                accept=request.headers.get("Accept", ""),
            )
        )
        return response

    def _record(self, record: RequestRecord) -> None:
        self._requests.append(record)
        if self._log_file is not None:
            self._log_file.write(json.dumps(dataclasses.asdict(record)) + "\n")
            self._log_file.flush()


@contextlib.contextmanager
def run_in_thread(config: SimWebConfig, request_log: str | Path | None = None) -> Iterator[SimWeb]:
    """Run a SimWeb on its own event loop in a daemon thread; yield it once started.

    ``requests`` may be read from the caller's thread (it returns a snapshot).
    """
    sim = SimWeb(config, request_log)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="simweb", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(sim.start(), loop).result()
        yield sim
    finally:
        asyncio.run_coroutine_threadsafe(sim.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def _host_of(request: web.BaseRequest) -> str:
    host = (request.host or "").lower()
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        host = name
    return host.rstrip(".")


def _bind_all(ips: tuple[str, ...], port: int) -> list[socket.socket]:
    """Listening sockets on every IP, all on one port.

    With ``port == 0`` the first IP picks a free port and the others take the same
    one; if another process holds it on some IP, start over with a new port.
    """
    for _ in range(_BIND_ATTEMPTS if port == 0 else 1):
        sockets: list[socket.socket] = []
        chosen = port
        try:
            for ip in ips:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((ip, chosen))
                chosen = sock.getsockname()[1]
                sock.listen(1024)
                sock.setblocking(False)
            return sockets
        except OSError as exc:
            for sock in sockets:
                sock.close()
            if exc.errno != errno.EADDRINUSE or port != 0:
                raise
    raise OSError(errno.EADDRINUSE, f"no port free on all of {len(ips)} IPs")
