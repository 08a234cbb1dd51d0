"""The manager's disk structures, opened once at a checkpoint's commits, and where the
crawl's dropped URLs are recorded."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, cast

import numpy as np

from drumbeat.checkpoint import CheckpointMeta
from drumbeat.frontier.beast import Beast, BeastState
from drumbeat.frontier.diskqueue import DiskQueue, QueueState
from drumbeat.frontier.order import policy_for
from drumbeat.frontier.pldgraph import GraphManifest, PLDIndegree
from drumbeat.frontier.qr import RobotsWaitQueue, WaitQueueState
from drumbeat.frontier.robots import RobotsManifest, RobotsStore
from drumbeat.frontier.urlseen import DrumURLSeen, SeenManifest
from drumbeat.revisit.revisits import RevisitsState
from drumbeat.settings import Settings
from drumbeat.store.crawllog import CrawlLog


def beast_host_cap(s: Settings) -> int:
    """URLs of one host per BEAST queue: B0·τh/τh_min, the most a host's delay floor lets
    it be fetched faster than a long-tail host (IRLbot couples budget and delay); 0 (no
    cap) when hosts have no delay to bound their rate. A floor above τh does not apply
    (frontier.politeness.scaled_delay): the cap is then B0, which a host at τh fetches
    in a BEAST turn of B0·τh."""
    if s.host_delay_s <= 0 or s.host_delay_min_s <= 0:
        return 0
    floor = min(s.host_delay_min_s, s.host_delay_s)
    return math.ceil(s.budget_default * s.host_delay_s / floor)


class FrontierState(TypedDict, total=False):
    """A checkpoint's ``frontier``: the commits of the frontier's stores and what the
    robots gate and the revisits keep (a checkpoint of a crawl without revisits has no
    ``revisits``)."""

    beast: BeastState
    robots: RobotsManifest
    qr: WaitQueueState
    qr_retry: WaitQueueState
    robots_todo: QueueState
    robots_working: list[str]  # origins whose robots.txt was being fetched
    robots_failures: dict[str, int]  # origin -> robots.txt fetches failed in a row
    revisits: RevisitsState


@dataclass(frozen=True, slots=True)
class Stores:
    """Every disk structure of the crawl, open."""

    seen: DrumURLSeen
    plds: PLDIndegree
    beast: Beast
    robots: RobotsStore
    qr: RobotsWaitQueue
    qr_retry: RobotsWaitQueue  # URLs of origins whose robots.txt failed
    robots_todo: DiskQueue  # origins whose robots.txt is to be fetched

    @classmethod
    def open(
        cls,
        s: Settings,
        meta: CheckpointMeta | None,
        *,
        clock: Callable[[], float],
        on_indegree: Callable[[list[str], list[int]], None],
        rebudget: Callable[[list[bytes]], tuple[list[int], list[int], list[int]]],
        budgets_of: Callable[[np.ndarray], list[int]],
        admit_for: Callable[[RobotsStore], Callable[[bytes], bool]],
        on_seen_round: Callable[[], None],
    ) -> Stores:
        """Open the stores at ``meta``'s commits (None: a new crawl). BEAST's callbacks
        place URLs by their STAR budget (``rebudget``, ``budgets_of``) and drop those
        their origin's robots rules disallow (``admit_for`` the robots store); URL-seen
        calls ``on_seen_round`` from its round's thread when a round has merged."""
        d = s.state_dir
        if d is None:
            raise ValueError("the manager needs a state directory")
        # JSON read back from the checkpoint: each store checks its commit's format.
        f = cast("FrontierState", (meta.frontier if meta is not None else None) or {})
        # Merge rounds in the background: a large round takes seconds, and the loop that
        # feeds the fetchers must not wait for it. The DRUMs are fsynced at commits only:
        # a crawl always reopens them at a checkpoint's commit, never at a later round,
        # and each round's fsyncs held the loop up behind the WARC writes
        # (docs/benchmarks.md).
        seen = DrumURLSeen(
            d / "urlseen",
            ram_bytes=s.urlseen_ram_bytes,
            manifest=cast("SeenManifest | None", None if meta is None else meta.urlseen_manifest),
            background=True,
            on_round_done=on_seen_round,
            fsync="commit",
            cache_bytes=s.urlseen_cache_bytes,
        )
        plds = PLDIndegree(
            d / "pldgraph",
            ram_bytes=s.pld_ram_bytes,
            manifest=cast("GraphManifest | None", None if meta is None else meta.pld_manifest),
            on_indegree=on_indegree,
            background=True,
            fsync="commit",
        )
        robots = RobotsStore(
            d / "robots",
            robots_agent=s.robots_agent,
            expiry_s=s.robots_expiry_s,
            retry_s=s.robots_retry_s,
            max_attempts=s.robots_max_attempts,
            ram_entries=s.robots_ram_entries,
            drum_ram_bytes=s.robots_ram_bytes,
            manifest=f.get("robots"),
            fsync="commit",  # its DRUMs, as above
        )
        beast = Beast(
            d / "frontier" / "beast",
            state=f.get("beast"),
            queues=s.beast_queues,
            max_queues=s.beast_max_queues,
            pld_slots=s.beast_pld_slots,
            host_cap=beast_host_cap(s),
            host_slots=s.beast_host_slots,
            rebudget=rebudget,
            budgets_of=budgets_of,
            turn_s=s.beast_turn(),
            clock=clock,
            admit=admit_for(robots),
            order=policy_for(s),
        )
        qr = RobotsWaitQueue(
            d / "frontier" / "qr", state=f.get("qr"), max_wait_s=s.robots_wait_max_s, clock=clock
        )
        qr_retry = RobotsWaitQueue(
            d / "frontier" / "qr_retry",
            state=f.get("qr_retry"),
            max_wait_s=s.robots_retry_s,
            min_wait_s=s.robots_retry_s,
            clock=clock,
        )
        todo = DiskQueue(d / "frontier" / "robots_todo", state=f.get("robots_todo"))
        return cls(seen, plds, beast, robots, qr, qr_retry, todo)


# The last drops and fetch failures kept for the operator (the dashboard's recent errors).
RECENT_PROBLEMS = 30


class Drops:
    """Counts and logs the URLs the crawl gives up on, with the reason; keeps the last
    few of them and of the fetches that failed in :attr:`recent`."""

    def __init__(self, crawl_log: CrawlLog, counters: Counter[str]) -> None:
        self.crawl_log = crawl_log
        self.counters = counters
        # (wall time, "dropped" or "failed", URL, reason), the newest last.
        self.recent: deque[tuple[float, str, str, str]] = deque(maxlen=RECENT_PROBLEMS)
        # Told of each drop (url, reason): with revisits, a revisit dropped is kept in
        # the schedule (manager.revisiting). None: no call.
        self.on_drop: Callable[[str, str], None] | None = None

    def drop(
        self, url: str, depth: int, via: str | None, reason: str, *, ip: str | None = None
    ) -> None:
        self.counters[f"dropped.{reason}"] += 1
        now = time.time()
        self.crawl_log.append_drop(now, url, depth, via, reason, ip)
        self.recent.append((now, "dropped", url, reason))
        if self.on_drop is not None:
            self.on_drop(url, reason)

    def note_failure(self, url: str, reason: str) -> None:
        """A fetch of ``url`` failed (it may be retried)."""
        self.recent.append((time.time(), "failed", url, reason))
