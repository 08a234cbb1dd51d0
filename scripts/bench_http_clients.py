#!/usr/bin/env python3
"""CPU per request of Python HTTP clients against nginx on loopback (issue 5 measurement).

Not part of drumbeat: a standalone measurement. It starts nginx on loopback (the throughput
benchmark's ``Nginx`` and ``build_tree``: ~20 KB HTML pages, any ``Host`` served), then, for
each client, runs a child process that fetches the same ``--requests`` URLs spread round-robin
over ``--hosts`` host names (``h00000.test`` ...), each host mapped to its own 127.77.x.y
address, ``--concurrency`` requests in flight, keep-alive on. Every client is made to connect
to the caller-chosen address of a host without its own DNS (a pinned resolver, libcurl's
CONNECT_TO, or an IP-literal URL with a ``Host`` header where the client has no hook), to read
the body with a cap, and to keep what a crawler keeps (status, headers, body).

CPU is the child's own ``getrusage(RUSAGE_SELF)`` user+system time over the measured requests
(all threads, so Rust runtimes' worker threads count), after ``--warmup`` requests that open
the connections; nginx's CPU is not included. Everything (this process, nginx, the children)
is pinned to one core (``--cpu``, default 1) with ``taskset``. Runs are interleaved: repeat r
runs every client once before repeat r+1.

    taskset -c 1 python3 scripts/bench_http_clients.py --repeats 3 --json /tmp/h.json

``--clients`` picks a subset; clients whose package is missing are reported and skipped.
The third-party clients are not drumbeat dependencies: ``pip install aiosonic pycurl httpx
rnet primp pyreqwest httpr niquests httptools`` to measure them. ``*-full`` variants read the
whole body in one call (no cap); ``raw-httptools`` is a floor (uvloop Protocol + llhttp, no
timeouts or error handling), not a client. pycurl is driven four ways: ``pycurl-asyncio``
(socket/timer callbacks on the uvloop loop, a reader per socket), ``pycurl-epoll`` (curl's
sockets in an epoll of their own, whose fd is the loop's one reader: CurlHttpClient's way),
``pycurl-thread`` (perform/select loop in a thread, futures resolved in batches) and
``pycurl-select`` (that loop alone, no asyncio).
``drumbeat`` is drumbeat's HttpClient (aiohttp), ``drumbeat-curl`` its CurlHttpClient (libcurl
on the asyncio loop, the ``http_client = "curl"`` setting); measured together (20,000 requests,
median of 3): drumbeat 259, drumbeat-curl 192, aiohttp 200, pycurl-asyncio 111 µs/request.
httpx costs ~20 ms CPU per request here (httpcore's pool rescans every connection for every
waiting request): give it ``--requests 2000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY_CAP = 1 << 20  # bytes kept per response (pages are ~20 KB: never reached here)
TIMEOUT_S = 30.0
USER_AGENT = "bench-http-clients/1"
MIN_BODY = 10_000  # a page shorter than this counts as a failed fetch


# ---------------------------------------------------------------------------------------
# Work list: the same for every client.


def work_list(hosts: int, pages: int, port: int, n: int) -> list[tuple[str, str, str, str]]:
    """``n`` (url, host, ip, path): host i % hosts, so concurrent requests hit distinct hosts."""
    from drumbeat.bench._throughput_web import WebShape

    shape = WebShape.make(hosts=hosts, pages=pages, ips=hosts, seeds=1)
    out = []
    for i in range(n):
        h = i % hosts
        host = shape.host(h)
        path = f"/p/{(i // hosts) % shape.pages:04d}.html"
        out.append((f"http://{host}:{port}{path}", host, shape.ip(h), path))
    return out


# ---------------------------------------------------------------------------------------
# Clients. Each factory returns (fetch, close): ``await fetch(url, host, ip, path)`` gives
# (status, headers, body); ``close`` is awaited at the end. Sync clients are separate.


async def make_aiohttp(ctx):
    """aiohttp: session.get + read, pinned resolver (like drumbeat), no decompression."""
    import aiohttp
    from aiohttp.abc import AbstractResolver

    table = ctx["dns"]

    class Pinned(AbstractResolver):
        async def resolve(self, host, port=0, family=0):
            return [{"hostname": host, "host": table[host], "port": port,
                     "family": 2, "proto": 0, "flags": 0}]

        async def close(self):
            pass

    connector = aiohttp.TCPConnector(limit=ctx["hosts"] * 2, limit_per_host=2,
                                     resolver=Pinned(), use_dns_cache=False)
    session = aiohttp.ClientSession(
        connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": USER_AGENT},
        timeout=aiohttp.ClientTimeout(total=TIMEOUT_S, sock_connect=10, sock_read=TIMEOUT_S))

    async def fetch(url, host, ip, path):
        async with session.get(url, allow_redirects=False) as r:
            body = bytearray()
            while chunk := await r.content.readany():
                body += chunk
                if len(body) > BODY_CAP:
                    del body[BODY_CAP:]
                    r.close()
                    break
            return r.status, r.raw_headers, bytes(body)

    fetch.session = session
    return fetch, session.close


async def make_aiohttp_read(ctx):
    """aiohttp as in the brief's baseline: session.get + read() (no cap)."""
    fetch_capped, close = await make_aiohttp(ctx)
    session = fetch_capped.session

    async def fetch(url, host, ip, path):
        async with session.get(url, allow_redirects=False) as r:
            return r.status, r.raw_headers, await r.read()

    return fetch, close


async def make_drumbeat(ctx):
    """drumbeat's own HttpClient (aiohttp underneath), as the fetcher uses it."""
    from drumbeat.fetch.guard import AddressPolicy
    from drumbeat.fetch.http import AiohttpClient as HttpClient

    client = HttpClient(user_agent=USER_AGENT, policy=AddressPolicy(allow_loopback=True),
                        resolver=None, max_connections=ctx["hosts"] * 2,
                        max_body_bytes=BODY_CAP, total_timeout_s=TIMEOUT_S)

    async def fetch(url, host, ip, path):
        r = await client.fetch(url, ip)
        return r.status, r.response_head, r.body

    return fetch, client.close


async def make_drumbeat_curl(ctx):
    """drumbeat's CurlHttpClient (libcurl on the asyncio loop), as the fetcher uses it with
    http_client = "curl"."""
    from drumbeat.fetch.curl import CurlHttpClient
    from drumbeat.fetch.guard import AddressPolicy

    client = CurlHttpClient(user_agent=USER_AGENT, policy=AddressPolicy(allow_loopback=True),
                            resolver=None, max_connections=ctx["hosts"] * 2,
                            max_body_bytes=BODY_CAP, total_timeout_s=TIMEOUT_S)

    async def fetch(url, host, ip, path):
        r = await client.fetch(url, ip)
        return r.status, r.response_head, r.body

    return fetch, client.close


async def make_aiosonic(ctx):
    """aiosonic: custom resolver (no DNS), SmartPool keyed by host, stream + read_chunks."""
    import aiosonic
    from aiosonic.pools import PoolConfig
    from aiosonic.resolver import AbstractResolver
    from aiosonic.timeout import Timeouts

    table = ctx["dns"]

    class Pinned(AbstractResolver):
        async def resolve(self, host, port=0, family=2):
            return [{"hostname": host, "host": table[host], "port": port,
                     "family": 2, "proto": 0, "flags": 0}]

        async def close(self):
            pass

    timeouts = Timeouts(sock_connect=10, sock_read=TIMEOUT_S, request_timeout=TIMEOUT_S)
    connector = aiosonic.TCPConnector(
        pool_configs={":default": PoolConfig(size=ctx["hosts"] * 2, max_conn_requests=None)},
        resolver=Pinned(), use_dns_cache=False, timeouts=timeouts)
    client = aiosonic.HTTPClient(connector=connector)
    headers = {"User-Agent": USER_AGENT}

    async def fetch(url, host, ip, path):
        r = await client.request(url, "GET", headers=headers, follow=False, timeouts=timeouts,
                                 stream=True)
        if r.body or not r._has_pending_body():
            return r.status_code, r.raw_headers, bytes(r.body[:BODY_CAP])
        body = bytearray()
        async for chunk in r.read_chunks():
            body += chunk
            if len(body) > BODY_CAP:
                del body[BODY_CAP:]
                break  # (aiosonic then drops the connection)
        return r.status_code, r.raw_headers, bytes(body)

    async def close():
        await client.connector.cleanup()

    return fetch, close


async def make_httpx(ctx):
    """httpx AsyncClient: IP-literal URL + Host header (no resolver hook), aiter_raw."""
    import httpx

    limits = httpx.Limits(max_connections=ctx["hosts"] * 2,
                          max_keepalive_connections=ctx["hosts"] * 2)
    client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(TIMEOUT_S, connect=10),
                               headers={"User-Agent": USER_AGENT}, follow_redirects=False,
                               trust_env=False)
    port = ctx["port"]

    async def fetch(url, host, ip, path):
        async with client.stream("GET", f"http://{ip}:{port}{path}",
                                 headers={"Host": f"{host}:{port}"}) as r:
            body = bytearray()
            async for chunk in r.aiter_raw():
                body += chunk
                if len(body) > BODY_CAP:
                    del body[BODY_CAP:]
                    break
            return r.status_code, r.headers.raw, bytes(body)

    return fetch, client.aclose


async def make_rnet(ctx):
    """rnet (Rust, wreq/hyper): IP-literal URL + Host header, decompression off, stream()."""
    import rnet

    client = rnet.Client(user_agent=USER_AGENT, allow_redirects=False, cookie_store=False,
                         timeout=int(TIMEOUT_S), connect_timeout=10, http1_only=True,
                         pool_max_idle_per_host=2, pool_max_size=ctx["hosts"] * 2,
                         no_proxy=True, gzip=False, brotli=False, deflate=False, zstd=False)
    port = ctx["port"]

    async def fetch(url, host, ip, path):
        r = await client.get(f"http://{ip}:{port}{path}", headers={"Host": f"{host}:{port}"})
        body = bytearray()
        async with r.stream() as s:
            async for chunk in s:
                body += chunk
                if len(body) > BODY_CAP:
                    del body[BODY_CAP:]
                    break
        return r.status_code.as_int(), r.headers, bytes(body)

    async def close():
        pass

    fetch.client = client
    return fetch, close


async def make_rnet_full(ctx):
    """rnet, whole body in one call (bytes()): no cap, the cheapest path it offers."""
    capped, close = await make_rnet(ctx)
    client, port = capped.client, ctx["port"]

    async def fetch(url, host, ip, path):
        r = await client.get(f"http://{ip}:{port}{path}", headers={"Host": f"{host}:{port}"})
        return r.status_code.as_int(), r.headers, await r.bytes()

    return fetch, close


async def make_primp(ctx):
    """primp (Rust, reqwest fork): IP-literal URL + Host header, stream=True + anext."""
    import primp

    client = primp.AsyncClient(headers={"User-Agent": USER_AGENT}, cookie_store=False,
                               referer=False, timeout=TIMEOUT_S, connect_timeout=10,
                               follow_redirects=False)
    port = ctx["port"]

    async def fetch(url, host, ip, path):
        r = await client.get(f"http://{ip}:{port}{path}", headers={"Host": f"{host}:{port}"},
                             stream=True)
        body = bytearray()
        while (chunk := await r.anext()) is not None:
            body += chunk
            if len(body) > BODY_CAP:
                del body[BODY_CAP:]
                break
        await r.aclose()
        return r.status_code, r.headers, bytes(body)

    async def close():
        pass

    return fetch, close


async def make_pyreqwest(ctx):
    """pyreqwest (Rust, reqwest): IP-literal URL + Host header, streamed body reader."""
    from datetime import timedelta

    from pyreqwest.client import ClientBuilder

    client = (ClientBuilder().user_agent(USER_AGENT).gzip(False).brotli(False)
              .timeout(timedelta(seconds=TIMEOUT_S)).connect_timeout(timedelta(seconds=10))
              .pool_max_idle_per_host(2).http1_only().no_proxy().max_redirects(0)
              .build())
    port = ctx["port"]
    timeout = timedelta(seconds=TIMEOUT_S)

    async def fetch(url, host, ip, path):
        req = (client.get(f"http://{ip}:{port}{path}").header("Host", f"{host}:{port}")
               .timeout(timeout).build_streamed())
        async with req as r:
            body = bytearray()
            reader = r.body_reader
            while (chunk := await reader.read_chunk()) is not None:
                body += chunk
                if len(body) > BODY_CAP:
                    del body[BODY_CAP:]
                    break
            return r.status, r.headers, bytes(body)

    fetch.client = client
    return fetch, client.close


async def make_pyreqwest_full(ctx):
    """pyreqwest, whole body in one call (send + bytes()): no cap."""
    from datetime import timedelta

    capped, close = await make_pyreqwest(ctx)
    client, port = capped.client, ctx["port"]
    timeout = timedelta(seconds=TIMEOUT_S)

    async def fetch(url, host, ip, path):
        r = await (client.get(f"http://{ip}:{port}{path}").header("Host", f"{host}:{port}")
                   .timeout(timeout).build().send())
        return r.status, r.headers, bytes(await r.bytes())

    return fetch, close


async def make_httpr(ctx):
    """httpr (Rust, sync core run in a thread pool by its AsyncClient): IP URL + Host."""
    import httpr

    client = httpr.AsyncClient(headers={"User-Agent": USER_AGENT}, timeout=TIMEOUT_S,
                               follow_redirects=False, http1_only=True,
                               max_concurrency=ctx["concurrency"])
    port = ctx["port"]

    async def fetch(url, host, ip, path):
        r = await client.get(f"http://{ip}:{port}{path}", headers={"Host": f"{host}:{port}"})
        return r.status_code, r.headers, r.content[:BODY_CAP]

    return fetch, client.aclose


async def make_niquests(ctx):
    """niquests AsyncSession: in-memory resolver (host -> IP), stream=True + iter_raw."""
    import niquests

    hosts = ",".join(f"{h}:{ip}" for h, ip in ctx["dns"].items())
    session = niquests.AsyncSession(resolver=f"in-memory://default/?hosts={hosts}",
                                    pool_connections=ctx["hosts"], pool_maxsize=2,
                                    disable_http2=True, disable_http3=True)
    session.trust_env = False
    session.headers["User-Agent"] = USER_AGENT

    async def fetch(url, host, ip, path):
        r = await session.get(url, stream=True, timeout=TIMEOUT_S, allow_redirects=False)
        body = bytearray()
        async for chunk in await r.iter_raw(65536):
            body += chunk
            if len(body) > BODY_CAP:
                del body[BODY_CAP:]
                break
        await r.close()
        return r.status_code, r.headers, bytes(body)

    return fetch, session.close


async def make_raw(ctx):
    """Floor: asyncio.Protocol on uvloop + httptools (llhttp), one idle-connection list per
    host; no timeouts, no chunked edge cases, no errors handled. Not a client: a bound."""
    import httptools

    loop = asyncio.get_running_loop()
    port = ctx["port"]
    idle: dict[str, list] = {}
    request_tail = (f"User-Agent: {USER_AGENT}\r\nAccept-Encoding: gzip, deflate, br\r\n"
                    "\r\n").encode()

    class Conn(asyncio.Protocol):
        def __init__(self):
            self.parser = httptools.HttpResponseParser(self)
            self.transport = None
            self.waiter = None

        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.parser.feed_data(data)

        def connection_lost(self, exc):
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ConnectionError("lost"))

        def on_header(self, name, value):
            self.headers.append((name, value))

        def on_body(self, body):
            self.body += body

        def on_message_complete(self):
            self.waiter.set_result(None)

        async def get(self, host, path):
            self.headers, self.body = [], bytearray()
            self.waiter = loop.create_future()
            self.transport.write(b"GET %s HTTP/1.1\r\nHost: %s:%d\r\n%s" % (
                path.encode(), host.encode(), port, request_tail))
            await self.waiter
            return self.parser.get_status_code(), self.headers, bytes(self.body)

    async def fetch(url, host, ip, path):
        pool = idle.get(host)
        if pool:
            conn = pool.pop()
        else:
            _, conn = await loop.create_connection(Conn, ip, port)
        result = await conn.get(host, path)
        idle.setdefault(host, []).append(conn)
        return result

    async def close():
        for pool in idle.values():
            for conn in pool:
                conn.transport.close()

    return fetch, close


def _pycurl_handle():
    """A pycurl easy handle for the pycurl clients: HTTP/1.1, no redirects, no proxy,
    the raw head kept in ``c.head`` and the body, up to BODY_CAP, in ``c.body``."""
    import pycurl

    c = pycurl.Curl()
    c.setopt(pycurl.USERAGENT, USER_AGENT)
    c.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
    c.setopt(pycurl.TIMEOUT_MS, int(TIMEOUT_S * 1000))
    c.setopt(pycurl.CONNECTTIMEOUT_MS, 10_000)
    c.setopt(pycurl.NOSIGNAL, 1)
    c.setopt(pycurl.FOLLOWLOCATION, 0)
    c.setopt(pycurl.PROXY, "")
    c.setopt(pycurl.NOPROXY, "*")

    def write(data):
        c.body += data
        if len(c.body) > BODY_CAP:
            del c.body[BODY_CAP:]
            c.capped = True
            return 0  # abort the transfer (CURLE_WRITE_ERROR)
        return None

    def header(line):
        c.head += line

    c.setopt(pycurl.WRITEFUNCTION, write)
    c.setopt(pycurl.HEADERFUNCTION, header)
    return c


async def _pycurl_exchange(free, url, host, ip, port, loop, submit):
    """Fetch ``url`` from ``ip`` with an easy handle (from ``free`` when one is there),
    handed to its driver by ``submit(c)``; the driver settles ``c.fut``. Returns
    (status, head, body); the handle goes back to ``free``."""
    import pycurl

    c = free.pop() if free else _pycurl_handle()
    c.body, c.head, c.capped = bytearray(), bytearray(), False
    c.setopt(pycurl.URL, url)
    c.setopt(pycurl.CONNECT_TO, [f"{host}:{port}:{ip}:{port}"])
    c.fut = loop.create_future()
    submit(c)
    try:
        await c.fut
        return c.getinfo(pycurl.RESPONSE_CODE), bytes(c.head), bytes(c.body)
    finally:
        c.fut = None
        free.append(c)


def _pycurl_on_loop(ctx, loop, multi):
    """What both loop drivers of a CurlMulti share: easy handles (CONNECT_TO pins the
    address, HEADERFUNCTION keeps the raw head), ``fetch``, ``finish`` (settle the
    transfers that ended) and ``close_handles``."""
    import pycurl

    multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, 2)
    multi.setopt(pycurl.M_MAXCONNECTS, ctx["hosts"] * 2)
    free: list = []
    port = ctx["port"]

    def finish():
        while True:
            _, ok, failed = multi.info_read()
            for c in ok:
                multi.remove_handle(c)
                c.fut.set_result(None)
            for c, errno, msg in failed:
                multi.remove_handle(c)
                if errno == pycurl.E_WRITE_ERROR and c.capped:
                    c.fut.set_result(None)
                else:
                    c.fut.set_exception(RuntimeError(f"curl {errno}: {msg}"))
            if not ok and not failed:
                return


    async def fetch(url, host, ip, path):
        # The new handle's work starts from the timer callback curl arms (timeout 0).
        return await _pycurl_exchange(free, url, host, ip, port, loop, multi.add_handle)

    def close_handles():
        for c in free:
            c.close()

    return fetch, finish, close_handles


async def make_pycurl_asyncio(ctx):
    """pycurl CurlMulti driven by the asyncio (uvloop) loop: M_SOCKETFUNCTION registers
    fds with add_reader/add_writer, M_TIMERFUNCTION arms call_later, events call
    socket_action."""
    import pycurl

    loop = asyncio.get_running_loop()
    multi = pycurl.CurlMulti()
    fetch, finish, close_handles = _pycurl_on_loop(ctx, loop, multi)
    watched: dict[int, int] = {}
    timer = [None]

    def on_event(fd, ev):
        multi.socket_action(fd, ev)
        finish()

    def socket_cb(what, fd, _multi, _data):
        old = watched.get(fd, 0)
        if what == pycurl.POLL_REMOVE:
            if old & 1:
                loop.remove_reader(fd)
            if old & 2:
                loop.remove_writer(fd)
            watched.pop(fd, None)
            return
        want = {pycurl.POLL_IN: 1, pycurl.POLL_OUT: 2, pycurl.POLL_INOUT: 3}.get(what, 0)
        if old & 1 and not want & 1:
            loop.remove_reader(fd)
        if old & 2 and not want & 2:
            loop.remove_writer(fd)
        if want & 1 and not old & 1:
            loop.add_reader(fd, on_event, fd, pycurl.CSELECT_IN)
        if want & 2 and not old & 2:
            loop.add_writer(fd, on_event, fd, pycurl.CSELECT_OUT)
        watched[fd] = want

    def on_timeout():
        timer[0] = None
        multi.socket_action(pycurl.SOCKET_TIMEOUT, 0)
        finish()

    def timer_cb(ms):
        if timer[0] is not None:
            timer[0].cancel()
            timer[0] = None
        if ms >= 0:
            timer[0] = loop.call_later(ms / 1000, on_timeout)

    multi.setopt(pycurl.M_SOCKETFUNCTION, socket_cb)
    multi.setopt(pycurl.M_TIMERFUNCTION, timer_cb)

    async def close():
        close_handles()
        multi.close()

    return fetch, close


async def make_pycurl_epoll(ctx):
    """pycurl CurlMulti on the asyncio loop through one epoll object: curl's sockets are
    registered with a private ``select.epoll`` whose own fd is the loop's only reader;
    each wake-up runs socket_action for every ready socket and, when due, the timeout.
    curl's timer callback only records the deadline; one loop timer is re-armed only
    when the deadline moves earlier."""
    import select

    import pycurl

    loop = asyncio.get_running_loop()
    multi = pycurl.CurlMulti()
    fetch, finish, close_handles = _pycurl_on_loop(ctx, loop, multi)
    ep = select.epoll()
    watched: dict[int, int] = {}
    state = {"deadline": None, "armed": None, "armed_at": None}
    masks = {pycurl.POLL_IN: select.EPOLLIN, pycurl.POLL_OUT: select.EPOLLOUT,
             pycurl.POLL_INOUT: select.EPOLLIN | select.EPOLLOUT}
    EIN, EOUT, EERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR | select.EPOLLHUP
    IN, OUT, ERR = pycurl.CSELECT_IN, pycurl.CSELECT_OUT, pycurl.CSELECT_ERR

    def run():
        action = multi.socket_action
        for fd, ev in ep.poll(0):
            action(fd, (IN if ev & EIN else 0) | (OUT if ev & EOUT else 0)
                   | (ERR if ev & EERR else 0))
        deadline = state["deadline"]
        if deadline is not None and deadline <= loop.time():
            state["deadline"] = None
            action(pycurl.SOCKET_TIMEOUT, 0)
        finish()

    def on_timer_fired():
        state["armed"] = None
        deadline = state["deadline"]
        if deadline is not None and deadline > loop.time():
            arm(deadline)
            return
        run()

    def arm(when):
        h = state["armed"]
        if h is not None:
            if state["armed_at"] <= when:
                return
            h.cancel()
        state["armed"] = loop.call_at(when, on_timer_fired)
        state["armed_at"] = when

    def socket_cb(what, fd, _multi, _data):
        if what == pycurl.POLL_REMOVE:
            if watched.pop(fd, None) is not None:
                try:
                    ep.unregister(fd)
                except OSError:
                    pass
            return
        mask = masks[what]
        old = watched.get(fd)
        if old == mask:
            return
        if old is None:
            ep.register(fd, mask)
        else:
            ep.modify(fd, mask)
        watched[fd] = mask

    def timer_cb(ms):
        if ms < 0:
            state["deadline"] = None
            return
        when = loop.time() + ms / 1000
        state["deadline"] = when
        arm(when)

    multi.setopt(pycurl.M_SOCKETFUNCTION, socket_cb)
    multi.setopt(pycurl.M_TIMERFUNCTION, timer_cb)
    loop.add_reader(ep.fileno(), run)

    async def close():
        loop.remove_reader(ep.fileno())
        close_handles()
        multi.close()
        ep.close()

    return fetch, close


async def make_pycurl_thread(ctx):
    """pycurl CurlMulti run by a plain perform()/select() loop in its own thread (curl's
    fds from fdset() plus a wake-up pipe); the asyncio side hands it (handle, future)
    pairs and gets finished transfers back in batches via call_soon_threadsafe."""
    import collections
    import select
    import threading

    import pycurl

    loop = asyncio.get_running_loop()
    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, 2)
    multi.setopt(pycurl.M_MAXCONNECTS, ctx["hosts"] * 2)
    port = ctx["port"]
    incoming: collections.deque = collections.deque()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    state = {"sleeping": False, "stop": False}
    free: list = []


    def deliver(done):
        for c, err in done:
            if err is None:
                c.fut.set_result(None)
            else:
                c.fut.set_exception(RuntimeError(err))

    def run():
        while not state["stop"]:
            while incoming:
                multi.add_handle(incoming.popleft())
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            done = []
            while True:
                _, ok, failed = multi.info_read()
                for c in ok:
                    multi.remove_handle(c)
                    done.append((c, None))
                for c, errno, msg in failed:
                    multi.remove_handle(c)
                    done.append((c, None if c.capped else f"curl {errno}: {msg}"))
                if not ok and not failed:
                    break
            if done:
                loop.call_soon_threadsafe(deliver, done)
            if incoming:
                continue
            r, w, x = multi.fdset()
            timeout = multi.timeout()
            timeout = 1.0 if timeout < 0 else min(timeout / 1000, 1.0)
            state["sleeping"] = True
            if not incoming:
                select.select(r + [wake_r], w, x, timeout)
            state["sleeping"] = False
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def submit(c):
        incoming.append(c)
        if state["sleeping"]:
            os.write(wake_w, b"x")

    async def fetch(url, host, ip, path):
        return await _pycurl_exchange(free, url, host, ip, port, loop, submit)

    async def close():
        state["stop"] = True
        os.write(wake_w, b"x")
        thread.join()
        multi.close()
        os.close(wake_r)
        os.close(wake_w)

    return fetch, close


def run_pycurl_select(ctx, work, warmup, concurrency):
    """pycurl CurlMulti in a plain loop: perform(), info_read(), select(); no asyncio."""
    import pycurl

    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, 2)
    multi.setopt(pycurl.M_MAXCONNECTS, ctx["hosts"] * 2)
    port = ctx["port"]
    handles = []
    for _ in range(concurrency):
        c = _pycurl_handle()
        handles.append(c)

    def batch(items):
        ok_count = 0
        nbytes = 0
        pending = iter(items)
        free = list(handles)
        active = 0

        def start():
            nonlocal active
            while free:
                item = next(pending, None)
                if item is None:
                    return
                url, host, ip, path = item
                c = free.pop()
                c.body, c.head, c.capped = bytearray(), bytearray(), False
                c.setopt(pycurl.URL, url)
                c.setopt(pycurl.CONNECT_TO, [f"{host}:{port}:{ip}:{port}"])
                multi.add_handle(c)
                active += 1

        start()
        while active:
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            while True:
                _, ok, failed = multi.info_read()
                for c in ok:
                    multi.remove_handle(c)
                    active -= 1
                    status = c.getinfo(pycurl.RESPONSE_CODE)
                    if status == 200 and len(c.body) >= MIN_BODY:
                        ok_count += 1
                        nbytes += len(c.body)
                    free.append(c)
                for c, _errno, _msg in failed:
                    multi.remove_handle(c)
                    active -= 1
                    free.append(c)
                if not ok and not failed:
                    break
            start()
            if active:
                multi.select(1.0)
        return ok_count, nbytes

    batch(work[:warmup])
    r0, t0 = _cpu(), time.perf_counter()
    ok, nbytes = batch(work[warmup:])
    wall, cpu = time.perf_counter() - t0, _cpu() - r0
    multi.close()
    return ok, nbytes, wall, cpu


ASYNC_CLIENTS = {
    "aiohttp": ("aiohttp", make_aiohttp),
    "aiohttp-read": ("aiohttp", make_aiohttp_read),
    "drumbeat": ("aiohttp", make_drumbeat),
    "drumbeat-curl": ("pycurl", make_drumbeat_curl),
    "aiosonic": ("aiosonic", make_aiosonic),
    "pycurl-asyncio": ("pycurl", make_pycurl_asyncio),
    "pycurl-epoll": ("pycurl", make_pycurl_epoll),
    "pycurl-thread": ("pycurl", make_pycurl_thread),
    "rnet": ("rnet", make_rnet),
    "rnet-full": ("rnet", make_rnet_full),
    "primp": ("primp", make_primp),
    "pyreqwest": ("pyreqwest", make_pyreqwest),
    "pyreqwest-full": ("pyreqwest", make_pyreqwest_full),
    "httpr": ("httpr", make_httpr),
    "niquests": ("niquests", make_niquests),
    "httpx": ("httpx", make_httpx),
    "raw-httptools": ("httptools", make_raw),
}
SYNC_CLIENTS = {"pycurl-select": ("pycurl", run_pycurl_select)}
ALL_CLIENTS = list(ASYNC_CLIENTS) + list(SYNC_CLIENTS)


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


async def _run_async(factory, ctx, work, warmup, concurrency):
    fetch, close = await factory(ctx)
    errors: dict[str, int] = {}

    async def batch(items):
        it = iter(items)
        ok = nbytes = 0

        async def worker():
            nonlocal ok, nbytes
            for url, host, ip, path in it:
                try:
                    status, _headers, body = await fetch(url, host, ip, path)
                except Exception as exc:  # noqa: BLE001 - counted, reported
                    key = type(exc).__name__
                    errors[key] = errors.get(key, 0) + 1
                    continue
                if status == 200 and len(body) >= MIN_BODY:
                    ok += 1
                    nbytes += len(body)
                else:
                    key = f"status {status} len {len(body)}"
                    errors[key] = errors.get(key, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return ok, nbytes

    await batch(work[:warmup])
    r0, t0 = _cpu(), time.perf_counter()
    ok, nbytes = await batch(work[warmup:])
    wall, cpu = time.perf_counter() - t0, _cpu() - r0
    await close()
    return ok, nbytes, wall, cpu, errors


def child(args) -> None:
    name = args.child
    ctx = json.loads(args.ctx)
    work = work_list(ctx["hosts"], ctx["pages"], ctx["port"], args.warmup + args.requests)
    from drumbeat.bench._throughput_web import WebShape

    shape = WebShape.make(hosts=ctx["hosts"], pages=ctx["pages"], ips=ctx["hosts"], seeds=1)
    ctx["dns"] = shape.dns_table()
    ctx["concurrency"] = args.concurrency
    errors: dict[str, int] = {}
    if name in SYNC_CLIENTS:
        ok, nbytes, wall, cpu = SYNC_CLIENTS[name][1](ctx, work, args.warmup, args.concurrency)
    else:
        import uvloop

        factory = ASYNC_CLIENTS[name][1]
        ok, nbytes, wall, cpu, errors = uvloop.run(
            _run_async(factory, ctx, work, args.warmup, args.concurrency))
    threads = len(os.listdir("/proc/self/task"))
    print(json.dumps({"client": name, "requests": args.requests, "ok": ok, "bytes": nbytes,
                      "wall_s": wall, "cpu_s": cpu, "errors": errors, "threads": threads,
                      "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


# ---------------------------------------------------------------------------------------
# Parent: nginx, children, table.


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _new_log_lines(path: Path, offset: int) -> tuple[int, int, int]:
    """(requests, connections, new offset) from the access log past ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    requests = connections = 0
    for line in data.splitlines():
        parts = line.split()
        if len(parts) == 5:
            requests += 1
            connections += parts[4] == b"1"
    return requests, connections, offset + len(data)


def parent(args) -> None:
    from drumbeat.bench._throughput_web import Nginx, WebShape, build_tree, nginx_binary

    os.sched_setaffinity(0, {args.cpu})  # nginx and the children inherit it
    names = args.clients.split(",") if args.clients else ALL_CLIENTS
    table = {**ASYNC_CLIENTS, **SYNC_CLIENTS}
    versions = {}
    for name in names:
        dist = table[name][0]
        versions[name] = _version(dist)
        if versions[name] is None:
            print(f"skip {name}: {dist} not installed", file=sys.stderr)
    names = [n for n in names if versions[n] is not None]
    binary = nginx_binary()
    if binary is None:
        sys.exit("nginx not found (scripts/install-bench installs it)")
    shape = WebShape.make(hosts=args.hosts, pages=args.pages, ips=args.hosts, seeds=1)
    results: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        tmp_path = Path(tmp)
        import random

        from drumbeat.bench._throughput_web import pick_port

        port = pick_port(shape.ip(0), random.Random())
        build_tree(tmp_path / "www", shape, port)
        nginx = Nginx(binary, tmp_path / "nginx", tmp_path / "www", shape.addresses(), port,
                      workers=1)
        ctx = json.dumps({"hosts": args.hosts, "pages": shape.pages, "port": port})
        with nginx:
            offset = 0
            for rep in range(args.repeats):
                for name in names:
                    cmd = ["taskset", "-c", str(args.cpu), sys.executable, __file__,
                           "--child", name, "--ctx", ctx, "--requests", str(args.requests),
                           "--warmup", str(args.warmup), "--concurrency", str(args.concurrency)]
                    proc = subprocess.run(cmd, capture_output=True, text=True,
                                          timeout=args.child_timeout)
                    time.sleep(1.3)  # nginx flushes its access log buffer every second
                    n_req, n_conn, offset = _new_log_lines(nginx.access_log, offset)
                    if proc.returncode != 0:
                        err = proc.stderr.strip().splitlines()[-3:]
                        print(f"[{rep}] {name}: FAILED rc={proc.returncode} {err}",
                              file=sys.stderr)
                        results[name].append({"failed": " | ".join(err)})
                        continue
                    r = json.loads(proc.stdout.strip().splitlines()[-1])
                    r["nginx_requests"], r["nginx_connections"] = n_req, n_conn
                    r["cpu_us"] = r["cpu_s"] / r["requests"] * 1e6
                    r["rate"] = r["requests"] / r["wall_s"]
                    results[name].append(r)
                    print(f"[{rep}] {name:15s} {r['cpu_us']:7.1f} us/req CPU "
                          f"{r['rate']:7.0f} req/s ok {r['ok']}/{r['requests']} "
                          f"conns {n_conn} threads {r['threads']} "
                          f"errors {r['errors'] or '-'}", file=sys.stderr, flush=True)
    base = _median([r["cpu_us"] for r in results.get("aiohttp", []) if "cpu_us" in r])
    print(f"\n{args.requests} requests (+{args.warmup} warm-up) over {args.hosts} hosts, "
          f"{args.concurrency} in flight, ~20 KB pages, all on CPU {args.cpu}; "
          f"median of {args.repeats}\n")
    print("| client | version | CPU µs/request | vs aiohttp | requests/s | connections | ok |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        runs = [r for r in results[name] if "cpu_us" in r]
        if not runs:
            print(f"| {name} | {versions[name]} | failed | | | | |")
            continue
        cpu = _median([r["cpu_us"] for r in runs])
        rate = _median([r["rate"] for r in runs])
        ratio = f"{base / cpu:.2f}x" if base else "-"
        conns = _median([r["nginx_connections"] for r in runs])
        ok = min(r["ok"] for r in runs)
        print(f"| {name} | {versions[name]} | {cpu:.0f} | {ratio} | {rate:,.0f} | "
              f"{conns:.0f} | {ok}/{args.requests} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "versions": versions,
                                               "results": results}, indent=1))


def _median(xs):
    return statistics.median(xs) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", help=f"comma-separated subset of {','.join(ALL_CLIENTS)}")
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=1_000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--child-timeout", type=float, default=600)
    ap.add_argument("--json", help="write every run's numbers here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--ctx", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
