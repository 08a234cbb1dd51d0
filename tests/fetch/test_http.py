"""AiohttpClient and CurlHttpClient against real servers on loopback: aiohttp.web, raw
asyncio sockets, dnslib.

Every test runs once per backend (the ``backend`` fixture: "aiohttp" is AiohttpClient,
"curl" is CurlHttpClient); where libcurl legitimately differs the test says so.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import struct
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import brotli
import pytest
from aiohttp import web
from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler

from drumbeat.fetch.client import HttpClient
from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.fetch.response import FetchResponse, decode_body
from drumbeat.fetcher import open_http
from drumbeat.settings import Settings
from tests.dnsserver import serve_dns

UA = "drumbeat-test/1.0 (+http://example.invalid/bot)"
LOOPBACK_OK = AddressPolicy(allow_loopback=True)
HTML = b"<html><body><a href='/x'>hello</a></body></html>" * 20
ROBOTS = b"User-agent: *\nDisallow: /private\n"


CLIENTS: dict[str, Any] = {"aiohttp": AiohttpClient, "curl": CurlHttpClient}
_client_class: list[Any] = [AiohttpClient]


@pytest.fixture(autouse=True, params=sorted(CLIENTS))
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test with each backend; ``client()`` makes that backend's client."""
    _client_class[0] = CLIENTS[request.param]
    try:
        yield request.param
    finally:
        _client_class[0] = AiohttpClient


# -- a DNS responder: *.test -> 127.0.0.1, everything else NXDOMAIN -----------------------


@dataclass
class Zone(BaseResolver):
    seen: list[str] = field(default_factory=list)

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        name = str(request.q.qname).rstrip(".")
        self.seen.append(name)
        reply = request.reply()
        if name.endswith(".test") and QTYPE[request.q.qtype] == "A":
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A("127.0.0.1"), ttl=0))
        elif not name.endswith(".test"):
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


@pytest.fixture(scope="module")
def dns() -> Iterator[tuple[Zone, str]]:
    zone = Zone()
    with serve_dns(zone) as address:
        yield zone, address


# -- payloads -----------------------------------------------------------------------------


def gzip_bomb(megabytes: int) -> bytes:
    """A valid gzip file of ``megabytes`` MiB of zeros, built without compressing them all.

    After a full flush deflate starts afresh, so compressing 1 MiB of zeros gives
    the same bytes every time and the pieces can be repeated.
    """
    zeros = bytes(1 << 20)
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = first.compress(zeros) + first.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(megabytes):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = struct.pack("<II", crc, (megabytes << 20) & 0xFFFFFFFF)
    return header + piece * megabytes + end + trailer


def gzip_bytes(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb(1024)  # 1 GiB of zeros in about 1 MB


# -- an aiohttp.web site ------------------------------------------------------------------


def make_app(bomb_body: bytes, release: asyncio.Event) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        return web.Response(
            body=HTML, content_type="text/html", charset="utf-8", headers={"X-Host": request.host}
        )

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="status")

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/page?from=redirect"})

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        for _ in range(64):  # 4 MiB, chunked
            await response.write(b"x" * (64 << 10))
        return response

    async def slow(request: web.Request) -> web.Response:
        await asyncio.wait_for(release.wait(), 5)
        return web.Response(text="late")

    async def hop(request: web.Request) -> web.Response:
        left = int(request.match_info["left"])
        if left == 0:
            return web.Response(body=ROBOTS, content_type="text/plain")
        return web.Response(status=301, headers={"Location": f"/r/{left - 1}"})

    async def to_other(request: web.Request) -> web.Response:
        port = request.url.port
        return web.Response(status=307, headers={"Location": f"http://other.test:{port}/r/0"})

    async def to_nowhere(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "http://nowhere.invalid/robots.txt"})

    async def robots_host(request: web.Request) -> web.Response:
        return web.Response(body=request.host.encode(), content_type="text/plain")

    async def peer(request: web.Request) -> web.Response:
        assert request.transport is not None
        return web.Response(text=str(request.transport.get_extra_info("peername")[1]))

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/big", big)
    app.router.add_get("/slow", slow)
    app.router.add_get("/r/{left}", hop)
    app.router.add_get("/to-other", to_other)
    app.router.add_get("/to-nowhere", to_nowhere)
    app.router.add_get("/host", robots_host)
    app.router.add_get("/peer", peer)
    app.router.add_get("/gzip", fixed(gzip_bytes(HTML), "gzip"))
    app.router.add_get("/deflate", fixed(zlib.compress(HTML), "deflate"))
    app.router.add_get("/rawdeflate", fixed(raw_deflate(HTML), "deflate"))
    app.router.add_get("/br", fixed(brotli.compress(HTML), "br"))
    app.router.add_get("/gzip-br", fixed(brotli.compress(gzip_bytes(HTML)), "gzip, br"))
    app.router.add_get("/unknown", fixed(b"\x28\xb5\x2f\xfd", "zstd"))
    app.router.add_get("/corrupt", fixed(b"\x1f\x8b not gzip at all", "gzip"))
    app.router.add_get("/bomb", fixed(bomb_body, "gzip"))
    app.router.add_get("/br-bomb", fixed(brotli.compress(bytes(8 << 20), quality=1), "br"))
    return app


def fixed(body: bytes, coding: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler serving ``body`` as is, labelled with Content-Encoding ``coding``."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=body,
            headers={"Content-Encoding": coding, "Content-Type": "text/html; charset=utf-8"},
        )

    return handler


@asynccontextmanager
async def site(bomb_body: bytes = b"", host: str = "127.0.0.1") -> AsyncIterator[int]:
    release = asyncio.Event()
    runner = web.AppRunner(make_app(bomb_body, release), shutdown_timeout=1)
    await runner.setup()
    tcp = web.TCPSite(runner, host, 0)
    await tcp.start()
    port = runner.addresses[0][1]
    try:
        yield port
    finally:
        release.set()
        await runner.cleanup()


# -- a raw TCP server that serves fixed bytes and records what it got --------------------


@dataclass
class RawServer:
    reply: bytes
    hold_s: float = 0.0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            self.requests.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5))
            writer.write(self.reply)
            await writer.drain()
            await asyncio.sleep(self.hold_s)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def raw_server(reply: bytes, hold_s: float = 0.0) -> AsyncIterator[RawServer]:
    raw = RawServer(reply, hold_s)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    raw.port = server.sockets[0].getsockname()[1]
    try:
        yield raw
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5)


# -- helpers ------------------------------------------------------------------------------


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(test(), 20))


@asynccontextmanager
async def client(
    ns: str, policy: AddressPolicy = LOOPBACK_OK, **options: Any
) -> AsyncIterator[HttpClient]:
    # The resolver always points at the loopback responder: no test may reach
    # the system's DNS servers.
    resolver = DnsCache(nameserver=ns, timeout_s=0.5, tries=1)
    http = _client_class[0](user_agent=UA, policy=policy, resolver=resolver, **options)
    try:
        yield http
    finally:
        await http.close()
        await resolver.close()


def unused_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- plain fetches ------------------------------------------------------------------------


def test_200_html(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/page", None)

    r = run(main)
    assert (r.status, r.error, r.ip) == (200, None, "127.0.0.1")
    assert r.content_type == "text/html"
    assert r.body == HTML and r.decoded == HTML
    assert not r.truncated and not r.decoded_truncated and r.decode_error is None
    assert ("Content-Type", "text/html; charset=utf-8") in r.headers
    assert r.location is None and r.redirects == []
    assert r.elapsed_ms > 0 and r.fetch_time > 1e9


def test_the_connection_goes_to_the_given_ip_not_to_the_name(dns: tuple[Zone, str]) -> None:
    zone, ns = dns

    async def main() -> FetchResponse:
        # The name resolves to 127.0.0.1 but the site listens on 127.0.0.2 only.
        async with site(host="127.0.0.2") as port, client(ns) as http:
            return await http.fetch(f"http://pinned.test:{port}/host", "127.0.0.2")

    before = zone.seen.count("pinned.test")
    r = run(main)
    assert (r.status, r.ip) == (200, "127.0.0.2")
    assert r.body.startswith(b"pinned.test:")  # the Host header still names the host
    assert zone.seen.count("pinned.test") == before  # no DNS query when the IP is given


def test_keep_alive_connections_are_reused_per_host_name(dns: tuple[Zone, str]) -> None:
    """Host names sharing an address each keep their own connection, used again on their
    next fetch (the crawl revisits thousands of hosts this way; curl keeps no DNS cache
    and is given every address, which must not cost the reuse)."""
    names = [f"n{i}.test" for i in range(6)]

    async def main() -> dict[str, list[str]]:
        ports: dict[str, list[str]] = {name: [] for name in names}
        async with site() as port, client(dns[1]) as http:
            for _ in range(3):
                for name in names:
                    r = await http.fetch(f"http://{name}:{port}/peer", "127.0.0.1")
                    assert r.status == 200, r.error
                    ports[name].append(r.body.decode())
        return ports

    ports = run(main)
    assert all(len(set(seen)) == 1 for seen in ports.values()), ports
    assert len({seen[0] for seen in ports.values()}) == len(names)


def test_without_an_ip_the_host_is_resolved_through_the_resolver(dns: tuple[Zone, str]) -> None:
    zone, ns = dns

    async def main() -> FetchResponse:
        async with site() as port, client(ns) as http:
            return await http.fetch(f"http://named.test:{port}/page", None)

    r = run(main)
    assert (r.status, r.ip) == (200, "127.0.0.1")
    assert "named.test" in zone.seen


def test_dns_failure_is_the_error(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with client(dns[1]) as http:
            return await http.fetch("http://nowhere.invalid/page", None)

    r = run(main)
    assert (r.status, r.error) == (None, "dns:nxdomain")


def test_redirect_is_returned_not_followed(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/redirect", None)

    r = run(main)
    assert (r.status, r.error) == (302, None)
    assert r.location is not None and r.location.endswith("/page?from=redirect")
    assert r.location.startswith("http://127.0.0.1:")
    assert ("Location", "/page?from=redirect") in r.headers
    assert r.redirects == []


@pytest.mark.parametrize("code", [404, 500, 503])
def test_error_statuses_are_responses(dns: tuple[Zone, str], code: int) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/status/{code}", None)

    r = run(main)
    assert (r.status, r.error, r.body) == (code, None, b"status")


def test_body_cap_truncates_and_the_client_keeps_working(dns: tuple[Zone, str]) -> None:
    async def main() -> tuple[FetchResponse, FetchResponse]:
        async with site() as port, client(dns[1], max_body_bytes=100_000) as http:
            big = await http.fetch(f"http://127.0.0.1:{port}/big", None)
            after = await http.fetch(f"http://127.0.0.1:{port}/page", None)
            return big, after

    big, after = run(main)
    assert (big.status, big.error, big.truncated) == (200, None, "length")
    assert len(big.body) == 100_000 and big.decoded == big.body
    assert (after.status, after.body) == (200, HTML)


@pytest.mark.parametrize("path", ["gzip", "deflate", "rawdeflate", "br", "gzip-br"])
def test_content_encodings_are_decoded(dns: tuple[Zone, str], path: str) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/{path}", None)

    r = run(main)
    assert r.status == 200 and r.error is None
    assert r.body != HTML  # the body stays as it was on the wire
    assert r.decoded == HTML and r.decode_error is None and not r.decoded_truncated


@pytest.mark.parametrize(
    ("path", "reason"), [("unknown", "unknown:zstd"), ("corrupt", "corrupt:gzip")]
)
def test_undecodable_bodies(dns: tuple[Zone, str], path: str, reason: str) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/{path}", None)

    r = run(main)
    assert (r.status, r.error, r.decoded, r.decode_error) == (200, None, None, reason)
    assert r.body


def test_gzip_bomb_is_decoded_only_up_to_the_cap(dns: tuple[Zone, str], bomb: bytes) -> None:
    cap = 4 << 20

    async def main() -> FetchResponse:
        async with site(bomb) as port, client(dns[1], max_decoded_bytes=cap) as http:
            tracemalloc.start()
            try:
                r = await http.fetch(f"http://127.0.0.1:{port}/bomb", None)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # About twice the cap and the body; nowhere near the 1 GiB inside.
            assert peak < 3 * cap + 4 * len(bomb), peak
            return r

    r = run(main)
    assert (r.status, r.error, r.truncated) == (200, None, None)
    assert r.body == bomb
    assert r.decoded is not None and len(r.decoded) == cap and r.decoded_truncated
    assert r.decoded.count(0) == cap


def test_brotli_output_is_capped_too(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1], max_decoded_bytes=1 << 20) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/br-bomb", None)

    r = run(main)
    assert r.decoded is not None and len(r.decoded) == 1 << 20 and r.decoded_truncated


# -- failures -----------------------------------------------------------------------------


def test_slow_server_gives_timeout(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1], read_timeout_s=0.3) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/slow", None)

    r = run(main)
    assert (r.status, r.error) == (None, "timeout")
    # No response head, no WARC record: the request head is known only with a response.
    assert (r.request_head, r.response_head) == (b"", b"")


def test_a_stalled_body_gives_timeout_with_what_arrived(dns: tuple[Zone, str]) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"

    async def main() -> FetchResponse:
        async with (
            raw_server(head + b"partial", hold_s=3) as raw,
            client(dns[1], read_timeout_s=0.3) as http,
        ):
            return await http.fetch(f"http://127.0.0.1:{raw.port}/", None)

    r = run(main)
    assert (r.status, r.error, r.body) == (200, "timeout", b"partial")


def test_connection_refused_is_connect(dns: tuple[Zone, str]) -> None:
    port = unused_loopback_port()

    async def main() -> FetchResponse:
        async with client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{port}/", None)

    r = run(main)
    assert (r.status, r.error, r.ip) == (None, "connect", "127.0.0.1")


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (b"HTTX/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", "http:bad_status_line"),
        (b"hello there\r\n\r\n", "http:bad_status_line"),
        (
            b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 5000 + b"\r\nContent-Length: 2\r\n\r\nhi",
            "http:header_too_large",
        ),
        (b"HTTP/1.1 200 " + b"O" * 5000 + b"\r\n\r\n", "http:header_too_large"),
        (
            b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(500)) + b"\r\n",
            "http:header_too_large",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n", "http:bad_message"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhi", "http:incomplete_body"),
        (b"", "http:disconnected"),
    ],
)
def test_protocol_errors_have_reasons(
    dns: tuple[Zone, str], backend: str, reply: bytes, reason: str
) -> None:
    async def main() -> FetchResponse:
        async with raw_server(reply) as raw, client(dns[1], max_header_bytes=4096) as http:
            return await http.fetch(f"http://127.0.0.1:{raw.port}/", None)

    r = run(main)
    if backend == "curl" and reason == "http:bad_message":
        # libcurl names bad chunk framing for what it is; aiohttp only says bad_message.
        reason = "http:bad_chunking"
    assert r.error == reason


@pytest.mark.parametrize(
    "url", ["notaurl", "ftp://127.0.0.1/x", "http:///nohost", "http://[::1/", "http://[]@"]
)  # yarl: IndexError
def test_bad_urls_are_errors(dns: tuple[Zone, str], url: str) -> None:
    async def main() -> FetchResponse:
        async with client(dns[1]) as http:
            return await http.fetch(url, None)

    assert run(main).error == "url:invalid"


@pytest.mark.parametrize(
    ("host", "ip"),
    [("127.0.0.1", None), ("guarded.test", "127.0.0.1"), ("localhost", None), ("[::1]", None)],
)
def test_guard_refuses_before_any_connection(
    dns: tuple[Zone, str], host: str, ip: str | None
) -> None:
    async def main() -> tuple[FetchResponse, int]:
        async with raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as raw:
            async with client(dns[1], policy=AddressPolicy()) as http:
                r = await http.fetch(f"http://{host}:{raw.port}/", ip)
            return r, raw.connections

    r, connections = run(main)
    assert r.error == "guard:loopback" and r.status is None
    assert connections == 0
    assert r.request_head == b""


# -- exact heads --------------------------------------------------------------------------


def test_request_and_response_heads_are_exact(dns: tuple[Zone, str]) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: Text/HTML; charset=ISO-8859-1\r\n"
        b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 5\r\n\r\n"
    )

    async def main() -> tuple[FetchResponse, RawServer]:
        async with raw_server(head + b"hello") as raw, client(dns[1]) as http:
            url = f"http://head.test:{raw.port}/a%20b/c?x=1&y=%C3%A9"
            return await http.fetch(url, "127.0.0.1"), raw

    r, raw = run(main)
    assert r.response_head == head
    assert r.body == b"hello" and r.content_type == "text/html"
    assert [v for k, v in r.headers if k == "Set-Cookie"] == ["a=1", "b=2"]
    assert raw.requests == [r.request_head]  # byte for byte what the server received
    lines = r.request_head.split(b"\r\n")
    assert lines[0] == b"GET /a%20b/c?x=1&y=%C3%A9 HTTP/1.1"
    assert f"Host: head.test:{raw.port}".encode() in lines
    assert f"User-Agent: {UA}".encode() in lines
    assert b"Accept-Encoding: gzip, deflate, br" in lines
    assert r.request_head.endswith(b"\r\n\r\n")


def test_http10_response_head(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        reply = b"HTTP/1.0 404 Not Here\r\nX-A: b\r\n\r\nbody"
        async with raw_server(reply) as raw, client(dns[1]) as http:
            return await http.fetch(f"http://127.0.0.1:{raw.port}/", None)

    r = run(main)
    assert (r.status, r.body) == (404, b"body")
    assert r.response_head == b"HTTP/1.0 404 Not Here\r\nX-A: b\r\n\r\n"
    assert r.content_type is None


# -- robots.txt ---------------------------------------------------------------------------


def test_robots_follows_up_to_five_redirects_on_the_same_host(dns: tuple[Zone, str]) -> None:
    zone, ns = dns

    async def main() -> tuple[FetchResponse, int]:
        async with site() as port, client(ns) as http:
            return await http.fetch_robots(f"http://same.test:{port}/r/5", "127.0.0.1"), port

    before = zone.seen.count("same.test")
    r, port = run(main)
    assert (r.status, r.error) == (200, None)
    assert r.decoded == ROBOTS
    assert r.redirects == [f"http://same.test:{port}/r/{n}" for n in (4, 3, 2, 1, 0)]
    assert r.url == r.redirects[-1]
    assert zone.seen.count("same.test") == before  # same host: the given IP is kept


def test_robots_gives_up_after_five_redirects(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch_robots(f"http://127.0.0.1:{port}/r/6", None)

    r = run(main)
    assert (r.status, r.error) == (301, "too_many_redirects")
    assert len(r.redirects) == 5


def test_robots_redirect_to_another_host_is_resolved(dns: tuple[Zone, str]) -> None:
    zone, ns = dns

    async def main() -> tuple[FetchResponse, int]:
        async with site() as port, client(ns) as http:
            return await http.fetch_robots(f"http://127.0.0.1:{port}/to-other", None), port

    r, port = run(main)
    assert (r.status, r.error, r.ip) == (200, None, "127.0.0.1")
    assert r.redirects == [f"http://other.test:{port}/r/0"]
    assert "other.test" in zone.seen


def test_robots_redirect_to_an_unresolvable_host(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch_robots(f"http://127.0.0.1:{port}/to-nowhere", None)

    r = run(main)
    assert (r.status, r.error) == (None, "dns:nxdomain")
    assert r.redirects == ["http://nowhere.invalid/robots.txt"]


def test_robots_body_is_capped(dns: tuple[Zone, str]) -> None:
    async def main() -> FetchResponse:
        async with site() as port, client(dns[1]) as http:
            return await http.fetch_robots(f"http://127.0.0.1:{port}/big", None, max_bytes=1000)

    r = run(main)
    assert r.truncated and len(r.body) == 1000 and r.decoded is not None and len(r.decoded) == 1000


# -- the From header ----------------------------------------------------------------------

FROM = "crawler-ops@example.org"
# Every answer a redirect back to robots.txt, and no keep-alive: one request a connection.
LOOP = (
    b"HTTP/1.1 301 Moved\r\nLocation: /robots.txt\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)


@pytest.mark.parametrize("from_header", ["", FROM])
def test_from_header_goes_with_every_request_robots_hops_included(
    dns: tuple[Zone, str], from_header: str
) -> None:
    async def main() -> tuple[FetchResponse, FetchResponse, RawServer]:
        async with raw_server(LOOP) as raw, client(dns[1], from_header=from_header) as http:
            page = await http.fetch(f"http://127.0.0.1:{raw.port}/page", None)
            robots = await http.fetch_robots(f"http://127.0.0.1:{raw.port}/robots.txt", None)
        return page, robots, raw

    page, robots, raw = run(main)
    assert (page.status, page.error) == (301, None)
    assert (robots.error, len(robots.redirects)) == ("too_many_redirects", 5)
    assert len(raw.requests) == 7  # the page, robots.txt and its five redirects
    expected = [f"From: {from_header}".encode()] if from_header else []
    for request in raw.requests:
        assert [
            line for line in request.split(b"\r\n") if line.lower().startswith(b"from:")
        ] == expected
    assert page.request_head == raw.requests[0]  # the WARC request record has it too


def test_the_from_setting_reaches_the_client_open_http_makes(backend: str) -> None:
    settings = Settings(
        from_header=FROM,
        user_agent=UA,
        http_client=backend,
        allow_loopback=True,
        dns_server="127.0.0.1:9",
        dns_timeout_s=0.2,
    )

    async def main() -> tuple[object, FetchResponse, RawServer]:
        async with raw_server(LOOP) as raw:
            http, resolver = open_http(settings)
            try:
                r = await http.fetch(f"http://127.0.0.1:{raw.port}/", None)
            finally:
                await http.close()
                await resolver.close()
        return http, r, raw

    http, r, raw = run(main)
    assert type(http) is CLIENTS[backend]
    assert r.status == 301
    lines = raw.requests[0].split(b"\r\n")
    assert f"From: {FROM}".encode() in lines
    assert f"User-Agent: {UA}".encode() in lines


def _decoded(body: bytes, coding: str, cap: int = 1 << 20) -> FetchResponse:
    response = FetchResponse("http://a.test/", None, 0.0, headers=[("Content-Encoding", coding)])
    response.body = body
    decode_body(response, cap)
    return response


def test_decoding_edges_of_gzip_and_deflate() -> None:
    page = HTML * 50
    member = gzip.compress(page)
    two = _decoded(member + member + b"junk after", "gzip")  # members in turn; junk ignored
    assert (two.decoded, two.decode_error) == (page + page, None)
    cut = _decoded(member[: len(member) // 2], "gzip")  # a truncated body: what decodes
    assert cut.decode_error is None and cut.decoded and page.startswith(cut.decoded)
    assert _decoded(b"OK", "gzip").decode_error == "corrupt:gzip"  # too short to wait for
    assert _decoded(b"not gzip at all", "gzip").decode_error == "corrupt:gzip"
    capped = _decoded(member, "gzip", cap=100)
    assert (capped.decoded, capped.decoded_truncated) == (page[:100], True)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    for body in (zlib.compress(page), raw.compress(page) + raw.flush()):
        assert _decoded(body, "deflate").decoded == page
