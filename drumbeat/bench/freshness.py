"""``drumbeat bench freshness``: the average freshness and age of a collection kept by
drumbeat's revisit schedule, against uniform revisits, revisits proportional to the
change rate, Nutch's adaptive rule and the optimum for the true rates (all on simulated
time, with the same revisit bandwidth).

The collection: ``--pages`` pages on ``--sites`` sites, each changing as a Poisson
process; a site's mean rate is log-normal around once a day (sigma 1.5) and its pages'
rates log-normal around it (sigma 1); 5 % of the pages change every minute and 5 % never.
Every contender fetches ``pages / day`` pages a second (one visit a page a day on
average), served the same way: each 10-minute tick, up to its share of visits, the
earliest due first (spare visits go to the next due), so each spends the same bandwidth.

* ``drumbeat``: :mod:`drumbeat.revisit` as a crawl runs it: it knows no rates; each visit
  tells it whether the page changed (as a crawler sees from the payload digest), its
  :class:`~drumbeat.revisit.policy.RevisitPolicy` estimates the rate (site prior
  included) and plans the next visit, and the :class:`~drumbeat.revisit.duequeue.DueQueue`
  on disk holds it until then.
* ``uniform``: every page every ``pages / bandwidth`` seconds.
* ``proportional``: revisit frequency proportional to the true change rate.
* ``adaptive``: Nutch's AdaptiveFetchSchedule: the interval times ``1 - 0.2`` after a
  change, ``1 + 0.4`` after none, within [1 minute, 365 days], from one day.
* ``optimal``: Cho & Garcia-Molina's optimum for the true rates
  (:func:`drumbeat.revisit.optimal.frequencies`); ``optimal_analytic`` is its freshness by
  formula, a check on the simulation.

Freshness: the share of time a page's copy equals the live page, averaged over pages.
Age: time since the first change the copy missed (0 while fresh), in hours; the optimum
for freshness never visits the pages that change every minute, so their age grows all
run. At time 0 each copy is a random part of a day old. Both are
measured per twentieth of the run (the learning curve; the table prints every other
point) and over its last ``--tail`` share
(the figures of the JSON's ``freshness`` and ``age``, once the learners have learned).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from drumbeat.revisit.duequeue import DueQueue
from drumbeat.revisit.estimate import ChangeStats, SiteRates
from drumbeat.revisit.optimal import frequencies, freshness, solve_mu
from drumbeat.revisit.policy import RevisitPolicy

DAY = 86400.0
TICK_S = 600.0
WINDOWS = 20  # parts of the run the learning curve is measured over
FAST_RATE = 1 / 60.0
NUTCH_INC, NUTCH_DEC = 0.4, 0.2  # Nutch's db.fetch.schedule.adaptive.{inc,dec}_rate
NUTCH_MIN_S, NUTCH_MAX_S = 60.0, 365 * DAY


@dataclass
class Collection:
    rates: np.ndarray  # true change rates, changes a second
    sites: list[str]

    @classmethod
    def make(cls, pages: int, sites: int, seed: int) -> Collection:
        rng = np.random.default_rng(seed)
        site_of = rng.integers(0, sites, pages)
        site_mean = rng.lognormal(math.log(1 / DAY), 1.5, sites)
        rates = site_mean[site_of] * rng.lognormal(0.0, 1.0, pages)
        kind = rng.random(pages)
        rates[kind < 0.05] = FAST_RATE
        rates[(kind >= 0.05) & (kind < 0.10)] = 0.0
        return cls(rates, [f"site{s}.test" for s in site_of.tolist()])


@dataclass
class World:
    """The live pages and the crawler's copies: what freshness and age are measured on."""

    rates: list[float]
    rng: random.Random
    windows: list[float]  # window boundaries, seconds
    accounted: list[float] = field(default_factory=list)  # time accounted to, a page
    change: list[float] = field(default_factory=list)  # first change after the last visit
    last: list[float] = field(default_factory=list)  # the last visit
    fresh: np.ndarray = field(default_factory=lambda: np.zeros(0))  # fresh seconds, a window
    age: np.ndarray = field(default_factory=lambda: np.zeros(0))  # age-seconds, a window
    visits: np.ndarray = field(default_factory=lambda: np.zeros(0))  # visits, a window

    first_interval_s: float = DAY

    def __post_init__(self) -> None:
        # At time 0 each copy was fetched a random part of a uniform interval ago (not
        # all just now, which would flatter the first windows).
        n = len(self.rates)
        self.accounted = [0.0] * n
        self.last = [-self.first_interval_s * self.rng.random() for _ in range(n)]
        self.change = [self._next_change(i, self.last[i]) for i in range(n)]
        self.fresh = np.zeros(len(self.windows) - 1)
        self.age = np.zeros(len(self.windows) - 1)
        self.visits = np.zeros(len(self.windows) - 1)
        self.window = 0

    def _next_change(self, i: int, after: float) -> float:
        lam = self.rates[i]
        return after + self.rng.expovariate(lam) if lam > 0 else math.inf

    def _account(self, i: int, t: float) -> None:
        a, c = self.accounted[i], self.change[i]
        if c > a:
            self.fresh[self.window] += min(c, t) - a
        if c < t:  # stale since c
            lo = max(a, c)
            self.age[self.window] += ((t - c) ** 2 - (lo - c) ** 2) / 2
        self.accounted[i] = t

    def visit(self, i: int, t: float) -> tuple[bool, float]:
        """Fetch page ``i`` at ``t``: whether it changed since the last visit, and the
        interval since that visit."""
        self._account(i, t)
        changed = self.change[i] <= t
        if changed:
            self.change[i] = self._next_change(i, t)
        interval, self.last[i] = t - self.last[i], t
        self.visits[self.window] += 1
        return changed, interval

    def close_window(self) -> None:
        end = self.windows[self.window + 1]
        for i in range(len(self.rates)):
            self._account(i, end)
        self.window += 1


class Scheduler(Protocol):
    def take(self, n: int, now: float, until: float) -> list[int]: ...
    def seen(self, page: int, now: float, changed: bool, interval: float) -> None: ...


class HeapScheduler:
    """Due times in a heap (the peers' and the fixed schedules' bookkeeping)."""

    def __init__(self, first_due: list[float]) -> None:
        self.heap = [(due, i) for i, due in enumerate(first_due) if math.isfinite(due)]
        heapq.heapify(self.heap)

    def take(self, n: int, now: float, until: float) -> list[int]:
        heap = self.heap
        return [heapq.heappop(heap)[1] for _ in range(min(n, len(heap)))]

    def seen(self, page: int, now: float, changed: bool, interval: float) -> None:
        raise NotImplementedError


class FixedScheduler(HeapScheduler):
    """Each page every ``1/f`` seconds (f = 0: never), phases spread at random."""

    def __init__(self, freqs: np.ndarray, rng: random.Random) -> None:
        self.period = [1 / f if f > 0 else math.inf for f in freqs.tolist()]
        self.due = [p * rng.random() for p in self.period]
        super().__init__(self.due)

    def seen(self, page: int, now: float, changed: bool, interval: float) -> None:
        self.due[page] += self.period[page]
        heapq.heappush(self.heap, (self.due[page], page))


class NutchScheduler(HeapScheduler):
    """Nutch's AdaptiveFetchSchedule (interval x (1 - dec) on a change, x (1 + inc)
    on none, bounded), from ``start_s`` for every page."""

    def __init__(self, pages: int, start_s: float, rng: random.Random) -> None:
        self.interval = [start_s] * pages
        super().__init__([start_s * rng.random() for _ in range(pages)])

    def seen(self, page: int, now: float, changed: bool, interval: float) -> None:
        i = self.interval[page] * ((1 - NUTCH_DEC) if changed else (1 + NUTCH_INC))
        self.interval[page] = i = min(max(i, NUTCH_MIN_S), NUTCH_MAX_S)
        heapq.heappush(self.heap, (now + i, page))


class DrumbeatScheduler:
    """drumbeat.revisit as a crawl runs it (see the module docstring)."""

    def __init__(
        self, sites: list[str], bandwidth: float, clock: Callable[[], float], work: Path
    ) -> None:
        self.clock = clock
        self.committed = 0.0
        pages = len(sites)
        self.sites = sites
        self.seen_stats = [ChangeStats()] * pages
        start = pages / bandwidth  # the uniform interval: all a crawl knows at first
        self.policy = RevisitPolicy(
            bandwidth,
            min_interval_s=60.0,
            max_interval_s=60 * DAY,
            default_interval_s=start,
            resolve_s=3600.0,
            sites=SiteRates(default_rate=1 / start),
            clock=clock,
        )
        # Half-hour slots, not a crawl's minute: each slot is a directory and a file, and
        # the simulation runs months in seconds.
        self.queue = DueQueue(work / "due", slot_s=1800.0, fsync=False)
        rng = random.Random(1)
        self.queue.extend((start * rng.random(), i, b"") for i in range(pages))

    def take(self, n: int, now: float, until: float) -> list[int]:
        if now - self.committed >= DAY:  # a crawl's checkpoint (drops drained slots)
            self.queue.commit()
            self.committed = now
        return [e.fingerprint for e in self.queue.pop(n, until, early=True)]

    def seen(self, page: int, now: float, changed: bool, interval: float) -> None:
        new = ChangeStats.one(interval, changed)
        self.seen_stats[page] = seen = self.seen_stats[page] + new
        # the page index stands for its URL's fingerprint (spread for the hash sample)
        wait = self.policy.visited(page * 0x9E3779B97F4A7C15 + 1, self.sites[page], seen, new)
        self.queue.push(now + wait, page)


def simulate(
    scheduler: Scheduler, rates: np.ndarray, bandwidth: float, days: float, seed: int
) -> World:
    """Run ``scheduler`` over ``days``; ``clock`` cells are set to the simulated time."""
    end = days * DAY
    world = World(
        rates.tolist(),
        random.Random(seed),
        np.linspace(0, end, WINDOWS + 1).tolist(),
        first_interval_s=len(rates) / bandwidth,
    )
    credit, now = 0.0, 0.0
    while now < end - 1e-9:
        tick_end = min(now + TICK_S, end)
        credit += bandwidth * (tick_end - now)
        n = int(credit)
        credit -= n
        taken = scheduler.take(n, now, tick_end)
        for k, page in enumerate(taken):
            t = now + (k + 0.5) * (tick_end - now) / max(len(taken), 1)
            _CLOCK[0] = t
            changed, interval = world.visit(page, t)
            scheduler.seen(page, t, changed, interval)
        now = tick_end
        _CLOCK[0] = now
        while world.window < WINDOWS and now >= world.windows[world.window + 1] - 1e-9:
            world.close_window()
    return world


_CLOCK = [0.0]  # the simulated time, for the drumbeat policy's clock


def run(pages: int, sites: int, days: float, tail: float, seed: int) -> dict[str, Any]:
    coll = Collection.make(pages, sites, seed)
    lam = coll.rates
    bandwidth = pages / DAY
    mu = solve_mu(lam, bandwidth)
    f_opt = frequencies(lam, mu)
    rng = random.Random(seed)
    started = time.perf_counter()
    results: dict[str, World] = {}
    with tempfile.TemporaryDirectory(prefix="drumbeat-freshness-") as tmp:
        contenders: dict[str, Callable[[], Scheduler]] = {
            "drumbeat": lambda: DrumbeatScheduler(
                coll.sites, bandwidth, lambda: _CLOCK[0], Path(tmp)
            ),
            "uniform": lambda: FixedScheduler(np.full(pages, bandwidth / pages), rng),
            "proportional": lambda: FixedScheduler(lam * bandwidth / lam.sum(), rng),
            "adaptive": lambda: NutchScheduler(pages, pages / bandwidth, rng),
            "optimal": lambda: FixedScheduler(f_opt, rng),
        }
        for name, make in contenders.items():
            _CLOCK[0] = 0.0
            results[name] = simulate(make(), lam, bandwidth, days, seed + 1)
    window_s = days * DAY / WINDOWS
    last = max(1, round(tail * WINDOWS))
    report: dict[str, Any] = {
        "benchmark": "freshness",
        "pages": pages,
        "sites": sites,
        "days": days,
        "bandwidth_per_s": bandwidth,
        "tail": last / WINDOWS,
        "freshness": {},
        "age": {},
        "visits_per_page": {},
        "learning": {"window_days": window_s / DAY},
    }
    for name, w in results.items():
        fresh = w.fresh / (pages * window_s)
        age_h = w.age / (pages * window_s) / 3600
        report["freshness"][name] = round(float(fresh[-last:].mean()), 4)
        report["age"][name] = round(float(age_h[-last:].mean()), 3)
        report["visits_per_page"][name] = round(float(w.visits.sum()) / pages, 2)
        report["learning"][name] = [round(float(x), 4) for x in fresh]
    report["freshness"]["optimal_analytic"] = round(float(freshness(lam, f_opt).mean()), 4)
    report["optimal_gives_up"] = int(np.count_nonzero((f_opt == 0) & (lam > 0)))
    fr = report["freshness"]
    report["drumbeat_vs_optimal"] = round(fr["drumbeat"] / fr["optimal"], 4)
    # learning: visits a page had on average when drumbeat came within 5 % of the optimum
    curve, opt = report["learning"]["drumbeat"], fr["optimal"]
    # the first window from which it stays there
    reached = next((k for k in range(len(curve)) if all(x >= 0.95 * opt for x in curve[k:])), None)
    report["learned_within_5pct"] = (
        None
        if reached is None
        else {
            "window": reached + 1,
            "days": round((reached + 1) * window_s / DAY, 2),
            "visits_per_page": round(
                float(results["drumbeat"].visits[: reached + 1].sum()) / pages, 2
            ),
        }
    )
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def _table(r: dict[str, Any]) -> str:
    names = ["drumbeat", "uniform", "proportional", "adaptive", "optimal"]
    lines = [
        (
            f"freshness: {r['pages']} pages on {r['sites']} sites, {r['days']:g} simulated "
            f"days, one visit a page a day; last {r['tail']:.0%} of the run"
        ),
        (
            f"{'contender':<14} {'freshness':>9} {'vs optimal':>10} {'age (h)':>8}  "
            "learning curve (freshness, every tenth)"
        ),
    ]
    opt = r["freshness"]["optimal"]
    for name in names:
        curve = " ".join(f"{x:.2f}" for x in r["learning"][name][::2])
        lines.append(
            f"{name:<14} {r['freshness'][name]:>9.4f} {r['freshness'][name] / opt:>10.3f} "
            f"{r['age'][name]:>8.2f}  {curve}"
        )
    lines.append(
        f"{'analytic opt.':<14} {r['freshness']['optimal_analytic']:>9.4f} "
        f"{r['freshness']['optimal_analytic'] / opt:>10.3f}  (gives up on "
        f"{r['optimal_gives_up']} pages: their age grows without bound)"
    )
    got = r["learned_within_5pct"]
    lines.append(
        "drumbeat within 5 % of the optimum: "
        + (
            "not within the run"
            if got is None
            else f"by day {got['days']:g} ({got['visits_per_page']:g} visits a page)"
        )
    )
    lines.append(f"({r['seconds']:.1f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="drumbeat bench freshness", description=__doc__)
    ap.add_argument("--pages", type=int, default=10_000, help="pages in the collection")
    ap.add_argument("--sites", type=int, default=50, help="sites they are on")
    ap.add_argument("--days", type=float, default=60.0, help="simulated days")
    ap.add_argument("--tail", type=float, default=0.3, help="share of the run measured")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="2,000 pages, 40 days")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.quick:
        args.pages, args.days = 2000, 40.0
    if args.pages < 10 or args.days <= 0 or not 0 < args.tail <= 1:
        print(
            "drumbeat bench freshness: error: need --pages >= 10, --days > 0, 0 < --tail <= 1",
            file=sys.stderr,
        )
        return 2
    report = run(args.pages, args.sites, args.days, args.tail, args.seed)
    print(json.dumps(report) if args.json else _table(report))
    return 0
