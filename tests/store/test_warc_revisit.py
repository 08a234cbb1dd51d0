"""Revisit records (WARC 1.1 profiles), read back by warcio."""

from __future__ import annotations

from pathlib import Path

import pytest

from drumbeat.fetch.response import FetchResponse
from drumbeat.store.warc import (
    IDENTICAL_PAYLOAD_DIGEST,
    SERVER_NOT_MODIFIED,
    Revisit,
    WarcWriter,
    iter_records,
    sha1_label,
    warc_date,
)

REQUEST_HEAD = b"GET /p HTTP/1.1\r\nHost: example.test\r\n\r\n"
BODY = b"<html><body>the same page</body></html>"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(BODY)


def _records(directory: Path) -> list:
    [path] = sorted(directory.glob("*.warc.gz"))
    return [r for r in iter_records(path) if r.rec_type != "warcinfo"]


def test_identical_payload_revisit_reads_back(tmp_path: Path) -> None:
    first, second = (
        FetchResponse(
            url, ip, fetch_time, 200, request_head=REQUEST_HEAD, response_head=HEAD, body=BODY
        )
        for url, ip, fetch_time in [
            ("http://a.test/", "127.0.0.1", 1_700_000_000.5),
            ("http://b.test/copy", "127.0.0.2", 1_700_000_100.25),
        ]
    )
    digest = sha1_label(BODY)
    revisit = Revisit(IDENTICAL_PAYLOAD_DIGEST, first.url, warc_date(first.fetch_time), digest)
    with WarcWriter(tmp_path) as writer:
        writer.write_fetches([first, second], revisits=[None, revisit], digests=[digest, digest])
    response, req1, rev, req2 = _records(tmp_path)
    assert (response.rec_type, req1.rec_type, rev.rec_type, req2.rec_type) == (
        "response",
        "request",
        "revisit",
        "request",
    )
    assert response.content == BODY
    assert rev.header("WARC-Target-URI") == "http://b.test/copy"
    assert rev.header("WARC-Profile") == IDENTICAL_PAYLOAD_DIGEST
    assert rev.header("WARC-Refers-To-Target-URI") == "http://a.test/"
    assert rev.header("WARC-Refers-To-Date") == response.header("WARC-Date")
    assert rev.header("WARC-Payload-Digest") == response.header("WARC-Payload-Digest") == digest
    assert rev.header("WARC-IP-Address") == "127.0.0.2"
    assert rev.http_headers is not None
    assert rev.http_headers.get_statuscode() == "200"
    assert rev.http_headers.get_header("Content-Type") == "text/html"
    assert rev.content == b""  # no payload
    assert req2.header("WARC-Concurrent-To") == rev.header("WARC-Record-ID")


def test_server_not_modified_revisit(tmp_path: Path) -> None:
    head = b'HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n'
    with WarcWriter(tmp_path) as writer:
        location = writer.write_revisit(
            "http://a.test/",
            ip=None,
            request_head=REQUEST_HEAD,
            response_head=head,
            fetch_time=1_700_000_000.0,
            revisit=Revisit(
                SERVER_NOT_MODIFIED,
                "http://a.test/",
                "2023-11-14T22:13:20.000000Z",
                refers_to="<urn:uuid:12345678-1234-5678-1234-567812345678>",
            ),
        )
    rev, request = _records(tmp_path)
    assert rev.offset == location.offset
    assert rev.header("WARC-Profile") == SERVER_NOT_MODIFIED
    assert rev.header("WARC-Refers-To") == "<urn:uuid:12345678-1234-5678-1234-567812345678>"
    assert rev.header("WARC-Payload-Digest") is None
    assert rev.http_headers is not None and rev.http_headers.get_statuscode() == "304"
    assert request.rec_type == "request"


def test_identical_payload_revisit_needs_digest() -> None:
    with pytest.raises(ValueError, match="payload_digest"):
        Revisit(IDENTICAL_PAYLOAD_DIGEST, "http://a.test/", "2023-11-14T22:13:20Z")
