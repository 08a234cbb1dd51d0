"""store.durable: fsyncs deferred in one thread to one syncfs of each filesystem."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from drumbeat.store import durable


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_deferred_fsyncs_note_each_filesystem_once_and_sync_it(tmp_path: Path) -> None:
    files = [tmp_path / f"f{i}" for i in range(3)]
    for f in files:
        f.write_bytes(b"data")
    # Objects of earlier tests in this process that hold descriptors in reference
    # cycles: collected now, not by a collection in the middle of the count.
    gc.collect()
    before = _open_fds()
    with durable.deferring_fsyncs() as pending:
        for f in files:
            durable.fsync_path(f)
        durable.fsync_dir(tmp_path)
        with open(files[0], "rb") as f:
            durable.fsync(f.fileno())
    assert len(pending) == 1  # one filesystem, one descriptor kept for its sync
    assert _open_fds() == before + 1
    pending.sync()
    assert len(pending) == 0 and _open_fds() == before
    durable.fsync_path(files[0])  # outside the block: a plain fsync, nothing noted
    assert len(pending) == 0


def test_only_the_deferring_thread_defers(tmp_path: Path) -> None:
    """DRUM's background merges run in other threads: their fsyncs still happen."""
    (tmp_path / "f").write_bytes(b"data")
    with durable.deferring_fsyncs() as pending:
        other = threading.Thread(target=durable.fsync_path, args=(tmp_path / "f",))
        other.start()
        other.join()
        assert len(pending) == 0
        durable.fsync_path(tmp_path / "f")
        assert len(pending) == 1
    pending.sync()


def test_an_error_in_the_block_drops_the_notes_and_nesting_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    # Objects of earlier tests in this process that hold descriptors in reference
    # cycles: collected now, not by a collection in the middle of the count.
    gc.collect()
    before = _open_fds()
    with pytest.raises(KeyError), durable.deferring_fsyncs() as pending:
        durable.fsync_path(tmp_path / "f")
        raise KeyError("boom")
    assert len(pending) == 0 and _open_fds() == before
    with durable.deferring_fsyncs(), pytest.raises(RuntimeError, match="already deferred"):
        with durable.deferring_fsyncs():
            pass
    with durable.deferring_fsyncs() as again:  # the refusal left this thread usable
        durable.fsync_path(tmp_path / "f")
    assert len(again) == 1
    again.sync()
