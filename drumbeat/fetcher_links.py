"""A fetcher's link extraction: a fetched body turned into the links it gives, packed.

:class:`LinkExtractor` reads each fetched item in two passes that drumbeat.fetcher's
Fetcher runs over a whole batch (one library's code and data stay in the CPU's caches):
:meth:`LinkExtractor.references` finds an HTML page's references (and puts robots.txt's
sitemaps, a redirect's target or a sitemap's or feed's links straight into the result),
:meth:`LinkExtractor.links` resolves and normalizes them. Links travel packed for
URL-seen and PLDindegree (:func:`pack_found`, :func:`pack_edges`): the fetchers, one
process per core, spend that CPU instead of the manager.
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter, defaultdict
from time import thread_time

from drumbeat import urls
from drumbeat.fetch.response import FetchResponse
from drumbeat.focus import FocusError, FocusFunction, clamp_score, load_focus, page_text
from drumbeat.frontier.pldgraph import edge_keys
from drumbeat.frontier.robots import robots_sitemaps
from drumbeat.frontier.urlseen import payload_tail
from drumbeat.parse.links import (
    PageReferences,
    find_references,
    pld_targets,
    resolve_references,
    x_robots_tag,
)
from drumbeat.parse.sitemaps import (
    SITEMAP_KINDS,
    XmlLinks,
    might_be_xml_links,
    named_in_robots,
    read_text_links,
    read_xml_links,
    sitemap_or_feed_links,
)
from drumbeat.queue.base import ROBOTS, FetchItem, FoundEdges, FoundURLs, ItemResult
from drumbeat.queue.partition import Splitter
from drumbeat.settings import Settings

# The fetcher's logger: parse and focus failures are the fetcher's to report.
log = logging.getLogger("drumbeat.fetcher")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Sitemap URLs taken from one robots.txt at most (each is a fetch of the host's).
MAX_ROBOTS_SITEMAPS = 1000


class LinkExtractor:
    """A fetcher's reading of fetched bodies for links, one item at a time, in two
    passes (:meth:`references`, then :meth:`links`). Content that breaks a parser costs
    its item a ``parse_error``, never the crawl. Its CPU time is counted in
    ``stage_s``: "focus" (a focused crawl's scoring), "normalize" (resolving links) and
    "pack" (the PLDs they point to, and packing both, in a cluster grouped by owner: what
    a second partition costs a fetcher shows there) apart from the "parse" stage they
    run in; a focus function that raises counts a ``focus_error`` in ``errors``."""

    def __init__(
        self,
        settings: Settings,
        stage_s: defaultdict[str, float],
        errors: Counter[str],
        *,
        text: bool = False,
        partitions: int = 1,
    ) -> None:
        """``text``: keep each HTML page's text in its references (near-duplicate
        detection fingerprints it). ``partitions``: the crawl's managers (a cluster's);
        with more than one, a page's links are packed apart for each owner
        (ItemResult.by_partition)."""
        self.settings = settings
        self.stage_s = stage_s
        self.errors = errors
        self._near_dup = text
        self._splitter = Splitter(partitions) if partitions > 1 else None
        # The crawl's focus function (--focus), imported once; None: pages are not scored.
        self._focus: FocusFunction | None = None
        if settings.focus is not None:
            try:
                self._focus = load_focus(settings.focus)
            except FocusError as e:  # a cluster's fetcher machine may lack the module
                log.error("%s; this fetcher scores no page", e)

    def references(
        self, item: FetchItem, result: ItemResult, resp: FetchResponse
    ) -> PageReferences | None:
        """The first pass: an HTML page's references, to be resolved by :meth:`links`.
        Any other item gives None, and what it gives goes into ``result`` now:
        robots.txt's text and sitemaps, a redirect's target, a sitemap's or a feed's
        links. None and a ``parse_error`` too when reading it raised."""
        try:
            return self._references(item, result, resp)
        except Exception as e:  # hostile content must never stop the crawl
            _parse_failed(item, result, e)
            return None

    def links(self, item: FetchItem, result: ItemResult, found: PageReferences) -> None:
        """The second pass: a page's references (from :meth:`references`) resolved into
        links, packed for URL-seen and PLDindegree, into ``result`` (or a
        ``parse_error``)."""
        try:
            self._links(item, result, found)
        except Exception as e:  # hostile content must never stop the crawl
            _parse_failed(item, result, e)

    def _references(
        self, item: FetchItem, result: ItemResult, resp: FetchResponse
    ) -> PageReferences | None:
        """An HTML page's references, to be resolved by _links. Puts robots.txt's text or
        a redirect's target into ``result`` instead."""
        if item.kind == ROBOTS:
            result.robots_text = _robots_text(resp, self.settings.robots_max_bytes)
            if self.settings.sitemaps != "off":
                self._robots_sitemaps(item, result, resp)
            return None
        status = resp.status
        if status is None:
            return None
        if status in REDIRECTS and resp.location:
            reason = self._follow(item, resp.location, result)
            if reason is not None:
                assert result.log is not None
                result.log["location_dropped"] = reason
            return None
        if not 200 <= status < 300 or resp.decoded is None:
            return None
        if not _is_html(resp.content_type, resp.decoded):
            # Sitemaps and feeds give links; anything else is archived, not parsed.
            self._xml_links(item, result, resp, resp.decoded)
            return None
        found = find_references(
            resp.decoded,
            item.url,
            content_type=_header(resp.headers, "content-type"),
            max_links=self.settings.max_links_per_page,
            text=self._near_dup,
        )
        if found.cut is None and (resp.truncated == "length" or resp.decoded_truncated):
            found.cut = "bytes"  # the body's rest, and its links, were never received
        if resp.x_robots_tag is not None:
            nofollow, noindex = self._x_robots(resp.x_robots_tag, result)
            found.nofollow, found.noindex = found.nofollow or nofollow, found.noindex or noindex
        if self._focus is not None:
            self._score(self._focus, item, result, resp.decoded)
        return found

    def _score(
        self, focus: FocusFunction, item: FetchItem, result: ItemResult, html: bytes
    ) -> None:
        """The page's focus score into ``result`` (and its log line); a function that
        raises scores 0 and counts a ``focus_error`` (it must not stop the crawl)."""
        started = thread_time()
        try:
            score = clamp_score(focus(page_text(html), item.url))
        except Exception as e:
            log.warning("focus function failed on %s: %r", item.url, e)
            self.errors["focus_error"] += 1
            score = 0.0
        result.focus = score
        if result.log is not None:
            result.log["focus"] = round(score, 4)
        spent = thread_time() - started
        self.stage_s["focus"] += spent
        self.stage_s["parse"] -= spent  # reported apart, as "normalize" is

    def _x_robots(self, tags: str, result: ItemResult) -> tuple[bool, bool]:
        """(nofollow, noindex) as the page's X-Robots-Tag headers say for
        ``robots_agent`` (honoured as meta robots is); they go to the crawl log."""
        if result.log is not None:
            result.log["x_robots_tag"] = tags
        return x_robots_tag(tags, self.settings.robots_agent)

    def _robots_sitemaps(self, item: FetchItem, result: ItemResult, resp: FetchResponse) -> None:
        """Put the sitemaps a robots.txt names (or, with ``sitemaps = "robots+default"``
        and none named, its origin's /sitemap.xml) into ``result``, to be fetched as pages
        are, through URL-seen. A robots.txt that failed names none (it is fetched again);
        a 4xx one only the default."""
        status = resp.status
        if status is None or resp.error is not None or not 200 <= status < 500:
            return
        named: list[str] = []
        if status < 300 and result.robots_text:
            named = robots_sitemaps(result.robots_text, MAX_ROBOTS_SITEMAPS)
        if not named and self.settings.sitemaps == "robots+default":
            named = ["/sitemap.xml"]
        if not named:
            return
        links, dropped = urls.normalize_links(
            item.url, named, max_bytes=self.settings.max_url_bytes, max_links=MAX_ROBOTS_SITEMAPS
        )
        if links:
            result.found = pack_found(links, item.depth + 1, item.url)
        result.dropped = dict(dropped)
        if result.log is not None:
            result.log["sitemaps"] = len(links)

    def _xml_links(
        self, item: FetchItem, result: ItemResult, resp: FetchResponse, body: bytes
    ) -> None:
        """Put a sitemap's or a feed's links into ``result`` (drumbeat.parse.sitemaps);
        nothing for any other body. A sitemap named in robots.txt may be a text file."""
        s = self.settings
        read: XmlLinks
        named = named_in_robots(item.via)
        if might_be_xml_links(resp.content_type, body):
            read = read_xml_links(body, max_refs=s.sitemap_max_urls, max_bytes=s.sitemap_max_bytes)
        elif named and resp.content_type == "text/plain":
            read = read_text_links(body, max_refs=s.sitemap_max_urls, max_bytes=s.sitemap_max_bytes)
        else:
            return
        if read.kind is None:
            if named and read.error is not None:  # a named sitemap that is no XML at all
                result.dropped = {f"sitemap_{read.error}": 1}
            return
        page = sitemap_or_feed_links(
            read,
            item.url,
            item.via,
            follow_index=item.depth <= s.sitemap_index_max_depth,
            max_links=s.sitemap_max_urls if read.kind in SITEMAP_KINDS else s.max_links_per_page,
            max_url_bytes=s.max_url_bytes,
            dated=s.revisit,
        )
        if page is None:
            return
        links = page.links
        if resp.x_robots_tag is not None and self._x_robots(resp.x_robots_tag, result)[0]:
            if links:
                page.dropped["meta_nofollow"] += len(links)
            links = []
        if result.log is not None:
            result.log["sitemap" if page.kind in SITEMAP_KINDS else "feed"] = page.summary
        result.dropped = dict(page.dropped)
        if links:
            result.found = pack_found(links, item.depth + 1, item.url)
            result.pld_edges = pack_edges(*pld_targets(item.url, links))
            if any(page.lastmods):  # with revisits: the URLs' dates, by fingerprint
                fps = memoryview(result.found.fingerprints).cast("Q")
                dated = [i for i, t in enumerate(page.lastmods) if t > 0]
                result.lastmods = (
                    array("Q", [fps[i] for i in dated]).tobytes()
                    + array("d", [page.lastmods[i] for i in dated]).tobytes()
                )

    def _follow(self, item: FetchItem, location: str, result: ItemResult) -> str | None:
        """Put a redirect's target into ``result``; returns why it is not followed, if
        it is not. Redirects are followed through URL-seen, which ends loops; the hop
        count travels with the target and ends long chains."""
        try:
            target = urls.normalize(location, item.url, max_bytes=self.settings.max_url_bytes)
        except urls.URLRejected as e:
            result.dropped[e.reason] = 1
            return e.reason
        if item.hops >= self.settings.max_redirects:
            result.dropped["too_many_redirects"] = 1
            return "too_many_redirects"
        result.found = pack_found([target], item.depth + 1, item.url, item.hops + 1)
        return None

    def _links(self, item: FetchItem, result: ItemResult, found: PageReferences) -> None:
        """Put a page's links, packed for URL-seen and PLDindegree, into ``result``."""
        page = resolve_references(
            found,
            max_links=self.settings.max_links_per_page,
            max_url_bytes=self.settings.max_url_bytes,
        )
        result.dropped = dict(page.dropped)
        packing = thread_time()
        if self._splitter is not None:
            result.by_partition = _packed_by_partition(self._splitter, item, page.links)
        else:
            source, targets = pld_targets(item.url, page.links)
            if page.links:
                result.found = pack_found(page.links, item.depth + 1, item.url)
            result.pld_edges = pack_edges(source, targets)
        packed = thread_time() - packing
        if page.cut is not None and result.log is not None:
            result.log["links_cut"] = page.cut
        if page.noindex and result.log is not None:
            result.log["noindex"] = True  # meta robots or X-Robots-Tag
        self.stage_s["normalize"] += page.normalize_s
        self.stage_s["pack"] += packed
        self.stage_s["parse"] -= page.normalize_s + packed


def _parse_failed(item: FetchItem, result: ItemResult, e: Exception) -> None:
    """Count a ``parse_error`` for ``item``, whose content broke a parser (``e``)."""
    log.warning("parse failed for %s: %r", item.url, e)
    result.dropped["parse_error"] = result.dropped.get("parse_error", 0) + 1


def _packed_by_partition(
    splitter: Splitter, item: FetchItem, links: list[str]
) -> dict[int, tuple[FoundURLs | None, FoundEdges | None]]:
    """A page's ``links`` and its edges to the other PLDs they point to, packed for each
    partition that owns some of them."""
    source, groups, plds = splitter.split_page(item.url, links)
    out: dict[int, tuple[FoundURLs | None, FoundEdges | None]] = {}
    for part, group in groups.items():
        out[part] = (pack_found(group, item.depth + 1, item.url), None)
    for part, pld_group in plds.items():
        out[part] = (out.get(part, (None, None))[0], pack_edges(source, pld_group))
    return out


def pack_found(links: list[str], depth: int, via: str, hops: int = 0) -> FoundURLs:
    """Fingerprints and URL-seen payloads of ``links`` (found at ``depth`` on ``via``,
    ``hops`` redirects from a link when ``via`` redirected to them).

    The payloads are frontier.urlseen's; doing it here spends fetcher CPU, of which there
    is one process per core, instead of the manager's.
    """
    blob, lengths = _packed(links, payload_tail(depth, via, hops))
    return FoundURLs(urls.fingerprints(links).tobytes(), blob, lengths.tobytes())


def pack_edges(source: str, targets: list[str]) -> FoundEdges | None:
    """The edges from PLD ``source`` to each of ``targets`` (distinct PLDs), packed for
    PLDindegree (keys and target names); None when there are none."""
    if not targets:
        return None
    blob, lengths = _packed(targets)
    return FoundEdges(source, edge_keys(source, targets).tobytes(), blob, lengths.tobytes())


def _packed(items: list[str], tail: str = "") -> tuple[bytes, array[int]]:
    """Each of ``items`` followed by ``tail``, UTF-8, back to back, and their lengths.

    One join and one encode for the whole list, lengths from the characters: normalized
    URLs and PLDs (and so a tail naming a via URL) are ASCII. Checked, with the item by
    item path kept for anything else."""
    blob = (tail.join(items) + tail).encode() if items else b""
    lengths = array("I", map(len(tail).__add__, map(len, items)))
    if len(blob) != sum(lengths):
        encoded = [(item + tail).encode() for item in items]
        blob, lengths = b"".join(encoded), array("I", map(len, encoded))
    return blob, lengths


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    """The value of the first header ``name`` (lower-case) in ``headers``, or None."""
    for key, value in headers:
        if len(key) == len(name) and key.lower() == name:
            return value
    return None


def _is_html(content_type: str | None, body: bytes) -> bool:
    if content_type is not None:
        return content_type in HTML_TYPES
    head = body[:1024].lstrip().lower()  # no Content-Type: sniff like a browser would
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def _robots_text(resp: FetchResponse, max_bytes: int) -> str | None:
    if resp.status is None or resp.decoded is None:
        return None
    return resp.decoded[:max_bytes].decode("utf-8", errors="replace")
