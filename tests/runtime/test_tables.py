"""drumbeat.runtime.tables: large zeroed tables that take RAM only as they are used."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from drumbeat.runtime import allocator, tables


def test_zeros_are_writable_zeros_of_the_type() -> None:
    for length in (0, 5, tables.MAPPED_FROM_BYTES // 8 + 3):
        a = tables.zeros(length, np.uint64)
        assert a.dtype == np.uint64 and len(a) == length and not a.any()
        a[:] = 7
        assert int(a.sum()) == 7 * length
    big = tables.zeros(tables.MAPPED_FROM_BYTES, np.uint32)
    view = big.data  # BEAST's tables are read and written through memoryviews
    view[3] = 9
    assert big[3] == 9 and big.flags.writeable


def test_a_large_table_takes_no_ram_until_used() -> None:
    """Under the malloc drumbeat runs on (mimalloc clears a calloc'd block at once),
    256 MiB of zeros add only the pages written to the process's resident memory."""
    script = """
import numpy as np
from drumbeat.runtime import tables

def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20

before = resident_mib()
table = tables.zeros(1 << 25, np.uint64)
table[: 1 << 17] = 1  # 1 MiB written
print(resident_mib() - before)
"""
    env = allocator.preload_env(allocator.library("auto"), os.environ)
    grown = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert grown.returncode == 0, grown.stderr
    assert int(grown.stdout) < 32
