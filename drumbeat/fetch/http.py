"""An HTTP client of the fetchers on aiohttp: one GET to exactly the address it is given.

The manager resolves each host once, checks the address guard and puts the IP
into every fetch item; :class:`AiohttpClient` connects to that IP (so per-IP
politeness and the guard hold for the real connection), checks the guard again
before connecting, and turns every network or protocol failure into a stable
reason string instead of an exception (the contract:
:class:`drumbeat.fetch.client.HttpClient`). Bodies are capped on the wire
(``max_body_bytes``) and after content decoding (``max_decoded_bytes``), so a
huge page or a gzip bomb costs at most the caps in RAM and time.

Page redirects are not followed: a 3xx comes back as is, with ``location``
resolved against the URL, and the crawl logic decides. Only :meth:`fetch_robots`
follows redirects (RFC 9309: at least five hops), resolving and guarding every
hop.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import aiohttp
from aiohttp import http_exceptions
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from drumbeat.fetch.client import (
    ROBOTS_MAX_BYTES,
    ClientOptions,
    conditional_headers,
    with_changes,
)
from drumbeat.fetch.dns import DnsCache, Resolver
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.response import (
    URL_ERRORS,
    FetchResponse,
    choose_address,
    finish_response,
    follow_robots,
    head_name,
    media_type,
    resolve_location,
)

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


class AiohttpClient:
    """:class:`drumbeat.fetch.client.HttpClient` on aiohttp.

    Built from ``options`` (the defaults when None) with any of its fields given as
    keywords replaced; ``resolver`` None: a :class:`DnsCache` on the system
    configuration, made and closed here. Pooled keep-alive connections are shared per
    host, so after a host's address changes a request may still go over a connection
    opened to the previous (also guarded) address.
    """

    def __init__(
        self,
        options: ClientOptions | None = None,
        *,
        policy: AddressPolicy,
        resolver: Resolver | None,
        **changes: Any,
    ) -> None:
        options = with_changes(options, changes)
        self._policy = policy
        self._verify_tls = options.verify_tls
        # A DnsCache made here is ours to close; a resolver passed in is the caller's.
        self._own_dns: DnsCache | None = None
        if resolver is None:
            resolver = self._own_dns = DnsCache()
        self._dns: Resolver = resolver
        self._max_connections = options.max_connections
        self._timeout = aiohttp.ClientTimeout(
            total=options.total_timeout_s,
            sock_connect=options.connect_timeout_s,
            sock_read=options.read_timeout_s,
        )
        self._max_body_bytes = options.max_body_bytes
        self._max_decoded_bytes = options.max_decoded_bytes
        self._max_header_bytes = options.max_header_bytes
        self._max_retry_after_s = options.max_retry_after_s
        self._headers = dict(options.request_headers())
        self._headers["Accept"] = options.accept
        self._pins = _PinnedResolver()
        # aiohttp sessions must be created inside the running event loop.
        self._session: aiohttp.ClientSession | None = None

    async def fetch(
        self,
        url: str,
        ip: str | None,
        *,
        etag: str | None = None,
        last_modified: str | None = None,
    ) -> FetchResponse:
        """GET ``url`` from ``ip``; a redirect is returned, not followed (conditional
        with validators: see HttpClient.fetch)."""
        extra = conditional_headers(etag, last_modified) if etag or last_modified else ()
        return await self._fetch(url, ip, self._max_body_bytes, self._max_decoded_bytes, extra)

    async def fetch_robots(
        self, url: str, ip: str | None, max_bytes: int = ROBOTS_MAX_BYTES
    ) -> FetchResponse:
        """GET a robots.txt, following up to five redirects (see HttpClient.fetch_robots)."""
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
        return f"<AiohttpClient [{in_flight} hosts in flight, limit {self._max_connections}]>"

    async def _fetch(
        self,
        url: str,
        ip: str | None,
        body_cap: int,
        decoded_cap: int,
        extra: Sequence[tuple[str, str]] = (),
    ) -> FetchResponse:
        started = time.perf_counter()
        response = FetchResponse(url=url, ip=ip, fetch_time=time.time())
        response.error = await self._exchange(response, body_cap, extra)
        finish_response(response, started, decoded_cap, self._max_retry_after_s)
        return response

    async def _exchange(
        self, response: FetchResponse, body_cap: int, extra: Sequence[tuple[str, str]] = ()
    ) -> str | None:
        """Resolve, guard, send and read into ``response``; return the error reason."""
        try:
            target = URL(response.url)
        except URL_ERRORS:
            return "url:invalid"
        host = target.raw_host
        refusal = await choose_address(response, target.scheme, host, self._dns, self._policy)
        if refusal is not None:
            return refusal
        assert host is not None and response.ip is not None
        try:
            with self._pins.pin(host, response.ip):
                async with self._client().get(
                    target, allow_redirects=False, headers=dict(extra) if extra else None
                ) as reply:
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


class _PinnedResolver(AbstractResolver):
    """Hands aiohttp's connector the address :meth:`AiohttpClient.fetch` chose for a host.

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


def _request_head(info: aiohttp.RequestInfo) -> bytes:
    """The request head exactly as aiohttp serialised it (origin-form target): its
    headers are a view of those the request sent (aiohttp ClientRequest.send)."""
    lines = [f"{info.method} {info.url.raw_path_qs} HTTP/1.1"]
    lines.extend(f"{name}: {value}" for name, value in info.headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def _read_head(reply: aiohttp.ClientResponse, response: FetchResponse) -> None:
    response.request_head = _request_head(reply.request_info)
    response.status = reply.status
    response.headers = list(reply.headers.items())
    response.content_type = media_type(reply.headers.get("Content-Type"))
    tags = reply.headers.getall("X-Robots-Tag", ())
    if tags:
        response.x_robots_tag = "\n".join(tags)
    location = reply.headers.get("Location")
    if location:
        response.location = resolve_location(response.url, location)
    version = reply.version
    assert version is not None  # set once the status line is read
    status_line = f"HTTP/{version.major}.{version.minor} {reply.status} {reply.reason or ''}"
    response.response_head = (
        status_line.encode("latin-1", "replace")
        + b"\r\n"
        + b"".join(head_name(name) + b": " + value + b"\r\n" for name, value in reply.raw_headers)
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
