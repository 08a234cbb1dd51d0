"""``drumbeat simweb`` / ``python -m drumbeat.simweb``: serve a synthetic web until stopped.

Prints one JSON line, ``{"port": P, "dns": "127.0.0.1:D", "seeds": [...]}``, once
every socket is listening, then serves until SIGINT or SIGTERM and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import SimWeb


def build_parser() -> argparse.ArgumentParser:
    defaults = SimWebConfig()
    parser = argparse.ArgumentParser(
        prog="drumbeat simweb", description="Serve a deterministic synthetic web on loopback."
    )
    parser.add_argument("--hosts", type=int, default=defaults.hosts, help="virtual hosts")
    parser.add_argument("--ips", type=int, default=defaults.ips, help="127.1.x.y addresses")
    parser.add_argument(
        "--pages-per-host", type=int, default=defaults.pages_per_host, help="mean pages per host"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--port", type=int, default=defaults.port, help="HTTP port (0: any free)")
    parser.add_argument(
        "--dns-port",
        type=int,
        default=defaults.dns_port,
        help="UDP port on 127.0.0.1 (0: any free)",
    )
    parser.add_argument("--request-log", default=None, help="append requests here as JSON lines")
    parser.add_argument(
        "--crawl-delay",
        type=float,
        default=defaults.crawl_delay_s,
        help="seconds, for hosts whose robots.txt sets Crawl-delay",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = SimWebConfig(
        seed=args.seed,
        hosts=args.hosts,
        ips=args.ips,
        pages_per_host=args.pages_per_host,
        port=args.port,
        dns_port=args.dns_port,
        crawl_delay_s=args.crawl_delay,
    )
    asyncio.run(_serve(config, args.request_log))
    return 0


async def _serve(config: SimWebConfig, request_log: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sim = SimWeb(config, request_log)
    await sim.start()
    try:
        line = {"port": sim.port, "dns": sim.dns_address, "seeds": sim.seeds}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await sim.stop()


if __name__ == "__main__":
    sys.exit(main())
