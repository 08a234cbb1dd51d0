"""robots.txt rules per origin (scheme://host[:port]), with expiry and RFC 9309 failure rules.

* 2xx: the body is parsed with protego; garbage parses as "no rules" (allow all).
* 4xx: no usable robots.txt, everything allowed.
* 5xx or network failure: the origin is treated as fully disallowed and retried after
  ``retry_s``; after ``max_attempts`` failures in a row it is given up (the manager drops
  its URLs with a counted reason).

INTERIM: the cache lives in RAM and is saved whole at each checkpoint; DRUM's RobotsCache
(issue 3) puts it on disk with a small RAM cache in front.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from protego import Protego

ALLOW_ALL = "allow_all"
RULES = "rules"
UNAVAILABLE = "unavailable"
GIVEN_UP = "given_up"


@dataclass(slots=True)
class RobotsEntry:
    origin: str
    state: str  # RULES | ALLOW_ALL | UNAVAILABLE | GIVEN_UP
    text: str  # the robots.txt body kept for RULES (to re-parse after a restart)
    fetched_at: float  # wall-clock seconds
    expires_at: float  # wall-clock seconds: re-request after this (retry time when UNAVAILABLE)
    attempts: int  # consecutive failures
    parsed: Protego | None = None

    def allows(self, url: str, user_agent: str) -> bool:
        if self.state == ALLOW_ALL:
            return True
        if self.state != RULES or self.parsed is None:
            return False
        try:
            return bool(self.parsed.can_fetch(url, user_agent))
        except Exception:  # protego on hostile input: fail open like a missing robots.txt
            return True

    def crawl_delay(self, user_agent: str) -> float | None:
        if self.state != RULES or self.parsed is None:
            return None
        try:
            delay = self.parsed.crawl_delay(user_agent)
            return float(delay) if delay is not None and float(delay) >= 0 else None
        except Exception:  # protego on hostile input
            return None


class RobotsCache:
    FILE = "robots.json"

    def __init__(
        self,
        *,
        user_agent: str,
        expiry_s: float,
        retry_s: float,
        max_attempts: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.user_agent = user_agent
        self.expiry_s = expiry_s
        self.retry_s = retry_s
        self.max_attempts = max_attempts
        self.clock = clock
        self._entries: dict[str, RobotsEntry] = {}

    def get(self, origin: str) -> RobotsEntry | None:
        """The entry for ``origin``, or None when unknown or due for a (re-)request."""
        entry = self._entries.get(origin)
        if entry is None:
            return None
        if entry.state != GIVEN_UP and entry.expires_at <= self.clock():
            return None
        return entry

    def previous_attempts(self, origin: str) -> int:
        entry = self._entries.get(origin)
        return entry.attempts if entry else 0

    def record(self, origin: str, status: int | None, text: str | None) -> RobotsEntry:
        """Store the outcome of a robots.txt fetch (status None = no HTTP response)."""
        now = self.clock()
        if status is not None and 200 <= status < 300:
            entry = RobotsEntry(origin, RULES, text or "", now, now + self.expiry_s, 0)
            entry.parsed = _parse(entry.text)
            if entry.parsed is None:
                entry.state = ALLOW_ALL
        elif status is not None and 400 <= status < 500:
            entry = RobotsEntry(origin, ALLOW_ALL, "", now, now + self.expiry_s, 0)
        else:  # 5xx, other odd statuses (1xx/3xx left after redirects), network errors
            attempts = self.previous_attempts(origin) + 1
            state = GIVEN_UP if attempts >= self.max_attempts else UNAVAILABLE
            entry = RobotsEntry(origin, state, "", now, now + self.retry_s, attempts)
        self._entries[origin] = entry
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def save(self, directory: Path) -> None:
        rows = [
            [e.origin, e.state, e.text, e.fetched_at, e.expires_at, e.attempts]
            for e in self._entries.values()
        ]
        tmp = directory / (self.FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "entries": rows}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / self.FILE)

    def load(self, directory: Path) -> None:
        path = directory / self.FILE
        if not path.exists():
            return
        data = json.loads(path.read_text(encoding="utf-8"))
        for origin, state, text, fetched_at, expires_at, attempts in data["entries"]:
            entry = RobotsEntry(origin, state, text, fetched_at, expires_at, attempts)
            if state == RULES:
                entry.parsed = _parse(text)
            self._entries[origin] = entry


def _parse(text: str) -> Protego | None:
    try:
        return Protego.parse(text)
    except Exception:  # a robots.txt protego cannot read counts as no robots.txt
        return None
