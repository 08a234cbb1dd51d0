"""The dashboard's snapshot: everything the page shows, as one JSON document.

It is built at most once a second, however many pages watch (they share the bytes), and
only while one asks, so a crawl nobody watches pays nothing. What scales with the hosts
in RAM (their states, the top hosts) looks at :data:`HOSTS_SCANNED` of them at most, a
uniform sample when there are more (the counts are then scaled up and marked
``estimated``), and is redone every :data:`HOSTS_EVERY_S`.

The IRLbot cost model (Lee et al., TWEB 2009): each DRUM's measured alpha(n, R) (disk
bytes moved per byte checked, Theorem 2), the bytes it checks per page (``b l``), the disk
rate ``W`` its merges achieved (bytes moved per second of merging), and the rate of
Theorem 3 that these predict, ``S = W / (alpha b l)`` pages/s: the crawl speed at which
that DRUM's merges would take all of one disk (or thread).
"""

from __future__ import annotations

import heapq
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from drumbeat.manager.hostinfo import host_state
from drumbeat.web.status import Rates, queued_by_place

if TYPE_CHECKING:
    from drumbeat.drum import Drum
    from drumbeat.frontier.politeness import HostState
    from drumbeat.manager import Manager

SNAPSHOT_EVERY_S = 1.0
HOSTS_EVERY_S = 5.0
# Hosts looked at per host scan (a sample beyond): the scan runs in the manager's loop,
# so it is kept to a few milliseconds; the counts' error is about 1/sqrt of it.
HOSTS_SCANNED = 5_000
TOP_N = 10
RECENT_SECONDS = 10  # per-second points each snapshot carries for the charts

_rng = np.random.default_rng()


class Dashboard:
    """Builds and caches the snapshot of ``manager`` (see the module docstring)."""

    def __init__(
        self, manager: Manager, rates: Rates, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.manager = manager
        self.rates = rates
        self.clock = clock
        self._bytes = b""
        self._at = float("-inf")
        self._hosts: dict[str, Any] = {}
        self._hosts_at = float("-inf")

    def snapshot_bytes(self) -> bytes:
        """The snapshot as JSON, rebuilt when the last is a second old."""
        now = self.clock()
        if now - self._at >= SNAPSHOT_EVERY_S:
            self._bytes = json.dumps(self.snapshot(), separators=(",", ":")).encode()
            self._at = now
        return self._bytes

    def snapshot(self) -> dict[str, Any]:
        m = self.manager
        s = m.stats()
        c = m.controls.stats()
        counters = s.counters
        return {
            "time": time.time(),
            "pages_done": s.pages_done,
            "elapsed_s": round(s.elapsed_s, 1),
            "rates": self.rates.rates(),
            "recent": m.history.span("hour", last=RECENT_SECONDS),
            "bytes_fetched": counters.get("bytes_fetched", 0),
            "in_flight": s.in_flight,
            "seen": s.seen,
            "resolving": s.resolving,
            "queued": queued_by_place(m),
            "beast": _beast(m),
            "status_classes": _by_class(counters),
            "errors": _with_prefix(counters, "error."),
            "dropped": _with_prefix(counters, "dropped."),
            "recent_errors": [
                {"time": t, "kind": kind, "url": url, "reason": reason}
                for t, kind, url, reason in reversed(m.drops.recent)
            ],
            "controls": {
                "paused": c.paused,
                "pages_per_s": c.pages_per_s,
                "blocks": c.blocks,
                "checkpoint_requested": c.checkpoint_requested,
                "stopping": m.stop_reason,
            },
            **self.host_part(),
            "drums": drum_costs(m),
        }

    def host_part(self) -> dict[str, Any]:
        """Hosts in RAM by state, the top hosts by URLs queued and the top PLDs by
        in-degree with their budgets: rebuilt when the last is HOSTS_EVERY_S old (the
        snapshot and /metrics share it)."""
        now = self.clock()
        if now - self._hosts_at >= HOSTS_EVERY_S:
            self._hosts = self._build_host_part()
            self._hosts_at = now
        return self._hosts

    def _build_host_part(self) -> dict[str, Any]:
        m = self.manager
        now, paused = m.clock(), m.controls.paused
        total, sample, by_state = host_states(m)
        top = heapq.nlargest(TOP_N, sample, key=lambda h: len(h.queue))
        return {
            "hosts": {"total": total, "estimated": len(sample) < total, "by_state": by_state},
            "top_hosts": [
                {
                    "host": h.name,
                    "queued": len(h.queue),
                    "budget": h.budget,
                    "delay_s": round(h.delay_s, 3),
                    "state": "resolving"
                    if h.blocked or h.ip is None
                    else host_state(h, now, paused=paused),
                    "failure": h.failure or None,
                }
                for h in top
                if h.queue
            ],
            "top_plds": [
                {"pld": pld, "indegree": d, "budget": b} for pld, d, b in m.star.top(TOP_N)
            ],
            "default_budget": m.star.default,
        }


def host_states(m: Manager) -> tuple[int, list[HostState], dict[str, int]]:
    """The hosts in RAM, those looked at (all, or a sample of :data:`HOSTS_SCANNED`),
    and how many are in each state (hostinfo's; ``resolving`` for those waiting for
    DNS), scaled up from the sample."""
    hosts = list(m.scheduler.hosts.values())
    total = len(hosts)
    sample = hosts
    if total > HOSTS_SCANNED:
        # Drawn with replacement (numpy's, not random.sample's Python loop); duplicates
        # only weigh a host twice in the estimate.
        picks = _rng.integers(0, total, HOSTS_SCANNED).tolist()
        sample = list({id(h): h for h in map(hosts.__getitem__, picks)}.values())
    now, paused = m.clock(), m.controls.paused
    by_state: Counter[str] = Counter()
    for h in sample:
        if h.blocked or h.ip is None:
            by_state["resolving"] += 1
        else:
            by_state[host_state(h, now, paused=paused)] += 1
    scale = total / len(sample) if sample else 1.0
    return total, sample, {k: round(v * scale) for k, v in sorted(by_state.items())}


def drums(m: Manager) -> dict[str, Drum]:
    """The crawl's DRUMs by name."""
    st = m.stores
    return {
        "urlseen": st.seen.drum,
        "pld_edges": st.plds.edges,
        "pld_indegree": st.plds.indegree,
        "robots_cache": st.robots.cache,
        "robots_requested": st.robots.requested,
    }


def drum_costs(m: Manager) -> list[dict[str, Any]]:
    """Each DRUM's size, measured alpha(n, R) and Theorem 3's rate (module docstring)."""
    pages = m.pages_done
    out = []
    for name, drum in drums(m).items():
        d = drum.stats()
        moved = d.bytes_read + d.bytes_written
        busy_s = d.sort_s + d.merge_s
        per_page = moved / pages if pages else None  # alpha * b * l
        disk_bps = moved / busy_s if busy_s > 0 else None  # W
        out.append(
            {
                "name": name,
                "keys": d.keys_stored,
                "pending": d.pending,
                "ram_bytes": d.ram_bytes,
                "merges": d.merges,
                "alpha": round(d.alpha, 3),
                "checked_bytes_per_page": round(d.checked_bytes / pages, 1) if pages else None,
                "disk_bytes_per_s": round(disk_bps) if disk_bps else None,
                "sustainable_pages_per_s": round(disk_bps / per_page, 1)
                if disk_bps and per_page
                else None,
            }
        )
    return out


def _beast(m: Manager) -> dict[str, Any]:
    """BEAST's ring: its queues, the one being read and the QF queue (IRLbot §6)."""
    b = m.stores.beast.stats()
    return {"queues": b.queues, "current": b.current, "qf": b.qf_records, "turns": b.turns}


def _with_prefix(counters: dict[str, int], prefix: str) -> dict[str, int]:
    n = len(prefix)
    return {k[n:]: v for k, v in sorted(counters.items()) if k.startswith(prefix)}


def _by_class(counters: dict[str, int]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for k, v in counters.items():
        if k.startswith("status."):
            out[k[7:8] + "xx"] += v
    return dict(sorted(out.items()))
