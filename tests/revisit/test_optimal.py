from __future__ import annotations

import math

import numpy as np
import pytest

from drumbeat.revisit.optimal import (
    _g,
    age,
    frequencies,
    freshness,
    g_inverse,
    solve_mu,
)


def test_g_inverse_inverts_g() -> None:
    x = np.array([1e-6, 1e-3, 0.1, 1.0, 5.0, 20.0])
    assert g_inverse(_g(x)) == pytest.approx(x, rel=1e-6)
    assert g_inverse(np.array([0.0, 1.0, 2.0])).tolist() == [0.0, math.inf, math.inf]


def test_the_optimum_spends_the_bandwidth_and_rises_then_falls() -> None:
    lam = np.logspace(-7, -2, 60)  # changes a second: from every 4 months to every 100 s
    bandwidth = 60 / 86400  # one visit a page a day on average
    mu = solve_mu(lam, bandwidth)
    f = frequencies(lam, mu)
    assert f.sum() == pytest.approx(bandwidth, rel=1e-6)
    peak = int(np.argmax(f))
    assert 0 < peak < len(lam) - 1
    assert np.all(np.diff(f[: peak + 1]) >= 0)  # rises with the change rate ...
    assert np.all(np.diff(f[peak:]) <= 0)  # ... then falls
    assert f[-1] == 0.0  # pages changing too fast are given up on
    assert np.all(mu * lam[f == 0] >= 1 - 1e-9)


def test_the_optimum_beats_uniform_and_proportional() -> None:
    rng = np.random.default_rng(5)
    lam = rng.lognormal(math.log(1 / 86400), 1.5, 2000)
    bandwidth = len(lam) / 86400
    optimal = freshness(lam, frequencies(lam, solve_mu(lam, bandwidth))).mean()
    uniform = freshness(lam, np.full(len(lam), bandwidth / len(lam))).mean()
    proportional = freshness(lam, lam * bandwidth / lam.sum()).mean()
    # Cho & Garcia-Molina: uniform beats proportional, and the optimum beats both
    assert optimal > uniform > proportional


def test_freshness_and_age_of_simple_cases() -> None:
    assert freshness([0.0], [0.0])[0] == 1.0  # never changes: always fresh
    assert freshness([1.0], [0.0])[0] == 0.0  # never visited: stale in the end
    assert freshness([1.0], [1.0])[0] == pytest.approx(1 - math.exp(-1))
    assert age([1.0], [1.0])[0] == pytest.approx(0.5 - 1 + (1 - math.exp(-1)))
    assert age([0.0], [1.0])[0] == 0.0
    assert age([1.0], [0.0])[0] == math.inf


def test_weights_and_nothing_to_do() -> None:
    lam = np.array([1e-4, 1e-4])
    f = frequencies(lam, solve_mu(lam, 1e-3, weights=[1.0, 4.0]), [1.0, 4.0])
    assert f[1] > f[0]
    assert solve_mu([0.0, 0.0], 1.0) == math.inf
    assert solve_mu([1e-3], 0.0) == math.inf
    # a sample standing for more pages spends its bandwidth over all of them
    mu = solve_mu(lam, 1e-3, scale=10.0)
    assert 10 * frequencies(lam, mu).sum() == pytest.approx(1e-3, rel=1e-6)
