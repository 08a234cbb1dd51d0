"""Sitemaps and feeds: what is read, the protocol's bounds and scope, hostile XML and gzip."""

from __future__ import annotations

import calendar
import gzip
import resource
import time
import zlib

import pytest

from drumbeat.parse.links import extract_links, x_robots_tag
from drumbeat.parse.sitemaps import (
    MAX_URLS,
    parse_lastmod,
    read_text_links,
    read_xml_links,
    sitemap_or_feed_links,
    sitemap_scope,
)

NS = b'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*locs: str, lastmod: str | None = None) -> bytes:
    mod = b"" if lastmod is None else b"<lastmod>" + lastmod.encode() + b"</lastmod>"
    entries = b"".join(b"<url><loc>" + loc.encode() + b"</loc>" + mod + b"</url>" for loc in locs)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset ' + NS + b">" + entries + b"</urlset>"


def test_urlset_locs_and_lastmods() -> None:
    read = read_xml_links(urlset("http://a.test/1", " http://a.test/2 ", lastmod="2024-05-01"))
    assert read.kind == "urlset"
    assert read.refs == ["http://a.test/1", "http://a.test/2"]
    assert read.lastmods == ["2024-05-01", "2024-05-01"]
    assert read.error is None


def test_sitemap_index_and_no_namespace() -> None:
    body = b"<sitemapindex><sitemap><loc>http://a.test/s1.xml</loc></sitemap></sitemapindex>"
    read = read_xml_links(body)
    assert (read.kind, read.refs) == ("sitemapindex", ["http://a.test/s1.xml"])


def test_gzip_sitemap_is_inflated() -> None:
    read = read_xml_links(gzip.compress(urlset("http://a.test/z")))
    assert (read.kind, read.refs, read.error) == ("urlset", ["http://a.test/z"], None)


def test_other_xml_and_html_are_not_read() -> None:
    assert read_xml_links(b"<html><body><a href='/x'>x</a></body></html>").kind is None
    assert read_xml_links(b'<?xml version="1.0"?><svg><a href="/x"/></svg>').kind is None


def test_malformed_keeps_what_came_before_the_fault() -> None:
    read = read_xml_links(urlset("http://a.test/1")[: -len(b"</urlset>")] + b"<url><loc>x</lo")
    assert read.error == "malformed"
    assert read.refs == ["http://a.test/1"]
    assert read_xml_links(b"").error == "malformed"
    assert read_xml_links(b"\x1f\x8bnot gzip at all").error == "malformed"


def test_count_bound() -> None:
    read = read_xml_links(urlset(*(f"http://a.test/{i}" for i in range(30))), max_refs=10)
    assert (len(read.refs), read.error) == (10, "too_many")
    assert MAX_URLS == 50_000


def test_billion_laughs_is_malformed_not_expanded() -> None:
    entities = ['<!ENTITY l0 "lol">'] + [
        f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10)
    ]
    body = (
        '<?xml version="1.0"?><!DOCTYPE urlset [' + "".join(entities) + "]>"
        "<urlset><url><loc>http://a.test/&l9;</loc></url></urlset>"
    ).encode()
    started = time.process_time()
    read = read_xml_links(body)
    assert time.process_time() - started < 2.0  # 10^9 "lol"s were never built
    assert read.refs in ([], ["http://a.test/"])
    assert all("lol" not in ref for ref in read.refs)


def test_external_entities_are_not_fetched_or_read() -> None:
    body = (
        b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">'
        b'<!ENTITY y SYSTEM "http://127.0.0.1:9/evil">]>'
        b"<urlset><url><loc>http://a.test/&x;&y;</loc></url></urlset>"
    )
    read = read_xml_links(body)
    assert all("root" not in ref for ref in read.refs)
    assert read.refs in ([], ["http://a.test/"])


def test_gzip_bomb_stops_at_the_byte_cap() -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    spaces = b" " * (1 << 20)
    bomb = packer.compress(b"<urlset>") + b"".join(packer.compress(spaces) for _ in range(128))
    bomb += packer.flush()
    assert len(bomb) < 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    read = read_xml_links(bomb, max_bytes=4 << 20)
    assert read.error == "too_large"
    assert time.process_time() - started < 5.0
    # RAM: a chunk at a time, never the inflated 128 MiB (ru_maxrss is in KiB).
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10


def test_text_sitemap() -> None:
    read = read_text_links(b"http://a.test/1\n# note\r\nHTTPS://a.test/2\nftp://a.test/3\n")
    assert (read.kind, read.refs) == ("text", ["http://a.test/1", "HTTPS://a.test/2"])


def test_scope_rules() -> None:
    # sitemaps.org: under the sitemap's own directory, same host.
    assert sitemap_scope("http://a.test/catalog/sitemap.xml", None) == ("http://a.test/catalog/",)
    # Named in robots.txt: that robots.txt's origin too (cross-submit).
    assert sitemap_scope("http://b.test/s.xml", "http://a.test/robots.txt") == (
        "http://b.test/",
        "http://a.test/",
    )
    # Found on a page of its own host (an index): that page's directory too.
    assert sitemap_scope("http://a.test/maps/1.xml", "http://a.test/index.xml") == (
        "http://a.test/maps/",
        "http://a.test/",
    )
    assert sitemap_scope("http://a.test/maps/1.xml", "http://c.test/page") == (
        "http://a.test/maps/",
    )


def test_out_of_scope_urls_are_dropped_and_counted() -> None:
    read = read_xml_links(
        urlset("http://a.test/catalog/1", "http://a.test/other", "http://evil.test/catalog/2")
    )
    page = sitemap_or_feed_links(
        read, "http://a.test/catalog/sitemap.xml", None, follow_index=True, max_links=100
    )
    assert page is not None
    assert page.links == ["http://a.test/catalog/1"]
    assert page.dropped["sitemap_out_of_scope"] == 2


def test_index_beyond_depth_is_not_followed() -> None:
    read = read_xml_links(b"<sitemapindex><sitemap><loc>/s1.xml</loc></sitemap></sitemapindex>")
    page = sitemap_or_feed_links(read, "http://a.test/i.xml", None, follow_index=False, max_links=9)
    assert page is not None and page.links == []
    assert page.dropped["sitemap_index_too_deep"] == 1


def test_rss_and_atom_items() -> None:
    rss = (
        b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        b"<link>http://f.test/</link><item><title>1</title><link>http://f.test/1</link></item>"
        b"<item><link>/2</link></item><item><title>no link</title></item></channel></rss>"
    )
    read = read_xml_links(rss)
    assert (read.kind, read.refs) == ("rss", ["http://f.test/1", "/2"])
    page = sitemap_or_feed_links(read, "http://f.test/feed", None, follow_index=True, max_links=9)
    assert page is not None and page.links == ["http://f.test/1", "http://f.test/2"]
    atom = (
        b'<feed xmlns="http://www.w3.org/2005/Atom"><link rel="self" href="/feed"/>'
        b'<entry><link rel="edit" href="/e"/><link rel="alternate" href="/a"/></entry>'
        b'<entry><link href="http://g.test/b"/></entry></feed>'
    )
    assert read_xml_links(atom).refs == ["/a", "http://g.test/b"]
    rdf = (
        b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        b'xmlns="http://purl.org/rss/1.0/"><item><link>http://r.test/1</link></item></rdf:RDF>'
    )
    assert read_xml_links(rdf).refs == ["http://r.test/1"]


def test_feed_links_in_html_are_followed() -> None:
    html = (
        b'<html><head><link rel="alternate" type="application/rss+xml" href="/feed.xml">'
        b'<link rel="alternate" hreflang="fr" href="/fr/"><link rel="stylesheet" href="/s.css">'
        b'</head><body><a href="/a">a</a></body></html>'
    )
    assert extract_links(html, "http://h.test/").links == [
        "http://h.test/feed.xml",
        "http://h.test/a",
    ]
    # The same through the full selector path (a canonical link takes it).
    html = html.replace(b"<head>", b'<head><link rel="canonical" href="/c">')
    links = extract_links(html, "http://h.test/").links
    assert "http://h.test/feed.xml" in links and "http://h.test/fr/" not in links


def test_x_robots_tag() -> None:
    assert x_robots_tag("nofollow", "drumbeat") == (True, False)
    assert x_robots_tag("noindex, nofollow", "drumbeat") == (True, True)
    assert x_robots_tag("none", "drumbeat") == (True, True)
    assert x_robots_tag("Drumbeat: nofollow", "drumbeat") == (True, False)
    assert x_robots_tag("googlebot: nofollow", "drumbeat") == (False, False)
    assert x_robots_tag("googlebot: noindex\ndrumbeat: nofollow", "drumbeat") == (True, False)
    assert x_robots_tag("unavailable_after: 25 Jun 2030 15:00:00 PST", "drumbeat") == (
        False,
        False,
    )
    assert x_robots_tag("max-snippet: 20, noindex", "drumbeat") == (False, True)


DAY = calendar.timegm((2024, 5, 1, 0, 0, 0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01", DAY),
        (" 2024-05-01\n", DAY),
        ("2024", calendar.timegm((2024, 1, 1, 0, 0, 0))),
        ("2024-05", calendar.timegm((2024, 5, 1, 0, 0, 0))),
        ("2024-05-01T10:30Z", DAY + 10 * 3600 + 1800),
        ("2024-05-01T10:30:15+00:00", DAY + 10 * 3600 + 1815),
        ("2024-05-01T10:30:15.25Z", DAY + 10 * 3600 + 1815),
        ("2024-05-01T12:30:15+02:00", DAY + 10 * 3600 + 1815),
        ("2024-05-01T05:30:15-05:00", DAY + 10 * 3600 + 1815),
        ("2024-05-01T10:30:15", DAY + 10 * 3600 + 1815),  # no zone: read as UTC
        ("2024-02-29", calendar.timegm((2024, 2, 29, 0, 0, 0))),
    ],
)
def test_lastmod_w3c_datetime_forms(text: str, expected: int) -> None:
    assert parse_lastmod(text) == float(expected)


@pytest.mark.parametrize(
    "text",
    ["", "yesterday", "2024-13-01", "2023-02-29", "2024-05-32", "2024-05-01T25:00Z",
     "2024-05-01T10:61Z", "2024-05-01T10:30+24:00", "01/05/2024", "2024-05-01 10:30Z",
     "1969-12-31", "2024-05-01T10Z", "\u0662\u0660\u0662\u0664", "9" * 64],
)  # fmt: skip
def test_malformed_lastmod_is_none_never_an_error(text: str) -> None:
    assert parse_lastmod(text) is None


def test_sitemap_lastmods_align_with_its_links_and_malformed_ones_are_counted() -> None:
    def entry(loc: str, mod: str | None) -> bytes:
        m = b"" if mod is None else b"<lastmod>" + mod.encode() + b"</lastmod>"
        return b"<url><loc>" + loc.encode() + b"</loc>" + m + b"</url>"

    body = b"<urlset " + NS + b">" + b"".join([
        entry("http://a.test/x/1", "2024-05-01"),
        entry("http://a.test/x/2", None),
        entry("http://b.test/out", "2024-05-01"),  # out of scope: dropped with its date
        entry("http://a.test/x/3", "not a date"),
        entry("HTTP://A.test/x/%7e4", "2024-05-01T10:30Z"),  # normalized to /x/~4
        entry("http://a.test/x/1", "2024-05-02"),  # listed twice: the newest date
    ]) + b"</urlset>"  # fmt: skip
    read = read_xml_links(body)
    url = "http://a.test/x/sitemap.xml"
    page = sitemap_or_feed_links(read, url, None, follow_index=True, max_links=100, dated=True)
    assert page is not None
    assert page.links == ["http://a.test/x/1", "http://a.test/x/2", "http://a.test/x/3",
                          "http://a.test/x/~4"]  # fmt: skip
    assert page.lastmods == [DAY + 86400, 0.0, 0.0, DAY + 10 * 3600 + 1800]
    assert page.summary["lastmod"] == 5 and page.summary["lastmod_malformed"] == 1
    # Without ``dated`` (no revisits) nothing is normalized again; the count stays.
    plain = sitemap_or_feed_links(read, url, None, follow_index=True, max_links=100)
    assert plain is not None and plain.lastmods == []
    assert plain.summary["lastmod_malformed"] == 1
