"""BEAST held against a plain-Python model of the same semantics, plus the properties
that matter to the crawl: nothing lost, spam delayed, j doubling, collisions, rollback."""

from __future__ import annotations

import copy
import random
import shutil
import tempfile
from collections import Counter, deque
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.frontier import beast as beast_module
from drumbeat.frontier.beast import Beast, theorem7_bound
from drumbeat.frontier.diskqueue import DiskQueue

TOP = 1 << 63  # PLD hashes above 2**63 exercise the unsigned tag; TOP % slots == 0


class Model:
    """BEAST as the paper draws it: per queue, how many URLs each PLD has put there.

    A PLD's next URL goes to the furthest upcoming queue it has used if that one still
    has budget left, else to the upcoming queue after it (the first upcoming one if it
    has none), else to QF. A queue's counts are forgotten when it becomes current.
    """

    def __init__(self, queues: int, max_queues: int) -> None:
        self.ring: list[deque[bytes]] = [deque() for _ in range(queues)]
        self.used: list[dict[int, int]] = [{} for _ in range(queues)]
        self.qf: deque[bytes] = deque()
        self.cur = 0
        self.max_queues = max_queues

    def upcoming(self) -> list[int]:
        j = len(self.ring)
        return [(self.cur + k) % j for k in range(1, j)]

    def place(self, record: bytes, pld: int, budget: int) -> None:
        order = self.upcoming()
        used_at = [k for k, r in enumerate(order) if self.used[r].get(pld)]
        k = used_at[-1] if used_at else 0
        if k < len(order) and self.used[order[k]].get(pld, 0) >= max(budget, 1):
            k += 1
        if k >= len(order):
            self.qf.append(record)
            return
        r = order[k]
        self.used[r][pld] = self.used[r].get(pld, 0) + 1
        self.ring[r].append(record)

    def read(self, n: int, rebudget) -> list[bytes]:
        out: list[bytes] = []
        while len(out) < n:
            if self.ring[self.cur]:
                out.append(self.ring[self.cur].popleft())
            elif len(self):
                self.advance(rebudget)
            else:
                break
        return out

    def advance(self, rebudget) -> None:
        if self.cur + 1 < len(self.ring):
            self.cur += 1
        else:
            self.cur = 0
            grown = min(2 * len(self.ring), self.max_queues)
            self.ring += [deque() for _ in range(grown - len(self.ring))]
            self.used += [{} for _ in range(grown - len(self.used))]
        self.used[self.cur] = {}
        if self.cur == 0:
            old, self.qf = self.qf, deque()
            for record in old:
                self.place(record, *rebudget(record))

    def __len__(self) -> int:
        return sum(map(len, self.ring)) + len(self.qf)


def per_record(rebudget):
    """Beast's ``rebudget`` (a batch at a time) from one that answers for one record:
    (PLD hash, budget) or (PLD hash, budget, host hash)."""

    def batch(records: list[bytes]):
        answers = [rebudget(record) for record in records]
        hosts = [a[2] for a in answers if len(a) > 2]
        return (
            [a[0] for a in answers],
            [a[1] for a in answers],
            hosts if hosts and len(hosts) == len(answers) else None,
        )

    return batch


def make_rebudget(budgets: dict[int, int]):
    def rebudget(record: bytes) -> tuple[int, int]:
        pld = int(record.split(b":")[0])
        return pld, budgets[pld]

    return rebudget


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(0, 7), st.integers(1, 12)),
        st.tuples(st.just("read"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("budget"), st.integers(0, 7), st.integers(0, 4)),
        st.tuples(st.just("commit"), st.just(0), st.just(0)),
        st.tuples(st.just("reopen"), st.sampled_from([-1, -2]), st.just(0)),
    ),
    max_size=60,
)


def read_up_to(beast: Beast, n: int) -> list[bytes]:
    """``n`` records, or all there are: read() returns fewer while a re-split of QF is
    under way (a step per call)."""
    out: list[bytes] = []
    while len(out) < n:
        got = beast.read(n - len(out))
        out += got
        if not got and not beast.stats().qf_resplit_left:
            break
    return out


@settings(max_examples=120, deadline=None)
@given(ops=OPS, queues=st.integers(1, 3), max_queues=st.sampled_from([2, 4, 8]))
def test_same_order_as_the_model(ops, queues: int, max_queues: int) -> None:
    same_order_as_the_model(ops, queues, max_queues)


@settings(max_examples=120, deadline=None)
@given(
    ops=OPS,
    queues=st.integers(1, 3),
    max_queues=st.sampled_from([2, 4, 8]),
    batch=st.integers(1, 4),
)
def test_resplit_in_steps_keeps_the_order(ops, queues: int, max_queues: int, batch: int) -> None:
    """QF placed again a few records per read() call (commits and reopens between
    steps included): the records come out as with a re-split at once."""
    with mock.patch.object(beast_module, "RESPLIT_BATCH", batch):
        same_order_as_the_model(ops, queues, max_queues)


def test_a_large_qf_is_resplit_in_bounded_steps(tmp_path: Path) -> None:
    n = 5 * beast_module.RESPLIT_BATCH
    # With one queue, every record goes to QF; at the re-split its budget has grown.
    beast = Beast(
        tmp_path / "b", queues=1, max_queues=4, fsync=False, rebudget=per_record(lambda r: (7, n))
    )
    beast.place_many([b"7:%d" % i for i in range(n)], [7] * n, [1] * n)
    assert beast.read(10) == []  # the pass ends: the re-split's first step only
    left = beast.stats().qf_resplit_left
    assert left == n - beast_module.RESPLIT_BATCH and beast.stats().qf_rescans == 1
    # A caller that paces the re-split reads without a step.
    assert beast.read(10, resplit=False) == [] and beast.stats().qf_resplit_left == left
    # Every later call places one more step; nothing comes out of order or twice.
    out = beast.read(1)
    assert beast.stats().qf_resplit_left == left - beast_module.RESPLIT_BATCH
    while len(beast):
        out += beast.read(100)
    assert out == [b"7:%d" % i for i in range(n)]
    beast.close()


def same_order_as_the_model(ops, queues: int, max_queues: int) -> None:
    queues = min(queues, max_queues)
    budgets = {pld: 1 + pld % 3 for pld in range(8)}
    rebudget = make_rebudget(budgets)
    with tempfile.TemporaryDirectory() as tmp:
        opts = {
            "max_queues": max_queues,
            "pld_slots": 64,
            "fsync": False,
            "rebudget": per_record(rebudget),
        }
        beast = Beast(Path(tmp) / "b", queues=queues, **opts)
        model = Model(queues, max_queues)
        commits: list[tuple[dict, Model, dict]] = []
        seq = 0
        for op, a, b in ops:
            if op in ("place", "budget") and beast.stats().qf_resplit_left:
                # Placing or a budget change between the steps of a re-split: BEAST may
                # give new records slots the model (which re-splits at once) gave to QF's,
                # and re-split QF's rest under the new budget. The order is then no longer
                # the model's; what holds is that every record comes out exactly once
                # (found by this test in session 16: see that session's note).
                if op == "place":
                    records = [b"%d:%d" % (a, seq + i) for i in range(b)]
                    beast.place_many(records, [TOP + a] * b, [budgets[a]] * b)
                    for r in records:
                        model.place(r, TOP + a, budgets[a])
                else:
                    budgets[a] = b
                rest = model.read(len(model), lambda r: (TOP + rebudget(r)[0], rebudget(r)[1]))
                assert sorted(read_up_to(beast, len(rest) + 5)) == sorted(rest)
                assert len(beast) == 0
                beast.close()
                return
            if op == "place":
                records = [b"%d:%d" % (a, seq + i) for i in range(b)]
                seq += b
                beast.place_many(records, [TOP + a] * b, [budgets[a]] * b)
                for r in records:
                    model.place(r, TOP + a, budgets[a])
            elif op == "read":
                assert read_up_to(beast, a) == model.read(
                    a, lambda r: (TOP + rebudget(r)[0], rebudget(r)[1])
                )
            elif op == "budget":
                budgets[a] = b  # 0 counts as 1
            elif op == "commit":
                commits.append((beast.commit(), copy.deepcopy(model), dict(budgets)))
                commits = commits[-2:]
            elif len(commits) >= -a:
                state, snapshot, saved = commits[a]
                beast.close()
                beast = Beast(Path(tmp) / "b", state=state, queues=queues, **opts)
                model = copy.deepcopy(snapshot)
                budgets.update(saved)
                commits = commits[: len(commits) + a + 1]
            assert len(beast) == len(model)
            stats = beast.stats()
            assert (stats.queues, stats.current) == (len(model.ring), model.cur)
            if not stats.qf_resplit_left:
                # Mid-way through a re-split in steps, QF still holds records the model
                # (which re-splits at once) has placed; the order checks cover that state.
                assert stats.qf_records == len(model.qf)
        rest = model.read(len(model), lambda r: (TOP + rebudget(r)[0], rebudget(r)[1]))
        assert read_up_to(beast, len(rest) + 5) == rest
        beast.close()


def random_crawl(directory: Path, pld_slots: int, seed: int, rounds: int = 60) -> None:
    """Places and reads at random; every record placed comes out exactly once."""
    rng = random.Random(seed)
    budgets = {pld: rng.randint(1, 6) for pld in range(40)}
    beast = Beast(
        directory,
        queues=1,
        max_queues=8,
        pld_slots=pld_slots,
        fsync=False,
        rebudget=per_record(make_rebudget(budgets)),
    )
    placed: list[bytes] = []
    seen: Counter[bytes] = Counter()
    for _ in range(rounds):
        plds = [rng.randrange(40) for _ in range(rng.randint(0, 300))]
        records = [b"%d:%d" % (p, len(placed) + i) for i, p in enumerate(plds)]
        placed += records
        beast.place_many(records, plds, [budgets[p] for p in plds])
        seen.update(beast.read(rng.randint(0, 250)))
        budgets[rng.randrange(40)] = rng.randint(1, 6)
        assert beast.stats().queued == len(placed) - sum(seen.values())
    seen.update(read_up_to(beast, len(placed)))
    assert seen == Counter(placed)
    assert len(beast) == 0 and beast.read(10) == []
    stats = beast.stats()
    assert stats.placed == len(placed) and stats.qf_rescans >= 1
    beast.close()


def test_no_record_lost(tmp_path: Path) -> None:
    random_crawl(tmp_path / "b", pld_slots=1 << 12, seed=1)


def test_slot_collisions_lose_nothing(tmp_path: Path) -> None:
    random_crawl(tmp_path / "b", pld_slots=1, seed=2, rounds=30)
    beast = Beast(tmp_path / "c", pld_slots=1, fsync=False, rebudget=per_record(make_rebudget({})))
    beast.place_many([b"1:a"], [1], [5])
    beast.place_many([b"2:b"], [2], [5])
    assert beast.stats().slot_collisions == 1
    beast.close()


def test_spam_pld_cannot_starve_small_ones(tmp_path: Path) -> None:
    spam, small = 10**6, range(100)
    budgets = {spam: 10, **dict.fromkeys(small, 10)}
    beast = Beast(tmp_path / "b", fsync=False, rebudget=per_record(make_rebudget(budgets)))
    rng = random.Random(3)
    arrivals = [spam] * 10_000 + [p for p in small for _ in range(5)]
    rng.shuffle(arrivals)
    records = [b"%d:%d" % (p, i) for i, p in enumerate(arrivals)]
    order: list[bytes] = []
    for start in range(0, len(records), 500):
        chunk = records[start : start + 500]
        beast.place_many(chunk, [int(r.split(b":")[0]) for r in chunk], [10] * len(chunk))
        order += beast.read(50)  # the crawler reads slower than links arrive
    order += read_up_to(beast, len(records))
    assert sorted(order) == sorted(records)
    last_small = max(i for i, r in enumerate(order) if not r.startswith(b"%d:" % spam))
    spam_before = sum(1 for r in order[:last_small] if r.startswith(b"%d:" % spam))
    assert spam_before < 1_000
    beast.close()


def test_ring_doubles_up_to_max_queues(tmp_path: Path) -> None:
    beast = Beast(
        tmp_path / "b", queues=1, max_queues=8, fsync=False, rebudget=per_record(lambda r: (7, 1))
    )
    # Budget 1: one URL per queue, the rest waits in QF and is re-split at every pass.
    beast.place_many([b"7:%d" % i for i in range(100)], [7] * 100, [1] * 100)
    assert beast.stats().qf_records == 100  # j = 1: no queue but the current one
    sizes, out = [], []
    while len(beast):
        out += beast.read(1)
        sizes.append(beast.stats().queues)
    assert out == [b"7:%d" % i for i in range(100)]
    assert sorted(set(sizes)) == [2, 4, 8]
    assert sizes[-1] == 8 and beast.stats().qf_rescans > 3
    beast.close()


def test_first_read_before_and_after_placement_with_one_queue(tmp_path: Path) -> None:
    beast = Beast(tmp_path / "b", queues=1, fsync=False, rebudget=per_record(lambda r: (1, 5)))
    assert beast.read(3) == [] and len(beast) == 0
    beast.place_many([b"1:a"], [1], [5])
    assert len(beast) == 1
    assert beast.read(3) == [b"1:a"]
    beast.close()


def test_reopen_with_either_of_the_last_two_commits(tmp_path: Path) -> None:
    d = tmp_path / "b"
    budgets = dict.fromkeys(range(5), 2)
    opts = {
        "queues": 1,
        "max_queues": 16,
        "pld_slots": 1 << 10,
        "fsync": True,
        "rebudget": per_record(make_rebudget(budgets)),
    }
    beast = Beast(d, **opts)
    n = 0

    def place(k: int) -> None:
        nonlocal n
        records = [b"%d:%d" % (i % 5, n + i) for i in range(k)]
        n += k
        beast.place_many(records, [i % 5 for i in range(k)], [2] * k)

    place(200)
    beast.read(30)
    first = beast.commit()
    rest_first = drain_copy(d, first, opts)
    place(300)
    beast.read(100)
    second = beast.commit()
    rest_second = drain_copy(d, second, opts)
    place(100)
    beast.read(250)  # grows the ring past what either commit knew
    grown = beast.stats().queues
    beast.close()
    assert grown > first["queues"]
    assert len(list(d.glob("budget-*.npz"))) == 2

    beast = Beast(d, state=second, **opts)
    assert beast.read(10_000) == rest_second
    beast.close()
    beast = Beast(d, state=first, **opts)
    assert sorted(p.name for p in d.glob("q[0-9]*")) == [
        f"q{i:03d}" for i in range(first["queues"])
    ]
    assert beast.read(10_000) == rest_first
    beast.close()


def drain_copy(d: Path, state: dict, opts: dict) -> list[bytes]:
    """What reading everything right after this commit gives, taken from a copy."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = Path(tmp) / "b"
        shutil.copytree(d, copy_dir)
        other = Beast(copy_dir, state=state, **opts)
        out = other.read(10_000)
        other.close()
        return out


def test_theorem7_bound() -> None:
    # IRLbot: S = 3,100 pages/s, b = 110 bytes, L = 6.5 -> 2Sb(2L-1) = 8.18 MB/s.
    assert theorem7_bound(3100, 110, 6.5) == pytest.approx(2 * 3100 * 110 * 12)


def test_bytes_counted_over_all_queues(tmp_path: Path) -> None:
    beast = Beast(tmp_path / "b", fsync=False, rebudget=per_record(lambda r: (1, 1)))
    beast.place_many([b"1:%d" % i for i in range(10)], [1] * 10, [1] * 10)
    assert beast.read(10) and len(beast) == 0
    stats = beast.stats()
    # 1 record into Q1 and 9 into QF; QF re-read and split at the pass end, and so on.
    assert stats.bytes_read > 10 * (8 + 4)
    assert stats.bytes_written > stats.bytes_read
    assert stats.deferred_to_qf >= 9
    beast.close()


def test_host_cap_spreads_one_host_over_queues_and_loses_nothing(tmp_path: Path) -> None:
    """A PLD with a large budget and two hosts: each queue holds at most host_cap URLs of
    each host, the rest go to later queues or QF, and every URL comes back in order."""
    pld, big = 5, 1000
    beast = Beast(
        tmp_path / "b",
        queues=4,
        max_queues=8,
        host_cap=3,
        host_slots=64,
        fsync=False,
        rebudget=per_record(lambda r: (pld, big, int(r[:1]))),
    )
    records = [b"%d:%03d" % (h, i) for i in range(40) for h in (1, 2)]
    beast.place_many(
        records, [pld] * len(records), [big] * len(records), [int(r[:1]) for r in records]
    )
    stats = beast.stats()
    assert stats.host_deferrals > 0
    # Three upcoming queues of 3 URLs per host: 18 in the ring, the rest in QF.
    assert stats.qf_records == len(records) - 18
    out: list[bytes] = []
    per_queue: list[Counter] = []
    while len(beast):
        current, passes = beast.stats().current, beast.stats().qf_rescans
        got = beast.read(1)
        if (beast.stats().current, beast.stats().qf_rescans) != (current, passes) or not per_queue:
            per_queue.append(Counter())
        out += got
        per_queue[-1].update(r[:1] for r in got)
    assert sorted(out) == sorted(records)
    for host in (b"1", b"2"):
        mine = [r for r in out if r.startswith(host)]
        assert mine == sorted(mine)  # a host's URLs keep their order
    assert max(max(c.values()) for c in per_queue if c) <= 3
    beast.close()


def test_host_cap_survives_a_commit(tmp_path: Path) -> None:
    d = tmp_path / "b"
    opts = {
        "queues": 4,
        "max_queues": 4,
        "host_cap": 2,
        "host_slots": 16,
        "fsync": False,
        "rebudget": per_record(lambda r: (9, 100, 1)),
    }
    beast = Beast(d, **opts)
    beast.place_many([b"a", b"b"], [9] * 2, [100] * 2, [1] * 2)
    assert beast.stats().host_deferrals == 0
    state = beast.commit()
    beast.close()
    beast = Beast(d, state=state, **opts)
    # The host already has 2 URLs in the next queue (the table came back with the
    # commit): a third goes to the queue after it.
    beast.place_many([b"c"], [9], [100], [1])
    assert beast.stats().host_deferrals == 1
    assert beast.read(2) == [b"a", b"b"] and beast.stats().current == 1
    assert beast.read(10) == [b"c"] and beast.stats().current == 2
    beast.close()


@pytest.mark.parametrize("plds", [3, 40])
def test_tables_come_back_whole_from_a_commit_saved_sparse_or_not(
    tmp_path: Path, plds: int
) -> None:
    """A commit saves the budget and host tables' used slots only, when fewer than half
    are used (3 PLDs and hosts of 64 slots), else whole (40); either way, and from a
    table file saved whole by an older commit, they come back as they were."""
    d = tmp_path / "b"
    opts = {
        "queues": 2,
        "max_queues": 4,
        "pld_slots": 64,
        "host_cap": 2,
        "host_slots": 64,
        "fsync": False,
        "rebudget": per_record(lambda r: (int(r) % plds, 3, int(r) % plds)),
    }
    beast = Beast(d, **opts)
    n = 3 * plds
    beast.place_many(
        [b"%d" % i for i in range(n)],
        [i % plds for i in range(n)],
        [1] * n,
        [i % plds for i in range(n)],
    )
    whole = table_arrays(beast)
    state = beast.commit()
    beast.close()
    with np.load(d / state["table"]) as saved:
        assert ("used" in saved) == (plds == 3) and ("host_used" in saved) == (plds == 3)
    for saved_whole in (False, True):
        if saved_whole:
            np.savez(d / state["table"], **whole)
        again = Beast(d, state=state, **opts)
        for name, a in table_arrays(again).items():
            assert np.array_equal(a, whole[name]), name
        again.close()


def table_arrays(beast: Beast) -> dict[str, np.ndarray]:
    """Copies of BEAST's budget and host tables, by their names in a table file."""
    return {
        "tag": beast.places.tag.copy(),
        "turn": beast.places.turn.copy(),
        "count": beast.places.count.copy(),
        "host_turn": beast.places.hturn.copy(),
        "host_count": beast.places.hcount.copy(),
    }


class _Workload:
    """Random batches of records of 150 hosts on 60 PLDs, whose budgets change between
    batches, for two Beasts that must place and read them alike."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.budgets = {pld: self.rng.randint(0, 30) for pld in range(60)}
        self.host_pld = {host: self.rng.randrange(60) for host in range(150)}
        self.now = 0.0

    def rebudget(self, record: bytes) -> tuple[int, int, int]:
        host = int(record.split(b":")[0])
        return TOP + self.host_pld[host], self.budgets[self.host_pld[host]], host

    def budgets_of(self, hashes: np.ndarray) -> list[int]:
        return [self.budgets[h - TOP] for h in hashes.tolist()]

    def run(self, first: Beast, second: Beast, both) -> tuple[int, int]:
        """40 batches placed through ``both(call, *args)`` (a call on either Beast, its
        results compared), each followed by a read, a budget change and a step of the
        clock, with their stats compared; then everything read. Returns the records
        placed and read."""
        rng = self.rng
        placed = out = 0
        for _ in range(40):
            hosts = [rng.randrange(150) for _ in range(rng.randint(0, 600))]
            records = [b"%d:%d" % (h, placed + i) for i, h in enumerate(hosts)]
            placed += len(records)
            plds, budgets, host_hashes = [
                [a[k] for a in map(self.rebudget, records)] for k in range(3)
            ]
            both(Beast.place_many, records, plds, budgets, host_hashes)
            out += len(both(read_up_to, rng.randint(0, 500)))
            self.budgets[rng.randrange(60)] = rng.randint(0, 30)
            self.now += rng.choice([0.0, 1.0, 6.0])
            assert first.stats() == second.stats()
        while len(first):
            self.now += 6.0  # paced turns hold the next queue until their time is up
            out += len(both(read_up_to, placed))
        assert len(second) == 0
        return placed, out


@pytest.mark.parametrize("turn_s", [0.0, 5.0])
@pytest.mark.parametrize("seed", range(4))
def test_full_places_skipped_in_batches_change_nothing(
    tmp_path: Path, seed: int, turn_s: float
) -> None:
    """Places.full_from_start sends records whose place is full to QF without the loop:
    the same records come out in the same order, with the same counts, as with the loop
    for every record. Small tables make PLDs and hosts collide; several hosts share a PLD
    and budgets change between batches, so PLD and host places fill in every order."""
    work = _Workload(seed)

    def make(name: str) -> Beast:
        return Beast(
            tmp_path / name,
            queues=2,
            max_queues=8,
            pld_slots=48,
            host_cap=4,
            host_slots=96,
            fsync=False,
            rebudget=per_record(work.rebudget),
            turn_s=turn_s,
            clock=lambda: work.now,
        )

    fast, loop = make("fast"), make("loop")
    skipped = [0]
    full_from_start = fast.places.full_from_start

    def counting(*args):
        to_qf, collisions, deferrals = full_from_start(*args)
        skipped[0] += sum(to_qf)
        return to_qf, collisions, deferrals

    fast.places.full_from_start = counting  # type: ignore[method-assign]

    def both(call, *args):
        got = call(fast, *args)
        with mock.patch.object(beast_module, "_FULL_CHECK_MIN", 1 << 30):
            assert call(loop, *args) == got
        return got

    placed, out = work.run(fast, loop, both)
    assert out == placed
    stats = fast.stats()
    # The batches did skip records, and collisions, deferrals and re-splits were met.
    assert skipped[0] > 100
    assert stats.slot_collisions > 0 and stats.host_deferrals > 0 and stats.qf_rescans > 1
    fast.close()
    loop.close()


def test_admit_refuses_a_record_its_place_in_the_ring(tmp_path: Path) -> None:
    """``admit`` is asked about a record given a place in the ring, before it takes it:
    a refused one takes none (the next record gets it), records bound for QF are asked
    only when a re-split gives them a place, and the count survives a commit."""
    asked: list[bytes] = []

    def admit(record: bytes) -> bool:
        asked.append(record)
        return not record.endswith(b"x")

    beast = Beast(
        tmp_path / "b",
        queues=2,
        max_queues=2,
        fsync=False,
        rebudget=per_record(lambda r: (7, 1)),
        admit=admit,
    )
    records = [b"7:0x", b"7:1", b"7:2x", b"7:3"]
    beast.place_many(records, [7] * 4, [1] * 4)
    # Budget 1 and one queue open (Q1): 0x is refused, 1 takes the place, 2x and 3 go to
    # QF without being asked.
    assert asked == [b"7:0x", b"7:1"] and len(beast) == 3
    assert read_up_to(beast, 10) == [b"7:1", b"7:3"]
    assert asked == [b"7:0x", b"7:1", b"7:2x", b"7:3"]
    assert beast.stats().refused == 2
    state = beast.commit()
    beast.close()
    assert (
        Beast(
            tmp_path / "b",
            state=state,
            queues=2,
            max_queues=2,
            fsync=False,
            rebudget=per_record(lambda r: (7, 1)),
        )
        .stats()
        .refused
        == 2
    )


@pytest.mark.parametrize("turn_s", [0.0, 5.0])
@pytest.mark.parametrize("seed", range(3))
def test_resplits_by_kept_hashes_change_nothing(tmp_path: Path, seed: int, turn_s: float) -> None:
    """With ``budgets_of``, a re-split places QF's records by the hashes kept with them
    and asks only for budgets (the records staying in QF go back packed): the same
    records come out in the same order, with the same counts, as when ``rebudget`` is
    asked about every record. Budgets change between batches, small tables make PLDs
    and hosts collide, some records are refused, and host 0 has no host hash (0)."""
    work = _Workload(seed)

    def admit(record: bytes) -> bool:
        return int(record.split(b":")[1]) % 7 != 3

    def make(name: str, **kept) -> Beast:
        return Beast(
            tmp_path / name,
            queues=2,
            max_queues=8,
            pld_slots=48,
            host_cap=4,
            host_slots=96,
            fsync=False,
            rebudget=per_record(work.rebudget),
            turn_s=turn_s,
            clock=lambda: work.now,
            admit=admit,
            **kept,
        )

    kept, asked = make("kept", budgets_of=work.budgets_of), make("asked")

    def both(call, *args):
        got = call(kept, *args)
        assert call(asked, *args) == got
        return got

    placed, out = work.run(kept, asked, both)
    stats = kept.stats()
    assert out + stats.refused == placed
    assert stats.qf_rescans > 1 and stats.refused > 0 and stats.host_deferrals > 0
    kept.close()
    asked.close()


def test_records_queued_in_qf_without_hashes_are_asked_about(tmp_path: Path) -> None:
    """QF records without kept hashes (queued by an older version) are placed again by
    ``rebudget`` at a re-split, even with ``budgets_of``."""
    asked: list[bytes] = []

    def rebudget(records: list[bytes]):
        asked.extend(records)
        return [TOP + 1] * len(records), [5] * len(records), None

    d = tmp_path / "b"
    opts = {
        "queues": 2,
        "max_queues": 4,
        "fsync": False,
        "rebudget": rebudget,
        "budgets_of": lambda hashes: [5] * len(hashes),
    }
    beast = Beast(d, **opts)
    beast.place_many([b"a", b"b"], [TOP + 1] * 2, [1, 1])  # the second goes to QF
    state = beast.commit()
    beast.close()
    # Two more in the committed QF, queued as an older version did: without hashes.
    qf = DiskQueue(d / "qf", state=state["qf"], fsync=False)
    qf.extend([b"old-1", b"old-2"])
    state["qf"] = qf.commit()
    qf.close()
    beast = Beast(d, state=state, **opts)
    assert read_up_to(beast, 10) == [b"a", b"b", b"old-1", b"old-2"]
    assert asked == [b"old-1", b"old-2"]
    beast.close()
