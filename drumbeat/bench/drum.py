"""``drumbeat bench drum``: URLseen-like check+update against a Python set, SQLite, LMDB, RocksDB.

Workload (IRLbot's URLseen): ``--keys`` keys are stored first (load phase,
untimed, and its dirty pages written back before the timer starts; the databases
are loaded in key order, their fastest way), then batches
of URLs are checked and inserted (measure phase, timed):
each batch is 11 % new URLs and 89 % repeats of stored ones (p = 0.11), every
URL carries its ~70-byte text as aux. drumbeat reports per URL whether it was
new, in arrival order, with its text; the peers do what they need for the same
answer (SQLite: ``INSERT OR IGNORE`` per batch, which does not even report the
per-URL answer). Each contender runs in its own process so its peak RSS
(VmHWM, reset after the load phase) is its own, and each is given ``--ram`` where it has a knob.

``--quick``: 10 M keys for drumbeat and the Python set; SQLite, LMDB and
RocksDB run on 1 M keys and their ratio is per URL (say so in the output).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np

from drumbeat.drum import AuxArray, Drum, predicted_alpha
from drumbeat.drum.sizing import WORK_BYTES

P_UNIQUE = 0.11
BATCH = 1_000_000
SET_BYTES_PER_KEY = 150  # peak RSS per key incl. the batch lists (measured)
PEERS = ("drumbeat", "set", "sqlite", "lmdb", "rocksdb")


def keys_of(ids: np.ndarray) -> np.ndarray:
    """splitmix64: distinct ids -> well spread distinct 64-bit keys."""
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def urls_of(ids: np.ndarray) -> list[bytes]:
    return [
        b"https://www.site%05d.example.com/articles/2009/page-%012d.html" % (i % 99991, i)
        for i in ids.tolist()
    ]


def load_batches(stored: int) -> Iterator[np.ndarray]:
    for start in range(0, stored, BATCH):
        yield np.arange(start, min(stored, start + BATCH), dtype=np.int64)


def sorted_load_keys(stored: int, signed: bool = False) -> Iterator[list[int]]:
    """The stored keys in ascending order, in batches: the fastest way to load a
    B-tree or an LSM tree (appends only), so the databases' untimed load phase
    takes minutes rather than hours at 100 M keys. ``signed``: as int64 (SQLite's
    INTEGER PRIMARY KEY), else as uint64 (big-endian bytes sort the same way)."""
    keys = keys_of(np.arange(stored, dtype=np.int64))
    if signed:
        keys = keys.view(np.int64)
    keys.sort()
    for start in range(0, stored, BATCH):
        yield keys[start : start + BATCH].tolist()


def measure_batches(stored: int, measure: int, seed: int = 1) -> Iterator[np.ndarray]:
    """Batches of ids: 11 % never seen (next ids), 89 % drawn from those seen so far."""
    rng = np.random.default_rng(seed)
    next_id = stored
    done = 0
    while done < measure:
        n = min(BATCH, measure - done)
        new = int(n * P_UNIQUE)
        ids = np.concatenate([np.arange(next_id, next_id + new), rng.integers(0, next_id, n - new)])
        rng.shuffle(ids)
        next_id += new
        done += n
        yield ids


# ------------------------------------------------------------------ contenders
# Each returns {"urls_per_s", "unique", "notes", ...} for the measure phase.


FSYNC_MODES: dict[str, bool | str] = {"round": True, "commit": "commit"}
# How drumbeat is handed the URLs: one (blob, offsets) AuxArray the caller built
# outside the timer, as the manager's URL-seen (urlseen.encode_payloads) and pldgraph
# do (default), or a list of bytes, joined inside the timed call.
AUX_FORMS = ("blob", "list")


def run_drumbeat(
    work: Path,
    ram: int,
    stored: int,
    measure: int,
    fsync: str = "round",
    aux_form: str = "blob",
    compress: str = "on",
) -> dict[str, Any]:
    drum = Drum(work, ram_bytes=ram, fsync=FSYNC_MODES[fsync], compress_log=compress == "on")
    _load_drum(drum, stored)
    _loaded()
    before = drum.stats()
    io0, cpu0 = _proc_io(), time.process_time()
    unique, submit_s, flush_s, deliver_s = _measure_drum(drum, stored, measure, aux_form)
    elapsed = submit_s + flush_s + deliver_s
    io1, cpu1 = _proc_io(), time.process_time()
    after = drum.stats()
    moved = after.bytes_read + after.bytes_written - before.bytes_read - before.bytes_written
    checked = after.checked_bytes - before.checked_bytes
    b = checked / measure
    return {
        "urls_per_s": measure / elapsed,
        "unique": unique,
        "alpha": moved / checked,
        "alpha_theorem2": predicted_alpha(
            stored=stored,
            checked=measure,
            unique=P_UNIQUE,
            url_bytes=b,
            ram_bytes=ram,
            buffer_bytes=drum.sizing.buffer_bytes,
            pointer_bytes=WORK_BYTES,
        ),
        "url_bytes": b,
        "buckets": drum.sizing.buckets,
        "merges": after.merges - before.merges,
        "base_rewrites": after.base_rewrites - before.base_rewrites,
        "runs": after.runs,
        "sort_s": after.sort_s - before.sort_s,
        "merge_s": after.merge_s - before.merge_s,
        # Where the measured time went: check_update calls (their merge rounds
        # included), the final flush's round, reading results back; CPU seconds of
        # the process; bytes the process wrote to / read from the disk (/proc/self/io).
        "submit_s": submit_s,
        "flush_s": flush_s,
        "deliver_s": deliver_s,
        "cpu_s": cpu1 - cpu0,
        "disk_write_bytes_per_url": (io1["write_bytes"] - io0["write_bytes"]) / measure,
        "disk_read_bytes_per_url": (io1["read_bytes"] - io0["read_bytes"]) / measure,
        "notes": ("" if fsync == "round" else f"fsync={fsync}: no commit is timed; ")
        + ("" if compress == "on" else "arrival log not compressed; ")
        + (
            "aux as a list of bytes, joined in the timed call"
            if aux_form == "list"
            else "aux as one AuxArray, built untimed (as URL-seen's caller does)"
        ),
    }


def _load_drum(drum: Drum, stored: int) -> None:
    """The untimed load phase: store keys 0..stored-1 and flush them to disk."""
    for ids in load_batches(stored):
        drum.check_update(keys_of(ids))
        for _ in drum.take_results():
            pass
    drum.flush()
    for _ in drum.take_results():
        pass


def _measure_drum(
    drum: Drum, stored: int, measure: int, aux_form: str
) -> tuple[int, float, float, float]:
    """The timed phase: the new URLs among ``measure`` checked, and the seconds spent in
    check_update calls (their merge rounds included), the final flush and reading the
    results back. The URLs and their aux are built outside the timer."""
    unique = 0
    submit_s = deliver_s = 0.0
    for ids in measure_batches(stored, measure):
        keys, urls = keys_of(ids), urls_of(ids)
        aux = urls if aux_form == "list" else AuxArray.of(urls)
        t0 = time.perf_counter()
        drum.check_update(keys, aux=aux)
        t1 = time.perf_counter()
        for r in drum.take_results():
            unique += int(r.unique.sum())
        submit_s += t1 - t0
        deliver_s += time.perf_counter() - t1
    t0 = time.perf_counter()
    drum.flush()
    t1 = time.perf_counter()
    for r in drum.take_results():
        unique += int(r.unique.sum())
    flush_s = t1 - t0
    deliver_s += time.perf_counter() - t1
    return unique, submit_s, flush_s, deliver_s


def run_set(work: Path, ram: int, stored: int, measure: int) -> dict[str, Any]:
    seen: set[int] = set()
    for ids in load_batches(stored):
        seen.update(keys_of(ids).tolist())
    unique = 0
    elapsed = 0.0
    for ids in measure_batches(stored, measure):
        keys, urls = keys_of(ids).tolist(), urls_of(ids)
        t0 = time.perf_counter()
        new = []
        for key, url in zip(keys, urls):
            if key not in seen:
                seen.add(key)
                new.append(url)
        unique += len(new)
        elapsed += time.perf_counter() - t0
    return {"urls_per_s": measure / elapsed, "unique": unique, "notes": ""}


def run_sqlite(work: Path, ram: int, stored: int, measure: int) -> dict[str, Any]:
    db = sqlite3.connect(work / "seen.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(f"PRAGMA cache_size=-{ram >> 10}")  # negative: KiB
    db.execute("CREATE TABLE seen (id INTEGER PRIMARY KEY)")
    for keys in sorted_load_keys(stored, signed=True):
        with db:
            db.executemany("INSERT INTO seen VALUES (?)", ((k,) for k in keys))
    _loaded()
    unique = 0
    elapsed = 0.0
    for ids in measure_batches(stored, measure):
        keys = keys_of(ids).view(np.int64).tolist()
        urls_of(ids)
        t0 = time.perf_counter()
        before = db.total_changes
        with db:
            db.executemany("INSERT OR IGNORE INTO seen VALUES (?)", ((k,) for k in keys))
        unique += db.total_changes - before
        elapsed += time.perf_counter() - t0
    db.close()
    return {
        "urls_per_s": measure / elapsed,
        "unique": unique,
        "notes": "INSERT OR IGNORE per batch: no per-URL answer",
    }


def run_lmdb(work: Path, ram: int, stored: int, measure: int) -> dict[str, Any]:
    import lmdb

    env = lmdb.open(str(work / "seen.lmdb"), map_size=1 << 40, sync=False, writemap=True)
    for keys in sorted_load_keys(stored):
        with env.begin(write=True) as txn:
            txn.cursor().putmulti(((k.to_bytes(8, "big"), b"") for k in keys), append=True)
    _loaded()
    unique = 0
    elapsed = 0.0
    for ids in measure_batches(stored, measure):
        keys, urls = keys_of(ids).tolist(), urls_of(ids)
        t0 = time.perf_counter()
        new = []
        with env.begin(write=True) as txn:
            for key, url in zip(keys, urls):
                if txn.put(key.to_bytes(8, "big"), b"", overwrite=False):
                    new.append(url)
        unique += len(new)
        elapsed += time.perf_counter() - t0
    env.close()
    return {
        "urls_per_s": measure / elapsed,
        "unique": unique,
        "notes": "no RAM knob (mmap, OS page cache)",
    }


def run_rocksdb(work: Path, ram: int, stored: int, measure: int) -> dict[str, Any]:
    from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch

    opts = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(ram // 2))
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(ram // 4)
    db = Rdict(str(work / "seen.rocksdb"), opts)
    for loaded in sorted_load_keys(stored):
        wb = WriteBatch(raw_mode=True)
        for k in loaded:
            wb.put(k.to_bytes(8, "big"), b"")
        db.write(wb)
    _loaded()
    unique = 0
    elapsed = 0.0
    for ids in measure_batches(stored, measure):
        keys, urls = [k.to_bytes(8, "big") for k in keys_of(ids).tolist()], urls_of(ids)
        t0 = time.perf_counter()
        found = cast(list[bytes | None], db.get(keys))  # its stubs say one value
        wb = WriteBatch(raw_mode=True)
        batch_new: set[bytes] = set()
        new = []
        for key, hit, url in zip(keys, found, urls):
            if hit is None and key not in batch_new:
                batch_new.add(key)
                wb.put(key, b"")
                new.append(url)
        db.write(wb)
        unique += len(new)
        elapsed += time.perf_counter() - t0
    db.close()
    return {"urls_per_s": measure / elapsed, "unique": unique, "notes": "multi-get + write batch"}


RUNNERS: dict[str, Callable[[Path, int, int, int], dict]] = {
    "drumbeat": run_drumbeat,
    "set": run_set,
    "sqlite": run_sqlite,
    "lmdb": run_lmdb,
    "rocksdb": run_rocksdb,
}
MODULES = {"lmdb": "lmdb", "rocksdb": "rocksdict"}


def _loaded() -> None:
    """End of the load phase: dirty pages written back, and the peak RSS counter reset
    (Linux clear_refs 5), so that the peak reported is the measure phase's, not that of
    the bench's own arrays of 100 M keys built to load the store."""
    os.sync()
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _proc_io() -> dict[str, int]:
    """This process's I/O counters (Linux /proc/self/io; zeros elsewhere)."""
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:
        return {"write_bytes": 0, "read_bytes": 0}
    return {k: int(v) for k, v in (line.split(": ") for line in lines)}


def _vmhwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    return 0


def _disk_bytes(path: Path) -> int:
    """Allocated bytes (LMDB's map file is sparse)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def run_peer(
    name: str,
    work: Path,
    ram: int,
    stored: int,
    measure: int,
    drum_fsync: str = "round",
    drum_aux: str = "blob",
    drum_compress: str = "on",
) -> dict[str, Any]:
    """Run one contender in a fresh process; its peak RSS is its own."""
    work.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "drumbeat.bench.drum",
        "--peer",
        name,
        "--dir",
        str(work),
        "--ram",
        str(ram),
        "--keys",
        str(stored),
        "--measure",
        str(measure),
        "--drum-fsync",
        drum_fsync,
        "--drum-aux",
        drum_aux,
        "--drum-compress",
        drum_compress,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["disk_bytes"] = _disk_bytes(work)
    return out


# ------------------------------------------------------------------ command line


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="drumbeat bench drum", description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=10_000_000, help="keys stored before measuring")
    ap.add_argument("--ram", type=int, default=1 << 30, help="RAM budget in bytes (each contender)")
    ap.add_argument("--measure", type=int, default=None, help="URLs checked in the timed phase")
    ap.add_argument("--quick", action="store_true", help="10 M keys, database peers on 1 M")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument(
        "--drum-fsync",
        choices=sorted(FSYNC_MODES),
        default="round",
        help="drumbeat's fsync policy: every merge round (default) or commits only",
    )
    ap.add_argument(
        "--drum-compress",
        choices=("on", "off"),
        default="on",
        help="drumbeat: deflate its arrival log (off: stored raw, as before format 6)",
    )
    ap.add_argument(
        "--drum-aux",
        choices=AUX_FORMS,
        default="blob",
        help="how drumbeat gets the URLs: one (blob, offsets) AuxArray built untimed "
        "by the caller, as the crawler's URL-seen does (default), or a list of "
        "bytes, joined in the timed call",
    )
    ap.add_argument(
        "--only",
        type=lambda v: v.split(","),
        default=list(PEERS),
        metavar="NAME[,NAME]",
        help=f"contenders to run (of {', '.join(PEERS)}); e.g. --only drumbeat at 1 B",
    )
    ap.add_argument("--peer", choices=PEERS, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    unknown = sorted(set(args.only) - set(PEERS))
    if unknown or "drumbeat" not in args.only:
        print(
            f"drumbeat bench drum: --only takes names of {', '.join(PEERS)} and must "
            f"include drumbeat (the reference of the ratios), got {','.join(args.only)}",
            file=sys.stderr,
        )
        return 2
    if args.peer:  # child mode
        extra = (
            {"fsync": args.drum_fsync, "aux_form": args.drum_aux, "compress": args.drum_compress}
            if args.peer == "drumbeat"
            else {}
        )
        out = RUNNERS[args.peer](args.dir, args.ram, args.keys, args.measure, **extra)
        out["peak_rss"] = _vmhwm()
        print(json.dumps(out))
        return 0
    stored = 10_000_000 if args.quick else args.keys
    measure = args.measure or (2_000_000 if args.quick else max(2_000_000, stored // 10))
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)  # --dir may name a new directory
    base = Path(tempfile.mkdtemp(prefix="drumbench-", dir=args.dir))
    results: dict[str, dict] = {}
    try:
        for name in (p for p in PEERS if p in args.only):
            module = MODULES.get(name)
            if module and not _importable(module):
                results[name] = {"skipped": f"package {module!r} is not installed"}
                continue
            n_stored, n_measure = stored, measure
            note = ""
            if name == "set" and stored * SET_BYTES_PER_KEY > args.ram:
                n_stored = args.ram // SET_BYTES_PER_KEY  # as far as the budget allows
                note = f"capped at the RAM budget ({n_stored:,} keys); "
            if args.quick and name in ("sqlite", "lmdb", "rocksdb"):
                n_stored, n_measure = 1_000_000, 500_000
            if not args.json:
                print(
                    f"running {name}: {n_stored:,} stored, {n_measure:,} checked ...",
                    file=sys.stderr,
                )
            out = run_peer(
                name,
                base / name,
                args.ram,
                n_stored,
                n_measure,
                args.drum_fsync,
                args.drum_aux,
                args.drum_compress,
            )
            out.update(stored=n_stored, checked=n_measure)
            out["notes"] = note + out.get("notes", "")
            results[name] = out
            shutil.rmtree(base / name, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ref = results["drumbeat"].get("urls_per_s")
    for out in results.values():
        if ref and "urls_per_s" in out:
            out["ratio_vs_drumbeat"] = out["urls_per_s"] / ref
    report = {"ram_bytes": args.ram, "p_unique": P_UNIQUE, "quick": args.quick, "results": results}
    if args.json:
        print(json.dumps(report))
    else:
        _print_table(report)
    return 0 if "urls_per_s" in results["drumbeat"] else 1


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"URLseen check+update, RAM budget {report['ram_bytes'] >> 20} MiB, "
        f"p = {report['p_unique']}"
    )
    for col in (
        "contender",
        "stored",
        "checked",
        "URLs/s",
        "drumbeat speedup",
        "peak RSS MiB",
        "disk MiB",
        "notes",
    ):
        table.add_column(col, justify="left" if col in ("contender", "notes") else "right")
    for name, out in report["results"].items():
        if "urls_per_s" not in out:
            table.add_row(name, "", "", "", "", "", "", out.get("skipped") or out.get("error"))
            continue
        ratio = out.get("ratio_vs_drumbeat")
        table.add_row(
            name,
            f"{out['stored']:,}",
            f"{out['checked']:,}",
            f"{out['urls_per_s']:,.0f}",
            f"{1 / ratio:.1f}x" if ratio else "",
            f"{out['peak_rss'] / 2**20:,.0f}",
            f"{out['disk_bytes'] / 2**20:,.0f}",
            out.get("notes", ""),
        )
    console = Console(width=150)
    console.print(table)
    d = report["results"]["drumbeat"]
    if "alpha" in d:
        console.print(
            f"alpha(n, R): measured {d['alpha']:.2f} disk bytes per byte checked "
            f"(b = {d['url_bytes']:.0f} bytes key+URL, {d['buckets']} buckets, {d['merges']} "
            f"merge rounds, {d['base_rewrites']} rewriting the base, {d['runs']} runs after; "
            f"sort {d['sort_s']:.2f} s, merge {d['merge_s']:.2f} s); "
            f"Theorem 2 predicts {d['alpha_theorem2']:.2f} for the same R, b, p, U, n "
            "(it rewrites the whole sorted file every round)"
        )
    if report["quick"]:
        console.print(
            "--quick: sqlite, lmdb and rocksdb ran on 1 M stored keys; their ratio "
            "is per URL checked, at a smaller (easier) size than drumbeat's 10 M."
        )


if __name__ == "__main__":
    raise SystemExit(main())
