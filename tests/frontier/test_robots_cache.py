"""RobotsStore: RFC 9309 outcomes, RobotsCache and RobotsRequested on real DRUMs, LRU in
front, expiry, rollback to a commit (also after SIGKILL) and a corrupt rules log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drumbeat.drum import DrumError
from drumbeat.frontier.robots import (
    ALLOW_ALL,
    GIVEN_UP,
    REFUSED,
    RULES,
    UNAVAILABLE,
    RobotsStore,
    RulesLogCorruptError,
)
from drumbeat.testing import FakeClock

UA = "drumbeat/0.1 (+http://example.test/bot)"
ROOT = Path(__file__).resolve().parents[2]


def _store(path: Path, clock=None, manifest=None, ram_entries=10_000, fsync=False):
    return RobotsStore(
        path,
        robots_agent="drumbeat",
        expiry_s=100,
        retry_s=10,
        max_attempts=3,
        ram_entries=ram_entries,
        manifest=manifest,
        clock=clock or FakeClock(1000.0),
        fsync=fsync,
    )


def _checked(store, origins):
    """Look ``origins`` up through the DRUM: {origin: entry or None}."""
    store.check(origins, [o.encode() for o in origins])
    assert store.pending
    store.flush()
    assert not store.pending
    got = list(store.take_checked())
    assert [(t, o) for t, o, _ in got] == [(o.encode(), o) for o in origins]
    return {o: e for _, o, e in got}


def _rules(i: int) -> str:
    return f"User-agent: *\nDisallow: /p{i}/\nCrawl-delay: {i}\n"


# ---------------------------------------------------------------- RFC 9309 outcomes


def test_statuses_follow_rfc9309(tmp_path):
    s = _store(tmp_path / "r")
    e = s.record("http://a.test", 200, "User-agent: *\nDisallow: /private/\nCrawl-delay: 3\n")
    assert e.state == RULES
    assert not e.allows("http://a.test/private/x") and e.allows("http://a.test/p")
    assert e.crawl_delay() == 3.0
    assert s.record("http://b.test", 404, None).state == ALLOW_ALL
    e = s.record("http://c.test", 503, None)
    assert e.state == UNAVAILABLE and not e.allows("http://c.test/")
    assert e.crawl_delay() is None
    assert s.record("http://d.test", 200, "\x00\xff<html>garbage").allows("http://d.test/x")
    assert s.record("http://e.test", None, None).state == UNAVAILABLE  # no HTTP response
    assert s.record("http://f.test", 301, None).state == UNAVAILABLE  # redirect left over
    e = s.record_refused("http://g.test", "address 10.0.0.1 is private", ttl_s=50)
    assert e.state == REFUSED and e.text == "address 10.0.0.1 is private"
    assert not e.allows("http://g.test/")
    for origin in ("http://a.test", "http://b.test", "http://g.test"):
        assert s.get(origin).origin == origin


def test_expiry_retry_and_give_up(tmp_path):
    clock = FakeClock(1000.0)
    s = _store(tmp_path / "r", clock)
    s.record("http://a.test", 200, "")
    assert s.is_fresh(s.get("http://a.test"))
    clock.now += 100
    assert not s.is_fresh(s.get("http://a.test"))  # expired: re-request
    for attempt in (1, 2):
        e = s.record("http://x.test", None, None)
        assert e.state == UNAVAILABLE and e.attempts == attempt and s.is_fresh(e)
        clock.now += 10
        assert not s.is_fresh(s.get("http://x.test"))  # retry time reached
    e = s.record("http://x.test", 500, None)
    assert e.state == GIVEN_UP
    clock.now += 10**6
    assert s.is_fresh(e)  # given up for good
    s.record("http://y.test", 503, None)
    assert s.record("http://y.test", 200, "").attempts == 0  # a success resets the count
    assert s.record("http://y.test", 503, None).attempts == 1
    e = s.record_refused("http://z.test", "no such host", ttl_s=50)
    clock.now += 49
    assert s.is_fresh(e)
    clock.now += 1
    assert not s.is_fresh(e)


def test_failure_count_restarts_after_eviction(tmp_path):
    s = _store(tmp_path / "r", ram_entries=1)
    assert s.record("http://x.test", 503, None).attempts == 1
    assert s.record("http://x.test", 503, None).attempts == 2
    s.record("http://other.test", 200, "")  # evicts x from the LRU
    assert s.get("http://x.test") is None
    assert s.record("http://x.test", 503, None).attempts == 1  # documented: counts afresh


# ---------------------------------------------------------------- RobotsCache


def test_check_answers_in_submission_order_with_tokens(tmp_path):
    s = _store(tmp_path / "r")
    s.record("http://a.test", 200, _rules(1))
    s.record("http://b.test", 404, None)
    s.flush()
    origins = ["http://b.test", "http://new.test", "http://a.test", "http://b.test"]
    tokens = [b"t0", b"", b"\x00binary \n token", b"t3" * 100]
    s.check(origins, tokens)
    s.flush()
    got = list(s.take_checked())
    assert [(t, o) for t, o, _ in got] == list(zip(tokens, origins))
    states = [e.state if e else None for _, _, e in got]
    assert states == [ALLOW_ALL, None, RULES, ALLOW_ALL]
    assert list(s.take_checked()) == []  # taken once


def test_unknown_origin_is_none_and_get_does_no_io(tmp_path):
    s = _store(tmp_path / "r")
    assert s.get("http://nobody.test") is None
    assert _checked(s, ["http://nobody.test"]) == {"http://nobody.test": None}
    st_ = s.stats()
    assert st_["lru_misses"] == 1 and st_["lru_entries"] == 0


def test_evicted_entries_come_back_from_disk_with_the_same_answers(tmp_path):
    s = _store(tmp_path / "r", ram_entries=2)
    origins = [f"http://h{i}.test" for i in range(6)]
    recorded = {o: s.record(o, 200, _rules(i)) for i, o in enumerate(origins)}
    s.record_refused("http://refused.test", "no such host", ttl_s=30)
    assert s.stats()["lru_entries"] == 2
    assert s.get(origins[0]) is None  # evicted
    found = _checked(s, [*origins, "http://refused.test"])
    for i, o in enumerate(origins):
        e, r = found[o], recorded[o]
        assert (e.state, e.text, e.fetched_at, e.expires_at, e.attempts) == (
            r.state,
            r.text,
            r.fetched_at,
            r.expires_at,
            r.attempts,
        )
        for path in (f"/p{i}/x", f"/p{i + 1}/x", "/"):
            assert e.allows(o + path) == r.allows(o + path)
        assert e.crawl_delay() == r.crawl_delay() == float(i)
    refused = found["http://refused.test"]
    assert refused.state == REFUSED and refused.text == "no such host"
    assert s.stats()["lru_entries"] == 2  # RAM stays bounded while loading
    assert s.stats()["loaded_from_disk"] >= 5


def test_record_before_check_in_one_round_is_seen_by_the_check(tmp_path):
    s = _store(tmp_path / "r", ram_entries=1)
    s.record("http://a.test", 200, _rules(7))
    s.record("http://b.test", 404, None)  # evicts a: the answer must come from the DRUM
    s.check(["http://a.test"], [b"x"])
    s.record("http://c.test", 503, None)
    s.check(["http://c.test"], [b"y"])
    s.flush()  # one merge round holds all five tuples
    got = list(s.take_checked())
    assert got[0][2].state == RULES and not got[0][2].allows("http://a.test/p7/")
    assert got[1][2].state == UNAVAILABLE and got[1][2].attempts == 1


def test_a_check_queued_before_a_record_answers_with_the_newer_entry(tmp_path):
    s = _store(tmp_path / "r")
    s.check(["http://a.test"], [b"x"])
    s.record("http://a.test", 404, None)
    s.flush()
    [(_, _, entry)] = s.take_checked()
    assert entry is not None and entry.state == ALLOW_ALL


def test_an_older_answer_from_disk_does_not_shadow_a_newer_record(tmp_path):
    """The example Hypothesis found in session 11: the first check's answer, loaded from disk,
    used to enter the LRU over the newer record evicted meanwhile, and stayed there."""
    clock = FakeClock(1000.0)
    s = _store(tmp_path / "r", clock, ram_entries=2)
    a = "http://a.test"
    old = s.record(a, 200, _rules(1))
    s.check([a], [b"first"])
    clock.now += 2
    new = s.record(a, 200, _rules(2))
    s.record("http://b.test", 404, None)
    s.record("http://c.test", 404, None)  # a is evicted from the LRU
    s.check([a], [b"second"])
    s.flush()
    (_, _, first), (_, _, second) = s.take_checked()
    assert first.expires_at == old.expires_at  # its state when it was queued
    assert second.expires_at == new.expires_at
    assert s.get(a).expires_at == new.expires_at
    assert _checked(s, [a])[a].expires_at == new.expires_at


def test_a_check_from_before_a_reopen_does_not_shadow_a_newer_record(tmp_path):
    clock = FakeClock(1000.0)
    s = _store(tmp_path / "r", clock, ram_entries=1)
    a = "http://a.test"
    s.record(a, 200, _rules(1))
    s.check([a], [b"first"])  # not merged: delivered again after reopening
    clock.now += 2
    new = s.record(a, 503, None)
    s.record("http://b.test", 404, None)  # a is evicted from the LRU
    manifest = s.commit()
    s.close()
    s = _store(tmp_path / "r", clock, ram_entries=1, manifest=manifest)
    s.flush()
    [(token, _, first)] = s.take_checked()
    assert token == b"first" and first.state == RULES
    assert s.get(a) is None  # the older state was not cached
    assert _checked(s, [a])[a].state == new.state == UNAVAILABLE


def test_manifest_formats(tmp_path):
    s = _store(tmp_path / "r")
    s.record("http://a.test", 404, None)
    manifest = s.commit()
    s.close()
    old = {k: v for k, v in manifest.items() if k != "stores"} | {"format": 1}
    s = _store(tmp_path / "r", manifest=old)  # a store written before "stores" existed
    assert _checked(s, ["http://a.test"])["http://a.test"].state == ALLOW_ALL
    s.close()
    with pytest.raises(DrumError, match="robots manifest format 99"):
        _store(tmp_path / "r", manifest=manifest | {"format": 99})


def test_lru_stays_bounded_with_many_origins(tmp_path):
    s = _store(tmp_path / "r", ram_entries=50)
    origins = [f"http://o{i}.test" for i in range(2000)]
    for o in origins:
        s.record(o, 404, None)
    found = _checked(s, origins)
    assert all(e is not None and e.state == ALLOW_ALL for e in found.values())
    assert s.stats()["lru_entries"] == 50
    assert s.stats()["cache_keys"] == 2000


# ---------------------------------------------------------------- RobotsRequested


def test_request_is_new_once_per_origin(tmp_path):
    s = _store(tmp_path / "r")
    s.request(["http://a.test", "http://b.test", "http://a.test"])
    assert s.pending
    s.flush()
    assert not s.pending
    assert list(s.take_requested()) == [
        ("http://a.test", True),
        ("http://b.test", True),
        ("http://a.test", False),
    ]
    s.request(["http://b.test", "http://c.test"])
    s.flush()
    assert list(s.take_requested()) == [("http://b.test", False), ("http://c.test", True)]
    assert s.stats()["requested_keys"] == 3


# ---------------------------------------------------------------- durability


def _state(store, origins):
    """What the store knows about ``origins``, comparable across reopenings."""
    found = _checked(store, origins)
    out = {}
    for o, e in found.items():
        out[o] = (
            None
            if e is None
            else (
                e.state,
                e.text,
                e.fetched_at,
                e.expires_at,
                e.attempts,
                e.allows(o + "/p1/"),
                e.allows(o + "/p2/"),
                e.crawl_delay(),
            )
        )
    return out


def _requested_new(store, origins):
    store.request(origins)
    store.flush()
    return dict(store.take_requested())


def test_reopen_with_the_last_or_previous_commit(tmp_path):
    clock = FakeClock(1000.0)
    d = tmp_path / "r"
    names = [f"http://h{i}.test" for i in range(6)]
    s = _store(d, clock, fsync=True)
    s.record(names[0], 200, _rules(1))
    s.record(names[1], 503, None)
    s.request(names[:2])
    first = json.loads(json.dumps(s.commit()))  # JSON-able
    state_first = _state(s, names)
    clock.now += 5
    s.record(names[1], 200, _rules(2))
    s.record(names[2], 200, _rules(3))
    s.record_refused(names[3], "refused", 9)
    s.request(names[2:4])
    s.flush()
    second = s.commit()
    state_second = _state(s, names)
    s.record(names[4], 200, _rules(4))  # never committed
    s.request(names[4:])
    s.flush()
    s.close()

    s = _store(d, clock, manifest=second, fsync=True)
    assert s.stats()["rules_log_bytes"] == second["rules_log_bytes"]
    assert _state(s, names) == state_second
    assert _requested_new(s, names) == {n: i >= 4 for i, n in enumerate(names)}
    s.close()

    s = _store(d, clock, manifest=first, fsync=True)  # the previous commit still opens
    assert s.stats()["rules_log_bytes"] == first["rules_log_bytes"]
    assert _state(s, names) == state_first
    assert _requested_new(s, names) == {n: i >= 2 for i, n in enumerate(names)}
    s.record(names[5], 200, _rules(5))  # appends after the cut
    third = s.commit()
    s.close()
    s = _store(d, clock, manifest=third, fsync=True)
    assert _state(s, names[5:])[names[5]][0] == RULES
    s.close()


def test_no_manifest_starts_empty(tmp_path):
    s = _store(tmp_path / "r")
    s.record("http://a.test", 200, _rules(1))
    s.commit()
    s.close()
    s = _store(tmp_path / "r")
    assert _checked(s, ["http://a.test"]) == {"http://a.test": None}
    assert s.stats()["cache_keys"] == 0


CHILD = r"""
import json, os, sys
from pathlib import Path
from drumbeat.frontier.robots import RobotsStore

d = Path(sys.argv[1])
s = RobotsStore(d / "r", robots_agent="ua", expiry_s=100, retry_s=10, max_attempts=3,
                ram_entries=5, clock=lambda: 1000.0, fsync="commit")
for i in range(20):
    s.record(f"http://h{i}.test", 200, f"User-agent: *\nDisallow: /p{i}/\n")
s.request([f"http://h{i}.test" for i in range(20)])
manifest = s.commit()
(d / "manifest.tmp").write_text(json.dumps(manifest))
os.replace(d / "manifest.tmp", d / "manifest.json")
for i in range(20, 100_000):
    s.record(f"http://h{i}.test", 200, f"User-agent: *\nDisallow: /q{i}/\n")
    s.request([f"http://h{i}.test"])
    if i % 25 == 0:
        s.flush()
        list(s.take_requested())
    if i == 100:
        (d / "more").touch()
"""


def test_sigkill_rolls_back_to_the_commit(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "more").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "child made no progress"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        proc.stderr.close()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (tmp_path / "r" / "rules.log").stat().st_size > manifest["rules_log_bytes"]
    s = _store(tmp_path / "r", manifest=manifest)
    assert s.stats()["rules_log_bytes"] == manifest["rules_log_bytes"]
    names = [f"http://h{i}.test" for i in range(40)]
    found = _checked(s, names)
    for i, name in enumerate(names[:20]):
        e = found[name]
        assert e.state == RULES and e.fetched_at == 1000.0
        assert not e.allows(f"{name}/p{i}/x") and e.allows(f"{name}/q{i}/x")
    assert all(found[n] is None for n in names[20:])
    assert _requested_new(s, names) == {n: i >= 20 for i, n in enumerate(names)}
    assert s.stats()["cache_keys"] == 20


def test_corrupt_rules_log_names_the_file(tmp_path):
    d = tmp_path / "r"
    s = _store(d)
    s.record("http://a.test", 200, "User-agent: *\nDisallow: /secret/\n")
    manifest = s.commit()
    s.close()
    log = d / "rules.log"
    data = bytearray(log.read_bytes())
    data[data.index(b"/secret/")] ^= 0x20  # a flipped bit in the body
    log.write_bytes(bytes(data))
    s = _store(d, manifest=manifest)
    s.check(["http://a.test"], [b""])
    s.flush()
    with pytest.raises(RulesLogCorruptError, match="checksum") as info:
        list(s.take_checked())
    assert str(log) in str(info.value) and isinstance(info.value, DrumError)
    s.close()

    log.write_bytes(bytes(data[:-3]))  # shorter than the manifest says
    with pytest.raises(RulesLogCorruptError, match="truncated") as info:
        _store(d, manifest=manifest)
    assert str(log) in str(info.value)


# ---------------------------------------------------------------- against a dict model

OPS = st.lists(
    st.tuples(
        st.sampled_from(["record", "refuse", "check", "flush"]),
        st.integers(0, 7),
        st.sampled_from([200, 404, 503, None]),
    ),
    max_size=40,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_matches_a_dict_model(tmp_path_factory, ops):
    """A check answers with a state the origin had between its submission and the take."""
    clock = FakeClock(1000.0)
    s = _store(tmp_path_factory.mktemp("m") / "r", clock, ram_entries=2)
    history: dict[str, list[tuple | None]] = {f"http://h{i}.test": [None] for i in range(8)}
    waiting: dict[bytes, tuple[str, int]] = {}  # token -> origin, history length at submission

    def key(e):
        return None if e is None else (e.state, e.text, e.expires_at, e.attempts)

    def take():
        for token, origin, entry in s.take_checked():
            o, since = waiting.pop(token)
            assert o == origin and key(entry) in history[origin][since - 1 :]

    for n, (op, i, status) in enumerate(ops):
        origin = f"http://h{i}.test"
        clock.now += 1
        if op == "record":
            e = s.record(origin, status, _rules(i) if status == 200 else None)
            history[origin].append(key(e))
        elif op == "refuse":
            history[origin].append(key(s.record_refused(origin, f"reason {n}", 5)))
        elif op == "check":
            s.check([origin], [b"%d" % n])
            waiting[b"%d" % n] = (origin, len(history[origin]))
        else:
            s.flush()
            take()
    s.flush()
    take()
    assert not waiting
    final = _checked(s, list(history))
    assert {o: key(e) for o, e in final.items()} == {o: h[-1] for o, h in history.items()}
    s.close()
