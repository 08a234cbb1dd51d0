"""A libcurl (pycurl) client for the fetchers, the default one.

:class:`CurlHttpClient` implements :class:`drumbeat.fetch.client.HttpClient`, as
:class:`drumbeat.fetch.http.AiohttpClient` does, with the same
:class:`~drumbeat.fetch.response.FetchResponse` contents and stable error reasons
(``http_client = "aiohttp"`` chooses the other). Transfers run on one
``pycurl.CurlMulti`` driven by the running asyncio loop (no threads), through one
``select.epoll`` of curl's own: curl's socket callback registers its sockets there, and
that epoll's descriptor is the loop's only reader for them, so one wake-up serves every
socket that is ready (see ``_run``); curl's timer callback records a deadline, and one
loop timer is moved only when the deadline comes earlier. Registering each socket with
``add_reader``/``add_writer`` and each timeout with ``call_later`` instead costs more CPU
a request: a loop wake-up and a handle per socket event (scripts/bench_http_clients.py
compares the two drivers, ``pycurl-asyncio`` and ``pycurl-epoll``).

What is shared with AiohttpClient (drumbeat.fetch.response): URL parts as yarl gives
them (plain URLs are split here without yarl, see :func:`parse_url`), the address choice
and guard check before anything is sent, the robots.txt redirect loop, body decoding and
its caps, Retry-After, Location resolution. What curl does here:

* connects only to the chosen IP (``CONNECT_TO`` host:port -> ip:port; curl resolves
  nothing itself) and reuses keep-alive connections only to that same IP;
  ``max_connections`` transfers in flight, up to 8,192 idle connections kept (no
  per-host cap: curl's counts per address, see ``_multi_handle``), HTTP/1.1 only;
* no content decoding (``Accept-Encoding`` is sent as a plain header), no redirects,
  no proxies from the environment, HTTP/0.9 replies refused (``http:bad_status_line``);
* the response head is kept as the bytes received (``HEADERFUNCTION``), with
  ``Transfer-Encoding`` renamed to ``X-Crawler-Transfer-Encoding`` as AiohttpClient does
  (the body is kept de-chunked); header limits as aiohttp's: a status or header line
  longer than ``max_header_bytes`` or more than 128 header lines is
  ``http:header_too_large``; a header line without a colon or with NUL/CR bytes is
  ``http:bad_header``;
* the request head: every header is ours (``Host`` included, in AiohttpClient's
  order), so curl sends exactly ``GET <path?query> HTTP/1.1``, those lines and CRLF, and
  that is what is recorded. Tracing curl's output instead (``VERBOSE`` +
  ``DEBUGFUNCTION``) gives the same bytes but costs CPU on every request (curl formats
  and hands over all its debug text and data); ``trace_request_head=True`` turns it on,
  which tests use to check the two agree;
* the body cap: the write callback keeps ``body_cap`` bytes and stops the transfer
  (the connection is closed, not reused);
* timeouts: ``connect_timeout_s`` and ``total_timeout_s`` are curl's own; the read
  timeout (nothing received for ``read_timeout_s`` once the request is sent) is a
  sweep over the transfers in flight every quarter of it, so it fires between 1 and
  1.25 times ``read_timeout_s``. "Received" counts whole header lines and body
  chunks: a head trickled a byte at a time times out like a silent one (curl's
  low-speed limit is no substitute: it averages over seconds, so a trickle that
  stops is not caught).

Differences from AiohttpClient that a caller can see: a chunked body with bad framing is
``http:bad_chunking`` (aiohttp says ``http:bad_message``); a connection reset after
the head is ``http:incomplete_body`` (aiohttp: the same or ``http:disconnected``);
how many bytes arrived before a timeout or reset depends on the client's reads.
"""

from __future__ import annotations

import asyncio
import base64
import re
import resource
import select
import ssl
import time
from collections.abc import Sequence
from typing import Any, Final

import pycurl
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

# aiohttp's default header-count limit (ClientSession max_headers), kept for parity.
MAX_HEADERS: Final = 128

# curl's error codes -> reasons; the few that depend on the message or on whether the
# head arrived are decided in _reason.
_E_WEIRD_SERVER_REPLY: Final = 8  # CURLE_WEIRD_SERVER_REPLY (pycurl: E_FTP_WEIRD_SERVER_REPLY)
_E_TOO_LARGE: Final = 100  # CURLE_TOO_LARGE (libcurl 8.6+): curl's own header limits
_REASONS: Final[dict[int, str]] = {
    pycurl.E_OPERATION_TIMEDOUT: "timeout",
    pycurl.E_COULDNT_CONNECT: "connect",
    pycurl.E_COULDNT_RESOLVE_HOST: "connect",  # cannot happen: curl is given the IP
    pycurl.E_GOT_NOTHING: "http:disconnected",
    pycurl.E_SEND_ERROR: "http:disconnected",
    pycurl.E_PARTIAL_FILE: "http:incomplete_body",
    pycurl.E_UNSUPPORTED_PROTOCOL: "http:bad_status_line",  # HTTP/0.9 refused
    _E_WEIRD_SERVER_REPLY: "http:bad_status_line",
    pycurl.E_URL_MALFORMAT: "url:invalid",
    _E_TOO_LARGE: "http:header_too_large",
    pycurl.E_FILESIZE_EXCEEDED: "http:header_too_large",
    pycurl.E_PEER_FAILED_VERIFICATION: "tls:certificate",
    pycurl.E_SSL_ISSUER_ERROR: "tls:certificate",
    pycurl.E_SSL_INVALIDCERTSTATUS: "tls:certificate",
    pycurl.E_SSL_CONNECT_ERROR: "tls:error",
    pycurl.E_SSL_CIPHER: "tls:error",
    pycurl.E_SSL_CERTPROBLEM: "tls:error",
    pycurl.E_SSL_SHUTDOWN_FAILED: "tls:error",
}

# A head's field lines that _end_of_head may take whole: each "name:value" CRLF with a
# name that is not empty, does not start (obsolete folding) or end with a space or tab,
# and no NUL or CR anywhere else. Anything else goes through its line-by-line checks.
_PLAIN_FIELDS_RE: Final = re.compile(rb"(?:[^\0\r\n: \t][^\0\r\n:]*(?<![ \t]):[^\0\r\n]*\r\n)*")
_FIELD_RE: Final = re.compile(rb"([^:\r\n]+):([^\r\n]*)\r\n")

# URLs whose parts yarl gives back exactly as written (tests/test_curl.py checks it):
# http(s), a lower-case DNS name, no user info, no port or a port that is not the
# scheme's default, a path and query of characters yarl does not re-quote and no %XX
# escape (yarl decodes some), no fragment. Dot segments are excluded below (yarl
# removes them).
_PLAIN_URL_RE: Final = re.compile(
    r"(https?)://((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)"
    r"(?::([1-9][0-9]{0,4}))?"
    r"((?:/[A-Za-z0-9._~!$&'()*+,;=:@-]*)+(?:\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]+)?)"
)
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class _PlainURL:
    """The parts of a plain URL (see ``_PLAIN_URL_RE``) that a fetch uses, named as
    yarl's: a regular expression and a few slots cost a fraction of what building a
    yarl URL and reading its parts does."""

    __slots__ = ("host_port_subcomponent", "port", "raw_host", "raw_path_qs", "scheme", "url")
    raw_user = None

    def __init__(
        self, url: str, scheme: str, host: str, port: int, written_port: str | None, path_qs: str
    ) -> None:
        self.url, self.scheme, self.raw_host, self.raw_path_qs = url, scheme, host, path_qs
        self.port = port
        self.host_port_subcomponent = f"{host}:{written_port}" if written_port else host

    def __str__(self) -> str:
        return self.url


def parse_url(url: str) -> _PlainURL | URL:
    """``url`` parsed, as yarl's ``URL`` would give its parts; plain URLs (most of a
    crawl's, normalized by drumbeat.urls) without yarl."""
    m = _PLAIN_URL_RE.fullmatch(url)
    if m is not None:
        scheme, host, written_port, path_qs = m.groups()
        default = _DEFAULT_PORTS[scheme]
        port = int(written_port) if written_port else default
        if "/." not in path_qs.partition("?")[0] and (
            written_port is None or (port != default and port <= 65535)
        ):
            return _PlainURL(url, scheme, host, port, written_port, path_qs)
    return URL(url)


# curl's socket wishes as epoll event masks (CURL_POLL_REMOVE and CURL_POLL_NONE: none).
_EPOLL_MASK: Final = {
    pycurl.POLL_IN: select.EPOLLIN,
    pycurl.POLL_OUT: select.EPOLLOUT,
    pycurl.POLL_INOUT: select.EPOLLIN | select.EPOLLOUT,
}
_EPOLL_ERR: Final = select.EPOLLERR | select.EPOLLHUP
# A loop timer may fire a little before its time (the loop's clock resolution):
# curl's deadline counts as due this close to it.
_TIMER_SLACK_S: Final = 0.001


def _idle_connections() -> int:
    """Idle keep-alive connections to keep: up to 8,192, and half the open-file limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(8192, soft // 2)) if soft != resource.RLIM_INFINITY else 8192


def _ca_file() -> str | None:
    """The CA bundle OpenSSL would use (aiohttp verifies against the same)."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile:
        return paths.cafile
    try:
        import certifi
    except ImportError:
        return None
    return str(certifi.where())


class _Handle:
    """One reusable curl easy handle and the state of the transfer it runs."""

    __slots__ = (
        "_limit",
        "cap",
        "chunks",
        "curl",
        "dead",
        "future",
        "head",
        "head_done",
        "headers",
        "last",
        "lines",
        "reason",
        "request_head",
        "response",
        "size",
        "status",
    )

    def __init__(self, client: CurlHttpClient) -> None:
        c = self.curl = pycurl.Curl()
        c.handle = self  # type: ignore[attr-defined]  # info_read hands back the Curl
        c.setopt(pycurl.NOSIGNAL, 1)
        c.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        c.setopt(pycurl.HTTP09_ALLOWED, 0)
        c.setopt(pycurl.FOLLOWLOCATION, 0)
        c.setopt(pycurl.PROXY, "")
        c.setopt(pycurl.NOPROXY, "*")
        c.setopt(pycurl.PATH_AS_IS, 1)  # sent as yarl (so aiohttp) would send it
        # No DNS cache. curl resolves no name here (CONNECT_TO gives it the IP), but it
        # still caches an entry per host name and port, and sweeps the whole cache for
        # stale ones as transfers start: a cost per request that grows with the hosts.
        c.setopt(pycurl.DNS_CACHE_TIMEOUT, 0)
        c.setopt(pycurl.CONNECTTIMEOUT_MS, max(1, int(client._connect_timeout_s * 1000)))
        c.setopt(pycurl.TIMEOUT_MS, max(1, int(client._total_timeout_s * 1000)))
        if not client._verify_tls:
            c.setopt(pycurl.SSL_VERIFYPEER, 0)
            c.setopt(pycurl.SSL_VERIFYHOST, 0)
        elif client._ca_file:
            c.setopt(pycurl.CAINFO, client._ca_file)
        c.setopt(pycurl.WRITEFUNCTION, self._write)
        c.setopt(pycurl.HEADERFUNCTION, self._header)
        c.setopt(pycurl.PREREQFUNCTION, self._connected)
        if client._trace_request_head:
            c.setopt(pycurl.VERBOSE, 1)
            c.setopt(pycurl.DEBUGFUNCTION, self._debug)
        self.response: FetchResponse | None = None
        self.future: asyncio.Future[tuple[int, str]] | None = None
        self.dead = False  # closed mid-transfer: never reused
        # When bytes last arrived (the loop's clock); None until the request goes out.
        self.last: float | None = None
        # The body as curl hands it over, joined once at the end: a bytearray grown
        # chunk by chunk would be copied at every growth and once more at the end.
        self.chunks: list[bytes] = []
        self.size = 0
        self.head = b""
        self.lines: list[bytes] = []
        self.headers: list[tuple[str, str]] = []
        self.request_head = bytearray()
        self.head_done = False
        self.status: int | None = None
        self.cap = 0
        self.reason: str | None = None
        self._limit = client._max_header_bytes

    def start(
        self,
        response: FetchResponse,
        url: str,
        connect_to: str | None,
        headers: list[str],
        cap: int,
        future: asyncio.Future[tuple[int, str]],
    ) -> None:
        self.response, self.future, self.cap = response, future, cap
        self.chunks, self.size = [], 0
        self.head = b""
        self.lines, self.headers = [], []
        self.request_head = bytearray()
        self.head_done, self.status, self.reason = False, None, None
        self.last = None
        c = self.curl
        c.setopt(pycurl.URL, url)
        c.setopt(pycurl.CONNECT_TO, [connect_to] if connect_to else [])
        c.setopt(pycurl.HTTPHEADER, headers)

    # -- curl's callbacks (they must not raise: pycurl would print and abort) ------------

    def _connected(self, *_: object) -> int:
        self.last = time.monotonic()  # the read timeout runs from here
        return pycurl.PREREQFUNC_OK

    def _write(self, data: bytes) -> int | None:
        self.last = time.monotonic()
        room = self.cap - self.size
        if len(data) > room:
            self.chunks.append(data[:room])
            self.size += room
            assert self.response is not None
            self.response.truncated = "length"
            return 0  # stops the transfer (CURLE_WRITE_ERROR), the connection is dropped
        self.chunks.append(data)
        self.size += len(data)
        return None

    def _header(self, line: bytes) -> int | None:
        # Called once per line: keep it to the checks that bound memory; the head is
        # validated and parsed in one pass when its blank line arrives (_end_of_head).
        self.last = time.monotonic()
        if self.head_done:
            if self.status is not None and 100 <= self.status < 200:
                # An interim response (100 Continue ...): the real head follows.
                self.lines = []
                self.head_done, self.status, self.headers = False, None, []
            else:
                return None  # trailers of a chunked body: not part of the head
        if line == b"\r\n" or line == b"\n":
            return self._end_of_head()
        if len(line) > self._limit + 2 and len(line.rstrip(b"\r\n")) > self._limit:
            self.reason = "http:header_too_large"
            return 0
        self.lines.append(line)
        if len(self.lines) > MAX_HEADERS + 1:  # the status line and MAX_HEADERS lines
            self.reason = "http:header_too_large"
            return 0
        return None

    def _end_of_head(self) -> int | None:
        """Validate and parse the head: status, (name, value) pairs, the head as kept."""
        lines = self.lines
        try:
            self.status = int(lines[0].split(None, 2)[1])  # curl checked HTTP/1.x nnn
        except (IndexError, ValueError):
            self.reason = "http:bad_status_line"
            return 0
        parsed = parse_fields(lines[1:])
        if parsed is None:
            self.reason = "http:bad_header"
            return 0
        fields, self.headers = parsed
        self.head = lines[0].rstrip(b"\r\n") + b"\r\n" + fields + b"\r\n"
        self.head_done = True
        return None

    def body(self) -> bytes:
        """The body received so far, in one bytes object (a lone chunk as it is)."""
        return b"".join(self.chunks)

    def _debug(self, kind: int, data: bytes) -> None:
        if kind == pycurl.INFOTYPE_HEADER_OUT:
            self.request_head += data

    def __repr__(self) -> str:
        return f"<_Handle {self.response.url if self.response else 'idle'}>"


def parse_fields(lines: list[bytes]) -> tuple[bytes, list[tuple[str, str]]] | None:
    """A head's field lines (each as received, with its line end) as kept: the lines with
    CRLF ends and Transfer-Encoding renamed (see response.head_name), and the (name, value)
    pairs, values trimmed, obsolete folding joined. None when a line is malformed: no
    colon, an empty name or one ending in a space or tab, a NUL or a stray CR.
    """
    fields = b"".join(lines)
    if _PLAIN_FIELDS_RE.fullmatch(fields) and b"transfer-encoding" not in fields.lower():
        # Most heads: every line "name:value" CRLF, nothing to rename, join or reject.
        # Two regular-expression passes give what the loop below would.
        return fields, [
            (
                name.decode("utf-8", "surrogateescape"),
                value.strip(b" \t").decode("utf-8", "surrogateescape"),
            )
            for name, value in _FIELD_RE.findall(fields)
        ]
    return _parse_fields_by_line(lines)


def _parse_fields_by_line(lines: list[bytes]) -> tuple[bytes, list[tuple[str, str]]] | None:
    """:func:`parse_fields` one line at a time: every case, but slower."""
    head: list[bytes] = []
    headers: list[tuple[str, str]] = []
    for raw in lines:
        line = raw.rstrip(b"\r\n")
        if line[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            name_, value_ = headers[-1]
            value_ += " " + line.strip().decode("utf-8", "surrogateescape")
            headers[-1] = (name_, value_)
            head.append(line + b"\r\n")
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or name[-1:] in (b" ", b"\t") or b"\0" in line or b"\r" in line:
            return None
        head.append(head_name(name) + b":" + value + b"\r\n")
        headers.append(
            (
                name.decode("utf-8", "surrogateescape"),
                value.strip(b" \t").decode("utf-8", "surrogateescape"),
            )
        )
    return b"".join(head), headers


class CurlHttpClient:
    """:class:`drumbeat.fetch.client.HttpClient` on libcurl; see the module docstring for
    how and where it differs from AiohttpClient.

    Built as AiohttpClient is (``options``, any of its fields as keywords, ``policy``,
    ``resolver``); ``trace_request_head``: record the request head from curl's trace
    (tests compare it with the head built here).
    """

    def __init__(
        self,
        options: ClientOptions | None = None,
        *,
        policy: AddressPolicy,
        resolver: Resolver | None,
        trace_request_head: bool = False,
        **changes: Any,
    ) -> None:
        options = with_changes(options, changes)
        self._policy = policy
        self._verify_tls = options.verify_tls
        self._trace_request_head = trace_request_head
        self._own_dns: DnsCache | None = None
        if resolver is None:
            resolver = self._own_dns = DnsCache()
        self._dns: Resolver = resolver
        self._max_connections = options.max_connections
        self._transfers = asyncio.Semaphore(options.max_connections)
        self._connect_timeout_s = options.connect_timeout_s
        self._read_timeout_s = options.read_timeout_s
        self._total_timeout_s = options.total_timeout_s
        self._max_body_bytes = options.max_body_bytes
        self._max_decoded_bytes = options.max_decoded_bytes
        self._max_header_bytes = options.max_header_bytes
        self._max_retry_after_s = options.max_retry_after_s
        # As aiohttp sends them: after Host, these, then Accept.
        self._request_headers = [f"{name}: {value}" for name, value in options.request_headers()]
        self._request_headers.append(f"Accept: {options.accept}")
        self._ca_file = _ca_file()
        self._free: list[_Handle] = []
        self._active: set[_Handle] = set()
        # The multi handle belongs to the loop it was made on: made on first use.
        self._multi: pycurl.CurlMulti | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._epoll: select.epoll | None = None
        # The sockets in _epoll: the events curl waits for, 0 when parked (_on_socket).
        self._watched: dict[int, int] = {}
        self._deadline: float | None = None  # when curl wants its timeout (loop clock)
        self._timer: asyncio.TimerHandle | None = None  # the loop timer for it
        self._timer_at = 0.0
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_s = min(max(options.read_timeout_s / 4, 0.05), 5.0)

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
        """Abort transfers in flight, close every connection (and a DnsCache made here)."""
        multi = self._multi
        if multi is not None:
            for handle in list(self._active):
                self._abandon(handle)
            for handle in self._free:
                handle.curl.close()
            self._free.clear()
            for timer in (self._timer, self._sweeper):
                if timer is not None:
                    timer.cancel()
            self._timer = self._sweeper = None
            multi.close()  # curl's socket callback takes its sockets out of the epoll
            self._multi = None
            self._deadline = None
            self._close_epoll()
        if self._own_dns is not None:
            await self._own_dns.close()

    def __repr__(self) -> str:
        return f"<CurlHttpClient [{len(self._active)} in flight, limit {self._max_connections}]>"

    # -- one exchange -----------------------------------------------------------------

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
        try:
            target = parse_url(url)
        except URL_ERRORS:
            response.error = "url:invalid"
        else:
            response.error = await choose_address(
                response, target.scheme, target.raw_host, self._dns, self._policy
            )
            if response.error is None:
                async with self._transfers:  # at most max_connections in flight
                    response.error = await self._exchange(response, target, body_cap, extra)
        finish_response(response, started, decoded_cap, self._max_retry_after_s)
        return response

    async def _exchange(
        self,
        response: FetchResponse,
        target: _PlainURL | URL,
        body_cap: int,
        extra: Sequence[tuple[str, str]] = (),
    ) -> str | None:
        ip = response.ip
        host = target.raw_host
        assert ip is not None and host is not None
        headers = [f"Host: {target.host_port_subcomponent}", *self._request_headers]
        headers += [f"{name}: {value}" for name, value in extra]
        if target.raw_user is not None:  # credentials in the URL: Basic auth, as aiohttp
            credentials = f"{target.user or ''}:{target.password or ''}".encode(
                "latin-1", "replace"
            )
            headers.append(f"Authorization: Basic {base64.b64encode(credentials).decode()}")
            target = target.with_user(None)  # curl would add its own Authorization line
        request_head = (
            f"GET {target.raw_path_qs} HTTP/1.1\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
        )
        connect_to = None
        if host != ip:  # a name (an IP-literal URL is connected to as written)
            port = target.port
            address = f"[{ip}]" if ":" in ip else ip
            connect_to = f"{host}:{port}:{address}:{port}"
        multi = self._multi_handle()
        assert self._loop is not None
        handle = self._free.pop() if self._free else _Handle(self)
        future: asyncio.Future[tuple[int, str]] = self._loop.create_future()
        try:
            handle.start(response, str(target), connect_to, headers, body_cap, future)
        except pycurl.error:
            self._free.append(handle)
            return "url:invalid"
        self._active.add(handle)
        multi.add_handle(handle.curl)  # curl arms a 0 ms timer: the transfer starts there
        if self._sweeper is None:
            self._sweeper = self._loop.call_later(self._sweep_s, self._sweep)
        try:
            errno, message = await future
        except BaseException:
            # Cancelled (the caller's own timeout, shutdown): stop the transfer.
            self._abandon(handle)
            raise
        if handle.dead:  # the client was closed under it
            response.body = handle.body()
            return "http:error"
        if not self._trace_request_head:
            handle.request_head = bytearray(request_head.encode("utf-8"))
        try:
            return self._collect(handle, response, errno, message)
        finally:
            handle.response = handle.future = None
            handle.chunks, handle.size = [], 0
            handle.request_head = bytearray()
            handle.head, handle.lines, handle.headers = b"", [], []
            self._free.append(handle)

    def _collect(
        self, handle: _Handle, response: FetchResponse, errno: int, message: str
    ) -> str | None:
        """Move what curl received into ``response``; return the error reason."""
        response.body = handle.body()
        if handle.head_done and handle.status is not None:
            response.status = handle.status
            self._read_head(handle, response)
            peer = handle.curl.getinfo(pycurl.PRIMARY_IP)
            if peer:
                response.ip = peer
        if errno == 0:
            return None
        if errno == pycurl.E_WRITE_ERROR and response.truncated == "length":
            return None
        if handle.reason is not None:
            return handle.reason
        if errno == _E_WEIRD_SERVER_REPLY and handle.lines:
            return "http:bad_header"  # after the status line: curl refused a header line
        reason = _REASONS.get(errno)
        if reason is not None:
            return reason
        if errno == pycurl.E_RECV_ERROR:
            if "chunk" in message.lower():
                return "http:bad_chunking"
            return "http:incomplete_body" if response.status is not None else "http:disconnected"
        if errno == pycurl.E_BAD_CONTENT_ENCODING:
            return "http:bad_message"
        return "http:error"

    @staticmethod
    def _read_head(handle: _Handle, response: FetchResponse) -> None:
        response.request_head = bytes(handle.request_head)
        response.response_head = handle.head
        response.headers = headers = handle.headers
        content_type: str | None = None
        location: str | None = None
        for name, value in headers:
            lower = name.lower()
            if lower == "content-type":
                if content_type is None:
                    content_type = value
            elif lower == "location" and location is None:
                location = value
            elif lower == "x-robots-tag":
                tags = response.x_robots_tag
                response.x_robots_tag = value if tags is None else f"{tags}\n{value}"
        response.content_type = media_type(content_type)
        if location:
            response.location = resolve_location(response.url, location)

    def _abandon(self, handle: _Handle) -> None:
        """Take an unfinished transfer off the multi handle (its connection is closed)."""
        if handle in self._active:
            self._active.discard(handle)
            if self._multi is not None:
                self._multi.remove_handle(handle.curl)
            handle.curl.close()  # not reused: its state is mid-transfer
            handle.dead = True
            if handle.future is not None and not handle.future.done():
                handle.future.set_result((pycurl.E_ABORTED_BY_CALLBACK, "client closed"))

    def _sweep(self) -> None:
        """The read timeout: end transfers that received nothing for ``read_timeout_s``
        (checked every quarter of it, so a stall ends within 1.25 times the timeout)."""
        self._sweeper = None
        if self._multi is None or not self._active:
            return
        idle_since = time.monotonic() - self._read_timeout_s
        for handle in [h for h in self._active if h.last is not None and h.last < idle_since]:
            # Taken off mid-transfer, curl closes the connection; the handle is reusable.
            self._multi.remove_handle(handle.curl)
            self._active.discard(handle)
            if handle.future is not None and not handle.future.done():
                handle.future.set_result((pycurl.E_OPERATION_TIMEDOUT, "read timeout"))
        if self._active:
            assert self._loop is not None
            self._sweeper = self._loop.call_later(self._sweep_s, self._sweep)

    # -- the loop driver: curl's sockets and timer on the asyncio loop ------------------

    def _multi_handle(self) -> pycurl.CurlMulti:
        if self._multi is None:
            self._loop = asyncio.get_running_loop()
            multi = pycurl.CurlMulti()
            multi.setopt(pycurl.M_PIPELINING, 0)
            # No M_MAX_HOST_CONNECTIONS: libcurl 8.23 applies it per connected address
            # (CONNECT_TO's IP), and closes idle connections of other host names on the
            # same IP to honour it, so hosts sharing an address never reused a
            # connection. The politeness scheduler keeps one request per host in flight
            # anyway.
            # max_connections caps transfers in flight (as aiohttp's limit does, which
            # counts only connections in use); curl's own total cap counts idle ones too
            # and closed them early, so it is set to the idle pool's size instead.
            multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, _idle_connections())
            # curl's idle pool is an LRU of this many connections: a polite crawl
            # revisits thousands of hosts, each every few seconds (aiohttp keeps every
            # idle connection until its keepalive_timeout).
            multi.setopt(pycurl.M_MAXCONNECTS, _idle_connections())
            multi.setopt(pycurl.M_SOCKETFUNCTION, self._on_socket)
            multi.setopt(pycurl.M_TIMERFUNCTION, self._on_timer)
            self._epoll = select.epoll()
            self._loop.add_reader(self._epoll.fileno(), self._run)
            self._multi = multi
        return self._multi

    def _on_socket(self, what: int, fd: int, _multi: object, _data: object) -> None:
        # A curl callback: it must not raise. A socket curl lets go of stays in the epoll,
        # parked (mask 0 here): curl takes most back for the next request on that
        # keep-alive connection, and one epoll_ctl MOD then costs less than a DEL and an
        # ADD. A parked socket that reports an event is taken out then (_run).
        watched = self._watched
        mask = _EPOLL_MASK.get(what, 0)
        if not mask:
            if fd in watched:
                watched[fd] = 0
            return
        old = watched.get(fd)
        if old == mask:
            return
        epoll = self._epoll
        assert epoll is not None
        try:
            if old is None:
                try:
                    epoll.register(fd, mask)
                except FileExistsError:
                    epoll.modify(fd, mask)
            else:
                try:
                    epoll.modify(fd, mask)
                except FileNotFoundError:
                    # Closed while parked (the kernel dropped it), its number reused.
                    epoll.register(fd, mask)
            watched[fd] = mask
        except OSError:
            watched.pop(fd, None)  # not a socket (any more): nothing to watch

    def _unpark(self, fd: int) -> None:
        self._watched.pop(fd, None)
        assert self._epoll is not None
        try:
            self._epoll.unregister(fd)
        except OSError:
            pass  # gone already

    def _close_epoll(self) -> None:
        epoll = self._epoll
        if epoll is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(epoll.fileno())
            epoll.close()
            self._epoll = None
        self._watched.clear()

    def _on_timer(self, ms: int) -> None:
        # A curl callback (it may not call back into curl): record when curl wants
        # socket_action(TIMEOUT); the loop timer moves only when that comes earlier.
        if ms < 0:
            self._deadline = None
            return
        assert self._loop is not None
        deadline = self._deadline = self._loop.time() + ms / 1000
        timer = self._timer
        if timer is not None:
            if self._timer_at <= deadline:
                return  # fires first, and re-arms for the deadline then (_on_timer_due)
            timer.cancel()
        self._timer = self._loop.call_at(deadline, self._on_timer_due)
        self._timer_at = deadline

    def _on_timer_due(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        assert self._loop is not None
        if deadline > self._loop.time() + _TIMER_SLACK_S:  # curl moved it later
            self._timer = self._loop.call_at(deadline, self._on_timer_due)
            self._timer_at = deadline
            return
        self._run()

    def _run(self) -> None:
        """Hand curl every socket that is ready, and its timeout when due; then settle
        the transfers that ended."""
        multi, epoll, loop = self._multi, self._epoll, self._loop
        if multi is None or epoll is None or loop is None:
            return
        action, watched = multi.socket_action, self._watched
        for fd, events in epoll.poll(0):
            if not watched.get(fd):  # parked: an idle connection closed or sent bytes
                self._unpark(fd)
                continue
            action(
                fd,
                (pycurl.CSELECT_IN if events & select.EPOLLIN else 0)
                | (pycurl.CSELECT_OUT if events & select.EPOLLOUT else 0)
                | (pycurl.CSELECT_ERR if events & _EPOLL_ERR else 0),
            )
        deadline = self._deadline
        if deadline is not None and deadline <= loop.time() + _TIMER_SLACK_S:
            self._deadline = None
            action(pycurl.SOCKET_TIMEOUT, 0)
        while True:
            _, done, failed = multi.info_read()
            for curl in done:
                self._finished(curl, 0, "")
            for curl, errno, message in failed:
                self._finished(curl, errno, message)
            if not done and not failed:
                return

    def _finished(self, curl: pycurl.Curl, errno: int, message: str) -> None:
        handle: _Handle = curl.handle  # type: ignore[attr-defined]
        assert self._multi is not None
        self._multi.remove_handle(curl)
        self._active.discard(handle)
        future = handle.future
        if future is not None and not future.done():
            future.set_result((errno, message))
