"""Link extraction from HTML: followable links, canonical, meta refresh, meta robots.

One selectolax (lexbor) parse per page, then its elements by tag name, or one CSS query
when the page has references other than anchors; joining and normalization happen in
one batch through :func:`drumbeat.urls.normalize_links`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from time import thread_time
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from selectolax.lexbor import LexborDocumentOptions, LexborHTMLParser

from drumbeat.parse.encoding import UTF8, encode_queries, encode_query, to_utf8, utf8_queries
from drumbeat.urls import (
    DEFAULT_MAX_URL_BYTES,
    URLRejected,
    normalize,
    normalize_links,
    pld_targets,
)

__all__ = [
    "PageLinks",
    "PageReferences",
    "extract_links",
    "find_references",
    "pld_edges",
    "pld_targets",
    "resolve_references",
    "x_robots_tag",
]

# Matched case-insensitively by lexbor itself, so Python sees only candidate elements,
# in document order.
_SELECTOR = (
    "a[href], area[href], frame[src], iframe[src], base[href],"
    ' link[rel~="canonical" i][href], link[rel~="alternate" i][type][href],'
    ' meta[http-equiv="refresh" i][content], meta[name="robots" i][content]'
)
_SRC_TAGS = frozenset(("frame", "iframe"))
_attributes = attrgetter("attributes")
# Without lexbor's DOM events: they rewrite the tree after parsing as a browser shows it
# (a <selectedcontent> gets a copy of the selected option), which gives no link the
# markup does not hold, and skipping them makes the parse a few percent cheaper.
_PARSE_OPTIONS = LexborDocumentOptions.WO_EVENTS.value

# HTML Standard, "shared declarative refresh steps": a time (digits and dots), an
# optional ';' or ',', an optional 'url =' and the URL, possibly quoted.
_REFRESH_RE = re.compile(
    r"[\t\n\f\r ]*[0-9.]+[\t\n\f\r ]*[;,]?[\t\n\f\r ]*(?:url[\t\n\f\r ]*=[\t\n\f\r ]*)?(.*)",
    re.IGNORECASE | re.DOTALL,
)
_ROBOTS_SPLIT_RE = re.compile(r"[\s,]+")
# <link rel=alternate> of these types names the page's feed, whose items are followed
# (drumbeat.parse.feeds); other alternates (translations, print versions) are not links.
_FEED_LINK_TYPES = frozenset({"application/rss+xml", "application/atom+xml"})
# X-Robots-Tag directives that take a value after a colon; any other name before a
# colon is a user agent's, and the directives after it apply to that agent only.
_VALUED_DIRECTIVES = frozenset(
    {"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"}
)

DEFAULT_MAX_PARSE_BYTES = 2 << 20
# lexbor builds the whole DOM: up to ~70 bytes of RAM per byte of markup (a page of
# "<a>"), so a longer body is parsed as segments of at most max_parse_bytes, one DOM
# at a time, each cut before a tag. The parse stops early, and says why (``cut``),
# once the page has _REFS_PER_LINK times max_links distinct references (beyond those,
# the links cap is all but sure to be reached) or has taken max_parse_s of CPU time.
DEFAULT_MAX_PARSE_S = 1.0
_REFS_PER_LINK = 4
#
# It also has no nesting limit (browsers stop at a depth of about 512): each start tag
# of these elements scans the stack of open elements ("close a p element in button
# scope"), so N unclosed ones cost O(N^2): 64 KiB of "<div>" takes seconds, 1 MiB
# hours. On a page with many start tags they are renamed to x-<name> before parsing;
# they hold no links, and without the special tag names the stack is never scanned.
_QUADRATIC_TAGS = (
    "address",
    "article",
    "aside",
    "blockquote",
    "center",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "li",
    "listing",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "pre",
    "rb",
    "rp",
    "rt",
    "rtc",
    "search",
    "section",
    "summary",
    "ul",
)
# What ends a tag's name for the renaming: the tokenizer's tab, LF, FF, space, "/" and
# ">", CR (read as LF), and VT (a name ending in it is unknown to the parser either way).
_TAG_NAME_END = np.zeros(256, dtype=bool)
_TAG_NAME_END[list(b"\t\n\v\f\r /")] = True
_TAG_NAME_END[ord(">")] = True


class _NameGroup(NamedTuple):
    """Names of _QUADRATIC_TAGS of one length whose letters sit at the same places, as
    _rename_quadratic compares them: each name's first 8 bytes (``heads``) and its next
    2 (``tails``) as little-endian words."""

    length: int
    fold: np.uint64  # 0x20 on the letters of the first 8 bytes: "D" | 0x20 is "d"
    care: np.uint64  # the bytes of the first 8 that are the name's
    heads: npt.NDArray[np.uint64]
    tail_fold: np.uint16
    tails: npt.NDArray[np.uint16]


def _name_groups() -> list[_NameGroup]:
    """The names of _QUADRATIC_TAGS grouped by length and by which bytes are letters
    (folded to lower case; digits are compared as they are)."""
    groups: dict[bytes, list[bytes]] = {}
    for tag in _QUADRATIC_TAGS:
        name = tag.encode().ljust(10, b"\0")
        fold = bytes(0x20 if c in range(ord("a"), ord("z") + 1) else 0 for c in name)
        groups.setdefault(bytes([len(tag)]) + fold, []).append(name)
    plan = []
    for key, names in groups.items():
        length, fold = key[0], key[1:]
        plan.append(
            _NameGroup(
                length,
                np.uint64(int.from_bytes(fold[:8], "little")),
                np.uint64((1 << 8 * min(length, 8)) - 1),
                np.array([int.from_bytes(n[:8], "little") for n in names], dtype=np.uint64),
                np.uint16(int.from_bytes(fold[8:], "little")),
                np.array([int.from_bytes(n[8:], "little") for n in names], dtype=np.uint16),
            )
        )
    return plan


def _name_starts() -> npt.NDArray[np.bool_]:
    """Which two bytes may start a name of _QUADRATIC_TAGS ("p" and its end included),
    by their little-endian word with 0x20 set in both bytes (most tags' two bytes, such
    as "sp", "td" or "a ", fail it, and _rename_quadratic compares only the others)."""
    starts = np.zeros(1 << 16, dtype=bool)
    for tag in _QUADRATIC_TAGS:
        seconds = [tag.encode()[1]] if len(tag) > 1 else np.flatnonzero(_TAG_NAME_END)
        for second in seconds:
            starts[(ord(tag[0]) | int(second) << 8) | 0x2020] = True
    return starts


_NAME_GROUPS = _name_groups()
_NAME_STARTS = _name_starts()
_RENAMED = np.frombuffer(b"x-", dtype=np.uint8)
# Below this many start tags the worst nesting costs a few tens of milliseconds.
_MAX_START_TAGS_AS_IS = 2048


@dataclass(slots=True)
class PageLinks:
    """What a page says about where to go next.

    ``links``: normalized absolute URLs, unique, in document order (canonical and
    refresh targets included), without ``rel=nofollow`` ones and empty when meta
    robots says nofollow. ``canonical`` / ``refresh``: normalized targets, reported
    even under meta nofollow. ``dropped``: reason -> count, using
    :class:`drumbeat.urls.URLRejected` reasons per distinct raw reference, plus
    ``too_many_links``, and per element ``nofollow`` (rel) and ``meta_nofollow``
    (suppressed by meta robots). ``base``: the effective base URL (the page URL as
    given when neither it nor ``<base href>`` is a valid http(s) URL). ``cut``: None,
    or which limit cut the page's links, the first one in document order:
    ``"max_links"`` (``max_links`` reached, or so many references that the parse
    stopped), ``"parse_time"`` (``max_parse_s`` spent: the rest was not parsed) or
    ``"bytes"`` (set by the fetcher: the body was cut at its size limit). Only the
    references parsed are counted in ``dropped``.
    """

    links: list[str]
    canonical: str | None
    refresh: str | None
    nofollow: bool
    noindex: bool
    dropped: Counter[str]
    base: str
    normalize_s: float = field(
        default=0.0, compare=False
    )  # time spent joining and normalizing the links (for profiling)
    cut: str | None = None


def extract_links(
    body: bytes,
    url: str,
    *,
    max_links: int = 10_000,
    max_url_bytes: int = DEFAULT_MAX_URL_BYTES,
    max_parse_bytes: int = DEFAULT_MAX_PARSE_BYTES,
    max_parse_s: float = DEFAULT_MAX_PARSE_S,
    content_type: str | None = None,
) -> PageLinks:
    """Extract the links of the HTML ``body`` fetched from ``url``.

    Elements: ``a``/``area`` href, ``frame``/``iframe`` src, ``link rel=canonical``,
    ``meta http-equiv=refresh``. The first ``<base href>`` (resolved against ``url``;
    ignored if that fails) is the base for all of them, wherever they stand. The
    encoding is found as a browser finds it (:mod:`drumbeat.parse.encoding`; the
    ``Content-Type`` header value ``content_type`` may name it); undecodable bytes
    become U+FFFD. At most ``max_links`` links are kept. The whole body is parsed, one
    segment of at most ``max_parse_bytes`` at a time, unless the references or the
    time run out first (``cut``). Time is linear in the bytes and memory bounded by
    ``max_parse_bytes``, whatever the markup (see ``_QUADRATIC_TAGS``). Never raises
    on any body.

    The same as :func:`find_references` then :func:`resolve_references`, which a
    caller with many pages runs as two passes (each keeps its code and data in the
    CPU's caches through the pass).
    """
    found = find_references(
        body,
        url,
        content_type=content_type,
        max_links=max_links,
        max_parse_bytes=max_parse_bytes,
        max_parse_s=max_parse_s,
    )
    return resolve_references(found, max_links=max_links, max_url_bytes=max_url_bytes)


@dataclass(slots=True)
class PageReferences:
    """A page's references as written (the HTML pass of :func:`extract_links`)."""

    url: str
    refs: list[str]
    base_ref: str | None
    canonical_ref: str | None
    refresh_ref: str | None
    nofollow: bool
    noindex: bool
    dropped: Counter[str]
    encoding: str = UTF8  # the Python codec the page was read with
    cut: str | None = None  # see PageLinks
    text: str | None = None  # the body's text, when asked for (of its first segment)


def find_references(
    body: bytes,
    url: str,
    *,
    content_type: str | None = None,
    max_links: int = 10_000,
    max_parse_bytes: int = DEFAULT_MAX_PARSE_BYTES,
    max_parse_s: float = DEFAULT_MAX_PARSE_S,
    text: bool = False,
) -> PageReferences:
    """Parse ``body`` and collect its references, unresolved (see :func:`extract_links`).
    ``text``: also keep the text of the body (of its first ``max_parse_bytes``), taken
    from the same parse, in ``text``."""
    body, encoding = to_utf8(body, content_type)
    dropped: Counter[str] = Counter()
    if len(body) <= max_parse_bytes:
        found = _parse_references(body, url, dropped, text)
    else:
        found = _segments_references(
            body, url, dropped, max_parse_bytes, _REFS_PER_LINK * max_links, max_parse_s, text
        )
    found.encoding = encoding
    return found


def _parse_references(
    body: bytes, url: str, dropped: Counter[str], text: bool = False
) -> PageReferences:
    """The references of the UTF-8 markup ``body``, parsed as one document (and its
    body's text, if ``text``)."""
    if len(body) > 3 * _MAX_START_TAGS_AS_IS and _start_tags_at_most(body) > _MAX_START_TAGS_AS_IS:
        body = _rename_quadratic(body)
    tree = LexborHTMLParser(body, options=_PARSE_OPTIONS)
    found = _anchor_references(tree, url, dropped)
    if found is None:
        found = _selected_references(tree, url, dropped)
    if text:
        node = tree.body
        found.text = node.text(separator=" ") if node is not None else ""
    return found


def _segments_references(
    body: bytes,
    url: str,
    dropped: Counter[str],
    max_parse_bytes: int,
    max_refs: int,
    max_parse_s: float,
    text: bool = False,
) -> PageReferences:
    """The references of a ``body`` longer than ``max_parse_bytes``, parsed segment by
    segment; the first ``<base>``, canonical and refresh of any segment count, and
    the parse stops early when the page has ``max_refs`` distinct references or has
    taken ``max_parse_s`` of CPU time (``cut`` says which)."""
    started = thread_time()
    refs: dict[str, None] = {}
    found: PageReferences | None = None
    start = 0
    while start < len(body):
        end = _segment_end(body, start, max_parse_bytes)
        part = _parse_references(body[start:end], url, dropped, text and found is None)
        refs.update(dict.fromkeys(part.refs))
        if found is None:
            found = part
        else:
            found.base_ref = _first(found.base_ref, part.base_ref)
            found.canonical_ref = _first(found.canonical_ref, part.canonical_ref)
            found.refresh_ref = _first(found.refresh_ref, part.refresh_ref)
            found.nofollow = found.nofollow or part.nofollow
            found.noindex = found.noindex or part.noindex
        start = end
        if start < len(body) and len(refs) >= max_refs:
            found.cut = "max_links"
        elif start < len(body) and thread_time() - started >= max_parse_s:
            found.cut = "parse_time"
        if found.cut is not None:
            break
    assert found is not None  # the body is longer than one segment
    found.refs = list(refs)
    return found


def _first(ref: str | None, other: str | None) -> str | None:
    return ref if ref is not None else other


def _segment_end(body: bytes, start: int, size: int) -> int:
    """Where the segment of ``body`` from ``start`` ends: before the last "<a" (an
    anchor, most likely) or else "<" of its second half, so that tags stay whole;
    else at ``size`` bytes, on a UTF-8 character boundary."""
    end = start + size
    if end >= len(body):
        return len(body)
    half = start + size // 2
    cut = body.rfind(b"<a", half, end)
    if cut < 0:
        cut = body.rfind(b"<", half, end)
    if cut < 0:
        cut = end
        while cut > half and body[cut] & 0xC0 == 0x80:  # a continuation byte
            cut -= 1
    return cut


def _anchor_references(
    tree: LexborHTMLParser, url: str, dropped: Counter[str]
) -> PageReferences | None:
    """The page's references if its anchors are all of them, else None.

    That is, when the page has no area, frame or iframe element, no link whose rel
    mentions canonical and no meta whose http-equiv mentions refresh (looser than
    ``_SELECTOR``: a page in doubt goes to :func:`_selected_references`). Then the
    references are the anchors' in document order, and the elements looked up by tag
    name give what the CSS query gives, for fewer instructions: 982 k against 658 k a
    bench page, parse included (cachegrind). The bench web's pages have only anchors; a
    page with a canonical link (common on the real web) still takes the query.
    """
    if tree.tags("area") or tree.tags("frame") or tree.tags("iframe"):
        return None
    refs: list[str] = []
    for attrs in map(_attributes, tree.tags("link")):
        rel = (attrs.get("rel") or "").lower()
        if "canonical" in rel:
            return None
        if "alternate" in rel:
            feed = _feed_href(rel, attrs)
            if feed is not None:
                refs.append(feed)
    nofollow = noindex = False
    for attrs in map(_attributes, tree.tags("meta")):
        if "refresh" in (attrs.get("http-equiv") or "").lower():
            return None
        if "content" in attrs and (attrs.get("name") or "").lower() == "robots":
            page_nofollow, page_noindex = _robots_meta(attrs["content"])
            nofollow, noindex = nofollow or page_nofollow, noindex or page_noindex
    base_ref: str | None = None
    for attrs in map(_attributes, tree.tags("base")):
        base_ref = attrs.get("href")
        if base_ref is not None:
            break
    for attrs in map(_attributes, tree.tags("a")):
        ref = attrs.get("href")
        if ref is not None:
            if _says_nofollow(attrs.get("rel")):
                dropped["nofollow"] += 1
            else:
                refs.append(ref)
    return PageReferences(url, refs, base_ref, None, None, nofollow, noindex, dropped)


def _selected_references(tree: LexborHTMLParser, url: str, dropped: Counter[str]) -> PageReferences:
    """The page's references, whatever elements hold them (one CSS query, in document
    order)."""
    refs: list[str] = []
    base_ref: str | None = None
    canonical_ref: str | None = None
    refresh_ref: str | None = None
    nofollow = noindex = False
    for node in tree.css(_SELECTOR):
        tag = node.tag
        attrs = node.attributes
        if tag == "meta":
            if (attrs.get("http-equiv") or "").lower() == "refresh":
                target = _refresh_target(attrs["content"] or "")
                if target is not None:
                    refresh_ref = target if refresh_ref is None else refresh_ref
                    refs.append(target)
            if (attrs.get("name") or "").lower() == "robots":
                page_nofollow, page_noindex = _robots_meta(attrs["content"])
                nofollow, noindex = nofollow or page_nofollow, noindex or page_noindex
            continue
        ref = attrs.get("src") if tag in _SRC_TAGS else attrs.get("href")
        if ref is None:
            continue
        if tag == "base":
            base_ref = ref if base_ref is None else base_ref
            continue
        if tag == "link":
            rel = (attrs.get("rel") or "").lower()
            if "canonical" not in rel.split():
                feed = _feed_href(rel, attrs)
                if feed is not None:
                    refs.append(feed)
                continue
            canonical_ref = ref if canonical_ref is None else canonical_ref
        if _says_nofollow(attrs.get("rel")):
            dropped["nofollow"] += 1
            continue
        refs.append(ref)
    return PageReferences(
        url, refs, base_ref, canonical_ref, refresh_ref, nofollow, noindex, dropped
    )


def _robots_meta(content: str | None) -> tuple[bool, bool]:
    """(nofollow, noindex) as a meta robots ``content`` says."""
    tokens = _ROBOTS_SPLIT_RE.split((content or "").lower())
    none = "none" in tokens
    return none or "nofollow" in tokens, none or "noindex" in tokens


def _feed_href(rel: str, attrs: dict[str, str | None]) -> str | None:
    """The href of a ``<link>`` (``rel`` lower-cased) that names a feed, else None."""
    if "alternate" not in rel.split():
        return None
    kind = (attrs.get("type") or "").strip().lower()
    return attrs.get("href") if kind in _FEED_LINK_TYPES else None


def x_robots_tag(value: str, robots_agent: str) -> tuple[bool, bool]:
    """(nofollow, noindex) as X-Robots-Tag headers say for ``robots_agent`` (the
    product token, matched case-insensitively). ``value``: the headers' values, one a
    line. As for meta robots, ``none`` is both. A header's directives apply to every
    agent until one names an agent (``drumbeat: nofollow``); those after that name
    apply to that agent only."""
    agent = robots_agent.lower()
    nofollow = noindex = False
    for line in value.lower().split("\n"):
        applies = True
        for token in line.split(","):
            name, colon, rest = token.partition(":")
            name = name.strip()
            if colon and name not in _VALUED_DIRECTIVES:
                applies, token = name == agent, rest
            if applies:
                says_nofollow, says_noindex = _robots_meta(token)
                nofollow, noindex = nofollow or says_nofollow, noindex or says_noindex
    return nofollow, noindex


def _says_nofollow(rel: str | None) -> bool:
    return rel is not None and "nofollow" in rel.lower().split()


def resolve_references(
    found: PageReferences, *, max_links: int = 10_000, max_url_bytes: int = DEFAULT_MAX_URL_BYTES
) -> PageLinks:
    """Join and normalize a page's references (see :func:`extract_links`)."""
    url, refs, dropped = found.url, found.refs, found.dropped
    if not utf8_queries(found.encoding):
        _encode_queries_of(found)
        refs = found.refs
    page: str | None
    try:
        page = normalize(url, max_bytes=max_url_bytes)
    except URLRejected:
        page = None  # absolute references still work; relative ones are "unparsable"
    base = page
    if found.base_ref is not None:
        try:
            base = normalize(found.base_ref, page, max_bytes=max_url_bytes)
        except URLRejected:
            pass  # an invalid <base> is ignored, as browsers do
    normalize_s = 0.0
    if found.nofollow:
        links: list[str] = []
        if refs:
            dropped["meta_nofollow"] += len(refs)
    else:
        started = thread_time()
        links, rejected = normalize_links(base, refs, max_bytes=max_url_bytes, max_links=max_links)
        normalize_s = thread_time() - started
        dropped.update(rejected)
    return PageLinks(
        links=links,
        canonical=_normalize_or_none(found.canonical_ref, base, max_url_bytes),
        refresh=_normalize_or_none(found.refresh_ref, base, max_url_bytes),
        nofollow=found.nofollow,
        noindex=found.noindex,
        dropped=dropped,
        base=url if base is None else base,
        normalize_s=normalize_s,
        cut="max_links" if dropped.get("too_many_links") else found.cut,
    )


def _encode_queries_of(found: PageReferences) -> None:
    """Percent-encode the non-ASCII queries of ``found``'s references in its page's
    encoding (see :func:`drumbeat.parse.encoding.encode_queries`)."""
    codec = found.encoding
    found.refs = encode_queries(found.refs, codec)
    found.base_ref, found.canonical_ref, found.refresh_ref = (
        None if ref is None else encode_query(ref, codec)
        for ref in (found.base_ref, found.canonical_ref, found.refresh_ref)
    )


def _start_tags_at_most(body: bytes) -> int:
    """An upper bound of the start tags in ``body``: its "<" that do not open an end tag.

    A start tag takes at least 3 bytes ("<a>"), hence the caller's length test. numpy
    compares every byte at once. ``bytes.replace`` and ``bytes.count`` stop at each
    "<", and real markup has one every 20 bytes or so: there they cost several times as
    much, and on sparse markup no less (docs/benchmarks.md, "One site")."""
    raw = np.frombuffer(body, dtype=np.uint8)
    opens = raw == ord("<")
    count = int(np.count_nonzero(opens))
    if count <= _MAX_START_TAGS_AS_IS:
        return count  # most pages stop here
    return count - int(np.count_nonzero(opens[:-1] & (raw[1:] == ord("/"))))


def _rename_quadratic(body: bytes) -> bytes:
    """``body`` with each start and end tag of _QUADRATIC_TAGS renamed x-<name> (names
    ASCII case-insensitive, ended as _TAG_NAME_END says). numpy looks at every "<" at
    once: the tags whose first two bytes may start such a name (_NAME_STARTS) have
    their next 10 bytes read as two words and compared with the names of each length.
    The regular expression it replaces (tests/parse/test_links.py keeps it to check
    this against) cost several times the parse itself on pages of that many tags
    (docs/benchmarks.md, "Renaming the nesting tags")."""
    size = len(body)
    # Zeros after the body: a name read past its end matches nothing (0 ends no name).
    raw = np.zeros(size + 16, dtype=np.uint8)
    raw[:size] = np.frombuffer(body, dtype=np.uint8)
    opens = np.flatnonzero(raw[:size] == ord("<"))
    if not len(opens):
        return body
    starts = opens + 1 + (raw[opens + 1] == ord("/"))  # where each tag's name starts
    pairs = np.ndarray((size + 15,), dtype="<u2", buffer=raw, offset=0, strides=(1,))[starts]
    starts = starts[_NAME_STARTS[pairs | 0x2020]]
    # Unaligned views: the 8 bytes from every offset, and the 2 after those.
    heads = np.ndarray((size + 9,), dtype="<u8", buffer=raw, offset=0, strides=(1,))[starts]
    tails = np.ndarray((size + 7,), dtype="<u2", buffer=raw, offset=8, strides=(1,))[starts]
    hits = np.zeros(len(starts), dtype=bool)
    for length, fold, care, names, tail_fold, tail_names in _NAME_GROUPS:
        words = (heads | fold) & care
        if length <= 8:
            same = words == names[0]
            for name in names[1:]:
                same |= words == name
        else:  # a name's head and tail together
            folded = tails | tail_fold
            same = (words == names[0]) & (folded == tail_names[0])
            for name, tail in zip(names[1:], tail_names[1:]):
                same |= (words == name) & (folded == tail)
        same &= _TAG_NAME_END[raw[starts + length]]
        hits |= same
    at = starts[hits]
    if not len(at):
        return body
    renamed = np.insert(raw[:size], np.repeat(at, 2), np.tile(_RENAMED, len(at)))
    return renamed.tobytes()


def _refresh_target(content: str) -> str | None:
    """The URL part of a meta refresh ``content``; None when it names no URL."""
    match = _REFRESH_RE.match(content)
    if match is None:
        return None
    target = match.group(1)
    if target[:1] in ("'", '"'):
        target = target[1:].split(target[0], 1)[0]
    return target or None


def _normalize_or_none(ref: str | None, base: str | None, max_bytes: int) -> str | None:
    if ref is None:
        return None
    try:
        return normalize(ref, base, max_bytes=max_bytes)
    except URLRejected:
        return None


def pld_edges(source_url: str, links: list[str]) -> set[tuple[str, str]]:
    """Unique (source PLD, target PLD) pairs between different PLDs (see :func:`pld_targets`)."""
    source, targets = pld_targets(source_url, links)
    return {(source, target) for target in targets}
