"""Crawl summary: what ``drumbeat stats DIR`` reports, computed from the crawl log.

The log is streamed. Distinct URLs and hosts are counted exactly from 64-bit xxh3
hashes kept in numpy arrays, deduplicated per chunk of 1 Mi hashes: memory is at most
8 bytes per log line (less when URLs repeat), about 80 MB per 10 M lines, not the
size of the Python objects. A bounded sketch (HyperLogLog) would be the next step if
that ever matters.

A crawl may run several times (resumes, restarts after a crash). ``DIR/runs.jsonl`` says
where each run began in the log (:func:`note_run_start`) and whether it ended cleanly
(:func:`note_run_end`), so the duration is the sum of the runs' spans, not counting the
time between runs, and a page fetched again after a crash counts once (see
:class:`_Refetches`); after a clean end nothing is fetched twice, and a page fetched
again (a retry, a revisit) counts again.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import xxhash
from rich.console import Console
from rich.table import Table

from drumbeat.store.warc import OPEN_SUFFIX, WARC_SUFFIX

CRAWL_LOG_NAME = "crawl.log"
WARC_DIR_NAME = "warc"
RUNS_NAME = "runs.jsonl"
_CHUNK_ITEMS = 1 << 20
# Page URLs remembered from before a run's start (see _Refetches): more than a crawl
# fetches between two checkpoints at the default interval.
REFETCH_WINDOW = 1 << 20


def note_run_start(state_dir: Path, log_offset: int) -> None:
    """Record that a run starts appending to the crawl log at byte ``log_offset``.

    ``runs.jsonl``: one JSON line per run, ``{"start": epoch seconds, "log_offset": n}``.
    """
    with open(state_dir / RUNS_NAME, "a", encoding="utf-8") as f:
        f.write(json.dumps({"start": time.time(), "log_offset": log_offset}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def note_run_end(state_dir: Path) -> None:
    """Record that the run ended cleanly (``{"end": epoch seconds, "clean": true}``):
    the next run fetches nothing this one fetched (see _Refetches)."""
    with open(state_dir / RUNS_NAME, "a", encoding="utf-8") as f:
        f.write(json.dumps({"end": time.time(), "clean": True}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _run_offsets(state_dir: Path) -> dict[int, bool]:
    """The crawl-log offsets where runs after the first began, ascending, each with
    whether the run before it did not end cleanly (a crash: its last pages may be
    fetched again). Runs that recorded no end count as crashed."""
    offsets: dict[int, bool] = {}
    try:
        lines = (state_dir / RUNS_NAME).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    ended_clean = True
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if not isinstance(record, dict):
            continue
        if record.get("clean") is True:
            ended_clean = True
            continue
        offset = record.get("log_offset")
        if isinstance(offset, int):
            if offset > 0:
                offsets[offset] = offsets.get(offset, False) or not ended_clean
            ended_clean = False
    return dict(sorted(offsets.items()))


class _Refetches:
    """Recognises a page fetched again after a crash.

    A crash loses what the crawl did since its last checkpoint; the next run fetches
    those URLs again. So only a page fetched shortly before a run began can be fetched
    twice: the last REFETCH_WINDOW page URLs before each run's start are kept (hashes in
    a ring, 8 bytes each) and a page of a later run that matches one counts as a
    re-fetch, once. Memory is fixed by REFETCH_WINDOW, whatever the log's size.
    """

    def __init__(self, window: int = REFETCH_WINDOW) -> None:
        self._ring = np.zeros(window, dtype=np.uint64)
        self._filled = 0
        self._suspects = np.empty(0, dtype=np.uint64)  # sorted: the window at a run start
        self._matched = np.empty(0, dtype=bool)

    def run_starts(self) -> None:
        n = min(self._filled, len(self._ring))
        self._suspects = _sorted_unique(self._ring[:n].copy())
        self._matched = np.zeros(len(self._suspects), dtype=bool)

    def is_refetch(self, value: int) -> bool:
        """Whether the page URL of hash ``value`` repeats one from before this run."""
        self._ring[self._filled % len(self._ring)] = value
        self._filled += 1
        if not len(self._suspects):
            return False
        i = int(np.searchsorted(self._suspects, np.uint64(value)))
        if i == len(self._suspects) or self._suspects[i] != value or self._matched[i]:
            return False
        self._matched[i] = True
        return True


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

    Keys: ``pages`` (page attempts that got an HTTP response, a page fetched again after
    a crash counted once), ``ok`` (of those, 2xx), ``refetched_after_crash`` (the pages
    not counted so), ``runs`` (runs of the crawl, as ``runs.jsonl`` records them),
    ``distinct_urls_fetched`` (distinct URLs among ``pages``), ``bytes`` (body bytes
    of all attempts, robots included), ``status_counts`` ({"200": n} over pages),
    ``errors`` ({reason: n} over all attempts), ``robots_fetches`` (robots attempts),
    ``truncated``, ``hosts`` (distinct hosts with any attempt), ``first_time`` /
    ``last_time`` (epoch seconds or null), ``duration_s`` (the sum over runs of each
    run's first to last entry: the time between runs is not counted), ``pages_per_s`` (null
    without a duration), ``warc_files`` / ``warc_bytes`` (open files included),
    ``log_lines``, ``log_malformed_lines``, ``log_torn_bytes``, ``links_cut`` ({limit:
    pages} over the pages whose links a limit cut: see crawllog), and ``counters`` =
    ``extra_counters`` when given, with ``drops`` ({reason: {"links": n, "urls": m}}:
    :func:`drops_by_reason`). The result is JSON-serializable. Entries with
    missing or mistyped fields are counted as far as they can be, never fatal.
    """
    state_dir = Path(state_dir)
    reader = _LogReader(state_dir / CRAWL_LOG_NAME, _run_offsets(state_dir))
    tally = _Tally()
    for run_start, entry in reader:
        tally.add(run_start, entry)
    duration = tally.spans.total()
    warc_files, warc_bytes = _warc_usage(state_dir / WARC_DIR_NAME)
    summary: dict[str, Any] = {
        "pages": tally.pages,
        "ok": tally.ok,
        "refetched_after_crash": tally.refetched,
        "runs": reader.runs,
        "distinct_urls_fetched": tally.urls.count(),
        "bytes": tally.total_bytes,
        "status_counts": dict(sorted(tally.statuses.items())),
        "errors": dict(tally.errors.most_common()),
        "robots_fetches": tally.robots,
        "truncated": tally.truncated,
        "hosts": tally.hosts.count(),
        "first_time": tally.first_time,
        "last_time": tally.last_time,
        "duration_s": duration,
        "pages_per_s": tally.pages / duration if duration > 0 else None,
        "warc_files": warc_files,
        "warc_bytes": warc_bytes,
        "log_lines": tally.lines,
        "log_malformed_lines": reader.malformed,
        "log_torn_bytes": reader.torn_bytes,
        "links_cut": dict(tally.links_cut.most_common()),
    }
    if extra_counters is not None:
        summary["counters"] = dict(extra_counters)
        summary["drops"] = drops_by_reason(extra_counters)
        revisits = revisit_summary(extra_counters)
        if revisits is not None:
            summary["revisits"] = revisits
    return summary


def revisit_summary(counters: Mapping[str, int]) -> dict[str, Any] | None:
    """A crawl with revisits' figures (drumbeat.manager.revisiting's counters):
    ``fetched`` (revisits made), ``not_modified`` (304s), ``unchanged`` (200s with the
    payload of the last fetch), ``changed``, ``scheduled`` (revisits planned, this run),
    ``queued`` (waiting for their due time), ``deferred`` (dropped on their way by a cap,
    a block or a host refused, and rescheduled), ``dropped`` (left the schedule: robots.txt
    disallows them) and ``expected_freshness`` (the share of
    pages fresh the schedule expects, 0..1, from the policy's estimated change rates);
    None for a crawl without revisits."""
    if "revisit.queued" not in counters:
        return None
    return {
        "fetched": counters.get("revisit.fetched", 0),
        "not_modified": counters.get("revisit.not_modified", 0),
        "unchanged": counters.get("revisit.unchanged", 0),
        "changed": counters.get("revisit.changed", 0),
        "scheduled": counters.get("revisit.scheduled", 0),
        "queued": counters.get("revisit.queued", 0),
        "deferred": counters.get("revisit.deferred", 0),
        "dropped": counters.get("revisit.dropped", 0),
        "expected_freshness": counters.get("revisit.expected_freshness_bp", 0) / 10_000,
    }


def drops_by_reason(counters: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{reason: {"links": n, "urls": m}}`` from the manager's counters: links dropped
    before URL-seen (``links_dropped.REASON``: the scope rules', the fetchers' own; a link
    found on many pages counts each time) and URLs given up later (``dropped.REASON``:
    each also a crawl-log line with that ``error``), most first."""
    drops: dict[str, dict[str, int]] = {}
    for key, n in counters.items():
        kind, _, reason = key.partition(".")
        column = {"links_dropped": "links", "dropped": "urls"}.get(kind)
        if column is not None and reason and isinstance(n, int):
            drops.setdefault(reason, {"links": 0, "urls": 0})[column] += n
    return dict(sorted(drops.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])))


class _Tally:
    """What :func:`summarize` counts, one crawl-log entry at a time."""

    def __init__(self) -> None:
        self.urls = _DistinctCounter()
        self.hosts = _DistinctCounter()
        self.refetches = _Refetches()
        self.spans = _Spans()
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.links_cut: Counter[str] = Counter()
        self.lines = self.pages = self.ok = self.robots = self.truncated = 0
        self.total_bytes = self.refetched = 0
        self.first_time: float | None = None
        self.last_time: float | None = None

    def add(self, run_start: int, entry: dict[str, Any]) -> None:
        self.lines += 1
        if run_start:
            self.spans.run_starts()
            if run_start == _AFTER_CRASH:
                self.refetches.run_starts()
        url = entry.get("url")
        t = entry.get("time")
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            self.first_time = t if self.first_time is None else min(self.first_time, t)
            self.last_time = t if self.last_time is None else max(self.last_time, t)
            self.spans.add(t)
        if isinstance(url, str) and (host := _host(url)):
            self.hosts.add(_hash(host))
        if entry.get("kind") == "robots":
            self.robots += 1
        elif not self._page(url, entry.get("status")):
            return  # a page fetched again after a crash: counted once, at its first fetch
        error = entry.get("error")
        if error is not None:
            self.errors[str(error)] += 1
        size = entry.get("bytes")
        if isinstance(size, int) and not isinstance(size, bool):
            self.total_bytes += size
        if entry.get("truncated") in (True, "length", "time", "disconnect"):
            self.truncated += 1
        cut = entry.get("links_cut")
        if cut is not None:
            self.links_cut[str(cut)] += 1

    def _page(self, url: object, status: object) -> bool:
        """Count a page attempt that got a response; False for a refetch after a crash."""
        if not isinstance(status, int) or isinstance(status, bool):
            return True
        if isinstance(url, str):
            h = _hash(url)
            self.urls.add(h)
            if self.refetches.is_refetch(h):
                self.refetched += 1
                return False
        self.pages += 1
        self.statuses[str(status)] += 1
        if 200 <= status < 300:
            self.ok += 1
        return True


class _Spans:
    """The sum of each run's span: its first to its last entry time."""

    def __init__(self) -> None:
        self._done = 0.0
        self._low: float | None = None
        self._high: float | None = None

    def run_starts(self) -> None:
        self._done = self.total()
        self._low = self._high = None

    def add(self, t: float) -> None:
        self._low = t if self._low is None else min(self._low, t)
        self._high = t if self._high is None else max(self._high, t)

    def total(self) -> float:
        if self._low is None or self._high is None:
            return self._done
        return self._done + self._high - self._low


# What _LogReader says of an entry: in the same run as the one before, the first of a
# run after a clean end, the first of a run after a crash.
_SAME_RUN, _AFTER_CLEAN_END, _AFTER_CRASH = 0, 1, 2


class _LogReader:
    """``(run start, entry)`` for the crawl log's entries (dicts), streaming, with
    ``runs`` (runs met, counting the first), ``malformed`` lines and ``torn_bytes`` as
    store.crawllog.CrawlLogReader counts them. ``run_offsets``: where later runs began,
    and whether after a crash (_run_offsets)."""

    def __init__(self, path: Path, run_offsets: dict[int, bool]) -> None:
        self._path = path
        self._offsets = run_offsets
        self.runs = 0
        self.malformed = 0
        self.torn_bytes = 0

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        try:
            f = open(self._path, "rb")
        except FileNotFoundError:
            return
        offsets = iter(self._offsets.items())
        boundary, crashed = next(offsets, (None, False))
        position, new_run = 0, _SAME_RUN
        with f:
            for line in f:
                while boundary is not None and position >= boundary:
                    new_run = max(new_run, _AFTER_CRASH if crashed else _AFTER_CLEAN_END)
                    boundary, crashed = next(offsets, (None, False))
                position += len(line)
                if not line.endswith(b"\n"):
                    self.torn_bytes = len(line)
                    return
                try:
                    entry = json.loads(line)
                except ValueError:  # includes invalid UTF-8
                    self.malformed += 1
                    continue
                if not isinstance(entry, dict):
                    self.malformed += 1
                    continue
                if new_run or not self.runs:
                    self.runs += 1
                yield new_run, entry
                new_run = _SAME_RUN


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
        (
            "duration",
            f"{summary['duration_s']:,.1f} s"
            + (f" in {summary['runs']} runs" if summary["runs"] > 1 else ""),
        ),
        ("pages/s", "-" if rate is None else f"{rate:,.1f}"),
        ("WARC files", f"{summary['warc_files']:,} ({_bytes(summary['warc_bytes'])})"),
        ("log lines", f"{summary['log_lines']:,}"),
    ]
    if summary["log_malformed_lines"] or summary["log_torn_bytes"]:
        rows.append(
            (
                "log damage",
                (
                    f"{summary['log_malformed_lines']:,} malformed lines, "
                    f"{summary['log_torn_bytes']:,} torn bytes"
                ),
            )
        )
    for row in rows:
        overview.add_row(*row)
    console.print(overview)
    _print_counts(console, "HTTP status", summary["status_counts"])
    _print_counts(console, "errors", summary["errors"])
    _print_counts(console, "links cut by", summary.get("links_cut") or {})
    _print_drops(console, summary.get("drops") or {})
    revisits = summary.get("revisits")
    if revisits is not None:
        table = Table(title="revisits", show_header=False)
        table.add_column(style="bold")
        table.add_column(justify="right")
        for label, key in (
            ("revisits fetched", "fetched"),
            ("  304 not modified", "not_modified"),
            ("  200 unchanged", "unchanged"),
            ("  changed", "changed"),
            ("queued", "queued"),
            ("deferred (dropped on the way, rescheduled)", "deferred"),
            ("left the schedule (robots.txt)", "dropped"),
        ):
            table.add_row(label, f"{revisits[key]:,}")
        table.add_row("expected freshness", f"{revisits['expected_freshness']:.3f}")
        console.print(table)
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


def _print_drops(console: Console, drops: Mapping[str, Mapping[str, int]]) -> None:
    if not drops:
        return
    table = Table()
    table.add_column("dropped, by reason")
    table.add_column("links", justify="right")
    table.add_column("URLs", justify="right")
    for reason, n in drops.items():
        table.add_row(reason, f"{n['links']:,}", f"{n['urls']:,}")
    console.print(table)


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{n:,} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"
