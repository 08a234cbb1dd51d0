"""URL normalization, hashing, host / pay-level domain and crawl scope.

Every URL the crawler keeps is first passed through :func:`normalize`; every other
function here takes such a *normalized* URL and relies on its shape (lower-case
``http``/``https`` scheme, ``://``, ASCII host, a path that starts with ``/``, no
fragment) so that it can work with plain string operations on the hot path.

Drop reasons (``URLRejected.reason``), stable strings the crawler counts by:

================  ==============================================================
``unparsable``    not a URL by the WHATWG parser (or relative with a bad base)
``scheme``        parses, but the scheme is not ``http`` or ``https``
``too_long``      the normalized URL is longer than ``max_bytes``
``no_host``       ``http(s)`` URL with an empty host (``http://``, ``http://:80/``)
``bad_port``      port 0, above 65535, or not a number
================  ==============================================================

:func:`normalize_links` also counts ``too_many_links`` (see there).
"""

from __future__ import annotations

import re
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache

# ada-url's own cffi binding of its C API. The public ``join_url`` re-encodes the base
# and registers a GC finalizer on every call, a large share of the per-link cost; the
# batch path encodes the base once per page and frees the parse result itself.
# The binding is a compiled cffi module that ada-url ships without type information
# (unused-ignore: setup.py's mypyc build runs with --ignore-missing-imports).
from ada_url._ada_wrapper import ffi as _ffi  # type: ignore[import-not-found, unused-ignore]
from ada_url._ada_wrapper import lib as _ada
from publicsuffixlist import PublicSuffixList
from xxhash import xxh3_64_digest, xxh3_64_intdigest

__all__ = [
    "DEFAULT_MAX_URL_BYTES",
    "URLRejected",
    "fingerprint",
    "fingerprints",
    "host_of",
    "in_scope",
    "normalize",
    "normalize_links",
    "origin_of",
    "pld",
    "pld_targets",
    "robots_url",
    "xxh3_64_array",
]

DEFAULT_MAX_URL_BYTES = 2048

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = "0123456789ABCDEFabcdef"


def _escape_table() -> dict[str, str]:
    """Every ``%XY`` escape -> its normal form (unreserved decoded, else upper-case hex)."""
    table: dict[str, str] = {}
    for hi in _HEX:
        for lo in _HEX:
            char = chr(int(hi + lo, 16))
            table["%" + hi + lo] = char if char in _UNRESERVED else ("%" + hi + lo).upper()
    table["%"] = "%25"
    return table


_ESCAPES = _escape_table()
_ESCAPE_RE = re.compile(r"%(?:[0-9A-Fa-f]{2})?")
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_AUTHORITY_RE = re.compile(r"[/\\]*([^/\\?#]*)")
# WHATWG strips leading/trailing C0 controls and spaces, and removes tabs and newlines
# anywhere; the failure diagnosis mirrors that so it sees what the parser saw.
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = {0x09: None, 0x0A: None, 0x0D: None}


class URLRejected(ValueError):
    """A URL the crawler will not keep; ``reason`` is one of the module's drop reasons."""

    def __init__(self, reason: str, url: str = "") -> None:
        super().__init__(f"{reason}: {url[:200]!r}")
        self.reason = reason


def normalize(url: str, base: str | None = None, *, max_bytes: int = DEFAULT_MAX_URL_BYTES) -> str:
    """Return the canonical absolute form of ``url`` (joined to ``base`` when given).

    WHATWG parsing by ada-url gives: whitespace trimming, lower-case scheme and host,
    IDNA to punycode, canonical IPv4/IPv6, default port removed, dot segments resolved,
    empty path as ``/``. On top of that the fragment is dropped, escapes of unreserved
    characters (``A-Za-z0-9-._~``) are decoded, all other escapes get upper-case hex and
    a stray ``%`` becomes ``%25``. The query is otherwise kept as is. Idempotent:
    ``normalize(normalize(u)) == normalize(u)``. Raises :class:`URLRejected`;
    ``too_long`` applies to the result.
    """
    if base is None and len(url) <= max_bytes and _NORMAL_ABSOLUTE_RE.fullmatch(url):
        # Already normal, as most URLs given alone are (the crawler normalized them when
        # found): one regular-expression test, a third of the parser's cost.
        return url
    return _normalize(url, _encode_base(base), max_bytes)


def _encode_base(base: str | None) -> bytes | None:
    if base is None:
        return None
    try:
        return base.encode()
    except UnicodeEncodeError:
        # Lone surrogates: not a URL. ada fails every parse against an invalid base,
        # b"" included, so each reference is then "unparsable" as with any bad base.
        return b""


def _normalize(url: str, base: bytes | None, max_bytes: int) -> str:
    """:func:`normalize` with the base already UTF-8 encoded."""
    href = _whatwg_href(url, base)
    if href is None:
        raise URLRejected(_diagnose(url, base is not None), url)
    if not href.startswith(("http://", "https://")):
        raise URLRejected("scheme", url)
    cut = href.find("#")
    if cut >= 0:
        href = href[:cut]
    if "%" in href:
        href = _normalize_escapes(href)
    if href.endswith(":0", 0, href.find("/", 8)):
        raise URLRejected("bad_port", url)
    # ada serializes http(s) URLs in ASCII only, so characters are bytes here.
    if len(href) > max_bytes:
        raise URLRejected("too_long", url)
    return href


def _whatwg_href(url: str, base: bytes | None) -> str | None:
    """ada's serialization of ``url`` parsed against ``base``; None if parsing fails."""
    try:
        raw = url.encode()
    except UnicodeEncodeError:  # lone surrogates: not text a URL can hold
        return None
    if base is None:
        parsed = _ada.ada_parse(raw, len(raw))
    else:
        parsed = _ada.ada_parse_with_base(raw, len(raw), base, len(base))
    try:
        if not _ada.ada_is_valid(parsed):
            return None
        href = _ada.ada_get_href(parsed)
        joined: str = _ffi.unpack(href.data, href.length).decode()
        return joined
    finally:
        _ada.ada_free(parsed)


def _normalize_escapes(href: str) -> str:
    """Normalize the percent-escapes of an ada-serialized URL in one pass.

    A stray ``%`` (not followed by two hex digits) becomes ``%25``. Without that, a
    decoded digit could complete a new escape (``%%34%31`` -> ``%41``) and a second
    normalization would change the URL again; with it, every ``%`` left starts an
    escape that is kept, so decoding never creates one.
    """
    return _ESCAPE_RE.sub(_escape_normal_form, href)


def _escape_normal_form(match: re.Match[str]) -> str:
    return _ESCAPES[match.group()]


def _diagnose(url: str, has_base: bool) -> str:
    """Say why the WHATWG parser refused ``url``: the reason for :class:`URLRejected`."""
    text = url.strip(_C0_AND_SPACE).translate(_TAB_NEWLINE)
    scheme = _SCHEME_RE.match(text)
    if scheme is not None:
        if scheme.group(1).lower() not in ("http", "https"):
            return "scheme"
        rest = text[scheme.end() :]
    elif has_base and text[:2].replace("\\", "/") == "//":
        rest = text
    else:
        return "unparsable"
    authority = _AUTHORITY_RE.match(rest)
    hostport = authority.group(1).rpartition("@")[2] if authority else ""
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            return "unparsable"
        host, after = hostport[: close + 1], hostport[close + 1 :]
        port = after[1:] if after.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    if not host:
        return "no_host"
    if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
        return "bad_port"
    return "unparsable"


def normalize_links(
    base: str | None,
    hrefs: Iterable[str],
    *,
    max_bytes: int = DEFAULT_MAX_URL_BYTES,
    max_links: int | None = None,
) -> tuple[list[str], Counter[str]]:
    """Normalize a page's references against ``base`` (None: absolute ones only) in one pass.

    Returns the unique normalized URLs in first-seen order and a counter of drop
    reasons. Raw duplicates are removed before joining (pages repeat links), so each
    distinct raw reference is counted at most once. When ``max_links`` URLs have been
    kept, every further distinct raw reference is counted as ``too_many_links``
    without being parsed.

    The result is :func:`normalize`'s for every reference; plain ones (see
    :func:`_plain_absolute` and :func:`_plain_tail`), most of a page's, are joined
    without the parser.
    """
    kept: dict[str, None] = {}
    dropped: Counter[str] = Counter()
    unique = dict.fromkeys(hrefs)
    limit = len(unique) if max_links is None else max_links
    encoded_base = _encode_base(base)
    origin, directory = _base_parts(base)
    for raw in unique:
        if len(kept) >= limit:
            dropped["too_many_links"] += 1
            continue
        if raw[:4] == "http":
            href = _plain_absolute(raw)
        else:
            # Only a relative-path reference depends on the base's directory.
            tail = _plain_tail(raw, "" if raw[:1] == "/" else directory)
            href = origin + tail if tail is not None and origin else None
        if href is None:
            try:
                kept[_normalize(raw, encoded_base, max_bytes)] = None
            except URLRejected as rejected:
                dropped[rejected.reason] += 1
        elif len(href) <= max_bytes:
            kept[href] = None
        else:
            dropped["too_long"] += 1
    return list(kept), dropped


# What WHATWG parsing leaves as it is, and normalize() too: unreserved characters and
# slashes in a path; those and a few sub-delimiters in a query (no "%", so no escape to
# normalize; none of the characters a special URL's path or query percent-encodes). A
# fragment is dropped whatever it holds, but text with a lone surrogate is no URL.
_PATH = r"[A-Za-z0-9._~/\-]"
_QUERY = r"\?[A-Za-z0-9._~/\-=&+,;:@!$*()?]*"
_FRAGMENT = r"#[^\ud800-\udfff]*"
_PLAIN_REF_RE = re.compile(rf"({_PATH}+)({_QUERY})?(?:{_FRAGMENT})?\Z", re.DOTALL)
# An absolute http(s) URL already in normal form: lower-case scheme, a host of
# lower-case ASCII labels whose last one does not start with a digit (else it would be
# parsed as IPv4), a port without a leading zero.
_PLAIN_ABSOLUTE_RE = re.compile(
    rf"(https?://(?:[a-z0-9-]+\.)*[a-z-][a-z0-9-]*)(:[1-9][0-9]{{0,4}})?(/{_PATH}*)?"
    rf"({_QUERY})?(?:{_FRAGMENT})?\Z",
    re.DOTALL,
)
_DOT_SEGMENT_RE = re.compile(r"(?:\A|/)\.{1,2}(?:/|\Z)")
# An absolute URL that normalize() returns unchanged, a subset of _PLAIN_ABSOLUTE_RE:
# a host as there (no punycode label), a port 1-65535 that is not the scheme's default,
# a path present and without "." or ".." segments, no fragment.
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_SEGMENT = r"/(?!\.\.?(?:/|\?|\Z))[A-Za-z0-9._~\-]*"
_NORMAL_ABSOLUTE_RE = re.compile(
    rf"(?:http://(?![^/]*:80/)|https://(?![^/]*:443/))(?![^/]*xn--)"
    rf"(?:[a-z0-9-]+\.)*[a-z-][a-z0-9-]*(?::{_PORT})?(?:{_SEGMENT})+(?:{_QUERY})?"
)


@lru_cache(maxsize=1 << 14)
def _plain_absolute(raw: str) -> str | None:
    """What an absolute http(s) URL ``raw`` normalizes to, without the parser, when it is
    plain: in normal form but for dot segments, a default port or a fragment. None for
    every other URL.

    Cached apart from :func:`_plain_tail`: links to other sites are mostly new, and
    would push a site's relative references out of a shared cache. A miss on a URL
    already in normal form (most) costs one regular-expression test. Bounded, as
    :func:`_plain_tail` is.
    """
    if _NORMAL_ABSOLUTE_RE.fullmatch(raw):
        return raw
    match = _PLAIN_ABSOLUTE_RE.match(raw)
    if match is None:
        return None
    host, port, path, query = match.groups()
    if "xn--" in host:
        return None  # punycode labels are checked (and may be refused) by the parser
    if port is not None and (
        int(port[1:]) > 65535 or port == (":80" if host[4] == ":" else ":443")
    ):
        return None  # the parser refuses the first and drops the default port
    return host + (port or "") + _dot_free(path or "/") + (query or "")


@lru_cache(maxsize=1 << 14)
def _plain_tail(raw: str, directory: str) -> str | None:
    """What a plain relative reference ``raw`` joins to, normalized (what
    :func:`normalize` would return), without the parser: the path and query of an
    absolute-path or relative-path reference, to append to the base's origin (starting
    with "/"; ``directory`` is the base's directory, see :func:`_base_parts`). None for
    every other reference (``raw`` must not start with "http").

    Dot segments are resolved and the fragment dropped, as WHATWG does. Cached because
    pages repeat their site's references (menus, footers) and sites share many
    ("/", "/about"): a hit costs a fraction of the regular expressions and string work
    of a miss. Bounded, a few MiB whatever the crawl's size.
    """
    if raw[:2] == "//":
        return None
    match = _PLAIN_REF_RE.match(raw)
    if match is None:
        return None  # also a query- or fragment-only reference, which keeps base parts
    path, query = match.groups()
    if path[0] == "/":
        return _dot_free(path) + (query or "")
    return _dot_free(_up_from(directory, path)) + (query or "")


def _up_from(directory: str, path: str) -> str:
    """``directory + path`` with ``path``'s leading "../" and "./" segments applied to
    ``directory`` (a base's directory: no dot segments, ending with "/"), as WHATWG
    does: each "../" drops the directory's last segment, never the root. Sites link
    up the tree ("../../b/c.html"), and a page's directory makes each join new to the
    cache: this costs a few string operations where splitting the whole path costs a
    Python loop over every segment."""
    while path[:1] == ".":
        if path[:3] == "../":
            path = path[3:]
            cut = directory.rfind("/", 0, len(directory) - 1)
            directory = directory[: cut + 1] if cut >= 0 else "/"
        elif path[:2] == "./":
            path = path[2:]
        else:
            break  # ".", "..", or a name that starts with a dot: _dot_free's
    return directory + path


def _dot_free(path: str) -> str:
    """A plain absolute path with its "." and ".." segments resolved (WHATWG path state:
    ".." drops the segment before it, never the root; one of them at the end leaves a
    trailing slash)."""
    if "/." not in path or not _DOT_SEGMENT_RE.search(path):  # a cheap test first
        return path
    segments = path[1:].split("/")
    out: list[str] = []
    for i, segment in enumerate(segments):
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
            continue
        if i == len(segments) - 1:
            out.append("")
    return "/" + "/".join(out)


def _base_parts(base: str | None) -> tuple[str, str]:
    """``(origin, directory path)`` of a normalized http(s) base URL, ``("", "")``
    otherwise: what an absolute-path and a relative-path reference are joined to."""
    if base is None or not base.startswith(("http://", "https://")):
        return "", ""
    try:
        if normalize(base) != base:
            return "", ""
    except URLRejected:
        return "", ""
    path_start = base.find("/", base.index("//") + 2)
    if path_start < 0:
        return "", ""
    no_query = base.split("?", 1)[0]
    return base[:path_start], no_query[path_start : no_query.rfind("/") + 1]


def fingerprint(url: str) -> int:
    """The URL's 64-bit identity: unsigned xxh3_64 of its UTF-8 bytes.

    ``url`` must already be normalized; hashing does not normalize again (it is
    called per link, and every URL is normalized exactly once).
    """
    return xxh3_64_intdigest(url.encode())


def fingerprints(urls: Iterable[str]) -> array[int]:
    """:func:`fingerprint` of each URL, as an ``array("Q")``; iterates in C (no Python
    call per URL), for a page's links."""
    return xxh3_64_array(map(str.encode, urls))


def xxh3_64_array(blobs: Iterable[bytes]) -> array[int]:
    """The unsigned xxh3_64 of each of ``blobs``, as an ``array("Q")``, in C (no Python
    call per item).

    The 8-byte digests (big-endian) are joined and put into the machine's byte order.
    ``array("Q", map(xxh3_64_intdigest, ...))`` made an int per item and converted it
    through CPython's generic ``_PyLong_AsByteArray``, which was slower."""
    keys = array("Q", b"".join(map(xxh3_64_digest, blobs)))
    if sys.byteorder == "little":
        keys.byteswap()
    return keys


# scheme "://", userinfo (skipped), then host[:port] with the host alone in group 3.
_AUTHORITY_OF = re.compile(r"([^:/]+://)(?:[^@/]*@)?((\[[^\]]*\]|[^:/]*)[^/]*)")


def _authority(url: str) -> re.Match[str]:
    match = _AUTHORITY_OF.match(url)
    if match is None:
        raise ValueError(f"not a normalized URL: {url[:200]!r}")
    return match


def host_of(url: str) -> str:
    """Lower-case host of a normalized URL, without port (IPv6 keeps its brackets)."""
    return _authority(url)[3]


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a normalized URL: the key for robots.txt rules."""
    match = _authority(url)
    return match[1] + match[2]


def robots_url(url: str) -> str:
    """Where the robots.txt that governs the normalized ``url`` lives."""
    return origin_of(url) + "/robots.txt"


_PSL = PublicSuffixList()


@lru_cache(maxsize=1 << 16)
def pld(host: str) -> str:
    """Pay-level (registrable) domain of a lower-case ``host``.

    Uses the bundled public suffix list (private section included, so
    ``alice.github.io`` is its own PLD). An unlisted TLD counts as one public label,
    so ``www.site17.test`` -> ``site17.test``. IP literals, single labels and bare
    public suffixes are their own PLD.
    """
    if host.startswith("[") or host.rpartition(".")[2].isdigit():
        return host
    return _PSL.privatesuffix(host) or host


# scheme://authority -> its PLD, for pld_targets: the same sites are linked from page
# after page, and a dict hit costs less than the authority's parse and the public-suffix
# lookup. Cleared when full, so it costs at most a few MiB whatever the crawl's size.
_ORIGIN_PLDS: dict[str, str] = {}
_ORIGIN_PLDS_MAX = 1 << 16


def _origin_pld(origin: str) -> str:
    """The PLD of ``scheme://authority`` (remembered in _ORIGIN_PLDS)."""
    known = _ORIGIN_PLDS.get(origin)
    if known is None:
        if len(_ORIGIN_PLDS) >= _ORIGIN_PLDS_MAX:
            _ORIGIN_PLDS.clear()
        known = _ORIGIN_PLDS[origin] = pld(host_of(origin + "/"))
    return known


def pld_targets(source_url: str, links: list[str]) -> tuple[str, list[str]]:
    """The PLD of ``source_url`` and the distinct other PLDs ``links`` point to, sorted.

    ``source_url`` and ``links`` are normalized URLs; each distinct origin is reduced to
    its PLD once. Here rather than in drumbeat.parse.links because this module is
    compiled (setup.py): it runs over every link of every page a fetcher parses.
    """
    origin = origin_of(source_url)
    source = _origin_pld(origin)
    # Links within the source's origin (most of a page's) share its PLD: skip them. A
    # normalized http(s) URL always has a path, so the origin ends at the first "/"
    # after "scheme://" (index 7 or 8; the host has at least one character).
    own = origin + "/"
    origins: set[str] = set()
    targets: set[str] = set()
    for link in links:
        if not link.startswith(own):
            other = link[: link.find("/", 8)]
            if other not in origins:
                origins.add(other)
                targets.add(_origin_pld(other))
    targets.discard(source)
    return source, sorted(targets)


def split_targets(
    source_url: str,
    links: list[str],
    owners: dict[str, int],
    owner_of_pld: Callable[[str], int],
) -> tuple[str, dict[int, list[str]], dict[int, list[str]]]:
    """What :func:`pld_targets` gives, grouped by owner, in its one pass over the links:
    the PLD of ``source_url``; ``links`` (normalized URLs found on it) by the partition
    that owns each one's PLD, the order kept within each; and the distinct other PLDs
    they point to, sorted, by owner. A PLD's owner is the one in ``owners``, or, for a
    PLD not there, ``owner_of_pld(pld)`` (which remembers it). No empty group; the
    source's owner's links, most of a page's, come first.

    A cluster fetcher splits every page's links so (drumbeat.queue.partition's Splitter):
    the links within the source's origin share its owner and are neither looked up nor
    copied one by one (the others are few, and cut out by slices)."""
    origin = origin_of(source_url)
    source = _origin_pld(origin)
    home = owners.get(source)
    if home is None:
        home = owner_of_pld(source)
    own = origin + "/"
    origin_owners: dict[str, int] = {}  # this page's other origins
    target_owners: dict[str, int] = {}
    away: list[int] = []  # the links other partitions own: index, owner, index, ...
    for i, link in enumerate(links):
        if link.startswith(own):
            continue
        # A normalized http(s) URL always has a path (see pld_targets).
        other = link[: link.find("/", 8)]
        owner = origin_owners.get(other)
        if owner is None:
            target = _origin_pld(other)
            owner = owners.get(target)
            if owner is None:
                owner = owner_of_pld(target)
            origin_owners[other] = owner
            if target != source:
                target_owners[target] = owner
        if owner != home:
            away.append(i)
            away.append(owner)
    groups: dict[int, list[str]] = {}
    if len(away) < 2 * len(links):
        mine: list[str] = []
        start = 0
        for k in range(0, len(away), 2):
            mine += links[start : away[k]]
            start = away[k] + 1
        mine += links[start:]
        groups[home] = mine
    for k in range(0, len(away), 2):
        _append(groups, away[k + 1], links[away[k]])
    plds: dict[int, list[str]] = {}
    for target in sorted(target_owners):
        _append(plds, target_owners[target], target)
    return source, groups, plds


def _append(groups: dict[int, list[str]], owner: int, item: str) -> None:
    """Append ``item`` to ``owner``'s group in ``groups``, made if missing."""
    group = groups.get(owner)
    if group is None:
        groups[owner] = [item]
    else:
        group.append(item)


def in_scope(
    url_host: str, scope: str, seed_hosts: frozenset[str], seed_plds: frozenset[str]
) -> bool:
    """Whether a URL on ``url_host`` may be crawled under ``scope``.

    ``any``: every host; ``host``: only the seeds' hosts; ``domain``: hosts whose PLD
    is a seed's PLD. Raises ValueError for another scope.
    """
    if scope == "any":
        return True
    if scope == "host":
        return url_host in seed_hosts
    if scope == "domain":
        return pld(url_host) in seed_plds
    raise ValueError(f"unknown scope {scope!r}; expected any, host or domain")
