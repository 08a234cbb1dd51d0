"""Revisits end to end below the manager: a real server on loopback whose pages change,
the curl client's conditional GETs, and Revisits' history, policy and due-time queue on
a FakeClock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from drumbeat.fetch.client import validators
from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.revisit.history import hints
from drumbeat.revisit.policy import RevisitPolicy
from drumbeat.revisit.revisits import Revisits, digest64
from drumbeat.testing import FakeClock
from tests.fetch import test_http
from tests.fetch.test_http import client, dns, run

__all__ = ["dns"]


def test_revisits_send_validators_count_304s_and_learn_changes(
    tmp_path: Path, dns: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(test_http, "_client_class", [CurlHttpClient])
    versions = {"/same": 1, "/moving": 1}
    conditional: list[str] = []

    async def page(request: web.Request) -> web.StreamResponse:
        etag = f'"{versions[request.path]}"'
        if request.headers.get("If-None-Match"):
            conditional.append(request.path)
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        body = f"{request.path} v{versions[request.path]}".encode()
        return web.Response(body=body, headers={"ETag": etag})

    clock = FakeClock(0.0)
    policy = RevisitPolicy(
        1.0, min_interval_s=60.0, max_interval_s=3600.0, default_interval_s=600.0, clock=clock
    )
    revisits = Revisits(tmp_path / "revisits", policy, clock=clock, slot_s=10.0, fsync=False)

    async def main() -> int:
        app = web.Application()
        app.router.add_get("/{name}", page)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        fetched = 0
        try:
            async with client(dns[1]) as http:
                for fp, path in enumerate(versions, 1):
                    r = await http.fetch(base + path, None)
                    etag, modified = validators(r.headers)
                    revisits.fetched(fp, base + path, "a.test", status=200, payload=r.body,
                                     etag=etag, last_modified=modified)  # fmt: skip
                revisits.plan()
                assert revisits.due(10) == []  # nothing is due yet
                for _ in range(8):
                    clock.advance(3600.0)
                    versions["/moving"] += 1
                    for rv in revisits.due(10):
                        r = await http.fetch(rv.url, None, etag=rv.etag)
                        assert r.error is None and r.status in (200, 304)
                        etag, modified = validators(r.headers)
                        revisits.fetched(rv.fingerprint, rv.url, rv.site, status=r.status,
                                         payload=r.body, etag=etag or rv.etag)  # fmt: skip
                        fetched += 1
                    revisits.plan()
        finally:
            await runner.cleanup()
        return fetched

    fetched = run(main)
    stats = revisits.stats()
    assert fetched == 16  # every page every hour (the interval is at most an hour)
    assert stats.not_modified == 8  # /same: each revisit a 304
    assert stats.changed == 8  # /moving: each revisit a change
    assert conditional.count("/same") == 8 and conditional.count("/moving") == 8
    assert stats.recorded == 18 and stats.queued == 2
    revisits.close()


def _probe(revisits: Revisits, fingerprint: int) -> np.void:
    """The URL's history as stored (an empty hint folds into it as nothing)."""
    revisits.history.record([fingerprint], hints([0.0]), [b""])
    revisits.history.flush()
    (v,) = revisits.history.take()
    assert v.before is not None
    return v.before


def test_a_sitemap_lastmod_newer_than_the_last_visit_makes_the_url_due_soon(
    tmp_path: Path,
) -> None:
    clock = FakeClock(1_800_000_000.0)  # wall time: lastmods are compared with it
    policy = RevisitPolicy(  # a bandwidth for revisits an hour apart
        1 / 3600, min_interval_s=60.0, max_interval_s=3600.0, default_interval_s=600.0, clock=clock
    )
    revisits = Revisits(tmp_path / "revisits", policy, clock=clock, slot_s=10.0, fsync=False)
    url, fp = "http://a.test/p", 1
    seen = encode_payload(url, 3, "http://a.test/sitemap.xml")
    visited = clock()
    revisits.fetched(fp, url, "a.test", status=200, payload=b"v1", depth=3)
    assert revisits.plan() == 1 and revisits.stats().queued == 1  # due in an hour
    # Dates that say nothing new: before the visit, in the future.
    clock.advance(30.0)
    revisits.sitemap_lastmods(
        np.array([fp, fp], np.uint64), np.array([visited - 100, clock() + 50]), [seen, seen]
    )
    revisits.plan()
    assert revisits.stats().queued == 1 and revisits.stats().lastmod_due == 0
    # Changed after the visit: due at once, or min_interval_s after the visit.
    revisits.sitemap_lastmods(np.array([fp], np.uint64), np.array([clock() - 10]), [seen])
    revisits.plan()
    assert revisits.stats().queued == 2 and revisits.stats().lastmod_due == 1
    assert revisits.due(10) == []
    revisits.sitemap_lastmods(np.array([fp], np.uint64), np.array([clock() - 10]), [seen])
    revisits.plan()  # the same date again: no second entry
    assert revisits.stats().queued == 2 and revisits.stats().lastmod_due == 1
    clock.advance(30.0)
    (rv,) = revisits.due(10)
    assert (rv.url, rv.depth, rv.etag, rv.digest) == (url, 3, None, digest64(b"v1"))
    # The revisit finds the change; it was dated by the lastmod (20 s before the visit).
    revisits.fetched(fp, url, "a.test", status=200, payload=b"v2", depth=3)
    assert revisits.plan() == 1 and revisits.stats().queued == 2
    h = _probe(revisits, fp)
    assert (h["visits"], h["changes"], h["dated"], h["since_s"]) == (2, 1, 1, 40.0)
    # The URL's first entry falls due: its fetch is recorded, but it plans none (the
    # lastmod's revisit did): one entry a URL again.
    clock.advance(3600.0 - 60.0)  # an hour after the first visit
    (rv,) = revisits.due(10)
    revisits.fetched(fp, url, "a.test", status=304, etag=rv.etag)
    revisits.plan()
    st = revisits.stats()
    assert (st.queued, st.superseded, st.recorded) == (1, 1, 3)
    assert _probe(revisits, fp)["visits"] == 3
    revisits.close()
