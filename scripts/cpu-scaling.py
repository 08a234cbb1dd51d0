#!/usr/bin/env python3
"""How this machine's per-process speed falls as more cores are busy.

Runs K copies of one pure-Python loop at once (K = 1, 2, 4, ... up to the core count)
and prints each copy's speed against one copy alone. A crawl's processes are pure
Python too: where a copy runs at 0.75 of its lone speed with 4 busy, no crawler can grow
more than 0.75 per added process there (shared cores, SMT siblings, turbo falling as
cores fill). `scripts/device-cluster-scaling.sh` prints it before the cluster's curve
so that the two can be read together.

Usage: python3 scripts/cpu-scaling.py [--seconds S] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path


def _spin(seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    # A mix of the work a crawler's Python does: dict and str operations, small ints.
    d: dict[str, int] = {}
    n = 0
    end = time.perf_counter() + seconds
    t0 = time.process_time()
    while time.perf_counter() < end:
        for i in range(1000):
            k = f"k{i & 255}"
            d[k] = d.get(k, 0) + i
        n += 1
    out.put((n, time.process_time() - t0))


def run(k: int, seconds: float) -> tuple[float, float]:
    """Loops a second per copy (the mean over K copies) and the CPU share each got."""
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=_spin, args=(seconds, q)) for _ in range(k)]
    for p in procs:
        p.start()
    got = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(n for n, _ in got) / k / seconds, sum(c for _, c in got) / k / seconds


def topology() -> dict[str, str]:
    cpu0 = Path("/sys/devices/system/cpu/cpu0/topology")
    info = {"cores": str(os.cpu_count())}
    for name in ("thread_siblings_list", "core_siblings_list"):
        try:
            info[name] = (cpu0 / name).read_text().strip()
        except OSError:
            info[name] = "unknown"
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = "unknown"
    info["model"] = model
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per step")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    steps = [k for k in (1, 2, 4, 6, 8, 12, 16, 24, 32) if k <= cores]
    rows = []
    base = None
    for k in steps:
        rate, share = run(k, args.seconds)
        base = base or rate
        rows.append(
            {
                "copies": k,
                "loops_per_s": round(rate, 1),
                "x_alone": round(rate / base, 3),
                "cpu_share": round(share, 3),
            }
        )
    rep = {"topology": topology(), "steps": rows}
    if args.json:
        print(json.dumps(rep))
    else:
        t = rep["topology"]
        print(
            f"cpu-scaling: {t['cores']} cores, {t['model']}; cpu0 siblings "
            f"{t['thread_siblings_list']}"
        )
        print("copies  loops/s a copy  x alone  CPU share")
        for r in rows:
            print(
                f"{r['copies']:>6}  {r['loops_per_s']:>14,.0f}  {r['x_alone']:>7.3f}  "
                f"{r['cpu_share']:>9.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
