"""BEAST's paced turns (IRLbot: a PLD passes at most Bx URLs "every T time units"): a turn
lasts ``turn_s`` unless the caller says its URLs are crawled, the current queue takes the
URLs of PLDs with budget left in it, nothing is lost, and a commit keeps the turn's time.
Also the manager's side: when a turn may end early, and the setting's default."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.frontier.beast import Beast
from drumbeat.frontier.politeness import PolitenessScheduler, QueuedURL
from drumbeat.settings import Settings, SettingsError, build
from drumbeat.testing import FakeClock
from tests.frontier.test_beast import per_record

SPAM, LEGIT = 1, 2


def pld_of(record: bytes) -> int:
    return int(record.split(b":")[0])


def paced(
    path: Path,
    clock: FakeClock,
    *,
    turn_s: float = 10.0,
    budget: int = 3,
    queues: int = 4,
    max_queues: int = 8,
    pld_slots: int = 1 << 10,
    state: dict | None = None,
) -> Beast:
    return Beast(
        path,
        state=state,
        queues=queues,
        max_queues=max_queues,
        pld_slots=pld_slots,
        fsync=False,
        turn_s=turn_s,
        clock=clock,
        rebudget=per_record(lambda r: (pld_of(r), budget)),
    )


def place(beast: Beast, pld: int, first: int, n: int, budget: int = 3) -> list[bytes]:
    records = [b"%d:%d" % (pld, first + i) for i in range(n)]
    beast.place_many(records, [pld] * n, [budget] * n)
    return records


def test_a_pld_passes_at_most_its_budget_per_turn(tmp_path: Path) -> None:
    clock = FakeClock(100.0)
    beast = paced(tmp_path / "b", clock)
    place(beast, SPAM, 0, 100)
    # Paced: the current queue is open, so the first 3 are readable at once; then the
    # turn holds the rest back however much is asked for.
    assert beast.read(50) == [b"1:0", b"1:1", b"1:2"]
    assert beast.holding and beast.read(50) == []
    clock.now += 9.9
    assert beast.read(50) == []
    clock.now += 0.1
    assert beast.read(50) == [b"1:3", b"1:4", b"1:5"]
    assert beast.holding
    for _ in range(40):
        clock.now += 10.0
        assert len(beast.read(50)) <= 3
    beast.close()


def test_unpaced_turns_end_when_read(tmp_path: Path) -> None:
    """turn_s = 0 is the old BEAST: the current queue is closed, read() runs on."""
    clock = FakeClock(100.0)
    beast = paced(tmp_path / "b", clock, turn_s=0.0)
    records = place(beast, SPAM, 0, 30)
    assert beast.read(100) == records and not beast.holding
    beast.close()


def test_a_pld_found_during_a_turn_is_read_in_it(tmp_path: Path) -> None:
    """A PLD with budget left in the current queue goes there: no wait for the next turn;
    one that has used it goes to the next queue."""
    clock = FakeClock(100.0)
    beast = paced(tmp_path / "b", clock)
    place(beast, SPAM, 0, 10)
    assert len(beast.read(50)) == 3 and beast.holding
    clock.now += 4.0
    legit = place(beast, LEGIT, 0, 2)
    place(beast, SPAM, 10, 5)  # over its budget for this turn
    assert not beast.holding
    assert beast.read(50) == legit
    legit += place(beast, LEGIT, 2, 3)  # one fits in this turn, two wait
    assert beast.read(50) == [b"2:2"]
    clock.now += 6.0
    # Next turn: spam's next 3 (placed first), legit's next 2.
    assert beast.read(50) == [b"1:3", b"1:4", b"1:5", b"2:3", b"2:4"]
    beast.close()


def test_drained_ends_a_turn_once_per_call(tmp_path: Path) -> None:
    clock = FakeClock(100.0)
    beast = paced(tmp_path / "b", clock, budget=2)
    place(beast, SPAM, 0, 20, budget=2)
    assert beast.read(50) == [b"1:0", b"1:1"]
    # Everything read is crawled: one more turn now, not all of them.
    assert beast.read(50, drained=True) == [b"1:2", b"1:3"]
    assert beast.holding
    assert beast.stats().turns == 1
    beast.close()


def test_an_empty_queue_takes_no_time(tmp_path: Path) -> None:
    clock = FakeClock(100.0)
    beast = paced(tmp_path / "b", clock, queues=2, max_queues=2)
    assert beast.read(5) == [] and not beast.holding
    place(beast, SPAM, 0, 3)
    assert beast.read(5) == [b"1:0", b"1:1", b"1:2"]
    clock.now += 10.0
    assert beast.read(5) == [] and not beast.holding and len(beast) == 0
    # The new current queue was empty when it became current: new URLs are read at once.
    place(beast, SPAM, 3, 2)
    assert beast.read(5) == [b"1:3", b"1:4"]
    beast.close()


def test_a_commit_keeps_the_time_spent_in_the_turn(tmp_path: Path) -> None:
    d = tmp_path / "b"
    clock = FakeClock(100.0)
    beast = paced(d, clock)
    place(beast, SPAM, 0, 10)
    assert len(beast.read(50)) == 3
    clock.now += 6.0
    state = beast.commit()
    assert state["turn_elapsed_s"] == pytest.approx(6.0)
    beast.close()
    later = FakeClock(5000.0)  # another process: another monotonic clock
    beast = paced(d, later, state=state)
    assert beast.holding and beast.read(50) == []
    later.now += 3.9
    assert beast.read(50) == []
    later.now += 0.1
    assert beast.read(50) == [b"1:3", b"1:4", b"1:5"]
    beast.close()


def test_a_state_without_turn_time_reopens(tmp_path: Path) -> None:
    d = tmp_path / "b"
    clock = FakeClock(100.0)
    beast = paced(d, clock)
    place(beast, SPAM, 0, 10)
    state = beast.commit()
    beast.close()
    del state["turn_elapsed_s"]  # a checkpoint written before paced turns
    del state["counters"]["turns"]
    beast = paced(d, clock, state=state)
    assert beast.read(50) == [b"1:0", b"1:1", b"1:2"]
    beast.close()


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000), slots=st.sampled_from([1, 4, 1 << 10]), queues=st.integers(1, 4)
)
def test_paced_beast_loses_nothing_and_keeps_budgets(seed: int, slots: int, queues: int) -> None:
    """Random places, reads (drained or not), clock steps, commits and reopens: every
    record comes out exactly once, and no PLD gets more than its budget in one turn (slot
    collisions only make that stricter)."""
    import tempfile

    rng = random.Random(seed)
    budgets = {p: rng.randint(1, 4) for p in range(12)}
    clock = FakeClock(100.0)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "b"

        def opened(state: dict | None = None) -> Beast:
            return Beast(
                d,
                state=state,
                queues=queues,
                max_queues=8,
                pld_slots=slots,
                fsync=False,
                turn_s=5.0,
                clock=clock,
                rebudget=per_record(lambda r: (pld_of(r), budgets[pld_of(r)])),
            )

        beast = opened()
        placed: list[bytes] = []
        out: list[bytes] = []
        per_turn: Counter[tuple[int, int]] = Counter()
        committed = None
        for _ in range(80):
            op = rng.random()
            if op < 0.4:
                plds = [rng.randrange(12) for _ in range(rng.randint(1, 30))]
                records = [b"%d:%d" % (p, len(placed) + i) for i, p in enumerate(plds)]
                placed += records
                beast.place_many(records, plds, [budgets[p] for p in plds])
            elif op < 0.8:
                drained = rng.random() < 0.3
                for _ in range(rng.randint(1, 40)):  # one by one: each in its own turn
                    got = beast.read(1, drained=drained)
                    out += got
                    per_turn.update((beast.stats().turns, pld_of(r)) for r in got)
            elif op < 0.9:
                clock.now += rng.choice([1.0, 5.0, 12.0])
            elif op < 0.95:
                committed = (beast.commit(), len(placed), len(out))
            elif committed is not None:
                # Roll back to the commit: what was placed or read after it is undone.
                state, n_placed, n_out = committed
                beast.close()
                beast = opened(state)
                placed, out = placed[:n_placed], out[:n_out]
                per_turn.clear()
            assert all(n <= budgets[p] for (_, p), n in per_turn.items())
        for _ in range(10_000):
            if not len(beast):
                break
            clock.now += 5.0
            out += beast.read(1000)
        assert Counter(out) == Counter(placed)
        beast.close()


# -- the manager's side -------------------------------------------------------------------


def test_turn_default_is_b0_times_host_delay_and_zero_turns_it_off() -> None:
    assert Settings().beast_turn() == Settings().budget_default * Settings().host_delay_s
    s = build(Settings(), {"host_delay_s": 0.5, "budget_default": 4})
    assert s.beast_turn() == 2.0
    assert build(Settings(), {"beast_turn_s": 0}).beast_turn() == 0.0
    assert build(Settings(), {"beast_turn_s": 3.5}).beast_turn() == 3.5
    with pytest.raises(SettingsError, match="beast_turn_s"):
        build(Settings(), {"beast_turn_s": -1})


def test_due_within_ignores_hosts_held_back_longer() -> None:
    """The manager ends a paced turn early when no host in RAM is due within τh: a host in
    back-off must not hold the turn, a host waiting out its delay must."""
    s = PolitenessScheduler(host_delay_s=1.0, ip_delay_s=0.0)
    assert not s.due_within(10.0)
    h = s.host("a.test")
    s.set_ip(h, "127.1.0.1")
    s.push(h, QueuedURL("http://a.test/", 0, None))
    assert s.due_within(0.0)
    assert s.next_ready(0.0) is h  # a request in flight: a busy host does not count
    assert not s.due_within(0.0)
    s.release(h)
    s.delay_until(h, 500.0)  # back-off: due far away
    assert not s.due_within(11.0) and s.due_within(500.0)
    s.drain(h)
    assert not s.due_within(1000.0)  # nothing queued
