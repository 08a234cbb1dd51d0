"""The revisit policy: each URL's next revisit from its estimated change rate and the
threshold ``mu`` (Cho & Garcia-Molina's optimum, applied URL by URL).

After a visit, the URL's rate is estimated from its history with its site's pooled rate
as prior (:mod:`.estimate`) and its interval is ``1 / f(rate, mu)``
(:func:`~drumbeat.revisit.optimal.frequencies`), within ``[min_interval_s,
max_interval_s]``: a page that never changes or changes too fast to keep fresh gets
``max_interval_s`` rather than never, so that the crawl notices if it changes its ways.

``mu`` is what spends the bandwidth: it is re-solved every ``resolve_s`` seconds (and
whenever the URLs sampled grew by a quarter, as they do early in a crawl) from a
*hash sample* of the URLs (those whose mixed fingerprint falls under a threshold that
halves whenever the sample passes ``sample_size``; Flajolet's adaptive sampling), each
with its latest estimated rate. A hash sample is uniform over URLs, not over visits (a
sample of visits would over-weigh the URLs revisited often), and costs bounded RAM;
nothing touches every URL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass, fields

import numpy as np

from drumbeat.revisit.estimate import ChangeStats, SiteRates, estimate
from drumbeat.revisit.optimal import frequencies, frequency, solve_mu

# A URL whose every visit saw a change is probed: its next visit comes after at most a
# PROBE_DIVISOR-th of its mean interval (from PROBE_AFTER such visits on). Visits that
# all see a change only bound the rate from below (the estimate grows as
# log(visits) / interval), so a page changing every minute would stay just under the
# give-up threshold forever, taking visits that keep nothing fresh; a shorter interval
# either sees no change (the estimate becomes informative) or pushes it over.
PROBE_AFTER = 2
PROBE_DIVISOR = 4.0
_MIX = 0x9E3779B97F4A7C15  # the golden-ratio multiplier: spreads fingerprints' bits
_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class PolicyStats:
    mu: float  # the threshold in force (inf: not solved yet)
    sample: int  # URLs in the hash sample
    population: float  # URLs the sample stands for
    bandwidth: float  # revisits a second the policy plans for
    planned: float  # revisits a second the sample's intervals add up to, scaled up
    mean_freshness: float  # expected freshness of the sample at its planned intervals


class RevisitPolicy:
    """Plans each URL's next revisit for ``bandwidth`` revisits a second in all."""

    def __init__(
        self,
        bandwidth: float,
        *,
        min_interval_s: float = 60.0,
        max_interval_s: float = 30 * 86400.0,
        default_interval_s: float | None = None,
        sample_size: int = 4096,
        resolve_s: float = 3600.0,
        sites: SiteRates | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``default_interval_s``: a new URL's interval before ``mu`` is known (default
        ``max_interval_s / 30``)."""
        if bandwidth <= 0 or not 0 < min_interval_s <= max_interval_s:
            raise ValueError("bandwidth must be positive and 0 < min_interval_s <= max_interval_s")
        self.bandwidth = bandwidth
        self.min_interval_s = min_interval_s
        self.max_interval_s = max_interval_s
        self.default_interval_s = default_interval_s or max_interval_s / 30
        self.sample_size = sample_size
        self.resolve_s = resolve_s
        self.sites = sites if sites is not None else SiteRates()  # (an empty one is falsy)
        self.clock = clock
        self._threshold = 1 << 64  # a URL is sampled when its mixed fingerprint is below
        self._sample: dict[int, float] = {}
        self._mu = math.inf
        self._solved_at = -math.inf
        self._solved_for = 0.0  # the population mu was solved for

    # -- the sample and mu ---------------------------------------------------------------

    def _sampled(self, fingerprint: int) -> int | None:
        mixed = (fingerprint * _MIX) & _MASK
        return mixed if mixed < self._threshold else None

    def _remember(self, fingerprint: int, rate: float) -> None:
        mixed = self._sampled(fingerprint)
        if mixed is None:
            return
        self._sample[mixed] = rate
        while len(self._sample) > self.sample_size:
            self._threshold //= 2
            self._sample = {m: r for m, r in self._sample.items() if m < self._threshold}

    @property
    def population(self) -> float:
        return len(self._sample) * (2.0**64 / self._threshold)

    @property
    def mu(self) -> float:
        """The threshold, re-solved from the sample when ``resolve_s`` has passed."""
        now = self.clock()
        grown = self.population > 1.25 * self._solved_for  # the crawl's first hours
        if self._sample and (now - self._solved_at >= self.resolve_s or grown):
            self.resolve()
        return self._mu

    def resolve(self) -> float:
        """Solve ``mu`` from the sample now."""
        rates = np.fromiter(self._sample.values(), np.float64, len(self._sample))
        self._mu = solve_mu(rates, self.bandwidth, scale=2.0**64 / self._threshold)
        self._solved_at = self.clock()
        self._solved_for = self.population
        return self._mu

    # -- per URL -------------------------------------------------------------------------

    def rate(self, seen: ChangeStats, site: str) -> float:
        """A URL's estimated change rate from what its visits ``seen``."""
        return estimate(seen, self.sites.rate(site), self.default_interval_s)

    def interval(self, rate: float) -> float:
        """The revisit interval for a URL changing at ``rate`` under the current ``mu``."""
        mu = self.mu
        if not math.isfinite(mu):
            return self.default_interval_s
        f = frequency(rate, mu)
        if f <= 0:
            return self.max_interval_s
        return min(max(1.0 / f, self.min_interval_s), self.max_interval_s)

    def visited(
        self, fingerprint: int, site: str, seen: ChangeStats, new: ChangeStats | None = None
    ) -> float:
        """A URL was visited: ``seen`` is everything its visits saw (this one included),
        ``new`` what this visit added (pooled into its site). Returns the seconds until
        its next revisit."""
        if new is not None and new.intervals > 0:
            self.sites.add(site, new)
        rate = self.rate(seen, site)
        self._remember(fingerprint, rate)
        wait = self.interval(rate)
        always = seen.intervals >= PROBE_AFTER and seen.changed >= seen.intervals
        if always and wait < self.max_interval_s:
            wait = max(min(wait, seen.mean_interval_s / PROBE_DIVISOR), self.min_interval_s)
        return wait

    # -- kept across a restart -----------------------------------------------------------

    def state(self) -> dict[str, np.ndarray]:
        """What the policy learned, as arrays: ``mu`` and when it was solved, the hash
        sample and the sites' pooled statistics. Bounded by ``sample_size`` and the
        sites' ``max_sites``; :meth:`load_state` takes it back."""
        return self.snapshot()()

    def snapshot(self) -> Callable[[], dict[str, np.ndarray]]:
        """:meth:`state` of now, made by the call returned (which touches nothing the
        policy changes: another thread may make it while the policy goes on)."""
        names, pooled = self.sites.export()
        sample = dict(self._sample)
        total = self.sites.total
        # threshold: a power of two up to 2**64, kept as its exponent
        scalars = [self._mu, self._solved_at, self._solved_for, self._threshold.bit_length() - 1]

        def arrays() -> dict[str, np.ndarray]:
            encoded = [n.encode() for n in names]
            t = total
            return {
                "scalars": np.array(scalars, np.float64),
                "sample_keys": np.fromiter(sample, np.uint64, len(sample)),
                "sample_rates": np.fromiter(sample.values(), np.float64, len(sample)),
                "site_names": np.frombuffer(b"".join(encoded), np.uint8),
                "site_lengths": np.array([len(n) for n in encoded], np.uint32),
                # every field of ChangeStats (a state of fewer columns loads too: the
                # fields added last default to 0)
                "site_stats": np.array([astuple(p) for p in pooled], np.float64).reshape(
                    -1, len(fields(ChangeStats))
                ),
                "site_total": np.array(astuple(t), np.float64),
            }

        return arrays

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Take back a :meth:`state` (of a policy of the same ``sample_size``)."""
        mu, solved_at, solved_for, bits = state["scalars"].tolist()
        self._mu, self._solved_at, self._solved_for = mu, solved_at, solved_for
        self._threshold = 1 << int(bits)
        keys, rates = state["sample_keys"].tolist(), state["sample_rates"].tolist()
        self._sample = dict(zip(keys, rates))
        raw, names, at = state["site_names"].tobytes(), [], 0
        for n in state["site_lengths"].tolist():
            names.append(raw[at : at + n].decode())
            at += n
        pooled = [ChangeStats(*row) for row in state["site_stats"].tolist()]
        self.sites.restore(names, pooled, ChangeStats(*state["site_total"].tolist()))

    def stats(self) -> PolicyStats:
        mu = self._mu
        rates = np.fromiter(self._sample.values(), np.float64, len(self._sample))
        planned, fresh = 0.0, 0.0
        if math.isfinite(mu) and len(rates):
            f = frequencies(rates, mu)
            planned = float(f.sum()) * 2.0**64 / self._threshold
            x = rates / np.where(f > 0, f, 1.0)
            fresh = float(
                np.mean(np.where(rates <= 0, 1.0, np.where(f > 0, -np.expm1(-x) / x, 0.0)))
            )
        return PolicyStats(mu, len(rates), self.population, self.bandwidth, planned, fresh)
