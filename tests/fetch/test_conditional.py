"""Conditional GET (revisits): both HTTP clients send a page's validators, and a server
that still has that version answers 304, a normal result. Real aiohttp server on
loopback."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from drumbeat.fetch.client import conditional_headers, validators
from drumbeat.fetch.response import FetchResponse
from drumbeat.queue.base import FetchItem
from tests.fetch.test_http import CLIENTS, _client_class, client, dns, run

__all__ = ["dns"]  # the DNS responder fixture, used by client()

MODIFIED = "Wed, 21 Oct 2026 07:28:00 GMT"


@pytest.fixture(autouse=True, params=sorted(CLIENTS))
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    _client_class[0] = CLIENTS[request.param]
    yield request.param


@asynccontextmanager
async def versioned_site(state: dict[str, Any]) -> AsyncIterator[int]:
    """``/page`` at version ``state["version"]`` with ETag ``"v<N>"`` and a fixed
    Last-Modified; 304 when the request's validators match. Records each request's
    conditional headers in ``state["seen"]``."""

    async def page(request: web.Request) -> web.StreamResponse:
        etag = f'"v{state["version"]}"'
        inm, ims = request.headers.get("If-None-Match"), request.headers.get("If-Modified-Since")
        state["seen"].append((inm, ims))
        headers = {"ETag": etag, "Last-Modified": MODIFIED}
        if inm == etag or (inm is None and ims == MODIFIED and state["version"] == 1):
            return web.Response(status=304, headers=headers)
        return web.Response(body=f"<p>version {state['version']}</p>".encode(), headers=headers)

    app = web.Application()
    app.router.add_get("/page", page)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def test_a_revisit_with_validators_gets_304_until_the_page_changes(dns: Any) -> None:
    state: dict[str, Any] = {"version": 1, "seen": []}

    async def main() -> list[FetchResponse]:
        out = []
        async with versioned_site(state) as port, client(dns[1]) as http:
            url = f"http://127.0.0.1:{port}/page"
            first = await http.fetch(url, None)
            out.append(first)
            etag, modified = validators(first.headers)
            out.append(await http.fetch(url, None, etag=etag, last_modified=modified))
            out.append(await http.fetch(url, None, last_modified=modified))
            state["version"] = 2
            out.append(await http.fetch(url, None, etag=etag, last_modified=modified))
        return out

    first, same, same_by_date, changed = run(main)
    assert (first.status, first.error, first.body) == (200, None, b"<p>version 1</p>")
    assert validators(first.headers) == ('"v1"', MODIFIED)
    assert (same.status, same.error, same.body) == (304, None, b"")
    assert same_by_date.status == 304
    assert (changed.status, changed.body) == (200, b"<p>version 2</p>")
    assert state["seen"] == [
        (None, None),
        ('"v1"', MODIFIED),
        (None, MODIFIED),
        ('"v1"', MODIFIED),
    ]
    assert b'If-None-Match: "v1"' in same.request_head


def test_validators_that_could_split_a_header_are_not_sent() -> None:
    assert conditional_headers('"a"\r\nX-Evil: 1', "Wed, 21 Oct 2026 07:28:00 GMT") == [
        ("If-Modified-Since", "Wed, 21 Oct 2026 07:28:00 GMT")
    ]
    assert conditional_headers(None, None) == []
    assert validators([("etag", ' W/"x" '), ("Content-Type", "text/html")]) == ('W/"x"', None)


def test_fetch_items_carry_validators_and_old_pickles_still_load() -> None:
    item = FetchItem(1, "http://a.test/", "127.0.0.1", etag='"v1"', last_modified=MODIFIED)
    assert pickle.loads(pickle.dumps(item)) == item
    # a FetchItem pickled before the fields existed: cls(*fields) without the last two
    old = FetchItem(2, "http://a.test/", "127.0.0.1")
    cls, fields = old.__reduce__()  # type: ignore[misc]
    again = cls(*fields[:-2])
    assert again == old and again.etag is None and again.last_modified is None
