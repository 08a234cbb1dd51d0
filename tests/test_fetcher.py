"""Fetcher.process against a real aiohttp server on loopback: fetch -> WARC -> log line -> links.

Every test runs with both HTTP backends (``backend``: HttpClient and CurlHttpClient).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest
from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import HttpClient
from drumbeat.fetcher import Fetcher, open_http
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.queue.base import PAGE, ROBOTS, FetchItem
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings
from drumbeat.store.warc import WarcWriter
from drumbeat.urls import fingerprint

PAGE_HTML = (b"<html><body><a href='/a'>a</a><a href='b?x=1#f'>b</a>"
             b"<a rel=nofollow href='/secret'>s</a><a href='mailto:x@y'>m</a>"
             b"<a href='http://other.test/'>o</a></body></html>")


CLIENTS = {"aiohttp": HttpClient, "curl": CurlHttpClient}
_client_class: list[type] = [HttpClient]


@pytest.fixture(autouse=True, params=sorted(CLIENTS))
def backend(request: pytest.FixtureRequest):
    _client_class[0] = CLIENTS[request.param]
    yield request.param
    _client_class[0] = HttpClient


async def chunked_gzip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/html; charset=utf-8",
                                       "Content-Encoding": "gzip"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    data = gzip.compress(PAGE_HTML)
    for i in range(0, len(data), 50):
        await resp.write(data[i:i + 50])
    await resp.write_eof()
    return resp


async def redirect(request: web.Request) -> web.Response:
    return web.Response(status=302, headers={"Location": "../landing/./x#frag"})


async def binary(request: web.Request) -> web.Response:
    return web.Response(body=bytes(range(256)) * 40, content_type="text/html")


async def robots(request: web.Request) -> web.Response:
    return web.Response(text="User-agent: *\nDisallow: /private/\n")


def run_fetches(tmp_path: Path, items: list[FetchItem]):
    async def go():
        app = web.Application()
        app.router.add_get("/chunked", chunked_gzip)
        app.router.add_get("/dir/redirect", redirect)
        app.router.add_get("/binary", binary)
        app.router.add_get("/robots.txt", robots)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        settings = Settings(allow_loopback=True)
        http = _client_class[0](user_agent="drumbeat-test",
                                policy=AddressPolicy(allow_loopback=True), resolver=None)
        warc = WarcWriter(tmp_path / "warc")
        fetcher = Fetcher(settings, LocalTaskQueue(), http, warc)
        try:
            results = []
            for i, item in enumerate(items):
                item.url = item.url.replace("PORT", str(port))
                results.append(await fetcher.process(0, i, item))
            return port, results
        finally:
            await http.close()
            warc.close()
            await runner.cleanup()
    (tmp_path / "warc").mkdir()
    return asyncio.run(go())


def test_page_links_warc_and_log(tmp_path: Path):
    port, [r] = run_fetches(tmp_path, [
        FetchItem(1, "http://localhost:PORT/chunked", "127.0.0.1", PAGE, 2, "http://s.test/")])
    base = f"http://localhost:{port}"
    assert r.status == 200 and r.error is None
    assert r.found is not None
    assert r.found.urls() == [f"{base}/a", f"{base}/b?x=1", "http://other.test/"]
    # Packed for URL-seen as the manager would have: fingerprints and payloads.
    assert list(memoryview(r.found.fingerprints).cast("Q")) == [
        fingerprint(u) for u in r.found.urls()]
    first = r.found.payloads[:memoryview(r.found.lengths).cast("I")[0]]
    assert first == encode_payload(f"{base}/a", 3, f"{base}/chunked")
    assert r.dropped.get("nofollow") == 1 and r.dropped.get("scheme") == 1
    assert r.pld_edges is not None and r.pld_edges.pairs() == [("localhost", "other.test")]
    entry = json.loads(json.dumps(r.log))  # the manager writes it as JSON
    assert entry["status"] == 200 and entry["depth"] == 2 and entry["via"] == "http://s.test/"
    assert entry["ip"] == "127.0.0.1" and entry["warc"]
    [path] = (tmp_path / "warc").glob("*.warc.gz")
    with open(path, "rb") as f:
        records = []
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response":
                # Framing is gone from the stored body, so the head must not announce it.
                assert rec.http_headers.get_header("Transfer-Encoding") is None
                assert rec.http_headers.get_header("X-Crawler-Transfer-Encoding") == "chunked"
            records.append((rec.rec_type, rec.content_stream().read()))
    responses = [body for kind, body in records if kind == "response"]
    # The body was sent chunked and gzipped; a WARC reader must get the page back intact.
    assert responses == [PAGE_HTML]


def test_redirect_location_is_a_link_and_odd_bodies_are_harmless(tmp_path: Path):
    port, (redir, binary_page) = run_fetches(tmp_path, [
        FetchItem(1, "http://localhost:PORT/dir/redirect", "127.0.0.1"),
        FetchItem(2, "http://localhost:PORT/binary", "127.0.0.1"),
    ])
    assert redir.status == 302 and redir.found is not None
    assert redir.found.urls() == [f"http://localhost:{port}/landing/x"]
    assert binary_page.status == 200 and binary_page.found is None


def test_robots_item_returns_text(tmp_path: Path):
    _, [r] = run_fetches(tmp_path, [
        FetchItem(1, "http://localhost:PORT/robots.txt", "127.0.0.1", ROBOTS)])
    assert r.status == 200 and "Disallow: /private/" in (r.robots_text or "")
    assert r.found is None


def test_open_http_picks_the_backend_of_the_http_client_setting(backend: str):
    async def go():
        http, dns = open_http(Settings(http_client=backend))
        try:
            return type(http)
        finally:
            await http.close()
            await dns.close()

    assert asyncio.run(go()) is CLIENTS[backend]
