"""Hostile hosts of the synthetic web: the broken and malicious servers a crawler meets.

Off unless ``SimWebConfig.hostile``. Every case in :data:`CASES` is one host named
``{label}.hostile.{tld}`` (the IDN case is ``bücher.hostile.{tld}``, in DNS as
``xn--bcher-kva.hostile.{tld}``). A served case sits alone on address
``127.4.0.{k + 1}`` (``k``: its position among the served cases), on the web's shared
port, so one slow case never queues behind another on a per-IP limit. They are served
by :class:`HostileServer`, a raw asyncio TCP server rather than aiohttp, because many of
them are not valid HTTP any more. DNS cases have no address; their names answer
NXDOMAIN, SERVFAIL or nothing at all (:func:`dns_faults`).

What a served case answers, by ``target``:

* ``page``: ``/`` (and the paths it leads to) is hostile, ``/robots.txt`` allows all;
* ``robots``: ``/robots.txt`` is hostile, ``/`` is a plain page without links;
* ``dns``: nothing; resolving the name fails.

Each response is the only one on its connection (the server closes it afterwards).
Unknown paths get a 404. Endless and slow responses stop when the client goes away,
and in any case after ``max_stream_s`` seconds or :data:`MAX_STREAM_BYTES`, so a
crawler that is not bounded cannot take the test machine down with it.

Links in hostile pages never point back into the finite web and never at an IP
literal outside loopback: the 100,000 links of ``many-links`` all point at the
NXDOMAIN host, so a crawler that keeps them pays one failed lookup. The loopback
targets of ``redirect-loopback`` and ``robots-loopback`` are ``localhost``,
``127.0.0.1``, ``[::1]``, ``loopback.hostile.{tld}`` (resolves to 127.0.0.1) and
``sentinel.hostile.{tld}`` (resolves to :data:`SENTINEL_IP`, where
:class:`HostileServer` counts every connection in ``sentinel_connections``: a guard
that refuses loopback must leave it at zero).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import random
import socket
import struct
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

import brotli

from drumbeat.simweb.dns import DnsFault

CaseTarget = Literal["page", "robots", "dns"]

SENTINEL_IP: Final = "127.4.1.1"
LOOPBACK_TARGET_IP: Final = "127.0.0.1"
MAX_STREAM_BYTES: Final = 4 << 30
BOMB_BYTES: Final = 1 << 30  # decoded size of every compression bomb
MANY_LINKS: Final = 100_000
LONG_URL_CHARS: Final = 10_000
REDIRECT_CHAIN_HOPS: Final = 50
ROBOTS_CHAIN_HOPS: Final = 8  # more than the five RFC 9309 asks a crawler to follow
RETRY_AFTER_S: Final = 120

_REQUEST_HEAD_LIMIT = 64 << 10
_REQUEST_TIMEOUT_S = 10.0
_CHUNK = 64 << 10
_ALLOW_ALL = b"User-agent: *\nAllow: /\n"


@dataclass(frozen=True, slots=True)
class HostileCase:
    """One hostile host: what it does and what a bounded crawler records for it.

    ``label`` is the first DNS label (Unicode for the IDN case); ``expect`` says, for
    the report and the end-to-end crawl, what the fetch layer turns the case into.
    """

    name: str
    target: CaseTarget
    description: str
    expect: str
    label: str = ""

    @property
    def host_label(self) -> str:
        return self.label or self.name


CASES: Final[tuple[HostileCase, ...]] = (
    HostileCase(
        "gzip-bomb",
        "page",
        "1 GiB of zeros, gzip, about 1 MB on the wire",
        "decoded cut at the decoded cap, decoded_truncated",
    ),
    HostileCase(
        "deflate-bomb",
        "page",
        "1 GiB of zeros, zlib deflate",
        "decoded cut at the decoded cap, decoded_truncated",
    ),
    HostileCase(
        "brotli-bomb",
        "page",
        "1 GiB of zeros, brotli",
        "decoded cut at the decoded cap, decoded_truncated",
    ),
    HostileCase(
        "endless",
        "page",
        "200 without length, random HTML bytes until closed",
        "body cut at the body cap, truncated: length",
    ),
    HostileCase(
        "endless-chunked",
        "page",
        "chunked body that never ends",
        "body cut at the body cap, truncated: length",
    ),
    HostileCase(
        "slow-head", "page", "status line, then one header byte per interval", "timeout (total)"
    ),
    HostileCase(
        "slow-body",
        "page",
        "full head, then one body byte per interval",
        "timeout (total), the bytes that arrived kept, truncated: time",
    ),
    HostileCase("huge-header", "page", "one 1 MiB header line", "http:header_too_large"),
    HostileCase("many-headers", "page", "10,000 header lines", "http:header_too_large"),
    HostileCase(
        "bad-header",
        "page",
        "header lines with NUL bytes and without colon",
        "http:bad_header or http:bad_message",
    ),
    HostileCase("bad-status", "page", "status line 'HTTP/1.1 2OO OK'", "http:bad_status_line"),
    HostileCase(
        "no-status", "page", "HTML without any status line (HTTP/0.9 style)", "http:bad_status_line"
    ),
    HostileCase("garbage", "page", "random binary instead of HTTP", "http:bad_status_line"),
    HostileCase(
        "reset",
        "page",
        "Content-Length 1 MiB, 64 KiB sent, then a TCP RST",
        "http:incomplete_body or http:disconnected, truncated: disconnect",
    ),
    HostileCase(
        "short-body",
        "page",
        "Content-Length 1 MiB, 64 KiB sent, then FIN",
        "http:incomplete_body, truncated: disconnect",
    ),
    HostileCase(
        "redirect-loop",
        "page",
        "/ -> /loop -> / (302)",
        "status 302 with location; the crawler's URL-seen ends the loop",
    ),
    HostileCase(
        "redirect-chain",
        "page",
        f"{REDIRECT_CHAIN_HOPS} hops of 301 to a page",
        "status 301 per hop; the crawler follows max_redirects (10) of them, then "
        "location_dropped: too_many_redirects",
    ),
    HostileCase(
        "redirect-loopback",
        "page",
        "302 to localhost, 127.0.0.1, [::1] and names resolving to loopback",
        "status 302; fetching the location: guard:loopback",
    ),
    HostileCase(
        "long-location",
        "page",
        f"302 with a {LONG_URL_CHARS}-character Location",
        "status 302; normalizing the location: too_long",
    ),
    HostileCase(
        "charset-wrong",
        "page",
        "UTF-8 body labelled charset=iso-8859-1",
        "links extracted (encoding from BOM/meta, else UTF-8)",
    ),
    HostileCase(
        "charset-absent",
        "page",
        "windows-1252 body without any charset",
        "links extracted, undecodable bytes as U+FFFD",
    ),
    HostileCase(
        "charset-invalid",
        "page",
        "invalid UTF-8 sequences under charset=utf-8",
        "links extracted, undecodable bytes as U+FFFD",
    ),
    HostileCase(
        "charset-bogus", "page", "charset=x-no-such and meta charset=utf-7", "links extracted"
    ),
    HostileCase(
        "binary-html",
        "page",
        "1 MiB of random bytes labelled text/html",
        "parsed as HTML, no exception",
    ),
    HostileCase(
        "many-links",
        "page",
        f"{MANY_LINKS:,} distinct links",
        "links cut at max_links, the rest counted as too_many_links",
    ),
    HostileCase(
        "long-urls",
        "page",
        f"{LONG_URL_CHARS}-character and malformed URLs in links",
        "dropped with counted reasons (too_long, unparsable, scheme, ...)",
    ),
    HostileCase(
        "idn",
        "page",
        "IDN host name; links in Unicode, punycode and escapes",
        "fetched by punycode name; links normalized to punycode",
        label="bücher",
    ),
    HostileCase(
        "status-429",
        "page",
        f"429 with Retry-After: {RETRY_AFTER_S}",
        f"status 429, retry_after_s {RETRY_AFTER_S}",
    ),
    HostileCase(
        "status-503",
        "page",
        f"503 with Retry-After as an HTTP date ({RETRY_AFTER_S} s)",
        f"status 503, retry_after_s about {RETRY_AFTER_S}",
    ),
    HostileCase(
        "status-503-bad-retry",
        "page",
        "503 with Retry-After: soon",
        "status 503, retry_after_s None",
    ),
    HostileCase("robots-huge", "robots", "4 MiB robots.txt", "body cut at the robots cap"),
    HostileCase(
        "robots-binary", "robots", "random bytes as robots.txt", "parsed as no rules: allow all"
    ),
    HostileCase(
        "robots-html", "robots", "an HTML page as robots.txt", "parsed as no rules: allow all"
    ),
    HostileCase(
        "robots-slow",
        "robots",
        "robots.txt at one byte per interval",
        "timeout: robots unavailable, retried",
    ),
    HostileCase(
        "robots-loop",
        "robots",
        "robots.txt redirects to itself via /r",
        "too_many_redirects: robots unavailable",
    ),
    HostileCase(
        "robots-chain",
        "robots",
        f"{ROBOTS_CHAIN_HOPS}-hop robots.txt redirect chain",
        "too_many_redirects after five hops",
    ),
    HostileCase(
        "robots-loopback",
        "robots",
        "robots.txt redirects to a loopback name",
        "guard:loopback where loopback is refused",
    ),
    HostileCase("nxdomain", "dns", "the name does not exist", "dns:nxdomain"),
    HostileCase("servfail", "dns", "the name server fails", "dns:servfail"),
    HostileCase("dns-timeout", "dns", "the name server never answers", "dns:timeout"),
)

SERVED: Final[tuple[HostileCase, ...]] = tuple(c for c in CASES if c.target != "dns")
_CASE_BY_NAME: Final = {c.name: c for c in CASES}
_DNS_FAULTS: Final[dict[str, DnsFault]] = {"servfail": "servfail", "dns-timeout": "timeout"}


def case(name: str) -> HostileCase:
    """The case called ``name``; KeyError for another name."""
    return _CASE_BY_NAME[name]


def host_name(c: HostileCase, tld: str) -> str:
    """The ASCII (punycode) host name of ``c``, as DNS and the Host header have it."""
    return f"{c.host_label}.hostile.{tld}".encode("idna").decode("ascii")


def address(c: HostileCase) -> str:
    """The IPv4 address ``c`` is served on; ValueError for a DNS case."""
    if c.target == "dns":
        raise ValueError(f"{c.name} is a DNS case: it has no address")
    return f"127.4.0.{SERVED.index(c) + 1}"


def addresses() -> tuple[str, ...]:
    """Every address :class:`HostileServer` listens on (cases, then the sentinel)."""
    return (*(address(c) for c in SERVED), SENTINEL_IP)


def entry_path(c: HostileCase) -> str:
    """The path whose fetch meets the case (``/robots.txt`` for robots cases)."""
    return "/robots.txt" if c.target == "robots" else "/"


def origin(c: HostileCase, tld: str, port: int) -> str:
    name = host_name(c, tld)
    return f"http://{name}" if port == 80 else f"http://{name}:{port}"


def entry_url(c: HostileCase, tld: str, port: int) -> str:
    """The canonical URL of the case's entry (see :func:`entry_path`)."""
    return origin(c, tld, port) + entry_path(c)


def dns_records(tld: str) -> dict[str, str]:
    """A records of the served cases, the sentinel and the loopback name."""
    records = {host_name(c, tld): address(c) for c in SERVED}
    records[f"sentinel.hostile.{tld}"] = SENTINEL_IP
    records[f"loopback.hostile.{tld}"] = LOOPBACK_TARGET_IP
    return records


def dns_faults(tld: str) -> dict[str, DnsFault]:
    """The DNS cases that need the responder's help (NXDOMAIN needs none)."""
    return {host_name(case(name), tld): fault for name, fault in _DNS_FAULTS.items()}


# -- serving --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Request:
    """One parsed request and where to answer it."""

    case: HostileCase
    path: str
    writer: asyncio.StreamWriter
    tld: str
    port: int
    interval_s: float
    deadline: float  # loop time when streams stop


Handler = Callable[[_Request], Awaitable[None]]


class HostileServer:
    """Serves :data:`SERVED` on already bound listening sockets (one per address).

    ``interval_s`` is the pause of slow responses between bytes; endless and slow
    responses stop after ``max_stream_s``. :meth:`close` drops every connection.
    """

    def __init__(
        self, tld: str, port: int, *, interval_s: float = 2.0, max_stream_s: float = 120.0
    ) -> None:
        self._tld = tld
        self._port = port
        self._interval_s = interval_s
        self._max_stream_s = max_stream_s
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_ip = {address(c): c for c in SERVED}
        self.sentinel_connections = 0

    async def start(self, sockets: list[socket.socket]) -> None:
        for sock in sockets:
            self._servers.append(await asyncio.start_server(self._connected, sock=sock))

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._servers.clear()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            local_ip = writer.get_extra_info("sockname")[0]
            if local_ip == SENTINEL_IP:
                self.sentinel_connections += 1
                await _send(writer, 200, [("Content-Type", "text/plain")], b"sentinel\n")
                return
            path = await _read_request(reader)
            c = self._by_ip.get(local_ip)
            if path is None or c is None:
                return
            loop = asyncio.get_running_loop()
            request = _Request(
                c,
                path,
                writer,
                self._tld,
                self._port,
                self._interval_s,
                loop.time() + self._max_stream_s,
            )
            await _route(request)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away, which is what bounded clients do
        except asyncio.CancelledError:
            # Only close() cancels these tasks; asyncio's stream callback would log a
            # cancelled connection task as an error.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> str | None:
    """The path of the request on ``reader``; None when it is not a request."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
    except (asyncio.LimitOverrunError, asyncio.IncompleteReadError):
        return None
    if len(head) > _REQUEST_HEAD_LIMIT:
        return None
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) != 3 or not parts[1].startswith(b"/"):
        return None
    return parts[1].decode("latin-1")


async def _route(request: _Request) -> None:
    c, path = request.case, request.path
    if c.target == "page" and path == "/robots.txt":
        await _send(request.writer, 200, [("Content-Type", "text/plain")], _ALLOW_ALL)
    elif c.target == "robots" and path == "/":
        await _send(request.writer, 200, _HTML_TYPE, b"<!DOCTYPE html><title>plain</title>")
    else:
        await _HANDLERS[c.name](request)


# -- wire helpers ---------------------------------------------------------------------------

_HTML_TYPE = [("Content-Type", "text/html; charset=utf-8")]
_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    302: "Found",
    404: "Not Found",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


def _head(status: int, headers: list[tuple[str, str]], length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


async def _send(
    writer: asyncio.StreamWriter, status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    writer.write(_head(status, headers, len(body)))
    for start in range(0, len(body), _CHUNK):
        writer.write(body[start : start + _CHUNK])
        await writer.drain()
    await writer.drain()


async def _not_found(request: _Request) -> None:
    await _send(request.writer, 404, _HTML_TYPE, b"<!DOCTYPE html><title>404</title>")


def _page(links: list[str], extra: str = "") -> bytes:
    anchors = "".join(f'<a href="{href}">x</a>\n' for href in links)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{extra}'
        f"{anchors}</body></html>"
    ).encode()


def _origin(request: _Request) -> str:
    return origin(request.case, request.tld, request.port)


def _stream_open(request: _Request, sent: int) -> bool:
    return (
        sent < MAX_STREAM_BYTES
        and not request.writer.is_closing()
        and asyncio.get_running_loop().time() < request.deadline
    )


# -- bombs ----------------------------------------------------------------------------------


@functools.cache
def _zero_deflate_pieces() -> tuple[bytes, bytes]:
    """A raw-deflate piece that inflates to 1 MiB of zeros, and a stream end.

    After a full flush deflate starts afresh, so every MiB compresses to the same
    bytes and a bomb of any size is that piece repeated.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    return piece, end


@functools.cache
def _gzip_bomb() -> bytes:
    piece, end = _zero_deflate_pieces()
    mebibytes = BOMB_BYTES >> 20
    crc = 0
    zeros = bytes(1 << 20)
    for _ in range(mebibytes):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + piece * mebibytes + end + struct.pack("<II", crc, BOMB_BYTES & 0xFFFFFFFF)


@functools.cache
def _deflate_bomb() -> bytes:
    piece, end = _zero_deflate_pieces()
    # Adler-32 of n zero bytes: a stays 1, b grows by one per byte.
    adler = (BOMB_BYTES % 65521) << 16 | 1
    return b"\x78\xda" + piece * (BOMB_BYTES >> 20) + end + struct.pack(">I", adler)


@functools.cache
def _brotli_bomb() -> bytes:
    compressor = brotli.Compressor(quality=1)
    zeros = bytes(1 << 20)
    parts = [compressor.process(zeros) for _ in range(BOMB_BYTES >> 20)]
    return b"".join(parts) + compressor.finish()


def _bomb(coding: str, make: Callable[[], bytes]) -> Handler:
    async def handler(request: _Request) -> None:
        if request.path != "/":
            await _not_found(request)
            return
        body = await asyncio.to_thread(make)  # built once, off the loop
        await _send(request.writer, 200, [*_HTML_TYPE, ("Content-Encoding", coding)], body)

    return handler


# -- endless and slow -----------------------------------------------------------------------


async def _endless(request: _Request) -> None:
    writer = request.writer
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n")
    block = random.Random(1).randbytes(_CHUNK)
    sent = 0
    while _stream_open(request, sent):
        writer.write(block)
        sent += len(block)
        await writer.drain()


async def _endless_chunked(request: _Request) -> None:
    writer = request.writer
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    payload = b"<p>endless</p>\n" * (_CHUNK // 15)
    chunk = b"%x\r\n" % len(payload) + payload + b"\r\n"
    sent = 0
    while _stream_open(request, sent):
        writer.write(chunk)
        sent += len(chunk)
        await writer.drain()


async def _drip(request: _Request, data: bytes) -> None:
    """Write ``data`` one byte per interval until the deadline."""
    for i in range(len(data)):
        if not _stream_open(request, i):
            return
        request.writer.write(data[i : i + 1])
        await request.writer.drain()
        await asyncio.sleep(request.interval_s)


async def _slow_head(request: _Request) -> None:
    request.writer.write(b"HTTP/1.1 200 OK\r\n")
    await _drip(request, b"X-Slow: " + b"s" * 100_000)


async def _slow_body(request: _Request) -> None:
    body = _page([]) * 100
    request.writer.write(_head(200, _HTML_TYPE, len(body)))
    await _drip(request, body)


# -- headers, status lines, resets ----------------------------------------------------------


async def _huge_header(request: _Request) -> None:
    request.writer.write(b"HTTP/1.1 200 OK\r\nX-Huge: " + b"h" * (1 << 20) + b"\r\n")
    await _send_tail(request)


async def _many_headers(request: _Request) -> None:
    lines = b"".join(b"X-Header-%d: value\r\n" % i for i in range(10_000))
    request.writer.write(b"HTTP/1.1 200 OK\r\n" + lines)
    await _send_tail(request)


async def _bad_header(request: _Request) -> None:
    request.writer.write(b"HTTP/1.1 200 OK\r\nX-Nul: a\x00b\r\nno colon here\r\nBad Name : x\r\n")
    await _send_tail(request)


async def _send_tail(request: _Request) -> None:
    body = _page([])
    request.writer.write(
        b"Content-Type: text/html\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % len(body) + body
    )
    await request.writer.drain()


async def _bad_status(request: _Request) -> None:
    body = _page([])
    request.writer.write(b"HTTP/1.1 2OO OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await request.writer.drain()


async def _no_status(request: _Request) -> None:
    request.writer.write(_page([]) * 10)
    await request.writer.drain()


async def _garbage(request: _Request) -> None:
    request.writer.write(random.Random(2).randbytes(64 << 10))
    await request.writer.drain()


async def _cut_short(request: _Request, reset: bool) -> None:
    writer = request.writer
    writer.write(_head(200, [("Content-Type", "text/html")], 1 << 20))
    writer.write(b"<p>cut</p>" * ((64 << 10) // 10))
    await writer.drain()
    await asyncio.sleep(0.05)  # let the client read what was sent before it is cut
    if reset:
        sock = writer.get_extra_info("socket")
        # Linger 0: close() sends RST instead of FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


async def _reset(request: _Request) -> None:
    await _cut_short(request, reset=True)


async def _short_body(request: _Request) -> None:
    await _cut_short(request, reset=False)


# -- redirects ------------------------------------------------------------------------------


async def _redirect(request: _Request, location: str, status: int = 302) -> None:
    await _send(request.writer, status, [("Location", location), *_HTML_TYPE], b"")


async def _redirect_loop(request: _Request) -> None:
    if request.path == "/":
        await _redirect(request, "/loop")
    elif request.path == "/loop":
        await _redirect(request, _origin(request) + "/")
    else:
        await _not_found(request)


async def _redirect_chain(request: _Request) -> None:
    hop = 0 if request.path == "/" else _hop_number(request.path, "/hop/")
    if hop is None or hop > REDIRECT_CHAIN_HOPS:
        await _not_found(request)
    elif hop == REDIRECT_CHAIN_HOPS:
        await _send(request.writer, 200, _HTML_TYPE, _page([], "end of the chain"))
    else:
        await _redirect(request, f"/hop/{hop + 1}", 301)


def _hop_number(path: str, prefix: str) -> int | None:
    digits = path[len(prefix) :] if path.startswith(prefix) else ""
    return int(digits) if digits.isdigit() and len(digits) < 6 else None


def loopback_targets(tld: str, port: int) -> dict[str, str]:
    """Path on ``redirect-loopback`` -> the loopback URL it redirects to (``/`` first)."""
    suffix = "" if port == 80 else f":{port}"
    return {
        "/": f"http://localhost{suffix}/",
        "/to/ip": f"http://127.0.0.1{suffix}/",
        "/to/v6": f"http://[::1]{suffix}/",
        "/to/name": f"http://loopback.hostile.{tld}{suffix}/",
        "/to/sentinel": f"http://sentinel.hostile.{tld}{suffix}/",
    }


async def _redirect_loopback(request: _Request) -> None:
    target = loopback_targets(request.tld, request.port).get(request.path)
    if target is None:
        await _not_found(request)
    else:
        await _redirect(request, target)


async def _long_location(request: _Request) -> None:
    if request.path != "/":
        await _not_found(request)
        return
    await _redirect(request, "/" + "l" * (LONG_URL_CHARS - 1))


# -- content: charsets, binary, links -------------------------------------------------------


async def _charset_wrong(request: _Request) -> None:
    body = '<html><body><a href="/café">café</a> naïve</body></html>'.encode()
    await _content(request, "text/html; charset=iso-8859-1", body, ("/café",))


async def _charset_absent(request: _Request) -> None:
    body = '<html><body><a href="/café">Ünïcödé</a></body></html>'.encode("cp1252")
    await _content(request, "text/html", body, ("/café",))


async def _charset_invalid(request: _Request) -> None:
    body = (
        b'<html><body><a href="/bad\xff\xfe">x</a><a href="/over\xc0\xaf">y</a>'
        b'<a href="/surrogate\xed\xa0\x80">z</a>\xf8\x88\x80\x80\x80</body></html>'
    )
    await _content(request, "text/html; charset=utf-8", body, ())


async def _charset_bogus(request: _Request) -> None:
    body = (
        b'<html><head><meta charset="utf-7"></head><body>'
        b'<a href="/+AGEAYgBj-">utf7</a><a href="/plain">plain</a></body></html>'
    )
    await _content(request, "text/html; charset=x-no-such", body, ("/+AGEAYgBj-", "/plain"))


async def _content(
    request: _Request, content_type: str, body: bytes, children: tuple[str, ...]
) -> None:
    """``body`` at ``/``; the paths it links to as plain pages (any spelling of them)."""
    if request.path == "/":
        await _send(request.writer, 200, [("Content-Type", content_type)], body)
    elif request.path in ("/plain", "/caf%C3%A9", "/caf%E9", "/+AGEAYgBj-") or any(
        request.path.startswith(p) for p in ("/bad", "/over", "/surrogate")
    ):
        await _send(request.writer, 200, _HTML_TYPE, _page([]))
    else:
        await _not_found(request)


async def _binary_html(request: _Request) -> None:
    if request.path != "/":
        await _not_found(request)
        return
    body = random.Random(3).randbytes(1 << 20)
    await _send(request.writer, 200, [("Content-Type", "text/html")], body)


@functools.cache
def _many_links_body(tld: str) -> bytes:
    target = f"http://{host_name(case('nxdomain'), tld)}/n/"
    return (
        "<!DOCTYPE html><html><body>"
        + "".join(f'<a href="{target}{k}">{k}</a>' for k in range(MANY_LINKS))
        + "</body></html>"
    ).encode("ascii")


async def _many_links(request: _Request) -> None:
    if request.path != "/":
        await _not_found(request)
        return
    await _send(request.writer, 200, _HTML_TYPE, _many_links_body(request.tld))


def malformed_links(tld: str) -> list[str]:
    """The references of ``long-urls``: over-long, then malformed in many ways."""
    nx = host_name(case("nxdomain"), tld)
    return [
        "/" + "a" * (LONG_URL_CHARS - 1),
        f"http://{nx}/" + "b" * LONG_URL_CHARS,
        f"http://{nx}/?q=" + "%zz" * (LONG_URL_CHARS // 3),
        "http://" + "c" * 300 + f".{tld}/",
        "http://[bad/",
        "http://[::1/",
        "http://exa mple.test/",
        "http://:80/",
        "http:///nohost",
        f"http://{nx}:99999/",
        f"http://{nx}:0/",
        f"http://{nx}:port/",
        "ht!tp://scheme.test/",
        "javascript:alert(1)",
        "mailto:someone@example.test",
        "data:text/html,<b>x</b>",
        "%zz%",
        "\x00\x01\x02",
        "http://%zz.test/",
        "http://a..b.test/",
        "http://xn--.test/",
        "http://xn--a-ecp.xn--zz/",
        "\\\\backslash\\path",
        "//" + "d" * 70 + ".test/",
        "?" + "e" * LONG_URL_CHARS,
        "#only-a-fragment",
        "http://user:pass@" + nx + "/",
    ]


async def _long_urls(request: _Request) -> None:
    if request.path != "/":
        await _not_found(request)
        return
    # Written raw: html.escape would change the very bytes under test.
    anchors = "".join(f'<a href="{href}">x</a>' for href in malformed_links(request.tld))
    body = ("<!DOCTYPE html><html><body>" + anchors + "</body></html>").encode("utf-8")
    await _send(request.writer, 200, _HTML_TYPE, body)


def idn_links(tld: str, port: int) -> list[str]:
    """The references of ``idn``: one host in four spellings, then broken IDNs."""
    suffix = "" if port == 80 else f":{port}"
    return [
        f"http://bücher.hostile.{tld}{suffix}/unicode",
        f"http://xn--bcher-kva.hostile.{tld}{suffix}/punycode",
        f"http://BÜCHER.hostile.{tld}{suffix}/upper",
        f"http://b%C3%BCcher.hostile.{tld}{suffix}/escaped",
        "/straße?q=größe",
        f"http://xn--zz.hostile.{tld}/",
        f"http://{'ü' * 70}.hostile.{tld}/",
        f"http://\u202eevil.hostile.{tld}/",
    ]


async def _idn(request: _Request) -> None:
    if request.path == "/":
        body = _page(idn_links(request.tld, request.port))
        await _send(request.writer, 200, _HTML_TYPE, body)
    elif request.path in ("/unicode", "/punycode", "/upper", "/escaped") or request.path.startswith(
        "/stra"
    ):
        await _send(request.writer, 200, _HTML_TYPE, _page([]))
    else:
        await _not_found(request)


# -- statuses -------------------------------------------------------------------------------


def _status(status: int, retry_after: Callable[[], str]) -> Handler:
    async def handler(request: _Request) -> None:
        if request.path != "/":
            await _not_found(request)
            return
        headers = [("Retry-After", retry_after()), *_HTML_TYPE]
        await _send(request.writer, status, headers, _page([], f"status {status}"))

    return handler


def _http_date_in(seconds: float) -> str:
    return email.utils.formatdate(time.time() + seconds, usegmt=True)


# -- robots ---------------------------------------------------------------------------------


def _robots_only(serve: Handler) -> Handler:
    async def handler(request: _Request) -> None:
        if request.path == "/robots.txt":
            await serve(request)
        else:
            await _not_found(request)

    return handler


@functools.cache
def _huge_robots() -> bytes:
    rules = b"".join(b"Disallow: /private/%d/\n" % i for i in range(200_000))
    return b"User-agent: *\n" + rules


async def _robots_huge(request: _Request) -> None:
    await _send(request.writer, 200, [("Content-Type", "text/plain")], _huge_robots())


async def _robots_binary(request: _Request) -> None:
    await _send(
        request.writer, 200, [("Content-Type", "text/plain")], random.Random(4).randbytes(8192)
    )


async def _robots_html(request: _Request) -> None:
    body = _page(["/a", "/b"], "<h1>Welcome</h1><p>User-agent: * Disallow: /</p>")
    await _send(request.writer, 200, _HTML_TYPE, body)


async def _robots_slow(request: _Request) -> None:
    body = b"User-agent: *\nDisallow: /slow/\n" * 100
    request.writer.write(_head(200, [("Content-Type", "text/plain")], len(body)))
    await _drip(request, body)


async def _robots_loop(request: _Request) -> None:
    if request.path == "/robots.txt":
        await _redirect(request, "/r", 301)
    elif request.path == "/r":
        await _redirect(request, "/robots.txt", 301)
    else:
        await _not_found(request)


async def _robots_chain(request: _Request) -> None:
    hop = 0 if request.path == "/robots.txt" else _hop_number(request.path, "/robots/")
    if hop is None or hop > ROBOTS_CHAIN_HOPS:
        await _not_found(request)
    elif hop == ROBOTS_CHAIN_HOPS:
        await _send(request.writer, 200, [("Content-Type", "text/plain")], _ALLOW_ALL)
    else:
        await _redirect(request, f"/robots/{hop + 1}", 301)


async def _robots_loopback(request: _Request) -> None:
    suffix = "" if request.port == 80 else f":{request.port}"
    await _redirect(request, f"http://sentinel.hostile.{request.tld}{suffix}/robots.txt", 301)


_HANDLERS: Final[Mapping[str, Handler]] = {
    "gzip-bomb": _bomb("gzip", _gzip_bomb),
    "deflate-bomb": _bomb("deflate", _deflate_bomb),
    "brotli-bomb": _bomb("br", _brotli_bomb),
    "endless": _endless,
    "endless-chunked": _endless_chunked,
    "slow-head": _slow_head,
    "slow-body": _slow_body,
    "huge-header": _huge_header,
    "many-headers": _many_headers,
    "bad-header": _bad_header,
    "bad-status": _bad_status,
    "no-status": _no_status,
    "garbage": _garbage,
    "reset": _reset,
    "short-body": _short_body,
    "redirect-loop": _redirect_loop,
    "redirect-chain": _redirect_chain,
    "redirect-loopback": _redirect_loopback,
    "long-location": _long_location,
    "charset-wrong": _charset_wrong,
    "charset-absent": _charset_absent,
    "charset-invalid": _charset_invalid,
    "charset-bogus": _charset_bogus,
    "binary-html": _binary_html,
    "many-links": _many_links,
    "long-urls": _long_urls,
    "idn": _idn,
    "status-429": _status(429, lambda: str(RETRY_AFTER_S)),
    "status-503": _status(503, lambda: _http_date_in(RETRY_AFTER_S)),
    "status-503-bad-retry": _status(503, lambda: "soon"),
    "robots-huge": _robots_only(_robots_huge),
    "robots-binary": _robots_only(_robots_binary),
    "robots-html": _robots_only(_robots_html),
    "robots-slow": _robots_only(_robots_slow),
    "robots-loop": _robots_loop,
    "robots-chain": _robots_chain,
    "robots-loopback": _robots_only(_robots_loopback),
}
assert set(_HANDLERS) == {c.name for c in SERVED}, "every served case needs a handler"
