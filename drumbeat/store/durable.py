"""Small helpers for crash-safe files."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make creates and renames in ``directory`` durable (they live in the directory entry)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` (Linux), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        return None
    syncfs.argtypes = [ctypes.c_int]
    syncfs.restype = ctypes.c_int
    return syncfs


_SYNCFS = _libc_syncfs()


def sync_filesystem(path: Path) -> None:
    """Write out the dirty data of every file on the filesystem that holds ``path``
    (Linux ``syncfs``; where libc has none, ``os.sync``: every filesystem), waiting for
    it. It makes nothing durable that callers rely on (they fsync their own files);
    done ahead of a batch of fsyncs, it leaves them little to write. Raises OSError
    when ``path`` cannot be opened or the sync fails."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS is None:
            os.sync()
        elif _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)
