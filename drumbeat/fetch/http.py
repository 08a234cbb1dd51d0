"""The HTTP client of the fetchers: one GET to exactly the address it is given.

The manager resolves each host once, checks the address guard and puts the IP
into every fetch item; :class:`HttpClient` connects to that IP (so per-IP
politeness and the guard hold for the real connection), checks the guard again
before connecting, and turns every network or protocol failure into a stable
reason string instead of an exception. Bodies are capped on the wire
(``max_body_bytes``) and after content decoding (``max_decoded_bytes``), so a
huge page or a gzip bomb costs at most the caps in RAM and time.

Page redirects are not followed: a 3xx comes back as is, with ``location``
resolved against the URL, and the crawl logic decides. Only :meth:`fetch_robots`
follows redirects (RFC 9309: at least five hops), resolving and guarding every
hop.
"""

from __future__ import annotations

import datetime
import email.utils
import ipaddress
import math
import socket
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, TypeVar
from urllib.parse import urljoin

import aiohttp
import brotli
from aiohttp import http_exceptions
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from drumbeat.fetch.dns import DnsCache, Resolver
from drumbeat.fetch.guard import AddressPolicy

_URL = TypeVar("_URL")  # a parsed URL: see choose_address

MAX_ROBOTS_REDIRECTS: Final = 5
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})

# The politeness scheduler already keeps about one request per host in
# flight; two lets a robots.txt fetch overlap a page without queueing.
_CONNECTIONS_PER_HOST: Final = 2

# aiohttp wraps parser errors in generic exceptions but keeps the original as
# the cause; the first class in this table that matches names the reason.
_PROTOCOL_REASONS: Final[tuple[tuple[type[BaseException], str], ...]] = (
    (http_exceptions.BadStatusLine, "http:bad_status_line"),
    (http_exceptions.LineTooLong, "http:header_too_large"),
    (http_exceptions.InvalidHeader, "http:bad_header"),
    (http_exceptions.ContentLengthError, "http:incomplete_body"),
    (http_exceptions.TransferEncodingError, "http:bad_chunking"),
)


@dataclass(slots=True)
class FetchResponse:
    """The outcome of one fetch; built for every request, failed or not.

    ``error`` is None on success (any HTTP status, 3xx and 5xx included) or a
    stable reason: ``connect``, ``timeout``, ``guard:<class>``, ``dns:<reason>``,
    ``url:invalid``, ``too_many_redirects``, ``tls:certificate`` (an HTTPS server's
    certificate failed verification), ``tls:error`` (another TLS failure) or
    ``http:<short>`` for protocol errors (``bad_status_line``, ``header_too_large``,
    ``bad_header``, ``incomplete_body``, ``bad_chunking``, ``disconnected``,
    ``bad_message``, ``error``). Fields after a failure hold whatever was received
    before it.

    ``ip`` is the address connected to. ``headers`` are the response headers as
    (name, value) pairs; ``content_type`` is the media type only, lower-case;
    ``location`` is the Location header resolved against ``url``.
    ``request_head`` and ``response_head`` are the bytes of the request line and
    headers as sent and of the status line and headers as received, each
    ending in CRLF CRLF, for WARC records; both are empty when no response head
    arrived (the request head is read off the response, which costs nothing,
    rather than traced for every request). ``body`` is the payload as on the
    wire minus transfer framing (still content-encoded), cut short when
    ``truncated`` says why, in WARC-Truncated's words: ``length`` (the body cap),
    ``time`` (a timeout after the head arrived) or ``disconnect`` (the connection
    broke or the framing was bad after the head arrived). ``decoded`` is the body
    after Content-Encoding
    decoding, cut at the decoded cap when ``decoded_truncated``; it is None
    when ``decode_error`` says why (``unknown:<coding>``, ``corrupt:<coding>``)
    or when no response arrived. ``redirects`` lists the URLs a robots.txt
    fetch was redirected to, in order; the last one is ``url``.
    ``retry_after_s`` is the first Retry-After header as seconds from
    ``fetch_time`` (delay-seconds or an HTTP date; a past date is 0), capped at the
    client's ``max_retry_after_s``; None when absent or unparsable. It is parsed
    whatever the status; 429 and 503 are where it matters.
    """

    url: str
    ip: str | None
    fetch_time: float
    status: int | None = None
    error: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str | None = None
    location: str | None = None
    request_head: bytes = b""
    response_head: bytes = b""
    body: bytes = b""
    truncated: str | None = None  # None, or "length", "time", "disconnect" (WARC-Truncated)
    decoded: bytes | None = None
    decoded_truncated: bool = False
    decode_error: str | None = None
    elapsed_ms: float = 0.0
    redirects: list[str] = field(default_factory=list)
    retry_after_s: float | None = None


class HttpClient:
    """Keep-alive HTTP/1.1 client that connects only where the caller says.

    ``fetch(url, ip)`` connects to ``ip`` when given; otherwise the host is
    resolved through ``resolver`` (a :class:`DnsCache` on the system
    configuration when None). An IP-literal host is connected to as written.
    The guard ``policy`` is checked on that address before any connection is
    made. Neither :meth:`fetch` nor :meth:`fetch_robots` raises for network,
    protocol or content problems; only programming errors escape.

    For one host the caller uses one IP at a time (the manager's DNS cache
    gives one answer per host); pooled keep-alive connections are shared per
    host, so after a host's address changes a request may still go over a
    connection opened to the previous (also guarded) address; ``ip`` in the
    response always reports the peer actually used.
    """

    def __init__(
        self,
        *,
        user_agent: str,
        policy: AddressPolicy,
        resolver: Resolver | None,
        max_connections: int = 100,
        connect_timeout_s: float = 10,
        read_timeout_s: float = 30,
        total_timeout_s: float = 60,
        max_body_bytes: int = 10 << 20,
        max_decoded_bytes: int = 50 << 20,
        max_header_bytes: int = 64 << 10,
        accept_encoding: str = "gzip, deflate, br",
        max_retry_after_s: float = 86_400,
        verify_tls: bool = True,
    ) -> None:
        self._policy = policy
        self._verify_tls = verify_tls
        # A DnsCache made here is ours to close; a resolver passed in is the caller's.
        self._own_dns: DnsCache | None = None
        if resolver is None:
            resolver = self._own_dns = DnsCache()
        self._dns: Resolver = resolver
        self._max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(
            total=total_timeout_s, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._max_body_bytes = max_body_bytes
        self._max_decoded_bytes = max_decoded_bytes
        self._max_header_bytes = max_header_bytes
        self._max_retry_after_s = max_retry_after_s
        self._headers = {"User-Agent": user_agent, "Accept-Encoding": accept_encoding}
        self._pins = _PinnedResolver()
        # aiohttp sessions must be created inside the running event loop.
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self, url: str, ip: str | None) -> FetchResponse:
        """GET ``url`` from ``ip`` (see the class); a redirect is returned, not followed."""
        return await self._fetch(url, ip, self._max_body_bytes, self._max_decoded_bytes)

    async def fetch_robots(
        self, url: str, ip: str | None, max_bytes: int = 512 << 10
    ) -> FetchResponse:
        """GET a robots.txt, following up to five redirects.

        Each hop's Location is resolved against the current URL; a hop to
        another host is resolved through the resolver and guarded like any
        fetch. Body and decoded body are both capped at ``max_bytes`` (RFC 9309
        asks parsers to read at least 500 KiB). The response is the last hop's,
        with the URLs redirected to in ``redirects``; a sixth redirect gives
        ``error="too_many_redirects"``.
        """
        return await follow_robots(
            lambda hop_url, hop_ip: self._fetch(hop_url, hop_ip, max_bytes, max_bytes), url, ip
        )

    async def close(self) -> None:
        """Close pooled connections (and the DnsCache made when no resolver was given)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._own_dns is not None:
            await self._own_dns.close()

    def __repr__(self) -> str:
        in_flight = self._pins.active()
        return f"<HttpClient [{in_flight} hosts in flight, limit {self._max_connections}]>"

    async def _fetch(
        self, url: str, ip: str | None, body_cap: int, decoded_cap: int
    ) -> FetchResponse:
        started = time.perf_counter()
        response = FetchResponse(url=url, ip=ip, fetch_time=time.time())
        response.error = await self._exchange(response, body_cap)
        finish_response(response, started, decoded_cap, self._max_retry_after_s)
        return response

    async def _exchange(self, response: FetchResponse, body_cap: int) -> str | None:
        """Resolve, guard, send and read into ``response``; return the error reason."""
        target, refusal = await choose_address(response, self._dns, self._policy, URL)
        if refusal is not None:
            return refusal
        assert target is not None and target.raw_host is not None and response.ip is not None
        host = target.raw_host
        try:
            with self._pins.pin(host, response.ip):
                async with self._client().get(target, allow_redirects=False) as reply:
                    _read_head(reply, response)
                    await _read_body(reply, response, body_cap)
        except TimeoutError:
            return "timeout"
        except aiohttp.ClientConnectorCertificateError:
            return "tls:certificate"
        except (aiohttp.ClientConnectorSSLError, aiohttp.ClientSSLError):
            return "tls:error"
        except aiohttp.ClientConnectorError:
            return "connect"
        except aiohttp.ServerDisconnectedError:
            return "http:disconnected"
        except (aiohttp.ClientResponseError, aiohttp.ClientPayloadError) as exc:
            return _protocol_reason(exc)
        except aiohttp.InvalidURL:
            return "url:invalid"
        except (aiohttp.ClientOSError, ConnectionError):
            return "http:disconnected"
        except aiohttp.ClientError:
            return "http:error"
        return None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                limit_per_host=_CONNECTIONS_PER_HOST,
                ssl=self._verify_tls,  # True: verify against the system CAs; False: accept any
                resolver=self._pins,
                # The pinned resolver is the cache: aiohttp's own would keep
                # serving an address after the caller moved the host elsewhere.
                use_dns_cache=False,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                headers=self._headers,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                max_line_size=self._max_header_bytes,
                max_field_size=self._max_header_bytes,
            )
        return self._session


# -- backend-independent steps, shared with drumbeat.fetch.curl ---------------------------


async def choose_address(
    response: FetchResponse, dns: Resolver, policy: AddressPolicy, parse: Callable[[str], _URL]
) -> tuple[_URL | None, str | None]:
    """Parse ``response.url`` with ``parse`` (yarl's ``URL``, or anything that gives the
    same ``scheme`` and ``raw_host``), pick the address to connect to and check the guard.

    Sets ``response.ip`` (an IP-literal host as written, else the given IP, else the
    resolver's answer). Returns (the parsed URL, None) when the request may go ahead,
    or (the URL if it parsed, the error reason) when it may not.
    """
    try:
        target = parse(response.url)
    except (ValueError, TypeError, IndexError):  # yarl 1.x: IndexError on "http://[]@"
        return None, "url:invalid"
    host = target.raw_host
    if target.scheme not in ("http", "https") or not host:
        return None, "url:invalid"
    literal = _ip_literal(host)
    if literal is not None:
        response.ip = literal
    elif response.ip is None:
        answer = await dns.resolve(host)
        if answer.ip is None:
            return target, answer.error or "dns:error"
        response.ip = answer.ip
    return target, policy.refusal(response.ip)


def finish_response(
    response: FetchResponse, started: float, decoded_cap: int, max_retry_after_s: float
) -> None:
    """After the exchange: truncation flag, decoded body, Retry-After and elapsed time."""
    if response.status is not None:
        if response.error is not None and response.truncated is None:
            # The head arrived, the body did not all: what we have is a cut-short page.
            response.truncated = "time" if response.error == "timeout" else "disconnect"
        _decode_body(response, decoded_cap)
        response.retry_after_s = retry_after(
            response.headers, response.fetch_time, max_retry_after_s
        )
    response.elapsed_ms = (time.perf_counter() - started) * 1000


async def follow_robots(
    fetch_hop: Callable[[str, str | None], Awaitable[FetchResponse]], url: str, ip: str | None
) -> FetchResponse:
    """The redirect loop of ``fetch_robots`` (see :meth:`HttpClient.fetch_robots`) around
    ``fetch_hop(url, ip)``, which fetches one hop without following it."""
    chain: list[str] = []
    current_url, current_ip = url, ip
    while True:
        response = await fetch_hop(current_url, current_ip)
        response.redirects = chain
        if (
            response.error is not None
            or response.status not in REDIRECT_STATUSES
            or not response.location
        ):
            return response
        if len(chain) == MAX_ROBOTS_REDIRECTS:
            response.error = "too_many_redirects"
            return response
        next_url = response.location
        if _host_of(next_url) != _host_of(current_url):
            current_ip = None
        chain.append(next_url)
        current_url = next_url


def media_type(content_type: str | None) -> str | None:
    """The media type of a Content-Type value, lower-case; None when absent or empty."""
    media = content_type.split(";", 1)[0].strip().lower() if content_type else ""
    return media or None


def resolve_location(url: str, location: str) -> str:
    """A Location header resolved against the URL it came from (as is if that fails)."""
    try:
        return urljoin(url, location.strip())
    except ValueError:
        return location


class _PinnedResolver(AbstractResolver):
    """Hands aiohttp's connector the address :meth:`HttpClient.fetch` chose for a host.

    A pin lives while at least one fetch of that host is in flight, so the table
    holds no more entries than there are requests in flight.
    """

    def __init__(self) -> None:
        self._pins: dict[str, tuple[str, int]] = {}

    @contextmanager
    def pin(self, host: str, ip: str) -> Iterator[None]:
        key = _pin_key(host)
        _, users = self._pins.get(key, (ip, 0))
        self._pins[key] = (ip, users + 1)
        try:
            yield
        finally:
            current, users = self._pins[key]
            if users == 1:
                del self._pins[key]
            else:
                self._pins[key] = (current, users - 1)

    def active(self) -> int:
        return len(self._pins)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        pinned = self._pins.get(_pin_key(host))
        if pinned is None:
            # Only reachable if a request bypassed fetch(): refuse to guess.
            raise OSError(f"no address chosen for {host!r}")
        ip = pinned[0]
        return [
            {
                "hostname": host,
                "host": ip,
                "port": port,
                "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            }
        ]

    async def close(self) -> None:
        self._pins.clear()


def _pin_key(host: str) -> str:
    return host.lower().rstrip(".")


def _ip_literal(host: str) -> str | None:
    if not (host[-1:].isdigit() or ":" in host):  # a name (IPv4 ends in a digit): no parse
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _host_of(url: str) -> str | None:
    try:
        return URL(url).raw_host
    except (ValueError, TypeError):
        return None


def _request_head(info: aiohttp.RequestInfo) -> bytes:
    """The request head exactly as aiohttp serialised it (origin-form target): its
    headers are a view of those the request sent (aiohttp ClientRequest.send)."""
    lines = [f"{info.method} {info.url.raw_path_qs} HTTP/1.1"]
    lines.extend(f"{name}: {value}" for name, value in info.headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def _head_name(name: bytes) -> bytes:
    # The body we keep has its transfer framing (chunked) removed, so a head that still
    # announced it would make WARC readers de-chunk it again; rename it like other crawlers.
    return b"X-Crawler-" + name if name.lower() == b"transfer-encoding" else name


def _read_head(reply: aiohttp.ClientResponse, response: FetchResponse) -> None:
    response.request_head = _request_head(reply.request_info)
    response.status = reply.status
    response.headers = list(reply.headers.items())
    response.content_type = media_type(reply.headers.get("Content-Type"))
    location = reply.headers.get("Location")
    if location:
        response.location = resolve_location(response.url, location)
    version = reply.version
    status_line = f"HTTP/{version.major}.{version.minor} {reply.status} {reply.reason or ''}"
    response.response_head = (
        status_line.encode("latin-1", "replace")
        + b"\r\n"
        + b"".join(_head_name(name) + b": " + value + b"\r\n" for name, value in reply.raw_headers)
        + b"\r\n"
    )
    connection = reply.connection
    transport = connection.transport if connection is not None else None
    peer = transport.get_extra_info("peername") if transport is not None else None
    if peer:
        response.ip = str(peer[0])


async def _read_body(reply: aiohttp.ClientResponse, response: FetchResponse, cap: int) -> None:
    """Read up to ``cap`` bytes; beyond it, stop and drop the connection."""
    body = bytearray()
    try:
        while chunk := await reply.content.readany():
            room = cap - len(body)
            if len(chunk) > room:
                body += chunk[:room]
                response.truncated = "length"
                # The rest of the payload is still on the socket: the connection
                # cannot be reused, and closing it stops the transfer.
                reply.close()
                break
            body += chunk
    finally:
        response.body = bytes(body)


def retry_after(headers: list[tuple[str, str]], now: float, cap_s: float) -> float | None:
    """Seconds to wait from ``now`` (epoch) by the first Retry-After of ``headers``.

    RFC 9110 §10.2.3: delay-seconds or an HTTP date. The result is within
    ``[0, cap_s]``; None when there is no such header or it is neither form.
    """
    value = next((v for name, v in headers if name.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        # int() refuses digit strings longer than 4300 characters; any such delay is capped.
        seconds = float(value) if len(value) < 20 else math.inf
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT; obsolete forms may lack a zone
            when = when.replace(tzinfo=datetime.timezone.utc)
        try:
            seconds = when.timestamp() - now
        except (OverflowError, OSError, ValueError):
            return None
    return float(min(max(seconds, 0.0), cap_s))


def _protocol_reason(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        for kind, reason in _PROTOCOL_REASONS:
            if isinstance(cause, kind):
                return reason
        if isinstance(cause, http_exceptions.BadHttpMessage) and "Too many headers" in str(cause):
            return "http:header_too_large"
        cause = cause.__cause__
    return "http:bad_message"


def _decode_body(response: FetchResponse, cap: int) -> None:
    """Undo Content-Encoding (outermost coding last in the header) into ``decoded``."""
    codings = []
    for value in (v for name, v in response.headers if name.lower() == "content-encoding"):
        codings.extend(c.strip().lower() for c in value.split(","))
    data = response.body
    for coding in reversed([c for c in codings if c and c != "identity"]):
        decoder = _DECODERS.get(coding)
        if decoder is None:
            response.decode_error = f"unknown:{coding}"
            return
        try:
            data, cut = decoder(data, cap)
        except (zlib.error, brotli.error):
            response.decode_error = f"corrupt:{coding}"
            return
        response.decoded_truncated |= cut
    if len(data) > cap:
        data, response.decoded_truncated = data[:cap], True
    response.decoded = data


def _inflate(data: bytes, wbits: int, cap: int) -> tuple[bytes, bool]:
    """zlib-family decoding that stops producing output one byte past ``cap``.

    An incomplete stream (a truncated body) yields what could be decoded; a
    gzip body may hold several members, and bytes after the last stream are
    ignored, as browsers do.
    """
    out = bytearray()
    pending = data
    while pending:
        decompressor = zlib.decompressobj(wbits)
        # max_length: the decompressor keeps the rest of the input in
        # unconsumed_tail instead of expanding it, which is what bounds a bomb.
        out += decompressor.decompress(pending, cap - len(out) + 1)
        if len(out) > cap:
            del out[cap:]
            return bytes(out), True
        pending = decompressor.unused_data
        if not decompressor.eof or wbits != _GZIP_WBITS or not pending.startswith(b"\x1f\x8b"):
            break
    return bytes(out), False


_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS


def _gunzip(data: bytes, cap: int) -> tuple[bytes, bool]:
    return _inflate(data, _GZIP_WBITS, cap)


def _deflate(data: bytes, cap: int) -> tuple[bytes, bool]:
    # "deflate" is meant to be zlib-wrapped (RFC 9110) but many servers send a
    # raw deflate stream; the two-byte zlib header tells them apart.
    wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    return _inflate(data, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS, cap)


def _unbrotli(data: bytes, cap: int) -> tuple[bytes, bool]:
    decompressor = brotli.Decompressor()
    out = bytearray(decompressor.process(data, output_buffer_limit=cap + 1))
    # With an output limit brotli may hold decoded data back until asked with
    # empty input; the limit may be overshot by a block, hence the final cut.
    while len(out) <= cap and not decompressor.can_accept_more_data():
        piece = decompressor.process(b"", output_buffer_limit=cap + 1 - len(out))
        if not piece:
            break
        out += piece
    if len(out) > cap:
        del out[cap:]
        return bytes(out), True
    return bytes(out), False


_DECODERS: Final[dict[str, Callable[[bytes, int], tuple[bytes, bool]]]] = {
    "gzip": _gunzip,
    "x-gzip": _gunzip,
    "deflate": _deflate,
    "br": _unbrotli,
}
