"""Crawl summary: what ``drumbeat stats DIR`` reports, computed from the crawl log.

The log is streamed. Distinct URLs and hosts are counted exactly from 64-bit xxh3
hashes kept in numpy arrays, deduplicated per chunk of 1 Mi hashes: memory is at most
8 bytes per log line (less when URLs repeat), about 80 MB per 10 M lines, not the
size of the Python objects. A bounded sketch (HyperLogLog) would be the next step if
that ever matters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import xxhash
from rich.console import Console
from rich.table import Table

from drumbeat.store.crawllog import read_crawl_log
from drumbeat.store.warc import OPEN_SUFFIX, WARC_SUFFIX

CRAWL_LOG_NAME = "crawl.log"
WARC_DIR_NAME = "warc"
_CHUNK_ITEMS = 1 << 20


class _DistinctCounter:
    """Exact number of distinct uint64 values added; see the module docstring."""

    def __init__(self, chunk_items: int = _CHUNK_ITEMS) -> None:
        self._chunk = np.empty(chunk_items, dtype=np.uint64)
        self._filled = 0
        self._sealed: list[np.ndarray] = []

    def add(self, value: int) -> None:
        self._chunk[self._filled] = value
        self._filled += 1
        if self._filled == len(self._chunk):
            self._seal()

    def count(self) -> int:
        self._seal()
        if not self._sealed:
            return 0
        return len(_sorted_unique(np.concatenate(self._sealed)))

    def _seal(self) -> None:
        if self._filled:
            self._sealed.append(_sorted_unique(self._chunk[: self._filled].copy()))
            self._filled = 0


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    # np.unique is hash-based and ~100x slower in numpy 2.x (MEASURED.md).
    values.sort()
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _hash(text: str) -> int:
    # surrogatepass: JSON may carry lone surrogates from broken URLs.
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def summarize(state_dir: Path, extra_counters: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Summarize the crawl in ``state_dir`` (its ``crawl.log`` and ``warc/`` files).

    Keys: ``pages`` (page attempts that got an HTTP response), ``ok`` (of those, 2xx),
    ``distinct_urls_fetched`` (distinct URLs among ``pages``), ``bytes`` (body bytes
    of all attempts, robots included), ``status_counts`` ({"200": n} over pages),
    ``errors`` ({reason: n} over all attempts), ``robots_fetches`` (robots attempts),
    ``truncated``, ``hosts`` (distinct hosts with any attempt), ``first_time`` /
    ``last_time`` (epoch seconds or null), ``duration_s``, ``pages_per_s`` (null
    without a duration), ``warc_files`` / ``warc_bytes`` (open files included),
    ``log_lines``, ``log_malformed_lines``, ``log_torn_bytes``, ``links_cut`` ({limit:
    pages} over the pages whose links a limit cut: see crawllog), and ``counters`` =
    ``extra_counters`` when given. The result is JSON-serializable. Entries with
    missing or mistyped fields are counted as far as they can be, never fatal.
    """
    state_dir = Path(state_dir)
    reader = read_crawl_log(state_dir / CRAWL_LOG_NAME)
    urls = _DistinctCounter()
    hosts = _DistinctCounter()
    statuses: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    links_cut: Counter[str] = Counter()
    lines = pages = ok = robots = truncated = total_bytes = 0
    first_time: float | None = None
    last_time: float | None = None

    for entry in reader:
        lines += 1
        url = entry.get("url")
        is_robots = entry.get("kind") == "robots"
        status = entry.get("status")
        t = entry.get("time")
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            first_time = t if first_time is None else min(first_time, t)
            last_time = t if last_time is None else max(last_time, t)
        if isinstance(url, str) and (host := _host(url)):
            hosts.add(_hash(host))
        if is_robots:
            robots += 1
        elif isinstance(status, int) and not isinstance(status, bool):
            pages += 1
            statuses[str(status)] += 1
            if 200 <= status < 300:
                ok += 1
            if isinstance(url, str):
                urls.add(_hash(url))
        error = entry.get("error")
        if error is not None:
            errors[str(error)] += 1
        size = entry.get("bytes")
        if isinstance(size, int) and not isinstance(size, bool):
            total_bytes += size
        if entry.get("truncated") in (True, "length", "time", "disconnect"):
            truncated += 1
        cut = entry.get("links_cut")
        if cut is not None:
            links_cut[str(cut)] += 1

    duration = (last_time - first_time) if first_time is not None and last_time is not None else 0.0
    warc_files, warc_bytes = _warc_usage(state_dir / WARC_DIR_NAME)
    summary: dict[str, Any] = {
        "pages": pages,
        "ok": ok,
        "distinct_urls_fetched": urls.count(),
        "bytes": total_bytes,
        "status_counts": dict(sorted(statuses.items())),
        "errors": dict(errors.most_common()),
        "robots_fetches": robots,
        "truncated": truncated,
        "hosts": hosts.count(),
        "first_time": first_time,
        "last_time": last_time,
        "duration_s": duration,
        "pages_per_s": pages / duration if duration > 0 else None,
        "warc_files": warc_files,
        "warc_bytes": warc_bytes,
        "log_lines": lines,
        "log_malformed_lines": reader.malformed,
        "log_torn_bytes": reader.torn_bytes,
        "links_cut": dict(links_cut.most_common()),
    }
    if extra_counters is not None:
        summary["counters"] = dict(extra_counters)
    return summary


def _warc_usage(warc_dir: Path) -> tuple[int, int]:
    if not warc_dir.is_dir():
        return 0, 0
    files = [
        p
        for p in warc_dir.iterdir()
        if p.name.endswith((WARC_SUFFIX, WARC_SUFFIX + OPEN_SUFFIX)) and p.is_file()
    ]
    return len(files), sum(p.stat().st_size for p in files)


def render_summary(summary: Mapping[str, Any], console: Console) -> None:
    """Print ``summary`` (from :func:`summarize`) as rich tables."""
    overview = Table(title="crawl", show_header=False)
    overview.add_column(style="bold")
    overview.add_column(justify="right")
    rate = summary["pages_per_s"]
    rows = [
        ("pages fetched", f"{summary['pages']:,}"),
        ("  2xx", f"{summary['ok']:,}"),
        ("distinct URLs fetched", f"{summary['distinct_urls_fetched']:,}"),
        ("hosts", f"{summary['hosts']:,}"),
        ("robots.txt fetches", f"{summary['robots_fetches']:,}"),
        ("body bytes", _bytes(summary["bytes"])),
        ("truncated bodies", f"{summary['truncated']:,}"),
        ("duration", f"{summary['duration_s']:,.1f} s"),
        ("pages/s", "-" if rate is None else f"{rate:,.1f}"),
        ("WARC files", f"{summary['warc_files']:,} ({_bytes(summary['warc_bytes'])})"),
        ("log lines", f"{summary['log_lines']:,}"),
    ]
    if summary["log_malformed_lines"] or summary["log_torn_bytes"]:
        rows.append(
            (
                "log damage",
                f"{summary['log_malformed_lines']:,} malformed lines, "
                f"{summary['log_torn_bytes']:,} torn bytes",
            )
        )
    for row in rows:
        overview.add_row(*row)
    console.print(overview)
    _print_counts(console, "HTTP status", summary["status_counts"])
    _print_counts(console, "errors", summary["errors"])
    _print_counts(console, "links cut by", summary.get("links_cut") or {})
    _print_counts(console, "counters", summary.get("counters") or {})


def _print_counts(console: Console, title: str, counts: Mapping[str, int]) -> None:
    if not counts:
        return
    table = Table()
    table.add_column(title)
    table.add_column("count", justify="right")
    for key, n in counts.items():
        table.add_row(str(key), f"{n:,}")
    console.print(table)


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n:,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"
