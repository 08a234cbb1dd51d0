"""Revisit frequencies that maximise average freshness for a bandwidth (Cho &
Garcia-Molina, "Synchronizing a database to improve freshness", SIGMOD 2000).

A page changing as a Poisson process of rate ``lam`` and revisited every ``I = 1/f``
seconds is fresh, averaged over time, a share ``F = (1 - exp(-lam I)) / (lam I)`` of the
time. Maximising ``sum_i w_i F(lam_i, f_i)`` subject to ``sum_i f_i = B`` (Lagrange)
gives ``dF/df_i = mu / w_i`` for one ``mu`` common to all pages. With ``x = lam / f``,
``dF/df = g(x) / lam`` where ``g(x) = 1 - (1 + x) exp(-x)`` rises from 0 to 1, so::

    f_i = lam_i / g^-1(mu lam_i / w_i)   when mu lam_i / w_i < 1, else 0

The optimal frequency rises and then falls with ``lam``: a page changing faster than
``w / mu`` is never worth a visit (the bandwidth keeps several slower pages fresh
instead). ``mu`` follows from the bandwidth by bisection, ``sum_i f_i`` falling as ``mu``
grows (:func:`solve_mu`).
"""

from __future__ import annotations

import bisect
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

Floats = NDArray[np.float64]


def _g(x: Floats) -> Floats:
    """``1 - (1 + x) exp(-x)``, accurate for small ``x`` too (about ``x**2 / 2``)."""
    small = x < 1e-3
    exact = -np.expm1(-x) - x * np.exp(-x)
    series = x * x * (0.5 - x / 3 + x * x / 8)
    return np.where(small, series, exact)


# g^-1 by interpolation in (log y, log x), then one Newton step: g is smooth and
# monotonic, so a table of a few thousand points and a step give ~1e-12 relative.
_X = np.logspace(-7, math.log10(745.0), 8192)
_LOG_X = np.log(_X)
_LOG_Y = np.log(_g(_X))


def g_inverse(y: ArrayLike) -> Floats:
    """``x`` with ``g(x) = y`` for ``0 < y < 1`` (``inf`` for ``y >= 1``, 0 for ``y <= 0``)."""
    y = np.asarray(y, np.float64)
    inside = (y > 0) & (y < 1)
    yi = np.where(inside, y, 0.5)
    x = np.exp(np.interp(np.log(yi), _LOG_Y, _LOG_X))
    x = x - (_g(x) - yi) / (x * np.exp(-x))  # g'(x) = x exp(-x)
    return np.where(inside, x, np.where(y >= 1, np.inf, 0.0))


_LOG_Y_LIST = _LOG_Y.tolist()
_LOG_X_LIST = _LOG_X.tolist()


def frequency(rate: float, mu: float, weight: float = 1.0) -> float:
    """:func:`frequencies` of one page, without numpy's per-call cost (a crawl asks it
    once a visit)."""
    y = mu * rate / weight if weight > 0 else math.inf
    if rate <= 0 or not 0 < y < 1:
        return 0.0
    ly = math.log(y)
    k = min(max(bisect.bisect_left(_LOG_Y_LIST, ly), 1), len(_LOG_Y_LIST) - 1)
    y0, y1 = _LOG_Y_LIST[k - 1], _LOG_Y_LIST[k]
    lx = _LOG_X_LIST[k - 1] + (ly - y0) * (_LOG_X_LIST[k] - _LOG_X_LIST[k - 1]) / (y1 - y0)
    x = math.exp(lx)
    g = 1 - (1 + x) * math.exp(-x) if x >= 1e-3 else x * x * (0.5 - x / 3 + x * x / 8)
    x -= (g - y) / (x * math.exp(-x))
    return rate / x if x > 0 else 0.0


def frequencies(rates: ArrayLike, mu: float, weights: ArrayLike | None = None) -> Floats:
    """The optimal revisit frequency (visits a second) of each page for multiplier ``mu``;
    0 for pages that never change or change too fast to be worth a visit."""
    lam = np.asarray(rates, np.float64)
    w = np.ones_like(lam) if weights is None else np.asarray(weights, np.float64)
    y = mu * lam / np.where(w > 0, w, np.inf)
    x = g_inverse(y)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where((lam > 0) & (y < 1) & (x > 0), lam / x, 0.0)
    return np.asarray(f, np.float64)


def solve_mu(
    rates: ArrayLike, bandwidth: float, weights: ArrayLike | None = None, scale: float = 1.0
) -> float:
    """The ``mu`` at which ``scale * sum(frequencies(rates, mu))`` equals ``bandwidth``
    (``scale``: how many pages each given rate stands for, when ``rates`` is a sample).
    ``inf`` when no page changes (no revisit helps)."""
    lam = np.asarray(rates, np.float64)
    w = np.ones_like(lam) if weights is None else np.asarray(weights, np.float64)
    moving = (lam > 0) & (w > 0)
    if bandwidth <= 0 or not moving.any():
        return math.inf
    lam, w = lam[moving], w[moving]
    hi = float(np.max(w / lam))  # every page's frequency is 0 from here on

    def total(mu: float) -> float:
        return scale * float(frequencies(lam, mu, w).sum())

    lo = hi
    while total(lo) < bandwidth and lo > 1e-300:
        lo /= 16.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if total(mid) > bandwidth:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-10:
            break
    return math.sqrt(lo * hi)


def freshness(rates: ArrayLike, freqs: ArrayLike) -> Floats:
    """Time-averaged freshness of pages of ``rates`` revisited at ``freqs`` (regularly)."""
    lam = np.asarray(rates, np.float64)
    f = np.asarray(freqs, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = lam / f
        fresh = -np.expm1(-x) / x
    return np.asarray(np.where(lam <= 0, 1.0, np.where(f > 0, fresh, 0.0)), np.float64)


def age(rates: ArrayLike, freqs: ArrayLike) -> Floats:
    """Time-averaged age (seconds since the first change the copy missed; 0 while fresh)
    of pages revisited regularly: ``I/2 - 1/lam + (1 - exp(-lam I)) / (lam**2 I)``."""
    lam = np.asarray(rates, np.float64)
    f = np.asarray(freqs, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        interval = 1.0 / f
        a = interval / 2 - 1 / lam - np.expm1(-lam * interval) / (lam * lam * interval)
    return np.asarray(np.where(lam <= 0, 0.0, np.where(f > 0, a, np.inf)), np.float64)
