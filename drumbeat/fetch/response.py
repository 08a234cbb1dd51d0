"""What both HTTP clients share: the response record and the steps around an exchange.

:class:`FetchResponse` is what every fetch returns. The steps here run before and after
the client library's own exchange, the same for every client: the address choice and
guard check before anything is sent (:func:`choose_address`), the robots.txt redirect
loop (:func:`follow_robots`), and after the exchange the truncation flag, the
Content-Encoding decoding under its cap and Retry-After (:func:`finish_response`).
This module imports neither client library (aiohttp, pycurl).
"""

from __future__ import annotations

import datetime
import email.utils
import ipaddress
import math
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, cast
from urllib.parse import urljoin

import brotli
from isal import isal_zlib
from yarl import URL

from drumbeat.fetch.dns import Resolver
from drumbeat.fetch.guard import AddressPolicy

MAX_ROBOTS_REDIRECTS: Final = 5
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})

# What parsing a URL with yarl raises for a malformed one (yarl 1.x: IndexError on
# "http://[]@"): the fetch's error is then url:invalid.
URL_ERRORS: Final = (ValueError, TypeError, IndexError)


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
    whatever the status; 429 and 503 are where it matters. ``x_robots_tag`` holds
    the values of the X-Robots-Tag headers, one a line (None when there are none).
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
    x_robots_tag: str | None = None  # the X-Robots-Tag headers' values, one a line


async def choose_address(
    response: FetchResponse, scheme: str, host: str | None, dns: Resolver, policy: AddressPolicy
) -> str | None:
    """Pick the address to connect to for ``response.url`` (whose ``scheme`` and
    ``host`` the client parsed, as yarl's ``scheme`` and ``raw_host``) and check the
    guard on it.

    Sets ``response.ip`` (an IP-literal host as written, else the given IP, else the
    resolver's answer). Returns None when the request may go ahead, else the reason.
    """
    if scheme not in ("http", "https") or not host:
        return "url:invalid"
    literal = _ip_literal(host)
    if literal is not None:
        response.ip = literal
    elif response.ip is None:
        answer = await dns.resolve(host)
        if answer.ip is None:
            return answer.error or "dns:error"
        response.ip = answer.ip
    return policy.refusal(response.ip)


def finish_response(
    response: FetchResponse, started: float, decoded_cap: int, max_retry_after_s: float
) -> None:
    """After the exchange: truncation flag, decoded body, Retry-After and elapsed time."""
    if response.status is not None:
        if response.error is not None and response.truncated is None:
            # The head arrived, the body did not all: what we have is a cut-short page.
            response.truncated = "time" if response.error == "timeout" else "disconnect"
        decode_body(response, decoded_cap)
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


def head_name(name: bytes) -> bytes:
    """A response header's name as the kept head records it."""
    # The body we keep has its transfer framing (chunked) removed, so a head that still
    # announced it would make WARC readers de-chunk it again; rename it like other crawlers.
    return b"X-Crawler-" + name if name.lower() == b"transfer-encoding" else name


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
            when = when.replace(tzinfo=datetime.UTC)
        try:
            seconds = when.timestamp() - now
        except (OverflowError, OSError, ValueError):
            return None
    return float(min(max(seconds, 0.0), cap_s))


def decode_body(response: FetchResponse, cap: int) -> None:
    """Undo Content-Encoding (outermost coding last in the header) into ``decoded``."""
    codings: list[str] = []
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
        except (_INFLATE_ERROR, brotli.error):
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
    ignored, as browsers do. ISA-L (python-isal, as for the WARC writer's gzip)
    inflates with zlib's interface, faster (docs/benchmarks.md, "Fetcher and WARC
    output").
    """
    out = bytearray()
    pending = data
    while pending:
        decompressor = isal_zlib.decompressobj(wbits)
        # max_length: the decompressor holds the rest of the input back instead of
        # expanding it, which is what bounds a bomb.
        out += decompressor.decompress(pending, cap - len(out) + 1)
        if len(out) > cap:
            del out[cap:]
            return bytes(out), True
        pending = decompressor.unused_data
        if not decompressor.eof or wbits != _GZIP_WBITS or not pending.startswith(b"\x1f\x8b"):
            break
    return bytes(out), False


_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
# What ISA-L raises on a corrupt stream (its stubs type it as an instance, not a class).
_INFLATE_ERROR: Final = cast("type[Exception]", isal_zlib.error)


def _gunzip(data: bytes, cap: int) -> tuple[bytes, bool]:
    # A body that does not start as gzip is corrupt, however short (ISA-L would wait
    # for the rest of a 10-byte header, and decode a short one to nothing).
    if len(data) >= 2 and not data.startswith(b"\x1f\x8b"):
        raise _INFLATE_ERROR("not a gzip stream")
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
