"""Revisits end to end below the manager: a real server on loopback whose pages change,
the curl client's conditional GETs, and Revisits' history, policy and due-time queue on
a FakeClock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from drumbeat.fetch.client import validators
from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.revisit.policy import RevisitPolicy
from drumbeat.revisit.revisits import Revisits
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
