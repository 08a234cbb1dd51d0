"""Issue 46, "Trust": a page's links as its real encoding and its whole length give them.

The fetcher against a real aiohttp server on loopback (both HTTP backends), the crawl
log it writes and ``drumbeat stats`` reading that log back.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.fetcher import Fetcher
from drumbeat.parse.links import DEFAULT_MAX_PARSE_BYTES
from drumbeat.queue.base import PAGE, FetchItem, ItemResult
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings
from drumbeat.store.crawllog import CrawlLog
from drumbeat.store.warc import WarcWriter

LEGACY = (
    '<html><head>{meta}</head><body><a href="/café.html">c</a>'
    '<a href="/search?q=café&amp;x=Ω">s</a><a href="/plain">p</a></body></html>'
)
# What a browser follows from LEGACY read as windows-1252: the path as UTF-8, the query
# in windows-1252, Ω (not in windows-1252) as "&#937;".
LEGACY_LINKS = ["/caf%C3%A9.html", "/search?q=caf%E9&x=%26%23937%3B", "/plain"]
UTF8_LINKS = ["/caf%C3%A9.html", "/search?q=caf%C3%A9&x=%CE%A9", "/plain"]
BIG_LINKS = 9_000  # fewer than max_links_per_page
MANY_LINKS = 12_000  # more


def _legacy(meta: str = "") -> bytes:
    return LEGACY.format(meta=meta).encode("cp1252", "xmlcharrefreplace")


def _big_page() -> bytes:
    """A page of 3 MiB, more than the old parse cap of 2 MiB, its links all along."""
    pad = "<p>" + "text " * 60 + "</p>"
    parts = [f'<div><a href="/big/{k}">{k}</a>{pad}</div>' for k in range(BIG_LINKS)]
    body = ("<!DOCTYPE html><html><body>" + "".join(parts) + "</body></html>").encode()
    assert len(body) > 1.4 * DEFAULT_MAX_PARSE_BYTES
    return body


def _many_page() -> bytes:
    return (
        "<html><body>"
        + "".join(f'<a href="/many/{k}">{k}</a>' for k in range(MANY_LINKS))
        + "</body></html>"
    ).encode()


PAGES: dict[str, tuple[str, bytes]] = {
    # The HTTP charset, read from the header (a <meta> saying otherwise loses).
    "/header": ("text/html; charset=windows-1252", _legacy('<meta charset="utf-8">')),
    "/header-latin1": ('text/html; charset="ISO-8859-1"', _legacy()),
    "/meta": (
        "text/html",
        _legacy('<meta http-equiv="Content-Type" content="text/html; charset=latin1">'),
    ),
    "/undeclared": ("text/html", _legacy()),
    "/undeclared-utf8": ("text/html", LEGACY.format(meta="").encode()),
    # A byte order mark beats the header's charset.
    "/bom": ("text/html; charset=windows-1252", b"\xef\xbb\xbf" + LEGACY.format(meta="").encode()),
    "/big": ("text/html; charset=utf-8", _big_page()),
    "/many": ("text/html", _many_page()),
}


@pytest.fixture(params=["aiohttp", "curl"])
def client_class(request: pytest.FixtureRequest) -> type:
    return {"aiohttp": AiohttpClient, "curl": CurlHttpClient}[request.param]


async def _serve(request: web.Request) -> web.Response:
    if request.path not in PAGES:
        return web.Response(status=404, text="no such page")
    content_type, body = PAGES[request.path]
    return web.Response(body=body, headers={"Content-Type": content_type})


def fetch(
    tmp_path: Path, client_class: type, paths: list[str], settings: Settings | None = None
) -> tuple[str, list[ItemResult]]:
    """The fetcher's results for ``paths`` of a loopback server, and its origin."""

    async def go() -> tuple[str, list[ItemResult]]:
        app = web.Application()
        app.router.add_get("/{tail:.*}", _serve)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        origin = f"http://localhost:{site._server.sockets[0].getsockname()[1]}"
        s = settings or Settings(allow_loopback=True)
        http = client_class(
            user_agent="drumbeat-test",
            policy=AddressPolicy(allow_loopback=True),
            resolver=None,
            max_body_bytes=s.max_body_bytes,
        )
        (tmp_path / "warc").mkdir(exist_ok=True)
        warc = WarcWriter(tmp_path / "warc")
        fetcher = Fetcher(s, LocalTaskQueue(), http, warc)
        try:
            return origin, [
                await fetcher.process(0, i, FetchItem(i, origin + path, "127.0.0.1", PAGE, 0, None))
                for i, path in enumerate(paths)
            ]
        finally:
            await http.close()
            warc.close()
            await runner.cleanup()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/header", LEGACY_LINKS),
        ("/header-latin1", LEGACY_LINKS),
        ("/meta", LEGACY_LINKS),
        ("/undeclared", LEGACY_LINKS),
        ("/undeclared-utf8", UTF8_LINKS),
        ("/bom", UTF8_LINKS),
    ],
)
def test_links_are_read_with_the_pages_encoding(
    tmp_path: Path, client_class: type, path: str, expected: list[str]
) -> None:
    origin, [r] = fetch(tmp_path, client_class, [path])
    assert r.status == 200 and r.found is not None
    assert r.found.urls() == [origin + link for link in expected]
    assert r.log is not None and "links_cut" not in r.log


def test_a_page_longer_than_one_parse_is_read_whole(tmp_path: Path, client_class: type) -> None:
    origin, [r] = fetch(tmp_path, client_class, ["/big"])
    assert r.found is not None
    assert r.found.urls() == [f"{origin}/big/{k}" for k in range(BIG_LINKS)]
    assert r.log is not None and "links_cut" not in r.log and not r.dropped


def test_cut_links_are_on_the_log_line_and_in_stats(tmp_path: Path, client_class: type) -> None:
    settings = Settings(allow_loopback=True, max_body_bytes=len(_big_page()) // 2)
    _origin, results = fetch(tmp_path, client_class, ["/many", "/big", "/plain"], settings)
    many, big, plain = results
    assert many.found is not None and len(many.found.urls()) == settings.max_links_per_page
    assert many.dropped["too_many_links"] == MANY_LINKS - settings.max_links_per_page
    assert many.log is not None and many.log["links_cut"] == "max_links"
    # Cut by max_body_bytes: the links it holds are found, the log says the rest is not.
    assert big.found is not None and 0 < len(big.found.urls()) < BIG_LINKS
    assert big.log is not None and big.log["links_cut"] == "bytes"
    assert big.log["truncated"] == "length"
    assert plain.status == 404 and plain.log is not None and "links_cut" not in plain.log

    state = tmp_path / "state"
    with CrawlLog(state / "crawl.log") as log:
        for r in results:
            assert r.log is not None
            log.append(json.loads(json.dumps(r.log)))  # as the manager writes it
    out = subprocess.run(
        [sys.executable, "-m", "drumbeat", "stats", str(state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert json.loads(out)["links_cut"] == {"max_links": 1, "bytes": 1}
    table = subprocess.run(
        [sys.executable, "-m", "drumbeat", "stats", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "links cut by" in table and "max_links" in table
