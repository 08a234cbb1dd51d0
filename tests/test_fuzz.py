"""Property tests (hypothesis) on everything that reads input from the web or from disk.

URL normalization, link extraction, robots.txt parsing, HTTP responses (through a real
raw TCP server on loopback), Retry-After and Content-Encoding handling, and reading back
our own WARC files and crawl logs after random damage. No exception may escape, and
whatever is dropped is counted under a known reason.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drumbeat import urls
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.fetch.response import FetchResponse, decode_body, retry_after
from drumbeat.frontier.robots import ALLOW_ALL, RULES, RobotsEntry, _parse
from drumbeat.parse.links import extract_links
from drumbeat.store.crawllog import CrawlLog, CrawlLogReader
from drumbeat.store.warc import WarcWriter, iter_records, recover_directory

URL_REASONS = {"unparsable", "scheme", "too_long", "no_host", "bad_port"}
LINK_REASONS = URL_REASONS | {"too_many_links", "nofollow", "meta_nofollow"}
FETCH_ERRORS = {
    "timeout",
    "connect",
    "url:invalid",
    "http:bad_status_line",
    "http:header_too_large",
    "http:bad_header",
    "http:incomplete_body",
    "http:bad_chunking",
    "http:disconnected",
    "http:bad_message",
    "http:error",
}
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- URLs -----------------------------------------------------------------------------------

url_parts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "http://",
            "https://",
            "HTTP://",
            "ftp://",
            "//",
            "/",
            "../",
            "./",
            "?",
            "#",
            "%",
            "%2",
            "%41",
            "%zz",
            "[",
            "]",
            "::1",
            ":",
            "@",
            "\\",
            " ",
            "\t",
            "xn--",
            "bücher",
            ".",
            "..",
            ":0",
            ":65536",
            ":80",
            "\x00",
            "\ud800",
            "example.test",
            "127.0.0.1",
            "0x7f.1",
            "a" * 300,
        ]
    ),
)
url_like = st.lists(url_parts, max_size=8).map("".join)
BASE = "http://base.test/dir/page.html?q=1"


@FAST
@given(url_like, st.sampled_from([None, BASE, "not a base", "http://[bad", "\ud800"]))
def test_normalize_returns_a_fixed_point_or_a_reason(raw: str, base: str | None) -> None:
    try:
        url = urls.normalize(raw, base)
    except urls.URLRejected as rejected:
        assert rejected.reason in URL_REASONS
        return
    assert urls.normalize(url) == url
    assert url.startswith(("http://", "https://")) and url.isascii()
    assert len(url) <= urls.DEFAULT_MAX_URL_BYTES
    urls.host_of(url), urls.origin_of(url), urls.pld(urls.host_of(url))
    assert urls.fingerprint(url) == urls.fingerprint(url)


@FAST
@given(st.lists(url_like, max_size=30), st.integers(min_value=0, max_value=10))
def test_normalize_links_counts_every_reference(refs: list[str], max_links: int) -> None:
    kept, dropped = urls.normalize_links(BASE, refs, max_links=max_links)
    assert set(dropped) <= URL_REASONS | {"too_many_links"}
    assert len(kept) <= max_links and len(set(kept)) == len(kept)
    # Distinct raw references are each kept, merged into a kept URL, or counted.
    distinct = len(dict.fromkeys(refs))
    assert len(kept) + sum(dropped.values()) <= distinct


# -- link extraction ------------------------------------------------------------------------

html_pieces = st.one_of(
    st.binary(max_size=30),
    st.sampled_from(
        [
            b"<a href='",
            b'<a href="',
            b"'>",
            b'">',
            b"</a>",
            b"<base href=",
            b"<link rel=canonical href=",
            b'<meta http-equiv=refresh content="0;url=',
            b"<meta name=robots content=nofollow>",
            b"<iframe src=",
            b"<frame src=",
            b"<area href=",
            b"<div>",
            b"<ul>",
            b"<script>",
            b"</script>",
            b"<!--",
            b"-->",
            b"<![CDATA[",
            b"\xef\xbb\xbf",
            b"\xff\xfe",
            b"<meta charset=utf-16>",
            b"<meta charset=shift_jis>",
            b"rel=nofollow ",
            b"&amp;",
            b"&#0;",
            b"\x00",
        ]
    ),
    url_like.map(lambda s: s.encode("utf-8", "surrogatepass")),
)
html_like = st.lists(html_pieces, max_size=40).map(b"".join)


@FAST
@given(
    st.one_of(html_like, st.binary(max_size=2000)),
    st.sampled_from([BASE, "http://xn--bcher-kva.test/", "not a url", ""]),
)
def test_extract_links_never_raises_and_counts_drops(body: bytes, page_url: str) -> None:
    page = extract_links(body, page_url, max_links=20, max_parse_bytes=1500)
    assert set(page.dropped) <= LINK_REASONS
    assert len(page.links) <= 20
    for link in page.links:
        assert urls.normalize(link) == link
    # A body longer than max_parse_bytes is parsed in segments, to its end.
    assert page.cut in (None, "max_links")


# -- robots.txt -----------------------------------------------------------------------------

robots_lines = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "User-agent: *",
            "User-agent: drumbeat",
            "Disallow: /",
            "Allow: /a",
            "Disallow: /*?",
            "Disallow: /$",
            "Crawl-delay: 10",
            "Crawl-delay: -1",
            "Crawl-delay: nan",
            "Crawl-delay: 1e999",
            "Request-rate: 1/0",
            "Sitemap: http://[bad",
            "Disallow: %zz",
            "Disallow: /\ud800",
            "<html>",
            "Disallow: *" * 50,
            "Allow: " + "*" * 200,
        ]
    ),
)
robots_text = st.lists(robots_lines, max_size=20).map("\n".join)


@FAST
@given(
    robots_text,
    st.sampled_from(
        ["http://h.test/", "http://h.test/a?b", "http://h.test/%zz", "http://h.test/" + "x" * 3000]
    ),
)
def test_robots_parsing_never_raises(text: str, url: str) -> None:
    parsed = _parse(text, "drumbeat")
    state = ALLOW_ALL if parsed is None else RULES
    entry = RobotsEntry("http://h.test", state, text, 0.0, 1.0, 0, parsed)
    assert isinstance(entry.allows(url), bool)
    delay = entry.crawl_delay()
    assert delay is None or delay >= 0


# -- HTTP header handling -------------------------------------------------------------------


@FAST
@given(
    st.one_of(
        st.text(max_size=60),
        st.integers(-10, 10**30).map(str),
        st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    )
)
def test_retry_after_is_capped_or_none(value: str) -> None:
    seconds = retry_after([("Retry-After", value)], time.time(), 3600)
    assert seconds is None or 0 <= seconds <= 3600


codings = st.lists(
    st.sampled_from(
        ["gzip", "x-gzip", "deflate", "br", "identity", "zstd", "", " GZIP ", "gzip;q=1"]
    ),
    max_size=4,
).map(", ".join)


@FAST
@given(codings, st.binary(max_size=500), st.integers(min_value=0, max_value=300))
def test_content_decoding_never_raises(coding: str, body: bytes, cap: int) -> None:
    response = FetchResponse(
        url="http://h.test/",
        ip=None,
        fetch_time=0.0,
        status=200,
        headers=[("Content-Encoding", coding)],
        body=body,
    )
    decode_body(response, cap)
    assert (response.decoded is None) != (response.decode_error is None)
    assert response.decoded is None or len(response.decoded) <= cap


status_lines = st.one_of(
    st.sampled_from(
        [
            b"HTTP/1.1 200 OK",
            b"HTTP/1.0 404 Not Found",
            b"HTTP/1.1 999 x",
            b"HTTP/1.1 2OO OK",
            b"HTTP/2 200",
            b"ICY 200 OK",
            b"HTTP/1.1 200",
            b"HTTP/1.1  200  OK",
            b"",
            b"HTTP/1.1 -1 x",
            b"HTTP/9.9 200 OK",
        ]
    ),
    st.binary(max_size=30),
)
header_lines = st.one_of(
    st.sampled_from(
        [
            b"Content-Length: 5",
            b"Content-Length: -1",
            b"Content-Length: 99999",
            b"Content-Length: 1, 2",
            b"Transfer-Encoding: chunked",
            b"Transfer-Encoding: gzip, chunked",
            b"Content-Encoding: gzip",
            b"Content-Encoding: br",
            b"Content-Type: text/html; charset=\xff",
            b"Content-Type: ;;;",
            b"Location: http://[bad",
            b"Location: \xff\xfe",
            b"Retry-After: \x00",
            b" folded",
            b"No-Colon",
            b": empty-name",
            b"X: " + b"y" * 100,
            b"Connection: close",
            b"Connection: keep-alive",
        ]
    ),
    st.binary(max_size=40).filter(lambda b: b"\r\n" not in b),
)
bodies = st.one_of(
    st.binary(max_size=200), st.sampled_from([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\n", b"hello"])
)


class RawReplies:
    """A loopback TCP server that answers every request with the bytes set last."""

    def __init__(self) -> None:
        self.reply = b""
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            writer.write(self.reply)
            await writer.drain()
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            TimeoutError,
            asyncio.LimitOverrunError,
        ):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def raw_replies() -> AsyncIterator[RawReplies]:
    raw = RawReplies()
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    raw.port = server.sockets[0].getsockname()[1]
    try:
        yield raw
    finally:
        server.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(status_lines, st.lists(header_lines, max_size=6), bodies), min_size=1, max_size=4
    )
)
def test_any_response_bytes_become_a_response_or_a_reason(
    replies: list[tuple[bytes, list[bytes], bytes]],
) -> None:
    async def main() -> list[FetchResponse]:
        http = AiohttpClient(
            user_agent="fuzz",
            policy=AddressPolicy(allow_loopback=True),
            resolver=None,
            total_timeout_s=1,
            read_timeout_s=0.5,
            max_body_bytes=100,
            max_decoded_bytes=100,
        )
        results = []
        try:
            async with raw_replies() as raw:
                # One client for several replies: a bad one must not spoil the pool.
                for status, headers, body in replies:
                    raw.reply = b"\r\n".join([status, *headers]) + b"\r\n\r\n" + body
                    url = f"http://127.0.0.1:{raw.port}/"
                    results.append(await http.fetch(url, "127.0.0.1"))
        finally:
            await http.close()
        return results

    for response in asyncio.run(asyncio.wait_for(main(), 20)):
        assert response.error is None or response.error in FETCH_ERRORS, response.error
        assert response.status is not None or response.error is not None
        assert len(response.body) <= 100
        assert response.decoded is None or len(response.decoded) <= 100


# -- our own files read back after damage ---------------------------------------------------

damage = st.tuples(
    st.sampled_from(["append", "truncate", "flip"]),
    st.floats(min_value=0, max_value=1),
    st.binary(min_size=1, max_size=300),
)


def damaged(data: bytes, how: tuple[str, float, bytes]) -> bytes:
    kind, where, noise = how
    at = int(len(data) * where)
    if kind == "append":
        return data + noise
    if kind == "truncate":
        return data[:at]
    return data[:at] + noise + data[at + len(noise) :]  # overwrite in the middle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=1, max_value=5), damage)
def test_a_damaged_warc_is_cut_to_its_readable_records(records: int, how: tuple) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        writer = WarcWriter(directory)
        for i in range(records):
            writer.write_fetch(
                f"http://h.test/{i}",
                ip="127.0.0.1",
                request_head=b"GET / HTTP/1.1\r\nHost: h.test\r\n\r\n",
                response_head=b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                body=b"hello",
                truncated=None,
                fetch_time=1.7e9 + i,
            )
        writer.flush()
        open_path = next(directory.glob("*.open"))
        whole = open_path.read_bytes()
        open_path.write_bytes(damaged(whole, how))
        del writer  # as if killed: the file stays .open (its lock goes with the descriptor)
        recovered = recover_directory(directory)
        assert len(recovered) == 1
        kept = recovered[0]
        assert kept.records_kept <= 1 + 2 * records
        if kept.final_path is not None:
            read = list(iter_records(kept.final_path))
            assert len(read) == kept.records_kept
        assert not list(directory.glob("*.open"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=10), max_size=4),
        min_size=1,
        max_size=10,
    ),
    damage,
)
def test_a_damaged_crawl_log_reads_with_counts(entries: list[dict], how: tuple) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crawl.log"
        with CrawlLog(path) as log:
            for entry in entries:
                log.append(entry)
        path.write_bytes(damaged(path.read_bytes(), how))
        reader = CrawlLogReader(path)
        read = list(reader)
        lines = path.read_bytes().count(b"\n")
        assert len(read) + reader.malformed == lines
        # Reopening for writing cuts the torn tail; the log then ends on a whole line.
        CrawlLog(path).close()
        again = CrawlLogReader(path)
        assert len(list(again)) == len(read) and again.torn_bytes == 0
        assert os.path.getsize(path) == 0 or path.read_bytes().endswith(b"\n")
