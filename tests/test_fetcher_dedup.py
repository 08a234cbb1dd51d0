"""Fetcher.complete with a content index: revisits, their links, near copies."""

from __future__ import annotations

import random
from pathlib import Path

from drumbeat.fetch.response import FetchResponse
from drumbeat.fetcher import Fetcher, open_content_index
from drumbeat.queue.base import FetchItem
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings
from drumbeat.store.warc import WarcWriter, iter_records

_WORDS = random.Random(1).choices([f"word{i}" for i in range(2000)], k=600)
PAGE = f"<html><body><p>{' '.join(_WORDS)}</p><a href='/next'>n</a></body></html>".encode()
PAGE_TOO = PAGE.replace(b"</p>", b" posted today</p>")  # a near copy


def _fetched(index: int, url: str, body: bytes = PAGE) -> tuple:
    resp = FetchResponse(
        url=url,
        ip="127.0.0.1",
        fetch_time=1_700_000_000.0 + index,
        status=200,
        request_head=b"GET / HTTP/1.1\r\n\r\n",
        response_head=b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n",
        body=body,
        decoded=body,
        content_type="text/html",
    )
    return 0, index, FetchItem(index, url, "127.0.0.1"), resp


def _complete(tmp_path: Path, settings: Settings, batches: list[list[tuple]]) -> list:
    warc = WarcWriter(tmp_path / "warc")
    content = open_content_index(settings, tmp_path / "content.lmdb")
    fetcher = Fetcher(settings, LocalTaskQueue(), None, warc, content=content)  # type: ignore[arg-type]
    results = [r for batch in batches for r in fetcher.complete(batch)]
    warc.close()
    assert content is not None
    content.close()
    assert fetcher.stage_s["dedup"] > 0
    return results


def test_a_copy_is_a_revisit_whose_links_are_known_but_its_own_url_again_is_parsed(
    tmp_path: Path,
) -> None:
    first, copy, again, elsewhere = _complete(
        tmp_path,
        Settings(),
        [
            [_fetched(0, "http://a.test/")],
            [_fetched(1, "http://a.test/?session=7"), _fetched(2, "http://a.test/")],
            [_fetched(3, "http://b.test/")],
        ],
    )
    assert first.log is not None and "revisit_of" not in first.log and first.found is not None
    assert copy.log is not None and copy.log["revisit_of"] == "http://a.test/"
    assert copy.found is None  # its links resolve as the first copy's did
    # The same URL again (its first result lost with a killed fetcher): a revisit, and
    # its links extracted again.
    assert again.log is not None and again.log["revisit_of"] == "http://a.test/"
    assert again.found is not None and again.found.urls() == ["http://a.test/next"]
    # A copy on another host: a revisit, but its relative links lead elsewhere.
    assert elsewhere.log is not None and elsewhere.log["revisit_of"] == "http://a.test/"
    assert elsewhere.found is not None and elsewhere.found.urls() == ["http://b.test/next"]
    kinds = [r.rec_type for p in (tmp_path / "warc").glob("*.warc.gz") for r in iter_records(p)]
    assert kinds.count("response") == 1 and kinds.count("revisit") == 3


def test_copies_within_one_batch_and_follow_links_and_near_copies(tmp_path: Path) -> None:
    settings = Settings(dedup_follow_links=True, near_dup=True)
    first, copy, near = _complete(
        tmp_path,
        settings,
        [
            [
                _fetched(0, "http://a.test/"),
                _fetched(1, "http://b.test/"),
                _fetched(2, "http://c.test/", PAGE_TOO),
            ]
        ],
    )
    assert first.log is not None and "revisit_of" not in first.log
    assert copy.log is not None and copy.log["revisit_of"] == "http://a.test/"
    assert copy.found is not None and copy.found.urls() == ["http://b.test/next"]
    assert near.log is not None and "revisit_of" not in near.log
    assert near.log["near_dup_of"] == "http://a.test/"
    assert "near_dup_of" not in first.log


def test_an_index_that_does_not_open_means_no_duplicate_detection(tmp_path: Path) -> None:
    (tmp_path / "content.lmdb").write_text("a file where the index's directory goes")
    assert open_content_index(Settings(), tmp_path / "content.lmdb") is None
    assert open_content_index(Settings(dedup=False), tmp_path / "elsewhere") is None


def test_revisits_of_the_schedule_are_revisit_records_with_or_without_dedup(
    tmp_path: Path,
) -> None:
    from warcio.archiveiterator import ArchiveIterator

    from drumbeat.revisit.revisits import digest64
    from drumbeat.store.warc import IDENTICAL_PAYLOAD_DIGEST, SERVER_NOT_MODIFIED

    for dedup in (False, True):
        out = tmp_path / str(dedup)
        settings = Settings(revisit=True, dedup=dedup)
        first = _fetched(0, "http://a.test/")
        same, changed, not_modified = (
            _fetched(1, "http://a.test/"),
            _fetched(2, "http://b.test/", PAGE_TOO),
            _fetched(3, "http://c.test/", b""),
        )
        for _, _, item, _ in (same, changed, not_modified):
            item.etag, item.revisit_digest = '"e"', digest64(PAGE)
            item.revisit_date = "2023-11-14T22:13:20Z"
        nm = not_modified[3]
        nm.status, nm.response_head = 304, b'HTTP/1.1 304 Not Modified\r\nETag: "e"\r\n\r\n'
        nm.headers = [("ETag", '"e"')]
        warc = WarcWriter(out / "warc")
        content = open_content_index(settings, out / "content.lmdb")
        fetcher = Fetcher(settings, LocalTaskQueue(), None, warc, content=content)  # type: ignore[arg-type]
        results = fetcher.complete([first]) + fetcher.complete([same, changed, not_modified])
        warc.close()
        if content is not None:
            content.close()
        assert [r.digest for r in results] == [
            digest64(PAGE),
            digest64(PAGE),
            digest64(PAGE_TOO),
            0,
        ]
        assert results[3].etag == '"e"'
        records = []
        for path in sorted((out / "warc").glob("*.warc.gz")):
            with path.open("rb") as f:
                records += [
                    r.rec_headers
                    for r in ArchiveIterator(f)
                    if r.rec_type in ("response", "revisit")
                ]
        # One record each: the first and the changed page in full, the others revisits.
        assert [h.get_header("WARC-Type") for h in records] == [
            "response", "revisit", "response", "revisit",
        ]  # fmt: skip
        assert records[1].get_header("WARC-Profile") == IDENTICAL_PAYLOAD_DIGEST
        assert records[1].get_header("WARC-Refers-To-Target-URI") == "http://a.test/"
        assert records[3].get_header("WARC-Profile") == SERVER_NOT_MODIFIED
        assert records[3].get_header("WARC-Refers-To-Date") == "2023-11-14T22:13:20Z"
        assert records[3].get_header("WARC-Payload-Digest") is None
