"""DRUM's durable state: ``STATE.json``, its typed contents, recovery and file collection.

The committed state is the :class:`Snapshot` (also the manifest :meth:`Drum.commit
<drumbeat.drum.repository.Drum.commit>` returns); ``STATE.json`` is a :class:`StateFile`
(see :mod:`drumbeat.drum.repository` for the directory layout). The TypedDicts only
describe the JSON: their key order is the order the code builds them in, which is the
order on disk, unchanged.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from drumbeat.drum.format import HEADER_SIZE, DrumCorruptError, DrumError, check_header
from drumbeat.drum.sizing import Sizing, plan
from drumbeat.store import durable

STATE = "STATE.json"
_SPARE_KINDS = ("a", "c")  # obsolete files of these kinds are kept to be overwritten
STATE_VERSION = 5  # 5: data files of format 6 (compressed arrival log)
_FILE_RE = re.compile(r"^([qacr])-(\d{4,8})(?:-(\d{4,8}))?\.drum$")


class Counters(TypedDict):
    """Counters since the repository was created (see :class:`DrumStats`)."""

    bytes_read: int
    bytes_written: int
    merges: int
    sort_s: float
    merge_s: float
    last_batch: int
    checked_bytes: int
    base_rewrites: int


class Run(TypedDict):
    """A sorted run: its generation (file ``c-GEN``) and, per bucket, its section."""

    gen: int
    offs: list[int]
    sizes: list[int]
    counts: list[int]


class ResultEntry(TypedDict):
    """A merged epoch whose results were not yet taken: its arrival log's valid length
    and tuple count, its result file's length per bucket, and whether it was merged
    from RAM (results in arrival order)."""

    epoch: int
    a: int
    an: int
    r: list[int]
    arrival: bool


class Live(TypedDict):
    """The snapshot fields that change while tuples are queued: the valid lengths and
    counts of an epoch's q files, the tuples spilled to them, the arrival log's valid
    length and tuple count."""

    q: list[int]
    qn: list[int]
    sn: int
    a: int
    an: int


class Snapshot(TypedDict):
    """A state of the repository; the committed ones are the manifests."""

    seq: int
    id: str
    epoch: int
    runs: list[Run]
    stored: int
    files: dict[str, int]  # generation -> size of its run file
    q: list[int]
    qn: list[int]
    sn: int
    a: int
    an: int
    results: list[ResultEntry]
    counters: Counters


class StateFile(TypedDict):
    """What ``STATE.json`` holds."""

    format: int
    value_dtype: Any  # numpy's dtype descr, as JSON
    buckets: int
    current: Snapshot
    commits: list[Snapshot]


def name(kind: str, a: int, b: int | None = None) -> str:
    return f"{kind}-{a:08d}.drum" if b is None else f"{kind}-{a:08d}-{b:04d}.drum"


def cache_file(gen: int) -> str:
    return f"c-{gen:08d}.drum"


def empty_live(k: int) -> Live:
    return {"q": [0] * k, "qn": [0] * k, "sn": 0, "a": 0, "an": 0}


def live_of(snap: Snapshot) -> Live:
    """A copy of the live fields of ``snap``."""
    return {
        "q": list(snap["q"]),
        "qn": list(snap["qn"]),
        "sn": snap["sn"],
        "a": snap["a"],
        "an": snap["an"],
    }


def store_live(snap: Snapshot, live: Live) -> None:
    """Copy the live fields into ``snap`` (its keys keep their places)."""
    snap["q"], snap["qn"] = list(live["q"]), list(live["qn"])
    snap["sn"], snap["a"], snap["an"] = live["sn"], live["a"], live["an"]


class DrumState:
    """The state of one repository directory and the files it names.

    Opening loads ``STATE.json`` (or creates it), picks the current snapshot or the
    commit of ``manifest``, and cuts pending files back to it. :meth:`write` replaces
    the file, :meth:`commit` makes the live fields a commit, :meth:`collect` deletes
    what no kept state names. ``dirty`` holds the files written since they were last
    fsynced, ``spares`` the obsolete files kept to be overwritten.
    """

    def __init__(
        self,
        directory: Path,
        value_dtype: np.dtype[Any],
        *,
        fsync: bool | str,
        ram_bytes: int,
        record_bytes: int,
        buckets: int | None,
        manifest: Mapping[str, Any] | None,
    ) -> None:
        self.directory = directory
        self.value_dtype = value_dtype
        self.fsync = bool(fsync)  # at commits
        self.fsync_rounds = fsync is True  # also in merge rounds and deliveries
        self.dirty: set[Path] = set()
        self.spares: dict[str, Path] = {}  # kind -> obsolete file kept for reuse
        state = self._load(buckets)
        self.sizing: Sizing = plan(
            ram_bytes, record_bytes, buckets if state is None else state["buckets"]
        )
        self.k = self.sizing.buckets
        if state is None:
            state = self._create()
        self.commits: list[Snapshot] = state["commits"]
        if manifest is not None:
            self.snap = self._select_manifest(manifest)
            self.commits = [c for c in self.commits if c["seq"] <= self.snap["seq"]]
        else:
            self.snap = state["current"]
        self.counters: Counters = self.snap["counters"].copy()
        self._recover()
        self.live = live_of(self.snap)

    @property
    def path(self) -> Path:
        return self.directory / STATE

    def file(self, kind: str, a: int, b: int | None = None) -> Path:
        """The path of the data file ``kind`` of epoch or generation ``a`` (bucket ``b``)."""
        return self.directory / name(kind, a, b)

    def _load(self, buckets: int | None) -> StateFile | None:
        """The directory's state, or None for a new repository."""
        path = self.path
        if not path.exists():
            if any(_FILE_RE.match(p.name) for p in self.directory.iterdir()):
                raise DrumCorruptError(path, "missing, but DRUM data files are present")
            return None
        raw = path.read_bytes()
        body, _, crc = raw.rstrip(b"\n").rpartition(b"\n")
        try:
            if int(crc, 16) != zlib.crc32(body):
                raise ValueError("checksum mismatch")
            state: StateFile = json.loads(body)
        except ValueError as exc:
            raise DrumCorruptError(path, f"unreadable state ({exc})") from None
        if state.get("format") != STATE_VERSION:
            raise DrumError(
                f"{path} is in DRUM state format {state.get('format')}, this drumbeat reads "
                f"only format {STATE_VERSION}: the directory was written by another version "
                "(there is no converter; start it anew)"
            )
        stored = np.dtype(_descr(state["value_dtype"]))
        if stored != self.value_dtype:
            raise ValueError(f"{self.directory} stores values of {stored}, not {self.value_dtype}")
        if buckets is not None and buckets != state["buckets"]:
            raise ValueError(f"{self.directory} has {state['buckets']} buckets, not {buckets}")
        return state

    def _create(self) -> StateFile:
        k = self.k
        self.snap = {
            "seq": 0,
            "id": "",
            "epoch": 1,
            "runs": [],
            "stored": 0,
            "files": {},
            "q": [0] * k,
            "qn": [0] * k,
            "sn": 0,
            "a": 0,
            "an": 0,
            "results": [],
            "counters": {
                "bytes_read": 0,
                "bytes_written": 0,
                "merges": 0,
                "sort_s": 0.0,
                "merge_s": 0.0,
                "last_batch": 0,
                "checked_bytes": 0,
                "base_rewrites": 0,
            },
        }
        self.commits = []
        self.counters = self.snap["counters"].copy()
        self.write(durable=True)
        return {
            "format": STATE_VERSION,
            "value_dtype": None,
            "buckets": k,
            "current": self.snap,
            "commits": [],
        }

    def write(self, durable: bool = False) -> None:
        """Replace STATE.json; fsynced if ``durable`` (commits) or rounds are synced too."""
        self.snap["counters"] = self.counters.copy()
        state: StateFile = {
            "format": STATE_VERSION,
            "value_dtype": np.lib.format.dtype_to_descr(self.value_dtype),
            "buckets": self.k,
            "current": self.snap,
            "commits": self.commits,
        }
        _write_state_file(self.path, state, self.fsync if durable else self.fsync_rounds)

    def commit(self) -> Snapshot:
        """Make the live fields part of a new commit, write it durably; return it."""
        snap = self.snap
        store_live(snap, self.live)
        snap["seq"] += 1
        snap["id"] = secrets.token_hex(8)
        snap["counters"] = self.counters.copy()
        manifest = copy.deepcopy(snap)
        self.commits = ([*self.commits, copy.deepcopy(snap)])[-2:]
        self.write(True)
        return manifest

    def sync_dirty(self) -> None:
        if self.fsync:
            for path in sorted(self.dirty):
                durable.fsync_path(path)
        self.dirty.clear()

    def _select_manifest(self, manifest: Mapping[str, Any]) -> Snapshot:
        for c in self.commits:
            if c["seq"] == manifest.get("seq") and c["id"] == manifest.get("id"):
                return copy.deepcopy(c)
        raise DrumError(
            f"manifest (commit {manifest.get('seq')}) is not one of the last two commits of "
            f"{self.directory}; its files are gone"
        )

    def _recover(self) -> None:
        """Cut pending files back to the snapshot and check that every file it names exists."""
        snap, e = self.snap, self.snap["epoch"]
        for b in range(self.k):
            _cut(self.file("q", e, b), snap["q"][b], b"q")
        for run in snap["runs"]:
            if str(run["gen"]) not in snap["files"]:
                raise DrumCorruptError(self.path, f"run {run['gen']} has no file")
        for gen, size in snap["files"].items():
            path = self.directory / cache_file(int(gen))
            check_header(path, b"c")
            if path.stat().st_size != size:
                raise DrumCorruptError(path, f"{path.stat().st_size} bytes, state says {size}")
        _cut(self.file("a", e), snap["a"], b"a")
        for entry in snap["results"]:
            ep = entry["epoch"]
            _need(self.file("a", ep), entry["a"], b"a")
            if entry["a"]:
                _need(self.file("r", ep), HEADER_SIZE + sum(entry["r"]), b"r")

    def collect(self) -> None:
        """Delete files that neither the current state nor a kept commit refers to."""
        keep: set[str] = {name("a", self.snap["epoch"])}
        keep.update(name("q", self.snap["epoch"], b) for b in range(self.k))
        for snap in [self.snap, *self.commits]:
            keep.update(_refs(snap, self.k))
        for path in self.directory.iterdir():
            if path in self.spares.values():  # also one kept earlier in this loop
                continue
            match = _FILE_RE.match(path.name)
            if (match and path.name not in keep) or path.name.endswith(".tmp"):
                kind = match.group(1) if match else ""
                spare = self.spares.get(kind)
                if kind in _SPARE_KINDS and (
                    spare is None or (kind == "c" and path.stat().st_size > spare.stat().st_size)
                ):
                    # Kept for the next file of its kind: overwriting a file costs no
                    # new pages and no freed blocks (unlinking a large cache is slow,
                    # and so are fresh page-cache pages on some VMs).
                    # Of obsolete runs the largest, an old base, is kept for the next base.
                    self.spares[kind] = path.with_name(f"spare-{kind}.tmp")
                    os.replace(path, self.spares[kind])
                else:
                    path.unlink(missing_ok=True)
                self.dirty.discard(path)

    def take_spare(self, kind: str) -> Path | None:
        """An obsolete file of ``kind`` to be renamed and overwritten, if one was kept."""
        return self.spares.pop(kind, None)


def _refs(snap: Snapshot, k: int) -> set[str]:
    e = snap["epoch"]
    names = {cache_file(int(g)) for g in snap["files"]}
    names.update(name("q", e, b) for b in range(k) if snap["q"][b])
    if snap["a"]:
        names.add(name("a", e))
    for entry in snap["results"]:
        names.add(name("a", entry["epoch"]))
        names.add(name("r", entry["epoch"]))
    return names


def _cut(path: Path, length: int, kind: bytes) -> None:
    """Truncate an append-only file to its recorded valid length (0: remove it)."""
    if not length:
        path.unlink(missing_ok=True)
        return
    _need(path, length, kind)
    with open(path, "r+b") as f:
        f.truncate(length)


def _need(path: Path, length: int, kind: bytes) -> None:
    if not length:
        return
    check_header(path, kind)
    size = path.stat().st_size
    if size < length:
        raise DrumCorruptError(path, f"truncated: {size} bytes, {length} recorded")


def _write_state_file(path: Path, state: StateFile, fsync: bool) -> None:
    body = json.dumps(state, separators=(",", ":")).encode()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(body + b"\n" + f"{zlib.crc32(body):08x}\n".encode())
        if fsync:
            f.flush()
            durable.fsync(f.fileno())
    if fsync:
        # New data files must be reachable before the state names them.
        durable.fsync_dir(path.parent)
    os.replace(tmp, path)
    if fsync:
        durable.fsync_dir(path.parent)


def _descr(d: Any) -> Any:
    """JSON turns the dtype descr's tuples into lists; numpy wants tuples back."""
    if isinstance(d, list):
        return [tuple(_descr(x) for x in item) if isinstance(item, list) else item for item in d]
    return d
