"""A page's Poisson change rate from visits at irregular intervals.

Cho & Garcia-Molina ("Estimating frequency of change", TOIT 2003, §5): a crawler sees,
at each visit, only whether the page changed since the previous one. With intervals
``t_i`` that saw a change and a total time ``T`` of intervals that saw none, the
log-likelihood of a Poisson rate ``lam`` is::

    L(lam) = sum_i log(1 - exp(-lam t_i)) - lam T

and its maximum solves ``sum_i t_i / (exp(lam t_i) - 1) = T`` (:func:`mle_rate`, by
bisection on ``log lam``: the left side falls monotonically in ``lam``).

A history record cannot keep every interval in fixed space, so it keeps the number of
changed intervals ``n``, their total ``C`` and the unchanged time ``T``; with all changed
intervals taken at their mean ``t = C / n`` the equation has the closed form
``lam = log(1 + n t / T) / t`` (:func:`rate`). It is exact for regular visits, where it is
the paper's MLE ``-log(1 - X/n) / I``, and close for a schedule's nearly regular ones.

Known modification times (the paper's §6, where a page's last-modified date is known):
a changed interval whose last change time is known -- the page's ``Last-Modified``, or
a sitemap's ``<lastmod>`` newer than the visit before (:mod:`.history`) -- says more
than "at least one change": the last change came ``s`` seconds before the visit, and
none since. Its likelihood is ``lam exp(-lam s)`` (what came before that change is
unconstrained), so with ``k`` such intervals, their quiet time ``S`` and the rest as
above the maximum solves ``n t / (exp(lam t) - 1) + k / lam = T + S`` (:func:`rate`;
with ``n = 0``, the paper's ``lam = k / (T + S)``). Dated changes make the estimate
sharper: a page changing far faster than it is visited shows it in one visit (``s``
short), where undated visits only bound its rate from below.

Bias and few visits: the MLE is infinite when every visit saw a change and 0 when none
did. The paper's improved estimator adds half an unchanged interval (``T + t/2``); here
the pseudo-counts of a prior do that job and more: ``prior_weight`` intervals of the
page's typical length at its site's pooled rate (:class:`SiteRates`), so a page visited
twice gets about its site's rate and its own visits take over as they accumulate.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

PRIOR_WEIGHT = 2.0  # pseudo-intervals of the prior: worth about two visits of the page
MIN_RATE = 1e-12  # changes a second: "never changes", kept finite for the formulas


@dataclass(frozen=True, slots=True)
class ChangeStats:
    """What a page's visits saw: ``intervals`` between visits, ``changed`` of them with
    a change, lasting ``changed_s`` seconds in all, and ``unchanged_s`` seconds of the
    intervals without one (pseudo-counts of a prior may be fractional). Of the changed
    intervals, ``dated`` knew when the last change came (``dated_s`` seconds long in
    all), ``since_s`` seconds in all before the visits that saw them."""

    intervals: float = 0.0
    changed: float = 0.0
    changed_s: float = 0.0
    unchanged_s: float = 0.0
    dated: float = 0.0
    dated_s: float = 0.0
    since_s: float = 0.0

    def __add__(self, other: ChangeStats) -> ChangeStats:
        return ChangeStats(*(a + b for a, b in zip(_fields(self), _fields(other))))

    def __sub__(self, other: ChangeStats) -> ChangeStats:
        return ChangeStats(*(a - b for a, b in zip(_fields(self), _fields(other))))

    @classmethod
    def one(cls, interval_s: float, changed: bool) -> ChangeStats:
        """One interval between visits."""
        if changed:
            return cls(1.0, 1.0, interval_s, 0.0)
        return cls(1.0, 0.0, 0.0, interval_s)

    @property
    def mean_interval_s(self) -> float:
        return self.observed_s / self.intervals if self.intervals > 0 else 0.0

    @property
    def observed_s(self) -> float:
        return self.changed_s + self.unchanged_s


def _fields(stats: ChangeStats) -> tuple[float, ...]:
    return (
        stats.intervals, stats.changed, stats.changed_s, stats.unchanged_s,
        stats.dated, stats.dated_s, stats.since_s,
    )  # fmt: skip


def mle_rate(intervals_s: Sequence[float], changed: Sequence[bool]) -> float:
    """The maximum-likelihood Poisson rate (changes a second) for visit intervals
    ``intervals_s``, ``changed[i]`` telling whether interval ``i`` ended in a change.
    ``inf`` when every interval saw a change, 0 when none did."""
    hits = [t for t, c in zip(intervals_s, changed) if c and t > 0]
    quiet = sum(t for t, c in zip(intervals_s, changed) if not c)
    if not hits:
        return 0.0
    if quiet <= 0:
        return math.inf

    def excess(lam: float) -> float:  # falls as lam grows
        return sum(t / math.expm1(min(lam * t, 700.0)) for t in hits) - quiet

    lo, hi = MIN_RATE, 1.0 / min(hits)
    while excess(hi) > 0:
        hi *= 4.0
    while excess(lo) < 0 and lo > 1e-300:
        lo /= 4.0
    for _ in range(100):  # bisection on log lam: the rate may span many decades
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return math.sqrt(lo * hi)


def prior_stats(prior_rate: float, interval_s: float, weight: float = PRIOR_WEIGHT) -> ChangeStats:
    """Pseudo-counts worth ``weight`` visits ``interval_s`` apart to a page changing at
    ``prior_rate``: the changed and unchanged intervals those visits would see on
    average."""
    if interval_s <= 0 or weight <= 0:
        return ChangeStats()
    p = -math.expm1(-max(prior_rate, 0.0) * interval_s)  # P(change within an interval)
    return ChangeStats(weight, weight * p, weight * p * interval_s, weight * (1 - p) * interval_s)


def rate(stats: ChangeStats) -> float:
    """The rate of ``stats`` (see the module docstring): undated changed intervals taken
    at their mean; in closed form without dated ones. The unchanged time is at least
    half a changed interval (the paper's improved estimator), so that the rate stays
    finite."""
    k = max(stats.dated, 0.0)
    n = stats.changed - k
    c = stats.changed_s - stats.dated_s
    if n <= 0 or c <= 0:
        n = c = 0.0
    if n <= 0 and k <= 0:
        return MIN_RATE
    mean = (c + stats.dated_s) / (n + k)
    quiet = max(stats.unchanged_s + max(stats.since_s, 0.0), 0.5 * mean)
    if k <= 0:
        t = c / n
        return max(math.log1p(n * t / quiet) / t, MIN_RATE)
    if n <= 0:
        return max(k / quiet, MIN_RATE)
    t = c / n

    def excess(lam: float) -> float:  # falls as lam grows
        return n * t / math.expm1(min(lam * t, 700.0)) + k / lam - quiet

    # Each term alone equals ``quiet`` at one of lo's bounds and half of it at hi's.
    lo = max(k / quiet, math.log1p(n * t / quiet) / t)
    hi = max(2 * k / quiet, math.log1p(2 * n * t / quiet) / t)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return max(0.5 * (lo + hi), MIN_RATE)


def estimate(
    own: ChangeStats, prior_rate: float, default_interval_s: float, weight: float = PRIOR_WEIGHT
) -> float:
    """A page's rate from its own visits and the prior: ``weight`` pseudo-intervals as
    long as its own mean interval (``default_interval_s`` before it has one)."""
    mean = own.mean_interval_s or default_interval_s
    return rate(own + prior_stats(prior_rate, mean, weight))


class SiteRates:
    """Pooled change statistics per site (PLD), for the prior of its pages; at most
    ``max_sites`` sites are kept (the least recently updated go), the rest share the
    pooled rate of everything seen (``default_rate`` before anything is)."""

    def __init__(self, max_sites: int = 100_000, default_rate: float = 1 / 86400) -> None:
        if max_sites < 1:
            raise ValueError(f"max_sites must be positive, got {max_sites}")
        self.max_sites = max_sites
        self.default_rate = default_rate
        self._sites: OrderedDict[str, ChangeStats] = OrderedDict()
        self.total = ChangeStats()

    def add(self, site: str, seen: ChangeStats) -> None:
        """Pool one page's new observations (an interval, or several) into its site."""
        self.total = self.total + seen
        sites = self._sites
        sites[site] = sites.pop(site, ChangeStats()) + seen
        if len(sites) > self.max_sites:
            sites.popitem(last=False)

    def global_rate(self) -> float:
        if self.total.observed_s <= 0:
            return self.default_rate
        mean = self.total.mean_interval_s
        return rate(self.total + prior_stats(self.default_rate, mean, 1.0))

    def rate(self, site: str) -> float:
        """The site's pooled rate, shrunk towards the global one by one pseudo-visit."""
        pooled = self._sites.get(site)
        base = self.global_rate()
        if pooled is None or pooled.observed_s <= 0:
            return base
        return rate(pooled + prior_stats(base, pooled.mean_interval_s, 1.0))

    def export(self) -> tuple[list[str], list[ChangeStats]]:
        """The sites kept and their pooled statistics, least recently updated first
        (for a checkpoint: :meth:`restore` takes them back)."""
        return list(self._sites), list(self._sites.values())

    def restore(self, sites: list[str], stats: list[ChangeStats], total: ChangeStats) -> None:
        """Take back what :meth:`export` gave (and ``total``), in its order; past
        ``max_sites`` the oldest go."""
        self._sites = OrderedDict(zip(sites, stats))
        while len(self._sites) > self.max_sites:
            self._sites.popitem(last=False)
        self.total = total

    def __len__(self) -> int:
        return len(self._sites)
