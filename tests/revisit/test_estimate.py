from __future__ import annotations

import math
import random

import pytest

from drumbeat.revisit.estimate import (
    ChangeStats,
    SiteRates,
    estimate,
    mle_rate,
    prior_stats,
    rate,
)


def poisson_visits(lam: float, intervals: list[float], rng: random.Random) -> list[bool]:
    """Whether a Poisson(lam) page changed within each interval."""
    return [rng.random() < -math.expm1(-lam * t) for t in intervals]


def test_mle_of_regular_visits_is_the_papers_closed_form() -> None:
    # n visits I apart, X of them saw a change: lam = -log(1 - X/n) / I.
    intervals, changed = [10.0] * 20, [True] * 7 + [False] * 13
    assert mle_rate(intervals, changed) == pytest.approx(-math.log(1 - 7 / 20) / 10, rel=1e-6)
    stats = sum((ChangeStats.one(t, c) for t, c in zip(intervals, changed)), ChangeStats())
    assert rate(stats) == pytest.approx(-math.log(1 - 7 / 20) / 10, rel=1e-9)


def test_mle_edge_cases() -> None:
    assert mle_rate([5.0, 5.0], [False, False]) == 0.0
    assert mle_rate([5.0, 5.0], [True, True]) == math.inf
    # the closed form stays finite (half an unchanged interval) and positive
    assert 0 < rate(ChangeStats(2, 2, 10.0, 0.0)) < math.inf
    assert rate(ChangeStats(2, 0, 0.0, 10.0)) > 0


def test_mle_recovers_the_rate_from_irregular_visits() -> None:
    rng = random.Random(7)
    lam = 1 / 3600
    intervals = [rng.expovariate(1 / 5000) for _ in range(4000)]
    changed = poisson_visits(lam, intervals, rng)
    assert mle_rate(intervals, changed) == pytest.approx(lam, rel=0.1)
    # the naive estimate (changes / time) is far off: it misses changes within an interval
    naive = sum(changed) / sum(intervals)
    assert naive < 0.8 * lam


def test_the_closed_form_is_close_for_nearly_regular_visits() -> None:
    rng = random.Random(3)
    lam = 1 / 7200
    intervals = [rng.uniform(3000, 5000) for _ in range(3000)]
    changed = poisson_visits(lam, intervals, rng)
    stats = sum((ChangeStats.one(t, c) for t, c in zip(intervals, changed)), ChangeStats())
    assert rate(stats) == pytest.approx(mle_rate(intervals, changed), rel=0.02)


def test_the_prior_rules_few_visits_and_fades_with_many() -> None:
    prior, own_lam = 1 / 1000, 1 / 100_000
    nothing = ChangeStats()
    assert estimate(nothing, prior, 500.0) == pytest.approx(prior, rel=1e-6)
    # one unchanged interval moves the estimate down a little; many move it to the page's
    one = ChangeStats.one(500.0, False)
    assert own_lam < estimate(one, prior, 500.0) < prior
    many = ChangeStats(200, 1, 500.0, 199 * 500.0)
    assert estimate(many, prior, 500.0) < 3 * own_lam * 2
    p = prior_stats(prior, 500.0, 2.0)
    assert p.intervals == 2.0 and p.changed == pytest.approx(2 * -math.expm1(-0.5))


def test_site_rates_pool_and_stay_bounded() -> None:
    sites = SiteRates(max_sites=2, default_rate=1e-5)
    assert sites.rate("a.test") == 1e-5
    for _ in range(50):
        sites.add("fast.test", ChangeStats.one(100.0, True))
        sites.add("slow.test", ChangeStats.one(100.0, False))
    assert sites.rate("fast.test") > 10 * sites.rate("slow.test")
    sites.add("other.test", ChangeStats.one(100.0, False))
    assert len(sites) == 2  # the least recently updated site went
    assert sites.rate("fast.test") == sites.global_rate()
    with pytest.raises(ValueError):
        SiteRates(max_sites=0)


def dated_visits(lam: float, interval: float, n: int, rng: random.Random) -> ChangeStats:
    """``n`` visits ``interval`` apart to a Poisson(lam) page whose Last-Modified (or
    sitemap lastmod) gives its last change: each changed interval is dated."""
    stats = ChangeStats()
    for _ in range(n):
        t, last = 0.0, None
        while (t := t + rng.expovariate(lam)) < interval:
            last = t
        if last is None:
            stats += ChangeStats.one(interval, False)
        else:
            stats += ChangeStats(
                1, 1, interval, 0, dated=1, dated_s=interval, since_s=interval - last
            )
    return stats


def test_dated_changes_alone_give_the_papers_estimate() -> None:
    # Cho & Garcia-Molina with last-modified dates: changes over the time known quiet.
    stats = ChangeStats(4, 2, 20.0, 20.0, dated=2, dated_s=20.0, since_s=6.0)
    assert rate(stats) == pytest.approx(2 / 26)


def test_mixed_dated_and_undated_changes_maximise_the_likelihood() -> None:
    # 3 undated changed intervals of 10 s, 2 dated ones (4 s quiet in all), 30 s quiet.
    stats = ChangeStats(8, 5, 50.0, 30.0, dated=2, dated_s=20.0, since_s=4.0)

    def loglik(lam: float) -> float:
        return 3 * math.log(-math.expm1(-lam * 10)) + 2 * math.log(lam) - lam * 34

    got = rate(stats)
    assert loglik(got) >= max(loglik(got * (1 + d)) for d in (-1e-4, 1e-4))
    grid = [1e-4 * 1.01**i for i in range(1200)]
    assert got == pytest.approx(max(grid, key=loglik), rel=0.01)


def test_lastmod_evidence_sees_a_rate_far_above_the_visit_rate() -> None:
    # A page changing every second, visited every 50 s: every visit sees a change, so
    # visits alone only bound its rate from below; the dates of its changes give it.
    rng = random.Random(11)
    dated = dated_visits(1.0, 50.0, 200, rng)
    assert dated.dated == dated.changed == 200
    assert rate(dated) == pytest.approx(1.0, rel=0.2)
    undated = ChangeStats(dated.intervals, dated.changed, dated.changed_s, dated.unchanged_s)
    assert rate(undated) < 0.2
    # And a slow one: the dated estimate is as good as the undated MLE, or better.
    slow = dated_visits(1 / 500, 50.0, 2000, random.Random(12))
    assert rate(slow) == pytest.approx(1 / 500, rel=0.15)
