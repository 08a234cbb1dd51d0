"""Scope rules beyond ``--scope``: URL regexes, link depth, per-host and per-PLD caps and
a blocklist file (Heritrix's decide rules, Scrapy's allowed_domains and DEPTH_LIMIT).

Where each rule acts, and what a drop leaves behind:

* Links found (the manager's admission, before URL-seen: no disk work for them):
  ``max_depth`` (one test per page's batch of links: a page's links share a depth),
  ``exclude`` and ``include`` (searched in the normalized URL; exclude wins), the
  blocklist, and the hosts already at a cap. Each is counted as
  ``links_dropped.REASON`` (a link found on many pages counts each time; they are not
  written to the crawl log, which would repeat them as often).
* URLs about to be fetched (the dispatcher): the blocklist (so a block added to the file
  mid-crawl drops what is queued already) and the caps. Each is written to the crawl log
  with ``error`` = REASON and counted as ``dropped.REASON``.

Seeds are the operator's choice: the link rules do not apply to them (the blocklist and
the caps still do, at dispatch).

A crawl with none of these rules pays nothing per URL: ``Scope.per_link`` and
``Scope.at_dispatch`` are plain attributes the hot paths test once.
"""

from __future__ import annotations

import logging
import os
import re
import time
from array import array
from collections.abc import Callable, Iterable
from pathlib import Path

import xxhash

from drumbeat import urls
from drumbeat.settings import Settings, SettingsError

log = logging.getLogger("drumbeat.frontier.scope")

INCLUDE = "include"
EXCLUDE = "exclude"
MAX_DEPTH = "max_depth"
BLOCKLIST = "blocklist"
MAX_PAGES_PER_HOST = "max_pages_per_host"
MAX_PAGES_PER_PLD = "max_pages_per_pld"
MAX_BYTES_PER_HOST = "max_bytes_per_host"
# The reasons a scope rule drops a URL with (crawl log, counters, `drumbeat stats`).
REASONS = (
    INCLUDE,
    EXCLUDE,
    MAX_DEPTH,
    BLOCKLIST,
    MAX_PAGES_PER_HOST,
    MAX_PAGES_PER_PLD,
    MAX_BYTES_PER_HOST,
)
# Hosts whose PLD, or whose being at a cap, is remembered; cleared past this (bounded
# RAM: a cleared entry is worked out again from the sketch or the public suffix list).
HOST_CACHE_ENTRIES = 65_536
SKETCH_ROWS = 4
COUNTS_FILE = "scope_{}.bin"  # a cap's counts in a checkpoint's directory (save_counts)


class ScopeError(SettingsError):
    """A scope rule that cannot be used (a bad regex, an unreadable blocklist file)."""


def compile_any(patterns: Iterable[str], name: str) -> re.Pattern[str] | None:
    """One regex that matches where any of ``patterns`` does (one search per URL, not one
    per pattern), or None for none. A bad pattern is a ScopeError naming ``name``."""
    patterns = list(patterns)
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ScopeError(f"setting '{name}' (--{name}) has a bad regex {p!r}: {e}") from None
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


def check_settings(settings: Settings) -> None:
    """Raise ScopeError (one line) if the scope rules of ``settings`` cannot be used: a
    regex that does not compile, a blocklist file that cannot be read or parsed. For a
    command to call before it writes anything."""
    compile_any(settings.include, "include")
    compile_any(settings.exclude, "exclude")
    if settings.blocklist_file is not None:
        read_blocklist(settings.blocklist_file)


class Patterns:
    """Host, PLD and URL-regex patterns: what the control API's blocks
    (drumbeat.manager.controls.Blocks) and the blocklist file match URLs with.

    A host pattern matches that host name exactly; a PLD pattern every host of that
    pay-level domain; a regex is searched in the whole URL (Python ``re`` syntax).
    Call :meth:`compile` after changing ``hosts``, ``plds`` or ``regexes``."""

    def __init__(
        self, hosts: Iterable[str] = (), plds: Iterable[str] = (), regexes: Iterable[str] = ()
    ) -> None:
        self.hosts: set[str] = set(hosts)
        self.plds: set[str] = set(plds)
        self.regexes: list[str] = list(regexes)
        self._regex: re.Pattern[str] | None = None
        self._pld_matched: dict[str, bool] = {}
        self.compile()

    def __bool__(self) -> bool:
        return bool(self.hosts or self.plds or self.regexes)

    def compile(self) -> None:
        """The regexes as one alternation; the PLD answers remembered forgotten."""
        self._regex = (
            re.compile("|".join(f"(?:{r})" for r in self.regexes)) if self.regexes else None
        )
        self._pld_matched.clear()

    def as_dict(self) -> dict[str, list[str]]:
        return {"hosts": sorted(self.hosts), "plds": sorted(self.plds), "regexes": self.regexes}

    def host_blocked(self, host: str) -> bool:
        """The host, or its PLD, is matched."""
        if host in self.hosts:
            return True
        if not self.plds:
            return False
        hit = self._pld_matched.get(host)
        if hit is None:
            if len(self._pld_matched) >= HOST_CACHE_ENTRIES:
                self._pld_matched.clear()
            hit = self._pld_matched[host] = urls.pld(host) in self.plds
        return hit

    def url_blocked(self, url: str) -> bool:
        """A regex matches ``url``."""
        return self._regex is not None and self._regex.search(url) is not None


def read_blocklist(path: Path) -> Patterns:
    """Parse a blocklist file (UTF-8), one pattern a line:

    * ``re:REGEX`` a regex searched in the normalized URL (the rest of the line, as is);
    * ``host:NAME`` or ``pld:NAME`` a host name, or every host of a pay-level domain;
    * ``NAME`` a pay-level domain when NAME is one (``example.org``), else a host
      (``www.example.org``);
    * blank lines and lines starting with ``#`` are ignored, as is `` #...`` after a name.

    Raises ScopeError naming the file and line for what cannot be read or compiled."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScopeError(f"blocklist file {path}: cannot read it: {e}") from None
    found = Patterns()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("re:"):
            regex = line[3:]
            try:
                re.compile(regex)
            except re.error as e:
                raise ScopeError(
                    f"blocklist file {path}:{number}: bad regex {regex!r}: {e}"
                ) from None
            found.regexes.append(regex)
            continue
        kind, _, name = (
            line.partition(":") if line.startswith(("host:", "pld:")) else ("", "", line)
        )
        name = name.split("#", 1)[0].strip().lower().rstrip(".")
        if not name or any(c.isspace() or c in "/?" for c in name):
            raise ScopeError(
                f"blocklist file {path}:{number}: not a host, PLD or re:REGEX: {raw!r}"
            )
        if kind == "pld" or (not kind and urls.pld(name) == name):
            found.plds.add(name)
        else:
            found.hosts.add(name)
    found.compile()
    return found


class Blocklist:
    """The blocklist file's patterns, read again when the file changes (its mtime or size),
    looked at no more often than every ``check_s`` (one ``stat`` then, nothing per URL).
    A file that became unreadable or bad keeps the patterns read last (logged)."""

    def __init__(
        self, path: Path, *, check_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.check_s = check_s
        self.clock = clock
        self.patterns = read_blocklist(path)
        self._stamp = self._stat()
        self._next_check = clock() + check_s
        self.reloads = 0

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def maybe_reload(self) -> bool:
        """Read the file again if it changed and a check is due; True if the patterns did."""
        now = self.clock()
        if now < self._next_check:
            return False
        self._next_check = now + self.check_s
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.patterns = read_blocklist(self.path)
        except ScopeError as e:
            log.warning("%s; the blocklist read before stays in force", e)
            return False
        self.reloads += 1
        log.info("blocklist %s read again: %s", self.path, self.patterns.as_dict())
        return True


class CountSketch:
    """Counts per key in fixed RAM: a count-min sketch (Cormode and Muthukrishnan) with
    conservative update, ``rows`` rows of ``width`` counters (``typecode``: ``"I"`` 32-bit,
    ``"Q"`` 64-bit).

    Why a sketch: a crawl meets hosts without end (IRLbot: hundreds of millions), so an
    exact count per host would grow with the crawl; the scheduler's per-host state lives
    only while a host has URLs in RAM, and a table on disk would cost a DRUM round per
    check. A sketch never under-counts; it over-counts a key by at most e/width of the
    total counted, with probability 1 - e^-rows (conservative update only lowers that).
    An over-count stops a host early, never late: a cap is a ceiling."""

    def __init__(self, width: int, rows: int = SKETCH_ROWS, typecode: str = "I") -> None:
        self.width = width
        self._mask = width - 1 if width & (width - 1) == 0 else None
        self.rows = [array(typecode, bytes(array(typecode).itemsize * width)) for _ in range(rows)]

    def _slots(self, key: str) -> list[int]:
        # Double hashing (Kirsch and Mitzenmacher): two halves of one 64-bit hash give
        # every row's slot, as independent as separate hashes for this use.
        h = xxhash.xxh3_64_intdigest(key.encode("utf-8", "surrogatepass"))
        h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
        if self._mask is not None:
            return [(h1 + i * h2) & self._mask for i in range(len(self.rows))]
        return [(h1 + i * h2) % self.width for i in range(len(self.rows))]

    def add(self, key: str, n: int = 1) -> int:
        """Count ``n`` more for ``key``; its estimate after."""
        slots = self._slots(key)
        rows = self.rows
        new = min(row[s] for row, s in zip(rows, slots)) + n
        for row, s in zip(rows, slots):
            if row[s] < new:
                row[s] = new
        return new

    def get(self, key: str) -> int:
        return min(row[s] for row, s in zip(self.rows, self._slots(key)))

    def to_bytes(self) -> bytes:
        return b"".join(row.tobytes() for row in self.rows)

    def load(self, data: bytes) -> bool:
        """Take counts saved by :meth:`to_bytes`; False (counts unchanged) if their shape
        differs (the width setting changed)."""
        size = sum(len(row) * row.itemsize for row in self.rows)
        if len(data) != size:
            return False
        step = size // len(self.rows)
        for i, row in enumerate(self.rows):
            fresh = array(row.typecode)
            fresh.frombytes(data[i * step : (i + 1) * step])
            self.rows[i] = fresh
        return True


class Caps:
    """The page caps per host and per PLD and the byte cap per host, counted from fetch
    results (pages that got a response; bytes of their bodies) in CountSketches.

    ``capped``: hosts known to be at a cap, with the cap's reason; admission drops their
    links by this dict alone (one lookup per link). It is a cache, cleared when it holds
    HOST_CACHE_ENTRIES hosts: :meth:`reason` (at dispatch) asks the sketches again.
    With ``host_connections`` 1 a host's next page is dispatched after its last result
    is counted, so a host gets at most its cap; with k connections, at most k - 1 more.
    Pages fetched since the last checkpoint and replayed from the journal after a crash
    are not counted again."""

    def __init__(self, settings: Settings) -> None:
        s, w = settings, settings.scope_sketch_width
        self.sketches: dict[str, CountSketch] = {}
        # (reason, its sketch, the cap, counted per PLD, counting bytes)
        self._rules: list[tuple[str, CountSketch, int, bool, bool]] = []
        for reason, cap, typecode in (
            (MAX_PAGES_PER_HOST, s.max_pages_per_host, "I"),
            (MAX_PAGES_PER_PLD, s.max_pages_per_pld, "I"),
            (MAX_BYTES_PER_HOST, s.max_bytes_per_host, "Q"),
        ):
            if cap is not None:
                sketch = self.sketches[reason] = CountSketch(w, typecode=typecode)
                by_pld, of_bytes = reason == MAX_PAGES_PER_PLD, reason == MAX_BYTES_PER_HOST
                self._rules.append((reason, sketch, cap, by_pld, of_bytes))
        self.capped: dict[str, str] = {}
        self._plds: dict[str, str] = {}

    def _pld(self, host: str) -> str:
        pld = self._plds.get(host)
        if pld is None:
            if len(self._plds) >= HOST_CACHE_ENTRIES:
                self._plds.clear()
            pld = self._plds[host] = urls.pld(host)
        return pld

    def _mark(self, host: str, reason: str) -> str:
        if len(self.capped) >= HOST_CACHE_ENTRIES:
            self.capped.clear()
        self.capped[host] = reason
        return reason

    def count(self, host: str, body_bytes: int) -> None:
        """One page of ``host`` fetched, with ``body_bytes`` of body."""
        for reason, sketch, cap, by_pld, of_bytes in self._rules:
            key = self._pld(host) if by_pld else host
            if sketch.add(key, body_bytes if of_bytes else 1) >= cap:
                self._mark(host, reason)

    def reason(self, host: str) -> str | None:
        """Why ``host`` may fetch no more pages, or None."""
        known = self.capped.get(host)
        if known is not None:
            return known
        for reason, sketch, cap, by_pld, _ in self._rules:
            if sketch.get(self._pld(host) if by_pld else host) >= cap:
                return self._mark(host, reason)
        return None

    def load(self, directory: Path) -> None:
        """Take the counts a checkpoint saved (a cap new in this run starts from zero)."""
        for name, sketch in self.sketches.items():
            path = directory / COUNTS_FILE.format(name)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if not sketch.load(data):
                log.warning("%s: saved with another scope_sketch_width; counts start at 0", path)


class Scope:
    """The scope rules of ``settings`` (see the module docstring).

    ``per_link``: some rule looks at each link's URL (admission calls :meth:`link_reason`);
    ``at_dispatch``: the dispatcher calls :meth:`dispatch_reason` and the result handling
    :meth:`count`. Both False, and ``max_depth`` None, without rules."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> None:
        s = settings
        self.include = compile_any(s.include, "include")
        self.exclude = compile_any(s.exclude, "exclude")
        self.max_depth = s.max_depth
        self.blocklist = (
            None
            if s.blocklist_file is None
            else Blocklist(s.blocklist_file, check_s=s.blocklist_check_s, clock=clock)
        )
        capping = (s.max_pages_per_host, s.max_pages_per_pld, s.max_bytes_per_host)
        self.caps = Caps(s) if any(c is not None for c in capping) else None
        self.at_dispatch = self.blocklist is not None or self.caps is not None
        self.per_link = self.include is not None or self.exclude is not None or self.at_dispatch

    def link_reason(self, url: str) -> str | None:
        """Why a link to the normalized ``url`` is dropped before URL-seen, or None."""
        exclude, include = self.exclude, self.include
        if exclude is not None and exclude.search(url) is not None:
            return EXCLUDE
        if include is not None and include.search(url) is None:
            return INCLUDE
        if not self.at_dispatch:
            return None
        host = urls.host_of(url)
        if self.blocklist is not None:
            p = self.blocklist.patterns
            if p.host_blocked(host) or p.url_blocked(url):
                return BLOCKLIST
        return None if self.caps is None else self.caps.capped.get(host)

    def dispatch_reason(self, host: str, url: str) -> str | None:
        """Why the page ``url`` of ``host`` is not fetched, or None."""
        if self.blocklist is not None:
            p = self.blocklist.patterns
            if p.host_blocked(host) or p.url_blocked(url):
                return BLOCKLIST
        return None if self.caps is None else self.caps.reason(host)

    def host_reason(self, host: str) -> str | None:
        """Why no page of ``host`` is fetched now (the blocklist, a cap), or None."""
        if self.host_blocklisted(host):
            return BLOCKLIST
        return None if self.caps is None else self.caps.reason(host)

    def host_blocklisted(self, host: str) -> bool:
        """The blocklist names ``host`` or its PLD."""
        return self.blocklist is not None and self.blocklist.patterns.host_blocked(host)

    def count(self, host: str, body_bytes: int) -> None:
        """A page of ``host`` was fetched (it got a response)."""
        if self.caps is not None:
            self.caps.count(host, body_bytes)

    def tick(self) -> None:
        """Once per turn of the manager's loop: read the blocklist again if it changed."""
        if self.blocklist is not None:
            self.blocklist.maybe_reload()


def save_counts(directory: Path, counts: Iterable[tuple[str, bytes]]) -> None:
    """Write the caps' counts into a checkpoint's directory: for each (reason, bytes of
    CountSketch.to_bytes), ``scope_REASON.bin``: the sketch's rows back to back, counters
    in native byte order (Caps.load reads them)."""
    for name, data in counts:
        with open(directory / COUNTS_FILE.format(name), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
