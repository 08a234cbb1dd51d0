"""Fetcher: robots.txt Sitemap lines, sitemaps, feeds, X-Robots-Tag and other bodies,
against a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import calendar
import gzip
from array import array
from pathlib import Path

from aiohttp import web

from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetcher import Fetcher, open_content_index
from drumbeat.queue.base import PAGE, ROBOTS, FetchItem, ItemResult
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings
from drumbeat.store.warc import WarcWriter
from drumbeat.urls import fingerprint

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*locs: str) -> str:
    entries = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    return f'<?xml version="1.0"?><urlset {NS}>{entries}</urlset>'


BODIES: dict[str, tuple[str, bytes, dict[str, str]]] = {
    "/robots.txt": (
        "text/plain",
        (
            b"User-agent: *\nDisallow: /private/\nSitemap: /maps/index.xml\n"
            b"Sitemap: http://elsewhere.test/s.xml\n"
        ),
        {},
    ),
    "/norobots/robots.txt": ("text/plain", b"User-agent: *\nDisallow:\n", {}),
    "/maps/index.xml": (
        "application/xml",
        f"<sitemapindex {NS}><sitemap><loc>/maps/a.xml.gz</loc></sitemap></sitemapindex>".encode(),
        {},
    ),
    "/maps/a.xml.gz": (
        "application/x-gzip",
        gzip.compress(urlset("/maps/1.html", "/top.html", "http://other.test/x").encode()),
        {},
    ),
    "/list.txt": ("text/plain", b"http://h.test/t1\nhttp://h.test/t2\n", {}),
    "/feed": (
        "application/atom+xml",
        b'<feed xmlns="http://www.w3.org/2005/Atom"><entry><link href="/e1"/></entry></feed>',
        {},
    ),
    "/quiet-feed": (
        "application/rss+xml",
        b"<rss><channel><item><link>/q1</link></item></channel></rss>",
        {"X-Robots-Tag": "none"},
    ),
    "/doc.pdf": ("application/pdf", b"%PDF-1.4 <a href='/from-pdf'>x</a>", {}),
    "/data.xml": ("application/xml", b'<?xml version="1.0"?><svg><a href="/x"/></svg>', {}),
    "/page": ("text/html", b"<a href='/p1'>1</a>", {"X-Robots-Tag": "drumbeat: noindex"}),
    "/maps/dated.xml": (
        "application/xml",
        (
            f"<urlset {NS}><url><loc>/maps/d1</loc><lastmod>2024-05-01</lastmod></url>"
            "<url><loc>/maps/d2</loc></url>"
            "<url><loc>/maps/d3</loc><lastmod>May 1st</lastmod></url>"
            "<url><loc>/maps/d4</loc><lastmod>2024-05-01T12:00:00+02:00</lastmod></url>"
            "</urlset>"
        ).encode(),
        {},
    ),
    "/article": (
        "text/html",
        (
            "<html><body><p>" + " ".join(f"word{i}" for i in range(300)) + "</p></body></html>"
        ).encode(),
        {},
    ),
}


async def serve(request: web.Request) -> web.Response:
    if request.path not in BODIES:
        return web.Response(status=404, text="no")
    content_type, body, headers = BODIES[request.path]
    return web.Response(body=body, content_type=content_type, headers=headers)


def fetch(
    tmp_path: Path, items: list[FetchItem], **settings: object
) -> tuple[str, list[ItemResult]]:
    """Fetcher.process of ``items`` (PORT in their URLs and vias: the server's port)."""

    async def go() -> tuple[str, list[ItemResult]]:
        app = web.Application()
        app.router.add_get("/{tail:.*}", serve)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        origin = f"http://localhost:{site._server.sockets[0].getsockname()[1]}"
        http = CurlHttpClient(policy=AddressPolicy(allow_loopback=True), resolver=None)
        warc = WarcWriter(tmp_path / "warc")
        s = Settings(allow_loopback=True, **settings)
        # A content index (duplicates, simhashes) only where a test asks for near_dup.
        content = open_content_index(s, tmp_path / "content.lmdb") if s.near_dup else None
        fetcher = Fetcher(s, LocalTaskQueue(), http, warc, content=content)
        try:
            results = []
            for i, item in enumerate(items):
                item.url = item.url.replace("ORIGIN", origin)
                item.via = item.via.replace("ORIGIN", origin) if item.via else None
                results.append(await fetcher.process(0, i, item))
            return origin, results
        finally:
            await http.close()
            warc.close()
            if content is not None:
                content.close()
            await runner.cleanup()

    (tmp_path / "warc").mkdir(parents=True, exist_ok=True)
    return asyncio.run(go())


def robots_item(path: str = "/robots.txt") -> FetchItem:
    return FetchItem(1, "ORIGIN" + path, "127.0.0.1", ROBOTS)


def test_robots_sitemap_lines_are_found_urls(tmp_path: Path) -> None:
    origin, [r] = fetch(tmp_path, [robots_item()])
    assert r.found is not None
    assert r.found.urls() == [f"{origin}/maps/index.xml", "http://elsewhere.test/s.xml"]
    assert r.log is not None and r.log["sitemaps"] == 2
    assert "Disallow: /private/" in (r.robots_text or "")
    _, [off] = fetch(tmp_path, [robots_item()], sitemaps="off")
    assert off.found is None


def test_default_sitemap_only_when_asked_and_none_is_named(tmp_path: Path) -> None:
    origin, [named, plain, missing] = fetch(
        tmp_path,
        [robots_item(), robots_item("/norobots/robots.txt"), robots_item("/none/robots.txt")],
        sitemaps="robots+default",
    )
    assert named.found is not None and len(named.found) == 2
    # (The test's robots URLs are not at the root; the default is the origin's.)
    assert plain.found is not None and plain.found.urls() == [f"{origin}/sitemap.xml"]
    assert missing.status == 404 and missing.found is not None
    _, [only_named] = fetch(tmp_path, [robots_item("/norobots/robots.txt")])
    assert only_named.found is None


def test_index_gzip_scope_and_depth(tmp_path: Path) -> None:
    origin, [index, deep, urls, cross] = fetch(
        tmp_path,
        [
            FetchItem(1, "ORIGIN/maps/index.xml", "127.0.0.1", PAGE, 1, "ORIGIN/robots.txt"),
            FetchItem(2, "ORIGIN/maps/index.xml", "127.0.0.1", PAGE, 3, "ORIGIN/page"),
            FetchItem(3, "ORIGIN/maps/a.xml.gz", "127.0.0.1", PAGE, 2, "ORIGIN/maps/index.xml"),
            FetchItem(
                4, "ORIGIN/maps/a.xml.gz", "127.0.0.1", PAGE, 1, "http://other.test/robots.txt"
            ),
        ],
    )
    assert index.found is not None and index.found.urls() == [f"{origin}/maps/a.xml.gz"]
    assert index.log is not None and index.log["sitemap"] == {"kind": "sitemapindex", "entries": 1}
    assert deep.found is None and deep.dropped == {"sitemap_index_too_deep": 1}
    # Under the sitemap's directory (and its index's, the same): the rest is dropped.
    assert urls.found is not None and urls.found.urls() == [f"{origin}/maps/1.html"]
    assert urls.dropped == {"sitemap_out_of_scope": 2}
    # Named in other.test's robots.txt: other.test's URLs are in scope (cross-submit),
    # the root of its own host is not (no index there).
    assert cross.found is not None
    assert cross.found.urls() == [f"{origin}/maps/1.html", "http://other.test/x"]


def test_text_sitemap_only_when_robots_names_it(tmp_path: Path) -> None:
    _, [named, linked] = fetch(
        tmp_path,
        [
            FetchItem(1, "ORIGIN/list.txt", "127.0.0.1", PAGE, 1, "ORIGIN/robots.txt"),
            FetchItem(2, "ORIGIN/list.txt", "127.0.0.1", PAGE, 1, "ORIGIN/page"),
        ],
    )
    assert named.log is not None and named.log["sitemap"]["kind"] == "text"
    assert named.found is None
    assert named.dropped == {"sitemap_out_of_scope": 2}  # h.test is not this host
    assert linked.found is None and "sitemap" not in (linked.log or {})


def test_feeds_x_robots_tag_and_other_bodies(tmp_path: Path) -> None:
    origin, [feed, quiet, pdf, svg, page] = fetch(
        tmp_path,
        [
            FetchItem(i, "ORIGIN" + path, "127.0.0.1")
            for i, path in enumerate(["/feed", "/quiet-feed", "/doc.pdf", "/data.xml", "/page"])
        ],
    )
    assert feed.found is not None and feed.found.urls() == [f"{origin}/e1"]
    assert feed.log is not None and feed.log["feed"] == {"kind": "atom", "entries": 1}
    assert quiet.found is None and quiet.dropped == {"meta_nofollow": 1}
    assert quiet.log is not None and quiet.log["x_robots_tag"] == "none"
    # Neither HTML nor a sitemap or a feed: archived, not parsed.
    for other in (pdf, svg):
        assert other.found is None and other.dropped == {} and other.log is not None
        assert other.log["warc"] and "sitemap" not in other.log and "feed" not in other.log
    assert page.found is not None and page.found.urls() == [f"{origin}/p1"]
    assert page.log is not None and page.log["noindex"] is True


def test_sitemap_lastmods_and_simhash_travel_with_the_result_for_revisits(
    tmp_path: Path,
) -> None:
    day = calendar.timegm((2024, 5, 1, 0, 0, 0))
    items = [
        FetchItem(1, "ORIGIN/maps/dated.xml", "127.0.0.1", PAGE, 1, "ORIGIN/robots.txt"),
        FetchItem(2, "ORIGIN/article", "127.0.0.1", PAGE, 1, None),
    ]
    origin, [dated, page] = fetch(tmp_path, items, revisit=True, near_dup=True)
    assert dated.found is not None
    assert dated.found.urls() == [f"{origin}/maps/d{i}" for i in range(1, 5)]
    assert dated.lastmods is not None  # by fingerprint, those that have a valid one
    fps, times = array("Q", dated.lastmods[:16]), array("d", dated.lastmods[16:])
    assert list(fps) == [fingerprint(f"{origin}/maps/d{i}") for i in (1, 4)]
    assert list(times) == [day, day + 10 * 3600]
    assert dated.log is not None and dated.log["sitemap"]["lastmod_malformed"] == 1
    assert page.simhash != 0
    # Without revisits nothing is carried (the crawl log still counts the bad date).
    items = [FetchItem(1, "ORIGIN/maps/dated.xml", "127.0.0.1", PAGE, 1, "ORIGIN/robots.txt")]
    items.append(FetchItem(2, "ORIGIN/article", "127.0.0.1", PAGE, 1, None))
    _, [plain, page] = fetch(tmp_path / "off", items, near_dup=True)
    assert plain.found is not None and plain.lastmods is None and page.simhash == 0
    assert plain.log is not None and plain.log["sitemap"]["lastmod_malformed"] == 1
