from __future__ import annotations

import sys
from collections import Counter

import pytest
from ada_url import join_url, normalize_url
from hypothesis import example, given, settings
from hypothesis import strategies as st
from xxhash import xxh3_64_intdigest

from drumbeat import urls
from drumbeat.urls import (
    _NORMAL_ABSOLUTE_RE,
    DEFAULT_MAX_URL_BYTES,
    URLRejected,
    _normalize,
    _whatwg_href,
    fingerprint,
    fingerprints,
    host_of,
    in_scope,
    normalize,
    normalize_links,
    origin_of,
    pld,
    pld_targets,
    robots_url,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # case of scheme and host; path case is significant
        ("HTTP://WWW.Example.COM/A/b", "http://www.example.com/A/b"),
        ("hTTpS://Example.com", "https://example.com/"),
        # IDNA
        ("http://BÜCHER.example/", "http://xn--bcher-kva.example/"),
        ("http://bücher.example/ü", "http://xn--bcher-kva.example/%C3%BC"),
        # default ports
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("http://example.com:443/x", "http://example.com:443/x"),
        ("https://example.com:80/x", "https://example.com:80/x"),
        ("http://example.com:8080", "http://example.com:8080/"),
        # dot segments
        ("http://a.com/b/c/../d/./e", "http://a.com/b/d/e"),
        ("http://a.com/../../x", "http://a.com/x"),
        ("http://a.com/b/%2e%2E/c", "http://a.com/c"),
        # fragment
        ("http://a.com/p#frag", "http://a.com/p"),
        ("http://a.com/p?q=1#", "http://a.com/p?q=1"),
        # percent-encoding: unreserved decoded, reserved kept with upper-case hex
        ("http://a.com/%7euser/%41%62%2D%2e%5F%30", "http://a.com/~user/Ab-._0"),
        ("http://a.com/a%2fb%3Fc%3d%25", "http://a.com/a%2Fb%3Fc%3D%25"),
        ("http://a.com/?q=%7e%2f%e9", "http://a.com/?q=~%2F%E9"),
        ("http://a.com/100%/%zz", "http://a.com/100%25/%25zz"),
        ("http://a.com/%%34%31", "http://a.com/%2541"),
        # query kept as is otherwise (order, empty values, '+')
        ("http://a.com/?b=2&a=1&c&d=x+y", "http://a.com/?b=2&a=1&c&d=x+y"),
        ("http://a.com/?", "http://a.com/?"),
        # empty path
        ("http://a.com", "http://a.com/"),
        ("http://a.com?x", "http://a.com/?x"),
        # whitespace as WHATWG: trimmed at the ends, tabs/newlines removed, inner spaces escaped
        ("  \t http://a.com/x \n", "http://a.com/x"),
        ("http://a.com/a\tb\nc", "http://a.com/abc"),
        ("http://a.com/a b?c d", "http://a.com/a%20b?c%20d"),
        # hosts
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://[::1]:80/", "http://[::1]/"),
        ("http://user:pw@a.com:8080/", "http://user:pw@a.com:8080/"),
        ("http:\\\\a.com\\x", "http://a.com/x"),
    ],
)
def test_normalize(url: str, expected: str) -> None:
    assert normalize(url) == expected
    assert normalize(expected) == expected


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("d", "http://a.com/b/d"),
        ("../d", "http://a.com/d"),
        ("/d?x=1", "http://a.com/d?x=1"),
        ("?y", "http://a.com/b/c?y"),
        ("#f", "http://a.com/b/c?q"),
        ("", "http://a.com/b/c?q"),
        ("//other.com/x", "http://other.com/x"),
        ("https://B.com", "https://b.com/"),
        ("http:rel", "http://a.com/b/rel"),
        (" ./e f ", "http://a.com/b/e%20f"),
    ],
)
def test_normalize_relative(ref: str, expected: str) -> None:
    assert normalize(ref, "http://a.com/b/c?q#frag") == expected


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mailto:someone@example.com", "scheme"),
        ("javascript:void(0)", "scheme"),
        ("ftp://a.com/file", "scheme"),
        ("data:text/plain,hi", "scheme"),
        ("tel:+123", "scheme"),
        ("http://[bad", "unparsable"),
        ("http://a b.com/", "unparsable"),
        ("no scheme at all", "unparsable"),
        ("", "unparsable"),
        ("http://a.com/\udc80", "unparsable"),
        ("http://", "no_host"),
        ("https://:8080/x", "no_host"),
        ("http://user@/x", "no_host"),
        ("http://a.com:99999/", "bad_port"),
        ("http://a.com:8x/", "bad_port"),
        ("http://a.com:0/", "bad_port"),
        ("http://[::1]:70000/", "bad_port"),
    ],
)
def test_normalize_rejects(url: str, reason: str) -> None:
    with pytest.raises(URLRejected) as info:
        normalize(url)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)


def test_relative_without_usable_base() -> None:
    with pytest.raises(URLRejected) as info:
        normalize("page.html", "not a base")
    assert info.value.reason == "unparsable"
    with pytest.raises(URLRejected) as info:
        normalize("//", "http://a.com/")
    assert info.value.reason == "no_host"


def test_too_long_applies_to_normalized_result() -> None:
    url = "http://a.com/" + "x" * (DEFAULT_MAX_URL_BYTES - len("http://a.com/"))
    assert normalize(url) == url
    with pytest.raises(URLRejected) as info:
        normalize(url + "y")
    assert info.value.reason == "too_long"
    # dot segments and the fragment shrink it below the limit
    assert normalize("http://a.com/b/../" + "x" * 30 + "#" + "f" * 100, max_bytes=50)
    # escaping a space triples its length
    with pytest.raises(URLRejected) as info:
        normalize("http://a.com/" + " x" * 10, max_bytes=40)
    assert info.value.reason == "too_long"


_URL_CHARS = st.sampled_from(
    [
        *"aZ09-._~!$&'()*+,;=:@/?#[]%\\ \t\"<>^`{|}",
        "%2e",
        "%2E",
        "%7e",
        "%41",
        "%%",
        "..",
        "ü",
        "日",
        "\x00",
        "\x7f",
    ]
)


@st.composite
def url_like(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "HTTPS", "hTtp", "ftp", "mailto", ""]))
    sep = draw(st.sampled_from(["://", ":", ":/", "//", ""]))
    userinfo = draw(st.sampled_from(["", "u:p@", "%41@", "@"]))
    host = draw(
        st.sampled_from(
            [
                "a.com",
                "A.COM",
                "bücher.example",
                "127.0.0.1",
                "0x7F.1",
                "[::1]",
                "xn--bcher-kva.example",
                "a.com.",
                "",
                "www.site17.test",
                "a%41.com",
            ]
        )
    )
    port = draw(st.sampled_from(["", ":80", ":443", ":8080", ":0", ":", ":65536"]))
    rest = "".join(draw(st.lists(_URL_CHARS, max_size=30)))
    return f"{scheme}{sep}{userinfo}{host}{port}{rest}"


def _check_normal_form(url: str, base: str | None) -> None:
    try:
        once = normalize(url, base)
    except URLRejected as rejected:
        assert rejected.reason in {"unparsable", "scheme", "too_long", "no_host", "bad_port"}
        return
    assert normalize(once) == once
    assert normalize(once, base) == once
    assert once.isascii()
    assert once.startswith(("http://", "https://"))
    assert "#" not in once
    assert len(once) <= DEFAULT_MAX_URL_BYTES


@settings(max_examples=800, deadline=None)
@given(url_like(), st.sampled_from([None, "http://b.com/x/y?z", "https://C.org:8443/%7e/"]))
def test_normalize_is_idempotent(url: str, base: str | None) -> None:
    _check_normal_form(url, base)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60), st.sampled_from([None, "http://b.com/x/y?z"]))
def test_normalize_arbitrary_text(url: str, base: str | None) -> None:
    _check_normal_form(url, base)


def test_fingerprint() -> None:
    url = "http://www.site17.test/a?b=1"
    assert fingerprint(url) == xxh3_64_intdigest(url.encode("utf-8"))
    # pinned: URLseen keys on disk depend on this value never changing
    assert fingerprint("http://a.com/") == 0x3624_99FE_78D4_C700
    assert fingerprints(["http://a.com/"]).tobytes() == (0x3624_99FE_78D4_C700).to_bytes(
        8, sys.byteorder
    )  # as the fetchers pack them for URL-seen
    assert 0 <= fingerprint(url) < 2**64
    assert fingerprint(normalize("HTTP://A.com")) == fingerprint(normalize("http://a.com:80/#x"))
    assert fingerprint("http://a.com/x") != fingerprint("http://a.com/y")


@given(st.lists(st.text(), max_size=20))
def test_fingerprints_are_each_urls_fingerprint(urls: list[str]) -> None:
    # Built from the digests' bytes: the same values, in the machine's byte order.
    keys = fingerprints(urls)
    assert keys.typecode == "Q"
    assert list(keys) == [fingerprint(url) for url in urls]


@pytest.mark.parametrize(
    ("url", "host", "origin"),
    [
        ("http://www.site17.test/a/b?c", "www.site17.test", "http://www.site17.test"),
        ("https://a.com:8443/", "a.com", "https://a.com:8443"),
        ("http://user:pw@a.com:8080/x", "a.com", "http://a.com:8080"),
        ("http://127.0.0.1:8000/", "127.0.0.1", "http://127.0.0.1:8000"),
        ("http://[::1]:8080/x", "[::1]", "http://[::1]:8080"),
        ("http://[::1]/x", "[::1]", "http://[::1]"),
        ("http://xn--bcher-kva.example/", "xn--bcher-kva.example", "http://xn--bcher-kva.example"),
    ],
)
def test_host_origin_robots(url: str, host: str, origin: str) -> None:
    assert host_of(url) == host
    assert origin_of(url) == origin
    assert robots_url(url) == origin + "/robots.txt"


_SITES = [
    "http://www.site1.test",
    "http://img.site1.test",
    "https://site2.test:8443",
    "http://a.example.co.uk",
    "http://127.0.0.1:8080",
    "http://[::1]",
    "https://b",
]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(_SITES),
    st.lists(st.tuples(st.sampled_from(_SITES), st.sampled_from(["/", "/x/y", "/p?q"]))),
    st.booleans(),
)
def test_pld_targets_are_the_other_plds_linked(
    source: str, links: list[tuple[str, str]], forget: bool
) -> None:
    """pld_targets gives what the PLDs of the links' hosts give, sorted, without the
    source's own, whatever its cache of origins holds (cleared when full)."""
    if forget:
        urls._ORIGIN_PLDS.clear()
    hrefs = [site + path for site, path in links]
    own = pld(host_of(source + "/"))
    assert pld_targets(source + "/page", hrefs) == (
        own,
        sorted({pld(host_of(h)) for h in hrefs} - {own}),
    )


def test_pld_targets_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(urls, "_ORIGIN_PLDS_MAX", 3)
    urls._ORIGIN_PLDS.clear()
    hrefs = [f"http://h{i}.site{i}.test/" for i in range(10)]
    assert pld_targets("http://a.test/", hrefs) == (
        "a.test",
        sorted(f"site{i}.test" for i in range(10)),
    )
    assert len(urls._ORIGIN_PLDS) <= 3


def test_host_of_normalized_input() -> None:
    url = normalize("HTTP://User@WWW.Example.COM:80/x")
    assert host_of(url) == "www.example.com"
    assert origin_of(url) == "http://www.example.com"
    with pytest.raises(ValueError):
        host_of("no-scheme/path")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("www.site17.test", "site17.test"),
        ("site17.test", "site17.test"),
        ("a.b.site3.test", "site3.test"),
        ("www.example.com", "example.com"),
        ("example.com", "example.com"),
        ("www.bbc.co.uk", "bbc.co.uk"),
        ("a.b.example.co.uk", "example.co.uk"),
        ("co.uk", "co.uk"),
        ("com", "com"),
        ("test", "test"),
        ("localhost", "localhost"),
        ("alice.github.io", "alice.github.io"),
        ("127.0.0.1", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("[::1]", "[::1]"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_pld(host: str, expected: str) -> None:
    assert pld(host) == expected


def test_in_scope() -> None:
    seeds = frozenset({"www.site1.test", "b.example.co.uk"})
    plds = frozenset(pld(h) for h in seeds)
    assert in_scope("anything.org", "any", seeds, plds)
    assert in_scope("www.site1.test", "host", seeds, plds)
    assert not in_scope("img.site1.test", "host", seeds, plds)
    assert in_scope("img.site1.test", "domain", seeds, plds)
    assert in_scope("site1.test", "domain", seeds, plds)
    assert in_scope("x.example.co.uk", "domain", seeds, plds)
    assert not in_scope("other.co.uk", "domain", seeds, plds)
    assert not in_scope("site2.test", "domain", seeds, plds)
    with pytest.raises(ValueError):
        in_scope("a.com", "planet", seeds, plds)


def test_normalize_links_dedupes_in_order_and_counts() -> None:
    hrefs = [
        "b",
        "/c",
        "b",
        "b#x",
        "./b",
        "mailto:q@a",
        "http://",
        "javascript:x",
        "HTTP://A.COM/c",
        "http://[x",
    ]
    links, dropped = normalize_links("http://a.com/dir/page", iter(hrefs))
    assert links == ["http://a.com/dir/b", "http://a.com/c"]
    assert dropped == {"scheme": 2, "no_host": 1, "unparsable": 1}


def test_normalize_links_limits() -> None:
    hrefs = [f"/p{i}" for i in range(10)] + ["/p0"]
    links, dropped = normalize_links("http://a.com/", hrefs, max_links=3)
    assert links == ["http://a.com/p0", "http://a.com/p1", "http://a.com/p2"]
    assert dropped == {"too_many_links": 7}
    links, dropped = normalize_links("http://a.com/", ["/" + "x" * 100, "/y"], max_bytes=30)
    assert links == ["http://a.com/y"]
    assert dropped == {"too_long": 1}
    assert normalize_links("http://a.com/", []) == ([], {})
    assert normalize_links(None, ["/rel", "http://abs.com"]) == (
        ["http://abs.com/"],
        {"unparsable": 1},
    )


@settings(max_examples=300, deadline=None)
@given(url_like(), st.sampled_from([None, "http://b.com/x/y?z", "not a base"]))
def test_direct_ada_binding_matches_public_api(url: str, base: str | None) -> None:
    try:
        expected: str | None = normalize_url(url) if base is None else join_url(base, url)
    except ValueError:
        expected = None
    assert _whatwg_href(url, None if base is None else base.encode()) == expected


_PLAIN = st.text(alphabet="ab/.~-_Z9?#=&:%x ", min_size=1, max_size=12)
# Absolute URLs near the edge of normalize_links' fast path: case, IPv4-like and
# punycode hosts, ports (default, leading zero, too big), dot segments, queries.
_ABSOLUTE = st.builds(
    "".join,
    st.tuples(
        st.sampled_from(["http://", "https://", "HTTP://", "http:/", "http:\\\\"]),
        st.lists(
            st.sampled_from(["a", "b-", "9", "0x1", "xn--", "xn--abc", "Z", "_", "", "-"]),
            min_size=1,
            max_size=4,
        ).map(".".join),
        st.sampled_from(["", ":", ":80", ":443", ":8080", ":08", ":65535", ":65536", ":0"]),
        st.text(alphabet="ab/.~-_Z9?#=&:%x ", max_size=12),
    ),
)
_BASES = st.sampled_from(
    [
        "http://h.test/",
        "http://h.test/p/x.html",
        "https://h.test:8443/a/b/",
        "http://h.test/d/?q=/x/y",
        "http://[::1]/a",
        "http://h.test/a//b",
        "http://h.test/%C3%A9/x",
        "http://h.test",
        "HTTP://H.test/not/normal",
        "mailto:x@y.test",
    ]
)


@settings(max_examples=400)
@given(_BASES, _PLAIN)
def test_plain_relative_fast_path_agrees_with_whatwg(base, ref):
    """normalize_links joins plain references without ada: the result must be what
    normalize() (ada) gives for the same reference."""
    links, dropped = normalize_links(base, [ref])
    try:
        expected = [normalize(ref, base)]
    except URLRejected as e:
        assert links == [] and dict(dropped) == {e.reason: 1}
        return
    assert links == expected


@settings(max_examples=1500)
@given(_BASES, _ABSOLUTE)
def test_plain_absolute_fast_path_agrees_with_whatwg(base, ref):
    test_plain_relative_fast_path_agrees_with_whatwg.hypothesis.inner_test(base, ref)


# Absolute URLs most of which are already normal, with the few changes that make one not.
_NEAR_NORMAL = st.builds(
    "".join,
    st.tuples(
        st.sampled_from(["http://", "https://"]),
        st.lists(
            st.sampled_from(
                ["a", "b-c", "-", "z9", "a", "b-c", "9", "0x1", "xn--a", "A", "", "a_b"]
            ),
            min_size=1,
            max_size=3,
        ).map(".".join),
        st.sampled_from(["", "", ":8080", ":80", ":443", ":1", ":65535", ":65536", ":08"]),
        st.lists(
            st.sampled_from(["a", "", ".b", "x.html", "~u", "-", "B", ".", "..", "%41"]),
            min_size=1,
            max_size=4,
        ).map(lambda segments: "".join("/" + s for s in segments)),
        st.sampled_from(["", "", "?", "?q=1&r=a:b/c", "?a b", "#f", "?q#f"]),
    ),
)


@settings(max_examples=1500)
@given(st.one_of(_NEAR_NORMAL, _ABSOLUTE))
def test_urls_taken_as_already_normal_are_fixed_points(ref):
    """normalize() and normalize_links keep a URL that _NORMAL_ABSOLUTE_RE accepts as it
    is: each must be exactly what the parser (ada) returns for it."""
    if _NORMAL_ABSOLUTE_RE.fullmatch(ref):
        assert whatwg(ref) == ref


@pytest.mark.parametrize(
    "ref",
    [
        "http://a.test/",
        "https://a.b-c.test:8443/p/x.html?q=1&r=a:b",
        "http://a.test/.well-known/x",
        "http://a.test//x/...",
        "https://a.test:80/x",
        "http://-.test/",
        "http://a.test/x?",
    ],
)
def test_already_normal_examples(ref):
    assert _NORMAL_ABSOLUTE_RE.fullmatch(ref) and whatwg(ref) == ref == normalize(ref)


def whatwg(url: str) -> str:
    """normalize() through the parser, without its fast path for URLs already normal."""
    return _normalize(url, None, DEFAULT_MAX_URL_BYTES)


@pytest.mark.parametrize(
    "ref",
    [
        "http://a.test",
        "http://a.test:80/",
        "https://a.test:443/",
        "http://a.test/./x",
        "http://a.test/x/..",
        "http://a.test/x/..?q",
        "http://xn--nxasmq6b.com/",
        "http://1.2.3.4/",
        "http://a.test/x#f",
        "http://a.test:65536/",
        "http://a.test:080/",
        "HTTP://a.test/",
        "http://A.test/",
        "http://a.test/%41",
        "http://a.test/ x",
    ],
)
def test_not_already_normal_examples(ref):
    assert not _NORMAL_ABSOLUTE_RE.fullmatch(ref)


@pytest.mark.parametrize(
    "ref",
    [
        "../p/0366.html",
        "../../../../x.html",
        "./../x",
        "../",
        "../.",
        "..//x",
        ".../x",
        "..x/y",
        "./x",
        ".",
        "..",
        "a/../../b",
        "a/./b/.",
        "/p/../..",
        "a//../b",
        "0076.html#section",
        "x.html?a=1&b=c:d#f",
        "http://h.test:8080/p/../q?x=1#y",
        "http://a.b/",
        "http://a.b",
        "https://a.b:443/x",
        "http://a.b:80/",
        "http://1.2.3.4/",
        "http://a.09/",
        "http://xn--nxasmq6b.com/",
        "http://a.b:08/",
        "#only",
        "?only",
        "",
    ],
)
def test_plain_fast_path_examples(ref):
    for base in ("http://h.test/p/x.html", "https://h.test/a/b/c?q=1", "http://h.test"):
        test_plain_relative_fast_path_agrees_with_whatwg.hypothesis.inner_test(base, ref)


_DOT_REFS = st.lists(
    st.sampled_from(["..", ".", "a", "", ".b", "..c", "...", "d.html"]), min_size=1, max_size=7
).map("/".join)


@settings(max_examples=600)
@given(
    st.sampled_from(["http://h.test/a/b/c/d.html", "http://h.test/a/", "http://h.test/x"]),
    _DOT_REFS,
)
@example("http://h.test/x", "a/.b/..")  # ada-url before 1.23 kept ".b/.."
def test_relative_references_up_the_tree_agree_with_whatwg(base, ref):
    """References that climb the tree ("../../x"), as documentation sites write them,
    past the root too: joined without the parser, as the parser joins them."""
    test_plain_relative_fast_path_agrees_with_whatwg.hypothesis.inner_test(base, ref)


def test_plain_join_cache_keeps_bases_apart():
    """Parser-free joins are cached by reference (and base directory, for relative
    paths): a reference seen under one base still joins to every other base's origin
    and directory, and to nothing under a base that is not an http(s) URL."""
    refs = ["x.html", "../y.html", "/z?q=1", "http://o.test/p", "//o.test/", "x.html#f"]
    bases = [
        "http://a.test/d/e.html",
        "https://b.test:8443/f/g/",
        "http://a.test/",
        "mailto:x@y.test",
        None,
        "http://a.test/d/e.html",
    ]
    for _ in range(2):  # the second round runs on a warm cache
        for base in bases:
            expected: dict[str, None] = {}
            reasons: Counter[str] = Counter()
            for ref in dict.fromkeys(refs):
                try:
                    expected[normalize(ref, base)] = None
                except URLRejected as e:
                    reasons[e.reason] += 1
            assert normalize_links(base, refs) == (list(expected), reasons)
