"""The synthetic web as data: hosts, pages, links and robots rules, derived from a seed.

Pure and deterministic: the same ``SimWebConfig`` (including ``port``, which appears
in absolute links) gives the same hosts, pages and bytes. Nothing here does I/O;
``server`` and ``dns`` serve what this module describes, and ``oracle`` walks it.

Shape of a web
--------------
* Host ``i`` (0-based) is named ``site{i}.{tld}``, except that ``i % 5 == 3`` is
  ``www.site{i-1}.{tld}`` and ``i % 5 == 4`` is ``blog.site{i-2}.{tld}``; so
  ``site2``, ``www.site2`` and ``blog.site2`` share one pay-level domain.
* Host ``i`` lives on IP ``ips[i % config.ips]``; ``ips[j]`` is
  ``127.1.{j // 254}.{j % 254 + 1}`` (never 127.0.0.1).
* ``down.{tld}`` resolves to ``127.3.0.1`` where nothing listens (connection
  refused) and ``gone.{tld}`` does not resolve (NXDOMAIN). A few links point there.
* Host ``i``'s robots.txt is ``robots.CYCLE[i % 10]``; host 0 is allow-all.
* Each host has ``n`` "backbone" pages (``n`` skewed around ``pages_per_host``,
  at least 1). Page 0 is ``/``; page ``k`` is ``/p/k``, ``/a/x/y/ck.html``,
  ``/docs/k/`` or ``/list?page=k`` by ``k % 4``. Page ``k`` always links to page
  ``k + 1`` (plain link), so ``/`` reaches the whole backbone.
* Every host also has ``/data.bin`` (octet-stream), ``/private/0.html``,
  ``/private/1.html``, ``/private/open/info.html`` and ``/search?q=0..2``, all
  linked from ``/`` (robots variants forbid some of them).
* Host 0 also carries the special pages under ``/special/`` (see ``_special``):
  meta nofollow, rel=nofollow, ``<base>``, canonical, meta refresh, frames,
  iframe, area, mailto/javascript/malformed links, a 404 link, 301 and 302
  redirects and text/html garbage.
* ``/`` of host ``i`` links to ``/`` of host ``i + 1`` (mod hosts) and, when that
  host's robots.txt is a 500, to the next host after it as well; so every host
  whose robots.txt permits it is reachable from any seed.

URL forms
---------
The oracle speaks canonical URLs, as a WHATWG normalizer leaves them: scheme
``http``, lower-case host, ``:port`` unless it is 80, dot segments resolved, no
fragment, e.g. ``http://site3.test:43117/a/1/3/c6.html``. The HTML uses many
spellings of those URLs (relative, ``../``, ``./``, ``?query`` only, absolute,
upper-case host, ``#fragment``); ``Link.href`` is the spelling, ``Link.url`` the
canonical form.

Frontier scenarios (all off by default; see ``scenarios``)
----------------------------------------------------------
``spam_farms``, ``calendar_traps`` and ``big_site_pages`` add PLDs outside the ring
of ``hosts``: endless spam farms answering for any subdomain and path, endless calendar
traps, and one big legitimate site. Their hosts are in ``scenario_hosts`` (spam
subdomains are made on demand by ``host``), all allow-all in robots.txt, and
``pld_class`` tells them apart from the ordinary ("legit") hosts. Home pages of legit
hosts link into them, after their other fixed links:

* spam farm ``k`` and calendar ``k`` from ``/`` of two legit hosts each: a seed host
  (so a BFS from ``seeds()`` meets them at depth 1) and the host half the ring away;
* the big site from ``/`` of three legit hosts in four (``i % 4 != 3``), so its PLD
  in-degree is high while every other PLD's stays small: the legit hosts are its
  long tail.

* ``spammed_hosts`` (needs a spam farm): that many popular ring hosts carry comment or
  guestbook spam (or injected links of a hacked site) on every HTML page:
  ``spammed_links_per_page`` links appended after the page's own, each to a fresh
  subdomain of one farm (host ``j`` of them points into farm ``j % spam_farms``). The farm
  becomes reachable early and in bulk, while its PLD in-degree grows only by the few
  spammed PLDs (see ``scenarios.spammed_host_indices``).

With every scenario off, webs are byte-identical to webs made before scenarios existed.

Topics (off by default: ``topics = 0``)
---------------------------------------
With ``topics = k`` (2 .. ``len(TOPIC_WORDS)``) ring host ``i`` is about topic ``i % k``:
each of its HTML pages carries a paragraph of that topic's words (``TOPIC_WORDS``), and
a random link to another host goes, ``TOPIC_LOCALITY`` of the time, to a host of the
same topic (pages link to pages on their topic, as on the real web, which is what makes
a focused crawl work). Scenario hosts have no topic. ``topic`` tells a URL's topic, the
oracle of a focused crawl. With ``topics = 0`` no byte changes.

Hostile hosts (off by default; see ``hostile``)
-----------------------------------------------
With ``hostile`` on, ``/`` of host 0 also links to ``/`` of every hostile case host
(``{case}.hostile.{tld}`` on 127.4.0.x, served by ``hostile.HostileServer``). They are
not hosts of the model: ``host`` does not know them, so the oracle ignores their URLs
and its sets are unchanged; ``hostile_entry_urls`` lists what a crawl will meet there.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import urlsplit

from drumbeat.simweb import hostile, scenarios
from drumbeat.simweb.oracle import CrawlTruth, crawl
from drumbeat.simweb.robots import CYCLE, RobotsFile, RobotsVariant, robots_file
from drumbeat.simweb.scenarios import PLDClass

# "feed": <link rel="alternate" type="application/rss+xml">; "a" is also what sitemap
# and feed entries are.
LinkKind = Literal["a", "area", "frame", "iframe", "refresh", "canonical", "feed"]
ALL_LINK_KINDS: frozenset[LinkKind] = frozenset(
    ("a", "area", "frame", "iframe", "refresh", "canonical", "feed")
)
# Server behaviour of a page; the server's handler table is keyed by it, so new
# hostile behaviours are a new kind plus one handler. The sitemap kinds and "feed" are
# XML whose entries are the page's links (see SimWebConfig.sitemaps).
PageKind = Literal[
    "html",
    "redirect",
    "binary",
    "garbage",
    "missing",
    "sitemap",
    "sitemap_index",
    "sitemap_gz",
    "sitemap_broken",
    "feed",
]

REFUSED_IP = "127.3.0.1"
_SCENARIO_ROBOTS = robots_file("allow_all", 0.0, random.Random(0))
_HOST_CACHE = 4096
# Each topic's words (config.topics): none of them is in render's filler vocabulary.
TOPIC_WORDS: tuple[tuple[str, ...], ...] = (
    ("astronomy", "telescope", "galaxy"),
    ("cooking", "recipe", "kitchen"),
    ("sailing", "regatta", "mast"),
    ("chess", "gambit", "endgame"),
    ("gardening", "compost", "seedling"),
    ("cycling", "derailleur", "peloton"),
    ("pottery", "glaze", "kiln"),
    ("birding", "warbler", "binoculars"),
)
# The share of a topic host's random cross-host links that stay on its topic.
TOPIC_LOCALITY = 0.8
_PAGE_CACHE = 8192


@dataclass(frozen=True, slots=True)
class SimWebConfig:
    """Everything that determines a synthetic web (sizes are approximate targets)."""

    seed: int = 1
    hosts: int = 50  # virtual host names served
    ips: int = 8  # distinct 127.1.x.y addresses the hosts are spread over
    pages_per_host: int = 20  # mean backbone pages per host; skewed, at least 1
    page_bytes: int = 20_000  # approximate HTML size
    links_per_page: int = 60  # approximate links per HTML page
    cross_host_link_fraction: float = 0.2
    port: int = 0  # HTTP port on every IP; 0 = pick a free one
    dns_port: int = 0  # UDP port of the DNS responder on 127.0.0.1; 0 = pick
    tld: str = "test"
    crawl_delay_s: float = 0.3  # Crawl-delay of the crawl_delay robots variant
    spam_farms: int = 0  # endless spam PLDs, each answering for *.spamfarm{k}.{tld}
    spam_ips: int = 2  # 127.2.x.y addresses per spam farm
    spam_links_per_page: int = 30  # links of every spam page, mostly to new subdomains
    calendar_traps: int = 0  # endless calendar PLDs (/cal/YYYY/MM both ways)
    big_site_pages: int = 0  # backbone pages of bigsite.{tld}; 0 = no big site
    # Comment-spammed (or hacked) ring hosts: every HTML page of each carries extra links
    # to fresh subdomains of one spam farm (see scenarios.spammed_host_indices).
    spammed_hosts: int = 0
    spammed_links_per_page: int = 20
    hostile: bool = False  # serve the hostile case hosts and link to them from host 0
    hostile_interval_s: float = 2.0  # pause between the bytes of slow hostile responses
    latency_s: float = 0.0  # every answer but robots.txt waits this long (a far server)
    # Host 0's robots.txt names a sitemap index (plain, gzip, malformed and out-of-scope
    # sitemaps under it), its "/" links to an RSS feed and to pages served with
    # X-Robots-Tag; their pages are reachable only through these (_content_pages).
    sitemaps: bool = False
    # Planted duplicates: each ring host's home links to this many articles, each served
    # three times: /article/{g}.html, /article/{g}-copy.html (the same bytes) and
    # /article/{g}-print.html (a near copy: another date and another ad block).
    duplicate_articles: int = 0
    topics: int = 0  # ring hosts about topic i % topics (0: none; see "Topics")

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.ips < 1 or self.pages_per_host < 1:
            raise ValueError("hosts, ips and pages_per_host must be at least 1")
        if self.ips > 254 * 256:
            raise ValueError("at most 65024 IPs fit in 127.1.0.0/16")
        if min(self.spam_farms, self.calendar_traps, self.big_site_pages) < 0:
            raise ValueError("spam_farms, calendar_traps and big_site_pages must be >= 0")
        if self.spam_ips < 1 or self.spam_links_per_page < 1:
            raise ValueError("spam_ips and spam_links_per_page must be at least 1")
        if self.duplicate_articles < 0:
            raise ValueError("duplicate_articles must be >= 0")
        if self.spammed_hosts < 0 or self.spammed_links_per_page < 1:
            raise ValueError("spammed_hosts must be >= 0 and spammed_links_per_page >= 1")
        if self.spammed_hosts and not self.spam_farms:
            raise ValueError("spammed_hosts needs at least one spam farm to link to")
        if len(scenarios.spammed_host_indices(self)) < self.spammed_hosts:
            raise ValueError("too few hosts for spammed_hosts (one in five hosts can be)")
        if scenarios.special_ip_count(self) > 254 * 256:
            raise ValueError("at most 65024 scenario IPs fit in 127.2.0.0/16")
        if self.topics and not 2 <= self.topics <= len(TOPIC_WORDS):
            raise ValueError(f"topics must be 0 or 2..{len(TOPIC_WORDS)}")
        if not 0.0 <= self.cross_host_link_fraction <= 1.0:
            raise ValueError("cross_host_link_fraction must be within [0, 1]")


@dataclass(frozen=True, slots=True)
class Host:
    """One host name of the web.

    ``index`` is the position in ``SimWebModel.hosts``, or -1 for a scenario host;
    ``backbone_pages`` is 0 for a host whose pages never end.
    """

    index: int
    name: str
    pld: str
    ip: str
    robots_variant: RobotsVariant
    backbone_pages: int
    pld_class: PLDClass = "legit"


@dataclass(frozen=True, slots=True)
class Link:
    """One outgoing reference of a page.

    ``url`` is the canonical absolute URL (see module doc); for ``mailto:`` and
    ``javascript:`` it is the href itself, and ``None`` when the href does not
    parse as a URL at all. ``nofollow`` is ``rel="nofollow"`` on this link only.
    """

    url: str | None
    href: str
    kind: LinkKind
    nofollow: bool = False


@dataclass(frozen=True, slots=True)
class Page:
    """The truth about one URL of the web, including ones that do not exist (404)."""

    host: str
    path: str  # path plus "?query", as requested
    url: str
    kind: PageKind
    status: int
    content_type: str | None
    links: tuple[Link, ...] = ()
    meta_nofollow: bool = False  # <meta name="robots" content="nofollow">
    base_href: str | None = None  # <base href>, against which relative links resolve
    location: str | None = None  # canonical redirect target
    location_header: str | None = None  # what the Location header says
    x_robots_tag: str | None = None  # the X-Robots-Tag header served, if any
    header_nofollow: bool = False  # X-Robots-Tag says nofollow to drumbeat: no link followed
    # Sitemap entries served but not followed by a correct crawler (out of scope).
    unfollowed: tuple[str, ...] = ()
    # A planted duplicate: the URL of its article's original and which copy it is
    # ("original", "copy": the same bytes, "near": another date and ad block).
    article: str | None = None
    article_variant: str | None = None
    topic: int | None = None  # the page's topic (SimWebConfig.topics; None: none)


@dataclass(frozen=True, slots=True)
class _Spec:
    """A page before its generated links are added."""

    kind: PageKind
    links: tuple[tuple[str, LinkKind, bool], ...] = ()  # (href or "@path", kind, nofollow)
    meta_nofollow: bool = False
    base_path: str | None = None
    redirect: tuple[int, str, bool] | None = None  # (status, target path, absolute header)
    generated: bool = True  # add the usual random links and filler
    x_robots_tag: str | None = None
    header_nofollow: bool = False
    unfollowed: tuple[str, ...] = ()  # absolute URLs
    article: tuple[str, str] | None = None  # (original path, variant): see Page


class SimWebModel:
    """Queryable truth about one synthetic web."""

    def __init__(self, config: SimWebConfig) -> None:
        self.config = config
        # The ring hosts use the first config.ips addresses; scenario hosts the rest.
        self.ips: tuple[str, ...] = tuple(
            f"127.1.{j // 254}.{j % 254 + 1}" for j in range(config.ips)
        ) + tuple(scenarios.special_ip(j) for j in range(scenarios.special_ip_count(config)))
        self.refused_host = f"down.{config.tld}"
        self.nxdomain_host = f"gone.{config.tld}"
        sizes = _backbone_sizes(config)
        self.hosts: tuple[Host, ...] = tuple(
            Host(
                index=i,
                name=_host_name(i, config.tld),
                pld=_pld_name(i, config.tld),
                ip=self.ips[i % config.ips],
                robots_variant=CYCLE[i % len(CYCLE)],
                backbone_pages=sizes[i],
            )
            for i in range(config.hosts)
        )
        self._spam_names = scenarios.spam_pattern(config.tld)
        self.scenario_hosts: tuple[Host, ...] = self._build_scenario_hosts()
        self._by_name = {h.name: h for h in self.hosts + self.scenario_hosts}
        self._endless_linkers = self._build_endless_linkers()
        # Ring host index -> the spam farm its pages' spam comments point into.
        self._spammed: dict[int, str] = {
            i: scenarios.spam_farm_name(j % config.spam_farms, config.tld)
            for j, i in enumerate(scenarios.spammed_host_indices(config))
        }
        self._spam_host = functools.lru_cache(maxsize=_HOST_CACHE)(self._build_spam_host)
        self._inventory = functools.lru_cache(maxsize=_HOST_CACHE)(self._build_inventory)
        self._page = functools.lru_cache(maxsize=_PAGE_CACHE)(self._build_page)
        self._robots = functools.lru_cache(maxsize=_HOST_CACHE)(self._build_robots)

    # -- hosts, DNS, robots ---------------------------------------------------

    def host(self, name: str) -> Host | None:
        """The host called ``name`` (any case), including any name of a spam farm."""
        name = name.lower()
        found = self._by_name.get(name)
        if found is None and self.config.spam_farms:
            found = self._spam_host(name)
        return found

    def pld_class(self, host_or_url: str) -> PLDClass:
        """Which kind of PLD a host name or absolute URL belongs to.

        "spam" and "trap" are the endless spam farms and calendars, "big" the big site;
        every other name, including ones outside the web, is "legit".
        """
        name = (urlsplit(host_or_url).hostname or "") if "://" in host_or_url else host_or_url
        found = self.host(name.rstrip("."))
        return found.pld_class if found is not None else "legit"

    def topic(self, host_or_url: str) -> int | None:
        """The topic of a host name or absolute URL (SimWebConfig.topics): that of its
        ring host; None without topics, for scenario hosts and names outside the web."""
        if not self.config.topics:
            return None
        name = (urlsplit(host_or_url).hostname or "") if "://" in host_or_url else host_or_url
        found = self.host(name.rstrip("."))
        if found is None or found.index < 0:
            return None
        return found.index % self.config.topics

    def origin(self, name: str) -> str:
        port = self.config.port
        return f"http://{name}" if port == 80 else f"http://{name}:{port}"

    def url(self, host: str, path: str) -> str:
        return self.origin(host) + path

    def dns_records(self) -> dict[str, str]:
        """A records of the web: every named host plus the refused one.

        Spam subdomains are not listed (there is no end to them); ``resolve`` answers
        for them too.
        """
        records = {h.name: h.ip for h in self.hosts + self.scenario_hosts}
        records[self.refused_host] = REFUSED_IP
        return records

    def resolve(self, name: str) -> str | None:
        """The IPv4 address of ``name`` (any case), or None for NXDOMAIN."""
        found = self.host(name)
        if found is not None:
            return found.ip
        return REFUSED_IP if name.lower() == self.refused_host else None

    def robots(self, host: str) -> RobotsFile:
        """What ``/robots.txt`` of ``host`` serves; KeyError for a name not in the web."""
        found = self._require(host)
        if found.pld_class != "legit":
            return _SCENARIO_ROBOTS  # allow-all, so robots cannot hide a scenario's effect
        return self._robots(found.index)

    def robots_variant(self, host: str) -> RobotsVariant:
        return self._require(host).robots_variant

    def robots_status(self, host: str) -> int:
        """HTTP status of ``/robots.txt`` (garbage robots are served with 200)."""
        return self.robots(host).status

    def robots_allows(self, host: str, path: str) -> bool:
        """Whether a careful crawler may fetch ``path`` (with query) on ``host``.

        False for every path of a host whose robots.txt answers 500; True for
        every path when robots.txt is missing (404) or garbage.
        """
        return self.robots(host).allows(path)

    def crawl_delay(self, host: str) -> float | None:
        return self.robots(host).crawl_delay

    # -- pages ----------------------------------------------------------------

    def paths(self, host: str) -> list[str]:
        """Every path of ``host`` that is served with something other than 404.

        ValueError for a spam farm or calendar host: their paths never end.
        """
        found = self._require(host)
        if found.pld_class in scenarios.ENDLESS:
            raise ValueError(f"{host} has endless paths")
        if found.pld_class == "big":
            return [backbone_path(k) for k in range(found.backbone_pages)]
        return list(self._inventory(found.index))

    def page(self, host: str, path: str) -> Page:
        """The page at ``path`` (path plus ``?query``); a ``missing`` 404 if none."""
        return self._page(host.lower(), path)

    def seeds(self) -> list[str]:
        """Home pages of up to three hosts whose robots.txt is not a 500.

        Any one of them reaches every host through the ring of home-page links;
        more than one just makes a crawl start wider.
        """
        homes = [self.url(h.name, "/") for h in self.hosts if h.robots_variant != "error"]
        return homes[:3]

    # -- oracle (rules in drumbeat.simweb.oracle) ------------------------------

    def crawl(
        self, seeds: Iterable[str] | None = None, kinds: frozenset[LinkKind] = ALL_LINK_KINDS
    ) -> CrawlTruth:
        """Everything a correct crawl from ``seeds`` (default ``seeds()``) does."""
        return crawl(self, self.seeds() if seeds is None else seeds, kinds)

    def reachable(
        self, seeds: Iterable[str] | None = None, kinds: frozenset[LinkKind] = ALL_LINK_KINDS
    ) -> set[str]:
        """Canonical URLs a correct crawler fetches (any status), robots.txt excluded."""
        return self.crawl(seeds, kinds).fetched

    def unreachable_attempts(
        self, seeds: Iterable[str] | None = None, kinds: frozenset[LinkKind] = ALL_LINK_KINDS
    ) -> set[str]:
        """Discovered URLs on the refused and NXDOMAIN hosts: attempted, never fetched."""
        return self.crawl(seeds, kinds).unreachable

    def hostile_entry_urls(self) -> list[str]:
        """Entry URL of every hostile case (``/robots.txt`` for robots cases, else ``/``)
        followed by ``/`` of each robots case; empty unless ``config.hostile``."""
        if not self.config.hostile:
            return []
        tld, port = self.config.tld, self.config.port
        entries = [hostile.entry_url(c, tld, port) for c in hostile.CASES]
        return entries + [
            hostile.origin(c, tld, port) + "/" for c in hostile.CASES if c.target == "robots"
        ]

    def _require(self, host: str) -> Host:
        h = self.host(host)
        if h is None:
            raise KeyError(f"not a host of this web: {host!r}")
        return h

    def _build_robots(self, index: int) -> RobotsFile:
        rng = random.Random(f"{self.config.seed}:robots:{index}")
        robots = robots_file(self.hosts[index].robots_variant, self.config.crawl_delay_s, rng)
        if self.config.sitemaps and index == 0:
            named = self.url(self.hosts[0].name, SITEMAP_INDEX)
            robots = replace(
                robots, body=robots.body + f"Sitemap: {named}\n".encode(), sitemaps=(named,)
            )
        return robots

    def _build_page(self, host: str, path: str) -> Page:
        h = self.host(host)
        spec = self._spec(h, path) if h is not None else None
        url = self.url(host, path)
        if h is None or spec is None:
            return Page(host, path, url, "missing", 404, "text/html")
        if spec.kind == "binary":
            return Page(host, path, url, "binary", 200, "application/octet-stream")
        if spec.kind == "garbage":
            return Page(host, path, url, "garbage", 200, "text/html")
        if spec.kind not in ("html", "redirect"):  # a sitemap or a feed
            links = _LinkMaker(self, h, path, None).make(spec)
            content_type = "application/rss+xml" if spec.kind == "feed" else "application/xml"
            if spec.kind == "sitemap_gz":
                content_type = "application/gzip"
            return Page(
                host, path, url, spec.kind, 200, content_type, links, unfollowed=spec.unfollowed
            )
        if spec.redirect is not None:
            status, target, absolute = spec.redirect
            location = self.url(host, target)
            header = location if absolute else _relative_ref(path, target)
            return Page(
                host, path, url, "redirect", status, None, location=location, location_header=header
            )
        links = _LinkMaker(self, h, path, spec.base_path).make(spec)
        farm = self._spammed.get(h.index) if h.index >= 0 else None
        if farm is not None:  # appended: the page's own links are as in an unspammed web
            links += tuple(
                Link(self.url(name, p), self.url(name, p), "a")
                for name, p in scenarios.comment_spam_targets(self.config, farm, h.name, path)
            )
        base_href = self.url(host, spec.base_path) if spec.base_path else None
        if spec.article is not None:
            original, variant = spec.article
            return Page(
                host, path, url, "html", 200, "text/html", links=links,
                article=self.url(host, original), article_variant=variant,
            )  # fmt: skip
        return Page(
            host,
            path,
            url,
            "html",
            200,
            "text/html",
            links=links,
            meta_nofollow=spec.meta_nofollow,
            base_href=base_href,
            x_robots_tag=spec.x_robots_tag,
            header_nofollow=spec.header_nofollow,
            topic=h.index % self.config.topics if self.config.topics and h.index >= 0 else None,
        )

    def _spec(self, h: Host, path: str) -> _Spec | None:
        """What ``path`` of ``h`` is, before its generated links; None for a 404."""
        if h.pld_class == "legit":
            return self._inventory(h.index).get(path)
        if h.pld_class == "big":
            k = _backbone_index(path, h.backbone_pages)
            if k is None:
                return None
            nxt: tuple[tuple[str, LinkKind, bool], ...] = (
                (("@" + backbone_path(k + 1), "a", False),) if k + 1 < h.backbone_pages else ()
            )
            return _Spec("html", nxt)
        if h.pld_class == "trap":
            targets = scenarios.calendar_targets(path)
            if targets is None:
                return None
            links: tuple[tuple[str, LinkKind, bool], ...] = tuple(
                ("@" + t, "a", False) for t in targets
            )
            return _Spec("html", links, generated=False)
        links = tuple(
            ("@" + p if name == h.name else self.url(name, p), "a", False)
            for name, p in scenarios.spam_targets(self.config, h.pld, h.name, path)
        )
        return _Spec("html", links, generated=False)

    def _build_scenario_hosts(self) -> tuple[Host, ...]:
        cfg = self.config
        hosts: list[Host] = []
        for k in range(cfg.spam_farms):
            apex = self._build_spam_host(scenarios.spam_farm_name(k, cfg.tld))
            assert apex is not None
            hosts.append(apex)
        first_calendar_ip = cfg.spam_farms * cfg.spam_ips
        for k in range(cfg.calendar_traps):
            name = scenarios.calendar_name(k, cfg.tld)
            ip = scenarios.special_ip(first_calendar_ip + k)
            hosts.append(Host(-1, name, name, ip, "allow_all", 0, "trap"))
        if cfg.big_site_pages:
            name = scenarios.big_site_name(cfg.tld)
            ip = scenarios.special_ip(first_calendar_ip + cfg.calendar_traps)
            hosts.append(Host(-1, name, name, ip, "allow_all", cfg.big_site_pages, "big"))
        return tuple(hosts)

    def _build_spam_host(self, name: str) -> Host | None:
        match = self._spam_names.fullmatch(name)
        if match is None or int(match.group(1)) >= self.config.spam_farms:
            return None
        farm = int(match.group(1))
        ip = scenarios.special_ip(scenarios.spam_ip_index(self.config, farm, name))
        pld = scenarios.spam_farm_name(farm, self.config.tld)
        return Host(-1, name, pld, ip, "allow_all", 0, "spam")

    def _scenario_links(self, index: int) -> list[tuple[str, LinkKind, bool]]:
        """Links from ``/`` of ring host ``index`` into the scenario PLDs (module doc)."""
        cfg = self.config
        links: list[tuple[str, LinkKind, bool]] = []
        for name, linkers in self._endless_linkers:
            if index in linkers:
                links.append((self.url(name, "/"), "a", False))
        if cfg.big_site_pages and index % 4 != 3:
            links.append((self.url(scenarios.big_site_name(cfg.tld), "/"), "a", False))
        if cfg.hostile and index == 0:
            links += [(url, "a", False) for url in self.hostile_entry_urls() if url.endswith("/")]
        return links

    def _build_endless_linkers(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, ring hosts whose ``/`` links to it) for every spam farm and calendar."""
        cfg = self.config
        names = [scenarios.spam_farm_name(k, cfg.tld) for k in range(cfg.spam_farms)]
        names += [scenarios.calendar_name(k, cfg.tld) for k in range(cfg.calendar_traps)]
        if not names:
            return ()
        # The hosts of seeds(), so that a crawl from them meets every endless PLD at once.
        seeds = [h.index for h in self.hosts if h.robots_variant != "error"][:3] or [0]
        n = len(self.hosts)
        return tuple(
            (name, (seeds[k % len(seeds)], (seeds[k % len(seeds)] + n // 2) % n))
            for k, name in enumerate(names)
        )

    def _build_inventory(self, index: int) -> dict[str, _Spec]:
        h = self.hosts[index]
        pages: dict[str, _Spec] = {}
        n = h.backbone_pages
        for k in range(n):
            links: list[tuple[str, LinkKind, bool]] = []
            if k + 1 < n:
                links.append(("@" + backbone_path(k + 1), "a", False))
            pages[backbone_path(k)] = _Spec("html", tuple(links))
        home: list[tuple[str, LinkKind, bool]] = [
            *pages["/"].links,
            ("@/data.bin", "a", False),
            ("@/private/0.html", "a", False),
            ("@/private/open/info.html", "a", False),
            ("@/search?q=0", "a", False),
        ]
        home += [(self.url(name, "/"), "a", False) for name in self._ring_targets(index)]
        pages["/data.bin"] = _Spec("binary", generated=False)
        pages["/private/0.html"] = _Spec("html", (("@/private/1.html", "a", False),))
        pages["/private/1.html"] = _Spec("html")
        pages["/private/open/info.html"] = _Spec("html")
        for q in range(3):
            nxt: tuple[tuple[str, LinkKind, bool], ...] = (
                (("@" + f"/search?q={q + 1}", "a", False),) if q < 2 else ()
            )
            pages[f"/search?q={q}"] = _Spec("html", nxt)
        for g in range(self.config.duplicate_articles):
            original = f"/article/{g}.html"
            for path, variant in [
                (original, "original"),
                (f"/article/{g}-copy.html", "copy"),
                (f"/article/{g}-print.html", "near"),
            ]:
                pages[path] = _Spec("html", generated=False, article=(original, variant))
                home.append(("@" + path, "a", False))
        if index == 0:
            special = _special(self)
            pages.update(special)
            home += [("@" + p, "a", False) for p in _SPECIAL_ENTRIES]
            home.append(("@/special/hidden-2.html", "a", True))
            if self.config.sitemaps:
                pages.update(_content_pages(self))
                home += [("@" + p, "a", False) for p in _XROBOTS_ENTRIES]
                home.append(("@/feed.xml", "feed", False))
        home += self._scenario_links(index)
        pages["/"] = replace(pages["/"], links=tuple(home))
        return pages

    def _ring_targets(self, index: int) -> list[str]:
        n = len(self.hosts)
        if n == 1:
            return []
        targets = [self.hosts[(index + 1) % n]]
        step = 2
        while targets[-1].robots_variant == "error" and step <= n:
            targets.append(self.hosts[(index + step) % n])
            step += 1
        return [t.name for t in targets if t.index != index]


def backbone_path(k: int) -> str:
    """Path of backbone page ``k`` of any host."""
    if k == 0:
        return "/"
    style = k % 4
    if style == 1:
        return f"/p/{k}"
    if style == 2:
        return f"/a/{k % 3}/{k % 5}/c{k}.html"
    if style == 3:
        return f"/docs/{k}/"
    return f"/list?page={k}"


# Special pages of host 0 that "/" links to; the others are reachable only
# through the feature each entry page demonstrates.
_SPECIAL_ENTRIES = (
    "/special/nofollow.html",
    "/special/base.html",
    "/special/canonical.html",
    "/special/refresh.html",
    "/special/frames.html",
    "/special/misc.html",
    "/special/moved",
    "/special/temp",
    "/special/garbage.html",
)


SITEMAP_INDEX = "/sitemap_index.xml"
_XROBOTS_ENTRIES = (
    "/special/x-robots.html",
    "/special/x-robots-agent.html",
    "/special/x-robots-other.html",
)


def _content_pages(model: SimWebModel) -> dict[str, _Spec]:
    """Host 0's sitemaps, feed and X-Robots-Tag pages (``SimWebConfig.sitemaps``).

    The index lies at the root, so its sitemaps under /sitemaps/ may list the whole
    host; the one out-of-scope entry is on another host. The malformed sitemap's first
    entry comes before the fault (a crawler keeps it). Every page they lead to is
    reachable only through them."""
    plain = _Spec("html")
    only = "/only-in-sitemap/"
    elsewhere = model.hosts[1].name if len(model.hosts) > 1 else model.refused_host
    other = model.url(elsewhere, only + "elsewhere.html")
    pages = {
        SITEMAP_INDEX: _Spec(
            "sitemap_index",
            tuple(
                (f"@/sitemaps/{name}", "a", False)
                for name in ("pages.xml", "pages.xml.gz", "broken.xml")
            ),
            generated=False,
        ),
        "/sitemaps/pages.xml": _Spec(
            "sitemap",
            ((f"@{only}1.html", "a", False), (f"@{only}2.html", "a", False)),
            generated=False,
            unfollowed=(other,),
        ),
        "/sitemaps/pages.xml.gz": _Spec(
            "sitemap_gz", ((f"@{only}3.html", "a", False),), generated=False
        ),
        "/sitemaps/broken.xml": _Spec(
            "sitemap_broken", ((f"@{only}4.html", "a", False),), generated=False
        ),
        "/feed.xml": _Spec(
            "feed",
            (("@/only-in-feed/1.html", "a", False), ("@/only-in-feed/2.html", "a", False)),
            generated=False,
        ),
        "/special/x-robots.html": _Spec(
            "html",
            (("@/special/x-robots-hidden-1.html", "a", False),),
            x_robots_tag="noindex, nofollow",
            header_nofollow=True,
        ),
        "/special/x-robots-agent.html": _Spec(
            "html",
            (("@/special/x-robots-hidden-2.html", "a", False),),
            x_robots_tag="otherbot: noindex\ndrumbeat: nofollow",
            header_nofollow=True,
        ),
        "/special/x-robots-other.html": _Spec(
            "html",
            (("@/special/x-robots-followed.html", "a", False),),
            x_robots_tag="otherbot: nofollow",
        ),
        "/special/x-robots-hidden-1.html": plain,
        "/special/x-robots-hidden-2.html": plain,
        "/special/x-robots-followed.html": plain,
    }
    for k in range(1, 5):
        pages[f"{only}{k}.html"] = plain
    for k in range(1, 3):
        pages[f"/only-in-feed/{k}.html"] = plain
    return pages


def _special(model: SimWebModel) -> dict[str, _Spec]:
    down = model.url(model.refused_host, "/")
    gone = model.url(model.nxdomain_host, "/")
    plain = _Spec("html")
    return {
        "/special/nofollow.html": _Spec(
            "html", (("@/special/hidden-1.html", "a", False),), meta_nofollow=True
        ),
        "/special/hidden-1.html": plain,
        "/special/hidden-2.html": plain,
        "/special/base.html": _Spec(
            "html",
            (("x0.html", "a", False), ("x1.html", "a", False)),
            base_path="/special/based/",
        ),
        "/special/based/x0.html": plain,
        "/special/based/x1.html": plain,
        "/special/canonical.html": _Spec("html", (("@/", "canonical", False),)),
        "/special/refresh.html": _Spec("html", (("@/special/refreshed.html", "refresh", False),)),
        "/special/refreshed.html": plain,
        "/special/frames.html": _Spec(
            "html",
            (
                ("@/special/framed-1.html", "frame", False),
                ("@/special/framed-2.html", "frame", False),
            ),
            generated=False,
        ),
        "/special/framed-1.html": plain,
        "/special/framed-2.html": plain,
        "/special/misc.html": _Spec(
            "html",
            (
                ("@/special/iframed.html", "iframe", False),
                ("@/special/area.html", "area", False),
                (f"mailto:webmaster@{model.hosts[0].name}", "a", False),
                ("javascript:void(0)", "a", False),
                ("http://[bad", "a", False),
                ("@/special/missing.html", "a", False),
                (down, "a", False),
                (gone, "a", False),
            ),
        ),
        "/special/iframed.html": plain,
        "/special/area.html": plain,
        "/special/moved": _Spec("redirect", redirect=(301, "/special/moved-target.html", True)),
        "/special/temp": _Spec("redirect", redirect=(302, "/special/temp-target.html", False)),
        "/special/moved-target.html": plain,
        "/special/temp-target.html": plain,
        "/special/garbage.html": _Spec("garbage", generated=False),
    }


class _LinkMaker:
    """Turns a page spec into its final link list (fixed links + random ones)."""

    def __init__(self, model: SimWebModel, host: Host, path: str, base_path: str | None) -> None:
        self.model = model
        self.cfg = model.config
        self.host = host
        self.path = path
        self.ref_base = base_path or path  # relative hrefs resolve against <base> if any
        # Ring hosts keep their index in the key, so their bytes predate scenario hosts.
        key = host.index if host.index >= 0 else host.name
        self.rng = random.Random(f"{self.cfg.seed}:{key}:{path}")

    def make(self, spec: _Spec) -> tuple[Link, ...]:
        links = [self._fixed(href, kind, nofollow) for href, kind, nofollow in spec.links]
        if spec.generated:
            links.extend(
                self._random() for _ in range(max(0, self.cfg.links_per_page - len(links)))
            )
        return tuple(links)

    def _fixed(self, href: str, kind: LinkKind, nofollow: bool) -> Link:
        if href.startswith("@"):
            return self._same_host(href[1:], kind, nofollow)
        if href.startswith(("mailto:", "javascript:")):
            return Link(href, href, kind, nofollow)
        if href.startswith("http://["):
            return Link(None, href, kind, nofollow)
        if href.startswith("http"):
            return Link(href, href, kind, nofollow)
        # A relative href (on the <base> page) resolves against the base path.
        directory = self.ref_base[: self.ref_base.rfind("/") + 1]
        return Link(self.model.url(self.host.name, directory + href), href, kind, nofollow)

    def _same_host(self, target: str, kind: LinkKind, nofollow: bool) -> Link:
        rng = self.rng
        url = self.model.url(self.host.name, target)
        r = rng.random()
        if r < 0.1:
            href = self._absolute(self.host.name, target)
        elif r < 0.45:
            href = target
        elif r < 0.5 and target != "/":
            # A dot segment the normalizer has to remove.
            href = "/x/.." + target if rng.random() < 0.5 else "/." + target
        else:
            href = _relative_ref(self.ref_base, target)
        if rng.random() < 0.1:
            href += f"#s{rng.randrange(10)}"
        return Link(url, href, kind, nofollow)

    def _absolute(self, name: str, target: str) -> str:
        shown = name.upper() if self.rng.random() < 0.3 else name
        return self.model.origin(shown) + target

    def _random(self) -> Link:
        rng = self.rng
        hosts = self.model.hosts
        r = rng.random()
        if r < 0.002:
            dead = rng.choice((self.model.refused_host, self.model.nxdomain_host))
            target = backbone_path(rng.randrange(1, 6))
            return Link(self.model.url(dead, target), self.model.origin(dead) + target, "a")
        if r < self.cfg.cross_host_link_fraction and len(hosts) > 1:
            other = hosts[_skewed(rng, len(hosts))]
            topics = self.cfg.topics
            if topics and self.host.index >= 0 and rng.random() < TOPIC_LOCALITY:
                # The same topic: the host of that topic at or before the one drawn.
                index = other.index - other.index % topics + self.host.index % topics
                other = hosts[index if index < len(hosts) else index - topics]
            if other.index == self.host.index:
                other = hosts[(other.index + 1) % len(hosts)]
            target = backbone_path(_skewed(rng, other.backbone_pages))
            href = self._absolute(other.name, target)
            if rng.random() < 0.1:
                href += "#top"
            return Link(self.model.url(other.name, target), href, "a")
        nofollow = rng.random() < 0.05
        if rng.random() < 0.03:
            target = rng.choice(_LEAVES)
        else:
            target = backbone_path(_skewed(rng, self.host.backbone_pages))
        return self._same_host(target, "a", nofollow)


# Per-host pages that random links sometimes point into, so robots rules have
# something to refuse and the crawler meets the odd 404.
_LEAVES = (
    "/data.bin",
    "/private/1.html",
    "/private/open/info.html",
    "/search?q=1",
    "/search?q=2",
    "/nowhere.html",
)


def _backbone_index(path: str, pages: int) -> int | None:
    """The ``k < pages`` with ``backbone_path(k) == path``, or None."""
    if path == "/":
        return 0
    digits = "".join(c if c.isdigit() else " " for c in path).split()
    if not digits:
        return None
    if len(digits[-1]) > 18:
        return None  # far beyond any page, and int() refuses very long digit strings
    k = int(digits[-1])
    return k if 0 < k < pages and backbone_path(k) == path else None


def _skewed(rng: random.Random, n: int) -> int:
    """An index in [0, n) where low indices are much more likely (Zipf-like)."""
    return min(n - 1, int(n * rng.random() ** 3))


@functools.lru_cache(maxsize=65536)  # popular targets repeat across every page of a directory
def _relative_ref(base_path: str, target: str) -> str:
    """The shortest relative reference from a page at ``base_path`` to ``target``.

    Both are absolute paths, optionally with ``?query``. Gives ``?query`` when only
    the query differs, ``../`` runs when directories differ, ``./`` for the base
    directory itself.
    """
    bpath = base_path.split("?", 1)[0]
    tpath, sep, query = target.partition("?")
    if tpath == bpath and sep:
        return sep + query
    bdirs = bpath.split("/")[1:-1]
    *tdirs, tfile = tpath.split("/")[1:]
    common = 0
    while common < min(len(bdirs), len(tdirs)) and bdirs[common] == tdirs[common]:
        common += 1
    ref = "../" * (len(bdirs) - common) + "".join(d + "/" for d in tdirs[common:]) + tfile
    return (ref or "./") + sep + query


def _pld_name(i: int, tld: str) -> str:
    return f"site{i - max(0, i % 5 - 2)}.{tld}"


def _host_name(i: int, tld: str) -> str:
    if i % 5 == 3:
        return f"www.site{i - 1}.{tld}"
    if i % 5 == 4:
        return f"blog.site{i - 2}.{tld}"
    return f"site{i}.{tld}"


def _backbone_sizes(config: SimWebConfig) -> list[int]:
    """Pages per host: heavy-tailed (Pareto, capped) with mean ≈ pages_per_host."""
    rng = random.Random(f"{config.seed}:sizes")
    weights = [min(rng.paretovariate(1.5), 20.0) for _ in range(config.hosts)]
    mean = sum(weights) / len(weights)
    return [max(1, round(config.pages_per_host * w / mean)) for w in weights]
