"""What a correct crawler does on a synthetic web, computed from the model alone.

The rules (a crawler test compares its crawl against these):

* breadth-first from canonical seed URLs; every URL is considered once;
* a URL on the refused or NXDOMAIN host is *attempted* and fails (``unreachable``);
* a URL on a spam farm or calendar trap (``scenarios.ENDLESS``) is recorded in
  ``endless`` and not walked: those pages never end, so the oracle describes the finite
  part of the web and where it touches the endless ones;
* a URL on a host whose robots.txt answers 500 is not fetched (``host_blocked``);
* a URL its host's robots.txt disallows is not fetched (``disallowed``);
  404 or garbage robots.txt allow everything;
* every other URL is fetched (``fetched``) whatever its status: 200 pages, 404s,
  redirects, octet-stream and garbage alike;
* a redirect contributes its Location; an HTML page contributes its links whose
  kind is followed, except ``rel="nofollow"`` links and all links of a page with
  ``<meta name="robots" content="nofollow">`` or an X-Robots-Tag nofollow for
  drumbeat; only ``http``/``https`` URLs count;
* a host's robots.txt (unless it answers 500) contributes the sitemaps it names; a
  sitemap or a feed contributes its entries that a correct crawler follows (its
  links; out-of-scope entries are not links).

robots.txt requests themselves are not part of any set.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from drumbeat.simweb.scenarios import ENDLESS

if TYPE_CHECKING:  # model imports this module to offer crawl() as methods
    from drumbeat.simweb.model import LinkKind, SimWebModel


@dataclass(slots=True)
class CrawlTruth:
    """Disjoint sets of canonical URLs, by what happens to each."""

    fetched: set[str] = field(default_factory=set)
    disallowed: set[str] = field(default_factory=set)
    host_blocked: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    endless: set[str] = field(default_factory=set)  # discovered on spam and trap PLDs


def crawl(
    model: SimWebModel,
    seeds: Iterable[str],
    kinds: frozenset[LinkKind],
) -> CrawlTruth:
    """Walk ``model`` from ``seeds`` following links of ``kinds`` (see module doc)."""
    truth = CrawlTruth()
    queue = deque(seeds)
    seen = set(queue)
    robots_read: set[str] = set()

    def discover(url: str | None) -> None:
        if url is not None and url.startswith(("http://", "https://")) and url not in seen:
            seen.add(url)
            queue.append(url)

    while queue:
        url = queue.popleft()
        parts = urlsplit(url)
        host = parts.hostname or ""
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if host in (model.refused_host, model.nxdomain_host):
            truth.unreachable.add(url)
            continue
        found = model.host(host)
        if found is None:
            continue  # the web never links outside itself; a foreign seed is ignored
        if found.pld_class in ENDLESS:
            truth.endless.add(url)
            continue
        robots = model.robots(host)
        if host not in robots_read:
            robots_read.add(host)
            if not robots.fetch_nothing:
                for named in robots.sitemaps:
                    discover(named)
        if robots.fetch_nothing:
            truth.host_blocked.add(url)
            continue
        if not robots.allows(path):
            truth.disallowed.add(url)
            continue
        truth.fetched.add(url)
        page = model.page(host, path)
        discover(page.location)
        if page.meta_nofollow or page.header_nofollow:
            continue
        for link in page.links:
            if not link.nofollow and link.kind in kinds:
                discover(link.url)
    return truth
