"""CurlHttpClient specifics against raw servers on loopback: the request head it records is
byte for byte what the server received (checked with curl's own trace too), interim 1xx
heads and chunked trailers stay out of the response head."""

from __future__ import annotations

import asyncio
import os
import socket
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from drumbeat.fetch.curl import (
    CurlHttpClient,
    _parse_fields_by_line,
    _PlainURL,
    parse_fields,
    parse_url,
)
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.http import AiohttpClient
from drumbeat.fetch.response import FetchResponse
from tests.fetch.test_http import LOOPBACK_OK, UA, raw_server, run

REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def fetch_from(reply: bytes, url: str, ip: str | None, **options: object):
    async with raw_server(reply) as raw:
        # No name is resolved: every URL here has an IP or an IP literal.
        dns = DnsCache(nameserver="127.0.0.1:9", timeout_s=0.2, tries=1)
        http = CurlHttpClient(user_agent=UA, policy=LOOPBACK_OK, resolver=dns, **options)  # type: ignore[arg-type]
        try:
            r = await http.fetch(url.replace("PORT", str(raw.port)), ip)
        finally:
            await http.close()
            await dns.close()
        return r, raw


@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize(
    ("url", "ip", "line", "host"),
    [
        (
            "http://head.test:PORT/a%20b/c?x=1&y=%C3%A9",
            "127.0.0.1",
            "GET /a%20b/c?x=1&y=%C3%A9 HTTP/1.1",
            "head.test:PORT",
        ),
        (
            "http://bücher.test:PORT/ü?q=é#frag",
            "127.0.0.1",
            "GET /%C3%BC?q=%C3%A9 HTTP/1.1",
            "xn--bcher-kva.test:PORT",
        ),
        ("http://127.0.0.1:PORT", None, "GET / HTTP/1.1", "127.0.0.1:PORT"),
        ("http://dots.test:PORT/a/./b/../c", "127.0.0.1", "GET /a/c HTTP/1.1", "dots.test:PORT"),
        ("http://user:pw@auth.test:PORT/x", "127.0.0.1", "GET /x HTTP/1.1", "auth.test:PORT"),
    ],
)
def test_the_recorded_request_head_is_what_the_server_received(
    url: str, ip: str | None, line: str, host: str, trace: bool
) -> None:
    r, raw = run(lambda: fetch_from(REPLY, url, ip, trace_request_head=trace))
    assert (r.status, r.error, r.body) == (200, None, b"ok")
    assert raw.requests == [r.request_head]
    lines = r.request_head.decode().split("\r\n")
    assert lines[0] == line
    assert lines[1] == "Host: " + host.replace("PORT", str(raw.port))
    assert ("Authorization: Basic dXNlcjpwdw==" in lines) == ("user:pw@" in url)


@pytest.mark.parametrize("from_header", ["", "ops@example.org"])
def test_aiohttp_sends_the_same_request_head(from_header: str) -> None:
    """Same URL, same headers: the two backends' WARC request records agree."""

    async def both() -> tuple[FetchResponse, FetchResponse]:
        out = []
        for cls in (AiohttpClient, CurlHttpClient):
            async with raw_server(REPLY) as raw:
                dns = DnsCache(nameserver="127.0.0.1:9", timeout_s=0.2, tries=1)
                http = cls(user_agent=UA, policy=LOOPBACK_OK, resolver=dns, from_header=from_header)
                try:
                    r = await http.fetch(f"http://same.test:{raw.port}/p?q=1", "127.0.0.1")
                finally:
                    await http.close()
                    await dns.close()
                r.request_head = r.request_head.replace(str(raw.port).encode(), b"PORT")
                out.append(r)
        return out[0], out[1]

    a, c = run(both)
    assert a.request_head == c.request_head
    assert (f"\r\nFrom: {from_header}\r\n".encode() in a.request_head) == bool(from_header)


def test_interim_heads_and_trailers_are_not_the_response_head() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n"
    reply = (
        b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
        + head
        + b"2\r\nhi\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    r, _ = run(lambda: fetch_from(reply, "http://127.0.0.1:PORT/", None))
    assert (r.status, r.error, r.body) == (200, None, b"hi")
    # The body is kept de-chunked, so the head says the framing was there, not that it is.
    assert r.response_head == head.replace(b"Transfer-Encoding", b"X-Crawler-Transfer-Encoding")
    assert r.headers == [("Transfer-Encoding", "chunked"), ("X-A", "b")]


def _epoll_peers() -> list[object]:
    """The peer addresses of the descriptors registered in this process's epoll
    instances, curl's and the event loop's (from the kernel's fdinfo); None for one
    without (curl's wake-up eventfd, for one)."""
    peers: list[object] = []
    fds: list[int] = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/self/fdinfo/{name}") as f:
                fds += [int(line.split()[1]) for line in f if line.startswith("tfd:")]
        except FileNotFoundError:
            continue  # the descriptor listdir opened, closed again
    for fd in fds:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            peers.append(None)
            continue
        with socket.socket(fileno=os.dup(fd)) as s:
            try:
                peers.append(s.getpeername())
            except OSError:
                peers.append(None)
    return peers


def test_idle_connections_the_server_closes_are_dropped_and_fetches_go_on() -> None:
    """Keep-alive connections curl pools stay in the client's epoll, parked; this server
    closes each after its reply, so the next fetch must reconnect (often on the same
    descriptor number), and no connection to it may be left in an epoll (curl's own
    wake-up socket may be)."""

    async def main() -> tuple[list[tuple[int | None, str | None]], int, list[object], int]:
        async with raw_server(REPLY) as raw:  # closes each connection after its reply
            dns = DnsCache(nameserver="127.0.0.1:9", timeout_s=0.2, tries=1)
            http = CurlHttpClient(user_agent=UA, policy=LOOPBACK_OK, resolver=dns)
            try:
                seen = []
                for i in range(6):
                    r = await http.fetch(f"http://127.0.0.1:{raw.port}/{i}", None)
                    seen.append((r.status, r.error))
                    await asyncio.sleep(0.05)  # the server's close reaches the parked socket
                peers = _epoll_peers()
            finally:
                await http.close()
                await dns.close()
            return seen, raw.connections, peers, raw.port

    seen, connections, peers, port = run(main)
    assert seen == [(200, None)] * 6
    assert connections == 6
    assert ("127.0.0.1", port) not in peers


_FIELD_LINE = (
    st.lists(
        st.sampled_from(
            [
                b"Content-Type",
                b"X",
                b":",
                b" ",
                b"\t",
                b"\0",
                b"\r",
                b"value",
                b"Transfer-Encoding",
                b"transfer-encoding: chunked",
                b"\xc3\xa9",
                b"a b",
            ]
        ),
        max_size=6,
    )
    .map(b"".join)
    .flatmap(lambda line: st.sampled_from([line + b"\r\n", line + b"\n"]))
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_FIELD_LINE, max_size=6))
def test_whole_head_fast_path_agrees_with_the_line_by_line_parse(lines: list[bytes]) -> None:
    """parse_fields takes plain heads in two regular-expression passes: same head bytes,
    pairs and refusals as the line-by-line parse, whatever the lines."""
    assert parse_fields(lines) == _parse_fields_by_line(lines)


def test_whole_head_fast_path_examples() -> None:
    plain = [b"Server: nginx\r\n", b"Content-Type:text/html \r\n", b"X-A: b: c\r\n"]
    assert parse_fields(plain) == (
        b"".join(plain),
        [("Server", "nginx"), ("Content-Type", "text/html"), ("X-A", "b: c")],
    )
    assert parse_fields([b"Transfer-Encoding: chunked\r\n"]) == (
        b"X-Crawler-Transfer-Encoding: chunked\r\n",
        [("Transfer-Encoding", "chunked")],
    )
    assert parse_fields([b"A: 1\r\n", b" 2\r\n"]) == (b"A: 1\r\n 2\r\n", [("A", "1 2")])
    for bad in (b"no colon\r\n", b": empty\r\n", b"A : x\r\n", b"A: \0\r\n", b"A: \rx\r\n"):
        assert parse_fields([bad]) is None, bad


_URL_PART = st.sampled_from(
    [
        "a",
        "Z",
        "0",
        "9",
        "-",
        ".",
        "_",
        "~",
        "/",
        "?",
        "#",
        "%",
        "%2F",
        "%2f",
        "%41",
        "%7E",
        ":",
        "@",
        "!",
        "$",
        "&",
        "'",
        "(",
        ")",
        "*",
        "+",
        ",",
        ";",
        "=",
        " ",
        "é",
        "[",
        "]",
        "\\",
        "..",
        "/./",
        "/../",
        "xn--",
        "80",
        "443",
        "0",
        "65536",
        "user@",
        "A.",
        "\t",
    ]
)
_URL = st.tuples(
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "http:/"]),
    st.lists(_URL_PART, max_size=5).map("".join),
    st.sampled_from(["", ":", ":80", ":443", ":8080", ":0", ":08080", ":65535", ":99999"]),
    st.lists(_URL_PART, max_size=12).map("".join),
).map("".join)


def _yarl_parts(url: object) -> tuple:
    return (
        *tuple(
            getattr(url, name)
            for name in (
                "scheme",
                "raw_host",
                "port",
                "host_port_subcomponent",
                "raw_path_qs",
                "raw_user",
            )
        ),
        str(url),
    )


# Mostly plain: a lower-case host, then a path of the characters plain URLs may hold and
# a few that they may not.
_NEARLY_PLAIN_URL = st.tuples(
    st.sampled_from(["http://", "https://"]),
    st.lists(
        st.sampled_from(["a", "b-c", "xn--d", "0", "127", "-", ""]), min_size=1, max_size=3
    ).map(".".join),
    st.sampled_from(["", ":80", ":443", ":8080", ":65535"]),
    st.text(alphabet="/?.%~!$&'()*+,;=:@-_aZ09#[ ", max_size=20).map("/".__add__),
).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_URL, _NEARLY_PLAIN_URL))
def test_plain_url_parts_are_yarls(url: str) -> None:
    """parse_url takes plain URLs without yarl: every part the curl client reads is what
    yarl gives, whatever the URL; the rest goes to yarl (which may refuse it)."""
    try:
        parsed = parse_url(url)
    except (ValueError, TypeError, IndexError):
        return  # not plain, and yarl refused it (choose_address: "url:invalid")
    if isinstance(parsed, _PlainURL):
        assert _yarl_parts(parsed) == _yarl_parts(URL(url))


def test_plain_url_examples() -> None:
    plain = [
        "http://h00001.test:8080/p/0001.html",
        "https://a.b-c.test/x?y=1&z=/?q",
        "http://127.0.0.1:99/",
        "http://xn--bcher-kva.test/a;b=c",
    ]
    for url in plain:
        assert isinstance(parse_url(url), _PlainURL), url
        assert _yarl_parts(parse_url(url)) == _yarl_parts(URL(url))
    for url in (
        "http://a.test/./x",
        "http://a.test/%7e",
        "http://A.test/",
        "http://a.test:80/",
        "http://a.test",
        "http://u@a.test/",
        "http://a.test/#f",
        "http://[::1]/",
    ):
        assert isinstance(parse_url(url), URL), url
