"""End-to-end: sitemaps, feeds, X-Robots-Tag and the Accept header, on simweb.

Host 0 of a small web with ``SimWebConfig.sitemaps`` names a sitemap index in its
robots.txt (a plain, a gzip and a malformed sitemap, one entry out of scope), links to
an RSS feed and to pages served with X-Robots-Tag; some pages are reachable only
through these. The oracle knows which pages a correct crawler fetches.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from drumbeat.checkpoint import Checkpoints, read_counters
from drumbeat.fetch.client import ClientOptions, client_class
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.parse.sitemaps import parse_lastmod, read_xml_links
from drumbeat.revisit.history import HistoryStore, hints
from drumbeat.settings import DEFAULT_ACCEPT
from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.render import Renderer
from drumbeat.simweb.server import run_in_thread
from drumbeat.urls import fingerprint, normalize
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=5, hosts=4, ips=2, pages_per_host=3, sitemaps=True)
    with run_in_thread(config) as w:
        yield w


def test_sitemaps_feeds_and_x_robots_tag_in_a_crawl(web, tmp_path: Path) -> None:
    state = tmp_path / "state"
    start = len(web.requests)
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback"), capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    entries = read_log(state)
    pages = fetched_pages(entries)
    assert Counter(pages).most_common(1)[0][1] == 1, "a page was fetched twice"
    truth = web.model.crawl(web.seeds)
    assert set(pages) == truth.fetched
    site0 = web.model.url(web.model.hosts[0].name, "")
    # Reachable only through the sitemaps (plain, gzip, the malformed one's first entry)
    # and the feed; the X-Robots-Tag nofollow pages' links are not followed.
    for path in (
        "/only-in-sitemap/1.html",
        "/only-in-sitemap/3.html",
        "/only-in-sitemap/4.html",
        "/only-in-feed/2.html",
        "/special/x-robots-followed.html",
    ):
        assert site0 + path in pages, path
    for path in ("/special/x-robots-hidden-1.html", "/special/x-robots-hidden-2.html"):
        assert site0 + path not in pages, path
    requests = web.requests[start:]
    assert not [r for r in requests if r.path.endswith("elsewhere.html")], "out of scope"
    counters = read_counters(state)
    assert counters["links_dropped.sitemap_out_of_scope"] == 1
    assert counters["links_dropped.sitemap_malformed"] == 1
    by_url = {e["url"]: e for e in entries if e["kind"] == "page"}
    assert by_url[site0 + "/sitemaps/pages.xml"]["sitemap"]["lastmod"] == 3
    assert by_url[site0 + "/sitemaps/broken.xml"]["sitemap"]["error"] == "malformed"
    assert by_url[site0 + "/feed.xml"]["feed"]["kind"] == "rss"
    assert by_url[site0 + "/special/x-robots.html"]["noindex"] is True
    assert "x_robots_tag" in by_url[site0 + "/special/x-robots-agent.html"]
    assert "noindex" not in by_url[site0 + "/special/x-robots-agent.html"]
    # What drumbeat wants, on every request (robots.txt included).
    assert requests and {r.accept for r in requests} == {DEFAULT_ACCEPT}


@pytest.mark.parametrize("client", ["curl", "aiohttp"])
def test_clients_send_accept_and_read_x_robots_tag(web, client: str) -> None:
    async def fetch() -> tuple[str | None, str | None]:
        dns = DnsCache(nameserver=web.dns_address)
        http = client_class(client)(
            ClientOptions(accept="text/html;q=1, */*;q=0.1"),
            policy=AddressPolicy(allow_loopback=True),
            resolver=dns,
        )
        try:
            host = web.model.hosts[0]
            resp = await http.fetch(
                web.model.url(host.name, "/special/x-robots-agent.html"), host.ip
            )
            return resp.x_robots_tag, resp.error
        finally:
            await http.close()
            await dns.close()

    start = len(web.requests)
    tags, error = asyncio.run(fetch())
    assert error is None
    assert tags == "otherbot: noindex\ndrumbeat: nofollow"
    assert [r.accept for r in web.requests[start:]] == ["text/html;q=1, */*;q=0.1"]


def test_sitemap_lastmods_reach_the_revisit_history(web, tmp_path: Path) -> None:
    """With --revisit, each sitemap URL's <lastmod> goes to its history record (issue
    52): read back here from the last checkpoint's history DRUM."""
    state = tmp_path / "state"
    # A crawl with revisits never ends by itself: it stops once it has fetched every
    # page the oracle says a crawl fetches (none is due again within a minute).
    truth = web.model.crawl(web.seeds)
    pages = str(len(truth.fetched))
    cmd = crawl_cmd(web, state, "--allow-loopback", "--revisit", "--max-pages", pages)
    cmd += ["--max-time", "120"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    counters = read_counters(state)
    # The index's three sitemaps, pages.xml's two in scope, the gzip one's and the
    # malformed one's first entry: every one dated.
    assert counters["revisit.sitemap_lastmods"] == 7
    checkpoint = Checkpoints(state).current()
    assert checkpoint is not None
    saved = Checkpoints(state).read_meta(checkpoint).frontier["revisits"]["history"]
    history = HistoryStore(state / "revisits" / "history", manifest=saved, fsync=False)
    host = web.model.hosts[0].name
    renderer = Renderer(web.model)
    dated: dict[str, float] = {}
    for path in ("/sitemaps/pages.xml", "/sitemaps/pages.xml.gz"):
        read = read_xml_links(renderer.body(web.model.page(host, path)))
        for ref, lastmod in zip(read.refs, read.lastmods):
            assert lastmod is not None
            dated[normalize(ref)] = parse_lastmod(lastmod) or 0.0
    site0 = web.model.url(host, "")
    fetched = set(fetched_pages(read_log(state)))
    for url in (site0 + "/only-in-sitemap/1.html", site0 + "/only-in-sitemap/3.html"):
        # Empty hints fold into a record as nothing: they read it back.
        history.record([fingerprint(url)], hints([0.0]), [b""])
        history.flush()
        (v,) = history.take()
        assert v.before is not None, url
        assert v.before["sitemap_s"] == dated[url] > 0
        assert url in fetched and v.before["visits"] >= 1
        # Found only through the sitemap: its date was known before its first visit.
        assert v.before["pre_sitemap_s"] == dated[url]
    history.close()
