"""Large tables of zeros that take RAM only as they are used.

A fixed-RAM structure sized by configuration (URL-seen's cache of recent fingerprints,
BEAST's budget tables) is allocated whole when a crawl starts. ``np.zeros`` takes it from
malloc's ``calloc``: glibc maps fresh pages there, which the kernel zeroes on first
touch, but mimalloc (drumbeat's malloc where installed, drumbeat.runtime.allocator)
clears the whole block at once. The crawl would then wait for that at every start and
hold all of it resident, however small the crawl. A table mapped from the kernel
directly starts as untouched zero pages under any malloc.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

# Smaller tables come from np.zeros: a mapping takes whole pages and a system call.
MAPPED_FROM_BYTES = 1 << 20


def zeros(length: int, dtype: DTypeLike) -> np.ndarray[Any, Any]:
    """A writable array of ``length`` zeros of ``dtype``; from ``MAPPED_FROM_BYTES`` on,
    in anonymous memory that the kernel zeroes page by page as it is first touched."""
    kind = np.dtype(dtype)
    size = length * kind.itemsize
    if size < MAPPED_FROM_BYTES:
        return np.zeros(length, kind)
    return np.frombuffer(mmap.mmap(-1, size), kind)
