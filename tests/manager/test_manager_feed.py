"""The manager's feed from BEAST into RAM: it reads more while fetch slots sit idle for
want of a ready host, even when RAM is more than half full (Polybot's "fewer than H
hosts ready" rule); otherwise it waits for RAM to fall to half.

A real Manager on a temp state dir with a loopback DNS responder; nothing is fetched.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import xxhash

from drumbeat import urls as urls_module
from drumbeat.frontier import beast as beast_module
from drumbeat.frontier.beast import Beast
from drumbeat.frontier.urlseen import decode_payload, encode_payload
from drumbeat.manager import TUNING, Manager, beast_host_cap, pld_hash
from drumbeat.manager.checkpointer import Laps
from drumbeat.runtime.pace import Pace
from drumbeat.settings import Settings
from drumbeat.testing import FakeClock, offline_manager

RAM = 1_600


def test_host_cap_follows_the_delay_floor() -> None:
    s = Settings()
    assert (
        beast_host_cap(s.with_changes(host_delay_s=2.0, host_delay_min_s=0.5, budget_default=10))
        == 40
    )
    assert (
        beast_host_cap(s.with_changes(host_delay_s=1.0, host_delay_min_s=1.0, budget_default=10))
        == 10
    )
    assert beast_host_cap(s.with_changes(host_delay_s=0.0, host_delay_min_s=0.0)) == 0
    # A floor above the delay does not apply: B0 a turn, not one URL (a one-site crawl at
    # --host-delay 0.005 with the default floor of 0.5 s).
    assert (
        beast_host_cap(s.with_changes(host_delay_s=0.005, host_delay_min_s=0.5, budget_default=10))
        == 10
    )


async def _feed_until_settled(manager: Manager, rounds: int = 40) -> None:
    now = manager.clock()
    for _ in range(rounds):
        now += 1.0  # past every flush interval: each round merges what it asked for
        manager.gate.feed(now)
        await asyncio.sleep(0)  # DNS lookups (loopback SimDNS) run


def _admit(manager: Manager, origins: list[str], per_origin: int) -> None:
    manager.admission.admit([f"{o}/p/{i}" for o in origins for i in range(per_origin)], 1, None)
    manager.stores.seen.flush()
    manager.admission.take_new_urls(manager.clock())
    for origin in origins:
        manager.stores.robots.record(origin, 404, None)  # no robots.txt: everything allowed


def test_idle_slots_read_beast_before_ram_is_half_empty(tmp_path: Path) -> None:
    asyncio.run(_idle_slots_read_beast(tmp_path))


async def _idle_slots_read_beast(tmp_path: Path) -> None:
    # Unpaced BEAST turns: this is about RAM, not budgets (paced: test_manager_pacing.py).
    async with offline_manager(
        tmp_path,
        frontier_ram_urls=RAM,
        host_delay_s=1.0,
        host_delay_min_s=1.0,
        budget_max=10_000,
        beast_turn_s=0,
    ) as manager:
        # Ten hosts with 100 URLs each fill RAM beyond half (1,000 of 1,600).
        big = [f"http://big{i}.test" for i in range(10)]
        _admit(manager, big, 100)
        await _feed_until_settled(manager)
        assert manager.scheduler.queued_urls == 1_000
        assert len(manager.scheduler.hosts) == 10 and len(manager.stores.beast) == 0

        # A hundred more hosts reach BEAST. Slots busy: RAM is over half full, so they wait.
        small = [f"http://small{i}.test" for i in range(100)]
        _admit(manager, small, 2)
        manager.state.slots_idle = False
        await _feed_until_settled(manager)
        assert len(manager.stores.beast) == 200 and len(manager.scheduler.hosts) == 10

        # Slots idle (no host ready): room 600 >= RAM/16, so BEAST is read now.
        manager.state.slots_idle = True
        await _feed_until_settled(manager)
        assert len(manager.stores.beast) == 0
        assert manager.scheduler.queued_urls == 1_200
        assert len(manager.scheduler.hosts) == 110


def test_urlseen_merges_sooner_while_the_frontier_runs_dry(tmp_path: Path) -> None:
    asyncio.run(_dry_frontier_merges(tmp_path))


async def _dry_frontier_merges(tmp_path: Path) -> None:
    # One site at host delay 0: RAM empties in a fraction of urlseen_flush_interval_s, and
    # URL-seen holds all the crawl has left. Waiting out the interval idled every fetch
    # slot for up to half a second each time; now a merge waits for its cost share alone.
    async with offline_manager(
        tmp_path, concurrency=20, urlseen_flush_interval_s=0.5, beast_turn_s=0
    ) as manager:
        admission, seen = manager.admission, manager.stores.seen
        rounds = seen.drum.rounds
        _admit(manager, ["http://site.test"], 5)
        await _feed_until_settled(manager)
        manager.admission.admit([f"http://site.test/q/{i}" for i in range(5)], 1, None)
        t0 = manager.clock()
        assert admission.frontier_dry() and admission.seen_merge_due(t0)
        admission.take_new_urls(t0)  # merges
        assert manager.counters["urlseen_merges_dry"] == 1
        seen.flush()  # the round ends; the next call places its URLs
        admission.take_new_urls(t0)
        await _feed_until_settled(manager)
        manager.admission.admit([f"http://site.test/r/{i}" for i in range(5)], 1, None)
        assert seen.pending and manager.scheduler.queued_urls == 10
        assert admission.frontier_dry()  # 10 URLs in RAM for 20 fetch slots

        rounds.last_round_s = 0.05  # a cheap round: due after 0.05 / 0.2 = 0.25 s
        assert TUNING.dry_seen_merge_share == 0.2
        assert not admission.seen_merge_due(t0 + 0.2)
        assert admission.seen_merge_due(t0 + 0.26)
        rounds.last_round_s = 1.0  # a costly one: urlseen_flush_interval_s, as before
        assert not admission.seen_merge_due(t0 + 0.45)
        assert admission.seen_merge_due(t0 + 0.5)

        # RAM holding more URLs than fetch slots, the slots busy: the frontier is not dry,
        # and a merge waits for the interval and the early-merge share (1.0 / 0.05 s).
        _admit(manager, [f"http://other{i}.test" for i in range(4)], 5)
        await _feed_until_settled(manager)
        manager.state.slots_idle = False
        assert manager.scheduler.queued_urls >= 20 and not admission.frontier_dry()
        manager.admission.admit(["http://site.test/s/0"], 1, None)
        t1 = t0 + 60.0
        admission.take_new_urls(t1)  # due: a minute has passed
        assert manager.counters["urlseen_merges_forced"] == 1
        seen.flush()
        # Its round ran in the background, and its new URL went to BEAST in that call or
        # waits for the next: placed and routed now, whichever (BEAST empty: running low).
        admission.take_new_urls(t1)
        await _feed_until_settled(manager)
        manager.state.slots_idle = False
        assert len(manager.stores.beast) == 0 and not admission.frontier_dry()
        manager.admission.admit(["http://site.test/s/1"], 1, None)
        rounds.last_round_s = 0.05
        assert not admission.seen_merge_due(t1 + 0.26)
        assert not admission.seen_merge_due(t1 + 0.9)
        assert admission.seen_merge_due(t1 + 1.0)


def test_the_loop_does_not_wait_for_work_it_can_do_now(tmp_path: Path) -> None:
    asyncio.run(_no_needless_waits(tmp_path))


async def _no_needless_waits(tmp_path: Path) -> None:
    # A crawl's start sat out the loop's longest wait (0.25 s) three times before its
    # second request: for the seed's URL-seen round, for the robots check of the seed's
    # origin, and for the round of the front page's links.
    clock = FakeClock()
    async with offline_manager(tmp_path, clock=clock, urlseen_flush_interval_s=0.5) as manager:
        gate, seen = manager.gate, manager.stores.seen
        # URL-seen's round merges in its thread, and wakes the loop when it has.
        manager.admission.admit(["http://site.test/"], 0, None)
        manager._wake.clear()
        seen.flush(wait=False)
        assert seen.drum.busy
        assert await manager._wake.wait(30)  # set by the round, not timed out
        manager.admission.take_new_urls(clock())
        assert len(manager.stores.beast) == 1

        # Routed, its origin's robots check waits for a flush: due at once the first time.
        manager.state.slots_idle = True  # nothing to fetch yet
        assert gate.robots_due_s(clock()) is None
        gate.feed(clock())
        assert gate.robots_due_s(clock()) == 0.0
        gate.feed(clock())  # flushed: the URL waits in QR for its origin's robots.txt
        assert gate.robots_due_s(clock()) is None and len(gate.qr) == 1

        # Another origin's check: due robots_flush_starving_s after that flush while the
        # fetch slots idle, urlseen_flush_interval_s after it while they are busy.
        gate.route(encode_payload("http://other.test/", 0, None))
        assert gate.robots_due_s(clock()) == pytest.approx(TUNING.robots_flush_starving_s)
        gate.submit_checks()  # as the next feed does first
        assert gate.robots_due_s(clock()) == pytest.approx(TUNING.robots_flush_starving_s)
        manager.state.slots_idle = False
        assert gate.robots_due_s(clock()) == pytest.approx(0.5)
        clock.advance(0.2)
        assert gate.robots_due_s(clock()) == pytest.approx(0.3)


def test_new_urls_are_placed_a_batch_at_a_time_and_a_checkpoint_keeps_their_place(
    tmp_path: Path,
) -> None:
    asyncio.run(_placed_in_parts(tmp_path))


async def _placed_in_parts(tmp_path: Path) -> None:
    # A DRUM round can find hundreds of thousands of URLs new: the crawl loop places them
    # a batch per turn (TUNING.place_budget_s), so that it goes on dispatching meanwhile.
    n = 2 * TUNING.place_batch_urls + 100
    found = [f"http://h{i % 8_000}.test/p/{i}" for i in range(n)]
    changes = {"beast_turn_s": 0, "budget_max": 10_000}
    async with offline_manager(tmp_path, **changes) as manager:
        manager.state.placing = Pace(1.0, 1.0)  # turns' budgets here, their share below
        manager.admission.admit(found, 1, None)
        manager.stores.seen.flush()
        manager.admission.take_new_urls(manager.clock(), budget_s=0.0)
        # One batch, then the budget is spent:
        assert len(manager.stores.beast) == TUNING.place_batch_urls
        assert not manager.finished()
        manager.admission.take_new_urls(manager.clock(), budget_s=0.0)
        assert len(manager.stores.beast) == 2 * TUNING.place_batch_urls
        assert manager.stores.beast.stats().qf_records == 0  # budgets of 10,000: all in the ring
        # A periodic checkpoint falls due on time, placing or not, and places nothing:
        # URL-seen's commit notes how far its round was taken.
        due = manager.checkpointer.last_checkpoint + manager.settings.checkpoint_interval_s
        assert not manager.checkpointer.due(due - 0.1) and manager.checkpointer.due(due)
        manager.checkpointer.commit(Laps())()
        assert len(manager.stores.beast) == 2 * TUNING.place_batch_urls
        assert manager.admission.new_urls is not None
    async with offline_manager(tmp_path, **changes) as restored:
        restored.admission.take_new_urls(restored.clock())
        assert len(restored.stores.beast) == n  # the rest, none twice
        out = read_all(restored.stores.beast)
        assert sorted(decode_payload(p)[0] for p in out) == sorted(found)


def test_urls_read_from_beast_are_routed_a_batch_at_a_time_and_a_checkpoint_keeps_all(
    tmp_path: Path,
) -> None:
    asyncio.run(_routed_in_parts(tmp_path))


async def _routed_in_parts(tmp_path: Path) -> None:
    # A BEAST read brings up to half of RAM at once (50,000 URLs by default): the crawl
    # loop routes them a batch per turn (TUNING.route_budget_s), and they count as in RAM.
    changes = {
        "frontier_ram_urls": 10_000,
        "beast_turn_s": 0,
        "budget_max": 10_000,
        "host_delay_s": 1.0,
        "host_delay_min_s": 1.0,
    }
    hosts = [f"http://r{i}.test" for i in range(20)]
    async with offline_manager(tmp_path, **changes) as manager:
        _admit(manager, hosts, 200)
        assert len(manager.stores.beast) == 4_000
        # Most of them wait in QF, which BEAST places again a step per turn; a turn
        # routes one batch before reading and one after, then its budget is spent.
        turns = 0
        while len(manager.stores.beast):
            manager.gate.feed(manager.clock(), budget_s=0.0)
            turns += 1
            assert manager.scheduler.queued_urls <= 2 * turns * TUNING.route_batch_urls < 4_000
        assert turns > 1 and manager.stats().queued_ram == 4_000
        assert not manager.finished()
        routed = manager.scheduler.queued_urls
        manager.gate.feed(manager.clock(), budget_s=0.0)  # the next turn goes on first thing
        assert manager.scheduler.queued_urls == routed + TUNING.route_batch_urls
        unrouted = len(manager.gate.to_route)
        manager.checkpointer.commit(Laps())()  # its RAM rows hold every URL, routed or not
        assert len(manager.gate.to_route) == unrouted > 0
        await asyncio.sleep(0)
    async with offline_manager(tmp_path, **changes) as restored:
        assert restored.stats().queued == 4_000  # restored from RAM rows: none lost


def test_routing_takes_its_share_of_the_time_while_the_scheduler_holds_enough(
    tmp_path: Path,
) -> None:
    asyncio.run(_routing_paced(tmp_path))


async def _routing_paced(tmp_path: Path) -> None:
    # A BEAST read brings half of RAM at once, which the crawl needs over a whole turn:
    # once the scheduler holds route_full_speed_below of RAM, routing takes route_share
    # of the time; below that, or with fetch slots idle, it goes at full speed.
    clock = FakeClock(0.0)
    changes = {
        "frontier_ram_urls": 10_000,
        "beast_turn_s": 0,
        "budget_max": 10_000,
        "host_delay_s": 1.0,
        "host_delay_min_s": 1.0,
    }
    hosts = [f"http://r{i}.test" for i in range(20)]
    async with offline_manager(tmp_path, **changes) as manager:
        manager.state.routing = pace = Pace(TUNING.route_share, TUNING.route_budget_s, clock=clock)
        manager.state.placing = Pace(1.0, 1.0)  # BEAST's re-splits are not what is paced here
        manager.state.slots_idle = False
        _admit(manager, hosts, 300)
        floor = int(10_000 * TUNING.route_full_speed_below)

        def feed_routed() -> int:
            """URLs one feed routed (a turn's, with its budget spent at once)."""
            before = manager.scheduler.queued_urls
            manager.gate.feed(manager.clock(), budget_s=0.0)
            return manager.scheduler.queued_urls - before

        def in_debt() -> None:
            """Spend more than the pace has saved up: alone, it would grant nothing.
            (Granted at full speed, so that the slice counts however little was saved:
            the feeds before charged real seconds, more on a loaded machine.)"""
            pace.allowance(0.0, full_speed=True)
            clock.now += 1.0
            pace.spent()

        # Below the floor the feeds route at full speed, whatever the pace has saved up.
        for _ in range(100):
            in_debt()
            feed_routed()
            if not len(manager.stores.beast) and manager.scheduler.queued_urls >= floor:
                break
        assert floor <= manager.scheduler.queued_urls < floor + 2 * TUNING.route_batch_urls
        assert len(manager.gate.to_route) == 6_000 - manager.scheduler.queued_urls
        # At the floor, a pace in debt holds routing back until time is saved up again.
        in_debt()
        assert feed_routed() == 0
        manager.state.slots_idle = True  # unless slots idle: the crawl waits for these URLs
        assert feed_routed() == TUNING.route_batch_urls
        manager.state.slots_idle = False
        assert feed_routed() == 0  # the full-speed batch counted against the pace
        clock.now += 2 * TUNING.route_budget_s / TUNING.route_share
        assert feed_routed() == TUNING.route_batch_urls
        manager.gate.feed(manager.clock())  # no budget (a checkpoint's): every URL
        assert not manager.gate.to_route and manager.scheduler.queued_urls == 6_000
        await asyncio.sleep(0)


def test_forced_pld_merges_take_a_bounded_share_of_the_time(tmp_path: Path) -> None:
    asyncio.run(_pld_merges_paced(tmp_path))


async def _pld_merges_paced(tmp_path: Path) -> None:
    # The PLD graph is merged every budget_refresh_s, unless the last forced merge took
    # longer than TUNING.forced_pld_merge_share of that: then as much longer as its cost says.

    async with offline_manager(tmp_path, budget_refresh_s=10.0) as manager:
        plds = manager.stores.plds
        assert plds is not None

        def forced_merge_at(now: float) -> bool:
            plds.add([("a.test", f"t{now}.test")])  # pending: a forced merge takes it
            manager.admission.take_new_urls(now)
            plds.edges.settle()  # the merge runs in the background
            return plds.queued_edges == 0

        # The rule, not the machine: a merge so far took no time (the restore's own merge on
        # a loaded machine may have taken long enough to space the next one).
        plds.edges.rounds.last_round_s = 0.0
        start = manager.admission.last_pld_flush
        assert not forced_merge_at(start + 9.0)
        assert forced_merge_at(start + 10.0)
        plds.edges.rounds.last_round_s = 1.0  # as if that merge had taken a second
        spacing = 1.0 / TUNING.forced_pld_merge_share
        assert spacing > 10.0
        assert not forced_merge_at(start + 10.0 + spacing - 1.0)
        assert forced_merge_at(start + 10.0 + spacing)


def test_urlseen_is_merged_before_the_fetchers_run_dry(tmp_path: Path) -> None:
    asyncio.run(_merged_early(tmp_path))


async def _merged_early(tmp_path: Path) -> None:
    # Fetch slots busy throughout: only the frontier's low water (BEAST empty, RAM half
    # empty) can force a merge of URL-seen's part-filled buffers; otherwise the URLs
    # found meanwhile wait for the buffers to fill, or for idle slots.

    changes = {
        "host_delay_s": 1.0,
        "host_delay_min_s": 1.0,
        "budget_max": 10_000,
        "beast_turn_s": 0,
    }
    found = [f"http://new{i}.test/" for i in range(50)]
    for ram, merged in ((1_600, False), (2_400, True)):
        async with offline_manager(
            tmp_path / str(ram), frontier_ram_urls=ram, **changes
        ) as manager:
            _admit(manager, [f"http://big{i}.test" for i in range(10)], 100)
            await _feed_until_settled(manager)
            assert manager.scheduler.queued_urls == 1_000 and len(manager.stores.beast) == 0
            manager.state.slots_idle = False
            manager.admission.admit(found, 1, None)
            assert manager.stores.seen.pending == len(found)
            now = manager.clock() + 1.0
            manager.admission.take_new_urls(now)
            manager.stores.seen.settle()  # the merge runs in the background: its URLs come next
            manager.admission.take_new_urls(now)
            # 1,000 URLs in RAM: over half of 1,600 (they wait), under half of 2,400.
            assert manager.stores.seen.pending == (0 if merged else len(found))
            assert len(manager.stores.beast) == (len(found) if merged else 0)
            if not merged:
                continue
            # An early merge that took a second is followed by none for 1/SHARE seconds.
            manager.stores.seen.drum.rounds.last_round_s = 1.0
            await _feed_until_settled(manager)
            assert len(manager.stores.beast) == 0 and manager.scheduler.queued_urls == 1_050
            manager.state.slots_idle = False
            manager.admission.admit([f"http://later{i}.test/" for i in range(5)], 1, None)
            spacing = 1.0 / TUNING.early_seen_merge_share
            manager.admission.take_new_urls(now + spacing - 1.0)
            assert manager.stores.seen.pending == 5 and len(manager.stores.beast) == 0
            manager.admission.take_new_urls(now + spacing)
            manager.stores.seen.settle()
            manager.admission.take_new_urls(now + spacing)
            assert manager.stores.seen.pending == 0 and len(manager.stores.beast) == 5


def _spend_placing_share(manager: Manager, clock: FakeClock) -> None:
    """Give the manager a placing Pace on the fake ``clock``, its time saved up spent."""
    manager.state.placing = pace = Pace(TUNING.place_share, 0.010, clock=clock)
    pace.allowance(0.010)
    clock.now += 1.0
    pace.spent()


# Budget 1 and a ring of 2 queues growing to 4: one host's URLs go mostly to QF, and the
# pass that ends re-splits it.
SMALL_RING = {
    "beast_turn_s": 0,
    "budget_default": 1,
    "host_delay_s": 1.0,
    "host_delay_min_s": 1.0,
    "beast_queues": 2,
    "beast_max_queues": 4,
}


def test_placing_takes_its_share_of_the_time_and_comes_after_a_resplit(tmp_path: Path) -> None:
    asyncio.run(_placing_paced(tmp_path))


async def _placing_paced(tmp_path: Path) -> None:
    clock = FakeClock(0.0)
    async with offline_manager(tmp_path, **SMALL_RING) as manager:
        beast, seen = manager.stores.beast, manager.stores.seen
        assert beast is not None and seen is not None
        _spend_placing_share(manager, clock)
        # BEAST empty: the crawl waits for these URLs, they are placed at full speed.
        _admit(manager, ["http://a.test"], 5)
        # Budget 1, a ring of 2 (the one read takes none): p/0 in it, p/1-p/4 in QF.
        assert len(beast) == 5 and beast.stats().qf_records == 4

        # BEAST has URLs to give: new ones wait until time is saved up again.
        manager.admission.admit(["http://a.test/p/new"], 1, None)
        seen.flush()
        manager.admission.take_new_urls(manager.clock(), budget_s=TUNING.place_budget_s)
        assert len(beast) == 5
        clock.now += 1.0 / TUNING.place_share

        # The pass ends and the ring grows to 4: QF is placed again, one URL a step here.
        with mock.patch.object(beast_module, "RESPLIT_BATCH", 1):
            out = beast.read(1) + beast.read(1)
            assert beast.resplitting
            # QF's URLs are placed before the new one, which would otherwise take p/2's
            # place in the ring.
            manager.admission.take_new_urls(manager.clock(), budget_s=TUNING.place_budget_s)
            assert not beast.resplitting
            out += read_all(beast)
        assert [decode_payload(p)[0].rsplit("/", 1)[1] for p in out] == [
            "0",
            "1",
            "2",
            "3",
            "4",
            "new",
        ]


def test_a_resplit_takes_placing_s_share_of_the_time_unless_slots_idle(tmp_path: Path) -> None:
    asyncio.run(_resplit_paced(tmp_path))


async def _resplit_paced(tmp_path: Path) -> None:
    # Placing QF's URLs again is placing: the feed's reads step it only when placing's
    # pace allows, or at full speed while fetch slots idle for want of a ready host.
    clock = FakeClock(0.0)
    async with offline_manager(tmp_path, **SMALL_RING) as manager:
        beast = manager.stores.beast
        _admit(manager, ["http://a.test"], 20)
        assert beast.stats().qf_records == 19

        def feed_steps() -> int:
            """Re-split steps one feed (a turn's, with its budget spent at once) took."""
            left = beast.stats().qf_resplit_left
            manager.gate.feed(manager.clock(), budget_s=0.0)
            return left - beast.stats().qf_resplit_left

        step = beast.resplit_step

        def slow_step() -> None:
            step()
            clock.now += 0.050  # each step takes longer than placing's burst

        with (
            mock.patch.object(beast_module, "RESPLIT_BATCH", 1),
            mock.patch.object(beast, "resplit_step", slow_step),
        ):
            out = beast.read(1) + beast.read(1)  # the pass ends: QF is placed again
            assert len(out) == 1 and beast.resplitting
            _spend_placing_share(manager, clock)
            manager.state.slots_idle = False
            assert feed_steps() == 0  # placing has had its share
            manager.state.slots_idle = True
            assert feed_steps() == 1  # the crawl waits for these URLs: full speed
            manager.state.slots_idle = False
            assert feed_steps() == 0  # and the step counted
            clock.now += 1.0 / TUNING.place_share  # time saved up again
            assert feed_steps() == 1
            assert feed_steps() == 0
            manager.gate.feed(manager.clock())  # no budget (a checkpoint's): no limit
            assert not beast.resplitting
        await asyncio.sleep(0)


def read_all(beast: Beast) -> list[bytes]:
    out: list[bytes] = []
    while len(beast):
        out += beast.read(10)
    return out


def test_urls_that_robots_rules_in_ram_disallow_take_no_place_in_beast(tmp_path: Path) -> None:
    asyncio.run(_robots_refused(tmp_path))


async def _robots_refused(tmp_path: Path) -> None:
    async with offline_manager(tmp_path) as manager:
        manager.stores.robots.record("http://a.test", 200, "User-agent: *\nDisallow: /private/\n")
        manager.stores.robots.record("http://c.test", 404, None)  # no robots.txt: all allowed
        urls = [
            "http://a.test/private/1",
            "http://a.test/ok",
            "http://b.test/private/1",
            "http://c.test/private/1",
            "http://a.test/private/2",
        ]
        manager.admission.place([encode_payload(u, 2, "http://a.test/") for u in urls])
        # b.test's rules are not known yet: its URL goes on, to be checked when read.
        assert manager.stores.beast.stats().refused == 2
        assert manager.counters["dropped.robots_disallowed"] == 2
        assert sorted(manager.stores.beast.read(10)) == sorted(
            encode_payload(u, 2, "http://a.test/")
            for u in ("http://a.test/ok", "http://b.test/private/1", "http://c.test/private/1")
        )
        manager.crawl_log.flush()
        logged = [json.loads(line) for line in (tmp_path / "crawl.log").read_text().splitlines()]
        assert [(e["url"], e["error"], e["depth"], e["via"], e["status"]) for e in logged] == [
            (u, "robots_disallowed", 2, "http://a.test/", None)
            for u in ("http://a.test/private/1", "http://a.test/private/2")
        ]


def test_urls_waiting_in_qf_are_checked_against_robots_rules_when_they_leave_it(
    tmp_path: Path,
) -> None:
    """URLs over budget wait in QF unchecked; when a re-split gives them a place in the
    ring, those that robots rules learnt meanwhile disallow are dropped then, and the
    places go to the next URLs of their site."""
    asyncio.run(_qf_refused(tmp_path))


async def _qf_refused(tmp_path: Path) -> None:
    async with offline_manager(
        tmp_path,
        budget_default=1,
        host_delay_s=1.0,
        host_delay_min_s=1.0,
        beast_queues=2,
        beast_max_queues=2,
        beast_turn_s=0,
    ) as manager:
        beast = manager.stores.beast
        paths = ["/ok/0", "/private/1", "/ok/2", "/private/3", "/ok/4"]
        manager.admission.place([encode_payload(f"http://a.test{p}", 1, None) for p in paths])
        # One URL a queue; the queue being read takes none (unpaced turns): four go to QF.
        assert beast.stats().qf_records == 4 and beast.stats().refused == 0
        manager.stores.robots.record("http://a.test", 200, "User-agent: *\nDisallow: /private/\n")
        read = [beast.read(1) for _ in range(8)]
        assert [decode_payload(r)[0] for batch in read for r in batch] == [
            f"http://a.test{p}" for p in ("/ok/0", "/ok/2", "/ok/4")
        ]
        assert beast.stats().refused == 2 and len(beast) == 0
        assert manager.counters["dropped.robots_disallowed"] == 2


def test_places_give_each_url_its_pld_hash_budget_and_host(tmp_path: Path) -> None:
    """What BEAST places URLs by comes a batch at a time: each URL's PLD hash, that PLD's
    STAR budget now (the maximum for a seed PLD in a scoped crawl) and its
    scheme://authority's hash, whether that authority is cached or not; the budgets by
    PLD hash (a re-split of QF) are the same."""
    asyncio.run(_places(tmp_path))


async def _places(tmp_path: Path) -> None:
    urls = [
        "http://a.example.com/1",
        "http://b.example.com:8080/2",
        "https://popular.test/3",
        "http://a.example.com/4",
        "http://other.test/5?q=1",
    ]
    records = [encode_payload(u, 1, None) for u in urls]
    for scope in ("any", "domain"):
        async with offline_manager(tmp_path / scope, scope=scope) as manager:
            s = manager.settings
            manager.star.observe(["popular.test"], [s.budget_indegree_floor * 3])
            manager.pricing.set_seeds(["http://other.test/"])
            popular = manager.star.budget("popular.test")
            assert popular > s.budget_default
            budgets = {
                "example.com": s.budget_default,
                "popular.test": popular,
                "other.test": s.budget_max if scope == "domain" else s.budget_default,
            }
            for _ in range(2):  # the authorities' cache empty, then filled
                hashes, got_budgets, hosts = manager.pricing.places(records)
                assert hashes == [pld_hash(u_pld(u)) for u in urls]
                assert got_budgets == [budgets[u_pld(u)] for u in urls]
                assert hosts == [
                    xxhash.xxh3_64_intdigest(u[: u.index("/", 8)].encode()) for u in urls
                ]
                assert manager.pricing.budgets_by_hash(np.array(hashes, np.uint64)) == got_budgets


def u_pld(url: str) -> str:
    return urls_module.pld(urls_module.host_of(url))


def test_urls_are_routed_by_the_origin_and_host_of_their_authority(tmp_path: Path) -> None:
    """Routing finds a URL's origin and host by its scheme://authority (remembered, in a
    bounded cache): userinfo is not part of either, a port is part of the origin only.
    BEAST's robots admit takes the authority as it is, so a URL with userinfo is
    decided at routing."""
    asyncio.run(_routed_by_authority(tmp_path))


async def _routed_by_authority(tmp_path: Path) -> None:
    rules = "User-agent: *\nDisallow: /private/\n"
    found = [
        "http://a.test/ok",
        "http://user@a.test/x",
        "http://a.test:8080/private/1",
        "http://user:pw@a.test/private/2",
        "http://[::1]:8080/y",
    ]
    payloads = [encode_payload(u, 1, None) for u in found]
    async with offline_manager(tmp_path) as manager:
        manager.stores.robots.record("http://a.test", 200, rules)
        manager.stores.robots.record("http://a.test:8080", 404, None)  # no robots.txt: all allowed
        with mock.patch.object(manager.pricing, "cache_entries", 3):
            for _ in range(2):  # the cache empty, then filled (and cleared when full)
                assert [manager.pricing.authority(p)[3:] for p in payloads] == [
                    (urls_module.origin_of(u), urls_module.host_of(u)) for u in found
                ]
                assert len(manager.pricing.authorities) <= 3
        assert [manager.gate.robots_admit(p) for p in payloads] == [True] * 5
        for payload in payloads:
            manager.gate.route(payload)
        queued = {
            h.name: [q.url for q in h.queue] for h in manager.scheduler.hosts.values() if h.queue
        }
        # [::1]'s rules are not known: its URL waits for a robots check.
        assert queued == {"a.test": found[:3]}
        assert [origin for origin, _ in manager.gate.to_check] == ["http://[::1]:8080"]
        assert manager.counters["dropped.robots_disallowed"] == 1
