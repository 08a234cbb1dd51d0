"""Seeds are the operator's choice (issue 46): in a real Manager (offline, nothing fetched),
the URLs of many seeded subdomains of one PLD, which no other PLD links to, get into BEAST's
ring as if each host were a site of its own; with ``trust_seeds = false`` the PLD has one
long-tail budget and most of its URLs wait in QF."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np

from drumbeat import urls
from drumbeat.frontier.star import pld_hash
from drumbeat.frontier.urlseen import decode_payload, encode_payload
from drumbeat.testing import offline_manager

HOSTS = 50
PER_HOST = 30  # fits in the 4 queues of the ring at the host cap of 10 (B0 x τh / τh_min)


def test_seeded_subdomains_of_one_pld_each_get_a_sites_budget(tmp_path: Path) -> None:
    trusted = asyncio.run(_place(tmp_path / "on", trust=True))
    # Every seed host passes B0 (10) URLs a turn, all of its URLs fit in the ring.
    assert trusted["qf"] == 0
    assert trusted["first_read"] == {f"h{i}.campus.test": 10 for i in range(HOSTS)}
    plain = asyncio.run(_place(tmp_path / "off", trust=False))
    # Pure STAR: one place and budget of 10 for the PLD: 10 URLs a queue in all.
    assert plain["qf"] >= HOSTS * PER_HOST - 4 * 10
    assert sum(plain["first_read"].values()) <= 10


async def _place(work: Path, *, trust: bool) -> dict:
    async with offline_manager(
        work, trust_seeds=trust, host_delay_s=1.0, host_delay_min_s=1.0, budget_default=10
    ) as manager:
        seen, beast = manager.stores.seen, manager.stores.beast
        hosts = [f"http://h{i}.campus.test" for i in range(HOSTS)]
        manager.add_seeds([f"{h}/" for h in hosts])
        manager.admission.admit([f"{h}/p/{k}" for k in range(PER_HOST - 1) for h in hosts], 1, None)
        seen.flush()
        manager.admission.take_new_urls(manager.clock())
        assert len(beast) == HOSTS * PER_HOST
        # A re-split of QF budgets by the hashes kept with each URL: the same answer.
        records = [encode_payload(f"{h}/q", 1, None) for h in hosts[:3]]
        hashes, budgets, _ = manager.pricing.places(records)
        units = [h[len("http://") :] if trust else "campus.test" for h in hosts[:3]]
        assert hashes == [pld_hash(u) for u in units]
        assert manager.pricing.budgets_by_hash(np.array(hashes, np.uint64)) == budgets == [10] * 3
        first = Counter(urls.host_of(decode_payload(p)[0]) for p in beast.read(10_000))
        return {"qf": beast.stats().qf_records, "first_read": dict(first)}
