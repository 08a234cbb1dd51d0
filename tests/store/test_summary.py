from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from drumbeat.store.crawllog import CrawlLog
from drumbeat.store.summary import (
    _DistinctCounter,
    _Refetches,
    note_run_end,
    note_run_start,
    render_summary,
    revisit_summary,
    summarize,
)
from drumbeat.store.warc import WarcWriter


def line(t: float, url: str, status: int | None, error: str | None = None, **kw: object) -> dict:
    return {
        "time": t,
        "url": url,
        "kind": kw.pop("kind", "page"),
        "status": status,
        "error": error,
        "bytes": kw.pop("bytes", 0),
        "content_type": None,
        "fetch_ms": 1.0,
        "ip": None,
        "depth": 0,
        "via": None,
        "truncated": kw.pop("truncated", False),
        "warc": None,
        **kw,
    }


def write_synthetic_crawl(state_dir: Path) -> None:
    entries = [
        line(100.0, "http://a.test/robots.txt", 200, kind="robots", bytes=50),
        line(100.5, "http://b.test/robots.txt", None, "dns:nxdomain", kind="robots"),
        line(101.0, "http://a.test/", 200, bytes=1000, links_cut="max_links"),
        line(102.0, "http://a.test/x", 404, bytes=10),
        line(103.0, "http://a.test/", 200, bytes=1000),  # a re-fetch: not a new URL
        line(104.0, "http://c.test:8080/big", 200, bytes=5000, truncated=True, links_cut="bytes"),
        line(105.0, "http://c.test/slow", None, "timeout"),
        line(106.0, "http://c.test/no", None, "robots_disallowed"),
        line(110.0, "http://d.test/moved", 301, bytes=0, extra_key="kept"),
    ]
    with CrawlLog(state_dir / "crawl.log") as log:
        for e in entries:
            log.append(e)
    with open(state_dir / "crawl.log", "ab") as f:
        f.write(b"not json\n" + b'{"time": 200, "url": "http://torn')


def test_counts_on_a_synthetic_log(tmp_path: Path) -> None:
    write_synthetic_crawl(tmp_path)
    with WarcWriter(tmp_path / "warc") as writer:
        writer.write_fetch(
            "http://a.test/",
            ip="127.0.0.1",
            request_head=b"GET / HTTP/1.1\r\n\r\n",
            response_head=b"HTTP/1.1 200 OK\r\n\r\n",
            body=b"hi",
            truncated=False,
            fetch_time=101.0,
        )
    (tmp_path / "warc" / "notes.txt").write_text("not a warc")

    counters = {
        "dropped:offsite": 7,
        "dropped.exclude": 2,
        "links_dropped.exclude": 5,
        "links_dropped.too_long": 1,
        "fetches": 6,
    }
    summary = summarize(tmp_path, counters)

    warc_file = next((tmp_path / "warc").glob("*.warc.gz"))
    assert summary == {
        "pages": 5,
        "ok": 3,
        "refetched_after_crash": 0,
        "runs": 1,
        "distinct_urls_fetched": 4,
        "bytes": 50 + 1000 + 10 + 1000 + 5000,
        "status_counts": {"200": 3, "301": 1, "404": 1},
        "errors": {"dns:nxdomain": 1, "timeout": 1, "robots_disallowed": 1},
        "robots_fetches": 2,
        "truncated": 1,
        "hosts": 4,
        "first_time": 100.0,
        "last_time": 110.0,
        "duration_s": 10.0,
        "pages_per_s": 0.5,
        "warc_files": 1,
        "warc_bytes": warc_file.stat().st_size,
        "log_lines": 9,
        "log_malformed_lines": 1,
        "log_torn_bytes": len(b'{"time": 200, "url": "http://torn'),
        "links_cut": {"max_links": 1, "bytes": 1},
        "counters": counters,
        # Links dropped before URL-seen and URLs dropped later, by reason, most first.
        "drops": {"exclude": {"links": 5, "urls": 2}, "too_long": {"links": 1, "urls": 0}},
    }
    json.dumps(summary)  # `drumbeat stats --json` prints it as is


def test_empty_state_dir(tmp_path: Path) -> None:
    summary = summarize(tmp_path)
    assert summary["pages"] == 0
    assert summary["hosts"] == 0
    assert summary["first_time"] is None
    assert summary["pages_per_s"] is None
    assert summary["warc_files"] == 0
    assert "counters" not in summary


def test_mistyped_fields_are_not_fatal(tmp_path: Path) -> None:
    with CrawlLog(tmp_path / "crawl.log") as log:
        log.append({"url": 5, "status": "200", "bytes": "x", "time": "now", "truncated": 1})
        log.append({"url": "http://[bad/", "status": 200, "error": None})
        log.append({})
    summary = summarize(tmp_path)
    assert summary["log_lines"] == 3
    assert summary["pages"] == 1
    assert summary["distinct_urls_fetched"] == 1
    assert summary["hosts"] == 0


def test_render_summary(tmp_path: Path) -> None:
    write_synthetic_crawl(tmp_path)
    console = Console(record=True, width=100)
    render_summary(summarize(tmp_path, {"dropped:offsite": 7}), console)
    text = console.export_text()
    for expected in ("pages fetched", "404", "dns:nxdomain", "dropped:offsite", "1 malformed"):
        assert expected in text


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1) | st.integers(0, 20), max_size=60))
def test_distinct_counter_matches_a_set(values: list[int]) -> None:
    counter = _DistinctCounter(chunk_items=7)
    for v in values:
        counter.add(v)
    assert counter.count() == len(set(values))


def test_a_page_fetched_again_after_a_crash_counts_once_and_gaps_are_not_duration(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crawl.log"
    note_run_start(tmp_path, 0)
    with CrawlLog(path) as log:
        for t, url in (
            (100.0, "http://a.test/"),
            (105.0, "http://a.test/b"),
            (110.0, "http://a.test/c"),
        ):
            log.append(line(t, url, 200))
    # The run was killed after b and c, before its checkpoint: the next run, an hour
    # later, fetches them again, then goes on.
    note_run_start(tmp_path, path.stat().st_size)
    with CrawlLog(path) as log:
        for t, url in (
            (3700.0, "http://a.test/c"),
            (3702.0, "http://a.test/b"),
            (3705.0, "http://a.test/d"),
        ):
            log.append(line(t, url, 200))
    summary = summarize(tmp_path)
    assert summary["runs"] == 2
    assert summary["pages"] == 4 and summary["ok"] == 4
    assert summary["refetched_after_crash"] == 2
    assert summary["status_counts"] == {"200": 4}
    assert summary["duration_s"] == 10.0 + 5.0
    assert summary["pages_per_s"] == 4 / 15.0
    console = Console(record=True, width=100)
    render_summary(summary, console)
    assert "in 2 runs" in console.export_text()


def test_after_a_clean_end_a_page_fetched_again_counts_again(tmp_path: Path) -> None:
    path = tmp_path / "crawl.log"
    note_run_start(tmp_path, 0)
    with CrawlLog(path) as log:
        log.append(line(100.0, "http://a.test/", 503))
    note_run_end(tmp_path)  # a clean stop: the next run repeats nothing it did
    note_run_start(tmp_path, path.stat().st_size)
    with CrawlLog(path) as log:
        log.append(line(200.0, "http://a.test/", 200))  # the retry of the 503
    summary = summarize(tmp_path)
    assert summary["runs"] == 2
    assert summary["pages"] == 2 and summary["refetched_after_crash"] == 0
    assert summary["status_counts"] == {"200": 1, "503": 1}


def test_refetches_are_recognised_within_a_fixed_window() -> None:
    refetches = _Refetches(window=2)
    assert not any(refetches.is_refetch(v) for v in (1, 2, 3))
    refetches.run_starts()  # the window holds 2 and 3
    assert not refetches.is_refetch(1), "older than the window: not remembered"
    assert refetches.is_refetch(3)
    assert not refetches.is_refetch(3), "a page counts as re-fetched once"
    assert refetches.is_refetch(2)


def test_the_revisit_summary_counts_revisits_deferred_and_dropped(tmp_path: Path) -> None:
    counters = {"revisit.queued": 7, "revisit.deferred": 3, "revisit.dropped": 1}
    revisits = revisit_summary(counters)
    assert revisits is not None
    assert (revisits["queued"], revisits["deferred"], revisits["dropped"]) == (7, 3, 1)
    console = Console(record=True, width=120)
    render_summary(summarize(tmp_path, counters), console)
    text = console.export_text()
    assert "rescheduled" in text and "left the schedule (robots.txt)" in text
    assert revisit_summary({"fetches": 3}) is None  # a crawl without revisits
