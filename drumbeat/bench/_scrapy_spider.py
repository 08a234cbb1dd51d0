"""Scrapy, the throughput benchmark's peer: ``python -m drumbeat.bench._scrapy_spider CONFIG.json``.

A minimal spider: every response's links come from Scrapy's ``LinkExtractor`` and are
followed (Scrapy's own dupefilter drops repeats), robots.txt is obeyed, each host is its
own download slot (Scrapy keys slots by host name unless ``CONCURRENT_REQUESTS_PER_IP``
is set) with ``DOWNLOAD_DELAY`` between requests and one request in flight, no jitter,
high global concurrency, no cookies, no retries, WARNING logs; the remote-control server
and telnet console stay off. The scheduler keeps Scrapy's defaults: on this web they ran
faster than the "Broad Crawls" guide's ``DownloaderAwarePriorityQueue`` (whose ``pop``
scans every slot with queued requests, thousands here) with or without breadth-first
order, politeness on.

Names resolve through :class:`TableResolver` from the benchmark's name -> address table
(the same table the benchmark's DNS responder serves to drumbeat); any other name fails,
so Scrapy never asks a real resolver.

CONFIG.json: ``seeds`` (URLs), ``dns_table`` (path of a JSON name -> IPv4 object),
``delay_s``, ``per_host`` (requests in flight per host), ``concurrency``, ``seconds``,
``out`` (path); optionally ``allowed_domains`` (Scrapy's, for a one-site crawl). After
``seconds`` the runner writes to ``out`` a JSON object, ``page_times`` (epoch seconds at
which each page response reached the spider, robots.txt excluded) and ``stats`` (Scrapy's
stats collector), and exits at once: a graceful close would first drain every request
queued in the download slots, at one per second per host.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response, TextResponse
from scrapy.linkextractors import LinkExtractor

# Twisted and zope.interface come with Scrapy, in the optional "bench" extra only
# (unused-ignore: where Scrapy is installed, they are found).
from twisted.internet import defer  # type: ignore[import-not-found, unused-ignore]
from twisted.internet.error import DNSLookupError  # type: ignore[import-not-found, unused-ignore]
from twisted.internet.interfaces import (  # type: ignore[import-not-found, unused-ignore]
    IReactorTime,
    IResolverSimple,
)
from zope.interface import implementer  # type: ignore[import-not-found, import-untyped, unused-ignore]

TABLE_SETTING = "BENCH_DNS_TABLE"


@implementer(IResolverSimple)
class TableResolver:
    """Answers from the table in the ``BENCH_DNS_TABLE`` file; other names fail with
    ``DNSLookupError``. Installed as the reactor's resolver, which Twisted also wraps as
    its name resolver, so every connection Scrapy makes resolves here."""

    def __init__(self, reactor: Any, table: dict[str, str]) -> None:
        self.reactor = reactor
        self._table = {name.lower(): ip for name, ip in table.items()}

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> TableResolver:
        path = Path(crawler.settings.get(TABLE_SETTING))
        return cls(reactor, json.loads(path.read_text(encoding="utf-8")))

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Any = ()) -> defer.Deferred[str]:  # noqa: N802
        ip = self._table.get(name.lower().rstrip("."))
        if ip is None:
            return defer.fail(DNSLookupError(f"{name} is not in the benchmark's table"))
        return defer.succeed(ip)


class BenchSpider(scrapy.Spider):
    name = "bench"

    def __init__(self, seeds: list[str], allowed: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = list(seeds)
        if allowed:  # Scrapy's OffsiteMiddleware then keeps to these domains
            self.allowed_domains = list(allowed)
        self.links = LinkExtractor()
        self.page_times: list[float] = []

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        self.page_times.append(time.time())
        if not isinstance(response, TextResponse):
            return  # no links in an image or a PDF
        for link in self.links.extract_links(response):
            yield scrapy.Request(link.url, callback=self.parse)


def settings(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ROBOTSTXT_OBEY": True,
        "DOWNLOAD_DELAY": config["delay_s"],
        "DOWNLOAD_DELAY_JITTER": 0,
        "CONCURRENT_REQUESTS": config["concurrency"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": config["per_host"],
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,
        "DOWNLOAD_TIMEOUT": 30,
        "TWISTED_DNS_RESOLVER": f"{__name__}.TableResolver",
        TABLE_SETTING: config["dns_table"],
        "REMOTE_CONTROL_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "MEMUSAGE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "USER_AGENT": "scrapy-throughput-bench",
    }


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    process = CrawlerProcess(settings(config))
    crawler = process.create_crawler(BenchSpider)

    def write_result() -> None:
        spider = crawler.spider
        assert isinstance(spider, BenchSpider) and crawler.stats is not None
        result = {"page_times": spider.page_times, "stats": crawler.stats.get_stats()}
        Path(config["out"]).write_text(json.dumps(result, default=str), encoding="utf-8")

    def finish() -> None:
        write_result()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    process.crawl(crawler, seeds=config["seeds"], allowed=config.get("allowed_domains"))
    # Only now: importing the reactor earlier would install Twisted's default one.
    from twisted.internet import reactor

    # cast: Twisted installs the reactor object into this module at run time.
    cast(IReactorTime, reactor).callLater(config["seconds"], finish)
    process.start()
    write_result()  # the crawl ended before its time: nothing left to crawl
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
