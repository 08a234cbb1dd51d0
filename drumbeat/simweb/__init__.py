"""simweb: a deterministic synthetic web on loopback, for tests, benchmarks and the demo.

``model`` describes the web (hosts, pages, links, robots) from a seed, ``scenarios``
its endless spam farms and calendar traps and its big site, ``oracle``
says what a correct crawler fetches there, ``render`` makes the bytes, ``server``
serves HTTP on every IP of the web plus DNS (``dns``) from one process.
Imports nothing else of drumbeat.
"""

from __future__ import annotations

from drumbeat.simweb.model import (
    ALL_LINK_KINDS,
    Host,
    Link,
    LinkKind,
    Page,
    PageKind,
    SimWebConfig,
    SimWebModel,
)
from drumbeat.simweb.oracle import CrawlTruth
from drumbeat.simweb.scenarios import PLDClass
from drumbeat.simweb.server import RequestRecord, SimWeb, run_in_thread

__all__ = [
    "ALL_LINK_KINDS",
    "CrawlTruth",
    "Host",
    "Link",
    "LinkKind",
    "PLDClass",
    "Page",
    "PageKind",
    "RequestRecord",
    "SimWeb",
    "SimWebConfig",
    "SimWebModel",
    "run_in_thread",
]
