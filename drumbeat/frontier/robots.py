"""robots.txt rules per origin (scheme://host[:port]) on disk: IRLbot's RobotsCache and
RobotsRequested (§IV.C, Fig. 2), with expiry and RFC 9309 failure rules.

Outcomes of a robots.txt fetch (:meth:`RobotsStore.record`):

* 2xx: the group for the crawler's product token is selected (:func:`select_group`) and
  parsed with protego; garbage parses as "no rules" (allow all).
* 4xx: no usable robots.txt, everything allowed.
* 5xx or network failure: the origin is treated as fully disallowed and retried after
  ``retry_s``; after ``max_attempts`` failures in a row it is given up for good (the
  manager drops its URLs with a counted reason).
* :meth:`RobotsStore.record_refused`: DNS failed or the address is refused; the origin is
  disallowed until ``ttl_s`` has passed.

Storage, under ``directory``::

    cache/       DRUM RobotsCache: origin hash -> VALUE_DTYPE (check and update)
    requested/   DRUM RobotsRequested: origin hash, no value (check+update)
    rules.log    robots.txt bodies, append-only (format in :class:`RulesLog`)

RAM is fixed: the two DRUMs get ``drum_ram_bytes`` between them and an LRU of at most
``ram_entries`` parsed entries sits in front (with the store counts of as many origins,
see :class:`RobotsStore`). Only the LRU holds protego objects; an entry found on disk
re-reads its body from the rules log and is parsed again.

Durability follows the crawler's checkpoints: :meth:`RobotsStore.commit` returns a manifest
(both DRUM manifests, the rules log's length and the count of stores); reopening with the
last or the previous manifest gives exactly that state, and opening without one starts empty.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np
import xxhash
from protego import Protego

from drumbeat.drum import CHECK, AuxArray, Drum, DrumCorruptError, DrumError, Snapshot
from drumbeat.store import durable

ALLOW_ALL = "allow_all"
RULES = "rules"
UNAVAILABLE = "unavailable"
GIVEN_UP = "given_up"
REFUSED = "refused"  # the host's DNS failed or its address is refused; `text` holds the reason

MANIFEST_FORMAT = 2  # 2 adds "stores"; a format-1 manifest still opens (see _STAMPED)


class RobotsManifest(TypedDict):
    """A commit of :class:`RobotsStore` (JSON; checkpoints hold it as is)."""

    format: int  # MANIFEST_FORMAT, or 1
    rules_log_bytes: int  # the rules log's committed length
    stores: NotRequired[int]  # rules stored so far (format 2)
    cache: Snapshot  # the RobotsCache DRUM's manifest
    requested: Snapshot  # the RobotsRequested DRUM's manifest


# The RobotsCache value. No crawl delay: an entry is only usable parsed (allows() needs the
# rules), and the parse yields the delay too. State code 0 is never written.
VALUE_DTYPE = np.dtype(
    [
        ("state", "u1"),
        ("attempts", "<u4"),  # consecutive failures
        ("fetched_at", "<f8"),  # wall-clock seconds
        ("expires_at", "<f8"),
        ("text_at", "<u8"),  # offset of the body's record in rules.log (when text_len > 0)
        ("text_len", "<u4"),  # UTF-8 bytes of the body (0: no record, text "")
    ]
)
_CODES = {RULES: 1, ALLOW_ALL: 2, UNAVAILABLE: 3, GIVEN_UP: 4, REFUSED: 5}
_STATES = {code: state for state, code in _CODES.items()}
_TOKEN_LEN = struct.Struct("<I")
# A check's aux: token length (u32) | token | origin. With this bit set in the length, the
# store count at submission (u64) follows the length. Checks of a format-1 store, delivered
# again after reopening it, lack the count; their entries are never cached.
_STAMPED = 1 << 31
_STAMP = struct.Struct("<Q")


@dataclass(slots=True)
class RobotsEntry:
    origin: str
    state: str  # RULES | ALLOW_ALL | UNAVAILABLE | GIVEN_UP | REFUSED
    text: str  # the robots.txt body (RULES), the refusal reason (REFUSED), else ""
    fetched_at: float  # wall-clock seconds
    expires_at: float  # wall-clock seconds: re-request after this (retry time when UNAVAILABLE)
    attempts: int  # consecutive failures
    parsed: Protego | None = None  # the robots_agent's rules alone (select_group)

    def allows(self, url: str) -> bool:
        """Whether the rules of the store's robots_agent allow ``url`` (its group was
        chosen by product token when the entry was parsed)."""
        if self.state == ALLOW_ALL:
            return True
        if self.state != RULES or self.parsed is None:
            return False
        try:
            return bool(self.parsed.can_fetch(url, _ANY))
        except Exception:  # protego on hostile input: fail open like a missing robots.txt
            return True

    def crawl_delay(self) -> float | None:
        if self.state != RULES or self.parsed is None:
            return None
        try:
            delay = self.parsed.crawl_delay(_ANY)
            return float(delay) if delay is not None and float(delay) >= 0 else None
        except Exception:  # protego on hostile input
            return None


class RulesLogCorruptError(DrumCorruptError):
    """The rules log is truncated, not a rules log, or a record fails its checksum."""

    def __init__(self, path: Path, offset: int, problem: str) -> None:
        DrumError.__init__(self, f"corrupt robots rules log {path} at byte {offset}: {problem}")
        self.path = path
        self.offset = offset


class RulesLog:
    """Append-only file of robots.txt bodies, read back with one pread per body.

    Bytes, integers little-endian::

        header   8 bytes   b"DBRULES" + version byte (1)
        record*  key u64 (origin hash), length u32 (UTF-8 bytes of the body),
                 xxh3 u64 (XXH3-64 of the body), body

    The valid length is the one in the store's manifest; bytes past it (written after the
    last commit by a process that died) are cut off when the log is opened.
    """

    HEADER = b"DBRULES\x01"
    RECORD = struct.Struct("<QIQ")

    def __init__(self, path: Path, committed: int | None, fsync: bool) -> None:
        """``committed`` None: a new, empty log; else the length to restore."""
        self.path = path
        self._fsync = fsync
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if committed is None:
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, self.HEADER, 0)
                self.length = len(self.HEADER)
            else:
                size = os.fstat(self._fd).st_size
                if size < committed:
                    raise RulesLogCorruptError(
                        path, size, f"truncated: {size} bytes, manifest says {committed}"
                    )
                if os.pread(self._fd, len(self.HEADER), 0) != self.HEADER:
                    raise RulesLogCorruptError(path, 0, "not a drumbeat rules log (bad header)")
                # Safe: the DRUMs accepted the same commit and dropped any later one, so no
                # state that can still be opened refers to bytes past `committed`.
                os.ftruncate(self._fd, committed)
                self.length = committed
        except BaseException:
            os.close(self._fd)
            raise

    def append(self, key: int, body: bytes) -> int:
        """Write one body; returns the offset of its record."""
        at = self.length
        record = self.RECORD.pack(key, len(body), xxhash.xxh3_64_intdigest(body)) + body
        written = os.pwrite(self._fd, record, at)
        if written != len(record):
            raise OSError(f"short write to {self.path}: {written} of {len(record)} bytes")
        self.length = at + len(record)
        return at

    def read(self, key: int, at: int, length: int) -> bytes:
        """The body written by ``append(key, body)`` at ``at``, checked against its record."""
        want = self.RECORD.size + length
        data = os.pread(self._fd, want, at) if at + want <= self.length else b""
        if len(data) != want:
            raise RulesLogCorruptError(
                self.path, at, f"record of {want} bytes runs past the end ({self.length})"
            )
        rkey, rlen, digest = self.RECORD.unpack_from(data)
        body = data[self.RECORD.size :]
        if rkey != key or rlen != length:
            raise RulesLogCorruptError(self.path, at, "record header does not match the cache")
        if xxhash.xxh3_64_intdigest(body) != digest:
            raise RulesLogCorruptError(self.path, at, "checksum mismatch")
        return body

    def sync(self) -> None:
        if self._fsync:
            durable.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def origin_key(origin: str) -> int:
    return xxhash.xxh3_64_intdigest(origin.encode())


def _keys(origins: Sequence[str]) -> np.ndarray:
    return np.fromiter((origin_key(o) for o in origins), np.uint64, len(origins))


class RobotsStore:
    """RobotsCache (DRUM keyed by origin hash, RAM LRU in front) and RobotsRequested (DRUM
    check+update).

    Checks and requests only buffer; their answers come out of :meth:`take_checked` and
    :meth:`take_requested` after a merge round (:meth:`flush`, or when a DRUM bucket fills).
    Exhaust those iterators: DRUM counts a round as taken only then, and an interrupted
    round is delivered again. Answers of tuples submitted before a commit and not taken by
    then are part of that commit: after reopening they are delivered again.

    Consecutive failures (``attempts``) are counted on the LRU entry: once an origin's entry
    was evicted, the next failure counts as the first again. Retries stay bounded: at most
    ``max_attempts`` in a row while the entry stays in RAM, never more than one per
    ``retry_s``, and an origin being retried is in active use, so rarely the least recently
    used.

    A check's answer from disk is the origin's value when the check was submitted; it joins
    the LRU only if the origin was certainly not stored since (else a newer entry, evicted
    meanwhile, would be shadowed by the older one). The last store of up to ``ram_entries``
    origins is remembered to decide that; an older check is answered without caching.
    """

    def __init__(
        self,
        directory: Path,
        *,
        robots_agent: str,
        expiry_s: float,
        retry_s: float,
        max_attempts: int,
        ram_entries: int = 10_000,
        drum_ram_bytes: int = 4 << 20,
        manifest: RobotsManifest | None = None,
        clock: Callable[[], float] = time.time,
        fsync: bool | str = True,
    ) -> None:
        """``robots_agent``: the crawler's product token, whose group of each robots.txt
        applies (:func:`select_group`). ``manifest`` None wipes ``directory`` (state of a
        run that died before its first checkpoint) and starts empty; otherwise the state of
        that commit is restored."""
        if ram_entries < 1:
            raise ValueError(f"ram_entries must be at least 1, got {ram_entries}")
        self.directory = Path(directory)
        self.robots_agent = robots_agent
        self.expiry_s = expiry_s
        self.retry_s = retry_s
        self.max_attempts = max_attempts
        self.ram_entries = ram_entries
        self.clock = clock
        if manifest is None:
            if self.directory.exists():
                shutil.rmtree(self.directory)
        elif manifest.get("format") not in (1, MANIFEST_FORMAT):
            raise DrumError(
                f"robots manifest format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        # Cache records are ~5x the size of RobotsRequested's (42 vs 9 bytes).
        cache_ram = max(drum_ram_bytes * 3 // 4, 1 << 20)
        requested_ram = max(drum_ram_bytes - cache_ram, 1 << 20)
        self.cache = Drum(
            self.directory / "cache",
            value_dtype=VALUE_DTYPE,
            ram_bytes=cache_ram,
            fsync=fsync,
            manifest=None if manifest is None else manifest.get("cache"),
        )
        self.requested = Drum(
            self.directory / "requested",
            ram_bytes=requested_ram,
            fsync=fsync,
            manifest=None if manifest is None else manifest.get("requested"),
        )
        self._fsync = fsync is not False
        self.log = RulesLog(
            self.directory / "rules.log",
            None if manifest is None else int(manifest["rules_log_bytes"]),
            self._fsync,
        )
        self._dir_synced = manifest is not None
        self._lru: OrderedDict[str, RobotsEntry] = OrderedDict()
        # Stores are counted; _recent_stores holds the count after the last store of the
        # ram_entries origins stored most recently, so every store counted above
        # _stores_forgotten is in it.
        stores = 0 if manifest is None else manifest.get("stores", 0)
        self._stores = self._stores_forgotten = int(stores)
        self._recent_stores: OrderedDict[str, int] = OrderedDict()
        self._hits = self._misses = self._loaded = 0
        # Merge count of each DRUM when checks / requests were last submitted (None: none
        # since a flush); any later round merges them.
        self._check_mark: int | None = None
        self._request_mark: int | None = None

    # ------------------------------------------------------------------ RAM

    def get(self, origin: str) -> RobotsEntry | None:
        """The LRU's entry for ``origin`` (no I/O); may be expired, see :meth:`is_fresh`."""
        entry = self._lru.get(origin)
        if entry is None:
            self._misses += 1
            return None
        self._hits += 1
        self._lru.move_to_end(origin)
        return entry

    def peek(self, origin: str) -> RobotsEntry | None:
        """:meth:`get` without counting a hit or miss or moving the entry in the LRU:
        for a look at rules that is not a use of them (a URL that may be fetched later)."""
        return self._lru.get(origin)

    def origins_in_ram(self, state: str, text: str) -> list[str]:
        """The origins of the RAM entries in ``state`` with ``text`` (a refusal's reason)."""
        return [o for o, e in self._lru.items() if e.state == state and e.text == text]

    def is_fresh(self, entry: RobotsEntry) -> bool:
        """True until ``entry`` expires (UNAVAILABLE: until its retry time); GIVEN_UP always."""
        return entry.state == GIVEN_UP or entry.expires_at > self.clock()

    def _remember(self, entry: RobotsEntry) -> None:
        self._lru[entry.origin] = entry
        self._lru.move_to_end(entry.origin)
        while len(self._lru) > self.ram_entries:
            self._lru.popitem(last=False)

    # ------------------------------------------------------------------ RobotsCache

    def check(self, origins: Sequence[str], tokens: Sequence[bytes]) -> None:
        """Queue lookups of ``origins``; ``tokens[i]`` comes back with the answer for
        ``origins[i]`` from :meth:`take_checked`."""
        if len(origins) != len(tokens):
            raise ValueError(f"{len(tokens)} tokens for {len(origins)} origins")
        if not origins:
            return
        stamp = _STAMP.pack(self._stores)
        aux = AuxArray.of(
            [
                _TOKEN_LEN.pack(len(t) | _STAMPED) + stamp + t + o.encode()
                for o, t in zip(origins, tokens)
            ]
        )
        self.cache.check(_keys(origins), aux)
        self._check_mark = self.cache.stats().merges

    def take_checked(self) -> Iterator[tuple[bytes, str, RobotsEntry | None]]:
        """``(token, origin, entry)`` of every merged check, in submission order.

        ``entry`` is the LRU's when it holds the origin (a record() made after the check was
        queued included), else the origin's state on disk when the check was queued (which
        joins the LRU when no store came after it); None when it was not recorded by then.
        """
        for result in self.cache.take_results():
            idx = np.flatnonzero(result.ops == CHECK)
            if not len(idx):
                continue
            values = result.values[idx]
            for aux, key, unique, value in zip(
                result.aux.select(idx),
                result.keys[idx].tolist(),
                result.unique[idx].tolist(),
                values,
            ):
                (n,) = _TOKEN_LEN.unpack_from(aux)
                since, at = None, _TOKEN_LEN.size
                if n & _STAMPED:
                    n ^= _STAMPED
                    (since,) = _STAMP.unpack_from(aux, at)
                    at += _STAMP.size
                token, origin = aux[at : at + n], aux[at + n :].decode()
                entry = self._lru.get(origin)
                if entry is not None:
                    self._lru.move_to_end(origin)
                elif not unique:
                    entry = self._load(key, origin, value)
                    if self._not_stored_since(origin, since):
                        self._remember(entry)
                yield token, origin, entry

    def _not_stored_since(self, origin: str, since: int | None) -> bool:
        """True when ``origin`` was certainly not stored after the ``since``-th store."""
        if since is None or since < self._stores_forgotten:
            return False  # stores after `since` may have been forgotten
        return self._recent_stores.get(origin, 0) <= since

    def _load(self, key: int, origin: str, value: np.void) -> RobotsEntry:
        length = int(value["text_len"])
        text = (
            self.log.read(key, int(value["text_at"]), length).decode("utf-8", "surrogatepass")
            if length
            else ""
        )
        code = int(value["state"])
        if code not in _STATES:
            raise DrumCorruptError(self.cache.directory, f"robots state code {code} for {origin}")
        entry = RobotsEntry(
            origin,
            _STATES[code],
            text,
            float(value["fetched_at"]),
            float(value["expires_at"]),
            int(value["attempts"]),
        )
        if entry.state == RULES:
            entry.parsed = _parse(text, self.robots_agent)
            if entry.parsed is None:  # as record() would have decided
                entry.state = ALLOW_ALL
        self._loaded += 1
        return entry

    def record(
        self, origin: str, status: int | None, text: str | None, failures: int | None = None
    ) -> RobotsEntry:
        """Store the outcome of a robots.txt fetch (status None = no HTTP response).

        ``failures``: consecutive failures before this one, when the caller keeps them;
        otherwise they come from the LRU (see the class docstring).
        """
        now = self.clock()
        if status is not None and 200 <= status < 300:
            entry = RobotsEntry(origin, RULES, text or "", now, now + self.expiry_s, 0)
            entry.parsed = _parse(entry.text, self.robots_agent)
            if entry.parsed is None:
                entry.state = ALLOW_ALL
        elif status is not None and 400 <= status < 500:
            entry = RobotsEntry(origin, ALLOW_ALL, "", now, now + self.expiry_s, 0)
        else:  # 5xx, other odd statuses (1xx/3xx left after redirects), network errors
            if failures is None:
                previous = self._lru.get(origin)
                failures = previous.attempts if previous else 0
            attempts = failures + 1
            state = GIVEN_UP if attempts >= self.max_attempts else UNAVAILABLE
            entry = RobotsEntry(origin, state, "", now, now + self.retry_s, attempts)
        self._store(entry)
        return entry

    def record_refused(self, origin: str, reason: str, ttl_s: float) -> RobotsEntry:
        """Store that ``origin`` cannot be fetched (DNS failure, refused address) for ``ttl_s``."""
        now = self.clock()
        entry = RobotsEntry(origin, REFUSED, reason, now, now + ttl_s, 0)
        self._store(entry)
        return entry

    def _store(self, entry: RobotsEntry) -> None:
        key = origin_key(entry.origin)
        body = entry.text.encode("utf-8", "surrogatepass")
        value = np.zeros(1, VALUE_DTYPE)
        value["state"] = _CODES[entry.state]
        value["attempts"] = entry.attempts
        value["fetched_at"] = entry.fetched_at
        value["expires_at"] = entry.expires_at
        if body:
            value["text_at"] = self.log.append(key, body)
            value["text_len"] = len(body)
        self.cache.update(np.array([key], np.uint64), value)
        self._remember(entry)
        self._stores += 1
        self._recent_stores[entry.origin] = self._stores
        self._recent_stores.move_to_end(entry.origin)
        if len(self._recent_stores) > self.ram_entries:
            self._stores_forgotten = self._recent_stores.popitem(last=False)[1]

    # ------------------------------------------------------------------ RobotsRequested

    def request(self, origins: Sequence[str]) -> None:
        """Queue origins whose robots.txt is wanted; :meth:`take_requested` says which are new."""
        if origins:
            self.requested.check_update(_keys(origins), aux=AuxArray.from_strs(list(origins)))
            self._request_mark = self.requested.stats().merges

    def take_requested(self) -> Iterator[tuple[str, bool]]:
        """``(origin, new)`` of every merged request, in submission order; ``new`` only the
        first time an origin is requested in the crawl."""
        for result in self.requested.take_results():
            for origin, new in zip(result.aux.tolist(), result.unique.tolist()):
                yield origin.decode(), new

    # ------------------------------------------------------------------ rounds, durability

    @property
    def pending(self) -> bool:
        """Checks or requests were submitted and not merged yet (:meth:`flush` merges them)."""
        return (self._check_mark is not None and self.cache.stats().merges == self._check_mark) or (
            self._request_mark is not None and self.requested.stats().merges == self._request_mark
        )

    def flush(self) -> None:
        """Merge both DRUMs now; their answers become available to the take_* methods."""
        self.cache.flush()
        self.requested.flush()
        self._check_mark = self._request_mark = None

    def commit(self) -> RobotsManifest:
        """Durable point: everything recorded, checked and requested so far. Returns the
        JSON-able manifest to reopen with."""
        # The log is synced only here, even with fsync=True: the store is only ever reopened
        # at a commit, so bytes written after it are cut off anyway.
        self.log.sync()
        if self._fsync and not self._dir_synced:
            durable.fsync_dir(self.directory)  # rules.log's directory entry
            self._dir_synced = True
        return {
            "format": MANIFEST_FORMAT,
            "rules_log_bytes": self.log.length,
            "stores": self._stores,
            "cache": self.cache.commit(),
            "requested": self.requested.commit(),
        }

    def close(self) -> None:
        """Release the files; anything not committed is forgotten."""
        self.cache.close()
        self.requested.close()
        self.log.close()

    def stats(self) -> dict[str, Any]:
        """LRU size and get() hits/misses, entries loaded from disk, keys in each DRUM and
        the rules log's length in bytes."""
        return {
            "lru_entries": len(self._lru),
            "lru_hits": self._hits,
            "lru_misses": self._misses,
            "loaded_from_disk": self._loaded,
            "cache_keys": self.cache.stats().keys_stored,
            "requested_keys": self.requested.stats().keys_stored,
            "rules_log_bytes": self.log.length,
        }


# RFC 9309 §2.2.1 group selection. protego matches a group's name anywhere in the agent it
# is given (older releases as a plain substring, newer ones at a word's start, so
# "User-agent: drum" applies to "drumbeat"), so drumbeat selects the group itself and hands
# protego that group alone, as the one group for every agent (_ANY).
_ANY = "*"
# A user-agent line as protego reads one: "User-agent:", "useragent", "user agent", with or
# without the colon. Anything that starts so is taken as one, so that no line handed on to
# protego can open a group of its own.
_AGENT_LINE = re.compile(r"user(?:-|\s*)agent(?:\s*:|\s|$)\s*(.*)", re.I)
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")
_GLOBAL_AGENT = re.compile(r"\*(?:\s|$)")
# Site-wide lines (no part of a group, and they do not end a group's user-agent lines).
_SITE_WIDE = re.compile(r"(?:sitemaps?|site-map|host)(?:\s*:|\s)", re.I)


def select_group(text: str, robots_agent: str) -> str:
    """The rules of robots.txt ``text`` for the product token ``robots_agent``, as one
    ``User-agent: *`` group (RFC 9309 §2.2.1).

    A group applies when one of its user-agent lines starts with the token (letters, ``_``,
    ``-``; compared case-insensitively; ``drumbeat/1.0`` names ``drumbeat``). The rules of
    every such group are combined; when none names the token, those of the ``*`` groups
    are. A group starts at a user-agent line that follows a rule; rules before the first
    user-agent line belong to no group.
    """
    agent = robots_agent.lower()
    named: list[str] = []
    anyone: list[str] = []
    found_named = False
    group: list[bool] | None = None  # [names the agent, is "*"]; None before the first
    in_header = False  # the last group line was a user-agent line
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        agent_line = _AGENT_LINE.match(line)
        if agent_line is not None:
            if group is None or not in_header:
                group, in_header = [False, False], True
            value = agent_line.group(1).strip()
            token = _PRODUCT_TOKEN.match(value)
            if token is not None and token.group().lower() == agent:
                group[0] = found_named = True
            group[1] = group[1] or _GLOBAL_AGENT.match(value) is not None
        elif group is not None and _SITE_WIDE.match(line) is None:
            in_header = False
            if group[0]:
                named.append(line)
            if group[1]:
                anyone.append(line)
    return "\n".join([f"User-agent: {_ANY}", *(named if found_named else anyone)]) + "\n"


def _parse(text: str, robots_agent: str) -> Protego | None:
    try:
        return Protego.parse(select_group(text, robots_agent))
    except Exception:  # a robots.txt protego cannot read counts as no robots.txt
        return None


def robots_sitemaps(text: str, max_sitemaps: int) -> list[str]:
    """The first ``max_sitemaps`` sitemap URLs that robots.txt ``text`` names in its
    ``Sitemap:`` lines (site-wide lines: every group's), as written; protego reads them
    (most robots.txt name none: those are not parsed)."""
    lowered = text.lower()
    if "sitemap" not in lowered and "site-map" not in lowered:
        return []
    try:
        named = Protego.parse(text).sitemaps
        return [url for url, _ in zip(named, range(max_sitemaps))]
    except Exception:  # a robots.txt protego cannot read names no sitemap
        return []
