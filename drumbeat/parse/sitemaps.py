"""Sitemaps (sitemaps.org) and RSS/Atom feeds: their links, read safely and within bounds.

One streaming reader serves both (:func:`read_xml_links`): lxml's pull parser, fed 64 KiB
at a time, with entities left unresolved, no DTD loaded, no network and no huge-tree
mode, so that neither external entities nor entity expansion ("billion laughs": libxml2
stops it and the document counts as malformed) can reach past the bytes received. A
gzip body (a ``.xml.gz`` sitemap, recognised by its magic bytes) is inflated a chunk at
a time, never past ``max_bytes`` (50 MB uncompressed, the protocol's cap), so a gzip
bomb costs at most that much work and one chunk of RAM. The root element says what the
document is: ``urlset`` and ``sitemapindex`` (in any namespace; the protocol's is
sitemaps.org 0.9) or a feed (:mod:`drumbeat.parse.feeds`); the reader stops at once at
any other root. Each record (``url``, ``sitemap``, ``item``, ``entry``) is dropped from
the tree once read, so RAM holds the links, not the document. At most ``max_refs``
records are read (50,000, the protocol's cap); a malformed document keeps the links
read before the fault and says so (``error``).

A text sitemap (one URL a line, UTF-8) is read by :func:`read_text_links`.

:func:`sitemap_or_feed_links` turns either into the fetcher's normalized links, with
the protocol's scope rule for sitemaps (:func:`sitemap_scope`).
"""

from __future__ import annotations

import calendar
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from lxml import etree

from drumbeat.parse.feeds import FEED_TYPES, feed_records, item_link
from drumbeat.urls import DEFAULT_MAX_URL_BYTES, URLRejected, host_of, normalize, normalize_links

URLSET: Final = "urlset"
SITEMAPINDEX: Final = "sitemapindex"
TEXT: Final = "text"  # a text sitemap: one URL a line
SITEMAP_KINDS: Final = frozenset({URLSET, SITEMAPINDEX, TEXT})

MAX_URLS: Final = 50_000  # sitemaps.org: per file
MAX_BYTES: Final = 50 * 1024 * 1024  # sitemaps.org: per file, uncompressed

# Media types whose body may be a sitemap or a feed (the root element decides). gzip
# sitemaps are served under any of these or as a gzip file; the magic bytes decide.
XML_TYPES: Final = frozenset({"application/xml", "text/xml"}) | FEED_TYPES
GZIP_TYPES: Final = frozenset(
    {"application/gzip", "application/x-gzip", "application/octet-stream"}
)
_GZIP_MAGIC: Final = b"\x1f\x8b"
_CHUNK: Final = 64 * 1024


@dataclass(slots=True)
class XmlLinks:
    """What :func:`read_xml_links` read: the document's ``kind`` (``urlset``,
    ``sitemapindex``, ``rss``, ``atom``; None for any other XML), its records' links as
    written (``refs``) and, for a sitemap, each one's ``<lastmod>`` (``lastmods``, None
    where absent). ``error``: None, ``malformed`` (bad XML, bad gzip, entities that
    expand too far), ``too_large`` (more than ``max_bytes`` uncompressed: the rest was
    not read) or ``too_many`` (more than ``max_refs`` records: the rest was not read)."""

    kind: str | None = None
    refs: list[str] = field(default_factory=list)
    lastmods: list[str | None] = field(default_factory=list)
    error: str | None = None


def might_be_xml_links(content_type: str | None, body: bytes) -> bool:
    """Whether a non-HTML body may be a sitemap or a feed and is worth reading: its
    media type says XML, a feed or gzip, or, without one, the body starts like XML or
    gzip. Anything else is archived and not parsed."""
    if content_type is not None:
        if content_type in XML_TYPES:
            return True
        return content_type in GZIP_TYPES and body[:2] == _GZIP_MAGIC
    return body[:2] == _GZIP_MAGIC or body[:512].lstrip().startswith(b"<?xml")


def read_xml_links(
    body: bytes, *, max_refs: int = MAX_URLS, max_bytes: int = MAX_BYTES
) -> XmlLinks:
    """The links of a sitemap or a feed (gzip or not); see the module docstring. Never
    raises for any ``body``."""
    found = XmlLinks()
    parser = etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    reader = _Records(found, max_refs)
    chunks = _Inflated(body, max_bytes)
    try:
        for chunk in chunks:
            parser.feed(chunk)
            if reader.take(parser.read_events()):
                return found
        if chunks.too_large:
            found.error = "too_large"
            return found
        parser.close()
        reader.take(parser.read_events())
    except (etree.XMLSyntaxError, zlib.error):
        found.error = "malformed"
    return found


class _Records:
    """Reads the records of a document from its parser's events (see read_xml_links)."""

    def __init__(self, found: XmlLinks, max_refs: int) -> None:
        self.found = found
        self.max_refs = max_refs
        self.started = False
        self.record = self.link = self.lastmod = ""

    def take(self, events: Iterator[tuple[str, etree._Element]]) -> bool:
        """Read ``events``; True when the reading is over (not a sitemap or a feed, or
        ``max_refs`` reached)."""
        found = self.found
        for event, element in events:
            if not self.started:
                self.started = True  # the first event is the root element's start
                if not self._root(element.tag):
                    return True
                continue
            if event != "end" or element.tag != self.record:
                continue
            if len(found.refs) >= self.max_refs:
                found.error = "too_many"
                return True
            self._read(element)
            # Drop what was read: RAM holds the links, not the document.
            element.clear()
            parent = element.getparent()
            if parent is not None:
                while element.getprevious() is not None:
                    del parent[0]
        return False

    def _root(self, tag: object) -> bool:
        """Set up for the root element ``tag``; False when it is no sitemap or feed."""
        if not isinstance(tag, str):
            return False
        ns = tag[: tag.index("}") + 1] if tag.startswith("{") else ""
        name = tag[len(ns) :]
        if name in (URLSET, SITEMAPINDEX):
            self.found.kind = name
            self.record = ns + ("url" if name == URLSET else "sitemap")
            self.link, self.lastmod = ns + "loc", ns + "lastmod"
            return True
        feed = feed_records(tag)
        if feed is None:
            return False
        self.found.kind, self.record, self.link = feed
        return True

    def _read(self, record: etree._Element) -> None:
        found = self.found
        if found.kind not in (URLSET, SITEMAPINDEX):
            assert found.kind is not None
            ref = item_link(found.kind, record, self.link)
            if ref:
                found.refs.append(ref)
            return
        loc: str | None = None
        lastmod: str | None = None
        for child in record:
            if child.tag == self.link and loc is None:
                loc = (child.text or "").strip() or None
            elif child.tag == self.lastmod and lastmod is None:
                lastmod = (child.text or "").strip()[:64] or None
        if loc is not None:
            found.refs.append(loc)
            found.lastmods.append(lastmod)


class _Inflated:
    """``body`` in chunks, inflated when it is gzip, at most ``max_bytes`` of them in all
    (``too_large`` says when more were left). A corrupt gzip stream raises zlib.error."""

    def __init__(self, body: bytes, max_bytes: int) -> None:
        self.body = body
        self.max_bytes = max_bytes
        self.too_large = False

    def __iter__(self) -> Iterator[bytes]:
        body, cap = self.body, self.max_bytes
        if body[:2] != _GZIP_MAGIC:
            self.too_large = len(body) > cap
            view = memoryview(body)[:cap]
            for start in range(0, len(view), _CHUNK):
                yield bytes(view[start : start + _CHUNK])
            return
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing only
        tail, total = body, 0
        while not inflate.eof:
            if total >= cap:
                # More may follow: a bomb, or a file over the protocol's size.
                self.too_large = bool(tail) or bool(inflate.decompress(b"", 1))
                return
            chunk = inflate.decompress(tail, min(_CHUNK, cap - total))
            tail = inflate.unconsumed_tail
            if not chunk:
                if not tail:
                    return  # input ended (a truncated body): the parser says it is malformed
                continue
            total += len(chunk)
            yield chunk


def read_text_links(
    body: bytes, *, max_refs: int = MAX_URLS, max_bytes: int = MAX_BYTES
) -> XmlLinks:
    """A text sitemap's URLs (one per line, UTF-8; gzip or not): its lines that start
    with ``http://`` or ``https://``, at most ``max_refs`` of them, from at most
    ``max_bytes`` of text. Never raises for any ``body``."""
    found = XmlLinks(TEXT)
    chunks = _Inflated(body, max_bytes)
    try:
        text = b"".join(chunks)
    except zlib.error:
        found.error = "malformed"
        return found
    for line in text.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if line[:8].lower().startswith(("http://", "https://")):
            if len(found.refs) >= max_refs:
                found.error = "too_many"
                break
            found.refs.append(line)
            found.lastmods.append(None)
    if chunks.too_large and found.error is None:
        found.error = "too_large"
    return found


# W3C Datetime (the sitemaps.org lastmod format): YYYY, YYYY-MM, YYYY-MM-DD, or a date
# with hh:mm[:ss[.s+]] and a zone (Z or +hh:mm). A time without a zone, common in real
# sitemaps though not W3C, is read as UTC.
_W3C_DATETIME = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})"
    r"(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?)?)?",
    re.ASCII,
)


def parse_lastmod(text: str) -> float | None:
    """A sitemap ``<lastmod>`` (W3C Datetime) in seconds since the epoch, UTC; None for
    anything else (malformed, out of range, before 1970). A date alone is its midnight,
    UTC, the earliest instant it names. Never raises."""
    m = _W3C_DATETIME.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, second, zone = m.groups()
    fields = [int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0)]
    fields.append(int(second or 0))
    mo, d, h, mi, sec = fields[1:]
    if not (1 <= mo <= 12 and 1 <= d <= calendar.monthrange(fields[0], mo)[1]):
        return None
    if h > 23 or mi > 59 or sec > 60:  # 60: a leap second
        return None
    t = calendar.timegm((fields[0], mo, d, h, mi, sec, 0, 0, 0))
    if zone and zone != "Z":
        zh, zm = int(zone[1:3]), int(zone[4:6])
        if zh > 23 or zm > 59:
            return None
        t -= (1 if zone[0] == "+" else -1) * (zh * 3600 + zm * 60)
    return float(t) if t > 0 else None


def sitemap_scope(sitemap_url: str, via: str | None) -> tuple[str, ...]:
    """The URL prefixes a sitemap at ``sitemap_url`` (normalized), found on ``via``, may
    list.

    sitemaps.org: a sitemap's URLs are on its own host and protocol, under its own
    directory. A sitemap named in a robots.txt (``via``) may also list the URLs of that
    robots.txt's origin (the protocol's cross-submit). One step further than the
    protocol: a sitemap found on a page of its own host (an index, or what redirected
    to it) may also list the URLs under that page's directory, so that an index at the
    site's root may keep its sitemaps in a folder of their own, as many sites do.
    """
    prefixes = [_directory(sitemap_url)]
    if via is not None:
        if named_in_robots(via):
            prefixes.append(via[: -len("robots.txt")])
        elif _same_host(via, sitemap_url):
            prefixes.append(_directory(via))
    return tuple(prefixes)


def named_in_robots(via: str | None) -> bool:
    """Whether a URL found on ``via`` was named by a robots.txt (``via`` is one)."""
    return via is not None and via.endswith("/robots.txt") and via.count("/") == 3


def _directory(url: str) -> str:
    path = url.split("#", 1)[0].split("?", 1)[0]
    return path[: path.rindex("/") + 1]


def _same_host(url: str, other: str) -> bool:
    try:
        return host_of(url) == host_of(other)
    except (ValueError, TypeError, IndexError):  # not a normalized URL: no extra scope
        return False


@dataclass(slots=True)
class XmlPage:
    """A sitemap's or a feed's links for the fetcher: ``kind`` (see :class:`XmlLinks`),
    the normalized links to follow, the links dropped by reason and a summary for the
    crawl log (the file's entries, how many had a ``lastmod``, how many of those were
    malformed, and the newest one). ``lastmods``: with ``dated``, each link's
    :func:`parse_lastmod` (0.0: none or malformed), aligned with ``links``."""

    kind: str
    links: list[str]
    dropped: Counter[str]
    summary: dict[str, object]
    lastmods: list[float] = field(default_factory=list)


def sitemap_or_feed_links(
    read: XmlLinks,
    url: str,
    via: str | None,
    *,
    follow_index: bool,
    max_links: int,
    max_url_bytes: int = DEFAULT_MAX_URL_BYTES,
    dated: bool = False,
) -> XmlPage | None:
    """The links of what :func:`read_xml_links` or :func:`read_text_links` read from
    ``url`` (found on ``via``); None when it is neither a sitemap nor a feed.

    A feed's item links are all kept (up to ``max_links``). A sitemap's URLs outside
    :func:`sitemap_scope` are dropped (``sitemap_out_of_scope``); an index's sitemaps
    too when ``follow_index`` is false (``sitemap_index_too_deep``: nesting is bounded).
    A malformed or oversized file counts ``sitemap_<error>`` (``feed_<error>``) once.
    ``dated``: give each kept URL its ``lastmod`` (:attr:`XmlPage.lastmods`).
    """
    kind = read.kind
    if kind is None:
        return None
    links, dropped = normalize_links(url, read.refs, max_bytes=max_url_bytes, max_links=max_links)
    is_sitemap = kind in SITEMAP_KINDS
    summary: dict[str, object] = {"kind": kind, "entries": len(read.refs)}
    if read.error is not None:
        summary["error"] = read.error
        dropped[f"{'sitemap' if is_sitemap else 'feed'}_{read.error}"] += 1
    if is_sitemap:
        prefixes = sitemap_scope(url, via)
        kept = [link for link in links if link.startswith(prefixes)]
        if len(kept) < len(links):
            dropped["sitemap_out_of_scope"] += len(links) - len(kept)
        links = kept
        if kind == SITEMAPINDEX and not follow_index and links:
            dropped["sitemap_index_too_deep"] += len(links)
            links = []
        written = [m for m in read.lastmods if m is not None]
        if written:
            summary["lastmod"] = len(written)
            summary["lastmod_newest"] = max(written)
        page = XmlPage(kind, links, dropped, summary)
        if written:
            _lastmods(page, read, url, max_url_bytes, dated)
        return page
    return XmlPage(kind, links, dropped, summary)


def _lastmods(page: XmlPage, read: XmlLinks, url: str, max_url_bytes: int, dated: bool) -> None:
    """Count the malformed ``lastmod`` s of ``read`` in ``page.summary`` (they are
    ignored) and, with ``dated``, set ``page.lastmods``: a URL listed twice gets its
    newest. Each dated reference is normalized again to find its link (normalize_links
    keeps no mapping): only with ``dated``, i.e. when revisits use the dates."""
    times: dict[str, float] = {}
    malformed = 0
    for ref, text in zip(read.refs, read.lastmods):
        if text is None:
            continue
        t = parse_lastmod(text)
        if t is None:
            malformed += 1
        elif dated:
            try:
                link = normalize(ref, url, max_bytes=max_url_bytes)
            except URLRejected:
                continue
            times[link] = max(t, times.get(link, 0.0))
    if malformed:
        page.summary["lastmod_malformed"] = malformed
    if dated:
        page.lastmods = [times.get(link, 0.0) for link in page.links]
