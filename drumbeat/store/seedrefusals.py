"""Seeds refused for a reason the operator can fix, kept so that a later run tries them again.

URL-seen remembers every URL it was given, so a seed refused once (a loopback address
without ``--allow-loopback``, a name DNS could not resolve) would never be crawled again,
whatever flags a rerun gives. Instead, the seeds refused for such a reason are written to
``DIR/refused_seeds.jsonl`` and each later run sends them past URL-seen again
(:meth:`drumbeat.manager.Manager.readmit`), with their origins' refusals forgotten: the
address policy and DNS of that run decide anew. A seed leaves the file once a run ends
cleanly without refusing it (it was fetched, or waits in that run's checkpoint).

Format: UTF-8 JSON lines ``{"url": URL, "reason": REASON}``, appended as refusals happen
(flushed, fsynced with each checkpoint) and rewritten, atomically, at the end of a run to
hold that run's refusals only. After a crash the file holds the refusals of the runs
since the last clean end, which the next run tries again. At most
``MAX_RECORDED`` seeds are kept a run: a seed list is the operator's, so this bounds
only the pathological.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import IO

from drumbeat.store import durable
from drumbeat.store.crawllog import CrawlLog

FILE_NAME = "refused_seeds.jsonl"
MAX_RECORDED = 100_000

# Reasons an operator fixes with a flag or the network, and what to say about each.
_HINTS = {
    "guard:loopback": "loopback address (use --allow-loopback)",
    "guard:private": "private address (use --allow-private)",
    "guard:link_local": "link-local address (use --allow-private)",
    "dns:nxdomain": "DNS: no such host name (check the name, or --dns-server)",
    "dns:noanswer": "DNS: the name has no address (check the name, or --dns-server)",
    "dns:servfail": "DNS: the server failed (check the network, or --dns-server)",
    "dns:timeout": "DNS: no answer in time (check the network, or --dns-server)",
    "dns:error": "DNS lookup failed (check the network, or --dns-server)",
}


def fixable(reason: str) -> bool:
    """Whether a seed dropped for ``reason`` may succeed on a rerun (see the module doc)."""
    return reason in _HINTS


def describe(reason: str) -> str:
    return _HINTS.get(reason, reason)


class SeedRefusals:
    """The refused seeds of earlier runs (``pending``) and this run's, in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self.pending: dict[str, str] = _read(self.path)  # url -> reason, earlier runs
        self.refused: dict[str, str] = {}  # this run's refused seeds (fixable or not)
        self.reasons: Counter[str] = Counter()
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")

    def note(self, url: str, reason: str) -> None:
        """A seed was dropped for ``reason`` before any fetch."""
        if not (fixable(reason) or reason.startswith("guard:")) or url in self.refused:
            return
        if len(self.refused) >= MAX_RECORDED:
            return
        self.refused[url] = reason
        self.reasons[reason] += 1
        if fixable(reason):
            self._file.write(json.dumps({"url": url, "reason": reason}) + "\n")
            self._file.flush()

    def sync(self) -> None:
        """Make the refusals noted so far durable (with the checkpoint's stores)."""
        self._file.flush()
        durable.fsync(self._file.fileno())

    def finish(self) -> None:
        """The run ended cleanly: the file keeps this run's fixable refusals only."""
        self._file.close()
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for url, reason in self.refused.items():
                if fixable(reason):
                    f.write(json.dumps({"url": url, "reason": reason}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        durable.fsync_dir(self.path.parent)

    def close(self) -> None:
        self._file.close()

    def report(self, tried: int) -> str | None:
        """One line on this run's refused seeds, out of ``tried`` seeds; None if none."""
        n = len(self.refused)
        if not n:
            return None
        why = ", ".join(
            describe(r) if len(self.reasons) == 1 else f"{k} {describe(r)}"
            for r, k in self.reasons.most_common()
        )
        head = f"all {n} seeds were" if n >= tried else f"{n} of {tried} seeds were"
        if n == 1 and tried <= 1:
            head = "the seed was"
        return f"{head} refused: {why}"


class SeedWatchingLog(CrawlLog):
    """The crawl log, telling ``refusals`` of every seed (depth 0) dropped unfetched."""

    refusals: SeedRefusals | None = None

    def append_drop(
        self, time: float, url: str, depth: int, via: str | None, reason: str, ip: str | None = None
    ) -> None:
        super().append_drop(time, url, depth, via, reason, ip)
        if depth == 0 and self.refusals is not None:
            self.refusals.note(url, reason)


def _read(path: Path) -> dict[str, str]:
    seeds: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return seeds
    for line in lines:
        try:
            entry = json.loads(line)
            url, reason = entry["url"], entry["reason"]
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line after a crash
        if isinstance(url, str) and isinstance(reason, str) and len(seeds) < MAX_RECORDED:
            seeds[url] = reason
    return seeds
