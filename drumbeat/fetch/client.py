"""The contract of the fetchers' HTTP clients, their options, and the choice between them.

:class:`HttpClient` is the Protocol the fetcher codes against; two classes implement it:
:class:`~drumbeat.fetch.curl.CurlHttpClient` (libcurl, the default) and
:class:`~drumbeat.fetch.http.AiohttpClient`. Both are built from one
:class:`ClientOptions` (made from :class:`~drumbeat.settings.Settings`, whose defaults
are the options' defaults), an address ``policy`` and a ``resolver``;
:func:`client_class` names the class for ``Settings.http_client``. What happens around
each exchange, whichever client runs it, is in :mod:`drumbeat.fetch.response`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final, Protocol

from drumbeat.fetch.dns import Resolver
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.response import FetchResponse
from drumbeat.settings import Settings

_DEFAULTS: Final = Settings()

# RFC 9309 asks robots.txt parsers to read at least 500 KiB.
ROBOTS_MAX_BYTES: Final = _DEFAULTS.robots_max_bytes


def conditional_headers(etag: str | None, last_modified: str | None) -> list[tuple[str, str]]:
    """The request headers of a conditional GET (RFC 9110 §13.1): ``If-None-Match`` with
    the ETag and ``If-Modified-Since`` with the Last-Modified the page was last served
    with. A server that still has that version answers 304 Not Modified, with no body.
    A validator that could not be a header value (control characters, not Latin-1: it
    came from a server) is left out rather than sent."""
    out = []
    for name, value in (("If-None-Match", etag), ("If-Modified-Since", last_modified)):
        if value and _header_safe(value):
            out.append((name, value))
    return out


def _header_safe(value: str) -> bool:
    """Visible Latin-1 and spaces only: no CR or LF to end the header line early."""
    return all(32 <= ord(c) < 256 and c != "\x7f" for c in value)


def validators(headers: list[tuple[str, str]]) -> tuple[str | None, str | None]:
    """The ``(ETag, Last-Modified)`` of a response's headers (None where absent), to send
    back in the next visit's :func:`conditional_headers`."""
    etag = modified = None
    for name, value in headers:
        low = name.lower()
        if low == "etag":
            etag = value.strip()
        elif low == "last-modified":
            modified = value.strip()
    return etag, modified


class HttpClient(Protocol):
    """Keep-alive HTTP/1.1 client that connects only where the caller says.

    ``fetch(url, ip)`` connects to ``ip`` when given; otherwise the host is resolved
    through the client's resolver. An IP-literal host is connected to as written. The
    address policy is checked on that address before any connection is made. Neither
    :meth:`fetch` nor :meth:`fetch_robots` raises for network, protocol or content
    problems (the reason is in :attr:`FetchResponse.error`); only programming errors
    escape. Bodies are capped on the wire (``max_body_bytes``) and after content
    decoding (``max_decoded_bytes``), so a huge page or a gzip bomb costs at most the
    caps in RAM and time.

    For one host the caller uses one IP at a time (the manager's DNS cache gives one
    answer per host); a keep-alive connection to a host may be one opened to its
    previous (also guarded) address; ``ip`` in the response reports the peer used.
    """

    async def fetch(
        self,
        url: str,
        ip: str | None,
        *,
        etag: str | None = None,
        last_modified: str | None = None,
    ) -> FetchResponse:
        """GET ``url`` from ``ip``; a redirect is returned (``location`` resolved
        against ``url``), not followed: the crawl logic decides. ``etag`` and
        ``last_modified`` (a revisit's validators) make it a conditional GET
        (:func:`conditional_headers`): a 304 is a response like any other."""
        ...

    async def fetch_robots(
        self, url: str, ip: str | None, max_bytes: int = ROBOTS_MAX_BYTES
    ) -> FetchResponse:
        """GET a robots.txt, following up to five redirects (RFC 9309).

        Each hop's Location is resolved against the current URL; a hop to another host
        is resolved through the resolver and guarded like any fetch. Body and decoded
        body are both capped at ``max_bytes``. The response is the last hop's, with the
        URLs redirected to in ``redirects``; a sixth redirect gives
        ``error="too_many_redirects"``.
        """
        ...

    async def close(self) -> None:
        """Close pooled connections (and a resolver the client made for itself)."""
        ...


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How a client fetches; the defaults are :class:`~drumbeat.settings.Settings`'s.

    ``from_header`` is the From header's value, empty for none. ``max_connections``
    caps the exchanges in flight. ``max_header_bytes`` caps each status and header
    line. ``max_retry_after_s`` caps :attr:`FetchResponse.retry_after_s`.
    ``verify_tls``: check HTTPS certificates against the system CAs.
    """

    user_agent: str = _DEFAULTS.user_agent
    from_header: str = _DEFAULTS.from_header
    max_connections: int = _DEFAULTS.concurrency
    connect_timeout_s: float = _DEFAULTS.connect_timeout_s
    read_timeout_s: float = _DEFAULTS.read_timeout_s
    total_timeout_s: float = _DEFAULTS.total_timeout_s
    max_body_bytes: int = _DEFAULTS.max_body_bytes
    max_decoded_bytes: int = _DEFAULTS.max_decoded_bytes
    max_header_bytes: int = 64 << 10
    accept_encoding: str = "gzip, deflate, br"
    accept: str = _DEFAULTS.accept  # the Accept header of every request
    max_retry_after_s: float = 86_400
    verify_tls: bool = _DEFAULTS.tls_verify

    @classmethod
    def from_settings(cls, settings: Settings) -> ClientOptions:
        return cls(
            user_agent=settings.user_agent,
            from_header=settings.from_header,
            max_connections=settings.concurrency,
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            total_timeout_s=settings.total_timeout_s,
            max_body_bytes=settings.max_body_bytes,
            max_decoded_bytes=settings.max_decoded_bytes,
            verify_tls=settings.tls_verify,
            accept=settings.accept,
        )

    def request_headers(self) -> list[tuple[str, str]]:
        """The headers every request sends besides Host and Accept, in the order sent."""
        headers = [("User-Agent", self.user_agent), ("Accept-Encoding", self.accept_encoding)]
        if self.from_header:
            headers.append(("From", self.from_header))
        return headers


def with_changes(options: ClientOptions | None, changes: dict[str, Any]) -> ClientOptions:
    """``options`` (the defaults when None) with the fields named in ``changes`` replaced:
    the clients' keyword form, ``AiohttpClient(policy=..., resolver=..., user_agent=...)``.
    An unknown name raises TypeError."""
    options = options if options is not None else ClientOptions()
    return dataclasses.replace(options, **changes) if changes else options


class ClientFactory(Protocol):
    """A client class, as :func:`client_class` gives it."""

    def __call__(
        self,
        options: ClientOptions | None = None,
        *,
        policy: AddressPolicy,
        resolver: Resolver | None,
    ) -> HttpClient: ...


def client_class(name: str) -> ClientFactory:
    """The client class for ``Settings.http_client`` (``curl`` or ``aiohttp``); its
    library is imported only when chosen."""
    if name == "curl":
        from drumbeat.fetch.curl import CurlHttpClient

        return CurlHttpClient
    if name == "aiohttp":
        from drumbeat.fetch.http import AiohttpClient

        return AiohttpClient
    raise ValueError(f"unknown HTTP client {name!r}")
