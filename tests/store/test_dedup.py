"""The content index: payload copies and near-duplicate fingerprints on disk (LMDB)."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from drumbeat.store.dedup import ContentIndex, table_masks, within


def _digest(i: int) -> str:
    return f"sha1:{i:016X}ABCDEFGHIJKLMNOP"


def test_payloads_are_found_once_added_and_the_first_stays(tmp_path: Path) -> None:
    with ContentIndex(tmp_path / "c", max_bytes=1 << 24) as index:
        assert index.find_payloads([_digest(1), _digest(2)]) == [None, None]
        assert index.add_payloads(
            [(_digest(1), "http://a.test/", "D1"), (_digest(2), "http://b.test/", "D2")]
        ) == [True, True]
        assert index.add_payloads([(_digest(2), "http://c.test/", "D3")]) == [False]
        assert index.find_payloads([_digest(2), _digest(3), _digest(1)]) == [
            ("http://b.test/", "D2"),
            None,
            ("http://a.test/", "D1"),
        ]
        assert index.stats().payload_copies == 2
    with ContentIndex(tmp_path / "c", max_bytes=1 << 24) as index:  # it persists
        assert index.find_payloads([_digest(1)]) == [("http://a.test/", "D1")]


def test_a_full_index_stops_growing_and_still_answers(tmp_path: Path) -> None:
    with ContentIndex(tmp_path / "c", max_bytes=1 << 20) as index:
        index.add_payloads([(_digest(0), "http://first.test/", "D")])
        long = "http://a.test/" + "x" * 1000
        for start in range(0, 4000, 100):
            index.add_payloads([(_digest(i), long, "D") for i in range(start + 1, start + 101)])
        assert index.stats().full
        assert index.find_payloads([_digest(0)]) == [("http://first.test/", "D")]
        assert index.add_payloads([(_digest(10**9), "http://new.test/", "D")]) == [False]
        assert index.find_payloads([_digest(10**9)]) == [None]
        assert index.near([(123456789, "http://n.test/")]) == [None]


def test_table_masks_find_every_fingerprint_within_the_distance() -> None:
    for blocks, k in [(4, 3), (5, 3), (6, 3), (4, 2)]:
        masks = table_masks(blocks, k)
        assert len(masks) == math.comb(blocks, k)
        assert all(bin(m).count("1") >= 64 // blocks * (blocks - k) for m in masks)
        rng = random.Random(blocks)
        for _ in range(200):
            a = rng.getrandbits(64)
            b = a
            for bit in rng.sample(range(64), rng.randint(0, k)):
                b ^= 1 << bit
            assert any((a ^ b) & m == 0 for m in masks)


def test_within_counts_bits() -> None:
    for extra in (0, 100):  # the small path and numpy's
        values = [0b0, 0b111, 0b1111, 1 << 63 | 1] + [(1 << 40) - 1] * extra
        candidates = np.array(values, dtype="<u8").tobytes()
        assert within(0, candidates, 3) == [0, 0b111, (1 << 63) | 1]
        assert within(0, candidates, 0) == [0]
        assert within(0, b"", 3) == []


def test_near_finds_the_earlier_page_and_stores_only_new_clusters(tmp_path: Path) -> None:
    rng = random.Random(3)
    base = [rng.getrandbits(64) for _ in range(2000)]
    with ContentIndex(tmp_path / "c", max_bytes=1 << 26) as index:
        assert index.near([(fp, f"http://h.test/{i}") for i, fp in enumerate(base)]) == [
            None
        ] * len(base)  # random fingerprints: ~32 bits apart
        queries = []
        for i in range(0, 2000, 10):
            fp = base[i]
            for bit in rng.sample(range(64), 3):
                fp ^= 1 << bit
            queries.append((fp, f"http://copy.test/{i}"))
        found = index.near(queries)
        assert found == [f"http://h.test/{i}" for i in range(0, 2000, 10)]
        far = base[0] ^ 0b1111  # 4 bits: not a near copy
        assert index.near([(far, "http://far.test/")]) == [None]
        assert index.near([(base[5], "http://h.test/5")]) == [None]  # the same page again


SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from drumbeat.store.dedup import ContentIndex
    path, me = Path(sys.argv[1]), sys.argv[2]
    new = 0
    with ContentIndex(path, max_bytes=1 << 26) as index:
        for start in range(0, 3000, 50):
            ids = range(start, start + 50)
            batch = [(f"sha1:{i:016X}ABCDEFGHIJKLMNOP", f"http://{me}.test/{i}", "D") for i in ids]
            new += sum(index.add_payloads(batch))
            prints = [(i * 0x9E3779B97F4A7C15 % 2**64, me) for i in ids]
            new += sum(r is None for r in index.near(prints))
    print(new)
    """
)


def test_two_processes_share_one_index(tmp_path: Path) -> None:
    """Each payload and fingerprint is new to exactly one of two processes writing the
    same ones at once (LMDB's write lock makes each batch one check-and-insert)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "c"), name],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    counts = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(counts) == 2 * 3000


def _rss_anon_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no RssAnon in /proc/self/status")


def test_the_process_memory_does_not_grow_with_the_index(tmp_path: Path) -> None:
    rng = random.Random(1)
    with ContentIndex(tmp_path / "c", max_bytes=1 << 30) as index:
        index.add_payloads([(_digest(0), "http://a.test/", "D")])
        index.near([(1, "http://a.test/")])
        before = _rss_anon_bytes()
        for start in range(0, 100_000, 1000):
            index.add_payloads(
                [
                    (_digest(i), f"http://h{i}.test/page", "2026-01-01T00:00:00Z")
                    for i in range(start, start + 1000)
                ]
            )
            index.near([(rng.getrandbits(64), f"http://h{i}.test/") for i in range(1000)])
        grown = _rss_anon_bytes() - before
        assert index.stats().file_bytes > 20 << 20  # the index is on disk
    assert grown < 16 << 20


def test_tables_of_another_layout_are_begun_again(tmp_path: Path) -> None:
    with ContentIndex(tmp_path / "c", max_bytes=1 << 24) as index:
        index.add_payloads([(_digest(1), "http://a.test/", "D")])
        assert index.near([(0xFFFF, "http://a.test/")]) == [None]
        assert index.near([(0xFFFE, "http://b.test/")]) == ["http://a.test/"]
    with ContentIndex(tmp_path / "c", max_bytes=1 << 24, blocks=5) as index:
        assert index.near([(0xFFFE, "http://b.test/")]) == [None]  # tables emptied
        assert index.find_payloads([_digest(1)]) == [("http://a.test/", "D")]  # kept
