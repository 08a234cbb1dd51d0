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
        prog="drumbeat simweb",
        description="Serve a deterministic synthetic web on loopback: virtual hosts on "
        "127.1.x.y addresses, with its own DNS responder on 127.0.0.1.",
        epilog='Prints one JSON line once every socket listens: {"port": HTTP port, "dns": '
        '"127.0.0.1:PORT" (for drumbeat crawl --dns-server), "seeds": [seed URLs]}; then '
        "serves until SIGINT or SIGTERM and exits 0. Crawl it with --allow-loopback.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_web_args(parser, defaults)
    _add_scenario_args(
        parser.add_argument_group("frontier scenarios (all off by default)"), defaults
    )
    return parser


def _add_web_args(parser: argparse.ArgumentParser, defaults: SimWebConfig) -> None:
    """The plain web's shape and its sockets."""
    parser.add_argument("--hosts", type=int, default=defaults.hosts, help="virtual hosts")
    parser.add_argument("--ips", type=int, default=defaults.ips, help="127.1.x.y addresses")
    parser.add_argument(
        "--pages-per-host", type=int, default=defaults.pages_per_host, help="mean pages per host"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="random seed: the same seed serves the same web",
    )
    parser.add_argument("--port", type=int, default=defaults.port, help="HTTP port (0: any free)")
    parser.add_argument(
        "--dns-port",
        type=int,
        default=defaults.dns_port,
        help="UDP port on 127.0.0.1 (0: any free)",
    )
    parser.add_argument(
        "--request-log", metavar="FILE", default=None, help="append requests here as JSON lines"
    )
    parser.add_argument(
        "--crawl-delay",
        type=float,
        default=defaults.crawl_delay_s,
        help="seconds, for hosts whose robots.txt sets Crawl-delay",
    )


def _add_scenario_args(scenarios: argparse._ArgumentGroup, defaults: SimWebConfig) -> None:
    """The web's traps and oddities, each a frontier behaviour a test or benchmark needs."""
    scenarios.add_argument(
        "--spam-farms",
        type=int,
        default=defaults.spam_farms,
        help="endless spam PLDs answering for *.spamfarmK.test",
    )
    scenarios.add_argument(
        "--spam-ips", type=int, default=defaults.spam_ips, help="addresses per spam farm"
    )
    scenarios.add_argument(
        "--spam-links-per-page",
        type=int,
        default=defaults.spam_links_per_page,
        help="links on every spam page",
    )
    scenarios.add_argument(
        "--calendar-traps",
        type=int,
        default=defaults.calendar_traps,
        help="endless calendar PLDs (/cal/YYYY/MM)",
    )
    scenarios.add_argument(
        "--big-site-pages",
        type=int,
        default=defaults.big_site_pages,
        help="pages of bigsite.test, linked from most hosts (0: none)",
    )
    scenarios.add_argument(
        "--spammed-hosts",
        type=int,
        default=defaults.spammed_hosts,
        help="popular hosts whose every page carries comment spam into a spam farm",
    )
    scenarios.add_argument(
        "--spammed-links-per-page",
        type=int,
        default=defaults.spammed_links_per_page,
        help="spam links appended to each page of a spammed host",
    )
    scenarios.add_argument(
        "--duplicate-articles",
        type=int,
        default=defaults.duplicate_articles,
        help="articles per host, each served as original, exact copy and near copy",
    )
    scenarios.add_argument(
        "--topics",
        type=int,
        default=defaults.topics,
        help="ring hosts about one of this many topics, linking mostly within it (0: none)",
    )


def config_from_args(args: argparse.Namespace) -> SimWebConfig:
    return SimWebConfig(
        seed=args.seed,
        hosts=args.hosts,
        ips=args.ips,
        pages_per_host=args.pages_per_host,
        port=args.port,
        dns_port=args.dns_port,
        crawl_delay_s=args.crawl_delay,
        spam_farms=args.spam_farms,
        spam_ips=args.spam_ips,
        spam_links_per_page=args.spam_links_per_page,
        calendar_traps=args.calendar_traps,
        big_site_pages=args.big_site_pages,
        spammed_hosts=args.spammed_hosts,
        spammed_links_per_page=args.spammed_links_per_page,
        duplicate_articles=args.duplicate_articles,
        topics=args.topics,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
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
