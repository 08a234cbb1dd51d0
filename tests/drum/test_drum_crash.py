"""DRUM killed with SIGKILL (at random times and at precise points) and on a full disk.

A child process applies a deterministic stream of batches and records, after
each ``commit()`` returned, the manifest and how far it got. The parent kills
it, reopens the repository (with that manifest, and without) and holds the
result against a dict model of the same stream.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from drumbeat.drum import CHECK, Drum, DrumIOError

VALUE = np.dtype([("n", "<i8")])
OPTS = {"value_dtype": VALUE, "merge": "add", "ram_bytes": 1 << 14, "buckets": 8}
MAX_BATCHES = 300
HERE = Path(__file__).parent


def batch(i: int, grow: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """Batch ``i`` of the stream; with ``grow`` most keys are new, so the repository grows."""
    rng = np.random.default_rng(i)
    n = 1500 if grow else 150
    ops = rng.integers(0, 3, n).astype(np.uint8)
    keys = rng.integers(0, 4000, n) + (i * 1000 if grow else 0)
    keys = keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    values = np.zeros(n, VALUE)
    values["n"] = rng.integers(1, 100, n)
    aux = [b"%d:%d" % (i, j) for j in range(n)]
    return ops, keys, values, aux


def model(batches: int, grow: bool = False) -> tuple[dict[int, int], list[tuple]]:
    stored: dict[int, int] = {}
    expected = []
    for i in range(batches):
        ops, keys, values, aux = batch(i, grow)
        for op, key, value, a in zip(ops.tolist(), keys.tolist(), values["n"].tolist(), aux):
            expected.append((key, op, key not in stored, stored.get(key, 0), a))
            if op != CHECK:
                stored[key] = stored[key] + value if key in stored else value
    return stored, expected


def child_main(
    directory: str,
    seed: int,
    kill: str,
    fsync: bool | str,
    ram: int = OPTS["ram_bytes"],
    background: bool = False,
) -> None:
    """Run the stream; ``kill`` = "module.Owner.attr:n:mode" (a module of drumbeat.drum)
    SIGKILLs the child at that call (from the round's thread too, with ``background``:
    rounds then run there, and half the flushes do not wait)."""
    import importlib

    if kill:
        target, count, mode = kill.split(":")
        module_name, _, target = target.partition(".")
        module = importlib.import_module(f"drumbeat.drum.{module_name}")
        owner_name, _, attr = target.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        original = getattr(owner, attr)
        calls = [0]

        def hooked(*args, **kwargs):
            calls[0] += 1
            if calls[0] == int(count):
                if mode == "torn":  # WriteAheadBuffer.append: half of the data reaches the file
                    _self, path, length, *_rest, data = args
                    if length:
                        with open(path, "r+b") as f:
                            f.seek(length)
                            f.write(data[: len(data) // 2])
                if mode == "before":
                    os.kill(os.getpid(), signal.SIGKILL)
                result = original(*args, **kwargs)
                os.kill(os.getpid(), signal.SIGKILL)
                return result
            return original(*args, **kwargs)

        setattr(owner, attr, hooked)
    rng = random.Random(seed)
    drum = Drum(directory, fsync=fsync, background=background, **{**OPTS, "ram_bytes": ram})
    progress = Path(directory).parent / "progress.json"
    taken = 0
    for i in range(MAX_BATCHES):
        drum.submit(*batch(i))
        if rng.random() < 0.2:
            drum.flush(wait=not background or rng.random() < 0.5)
        if rng.random() < 0.3:
            taken += sum(len(r) for r in drum.take_results())
        if rng.random() < 0.3:
            manifest = drum.commit()
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(json.dumps({"manifest": manifest, "batches": i + 1, "taken": taken}))
            os.replace(tmp, progress)


def run_child(
    directory: Path,
    seed: int,
    kill: str = "",
    fsync: bool | str = False,
    kill_after_s: float | None = None,
    ram: int = OPTS["ram_bytes"],
    background: bool = False,
) -> int:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); from test_drum_crash import child_main; "
        f"child_main({str(directory)!r}, {seed}, {kill!r}, {fsync!r}, {ram}, {background})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        return proc.wait(timeout=kill_after_s if kill_after_s is not None else 60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=10)


def drain(drum: Drum) -> list[tuple]:
    drum.flush()
    return [
        row
        for r in drum.take_results()
        for row in zip(
            r.keys.tolist(), r.ops.tolist(), r.unique.tolist(), r.values["n"].tolist(), r.aux
        )
    ]


def verify(tmp_path: Path) -> None:
    progress_path = tmp_path / "progress.json"
    if not progress_path.exists():
        Drum(tmp_path / "drum", fsync=False, **OPTS)  # must open, nothing acknowledged
        return
    progress = json.loads(progress_path.read_text())
    grow = progress.get("grow", False)
    stored, expected = model(progress["batches"], grow)
    saved = tmp_path / "saved"
    shutil.copytree(tmp_path / "drum", saved)

    # Without a manifest: the latest state holds everything acknowledged, and what
    # it delivers is a contiguous run of the model's outcomes.
    drum = Drum(tmp_path / "drum", fsync=False, **OPTS)
    got = drain(drum)
    _, longer = model(progress["batches"] + 200, grow)
    if got:
        starts = [i for i in range(progress["taken"], len(longer)) if longer[i] == got[0]]
        assert any(longer[i : i + len(got)] == got for i in starts), "results differ from model"
    committed = np.array(sorted(stored), np.uint64)
    drum.check(committed)
    drum.flush()
    assert not any(r.unique.any() for r in drum.take_results())
    drum.close()

    # With the manifest: exactly the committed state.
    drum = Drum.open(saved, progress["manifest"], fsync=False, **OPTS)
    assert drain(drum) == expected[progress["taken"] :]
    assert drum.stats().keys_stored == len(stored)
    drum.check(committed)
    drum.flush()
    values = np.concatenate([r.values["n"] for r in drum.take_results()])
    assert values.tolist() == [stored[k] for k in committed.tolist()]


KILL_POINTS = [
    "buffer.WriteAheadBuffer.append:150:torn",
    "buffer.WriteAheadBuffer.append:200:after",
    "rounds.CacheWriter.write:25:after",
    "rounds.CacheWriter.close:30:before",
    "rounds.MergeRounds.write_blocks:12:after",
    "state._write_state_file:15:before",
    "state._write_state_file:22:after",
    "delivery._Stream.take:200:after",
]


# Kill points with epochs held in RAM (merged from RAM, results in arrival order).
RAM_KILL_POINTS = [
    "buffer.WriteAheadBuffer.flush_arrivals:20:after",
    "rounds.CacheWriter.close:6:before",
    "rounds.MergeRounds.write_blocks:6:after",
    "delivery._Stream.take:40:after",
]


# Rounds in the background: killed in the round's thread (writing the new run, the
# results), in the caller's (a spill, the state, tuples written ahead to the next
# epoch's files) while one may run.
BACKGROUND_KILL_POINTS = [
    ("buffer.WriteAheadBuffer.write_ahead:20:after", 1 << 14),
    ("buffer.WriteAheadBuffer.log_block:150:after", 1 << 14),
    ("rounds.CacheWriter.write:25:after", 1 << 14),
    ("rounds.MergeRounds.write_blocks:12:after", 1 << 14),
    ("buffer.WriteAheadBuffer.append:200:after", 1 << 14),
    ("state._write_state_file:22:after", 1 << 14),
    ("rounds.CacheWriter.close:6:before", 1 << 17),
]


# A point's seed is the CRC of the name it had when Drum was one class (owner names of
# drumbeat.drum.repository), so that each point still runs the stream it always ran.
_SEED_NAMES = {
    "buffer.WriteAheadBuffer.": "Drum._",
    "rounds.MergeRounds.": "Drum._",
    "rounds.CacheWriter.": "_CacheWriter.",
    "state.": "",
    "delivery.": "",
}


def _seed(kill: str) -> int:
    for new, old in _SEED_NAMES.items():
        if kill.startswith(new):
            kill = old + kill[len(new) :]
            break
    return zlib.crc32(kill.encode())


@pytest.mark.parametrize(
    "kill,ram,background",
    [(k, 1 << 14, False) for k in KILL_POINTS]
    + [(k, 1 << 17, False) for k in RAM_KILL_POINTS]
    + [(k, ram, True) for k, ram in BACKGROUND_KILL_POINTS],
)
def test_killed_at_a_precise_point(tmp_path: Path, kill: str, ram: int, background: bool) -> None:
    rc = run_child(tmp_path / "drum", seed=_seed(kill), kill=kill, ram=ram, background=background)
    assert rc == -signal.SIGKILL, "the kill point was never reached"
    assert (tmp_path / "progress.json").exists(), "killed before the first commit"
    verify(tmp_path)


@pytest.mark.parametrize(
    "seed,fsync,ram",
    [
        (1, False, 1 << 14),
        (2, False, 1 << 14),
        (3, True, 1 << 14),
        (4, "commit", 1 << 14),
        # Epochs of several batches held in RAM (no spill to q files): after the kill the
        # pending tuples come back from the arrival log.
        (5, False, 1 << 17),
        (6, True, 1 << 17),
    ],
)
@pytest.mark.parametrize("background", [False, True])
def test_killed_at_random_times(
    tmp_path: Path, seed: int, fsync: bool | str, ram: int, background: bool
) -> None:
    delay = random.Random(seed).uniform(0.4, 1.5)
    run_child(
        tmp_path / "drum",
        seed=seed,
        fsync=fsync,
        kill_after_s=delay,
        ram=ram,
        background=background,
    )
    verify(tmp_path)


# ------------------------------------------------------------------ full disk


def fill_until_full(directory: Path) -> dict | None:
    """Commit batch after batch until a write fails; return the last progress."""
    progress = None
    drum = Drum(directory, fsync=True, **{**OPTS, "ram_bytes": 1 << 18})
    taken = 0
    for i in range(5000):
        try:
            drum.submit(*batch(i, grow=True))
            taken += sum(len(r) for r in drum.take_results())
            manifest = drum.commit()
            progress = {"manifest": manifest, "batches": i + 1, "taken": taken, "grow": True}
        except DrumIOError as exc:
            assert "reopen" in str(exc)
            return progress
    raise AssertionError("the disk never filled up")


def _mount_tmpfs(path: Path) -> bool:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], capture_output=True
    )
    return done.returncode == 0


def test_full_disk_loses_nothing_acknowledged(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    if _mount_tmpfs(mnt):
        try:
            progress = fill_until_full(mnt / "drum")
            Drum(mnt / "drum", fsync=False, **OPTS)  # opens in place, on the full disk
            shutil.copytree(mnt / "drum", tmp_path / "drum")
        finally:
            if subprocess.run(["umount", str(mnt)]).returncode:
                subprocess.run(["umount", "-l", str(mnt)], check=True)
                raise AssertionError("a DRUM file stayed open on the full disk")
    else:  # no tmpfs: cap the file size of a child instead (EFBIG rather than ENOSPC)
        code = (
            f"import sys, json, resource, signal; sys.path.insert(0, {str(HERE)!r});"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000));"
            "from test_drum_crash import fill_until_full;"
            f"p = fill_until_full(__import__('pathlib').Path({str(tmp_path / 'drum')!r}));"
            f"open({str(tmp_path / 'p.json')!r}, 'w').write(json.dumps(p))"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        progress = json.loads((tmp_path / "p.json").read_text())
    assert progress is not None and progress["batches"] > 3
    (tmp_path / "progress.json").write_text(json.dumps(progress))
    verify(tmp_path)


def test_fsize_limit_child_reports_clear_error(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    assert hard == resource.RLIM_INFINITY or hard > 200_000
    start = time.monotonic()
    code = (
        f"import sys, signal, resource; sys.path.insert(0, {str(HERE)!r});"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000));"
        "from test_drum_crash import fill_until_full; import pathlib;"
        f"print(fill_until_full(pathlib.Path({str(tmp_path / 'drum')!r}))['batches'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0 and time.monotonic() - start < 60
    Drum(tmp_path / "drum", fsync=False, **OPTS)
