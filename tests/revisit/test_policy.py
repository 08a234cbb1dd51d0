from __future__ import annotations

import math

import numpy as np
import pytest

from drumbeat.revisit.estimate import ChangeStats, SiteRates
from drumbeat.revisit.policy import RevisitPolicy
from drumbeat.testing import FakeClock


def seen_at(lam: float, interval: float, n: int) -> ChangeStats:
    """What n visits ``interval`` apart see on average of a page changing at ``lam``."""
    p = -math.expm1(-lam * interval)
    return ChangeStats(n, n * p, n * p * interval, n * (1 - p) * interval)


def test_mu_is_solved_from_a_bounded_sample_and_spends_the_bandwidth() -> None:
    clock = FakeClock()
    policy = RevisitPolicy(1.0, sample_size=256, resolve_s=600.0, clock=clock)
    rng = np.random.default_rng(2)
    assert policy.interval(1e-3) == policy.default_interval_s  # mu not known yet
    for fp in rng.integers(1, 2**63, 20_000).tolist():
        policy.visited(fp, "a.test", seen_at(float(rng.lognormal(-9, 1)), 3600.0, 20))
    assert 128 <= policy.stats().sample <= 256
    assert policy.population == pytest.approx(20_000, rel=0.2)
    clock.advance(600.0)
    mu = policy.mu
    assert math.isfinite(mu)
    stats = policy.stats()
    assert stats.planned == pytest.approx(1.0, rel=1e-6)
    assert 0 < stats.mean_freshness < 1
    # not re-solved until resolve_s has passed
    policy.bandwidth = 2.0
    assert policy.mu == mu
    clock.advance(600.0)
    assert policy.mu < mu  # more bandwidth: a lower threshold


def test_intervals_follow_the_optimum_within_bounds() -> None:
    clock = FakeClock()
    policy = RevisitPolicy(
        1.0, min_interval_s=60.0, max_interval_s=86400.0, resolve_s=0.0, clock=clock
    )
    for fp in range(1, 2000):
        policy.visited(fp, "a.test", seen_at(1e-4 * (1 + fp % 10), 600.0, 50))
    slow, medium, fast = (
        policy.interval(policy.rate(seen_at(lam, 600.0, 400), "a.test"))
        for lam in (1e-6, 3e-4, 1.0)
    )
    assert medium < slow  # the optimum rises with the change rate ...
    assert fast == 86400.0  # ... and gives up on a page changing every second
    assert medium >= 60.0
    with pytest.raises(ValueError):
        RevisitPolicy(0.0)


def test_a_page_changing_at_every_visit_is_probed_then_given_up() -> None:
    clock = FakeClock()
    policy = RevisitPolicy(
        1.0, min_interval_s=60.0, max_interval_s=30 * 86400.0, resolve_s=1e9, clock=clock
    )
    for fp in range(1, 3000):  # the collection: mu is solved from these
        policy.visited(fp, "a.test", seen_at(1e-4 * (1 + fp % 10), 600.0, 50))
    seen, wait, waits = ChangeStats(), 3000.0, []
    for _ in range(12):  # the page changes every second: each visit sees a change
        seen = seen + ChangeStats.one(wait, True)
        wait = policy.visited(99_999, "a.test", seen)
        waits.append(wait)
        if wait == policy.max_interval_s:
            break
    assert waits[-1] == policy.max_interval_s  # given up on ...
    assert len(waits) < 12  # ... after a few probes
    assert min(waits) < 3000.0 / 2  # probes come sooner than the visits before


def test_what_the_policy_learned_comes_back_from_its_state() -> None:
    clock = FakeClock()
    sites = SiteRates(max_sites=8)
    policy = RevisitPolicy(1.0, sample_size=64, resolve_s=600.0, sites=sites, clock=clock)
    rng = np.random.default_rng(5)
    for fp in rng.integers(1, 2**63, 2000).tolist():
        site = f"s{fp % 20}.test"
        lam = 1e-4 * (1 + fp % 20)
        policy.visited(fp, site, seen_at(lam, 3600.0, 5), seen_at(lam, 3600.0, 1))
    mu = policy.mu
    state = policy.state()
    # Bounded: the sample and the sites the policy keeps, whatever the URLs seen.
    assert len(state["sample_keys"]) <= 64 and len(state["site_lengths"]) == 8

    clock.advance(60.0)  # a restart, before mu is due to be re-solved
    again = RevisitPolicy(
        1.0, sample_size=64, resolve_s=600.0, sites=SiteRates(max_sites=8), clock=clock
    )
    assert not math.isfinite(again.mu)  # a new policy knows nothing ...
    again.load_state(state)
    assert again.mu == mu  # ... this one its threshold, not re-solved
    assert again.population == policy.population
    for site in ("s0.test", "s19.test", "s7.test", "never.test"):
        assert again.sites.rate(site) == policy.sites.rate(site)
    seen = seen_at(3e-4, 3600.0, 2)
    assert again.visited(3, "s19.test", seen) == policy.visited(3, "s19.test", seen)
    clock.advance(600.0)
    assert again.mu == pytest.approx(policy.mu)  # re-solved from the same sample
