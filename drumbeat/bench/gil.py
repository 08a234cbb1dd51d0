"""``drumbeat bench gil``: how long the manager's event loop waits for the GIL while a
background thread runs Python, at several switch intervals (the reason for
drumbeat.standalone.MANAGER_SWITCH_INTERVAL_S).

An asyncio loop exchanges 32-byte messages with an echo process over a socketpair, as
the manager's loop trades small batches with its fetchers: first alone, then beside a
thread that builds checkpoint-like rows in Python. Printed for each switch interval:
the loop's messages a second beside the thread, as a share of the loop alone, and the
thread's rows a second. Nothing listens on a network: the peer is a local socketpair.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from drumbeat.standalone import MANAGER_SWITCH_INTERVAL_S

DEFAULT_INTERVALS_S = (0.005, 0.001, MANAGER_SWITCH_INTERVAL_S)
MESSAGE = b"x" * 32
# The echo peer: a separate process, so that it never needs this process's GIL.
_ECHO = """
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    data = s.recv(64)
    if not data:
        break
    s.sendall(data)
"""


async def _exchange(sock: socket.socket, seconds: float) -> float:
    """Messages a second the loop sent and got back, one at a time, for ``seconds``."""
    loop = asyncio.get_running_loop()
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        await loop.sock_sendall(sock, MESSAGE)
        await loop.sock_recv(sock, 64)
        done += 1
    return done / seconds


def _build_rows(stop: threading.Event, rows: list[int]) -> None:
    """Python work like a checkpoint writer's (queue.jsonl rows), until ``stop``."""
    made = 0
    while not stop.is_set():
        made += len([f'["http://h{i}.test/p/{i}.html", {i % 7}, null]\n' for i in range(1000)])
    rows.append(made)


def measure(interval_s: float, seconds: float, sock: socket.socket) -> dict[str, float]:
    """The loop alone, then beside a row-building thread, at ``interval_s``."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    try:
        alone = asyncio.run(_exchange(sock, seconds))
        stop = threading.Event()
        rows: list[int] = []
        thread = threading.Thread(target=_build_rows, args=(stop, rows))
        started = time.perf_counter()
        thread.start()
        beside = asyncio.run(_exchange(sock, seconds))
        stop.set()
        thread.join()
        elapsed = time.perf_counter() - started
    finally:
        sys.setswitchinterval(previous)
    return {
        "switch_interval_s": interval_s,
        "loop_alone_per_s": alone,
        "loop_beside_thread_per_s": beside,
        "share_of_alone": beside / alone,
        "thread_rows_per_s": rows[0] / elapsed,
    }


def run(seconds: float, intervals: tuple[float, ...]) -> list[dict[str, float]]:
    mine, theirs = socket.socketpair()
    peer = subprocess.Popen(
        [sys.executable, "-c", _ECHO, str(theirs.fileno())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    try:
        mine.setblocking(False)
        return [measure(interval, seconds, mine) for interval in intervals]
    finally:
        mine.close()  # the peer sees end of file and exits
        peer.wait(timeout=10)


def _table(results: list[dict[str, Any]]) -> str:
    head = (
        f"{'switch interval':>16} {'loop alone':>12} {'beside thread':>14} {'share':>7} "
        f"{'thread rows/s':>14}"
    )
    rows = [
        f"{r['switch_interval_s'] * 1000:>13.1f} ms {r['loop_alone_per_s']:>10,.0f}/s "
        f"{r['loop_beside_thread_per_s']:>12,.0f}/s {r['share_of_alone']:>7.3f} "
        f"{r['thread_rows_per_s']:>14,.0f}"
        for r in results
    ]
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="drumbeat bench gil",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--seconds", type=float, default=2.0, help="length of each measurement (default 2)"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args(argv)
    if not args.seconds > 0:
        ap.error("--seconds must be > 0")
    results = run(args.seconds, DEFAULT_INTERVALS_S)
    if args.json:
        print(json.dumps({"results": results}))
    else:
        print(_table(results))
    return 0
