"""End-to-end (issue 52): ``drumbeat crawl --revisit`` against a real aiohttp server on
127.0.0.1 whose pages change.

Pages under ``/same/`` never change and carry an ETag and a Last-Modified (a conditional
GET gets a 304); pages under ``/moving/`` change at every request; ``/plain`` never
changes and has no validators (each revisit is a 200 with the same payload). The
server's own log says which requests were conditional; the WARC files, read back by
warcio, hold the revisit records; the crawl runs on past its frontier's end until
``--max-time``, and a second run resumes the schedule; so does a run after a SIGKILL
(the journal's visits); and a cluster manager's revisits cross Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from drumbeat.checkpoint import read_counters
from drumbeat.store.warc import IDENTICAL_PAYLOAD_DIGEST, SERVER_NOT_MODIFIED
from drumbeat.testing import RedisServer
from tests.e2e.test_crawl_backoff import serve

SAME = [f"/same/{i}" for i in range(4)]
MOVING = [f"/moving/{i}" for i in range(2)]
MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"
CONFIG = """\
checkpoint_interval_s = 0.5
revisit_min_interval_s = 0.2
revisit_max_interval_s = 0.8
"""


@dataclass
class ChangingSite:
    """The server: each request's (path, If-None-Match, If-Modified-Since, status)."""

    requests: list[tuple[str, str | None, str | None, int]] = field(default_factory=list)
    versions: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        inm = request.headers.get("If-None-Match")
        ims = request.headers.get("If-Modified-Since")
        with self.lock:
            if path.startswith("/moving/"):
                self.versions[path] += 1
            version = self.versions[path]
            status = 404 if path == "/robots.txt" else 200
            etag = f'"v{version}"'
            if path.startswith("/same/") and (inm == etag or ims == MODIFIED):
                status = 304
            self.requests.append((path, inm, ims, status))
        if status == 404:
            return web.Response(status=404)
        headers = {}
        if path.startswith(("/same/", "/moving/")):
            headers = {"ETag": etag, "Last-Modified": MODIFIED}
        if status == 304:
            return web.Response(status=304, headers=headers)
        links = "".join(f'<a href="{p}">x</a>' for p in [*SAME, *MOVING, "/plain"])
        body = f"<html><body>{path} version {version} {links if path == '/' else ''}</body></html>"
        return web.Response(text=body, content_type="text/html", headers=headers)


def crawl(
    port: int, state: Path, max_time: float, fetchers: str = "0"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        crawl_cmd(port, state, max_time, fetchers), capture_output=True, text=True, timeout=120
    )


def crawl_cmd(
    port: int, state: Path, max_time: float, fetchers: str = "0", config_text: str = CONFIG
) -> list[str]:
    config = state.parent / "revisit.toml"
    config.write_text(config_text)
    return [
        sys.executable,
        "-m",
        "drumbeat",
        "crawl",
        f"http://127.0.0.1:{port}/",
        "--state",
        str(state),
        "--allow-loopback",
        "--host-delay",
        "0.02",
        "--ip-delay",
        "0.02",
        "--fetchers",
        fetchers,
        "--config",
        str(config),
        "--no-progress",
        "--revisit",
        "--revisit-share",
        "0.5",
        "--max-time",
        str(max_time),
    ]


def warc_records(state: Path, warc: str = "warc") -> list[dict[str, str]]:
    """The response and revisit records' WARC headers, in the order written."""
    out = []
    for path in sorted((state / warc).glob("*.warc.gz")):
        with path.open("rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type in ("response", "revisit"):
                    out.append(dict(record.rec_headers.headers))
    return out


def test_a_revisit_crawl_sends_conditional_gets_and_archives_revisits(tmp_path: Path) -> None:
    site = ChangingSite()
    state = tmp_path / "state"
    with serve(site) as port:  # type: ignore[arg-type]
        first = crawl(port, state, 5.0)
        assert first.returncode == 0, first.stderr
        run1 = len(site.requests)
        # A fetcher process this time: revisits' items and results cross the pipe.
        second = crawl(port, state, 3.0, fetchers="1")
        assert second.returncode == 0, second.stderr
    base = f"http://127.0.0.1:{port}"
    # It ran on past the frontier's end, saying so, until its time was up.
    assert "crawl stopped (max_time)" in first.stderr
    assert "not modified" in first.stderr.splitlines()[-1]  # the revisits' figures
    log = (state / "drumbeat.log").read_text()
    assert "frontier done; revisiting" in log
    reqs = site.requests[:run1]
    # Conditional GETs: the unchanged pages answered 304, each more than once.
    for path in SAME:
        conditional = [r for r in reqs if r[0] == path and r[1] is not None]
        assert conditional and all(r[1] == '"v0"' and r[2] == MODIFIED for r in conditional)
        assert sum(1 for r in reqs if r[0] == path and r[3] == 304) >= 2, path
    for path in MOVING:
        assert sum(1 for r in reqs if r[0] == path) >= 3, path
    assert sum(1 for r in reqs if r[0] == "/plain") >= 3

    records = warc_records(state)
    first_date = {}
    for h in records:
        if h["WARC-Type"] == "response":
            first_date.setdefault(h["WARC-Target-URI"], h["WARC-Date"])
    not_modified = [h for h in records if h.get("WARC-Profile") == SERVER_NOT_MODIFIED]
    assert {h["WARC-Target-URI"] for h in not_modified} == {base + p for p in SAME}
    for h in not_modified:
        url = h["WARC-Target-URI"]
        assert h["WARC-Refers-To-Target-URI"] == url
        assert h["WARC-Refers-To-Date"] == first_date[url]
        assert "WARC-Payload-Digest" not in h  # no digest of the empty body
    identical = [h for h in records if h.get("WARC-Profile") == IDENTICAL_PAYLOAD_DIGEST]
    assert base + "/plain" in {h["WARC-Target-URI"] for h in identical}
    for path in MOVING:  # a changed page is archived in full each time
        full = [h for h in records if h["WARC-Type"] == "response"]
        assert sum(1 for h in full if h["WARC-Target-URI"] == base + path) >= 3

    counters = read_counters(state)
    assert counters["revisit.not_modified"] >= 2 * len(SAME)
    assert counters["revisit.changed"] >= 2 * len(MOVING)
    assert counters["revisit.unchanged"] >= 1
    # The second run resumed the schedule: its revisits are conditional from the start
    # (the pages' validators came back from the checkpoint), none is a first fetch.
    log = (state / "drumbeat.log").read_text()
    assert "resumed from" in log
    again = site.requests[run1:]
    same_again = [r for r in again if r[0] in SAME]
    assert same_again and sum(1 for r in same_again if r[3] == 304) >= len(SAME)
    assert log.count("revisits: ") == 2

    # `drumbeat stats` reports them, as JSON and as a table.
    cmd = [sys.executable, "-m", "drumbeat", "stats", str(state)]
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    revisits = json.loads(out.stdout)["revisits"]
    assert revisits["not_modified"] == read_counters(state)["revisit.not_modified"]
    assert revisits["fetched"] >= revisits["not_modified"] + revisits["changed"]
    assert 0 < revisits["expected_freshness"] <= 1
    table = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert "304 not modified" in table.stdout and "expected freshness" in table.stdout


def test_a_cluster_manager_with_revisit_sends_conditional_gets(tmp_path: Path) -> None:
    """`drumbeat manager --redis ... --revisit` and a `drumbeat fetcher` on a real
    redis-server: the revisits' validators cross Redis in the items, the fetcher (with
    the crawl's settings) sends them and archives the 304s as revisit records."""
    site = ChangingSite()
    config = tmp_path / "revisit.toml"
    config.write_text(CONFIG)
    with serve(site) as port, RedisServer(tmp_path / "redis") as redis:  # type: ignore[arg-type]
        fetcher = subprocess.Popen(
            [sys.executable, "-m", "drumbeat", "fetcher", "--redis", redis.url,
             "--state", str(tmp_path / "fetcher"), "--processes", "1"],
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            manager = subprocess.run(
                [sys.executable, "-m", "drumbeat", "manager", f"http://127.0.0.1:{port}/",
                 "--redis", redis.url, "--crawl", "rv", "--partition", "0/1",
                 "--state", str(tmp_path / "manager"), "--allow-loopback",
                 "--host-delay", "0.02", "--ip-delay", "0.02", "--config", str(config),
                 "--no-progress", "--revisit", "--revisit-share", "0.5",
                 "--max-time", "6"],
                capture_output=True,
                text=True,
                timeout=120,
            )  # fmt: skip
        finally:
            fetcher.terminate()
            fetcher.wait(timeout=30)
    assert manager.returncode == 0, manager.stderr
    assert "not modified" in manager.stderr.splitlines()[-1]
    for path in SAME:
        conditional = [r for r in site.requests if r[0] == path and r[1] is not None]
        assert conditional and all(r[1] == '"v0"' and r[2] == MODIFIED for r in conditional)
        assert any(r[3] == 304 for r in conditional), path
    records = warc_records(tmp_path / "fetcher", "warc/rv")  # (the fetcher's, by crawl)
    not_modified = {
        h["WARC-Target-URI"] for h in records if h.get("WARC-Profile") == SERVER_NOT_MODIFIED
    }
    assert not_modified == {f"http://127.0.0.1:{port}{p}" for p in SAME}
    assert read_counters(tmp_path / "manager")["revisit.not_modified"] >= len(SAME)


def test_a_sigkill_keeps_the_visits_journaled_since_the_checkpoint(tmp_path: Path) -> None:
    """kill -9 with no checkpoint since the run's first (which held the seed alone): the
    pages fetched are replayed from the journal into the history, so that the resumed
    crawl revisits them, by conditional GET (without their visits it would never fetch
    them again: URL-seen and the journal's done set know them)."""
    site = ChangingSite()
    state = tmp_path / "state"
    no_checkpoint = CONFIG.replace("checkpoint_interval_s = 0.5", "checkpoint_interval_s = 600")
    with serve(site) as port:  # type: ignore[arg-type]
        cmd = crawl_cmd(port, state, 60.0, config_text=no_checkpoint)
        victim = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not {r[0] for r in site.requests} >= set(SAME):
                assert time.monotonic() < deadline, "the pages were not fetched"
                time.sleep(0.05)
            time.sleep(2.0)  # a few group commits (journal_commit_s 0.5)
        finally:
            victim.kill()
            victim.wait(timeout=30)
        run1 = len(site.requests)
        resumed = crawl(port, state, 3.0)
    assert resumed.returncode == 0, resumed.stderr
    assert read_counters(state)["journal_replayed"] >= len(SAME)
    again = [r for r in site.requests[run1:] if r[0] in SAME]
    assert {r[0] for r in again} == set(SAME)
    assert all(r[1] == '"v0"' and r[2] == MODIFIED for r in again)
