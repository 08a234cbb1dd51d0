"""Which malloc drumbeat's processes run on.

A page's work allocates and frees many small objects: lexbor's DOM nodes, Python's
strings and bytes, libcurl's buffers, the WARC record. glibc's malloc is slow at that
pace. Measured on this project's 2-core machines (quick polite ``bench throughput``, curl
client, two A/B pairs): with mimalloc preloaded into every drumbeat process, pages/s
rose from 626 / 642 to 771 / 761 and CPU per page fell from 1.92 / 1.96 to
1.59 / 1.59 ms; peak RSS rose from 343 / 353 to 372 / 374 MiB.
The per-page work alone (WARC, link extraction, fingerprints) took 595 µs under
mimalloc, 614 µs under jemalloc and 745 µs under glibc.

A process's malloc is chosen when it starts, through ``LD_PRELOAD``. ``drumbeat crawl``
and ``drumbeat demo`` therefore execute themselves again, once, with the library
preloaded (:func:`reexec_if_needed`), and fetcher processes are started with it
(:func:`preload_env`). The library comes from the system (Debian: ``libmimalloc2.0``
or ``libjemalloc2``). If neither is installed, drumbeat runs on glibc's malloc and is
slower, with the same results. Only the allocator changes; no result does.

Both run the installed drumbeat, the one this process imported: the environment of
:func:`preload_env` turns on safe-path imports (``PYTHONSAFEPATH``) and the re-execution
passes ``-P``, since ``python -m`` would otherwise put the current directory first on the
import path, and a source checkout or anything else named ``drumbeat`` there would run
instead (or fail to import).
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import sys
from collections.abc import Mapping, Sequence

log = logging.getLogger("drumbeat.runtime.allocator")

ALLOCATORS = ("auto", "mimalloc", "jemalloc", "system")
# "auto" takes the first of these that is installed.
_PREFERENCE = ("mimalloc", "jemalloc")
_PACKAGES = {"mimalloc": "libmimalloc2.0", "jemalloc": "libjemalloc2"}
# Set in the environment of a process that was executed again for its allocator, so
# that it is never executed again (a library that cannot be preloaded is only warned
# about by the dynamic loader).
_REEXEC_MARK = "DRUMBEAT_ALLOCATOR_REEXEC"


class AllocatorMissing(RuntimeError):
    """The allocator a setting names is not installed."""


def library(choice: str) -> str | None:
    """The shared library to preload for the ``allocator`` setting ``choice``, or None
    for the system's malloc (``system``, or ``auto`` when none is installed).

    Raises AllocatorMissing when ``choice`` names an allocator that is not installed,
    and ValueError for an unknown one.
    """
    if choice not in ALLOCATORS:
        raise ValueError(f"unknown allocator {choice!r}; expected one of {', '.join(ALLOCATORS)}")
    if choice == "system":
        return None
    for name in _PREFERENCE if choice == "auto" else (choice,):
        found = ctypes.util.find_library(name)  # a soname such as libmimalloc.so.2
        if found:
            return found
    if choice == "auto":
        return None
    raise AllocatorMissing(
        f"allocator {choice!r} is not installed (Debian: apt-get install "
        f'{_PACKAGES[choice]}); use allocator = "auto" or "system"'
    )


def in_use() -> str:
    """The allocator this process runs on: ``mimalloc``, ``jemalloc`` or ``system``."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            mapped = maps.read()
    except OSError:
        return "system"
    for name in _PREFERENCE:
        if f"/lib{name}" in mapped:
            return name
    return "system"


def preload_env(lib: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``lib`` first in ``LD_PRELOAD`` and safe-path
    imports on: the environment of a drumbeat child process (see the module docstring)."""
    out = dict(os.environ if env is None else env)
    out["PYTHONSAFEPATH"] = "1"
    if lib is not None:
        others = [p for p in out.get("LD_PRELOAD", "").split() if p != lib]
        out["LD_PRELOAD"] = " ".join([lib, *others])
    return out


def reexec_if_needed(choice: str, argv: Sequence[str]) -> None:
    """Execute this program again as ``python -P -m drumbeat *argv`` with the allocator
    ``choice`` preloaded, unless it is already in use, is the system's, or this process
    is such a second execution. Returns only when nothing was executed."""
    lib = library(choice)
    if lib is None or os.environ.get(_REEXEC_MARK) or in_use() != "system":
        return
    env = preload_env(lib)
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-P", "-m", "drumbeat", *argv], env)
