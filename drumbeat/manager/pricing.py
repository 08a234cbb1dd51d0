"""What the manager knows of a URL from its scheme://authority: its PLD and STAR budget,
BEAST's host key, its origin (robots rules) and host (politeness); and the crawl's seeds,
which the operator chose: their hosts and budgets follow frontier.star.SeedTrust."""

from __future__ import annotations

from typing import cast

import numpy as np
import xxhash

from drumbeat import urls
from drumbeat.frontier.star import SeedTrust, Star, pld_hash
from drumbeat.settings import Settings

# (PLD, PLD hash, authority hash, origin, host)
Authority = tuple[str, int, int, str, str]


class Pricing:
    def __init__(self, settings: Settings, star: Star, *, cache_entries: int) -> None:
        self.settings = settings
        self.star = star
        self.cache_entries = cache_entries
        self.seeds: list[str] = []
        self.seed_hosts: frozenset[str] = frozenset()
        self.seed_plds: frozenset[str] = frozenset()
        self.seed_trust = SeedTrust(
            enabled=settings.trust_seeds,
            scoped_budget=None if settings.scope == "any" else settings.budget_max,
        )
        self.authorities: dict[bytes, Authority] = {}

    def set_seeds(self, seeds: list[str]) -> None:
        self.seeds = seeds
        hosts = {urls.host_of(u) for u in seeds}
        self.seed_hosts = frozenset(hosts)
        self.seed_plds = frozenset(urls.pld(h) for h in hosts)
        self.seed_trust.set_seed_hosts(hosts, urls.pld)
        self.authorities.clear()  # they name each URL's BEAST unit (seed_trust.unit)

    def places(self, records: list[bytes]) -> tuple[list[int], list[int], list[int]]:
        """For each URL-seen payload, what BEAST places it by: its PLD's hash, that PLD's
        budget now, and the hash of its scheme://authority (see :meth:`authority`). Also
        BEAST's ``rebudget`` when it re-splits QF.

        List passes over the batch rather than a call per URL: less than half the cost
        (docs/benchmarks.md).
        """
        authorities = [payload[: payload.index(b"/", 8)] for payload in records]
        got = list(map(self.authorities.get, authorities))
        if None in got:
            known = [
                k if k is not None else self.authority(payload) for k, payload in zip(got, records)
            ]
        else:
            known = cast(list[Authority], got)
        return [k[1] for k in known], self.budgets([k[0] for k in known]), [k[2] for k in known]

    def authority(self, payload: bytes) -> Authority:
        """What the manager needs of a URL-seen payload's scheme://authority: the URL's
        PLD, its hash, the authority's hash (BEAST's host cap), the URL's origin (robots
        rules) and host (politeness); a trusted seed host is a PLD of its own here
        (frontier.star.SeedTrust). Cached by that authority (a page's links mostly
        share a few, a BEAST read brings many URLs of each), in at most
        ``cache_entries`` entries: cheaper than origin_of and host_of of every URL."""
        authority = payload[: payload.index(b"/", 8)]  # normalized: a path follows it
        known = self.authorities.get(authority)
        if known is None:
            if len(self.authorities) >= self.cache_entries:
                self.authorities.clear()
            url = authority.decode() + "/"
            host = urls.host_of(url)
            pld = self.seed_trust.unit(host, urls.pld(host))
            known = self.authorities[authority] = (
                pld,
                pld_hash(pld),
                xxhash.xxh3_64_intdigest(authority),
                urls.origin_of(url),
                host,
            )
        return known

    def budgets(self, plds: list[str]) -> list[int]:
        """STAR's budgets, and the seeds' (frontier.star.SeedTrust)."""
        return self.seed_trust.budgets(plds, self.star.budgets(plds), self.star.budget)

    def budgets_by_hash(self, hashes: np.ndarray) -> list[int]:
        """:meth:`budgets` of PLDs given by their hashes (BEAST's ``budgets_of``: a
        re-split of QF places its URLs again by the hashes kept with them)."""
        plds: list[int] = hashes.tolist()
        return self.seed_trust.budgets_by_hash(
            plds, self.star.budgets_by_hash(plds), self.star.budget
        )
