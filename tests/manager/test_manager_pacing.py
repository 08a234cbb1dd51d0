"""The manager with paced BEAST turns: a spam PLD minting a fresh subdomain per URL gets at
most its budget into RAM per ``beast_turn_s``, however idle the fetch slots are, while a
turn whose URLs have all been crawled ends at once (no idling for the pacing).

A real Manager on a temp state dir with a loopback DNS responder and a hand-driven clock;
nothing is fetched.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from drumbeat.manager import Manager
from drumbeat.testing import FakeClock, offline_manager

B0 = 5
TAU_H = 1.0  # the default turn is B0 x τh = 5 s


def _spam_in_ram(manager: Manager) -> int:
    return sum(
        len(h.queue) for name, h in manager.scheduler.hosts.items() if name.endswith(".spam.test")
    )


async def _feed(manager: Manager, clock: FakeClock, rounds: int = 6) -> None:
    for _ in range(rounds):
        manager.state.slots_idle = True  # nothing ready: the feed reads whatever BEAST gives
        manager.gate.feed(clock())
        await asyncio.sleep(0)  # DNS lookups (loopback SimDNS) run


def test_a_spam_pld_gets_its_budget_per_turn(tmp_path: Path) -> None:
    asyncio.run(_spam_budget_per_turn(tmp_path))


async def _spam_budget_per_turn(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    async with offline_manager(
        tmp_path,
        clock=clock,
        frontier_ram_urls=1_000,
        host_delay_s=TAU_H,
        budget_default=B0,
        budget_max=B0,
    ) as manager:
        assert manager.settings.beast_turn() == B0 * TAU_H
        spam = [f"http://s{i}.spam.test/x" for i in range(60)]  # one PLD, 60 hosts
        legit = [f"http://legit.test/p/{i}" for i in range(3)]
        manager.admission.admit(spam + legit, 1, None)
        manager.stores.seen.flush()
        manager.admission.take_new_urls(clock())
        for origin in {u.rsplit("/", 2)[0] if "legit" in u else u[:-2] for u in spam + legit}:
            manager.stores.robots.record(origin, 404, None)  # no robots.txt: everything allowed

        await _feed(manager, clock)
        assert _spam_in_ram(manager) == B0  # the first turn's budget, slots idle or not
        assert manager.stores.beast.holding
        clock.now += B0 * TAU_H - 0.5
        await _feed(manager, clock)
        assert _spam_in_ram(manager) == B0
        clock.now += 0.5
        await _feed(manager, clock)
        assert _spam_in_ram(manager) == 2 * B0  # one more turn, one more budget

        # Everything in RAM is crawled (popped and done): the turn ends at once.
        sched = manager.scheduler
        for host in list(sched.hosts.values()):
            while host.queue:
                sched.pop_url(host)
        await _feed(manager, clock, rounds=1)
        assert _spam_in_ram(manager) == B0
        # A host due within τh holds the turn again (the new URLs are in RAM now).
        await _feed(manager, clock)
        assert _spam_in_ram(manager) == B0


def test_turns_whose_urls_are_dropped_follow_in_one_feed(tmp_path: Path) -> None:
    asyncio.run(_dropped_turns(tmp_path))


async def _dropped_turns(tmp_path: Path) -> None:
    """200 URLs of one refused host (NXDOMAIN), B0 per turn: each turn's URLs are dropped
    as they are routed, so one feed ends turn after turn instead of waiting 40 turns."""
    clock = FakeClock(1000.0)
    async with offline_manager(
        tmp_path,
        clock=clock,
        frontier_ram_urls=1_000,
        host_delay_s=TAU_H,
        budget_default=B0,
        budget_max=B0,
    ) as manager:
        manager.stores.robots.record_refused("http://dead.test", "dns:nxdomain", 300.0)
        manager.admission.admit([f"http://dead.test/d/{i}" for i in range(200)], 1, None)
        manager.stores.seen.flush()
        manager.admission.take_new_urls(clock())
        assert len(manager.stores.beast) == 200
        await _feed(manager, clock, rounds=1)
        assert manager.counters["dropped.dns:nxdomain"] == 200 and len(manager.stores.beast) == 0
