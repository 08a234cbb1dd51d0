"""DiskQueue: FIFO across segments, rollback to either of the last two commits, torn
tails, corruption, and a child process killed with SIGKILL while appending."""

from __future__ import annotations

import gc
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from drumbeat.frontier.diskqueue import (
    BLOCK_HEAD_SIZE,
    HEADER_SIZE,
    DiskQueue,
    DiskQueueCorruptError,
    PackedRecords,
)

SMALL = {"segment_bytes": 200, "buffer_bytes": 64, "fsync": False}


def rec(i: int) -> bytes:
    return b"record-%d-" % i + b"x" * (i % 23)


def key(i: int) -> bytes:
    return b"k%07d" % i  # 8 bytes


def keys(first: int, count: int) -> np.ndarray:
    return np.frombuffer(b"".join(key(i) for i in range(first, first + count)), np.uint8).reshape(
        count, 8
    )


def segments(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".seg")


def test_fifo_across_segment_rotation(tmp_path: Path) -> None:
    q = DiskQueue(tmp_path / "q", **SMALL)
    q.extend(rec(i) for i in range(300))
    assert len(q) == 300
    assert len(segments(tmp_path / "q")) > 20
    out = q.read(7) + q.read(200) + q.read(1000)
    assert out == [rec(i) for i in range(300)]
    assert len(q) == 0 and q.read(5) == []
    # Every frame read, whole: all that was written but the segments' headers.
    assert q.bytes_read == q.bytes_written - HEADER_SIZE * len(segments(tmp_path / "q"))
    q.close()


def test_oversized_record_gets_its_own_segment(tmp_path: Path) -> None:
    q = DiskQueue(tmp_path / "q", **SMALL)
    big = bytes(range(256)) * 10
    q.extend([b"a", big, b"b"])
    assert q.read(3) == [b"a", big, b"b"]
    q.close()


def test_reads_see_buffered_records_and_interleave(tmp_path: Path) -> None:
    q = DiskQueue(tmp_path / "q", segment_bytes=1 << 20, buffer_bytes=1 << 20, fsync=False)
    q.append(b"one")
    assert q.read(5) == [b"one"]  # still in the write buffer, not in the file
    q.extend([b"two", b"three"])
    assert q.read(1) == [b"two"]
    q.append(b"four")
    assert q.read(5) == [b"three", b"four"]
    q.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 40)),
            st.tuples(st.just("read"), st.integers(0, 40)),
            st.tuples(st.just("commit"), st.just(0)),
            st.tuples(st.just("reopen"), st.sampled_from([-1, -2])),
        ),
        max_size=40,
    )
)
def test_against_a_deque(ops: list[tuple[str, int]]) -> None:
    """Any mix of appends (with keys or without), reads (packed or not), commits and
    reopens (to the last or the previous commit) behaves like a deque snapshotted at
    each commit."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "q"
        q = DiskQueue(directory, **SMALL)
        model: deque[tuple[bytes, bytes | None]] = deque()
        commits: list[tuple[dict, list[tuple[bytes, bytes | None]]]] = []
        counter = 0
        for op, arg in ops:
            if op == "append":
                batch = [rec(counter + i) for i in range(arg)]
                keyed = arg % 2 == 1
                q.extend(batch, keys(counter, arg) if keyed else None)
                model.extend((r, key(counter + i) if keyed else None) for i, r in enumerate(batch))
                counter += arg
            elif op == "read" and arg % 3 == 1:
                packed = q.read_packed(arg)
                assert len(packed) >= min(1, len(model))
                expected = [model.popleft() for _ in range(len(packed))]
                assert packed.records() == [r for r, _ in expected]
                assert (None if packed.keys is None else [k.tobytes() for k in packed.keys]) == (
                    None if not expected or expected[0][1] is None else [k for _, k in expected]
                )
            elif op == "read":
                assert q.read(arg) == [model.popleft()[0] for _ in range(min(arg, len(model)))]
            elif op == "commit":
                commits.append((q.commit(), list(model)))
                commits = commits[-2:]
            elif len(commits) >= -arg:
                state, contents = commits[arg]
                q.close()
                q = DiskQueue(directory, state=state, **SMALL)
                model = deque(contents)
                # The rolled-back future is gone; only this state (and its predecessor
                # when we reopened the last one) stays reopenable.
                commits = commits[: len(commits) + arg + 1]
            assert len(q) == len(model)
        assert q.read(len(model) + 5) == [r for r, _ in model]
        q.close()


def test_rollback_to_last_and_previous_commit(tmp_path: Path) -> None:
    d = tmp_path / "q"
    q = DiskQueue(d, **SMALL)
    q.extend(rec(i) for i in range(100))
    assert q.read(60) == [rec(i) for i in range(60)]
    first = q.commit()  # unread: 60..99
    q.extend(rec(i) for i in range(100, 200))
    assert q.read(70) == [rec(i) for i in range(60, 130)]
    second = q.commit()  # unread: 130..199
    q.extend(rec(i) for i in range(200, 300))
    assert q.read(150) == [rec(i) for i in range(130, 280)]
    q.close()

    q = DiskQueue(d, state=second, **SMALL)
    assert len(q) == 70
    assert q.read(1000) == [rec(i) for i in range(130, 200)]
    q.close()
    q = DiskQueue(d, state=first, **SMALL)
    assert len(q) == 40
    assert q.read(1000) == [rec(i) for i in range(60, 100)]
    q.close()


def test_fully_read_segments_are_deleted_two_commits_later(tmp_path: Path) -> None:
    d = tmp_path / "q"
    q = DiskQueue(d, **SMALL)
    q.extend(rec(i) for i in range(200))
    q.read(200)
    q.commit()
    many = len(segments(d))
    q.append(b"tail")
    q.commit()  # the previous commit still needs the old segments
    assert len(segments(d)) == many
    q.read(1)
    q.commit()
    assert len(segments(d)) == 1
    q.close()


def test_torn_tail_is_cut(tmp_path: Path) -> None:
    d = tmp_path / "q"
    q = DiskQueue(d, segment_bytes=1 << 20, fsync=False)
    q.extend([b"a", b"b"])
    state = q.commit()
    q.close()
    with open(d / segments(d)[-1], "ab") as f:
        f.write(b"\x05\x00\x00\x00\x99")  # half a frame, as a kill mid-write leaves it
    q = DiskQueue(d, state=state, segment_bytes=1 << 20, fsync=False)
    q.append(b"c")
    assert q.read(10) == [b"a", b"b", b"c"]
    q.close()


def test_flipped_byte_names_file_and_offset(tmp_path: Path) -> None:
    """A block is checked whole before any of its records is returned: a damaged one is
    reported with the offset of its frame, and none of its records comes out."""
    d = tmp_path / "q"
    q = DiskQueue(d, segment_bytes=1 << 20, fsync=False)
    q.extend([b"first"])
    q.extend([b"second", b"third"])
    state = q.commit()
    q.close()
    path = d / segments(d)[0]
    data = bytearray(path.read_bytes())
    second_at = HEADER_SIZE + BLOCK_HEAD_SIZE + 4 + len(b"first")
    data[second_at + BLOCK_HEAD_SIZE + 8 + 2] ^= 0x01  # in b"second"
    path.write_bytes(bytes(data))
    q = DiskQueue(d, state=state, segment_bytes=1 << 20, fsync=False)
    assert q.read(1) == [b"first"]
    with pytest.raises(DiskQueueCorruptError) as err:
        q.read(2)
    assert str(path) in str(err.value) and f"offset {second_at}" in str(err.value)
    assert err.value.path == path and err.value.offset == second_at
    q.close()


@pytest.mark.parametrize("damage", ["data", "lengths", "size", "count"])
def test_damage_inside_a_long_read_names_the_block(tmp_path: Path, damage: str) -> None:
    """A read of many records checks every block it takes them from: the damaged one
    is reported with its offset, whichever of its parts is damaged."""
    d = tmp_path / "q"
    q = DiskQueue(d, segment_bytes=1 << 20, fsync=False)
    blocks = [[b"record-%d-%d" % (b, i) for i in range(4)] for b in range(5)]
    for block in blocks:
        q.extend(block)
    state = q.commit()
    q.close()
    path = d / segments(d)[0]
    data = bytearray(path.read_bytes())
    third_at = HEADER_SIZE + sum(
        BLOCK_HEAD_SIZE + sum(4 + len(r) for r in block) for block in blocks[:2]
    )
    where = {
        "data": third_at + BLOCK_HEAD_SIZE + 16 + 3,
        "lengths": third_at + BLOCK_HEAD_SIZE,
        "size": third_at + 4,
        "count": third_at,
    }[damage]
    data[where] += 1  # one more: a size or count still within the segment
    path.write_bytes(bytes(data))
    q = DiskQueue(d, state=state, segment_bytes=1 << 20, fsync=False)
    assert q.read(3) == blocks[0][:3]
    with pytest.raises(DiskQueueCorruptError, match="checksum") as err:
        q.read(10)
    assert err.value.path == path and err.value.offset == third_at
    q.close()


def test_damaged_length_is_caught(tmp_path: Path) -> None:
    d = tmp_path / "q"
    q = DiskQueue(d, segment_bytes=1 << 20, fsync=False)
    q.extend([b"abc", b"def"])
    state = q.commit()
    q.close()
    path = d / segments(d)[0]
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE + 7] = 0x7F  # a size of ~2 GB must not be allocated
    path.write_bytes(bytes(data))
    q = DiskQueue(d, state=state, segment_bytes=1 << 20, fsync=False)
    with pytest.raises(DiskQueueCorruptError, match="runs past the segment end"):
        q.read(1)
    q.close()


def _version_1_queue(directory: Path, records: list[bytes]) -> dict:
    """A queue as version 1 wrote it (record frames), with its state: nothing read."""
    directory.mkdir()
    head = struct.pack("<4sHxxQ", b"DQSG", 1, 0)
    frames = b"".join(
        struct.pack("<II", len(r), xxhash.xxh32_intdigest(r, len(r))) + r for r in records
    )
    (directory / "0000000000.seg").write_bytes(head + struct.pack("<I", zlib.crc32(head)) + frames)
    end = HEADER_SIZE + len(frames)
    return {
        "format": 1,
        "write": [0, end],
        "read": [0, HEADER_SIZE],
        "count": len(records),
        "keep": 0,
        "bytes_written": end,
        "bytes_read": 0,
    }


def test_a_version_1_queue_reopens_and_goes_on_with_blocks(tmp_path: Path) -> None:
    """Record frames (version 1) are still read, before and among blocks, and a state
    taken inside either kind reopens."""
    d = tmp_path / "q"
    old = [b"old-%d" % i for i in range(6)]
    q = DiskQueue(d, state=_version_1_queue(d, old), segment_bytes=1 << 20, fsync=False)
    assert q.read(2) == old[:2]
    new = [b"new-%d" % i for i in range(5)]
    q.extend(new)
    assert q.read(6) == old[2:] + new[:2]
    state = q.commit()
    assert state["read_in_block"] == 2
    q.close()
    q = DiskQueue(d, state=state, segment_bytes=1 << 20, fsync=False)
    assert len(q) == 3 and q.read(10) == new[2:]
    q.close()


def test_keys_come_back_with_their_records(tmp_path: Path) -> None:
    """Records appended with keys come back with them, packed (a block at a time), and
    as plain records; blocks with and without keys mix; a state taken inside a keyed
    block reopens there; every byte written is counted as read."""
    d = tmp_path / "q"
    q = DiskQueue(d, segment_bytes=400, buffer_bytes=150, fsync=False)
    q.extend([rec(i) for i in range(40)], keys(0, 40))
    q.extend([rec(i) for i in range(40, 45)])
    q.extend([rec(i) for i in range(45, 60)], keys(45, 15).view("<u8"))  # any dtype
    assert len(segments(d)) > 3
    got: list[bytes] = []
    got_keys: list[bytes | None] = []
    state = None
    while len(q):
        packed = q.read_packed(3)
        assert 1 <= len(packed) <= 3
        got += packed.records()
        got_keys += (
            [None] * len(packed) if packed.keys is None else [k.tobytes() for k in packed.keys]
        )
        if state is None:  # commit until one falls inside a block, then no more
            taken = q.commit()
            if taken["read_in_block"]:
                state, after = taken, len(got)
    assert got == [rec(i) for i in range(60)]
    assert got_keys == [key(i) if not 40 <= i < 45 else None for i in range(60)]
    assert q.bytes_read == q.bytes_written - HEADER_SIZE * len(segments(d))
    q.close()
    assert state is not None
    q = DiskQueue(d, state=state, segment_bytes=400, buffer_bytes=150, fsync=False)
    packed = q.read_packed(100)
    assert packed.records()[0] == rec(after) and packed.keys[0].tobytes() == key(after)
    assert q.read(100)[-1] == rec(59)
    q.close()


def test_a_packed_read_spans_blocks_of_one_key_width(tmp_path: Path) -> None:
    """read_packed takes records from consecutive blocks, up to where their keys change
    width (or from keys to none)."""
    q = DiskQueue(tmp_path / "q", fsync=False)
    for first in (0, 5, 10):
        q.extend([rec(i) for i in range(first, first + 5)], keys(first, 5))
    q.extend([rec(15), rec(16)])
    q.extend([rec(17)], keys(17, 1))
    packed = q.read_packed(12)
    assert packed.records() == [rec(i) for i in range(12)]
    assert [k.tobytes() for k in packed.keys] == [key(i) for i in range(12)]
    packed = q.read_packed(100)
    assert packed.records() == [rec(i) for i in range(12, 15)] and len(packed.keys) == 3
    packed = q.read_packed(100)
    assert packed.records() == [rec(15), rec(16)] and packed.keys is None
    assert q.read_packed(100).keys[0].tobytes() == key(17) and not len(q)
    q.close()


def test_packed_records_are_selected_and_appended_with_their_keys(tmp_path: Path) -> None:
    """What read_packed gives, selected by a mask, goes into another queue with
    extend_packed: the same records and keys, in order, whatever runs the mask has."""
    src = DiskQueue(tmp_path / "a", fsync=False)
    src.extend([rec(i) for i in range(50)], keys(0, 50))
    packed = src.read_packed(50)
    assert len(packed) == 50 and packed.records(np.array([3, 1])) == [rec(3), rec(1)]
    dst = DiskQueue(tmp_path / "b", segment_bytes=300, buffer_bytes=100, fsync=False)
    masks = [np.arange(50) % 3 != 1, np.zeros(50, bool), np.ones(50, bool), np.arange(50) >= 45]
    for mask in masks:
        dst.extend_packed(packed.select(mask))
    chosen = [i for mask in masks for i in np.flatnonzero(mask).tolist()]
    out: list[tuple[bytes, bytes]] = []
    while len(dst):
        part = dst.read_packed(1000)
        out += zip(part.records(), (k.tobytes() for k in part.keys))
    assert out == [(rec(i), key(i)) for i in chosen]
    plain = PackedRecords.of([b"ab", b"", b"c"])
    assert plain.records() == [b"ab", b"", b"c"] and plain.keys is None
    assert plain.select(np.array([True, False, True])).records() == [b"ab", b"c"]
    for q in (src, dst):
        q.close()


def test_keys_are_checked(tmp_path: Path) -> None:
    """Keys must be one a record, of 1 to 127 bytes; a damaged key fails its block's
    checksum."""
    d = tmp_path / "q"
    q = DiskQueue(d, fsync=False)
    with pytest.raises(ValueError, match="2 keys for 3 records"):
        q.extend([b"a", b"b", b"c"], keys(0, 2))
    with pytest.raises(ValueError, match="keys of 128 bytes"):
        q.extend([b"a"], np.zeros((1, 128), np.uint8))
    q.extend([b"first"], keys(0, 1))
    q.extend([b"second", b"third"], keys(1, 2))
    state = q.commit()
    q.close()
    path = d / segments(d)[0]
    data = bytearray(path.read_bytes())
    second_at = HEADER_SIZE + BLOCK_HEAD_SIZE + 4 + 8 + len(b"first")
    data[second_at + BLOCK_HEAD_SIZE + 8 + 3] ^= 0x01  # in the key of b"second"
    path.write_bytes(bytes(data))
    q = DiskQueue(d, state=state, fsync=False)
    assert q.read_packed(1).records() == [b"first"]
    with pytest.raises(DiskQueueCorruptError, match="checksum") as err:
        q.read_packed(5)
    assert err.value.offset == second_at
    q.close()


def test_a_version_2_queue_reopens_and_goes_on_with_keys(tmp_path: Path) -> None:
    """Blocks of a version-2 segment (no keys; the count in 31 bits) are still read; new
    blocks, keyed, go to a new segment."""
    d = tmp_path / "q"
    d.mkdir()
    head = struct.pack("<4sHxxQ", b"DQSG", 2, 0)
    old = [b"old-%d" % i for i in range(3)]
    table, data = struct.pack("<3I", *map(len, old)), b"".join(old)
    block_head = (1 << 31) | len(old)
    check = xxhash.xxh3_64_intdigest(table + data, block_head << 32 | len(data))
    block = struct.pack("<IIQ", block_head, len(data), check) + table + data
    (d / "0000000000.seg").write_bytes(head + struct.pack("<I", zlib.crc32(head)) + block)
    end = HEADER_SIZE + len(block)
    state = {
        "format": 2,
        "write": [0, end],
        "read": [0, HEADER_SIZE],
        "read_in_block": 0,
        "count": 3,
        "keep": 0,
        "bytes_written": end,
        "bytes_read": 0,
    }
    q = DiskQueue(d, state=state, fsync=False)
    q.extend([b"new"], keys(7, 1))
    assert len(segments(d)) == 2
    first = q.read_packed(10)
    assert first.records() == old and first.keys is None
    second = q.read_packed(10)
    assert second.records() == [b"new"] and second.keys[0].tobytes() == key(7)
    q.close()


def test_missing_or_truncated_committed_segment(tmp_path: Path) -> None:
    d = tmp_path / "q"
    q = DiskQueue(d, **SMALL)
    q.extend(rec(i) for i in range(50))
    state = q.commit()
    q.close()
    last = d / segments(d)[-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 3)
    with pytest.raises(DiskQueueCorruptError, match="truncated"):
        DiskQueue(d, state=state, **SMALL)
    (d / segments(d)[1]).unlink()
    with pytest.raises(DiskQueueCorruptError, match="missing"):
        DiskQueue(d, state=state, **SMALL)


def test_state_none_wipes_and_open_files_stay_constant(tmp_path: Path) -> None:
    d = tmp_path / "q"
    d.mkdir()
    (d / "junk").write_bytes(b"old")
    # Objects of earlier tests in this process that hold descriptors in reference
    # cycles: collected now, not by a collection in the middle of the count.
    gc.collect()
    fds_before = len(os.listdir("/proc/self/fd"))
    q = DiskQueue(d, **SMALL)
    assert not (d / "junk").exists()
    for i in range(200):
        q.append(rec(i))
        q.read(1) if i % 3 == 0 else None
        assert len(os.listdir("/proc/self/fd")) - fds_before <= 2
    q.close()
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_closed_queue_refuses_use(tmp_path: Path) -> None:
    q = DiskQueue(tmp_path / "q", **SMALL)
    q.close()
    q.close()
    with pytest.raises(ValueError, match="closed"):
        q.append(b"x")


CHILD = """
import json, os, sys, time
from pathlib import Path
from drumbeat.frontier.diskqueue import DiskQueue
directory, status = Path(sys.argv[1]), Path(sys.argv[2])
q = DiskQueue(directory, segment_bytes=4096, fsync=False)
appended = read = 0
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    q.extend(b"%d" % (appended + i) for i in range(97))
    appended += 97
    read += len(q.read(41))
    state = q.commit()
    tmp = status.with_suffix(".tmp")
    tmp.write_text(json.dumps({"state": state, "appended": appended, "read": read}))
    os.replace(tmp, status)
"""


def test_sigkill_while_appending_then_reopen_in_a_fresh_process(tmp_path: Path) -> None:
    d, status = tmp_path / "q", tmp_path / "status.json"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(d), str(status)])
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if status.exists() and json.loads(status.read_text())["appended"] >= 97 * 200:
                break
            time.sleep(0.02)
        else:
            pytest.fail("child made no progress")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    committed = json.loads(status.read_text())
    q = DiskQueue(d, state=committed["state"], segment_bytes=4096, fsync=False)
    assert len(q) == committed["appended"] - committed["read"]
    out = q.read(committed["appended"])
    assert out == [b"%d" % i for i in range(committed["read"], committed["appended"])]
    q.close()


def test_segments_closed_between_commits_are_fsynced_by_the_next_commit(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Not when they close (that held the crawl's loop): the commit fsyncs each of them,
    the open one and the directory, so a checkpoint can defer them all."""
    synced: list[int] = []
    fsync = os.fsync

    def recorded(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recorded)
    q = DiskQueue(tmp_path / "q", segment_bytes=200, buffer_bytes=64)
    q.extend([b"x" * 40 for _ in range(20)])
    segments = sorted((tmp_path / "q").glob("*.seg"))
    assert len(segments) >= 3 and synced == []
    state = q.commit()
    inodes = {p.stat().st_ino for p in segments} | {(tmp_path / "q").stat().st_ino}
    assert inodes <= set(synced)
    synced.clear()
    q.extend([b"y"])
    q.commit()
    assert len(synced) == 1  # only the open segment now
    q.close()
    again = DiskQueue(tmp_path / "q", state=state, segment_bytes=200, buffer_bytes=64)
    assert again.read(100) == [b"x" * 40] * 20
    again.close()
