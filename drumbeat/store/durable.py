"""Small helpers for crash-safe files.

Stores make their files durable with :func:`fsync` and :func:`fsync_dir`. A thread may
defer those calls (:func:`deferring_fsyncs`): each then only notes its file's filesystem,
and one ``syncfs`` of each such filesystem later (:meth:`DeferredSyncs.sync`, in any
thread) makes everything durable that the deferred calls would have. A checkpoint
commits its stores in the crawl's loop this way, and syncs in its writer thread before
the checkpoint goes live.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import numpy as np

_deferral = threading.local()  # .pending: the DeferredSyncs of this thread, if any


class DeferredSyncs:
    """The filesystems of the fsyncs deferred in one :func:`deferring_fsyncs` block, each
    held by a descriptor of one of its files."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}  # st_dev -> a descriptor on that filesystem

    def note(self, fd: int) -> None:
        """Remember the filesystem of ``fd`` (a duplicate descriptor keeps it reachable
        after the caller closes ``fd``)."""
        device = os.fstat(fd).st_dev
        if device not in self._fds:
            self._fds[device] = os.dup(fd)

    def __len__(self) -> int:
        return len(self._fds)

    def sync(self) -> None:
        """Write out and wait for every filesystem noted: what each deferred fsync would
        have made durable is durable. Raises OSError if a sync fails. Done only once."""
        try:
            for fd in self._fds.values():
                _sync_filesystem_of(fd, "a deferred fsync's filesystem")
        finally:
            self.close()

    def close(self) -> None:
        """Drop the descriptors without syncing."""
        fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            os.close(fd)


@contextmanager
def deferring_fsyncs() -> Iterator[DeferredSyncs]:
    """Within the block, :func:`fsync` and :func:`fsync_dir` in this thread (only) write
    nothing out: they note their filesystem in the yielded :class:`DeferredSyncs`, whose
    ``sync()`` the caller must run before relying on any of it being durable. Other
    threads (e.g. DRUM's background merges) still fsync. On an exception the notes are
    dropped."""
    if getattr(_deferral, "pending", None) is not None:
        raise RuntimeError("fsyncs are already deferred in this thread")
    pending = DeferredSyncs()
    _deferral.pending = pending
    try:
        yield pending
    except BaseException:
        pending.close()
        raise
    finally:
        _deferral.pending = None


def fsync(fd: int) -> None:
    """``os.fsync(fd)``, or, while this thread defers fsyncs, a note of its filesystem."""
    pending = getattr(_deferral, "pending", None)
    if pending is None:
        os.fsync(fd)
    else:
        pending.note(fd)


def fsync_dir(directory: Path) -> None:
    """Make creates and renames in ``directory`` durable (they live in the directory entry);
    deferred like :func:`fsync`."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    """:func:`fsync` of the file at ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def save_npz(
    path: Path, arrays: Mapping[str, Any], *, durable: bool = True, compressed: bool = False
) -> None:
    """Write ``arrays`` as the ``.npz`` file ``path``: under a temporary name, then renamed
    over it, so a crash leaves the old file or the new one whole; with ``durable``, the
    file and the rename fsynced (:func:`fsync`, :func:`fsync_dir`)."""
    tmp = path.with_name(path.name + ".tmp")
    # cast: numpy's stub lets a ** dict fill savez's allow_pickle flag too.
    named = cast("dict[str, Any]", dict(arrays))
    with open(tmp, "wb") as f:
        if compressed:
            np.savez_compressed(f, **named)
        else:
            np.savez(f, **named)
        if durable:
            f.flush()
            fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


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


def _sync_filesystem_of(fd: int, name: str) -> None:
    """``syncfs(fd)``; where libc has none, ``os.sync()`` (every filesystem)."""
    if _SYNCFS is None:
        os.sync()
    elif _SYNCFS(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs: {os.strerror(err)}", name)


def sync_filesystem(path: Path) -> None:
    """Write out the dirty data of every file on the filesystem that holds ``path``
    (Linux ``syncfs``; where libc has none, ``os.sync``: every filesystem), waiting for
    it. Done ahead of a batch of fsyncs, it leaves them little to write. Raises OSError
    when ``path`` cannot be opened or the sync fails."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _sync_filesystem_of(fd, str(path))
    finally:
        os.close(fd)


State_co = TypeVar("State_co", covariant=True)


class Durable(Protocol[State_co]):
    """The contract of drumbeat's stores (``Drum``, ``Beast``, ``DiskQueue``,
    ``RobotsWaitQueue``, ``RobotsStore``): what survives a crash, and how a store comes back.

    - :meth:`commit` makes everything done so far durable and returns the committed
      state: a JSON-able mapping (``State_co``, a TypedDict or ``dict[str, Any]`` per
      store) that the manager writes into its checkpoint as it is.
    - Reopening: the store's constructor takes that mapping back (``state=`` or
      ``manifest=``) and restores exactly that commit; without it, the store starts
      anew (or, for ``Drum``, at its latest durable state).
    - The mapping is the on-disk format of checkpoints already written: a store may
      add keys, never rename, drop or re-encode one (a format change needs a version
      field and a reader for the old one).
    """

    def commit(self) -> State_co:
        """Make the store's state durable; return it (JSON-able)."""
        ...
