from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.store.crawllog import CrawlLog, read_crawl_log


def entry(i: int, **extra: object) -> dict[str, object]:
    return {
        "time": 1_700_000_000.5 + i,
        "url": f"http://example.test/p{i}",
        "kind": "page",
        "status": 200,
        "error": None,
        "bytes": 1000 + i,
        "content_type": "text/html",
        "fetch_ms": 12.5,
        "ip": "127.0.0.1",
        "depth": i % 4,
        "via": None,
        "truncated": False,
        "warc": f"a.warc.gz:{i * 100}",
        **extra,
    }


def test_round_trip_keeps_extra_keys(tmp_path: Path) -> None:
    path = tmp_path / "crawl.log"
    entries = [entry(i) for i in range(500)] + [entry(500, task="t1", url="http://ü.test/ä")]
    with CrawlLog(path) as log:
        for e in entries:
            log.append(e)
    assert log.repaired_bytes == 0
    assert log.lines_written == len(entries)
    reader = read_crawl_log(path)
    assert list(reader) == entries
    assert (reader.malformed, reader.torn_bytes) == (0, 0)


def test_reopen_appends(tmp_path: Path) -> None:
    path = tmp_path / "crawl.log"
    with CrawlLog(path) as log:
        log.append(entry(0))
    with CrawlLog(path) as log:
        log.append(entry(1))
    assert [e["url"] for e in read_crawl_log(path)] == [entry(0)["url"], entry(1)["url"]]


def test_buffered_until_flush(tmp_path: Path) -> None:
    path = tmp_path / "crawl.log"
    log = CrawlLog(path)
    log.append(entry(0))
    assert path.read_bytes() == b""
    log.flush()
    assert path.read_bytes().count(b"\n") == 1
    log.sync()
    log.close()
    log.close()


@pytest.mark.parametrize("torn", [b'{"time": 1.0, "url": "http://x', b"{", b"no newline"])
def test_torn_last_line_is_cut_on_open(tmp_path: Path, torn: bytes) -> None:
    path = tmp_path / "crawl.log"
    with CrawlLog(path) as log:
        log.append(entry(0))
        log.append(entry(1))
    whole = path.read_bytes()
    path.write_bytes(whole + torn)

    reader = read_crawl_log(path)
    assert len(list(reader)) == 2
    assert reader.torn_bytes == len(torn)

    with CrawlLog(path) as log:
        assert log.repaired_bytes == len(torn)
        log.append(entry(2))
    assert path.read_bytes() == whole + json.dumps(entry(2), separators=(",", ":")).encode() + b"\n"


def test_torn_only_line_and_long_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "crawl.log"
    path.write_bytes(b"x" * 200_000)  # longer than one backwards-scan chunk
    assert CrawlLog(path).repaired_bytes == 200_000
    assert path.read_bytes() == b""
    path.write_bytes(b"{}\n" + b"y" * 150_000)
    assert CrawlLog(path).repaired_bytes == 150_000
    assert path.read_bytes() == b"{}\n"


def test_malformed_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "crawl.log"
    good = json.dumps(entry(0)).encode()
    path.write_bytes(
        b"\n".join([good, b"not json", b"[1, 2]", b"", b"\xff\xfe", b'"str"', good]) + b"\n"
    )
    reader = read_crawl_log(path)
    assert len(list(reader)) == 2
    assert reader.malformed == 5
    assert len(list(reader)) == 2
    assert reader.malformed == 5  # counts restart with each iteration


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    reader = read_crawl_log(tmp_path / "nope.log")
    assert list(reader) == []


def test_non_json_values_are_refused(tmp_path: Path) -> None:
    with CrawlLog(tmp_path / "crawl.log") as log:
        with pytest.raises(ValueError):
            log.append(entry(0, fetch_ms=math.nan))
        with pytest.raises(TypeError):
            log.append(entry(0, via=object()))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.dictionaries(st.text(), json_values, max_size=5), max_size=20))
def test_any_json_objects_round_trip(
    tmp_path_factory: pytest.TempPathFactory, entries: list[dict[str, object]]
) -> None:
    path = tmp_path_factory.mktemp("log") / "crawl.log"
    with CrawlLog(path) as log:
        for e in entries:
            log.append(e)
    assert list(read_crawl_log(path)) == entries


@settings(max_examples=200, deadline=None)
@given(
    when=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    url=st.text(),
    via=st.none() | st.text(),
    ip=st.none() | st.text(),
    reason=st.text(min_size=1),
    depth=st.integers(min_value=0, max_value=10_000),
)
def test_a_drop_line_is_the_line_append_writes(
    tmp_path_factory: pytest.TempPathFactory,
    when: float,
    url: str,
    via: str | None,
    ip: str | None,
    reason: str,
    depth: int,
) -> None:
    """append_drop's template gives the bytes append() gives for the same entry."""
    directory = tmp_path_factory.mktemp("drop")
    with CrawlLog(directory / "a.log") as by_dict, CrawlLog(directory / "b.log") as by_template:
        by_dict.append(
            {
                "time": when,
                "url": url,
                "kind": "page",
                "status": None,
                "error": reason,
                "bytes": 0,
                "content_type": None,
                "fetch_ms": None,
                "ip": ip,
                "depth": depth,
                "via": via,
                "truncated": None,
                "warc": None,
            }
        )
        by_template.append_drop(when, url, depth, via, reason, ip)
    assert (directory / "b.log").read_bytes() == (directory / "a.log").read_bytes()
