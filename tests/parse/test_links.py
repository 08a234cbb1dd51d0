from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from drumbeat.parse.links import (
    _QUADRATIC_TAGS,
    PageLinks,
    _anchor_references,
    _rename_quadratic,
    _selected_references,
    _start_tags_at_most,
    extract_links,
    pld_edges,
)

PAGE = "http://www.site1.test/dir/page.html"


def links_of(html: str, url: str = PAGE, **kwargs: int) -> PageLinks:
    return extract_links(html.encode("utf-8"), url, **kwargs)


def test_each_element_kind() -> None:
    page = links_of(
        """<html><head><link rel="canonical" href="/canon"><link rel="stylesheet" href="/s.css">
        <meta http-equiv="refresh" content="0; url=/refreshed"></head><body>
        <a href="a.html">a</a> <map><area href="/area" alt=""></map>
        <iframe src="//cdn.other.test/frame"></iframe> <img src="/img.png">
        <script src="/s.js"></script>
        <a name="no-href">anchor</a> <form action="/form"></form></body></html>"""
    )
    assert page.links == [
        "http://www.site1.test/canon",
        "http://www.site1.test/refreshed",
        "http://www.site1.test/dir/a.html",
        "http://www.site1.test/area",
        "http://cdn.other.test/frame",
    ]
    assert page.canonical == "http://www.site1.test/canon"
    assert page.refresh == "http://www.site1.test/refreshed"
    assert (page.nofollow, page.noindex) == (False, False)
    assert page.dropped == {}
    assert page.base == PAGE


def test_frames() -> None:
    page = links_of('<frameset><frame src="top.html"><frame src="/bottom.html"></frameset>')
    assert page.links == ["http://www.site1.test/dir/top.html", "http://www.site1.test/bottom.html"]


def test_base_href() -> None:
    html = '<a href="x">x</a><base href="/other/"><base href="/ignored/"><a href="../y">y</a>'
    page = links_of(html)
    # the first <base> applies to the whole document, even to links before it
    assert page.base == "http://www.site1.test/other/"
    assert page.links == ["http://www.site1.test/other/x", "http://www.site1.test/y"]

    page = links_of('<base href="https://CDN.site1.test:443/b/#f"><a href="c">c</a>')
    assert page.base == "https://cdn.site1.test/b/"
    assert page.links == ["https://cdn.site1.test/b/c"]


@pytest.mark.parametrize(
    "base", ["http://[bad", "javascript:void(0)", "mailto:x@y.test", "http://"]
)
def test_invalid_base_is_ignored(base: str) -> None:
    page = links_of(f'<base href="{base}"><base href="/second/"><a href="x">x</a>')
    # only the first <base href> counts; when it is invalid the page URL is the base
    assert page.base == PAGE
    assert page.links == ["http://www.site1.test/dir/x"]


def test_rel_nofollow() -> None:
    page = links_of(
        """<a href="/1" rel="nofollow">1</a><a href="/2" rel="External NoFollow ugc">2</a>
        <a href="/3" rel="nofollowish">3</a><a href="/4" rel="sponsored">4</a>
        <area href="/5" rel="NOFOLLOW"><link rel="canonical nofollow" href="/6">"""
    )
    assert page.links == ["http://www.site1.test/3", "http://www.site1.test/4"]
    assert page.dropped == {"nofollow": 4}
    assert page.canonical == "http://www.site1.test/6"
    assert page.nofollow is False


@pytest.mark.parametrize(
    ("content", "nofollow", "noindex"),
    [
        ("nofollow", True, False),
        ("NOINDEX", False, True),
        ("noindex, nofollow", True, True),
        ("noindex,nofollow", True, True),
        ("none", True, True),
        ("all", False, False),
        ("index follow", False, False),
        ("nofollowed", False, False),
    ],
)
def test_meta_robots(content: str, nofollow: bool, noindex: bool) -> None:
    page = links_of(
        f'<head><meta name="Robots" content="{content}"></head>'
        '<a href="/a">a</a><a href="/b">b</a><a href="/a">again</a>'
        '<link rel=canonical href="/c">'
    )
    assert (page.nofollow, page.noindex) == (nofollow, noindex)
    assert page.canonical == "http://www.site1.test/c"
    if nofollow:
        assert page.links == []
        assert page.dropped == {"meta_nofollow": 4}
    else:
        assert len(page.links) == 3
        assert page.dropped == {}


def test_only_the_robots_meta_counts() -> None:
    page = links_of(
        '<meta name="googlebot" content="nofollow"><meta name="drumbeat" content="none">'
        '<meta name="description" content="noindex nofollow"><a href="/a">a</a>'
    )
    assert (page.nofollow, page.noindex) == (False, False)
    assert page.links == ["http://www.site1.test/a"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("0; url=/a", "http://www.site1.test/a"),
        ("0;URL=/a", "http://www.site1.test/a"),
        ("5; url='/a b'", "http://www.site1.test/a%20b"),
        ("5; url='/a'b'", "http://www.site1.test/a"),
        ('0; Url="http://other.test/x"; junk', "http://other.test/x"),
        ("0; url = /a", "http://www.site1.test/a"),
        ("0, /a", "http://www.site1.test/a"),
        ("0;/a", "http://www.site1.test/a"),
        ("1.5 ; url=a", "http://www.site1.test/dir/a"),
        ("0; urlish", "http://www.site1.test/dir/urlish"),
        ("0; url='unclosed", "http://www.site1.test/dir/unclosed"),
        ("3", None),
        ("0;", None),
        ("0; url=", None),
        ("url=/a", None),
        ("", None),
        ("0; url=javascript:alert(1)", None),
    ],
)
def test_meta_refresh(content: str, expected: str | None) -> None:
    quote = "'" if '"' in content else '"'
    page = links_of(f"<meta http-equiv=Refresh content={quote}{content}{quote}>")
    assert page.refresh == expected
    assert page.links == ([] if expected is None else [expected])


def test_canonical_first_wins_and_is_deduplicated() -> None:
    page = links_of(
        '<link rel="canonical" href="page.html#top"><link rel="CANONICAL" href="/second">'
        '<a href="page.html">self</a>'
    )
    assert page.canonical == PAGE
    assert page.links == [PAGE, "http://www.site1.test/second"]


def test_dedupe_order_and_drops() -> None:
    page = links_of(
        """<a href="/b">b</a><a href="/a">a</a><a href="/b#x">b again</a>
        <a href="HTTP://WWW.SITE1.TEST:80/a">a again</a><a href="mailto:me@site1.test">m</a>
        <a href="javascript:void(0)">j</a><a href="mailto:me@site1.test">m</a>
        <a href="http://[bad">bad</a><a href="http://:8/">no host</a><a href="http://x.test:0/">p</a>
        <a href="/c">c</a><a href="">self</a><a href>bare</a>"""
    )
    assert page.links == [
        "http://www.site1.test/b",
        "http://www.site1.test/a",
        "http://www.site1.test/c",
        PAGE,
    ]
    # counted once per distinct raw reference
    assert page.dropped == {"scheme": 2, "unparsable": 1, "no_host": 1, "bad_port": 1}


def test_limits() -> None:
    html = "".join(f'<a href="/p{i}">{i}</a>' for i in range(30))
    page = links_of(html, max_links=10)
    assert page.links == [f"http://www.site1.test/p{i}" for i in range(10)]
    assert page.dropped == {"too_many_links": 20}

    page = links_of('<a href="/short">s</a><a href="/' + "x" * 200 + '">l</a>', max_url_bytes=100)
    assert page.links == ["http://www.site1.test/short"]
    assert page.dropped == {"too_long": 1}


def test_latin1_declared() -> None:
    """The path is UTF-8, the query in the page's encoding (the URL Standard)."""
    body = '<meta charset="iso-8859-1"><a href="/café?q=é">c</a>'.encode("latin-1")
    page = extract_links(body, PAGE)
    assert page.links == ["http://www.site1.test/caf%C3%A9?q=%E9"]


def test_latin1_undeclared_is_read_as_windows_1252() -> None:
    body = '<a href="/ok">ok</a><a href="/café">c</a><a href="/€">e</a>'.encode("cp1252")
    page = extract_links(body, PAGE)
    assert page.links == [
        "http://www.site1.test/ok",
        "http://www.site1.test/caf%C3%A9",
        "http://www.site1.test/%E2%82%AC",
    ]


def test_utf8_undeclared_is_read_as_utf8() -> None:
    body = '<a href="/café?q=é">c</a>'.encode()
    assert extract_links(body, PAGE).links == ["http://www.site1.test/caf%C3%A9?q=%C3%A9"]


def test_shift_jis_declared() -> None:
    body = (
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
        '</head><body><a href="/日本語/">日本</a><a href="/ascii">a</a></body></html>'
    ).encode("shift_jis")
    page = extract_links(body, PAGE)
    assert page.links == [
        "http://www.site1.test/%E6%97%A5%E6%9C%AC%E8%AA%9E/",
        "http://www.site1.test/ascii",
    ]


def test_utf16_with_bom() -> None:
    body = '<a href="/ü">u</a>'.encode("utf-16")
    page = extract_links(body, PAGE)
    assert page.links == ["http://www.site1.test/%C3%BC"]


def test_broken_markup_and_nuls() -> None:
    body = b'<a href="/one"<a href=/two>\x00<a href="/th\x00ree">\xff\xfe<a href=\'/four\'<div<<<a href=/five'  # noqa: E501 (the page as served)
    page = extract_links(body, PAGE)
    # what survives depends on the HTML tokenizer; NULs become U+FFFD
    assert "http://www.site1.test/one" in page.links
    assert "http://www.site1.test/th%EF%BF%BDree" in page.links
    assert len(page.links) == len(set(page.links))


def test_empty_body_and_bad_page_url() -> None:
    assert extract_links(b"", PAGE) == PageLinks([], None, None, False, False, {}, PAGE)  # type: ignore[arg-type]
    page = extract_links(b'<a href="/x">x</a><a href="http://abs.test/y">y</a>', "not a url")
    assert page.links == ["http://abs.test/y"]
    assert page.dropped == {"unparsable": 1}


_FRAGMENTS = st.sampled_from(
    [
        b"<a href=",
        b'"',
        b"'",
        b">",
        b"<",
        b"/",
        b"http://",
        b"<base href=",
        b"<meta ",
        b"name=robots ",
        b"http-equiv=refresh ",
        b"content=",
        b"0;url=",
        b"<link rel=canonical href=",
        b"<iframe src=",
        b"<frameset><frame src=",
        b"\x00",
        b"\xff",
        b"\xef\xbb\xbf",
        b"&#x0;",
        b"&amp",
        b"<!--",
        b"-->",
        b"<script>",
        b"</script>",
        b"<svg>",
        b"charset=shift_jis",
        b"nofollow",
        b" rel=",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(body: bytes) -> None:
    page = extract_links(body, PAGE)
    assert len(page.links) == len(set(page.links))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.binary(max_size=8)), max_size=40))
def test_html_like_garbage_never_raises(parts: list[bytes]) -> None:
    page = extract_links(b"".join(parts), PAGE, max_links=5)
    assert len(page.links) <= 5
    assert all(link.startswith(("http://", "https://")) for link in page.links)


def test_pld_edges() -> None:
    links = [
        "http://www.site1.test/a",
        "http://img.site1.test/b",
        "http://www.site2.test/c",
        "http://site2.test/d",
        "https://x.example.co.uk:8443/e",
        "http://127.0.0.1:8080/f",
        "http://user@www.site3.test/",
    ]
    assert pld_edges("http://www.site1.test/page", links) == {
        ("site1.test", "site2.test"),
        ("site1.test", "example.co.uk"),
        ("site1.test", "127.0.0.1"),
        ("site1.test", "site3.test"),
    }
    assert pld_edges("http://a.site1.test/", ["http://b.site1.test/"]) == set()
    assert pld_edges("http://a.site1.test/", []) == set()
    # Shortest origins, both schemes, IPv6 and ports: the origin ends where the path starts.
    assert pld_edges("https://b/", ["http://a/x", "https://a:81/", "http://[::1]:8080/y/z"]) == {
        ("b", "a"),
        ("b", "[::1]"),
    }


# Markup around anchors: what the tag-name path must see as the CSS query does (case,
# attributes without values, rel lists, foreign content, templates, comments, scripts,
# foster parenting, misnested tags); then the elements that send a page to the query.
_AROUND_ANCHORS = [
    '<a href="x">',
    "<A HREF='/y' REL='NoFollow'>",
    '<a href="z" rel="noopener nofollow">',
    '<a href="w" rel="">',
    "<a>",
    "<a href>",
    '<a href="">',
    "</a>",
    "<a href=v rel=follow>",
    '<base href="/b/">',
    "<base>",
    '<BASE HREF="http://o.test/">',
    '<meta name="ROBOTS" content="NoFollow">',
    "<meta name=robots>",
    '<meta name=robots content="none">',
    "<meta name=googlebot content=nofollow>",
    '<meta charset="utf-8">',
    '<meta http-equiv="Content-Type" content="text/html">',
    '<link rel="stylesheet" href="s.css">',
    "<svg><a href='s'></a></svg>",
    "<template><a href='t'></template>",
    "<!-- <a href='c'> -->",
    "<script><a href='sc'></script>",
    "<noscript><a href='n'></noscript>",
    "<table><a href='tb'><tr><td>",
    "<p>",
    "<b><p>",
    "</b>",
    "<head>",
    "<body>",
    "<html>",
    "text",
]
_OTHER_REFERENCES = [
    '<meta http-equiv="REFRESH" content="1;url=r">',
    '<link rel="Canonical" href="/c">',
    "<link rel=canonical>",
    "<link rel=canonicals>",
    '<area href="/ar">',
    '<frame src="f">',
    '<iframe src="i"></iframe>',
    "<frameset>",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_AROUND_ANCHORS), max_size=30))
def test_anchor_path_finds_what_the_css_query_finds(parts: list[str]) -> None:
    tree = LexborHTMLParser("".join(parts).encode(), encoding=True)
    fast = _anchor_references(tree, PAGE, Counter())
    assert fast is not None
    assert fast == _selected_references(tree, PAGE, Counter())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_AROUND_ANCHORS + _OTHER_REFERENCES), max_size=30))
def test_anchor_path_leaves_other_references_to_the_css_query(parts: list[str]) -> None:
    tree = LexborHTMLParser("".join(parts).encode(), encoding=True)
    fast = _anchor_references(tree, PAGE, Counter())
    if fast is not None:  # None: the page has other references, and only the query is used
        assert fast == _selected_references(tree, PAGE, Counter())


def test_anchor_path_is_taken_for_pages_of_anchors() -> None:
    html = (
        b'<html><head><meta charset="utf-8"><link rel="stylesheet" href="/s.css">'
        b'<meta name="robots" content="noindex"><base href="/b/"></head><body>'
        b'<a href="x">x</a><a href="/y" rel="nofollow">y</a><a href="z">z</a></body></html>'
    )
    tree = LexborHTMLParser(html, encoding=True)
    fast = _anchor_references(tree, PAGE, Counter())
    assert fast is not None
    assert (fast.refs, fast.base_ref, fast.noindex, fast.dropped) == (
        ["x", "z"],
        "/b/",
        True,
        {"nofollow": 1},
    )
    assert fast == _selected_references(tree, PAGE, Counter())
    for other in (
        b'<link rel="canonical" href="/c">',
        b'<meta http-equiv="refresh" content="0">',
        b'<area href="/a">',
        b'<iframe src="/i">',
        b'<frameset><frame src="/f">',
    ):
        assert _anchor_references(LexborHTMLParser(other), PAGE, Counter()) is None


def test_start_tags_are_bounded_from_above() -> None:
    assert _start_tags_at_most(b"<a><b></b>x<") == 4  # every "<" while that is few
    assert _start_tags_at_most(b"<" * 3000) == 3000
    assert _start_tags_at_most(b"<a></a>" * 3000) == 3000  # past the first test: "</" subtracted


def test_deep_nesting_is_defused_and_its_links_kept() -> None:
    """20,000 unclosed <div> (quadratic for lexbor as they are) parse as x-div elements:
    the link inside is still found."""
    body = b"<html><body>" + b"<div>" * 20_000 + b'<a href="/deep">x</a>' + b"</div>" * 10
    assert extract_links(body, "http://a.test/").links == ["http://a.test/deep"]


def test_http_charset_beats_meta_and_a_bom_beats_both() -> None:
    body = '<meta charset="utf-8"><a href="/é?q=é">e</a>'.encode("cp1252")
    page = extract_links(body, PAGE, content_type="text/html; charset=windows-1252")
    assert page.links == ["http://www.site1.test/%C3%A9?q=%E9"]
    bom = b"\xef\xbb\xbf" + '<a href="/é?q=é">e</a>'.encode()
    page = extract_links(bom, PAGE, content_type="text/html; charset=windows-1252")
    assert page.links == ["http://www.site1.test/%C3%A9?q=%C3%A9"]


@pytest.mark.parametrize(
    "content_type",
    [
        "text/html; charset=utf-7",
        "text/html; charset=base64",
        "text/html; charset=x-no-such",
        "text/html",
    ],
)
def test_unknown_or_unsafe_labels_are_ignored(content_type: str) -> None:
    body = b'<a href="/+ADw-x">u</a><a href="/\xc3\xa9">e</a>'  # UTF-8, undeclared
    page = extract_links(body, PAGE, content_type=content_type)
    assert page.links == ["http://www.site1.test/+ADw-x", "http://www.site1.test/%C3%A9"]


def test_query_in_a_multibyte_page_encoding() -> None:
    """Shift_JIS query bytes, the second a "\\" kept as it is (WHATWG's query
    percent-encode set lacks it); the fragment is dropped."""
    body = '<a href="/表?q=表#表">t</a>'.encode("shift_jis")
    page = extract_links(body, PAGE, content_type="text/html; charset=shift_jis")
    assert page.links == ["http://www.site1.test/%E8%A1%A8?q=%95\\"]


def _long_page(links: int, pad: int = 200) -> bytes:
    filler = "<p>" + "x" * pad + "</p>"
    return (
        "<html><head><base href='http://base.test/d/'></head><body>"
        + "".join(f'<a href="l{k}">{k}</a>{filler}' for k in range(links))
        + "</body></html>"
    ).encode()


def test_a_long_page_is_parsed_whole_one_segment_at_a_time() -> None:
    body = _long_page(2_000)
    page = extract_links(body, PAGE, max_parse_bytes=len(body) // 7)
    # The <base> of the first segment holds for all; no link lost at any cut.
    assert page.links == [f"http://base.test/d/l{k}" for k in range(2_000)]
    assert page.cut is None and not page.dropped


def test_segments_are_cut_before_a_tag() -> None:
    from drumbeat.parse.links import _segment_end

    body = b"<p>" + b"x" * 50 + b'<a href="/y">' + b"z" * 50
    assert body[_segment_end(body, 0, 80) :].startswith(b'<a href="/y">')
    text = "é".encode() * 100  # no tag at all: cut on a character boundary
    assert text[: _segment_end(text, 0, 51)].decode() == "é" * 25


def test_the_parse_stops_at_the_references_bound() -> None:
    body = _long_page(2_000, pad=0)
    page = extract_links(body, PAGE, max_links=100, max_parse_bytes=len(body) // 10)
    assert len(page.links) == 100 and page.cut == "max_links"
    # Parsing stopped at the first segment boundary past 4 x 100 references.
    assert 300 < page.dropped["too_many_links"] < 1_000


def test_the_parse_stops_when_its_time_is_spent() -> None:
    body = _long_page(2_000)
    page = extract_links(body, PAGE, max_parse_bytes=len(body) // 4, max_parse_s=0.0)
    assert page.cut == "parse_time"
    assert 0 < len(page.links) < 2_000 and not page.dropped


# The regular expression that _rename_quadratic replaced: what it must do, byte for byte.
_RENAMED_AS_BEFORE = re.compile(
    rb"<(/?)(" + "|".join(_QUADRATIC_TAGS).encode() + rb")(?=[\s/>])", re.IGNORECASE
)
_TAG_PIECES = [
    *(f"<{tag}".encode() for tag in ("div", "DIV", "dIv", "p", "P", "h1", "H6", "h7", "dd", "d")),
    *(f"<{tag}".encode() for tag in ("li", "link", "pre", "param", "rt", "rtc", "rtcx", "summary")),
    *(f"<{tag}".encode() for tag in ("blockquote", "BlockQuote", "blockquoon", "figcaptite")),
    *(f"<{tag}".encode() for tag in ("figcaption", "figcaptions", "fieldset", "fieldsets")),
    *(c.encode() for c in ("<", "</", "<<", "<x-div", "<@", "x", "é", ")", ">", "/", " ")),
    b"\t",
    b"\n",
    b"\v",
    b"\f",
    b"\r",
    b"\0",
    b"<h\x11",  # \x11 | 0x20 is "1"
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TAG_PIECES), max_size=40))
def test_renaming_the_nesting_tags_is_what_the_expression_did(pieces: list[bytes]) -> None:
    body = b"".join(pieces)
    assert _rename_quadratic(body) == _RENAMED_AS_BEFORE.sub(rb"<\1x-\2", body)


def test_renaming_the_nesting_tags_keeps_other_names_and_the_end() -> None:
    body = b"<DIV class=x><p>a</P><link rel=x><pre/><h1\t></ul\n><x-dd><li"
    assert _rename_quadratic(body) == (
        b"<x-DIV class=x><x-p>a</x-P><link rel=x><x-pre/><x-h1\t></x-ul\n><x-dd><li"
    )
    assert _rename_quadratic(b"no tags") == b"no tags"
