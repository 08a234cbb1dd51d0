"""What an operator steers in a running crawl: pause, a pages/s ceiling, blocks, and
checkpoint requests (Polybot's manager interface; Heritrix's pause and terminate).

The dispatcher and the loop consult a :class:`Controls`; a face (``drumbeat.web``) sets it.
The hot paths read two plain attributes, ``paused`` and ``blocking``, so a crawl nobody
steers pays one attribute test per dispatch and per URL dispatched, never a regex.

Blocks are durable: ``STATE/blocks.json`` (written atomically, read at start)::

    {"version": 1, "hosts": ["a.example"], "plds": ["spam.example"], "regexes": ["/cal/"]}

A host block matches that host name exactly; a PLD block every host of that pay-level
domain; a regex is searched in the whole URL (Python ``re`` syntax).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drumbeat.frontier.scope import Patterns

BLOCKS_NAME = "blocks.json"
BLOCKS_VERSION = 1
BLOCK_KINDS = ("host", "pld", "regex")
BLOCKED = "blocked"  # the reason blocked URLs are dropped with (crawl.log, counters)


class ControlError(ValueError):
    """A control request that cannot be applied (a bad regex, an unknown kind)."""


@dataclass(frozen=True, slots=True)
class ControlsStats:
    paused: bool
    pages_per_s: float | None
    blocks: dict[str, list[str]]
    checkpoint_requested: bool


class SpeedLimit:
    """A token bucket of page fetches: ``rate`` per second, at most one second's worth
    (and at least one fetch) saved up, so a second never sees much more than ``rate``."""

    def __init__(self, rate: float, now: float) -> None:
        if not rate > 0:
            raise ControlError(f"pages_per_s must be > 0, got {rate}")
        self.rate = rate
        self.burst = max(1.0, rate)
        self._tokens = 1.0
        self._at = now

    def available(self, now: float) -> int:
        """Fetches that may leave now."""
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return int(self._tokens)

    def take(self, n: int) -> None:
        self._tokens -= n

    def wait_s(self, now: float) -> float:
        """Seconds until the next fetch may leave (0: now)."""
        missing = 1.0 - min(self.burst, self._tokens + (now - self._at) * self.rate)
        return max(0.0, missing / self.rate)


class Blocks(Patterns):
    """Host, PLD and URL-regex blocks, saved in ``path`` on every change (matched as the
    blocklist file is: frontier.scope.Patterns)."""

    def __init__(self, path: Path | None) -> None:
        super().__init__()
        self.path = path
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ControlError(f"cannot read {path}: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != BLOCKS_VERSION:
            raise ControlError(f"{path}: not a version {BLOCKS_VERSION} blocks file")
        self.hosts = {str(h) for h in doc.get("hosts", [])}
        self.plds = {str(p) for p in doc.get("plds", [])}
        for r in doc.get("regexes", []):
            self._add_regex(str(r))
        self._changed(save=False)

    def add(self, kind: str, value: str) -> bool:
        """Block ``value`` (a host, a PLD or a regex); False if it was blocked already."""
        value = self._clean(kind, value)
        if kind == "host":
            new = value not in self.hosts
            self.hosts.add(value)
        elif kind == "pld":
            new = value not in self.plds
            self.plds.add(value)
        else:
            new = value not in self.regexes
            if new:
                self._add_regex(value)
        if new:
            self._changed()
        return new

    def remove(self, kind: str, value: str) -> bool:
        """Lift a block; False if there was none."""
        value = self._clean(kind, value)
        held: set[str] | list[str] = {"host": self.hosts, "pld": self.plds}.get(kind, self.regexes)
        if value not in held:
            return False
        held.remove(value)
        self._changed()
        return True

    @staticmethod
    def _clean(kind: str, value: str) -> str:
        if kind not in BLOCK_KINDS:
            raise ControlError(f"unknown block kind {kind!r} (host, pld or regex)")
        if not isinstance(value, str) or not value:
            raise ControlError(f"a {kind} block needs a non-empty string")
        return value if kind == "regex" else value.strip().lower().rstrip(".")

    def _add_regex(self, value: str) -> None:
        try:
            re.compile(value)
        except re.error as e:
            raise ControlError(f"bad regex {value!r}: {e}") from None
        self.regexes.append(value)

    def _changed(self, *, save: bool = True) -> None:
        self.compile()
        if save and self.path is not None:
            self._save(self.path)

    def _save(self, path: Path) -> None:
        doc = {"version": BLOCKS_VERSION, **self.as_dict()}
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


class Controls:
    """Pause, speed, blocks and checkpoint requests of a running crawl (a stop is the
    manager's own: Manager.request_stop).

    ``paused`` and ``blocking`` are plain attributes for the hot paths to test; change
    them only through the methods. ``on_change`` is called after every change (the
    manager's loop wakes up to apply it)."""

    def __init__(
        self, state_dir: Path | None = None, *, on_change: Callable[[], None] = lambda: None
    ) -> None:
        self.paused = False
        self.speed: SpeedLimit | None = None
        self.blocks = Blocks(None if state_dir is None else state_dir / BLOCKS_NAME)
        self.blocking = bool(self.blocks)
        self.checkpoint_requested = False
        self.on_change = on_change
        # Called after a host or PLD block is lifted (the manager expires the refusals
        # the block left in the robots cache).
        self.on_unblock: Callable[[], None] = lambda: None

    def pause(self) -> None:
        self.paused = True
        self.on_change()

    def resume(self) -> None:
        self.paused = False
        self.on_change()

    def set_speed(self, pages_per_s: float | None, now: float) -> None:
        """A ceiling on fetches dispatched per second, or None for none."""
        self.speed = None if pages_per_s is None else SpeedLimit(float(pages_per_s), now)
        self.on_change()

    def block(self, kind: str, value: str) -> bool:
        new = self.blocks.add(kind, value)
        self.blocking = bool(self.blocks)
        self.on_change()
        return new

    def unblock(self, kind: str, value: str) -> bool:
        gone = self.blocks.remove(kind, value)
        self.blocking = bool(self.blocks)
        if gone and kind != "regex":
            self.on_unblock()
        self.on_change()
        return gone

    def request_checkpoint(self) -> None:
        self.checkpoint_requested = True
        self.on_change()

    def checkpoint_started(self) -> None:
        """The checkpoint asked for is being made."""
        self.checkpoint_requested = False

    def stats(self) -> ControlsStats:
        return ControlsStats(
            paused=self.paused,
            pages_per_s=None if self.speed is None else self.speed.rate,
            blocks=self.blocks.as_dict(),
            checkpoint_requested=self.checkpoint_requested,
        )
