"""URL-seen: has this URL fingerprint been admitted to the crawl before?

:class:`URLSeen` is the interface the manager uses. :class:`MemoryURLSeen` is the
INTERIM implementation (a Python set, saved whole at each checkpoint): its RAM grows with
the crawl, ~60 bytes per URL. DRUM (issue 3) replaces it with a disk repository whose RAM
is fixed by configuration.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np


class URLSeen(Protocol):
    def check_update(self, fingerprints: Iterable[int]) -> list[bool]:
        """Mark every fingerprint seen; True where it was not seen before (in batch order).

        A fingerprint repeated inside one batch is new only at its first position.
        """

    def __len__(self) -> int: ...

    def save(self, directory: Path) -> None:
        """Make the current contents durable under ``directory`` (atomically)."""


class MemoryURLSeen:
    FILE = "urlseen.npy"

    def __init__(self, directory: Path | None = None) -> None:
        self._seen: set[int] = set()
        if directory is not None and (directory / self.FILE).exists():
            self._seen = set(np.load(directory / self.FILE).tolist())

    def check_update(self, fingerprints: Iterable[int]) -> list[bool]:
        seen = self._seen
        out = []
        for fp in fingerprints:
            if fp in seen:
                out.append(False)
            else:
                seen.add(fp)
                out.append(True)
        return out

    def __len__(self) -> int:
        return len(self._seen)

    def save(self, directory: Path) -> None:
        tmp = directory / (self.FILE + ".tmp")
        with open(tmp, "wb") as f:
            np.save(f, np.fromiter(self._seen, dtype=np.uint64, count=len(self._seen)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / self.FILE)
