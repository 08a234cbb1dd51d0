"""DRUM against a Python dict model; bad input; corrupted files."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drumbeat.drum import (
    CHECK,
    AuxArray,
    Drum,
    DrumCorruptError,
    DrumError,
    DrumIOError,
    plan,
    predicted_alpha,
)
from drumbeat.drum.format import DEFLATE, encode_block, iter_blocks_at

VALUE = np.dtype([("n", "<i8")])
POOL = [(i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(40)]


def bit_or(stored: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    out = stored.copy()
    out["n"] = stored["n"] | incoming["n"]
    return out


MERGES = {
    "overwrite": lambda a, b: b,
    "add": lambda a, b: a + b,
    "max": max,
    "or": lambda a, b: a | b,
}


class Model:
    """The contract: tuples applied one by one to a dict, outcomes in arrival order."""

    def __init__(self, merge: str) -> None:
        self.fold = MERGES[merge]
        self.stored: dict[int, int] = {}
        self.expected: list[tuple] = []

    def apply(self, ops, keys, values, aux) -> None:
        for op, key, value, a in zip(ops, keys, values, aux):
            self.expected.append((key, op, key not in self.stored, self.stored.get(key, 0), a))
            if op != CHECK:
                self.stored[key] = (
                    self.fold(self.stored[key], value) if key in self.stored else value
                )


def drain(drum: Drum) -> list[tuple]:
    got = []
    for r in drum.take_results():
        values = r.values["n"].tolist() if drum.value_dtype.itemsize else [0] * len(r)
        got.extend(zip(r.keys.tolist(), r.ops.tolist(), r.unique.tolist(), values, r.aux))
    return got


batch = st.lists(
    st.tuples(
        st.integers(0, 2), st.integers(0, len(POOL) - 1), st.integers(0, 9), st.binary(max_size=6)
    ),
    min_size=0,
    max_size=40,
)
action = st.one_of(
    batch.map(lambda b: ("batch", b)),
    st.sampled_from(
        [("flush",), ("flush_later",), ("take",), ("commit",), ("reopen",), ("rollback",)]
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    merge=st.sampled_from(["overwrite", "add", "max", "or", "empty"]),
    buckets=st.sampled_from([1, 2, 8, 16]),
    actions=st.lists(action, max_size=25),
    background=st.booleans(),
)
def test_matches_dict_model(merge: str, buckets: int, actions: list, background: bool) -> None:
    """Also with rounds in the background: whenever a round ends, a take gives a prefix
    of the outcomes, and in the end all of them, as without."""
    dtype = None if merge == "empty" else VALUE
    fn = bit_or if merge == "or" else ("overwrite" if merge == "empty" else merge)
    model = Model("overwrite" if merge == "empty" else merge)
    with tempfile.TemporaryDirectory() as tmp:
        opts = {
            "value_dtype": dtype,
            "merge": fn,
            "ram_bytes": 4096,
            "buckets": buckets,
            "fsync": False,
            "background": background,
        }
        drum = Drum(tmp, **opts)
        saved: tuple[dict, dict, list] | None = None
        for act in actions:
            if act[0] == "batch":
                rows = act[1]
                ops = [r[0] for r in rows]
                keys = [POOL[r[1]] for r in rows]
                values = [0 if dtype is None else r[2] for r in rows]
                aux = [r[3] for r in rows]
                model.apply(ops, keys, values, aux)
                vals = None
                if dtype is not None:
                    vals = np.zeros(len(rows), VALUE)
                    vals["n"] = values
                drum.submit(np.array(ops, np.uint8), np.array(keys, np.uint64), vals, aux)
            elif act[0] == "flush":
                drum.flush()
            elif act[0] == "flush_later":
                drum.flush(wait=False)  # without background: as flush()
            elif act[0] == "take":
                got = drain(drum)
                assert got == model.expected[: len(got)]
                del model.expected[: len(got)]
            elif act[0] == "commit":
                manifest = json.loads(json.dumps(drum.commit()))
                saved = (manifest, dict(model.stored), list(model.expected))
            elif act[0] == "reopen":
                # A clean restart: commit, then open the latest state without a manifest.
                manifest = drum.commit()
                saved = (manifest, dict(model.stored), list(model.expected))
                drum.close()
                drum = Drum(tmp, **opts)
            elif act[0] == "rollback" and saved is not None:
                drum.close()
                drum = Drum.open(tmp, saved[0], **opts)
                model.stored, model.expected = dict(saved[1]), list(saved[2])
        drum.flush()
        got = drain(drum)
        assert got == model.expected
        stats = drum.stats()
        assert stats.pending == 0
        assert stats.keys_stored == len(model.stored)


def test_results_in_arrival_order_across_buckets_and_rounds(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    drum = Drum(tmp_path, ram_bytes=1 << 14, buckets=16, fsync=False)
    keys = rng.integers(0, 1 << 63, 5000, dtype=np.uint64) * np.uint64(2)
    keys = np.concatenate([keys, keys[:2500]])
    aux = [str(k).encode() for k in keys.tolist()]
    drum.check_update(keys, aux=aux)
    drum.flush()
    results = list(drum.take_results())
    assert len({r.epoch for r in results}) > 1
    got_keys = np.concatenate([r.keys for r in results])
    assert np.array_equal(got_keys, keys)
    assert [a for r in results for a in r.aux] == aux
    unique = np.concatenate([r.unique for r in results])
    assert unique[:5000].sum() == len(np.unique(keys[:5000]))
    assert not unique[5000:].any()
    assert drum.stats().keys_stored == len(set(keys.tolist()))
    assert list(drum.take_results()) == []


@pytest.mark.parametrize("background", [False, True])
def test_results_waiting_says_whether_a_merged_round_awaits(
    tmp_path: Path, background: bool
) -> None:
    drum = Drum(tmp_path, ram_bytes=1 << 16, buckets=4, fsync=False, background=background)
    assert not drum.results_waiting()
    drum.check_update(np.arange(1, 11, dtype=np.uint64))
    assert not drum.results_waiting()  # queued, not merged
    drum.flush()
    drum.settle()
    assert drum.results_waiting()
    assert sum(len(r.keys) for r in drum.take_results()) == 10
    assert not drum.results_waiting()


def test_check_returns_stored_values_and_persists(tmp_path: Path) -> None:
    vd = np.dtype([("ip", "<u4"), ("score", "<f8")])
    drum = Drum(tmp_path, value_dtype=vd, merge="max", ram_bytes=1 << 16, fsync=False)
    keys = np.array([1, 2, 3], np.uint64)
    vals = np.array([(10, 0.5), (20, 1.5), (30, 2.5)], vd)
    drum.update(keys, vals)
    drum.update(keys[:1], np.array([(5, 9.0)], vd))
    drum.flush()
    list(drum.take_results())
    drum.commit()
    drum.close()
    drum = Drum(tmp_path, value_dtype=vd, merge="max", ram_bytes=1 << 16, fsync=False)
    drum.check(np.array([1, 4, 3], np.uint64), aux=[b"a", b"b", b"c"])
    drum.flush()
    (r,) = list(drum.take_results())
    assert r.unique.tolist() == [False, True, False]
    assert r.values.tolist() == [(10, 9.0), (0, 0.0), (30, 2.5)]
    assert r.aux == [b"a", b"b", b"c"]


def test_stats_alpha_and_theorem_2_sizing(tmp_path: Path) -> None:
    s = plan(64 << 20, 9)
    assert s.buckets == 16 and s.buffer_bytes == 1 << 20  # k0 = R / 4M with M = 1 MiB
    keys = np.arange(1, 20001, dtype=np.uint64) << np.uint64(40)
    # Theorem 2 counts every aux byte as written: incompressible aux (random bytes;
    # the arrival log stores them raw) ...
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 256, 60 * len(keys), np.uint8).tobytes()
    drum = Drum(tmp_path / "raw", ram_bytes=1 << 20, fsync=False)
    drum.check_update(keys, aux=[noise[i : i + 60] for i in range(0, len(noise), 60)])
    drum.flush()
    list(drum.take_results())
    st_ = drum.stats()
    assert st_.keys_stored == 20000 and st_.merges >= 1 and st_.last_batch > 0
    assert st_.checked_bytes == 20000 * 68
    assert 2 < st_.alpha < 10
    # ... while text that compresses is written deflated: fewer bytes moved.
    drum = Drum(tmp_path / "text", ram_bytes=1 << 20, fsync=False)
    drum.check_update(keys, aux=[b"u" * 60] * len(keys))
    drum.flush()
    assert [bytes(a) for r in drum.take_results() for a in r.aux] == [b"u" * 60] * len(keys)
    assert drum.stats().checked_bytes == 20000 * 68
    assert drum.stats().alpha < st_.alpha / 2
    assert predicted_alpha(stored=0, checked=1e6, unique=0.11, url_bytes=70, ram_bytes=1 << 30) > 2


# ------------------------------------------------------------------ bad input


def test_bad_input_is_rejected_clearly(tmp_path: Path) -> None:
    drum = Drum(tmp_path, value_dtype=VALUE, ram_bytes=1 << 16, fsync=False)
    with pytest.raises(TypeError, match="uint64"):
        drum.check(np.array([1, 2], np.int64))
    with pytest.raises(TypeError, match="uint64"):
        drum.check([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="values must be"):
        drum.update(np.array([1], np.uint64), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="2 values for 1 keys"):
        drum.update(np.array([1], np.uint64), np.zeros(2, VALUE))
    with pytest.raises(ValueError, match="aux"):
        drum.check(np.array([1], np.uint64), aux=[b"a", b"b"])
    with pytest.raises(ValueError, match="ops"):
        drum.submit(np.array([7], np.uint8), np.array([1], np.uint64))
    with pytest.raises(ValueError, match="merge must be"):
        Drum(tmp_path / "x", merge="min")
    with pytest.raises(ValueError, match="power of two"):
        Drum(tmp_path / "y", buckets=3)
    drum.commit()
    with pytest.raises(ValueError, match="stores values of"):
        Drum(tmp_path, value_dtype=np.dtype([("n", "<i4")]))


def test_bad_merge_function_result(tmp_path: Path) -> None:
    drum = Drum(
        tmp_path, value_dtype=VALUE, merge=lambda s, i: s["n"], fsync=False, ram_bytes=1 << 16
    )
    drum.update(np.array([1, 1], np.uint64), np.zeros(2, VALUE))
    with pytest.raises(TypeError, match="merge function returned"):
        drum.flush()


def _filled(tmp_path: Path) -> tuple[Drum, dict]:
    drum = Drum(tmp_path, value_dtype=VALUE, ram_bytes=1 << 16, buckets=2, fsync=False)
    keys = np.arange(1, 3001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15 // 4000)
    drum.update(keys, np.ones(len(keys), VALUE))
    drum.flush()
    list(drum.take_results())
    # Pending at the commit: enough tuples (over both buckets) to spill the first
    # ones to q files; the rest are only in the arrival log.
    pending = np.concatenate([keys[:350] + np.uint64(1), keys[:350] + np.uint64(1 << 63)])
    drum.check_update(pending, aux=[b"x"] * len(pending))
    assert drum.state.live["sn"] and drum.buffer.ram_n
    manifest = drum.commit()
    drum.close()
    return drum, manifest


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["c", "q", "a"])
def test_corrupted_file_is_named(tmp_path: Path, kind: str) -> None:
    _filled(tmp_path)
    path = sorted(tmp_path.glob(f"{kind}-*.drum"))[0]
    _flip(path, path.stat().st_size - 3)
    with pytest.raises(DrumCorruptError, match=path.name):
        drum = Drum(tmp_path, value_dtype=VALUE, buckets=2, fsync=False, ram_bytes=1 << 16)
        drum.flush()
        list(drum.take_results())


@pytest.mark.parametrize("kind", ["c", "q"])
def test_truncated_file_is_named(tmp_path: Path, kind: str) -> None:
    _filled(tmp_path)
    path = sorted(tmp_path.glob(f"{kind}-*.drum"))[0]
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 5)
    with pytest.raises(DrumCorruptError, match=path.name):
        Drum(tmp_path, value_dtype=VALUE, buckets=2, fsync=False, ram_bytes=1 << 16)


def _url_log(tmp_path: Path) -> tuple[Path, list[tuple[int, int, bytes]], list[bytes]]:
    """A committed epoch of URL-like aux (compressible), not yet merged: its arrival
    log path, its blocks ``(offset, count, payload)`` and the aux given."""
    drum = Drum(tmp_path, ram_bytes=1 << 20, fsync=False)
    urls = [b"https://www.example%03d.com/path/page-%06d.html" % (i % 7, i) for i in range(2000)]
    keys = np.arange(1, 2001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for s in range(0, 2000, 500):  # a block per call (a list of aux is joined per call)
        drum.check_update(keys[s : s + 500], aux=urls[s : s + 500])
    drum.commit()
    drum.close()
    (path,) = tmp_path.glob("a-*.drum")
    blocks = list(iter_blocks_at(path, b"a"))
    assert len(blocks) > 1
    for _, n, payload in blocks:  # the rest after the keys and (rawlen, codec) is deflated
        assert payload[8 * n + 8] == DEFLATE and len(payload) < 8 * n + 9 + sum(map(len, urls))
    return path, blocks, urls


def test_compressed_arrival_log_reads_back(tmp_path: Path) -> None:
    _, _, urls = _url_log(tmp_path)
    drum = Drum(tmp_path, ram_bytes=1 << 20, fsync=False)  # reloads the epoch from the log
    drum.flush()
    got = list(drum.take_results())
    assert [a for r in got for a in r.aux] == urls
    assert sum(int(r.unique.sum()) for r in got) == len(urls)


def _rewrite_block(path: Path, offset: int, payload: bytes) -> None:
    """Replace the payload of the block at ``offset`` with one of the same length and
    a valid checksum: only decoding it can find the damage."""
    data = bytearray(path.read_bytes())
    count = int.from_bytes(data[offset : offset + 4], "little")
    data[offset : offset + 12 + len(payload)] = encode_block(count, payload)
    path.write_bytes(bytes(data))


def test_corrupted_compressed_arrival_block_is_named(tmp_path: Path) -> None:
    path, blocks, _ = _url_log(tmp_path)
    at, n, payload = blocks[1]
    # A damaged byte in the deflated aux: the block's checksum names file and offset.
    _flip(path, at + 12 + len(payload) - 5)
    with pytest.raises(
        DrumCorruptError, match=f"{path.name}.*checksum mismatch in block at offset {at}"
    ):
        Drum(tmp_path, ram_bytes=1 << 20, fsync=False)
    # Garbage deflate data under a valid checksum: named when inflating.
    start = 8 * n + 9
    _rewrite_block(path, at, payload[:start] + b"\xff" * (len(payload) - start))
    with pytest.raises(DrumCorruptError, match=f"{path.name}.*offset {at}.*compressed data"):
        Drum(tmp_path, ram_bytes=1 << 20, fsync=False)
    # A wrong raw length recorded for a valid stream.
    bad = bytearray(payload)
    bad[8 * n] ^= 1
    _rewrite_block(path, at, bytes(bad))
    with pytest.raises(DrumCorruptError, match=f"{path.name}.*offset {at}"):
        Drum(tmp_path, ram_bytes=1 << 20, fsync=False)
    # An unknown codec.
    bad = bytearray(payload)
    bad[8 * n + 8] = 7
    _rewrite_block(path, at, bytes(bad))
    with pytest.raises(DrumCorruptError, match=f"{path.name}.*offset {at}.*codec 7"):
        Drum(tmp_path, ram_bytes=1 << 20, fsync=False)


def test_torn_compressed_arrival_log_is_named(tmp_path: Path) -> None:
    path, blocks, _ = _url_log(tmp_path)
    at, _, payload = blocks[-1]
    with open(path, "r+b") as f:  # cut inside the last (committed) block
        f.truncate(at + 12 + len(payload) // 2)
    with pytest.raises(DrumCorruptError, match=f"{path.name}.*truncated"):
        Drum(tmp_path, ram_bytes=1 << 20, fsync=False)


def test_corrupted_header_and_state(tmp_path: Path) -> None:
    _filled(tmp_path)
    path = sorted(tmp_path.glob("c-*.drum"))[0]
    _flip(path, 0)
    with pytest.raises(DrumCorruptError, match=f"{path.name}.*magic"):
        Drum(tmp_path, value_dtype=VALUE, buckets=2, fsync=False)
    _flip(path, 0)
    _flip(tmp_path / "STATE.json", 30)
    with pytest.raises(DrumCorruptError, match="STATE.json"):
        Drum(tmp_path, value_dtype=VALUE, buckets=2, fsync=False)


def test_unknown_manifest_is_refused(tmp_path: Path) -> None:
    _, manifest = _filled(tmp_path)
    drum = Drum(tmp_path, value_dtype=VALUE, buckets=2, fsync=False, ram_bytes=1 << 16)
    drum.commit()
    drum.commit()
    with pytest.raises(DrumError, match="last two commits"):
        Drum.open(tmp_path, manifest, value_dtype=VALUE, buckets=2, fsync=False)


def test_aux_forms_and_compact_results(tmp_path: Path) -> None:
    drum = Drum(tmp_path, ram_bytes=1 << 16, buckets=4, fsync=False)
    keys = np.arange(1, 7, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    drum.check_update(keys[:3], aux=[b"a", b"", b"ccc"])
    blob = np.frombuffer(b"dd-eeeee", np.uint8)  # (blob, offsets) pair: d, -, eeeee
    drum.check_update(keys[3:], aux=(blob, np.array([0, 2, 3, 8])))
    drum.check_update(keys[:2], aux=AuxArray(b"xxyz", np.array([1, 2, 4])))
    drum.flush()
    (r,) = list(drum.take_results())
    assert isinstance(r.aux, AuxArray) and len(r.aux) == 8
    assert r.aux.tolist() == [b"a", b"", b"ccc", b"dd", b"-", b"eeeee", b"x", b"yz"]
    assert r.aux[-1] == b"yz" and r.aux[2:4] == [b"ccc", b"dd"]
    assert r.aux.select(np.flatnonzero(r.unique)) == r.aux.tolist()[:6]
    with pytest.raises(ValueError, match="aux"):
        drum.check(keys[:2], aux=(b"abc", np.array([0, 2, 1])))


def test_fsync_commit_syncs_only_at_commits(tmp_path: Path, monkeypatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    drum = Drum(
        tmp_path / "d", value_dtype=VALUE, merge="add", ram_bytes=1 << 14, buckets=4, fsync="commit"
    )
    synced.clear()
    keys = np.arange(3000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    values = np.ones(len(keys), VALUE)
    drum.update(keys, values, aux=[b"%d" % i for i in range(len(keys))])
    drum.flush()
    assert drum.stats().merges >= 2 and synced == []  # rounds: nothing fsynced
    results = list(drum.take_results())
    assert sum(len(r) for r in results) == len(keys) and synced == []
    manifest = drum.commit()
    # Every live data file, the state file and the directory (twice) were synced.
    data_files = [p for p in (tmp_path / "d").iterdir() if p.suffix == ".drum"]
    assert len(synced) >= len(data_files) + 3
    drum.update(keys[:10], values[:10])
    drum.flush()
    drum.close()
    drum = Drum.open(tmp_path / "d", manifest, value_dtype=VALUE, merge="add", fsync="commit")
    drum.check(keys)
    drum.flush()
    got = np.concatenate([r.values["n"] for r in drum.take_results()])
    assert (got == 1).all()
    with pytest.raises(ValueError, match="fsync"):
        Drum(tmp_path / "e", fsync="always")


def test_rollback_keeps_reusing_obsolete_files(tmp_path: Path, monkeypatch) -> None:
    """Obsolete caches and arrival logs are kept as spares and overwritten later; a
    rollback that makes more files obsolete while an old spare exists loses nothing."""
    opts = {
        "value_dtype": VALUE,
        "merge": "add",
        "ram_bytes": 1 << 16,
        "buckets": 4,
        "fsync": False,
    }
    drum = Drum(tmp_path, **opts)
    keys = np.arange(1, 401, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    manifests = []
    for i in range(4):
        drum.update(keys[i * 100 : (i + 1) * 100], np.ones(100, VALUE), aux=[b"u"] * 100)
        drum.flush()
        list(drum.take_results())
        manifests.append(drum.commit())
    assert sorted(p.name for p in tmp_path.glob("spare-*.tmp")) == ["spare-a.tmp", "spare-c.tmp"]
    # Uncommitted rounds touching one bucket each: the state then names a cache file
    # per bucket, all obsolete after the rollback, listed next to the old spare.
    for b in range(4):
        drum.update(np.array([(b << 62) + 5], np.uint64), np.ones(1, VALUE))
        drum.flush()
        list(drum.take_results())
    drum.close()
    (tmp_path / "spare-c.tmp").write_bytes(b"left by an earlier instance")
    # Listed in name order, the obsolete caches come before the old spare.
    monkeypatch.setattr(
        Path, "iterdir", lambda self: iter(sorted(self / name for name in os.listdir(self)))
    )
    drum = Drum.open(tmp_path, manifests[-1], **opts)
    for i in range(2):  # rounds that overwrite the spares
        drum.check(keys)
        drum.update(keys[:1] + np.uint64(i + 1), np.ones(1, VALUE))
        drum.flush()
        got = np.concatenate([r.unique for r in drum.take_results()])
        assert got.tolist() == [False] * 400 + [True]
    drum.close()


# ------------------------------------------------------------------ base + delta runs


def test_small_rounds_write_deltas_and_values_reach_the_base(tmp_path: Path) -> None:
    """A round writes only the records it changed (a delta run); `add` updates of keys in
    the base find the base value; the number of runs stays bounded; folding the deltas
    into the base keeps every value."""
    from drumbeat.drum.runs import MAX_RUNS

    opts = {
        "value_dtype": VALUE,
        "merge": "add",
        "ram_bytes": 1 << 20,
        "buckets": 4,
        "fsync": False,
    }
    drum = Drum(tmp_path, **opts)
    keys = np.arange(1, 40_001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    drum.update(keys, np.ones(len(keys), VALUE))
    drum.flush()
    list(drum.take_results())
    base_bytes = sum(p.stat().st_size for p in tmp_path.glob("c-*.drum"))
    model = dict.fromkeys(keys.tolist(), 1)
    rng = np.random.default_rng(11)
    runs_seen = set()
    written: list[int] = []  # bytes written by each round before the base is rewritten
    for i in range(120):
        picked = rng.choice(keys, 50, replace=False)
        new = np.array([(1 << 63) + i * 64 + j for j in range(10)], np.uint64)
        batch = np.concatenate([picked, new])
        before = drum.stats().bytes_written
        drum.submit(np.full(len(batch), 2, np.uint8), batch, np.ones(len(batch), VALUE))
        drum.flush()
        got = list(drum.take_results())
        for k in batch.tolist():
            model[k] = model.get(k, 0) + 1
        unique = np.concatenate([r.unique for r in got])
        assert unique.tolist() == [False] * 50 + [True] * 10
        stats = drum.stats()
        runs_seen.add(stats.runs)
        assert stats.runs <= MAX_RUNS
        if not stats.base_rewrites:
            written.append(stats.bytes_written - before)
    stats = drum.stats()
    assert stats.keys_stored == len(model)
    assert max(runs_seen) > 2  # deltas piled up before being folded
    # A round writes its 60 changed records and the small deltas it folds, not the base.
    assert len(written) > 20 and max(written) < base_bytes / 3
    assert np.median(written) < base_bytes / 20
    drum.commit()
    drum.close()
    drum = Drum(tmp_path, **opts)
    every = np.array(sorted(model), np.uint64)
    drum.check(every)
    drum.flush()
    values = np.concatenate([r.values["n"] for r in drum.take_results()])
    assert values.tolist() == [model[k] for k in every.tolist()]


def test_deltas_fold_into_the_base(tmp_path: Path) -> None:
    drum = Drum(tmp_path, value_dtype=VALUE, merge="max", ram_bytes=1 << 20, buckets=2, fsync=False)
    keys = np.arange(1, 1001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for i in range(0, 1000, 100):  # every round adds a tenth: the base is soon rewritten
        values = np.zeros(100, VALUE)
        values["n"] = i
        drum.update(keys[i : i + 100], values)
        drum.update(keys[:10], values[:10])
        drum.flush()
        list(drum.take_results())
    stats = drum.stats()
    assert stats.base_rewrites >= 2 and stats.keys_stored == 1000
    drum.check(keys)
    drum.flush()
    got = np.concatenate([r.values["n"] for r in drum.take_results()])
    expected = [max(i // 100 * 100, 900 if i < 10 else 0) for i in range(1000)]
    assert got.tolist() == expected


def test_older_state_format_is_refused(tmp_path: Path) -> None:
    import zlib

    body = json.dumps({"format": 3, "value_dtype": [], "buckets": 1}).encode()
    (tmp_path / "STATE.json").write_bytes(body + b"\n" + b"%08x\n" % zlib.crc32(body))
    with pytest.raises(DrumError, match="state format 3.*only format 5"):
        Drum(tmp_path)
    # Format 4 directories hold data files of format 5 (uncompressed arrival log).
    body = json.dumps({"format": 4, "value_dtype": [], "buckets": 1}).encode()
    (tmp_path / "STATE.json").write_bytes(body + b"\n" + b"%08x\n" % zlib.crc32(body))
    with pytest.raises(DrumError, match="state format 4.*only format 5.*another version"):
        Drum(tmp_path)


class _GatedDrum(Drum):
    """A Drum whose background rounds wait for ``gate`` before they merge."""

    def __init__(self, *args, **kwargs) -> None:
        self.gate = threading.Event()
        super().__init__(*args, **kwargs)
        body = self.rounds.body

        def gated(rnd):
            assert self.gate.wait(30), "the test never opened the gate"
            return body(rnd)

        self.rounds.body = gated


def _keys(lo: int, hi: int) -> np.ndarray:
    return np.arange(lo, hi, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def _aux(lo: int, hi: int) -> list[bytes]:
    return [b"u%d" % i for i in range(lo, hi)]


def test_a_background_round_holds_later_tuples_and_ends_on_a_later_call(tmp_path: Path) -> None:
    sync = Drum(tmp_path / "sync", ram_bytes=1 << 16, buckets=4, fsync=False)
    gated = _GatedDrum(
        tmp_path / "gated", ram_bytes=1 << 16, buckets=4, fsync=False, background=True
    )
    for drum in (sync, gated):
        drum.check_update(_keys(0, 300), aux=_aux(0, 300))
        drum.flush(wait=False)
        drum.check_update(_keys(200, 500), aux=_aux(200, 500))  # 100 keys seen before
    assert not sync.busy and gated.busy
    assert gated.stats().pending == 600  # the round's 300 and the 300 held
    assert drain(gated) == []  # the round has not ended
    assert gated.busy
    gated.gate.set()
    for drum in (sync, gated):
        drum.flush()
    assert not gated.busy
    got = drain(gated)
    assert got == drain(sync)
    assert [unique for _, _, unique, _, _ in got] == [True] * 300 + [False] * 100 + [True] * 200
    assert [a for *_, a in got] == _aux(0, 300) + _aux(200, 500)
    assert gated.stats().keys_stored == 500 and gated.stats().pending == 0


def test_a_background_round_calls_on_round_done_from_its_thread_once_merged(
    tmp_path: Path,
) -> None:
    """The caller's loop may sleep while a round merges: the round wakes it when done."""
    calls: list[str] = []
    done = threading.Event()

    def on_round_done() -> None:
        calls.append(threading.current_thread().name)
        done.set()

    drum = _GatedDrum(
        tmp_path / "d",
        ram_bytes=1 << 16,
        buckets=4,
        fsync=False,
        background=True,
        on_round_done=on_round_done,
    )
    drum.check_update(_keys(0, 300), aux=_aux(0, 300))
    drum.flush(wait=False)
    assert drum.busy and not done.wait(0.05)  # merging: not called yet
    drum.gate.set()
    assert done.wait(30)
    assert len(calls) == 1 and calls[0].startswith("drum-round")
    assert drum.busy  # merged, not yet ended: the next call ends it
    assert [unique for _, _, unique, _, _ in drain(drum)] == [True] * 300
    assert not drum.busy and len(calls) == 1
    # A repository that merges in the caller's thread calls nobody.
    sync = Drum(
        tmp_path / "s", ram_bytes=1 << 16, buckets=4, fsync=False, on_round_done=on_round_done
    )
    sync.check_update(_keys(0, 10), aux=_aux(0, 10))
    sync.flush()
    assert len(calls) == 1


def _long_aux(lo: int, hi: int) -> list[bytes]:
    return [b"http://host%d.example/page/%08d" % (i % 7, i) for i in range(lo, hi)]


def test_held_tuples_past_their_share_are_written_ahead_and_begin_the_next_epoch(
    tmp_path: Path,
) -> None:
    sync = Drum(tmp_path / "sync", ram_bytes=1 << 16, buckets=4, fsync=False)
    gated = _GatedDrum(
        tmp_path / "gated", ram_bytes=1 << 16, buckets=4, fsync=False, background=True
    )
    opener = threading.Timer(30, gated.gate.set)  # only if a submit waited (a failure)
    opener.start()
    for drum in (sync, gated):
        drum.check_update(_keys(0, 300), aux=_long_aux(0, 300))
        drum.flush(wait=False)
        # 1,600 tuples of ~40 bytes with aux pass HELD_SHARE (a quarter) of the 64 KiB
        # twice over; ~400 a bucket are far from the next epoch's bucket_records.
        for lo in range(200, 1800, 100):
            drum.check_update(_keys(lo, lo + 100), aux=_long_aux(lo, lo + 100))
    assert not gated.gate.is_set()  # no submit waited for the round
    epoch = gated.state.snap["epoch"]
    assert (tmp_path / "gated" / f"a-{epoch + 1:08d}.drum").exists()
    assert 0 < gated.buffer.next["an"] <= 1600 and gated.buffer.held_n < 1600
    assert gated.stats().pending == 300 + 1600
    gated.gate.set()
    opener.cancel()
    for drum in (sync, gated):
        drum.flush()
    got = drain(gated)
    assert got == drain(sync)
    assert [unique for _, _, unique, _, _ in got] == [True] * 300 + [False] * 100 + [True] * 1500
    assert [a for *_, a in got] == _long_aux(0, 300) + _long_aux(200, 1800)
    # The next epoch began with the tuples written ahead: committed, they reopen.
    gated.check_update(_keys(1800, 1900), aux=_long_aux(1800, 1900))
    gated.commit()
    gated.close()
    reopened = Drum(tmp_path / "gated", ram_bytes=1 << 16, fsync=False)
    reopened.flush()
    assert [a for *_, a in drain(reopened)] == _long_aux(1800, 1900)
    assert reopened.stats().keys_stored == 1900


def test_a_submit_waits_for_the_round_when_the_next_epoch_cannot_take_what_is_held(
    tmp_path: Path,
) -> None:
    drum = _GatedDrum(tmp_path, ram_bytes=1 << 16, buckets=4, fsync=False, background=True)
    drum.check_update(_keys(0, 100), aux=_long_aux(0, 100))
    drum.flush(wait=False)
    assert drum.busy
    opener = threading.Timer(0.2, drum.gate.set)
    opener.start()
    # 1,000 keys of one bucket (high bits 0) pass its bucket_records (744 here) in the
    # next epoch, and with their aux HELD_SHARE: this call waits.
    assert drum.sizing.bucket_records < 1000
    keys = np.arange(1000, 2000, dtype=np.uint64)
    drum.check_update(keys, aux=_long_aux(100, 1100))
    assert drum.gate.is_set()  # it returned once the round could end, not before
    assert drum.buffer.next is None  # nothing was written ahead
    opener.join()
    drum.flush()
    assert [a for *_, a in drain(drum)] == _long_aux(0, 1100)


def test_tuples_written_ahead_of_a_round_that_never_ended_are_gone_on_reopening(
    tmp_path: Path,
) -> None:
    """They were not committed: the state names them only once the round has ended."""
    drum = _GatedDrum(tmp_path, ram_bytes=1 << 16, buckets=4, fsync=False, background=True)
    drum.check_update(_keys(0, 300), aux=_long_aux(0, 300))
    manifest = drum.commit()
    drum.flush(wait=False)
    for lo in range(300, 1500, 100):
        drum.check_update(_keys(lo, lo + 100), aux=_long_aux(lo, lo + 100))
    epoch = drum.state.snap["epoch"]
    assert drum.buffer.next is not None
    ahead = sorted(p.name for p in tmp_path.glob(f"[aq]-{epoch + 1:08d}*.drum"))
    assert ahead and f"a-{epoch + 1:08d}.drum" in ahead
    drum.gate.set()
    drum.close()  # waits for the round without ending it, as a crash would leave it
    drum = Drum.open(tmp_path, manifest, ram_bytes=1 << 16, fsync=False)
    assert not any(p.name in ahead for p in tmp_path.iterdir())
    drum.flush()
    assert [a for *_, a in drain(drum)] == _long_aux(0, 300)
    assert drum.stats().keys_stored == 300


def test_background_rounds_with_tuples_written_ahead_give_the_results_of_sync_ones(
    tmp_path: Path,
) -> None:
    """A long stream through a small repository: most background rounds have tuples
    held past their share and written ahead, and the outcomes are those without."""

    class SlowDrum(Drum):  # rounds last while a few batches come
        ahead = 0

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            body, write_ahead = self.rounds.body, self.buffer.write_ahead

            def slow_body(rnd):
                time.sleep(0.003)
                return body(rnd)

            def counted_write_ahead() -> bool:
                written = write_ahead()
                self.ahead += written
                return written

            self.rounds.body = slow_body
            self.buffer.write_ahead = counted_write_ahead

    value = np.dtype([("n", "<i8")])
    got = {}
    for background in (False, True):
        drum = SlowDrum(
            tmp_path / str(background),
            value_dtype=value,
            merge="add",
            ram_bytes=1 << 14,
            buckets=8,
            fsync=False,
            background=background,
        )
        rng = np.random.default_rng(7)
        for i in range(200):
            keys = rng.integers(0, 4000, 150).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            values = np.zeros(150, value)
            values["n"] = rng.integers(1, 100, 150)
            drum.submit(
                rng.integers(0, 3, 150).astype(np.uint8),
                keys,
                values,
                [b"%d:%d" % (i, j) for j in range(150)],
            )
            if i % 7 == 0:
                drum.flush(wait=False)
        drum.flush()
        got[background] = drain(drum)
        assert drum.stats().pending == 0
        assert (drum.ahead > 10) == background
        drum.close()
    assert len(got[True]) == 200 * 150
    assert got[True] == got[False]


def test_a_failed_background_round_breaks_the_repository_on_the_next_call(tmp_path: Path) -> None:
    class FailingDrum(Drum):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)

            def failing_body(rnd):
                rnd.r_file.close()
                raise OSError(28, "No space left on device")  # as a full disk would

            self.rounds.body = failing_body

    drum = FailingDrum(tmp_path, ram_bytes=1 << 16, fsync=False, background=True)
    drum.check_update(_keys(0, 100), aux=_aux(0, 100))
    manifest = drum.commit()
    drum.flush(wait=False)
    assert drum.busy
    with pytest.raises(DrumIOError, match="No space left"):
        drum.flush()  # waits for the round, and raises its error
    with pytest.raises(DrumError, match="unusable"):
        drum.check_update(_keys(100, 101), aux=_aux(100, 101))
    drum.close()
    # The committed tuples were not lost: the round is redone after reopening.
    drum = Drum.open(tmp_path, manifest, ram_bytes=1 << 16, fsync=False)
    drum.flush()
    assert [a for *_, a in drain(drum)] == _aux(0, 100)
