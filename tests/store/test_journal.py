"""The journal's file format: entries read back as written; a torn tail is cut and never
replayed; corruption is an error naming the file."""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from drumbeat.store.journal import (
    MAGIC,
    JournalEntry,
    JournalError,
    JournalWriter,
    ReadReport,
    encode_entry,
    journal_files,
    journal_path,
    read_journal,
)


def _entry(i: int) -> JournalEntry:
    payloads = [f"http://s{i}.test/{j}\n1\nhttp://s{i}.test/".encode() for j in range(3)]
    return JournalEntry(
        url=f"http://s{i}.test/",
        status=None if i % 3 == 2 else 200,
        error="timeout" if i % 3 == 2 else None,
        fingerprints=np.arange(3, dtype=np.uint64).tobytes(),
        lengths=np.array([len(p) for p in payloads], dtype=np.uint32).tobytes(),
        payloads=b"".join(payloads),
        edge_source="s.test" if i % 2 else "",
        edge_keys=np.array([7], dtype=np.uint64).tobytes() if i % 2 else b"",
        edge_lengths=np.array([6], dtype=np.uint32).tobytes() if i % 2 else b"",
        edge_targets=b"t.test" if i % 2 else b"",
    )


def _read(e: JournalEntry) -> JournalEntry:
    """``e`` as a file of version 3 gives it back: without the hashes it leaves out."""
    return replace(e, fingerprints=b"", edge_keys=b"")


def _write(path: Path, records: list[list[JournalEntry]]) -> list[int]:
    """Write each list of entries as a record; return the file size after each."""
    writer = JournalWriter(path)
    sizes = []
    for entries in records:
        parts: list[bytes] = []
        for e in entries:
            found = (e.fingerprints, e.lengths, e.payloads) if e.fingerprints else None
            edges = (
                (e.edge_source, e.edge_keys, e.edge_lengths, e.edge_targets)
                if e.edge_keys
                else None
            )
            encode_entry(parts, e.url, e.status, e.error, found, edges)
        writer.append(parts)
        sizes.append(path.stat().st_size)
    writer.sync()
    writer.close()
    return sizes


def test_entries_read_back_as_written(tmp_path: Path) -> None:
    path = journal_path(tmp_path, 3)
    records = [[_entry(0), _entry(1)], [_entry(2)], [_entry(3), _entry(4), _entry(5)]]
    _write(path, records)
    report = ReadReport()
    assert list(read_journal(path, report)) == [_read(e) for r in records for e in r]
    assert report.records == 3 and report.torn_bytes == 0
    assert journal_files(tmp_path) == [(3, path)]


@pytest.mark.parametrize("cut", [1, 5, 8, 9, 20, -1])
def test_a_torn_tail_is_cut_and_never_replayed(tmp_path: Path, cut: int) -> None:
    path = journal_path(tmp_path, 1)
    sizes = _write(path, [[_entry(0)], [_entry(1)], [_entry(2), _entry(3)]])
    # Killed mid-write: only part of the last record reached the file.
    end = sizes[1] + cut if cut > 0 else sizes[2] + cut
    os.truncate(path, end)
    report = ReadReport()
    assert list(read_journal(path, report)) == [_read(_entry(0)), _read(_entry(1))]
    assert report.torn_bytes == end - sizes[1]
    assert path.stat().st_size == sizes[1]  # cut off the file
    # Appending after the cut reads back whole.
    _write(path, [[_entry(9)]])
    assert list(read_journal(path)) == [_read(_entry(i)) for i in (0, 1, 9)]


def test_a_garbled_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    """After a power loss the last record's length may be written and its bytes not."""
    path = journal_path(tmp_path, 1)
    sizes = _write(path, [[_entry(0)], [_entry(1)]])
    with open(path, "r+b") as f:
        f.seek(sizes[1] - 3)
        f.write(b"\0\0\0")
    report = ReadReport()
    assert list(read_journal(path, report)) == [_read(_entry(0))]
    assert report.torn_bytes == sizes[1] - sizes[0]


def test_a_journal_killed_while_created_is_cut(tmp_path: Path) -> None:
    path = journal_path(tmp_path, 1)
    path.write_bytes(MAGIC[:7])
    report = ReadReport()
    assert list(read_journal(path, report)) == []
    assert report.torn_bytes == 7 and path.stat().st_size == 0


def test_a_corrupt_record_before_good_ones_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = journal_path(tmp_path, 1)
    sizes = _write(path, [[_entry(0)], [_entry(1)], [_entry(2)]])
    with open(path, "r+b") as f:
        f.seek(sizes[0] + 12)
        f.write(b"\xff\xff")
    with pytest.raises(JournalError, match=str(path)) as e:
        list(read_journal(path))
    assert "checksum" in str(e.value)
    assert path.stat().st_size == sizes[2]  # nothing cut


def test_a_file_that_is_no_journal_is_an_error_naming_it(tmp_path: Path) -> None:
    path = journal_path(tmp_path, 1)
    path.write_bytes(b"something else entirely\n")
    with pytest.raises(JournalError, match=str(path)):
        list(read_journal(path))


def _old_file(path: Path, magic: bytes, body: bytes) -> None:
    """A file of one record of ``body``, as an older drumbeat wrote it."""
    deflated = zlib.compressobj(1, zlib.DEFLATED, -15)
    raw = deflated.compress(body) + deflated.flush()
    path.write_bytes(magic + struct.pack("<II", len(raw), zlib.crc32(raw)) + raw)


def test_a_version_2_file_still_reads_with_its_hashes(tmp_path: Path) -> None:
    path = journal_path(tmp_path, 1)
    fps, lens, pays = struct.pack("<Q", 11), struct.pack("<I", 4), b"u\n0\n"
    keys, elens = struct.pack("<Q", 22), struct.pack("<I", 6)
    header = struct.pack("<iIHIIIHIH", 200, 14, 0, 1, 4, 1, 6, 6, 0)
    body = header + b"http://c.test/" + fps + lens + pays + b"c.test" + keys + elens + b"d.test"
    _old_file(path, b"DRUMBEAT-JOURNAL 2\n", body)
    [c] = read_journal(path)
    assert (c.url, c.fingerprints, c.payloads, c.edge_keys, c.edge_targets) == (
        "http://c.test/",
        fps,
        pays,
        keys,
        b"d.test",
    )


def test_an_entry_carries_its_visit_and_a_version_1_file_still_reads(tmp_path: Path) -> None:
    path = journal_path(tmp_path, 1)
    writer = JournalWriter(path)
    parts: list[bytes] = []
    encode_entry(parts, "http://a.test/", 200, None, None, None, b"visit\x00bytes")
    encode_entry(parts, "http://b.test/", 304, None, None, None)
    writer.append(parts)
    writer.sync()
    writer.close()
    a, b = read_journal(path)
    assert (a.url, a.visit, b.url, b.visit) == (
        "http://a.test/",
        b"visit\x00bytes",
        "http://b.test/",
        b"",
    )

    # A file of version 1 (entries without a visit), as an older drumbeat wrote it.
    old = journal_path(tmp_path, 2)
    body = struct.pack("<iIHIIIHI", 200, 14, 0, 0, 0, 0, 0, 0) + b"http://c.test/"
    _old_file(old, b"DRUMBEAT-JOURNAL 1\n", body)
    [c] = read_journal(old)
    assert (c.url, c.status, c.visit) == ("http://c.test/", 200, b"")
