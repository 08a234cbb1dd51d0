"""Bytes of the synthetic web: HTML for pages, random bytes for binary and garbage.

Every byte is a function of the model's config and the page's host and path, so
the same seed serves the same bytes. HTML is rendered from ``Page.links``, which
keeps the served markup and the oracle in agreement by construction.
"""

from __future__ import annotations

import functools
import gzip
import random
from html import escape

from drumbeat.simweb.model import TOPIC_WORDS, Link, Page, SimWebModel

_VOCABULARY = [
    "crawl",
    "polite",
    "frontier",
    "queue",
    "budget",
    "spam",
    "trap",
    "server",
    "host",
    "domain",
    "page",
    "link",
    "anchor",
    "robot",
    "delay",
    "fetch",
    "parse",
    "archive",
    "record",
    "bucket",
    "disk",
    "memory",
    "batch",
    "sort",
    "merge",
    "check",
    "update",
    "seen",
    "unique",
    "fresh",
    "stale",
    "index",
    "graph",
    "degree",
    "rank",
    "popular",
    "rare",
    "random",
    "steady",
    "river",
    "stone",
    "cloud",
    "lantern",
    "harbor",
    "meadow",
    "copper",
    "violet",
    "orbit",
    "signal",
    "pattern",
]
_FILLER = " ".join(random.Random(7).choices(_VOCABULARY, k=40_000))  # ≈ 270 KB
_NOT_FOUND = b"<!DOCTYPE html><html><head><title>404</title></head><body>not found</body></html>"
_BODY_CACHE = 4096
_LINKS_PER_PARAGRAPH = 3


class Renderer:
    """Renders (and caches) the body of any page of one model."""

    def __init__(self, model: SimWebModel) -> None:
        self.model = model
        self._body = functools.lru_cache(maxsize=_BODY_CACHE)(self._render)

    def body(self, page: Page) -> bytes:
        """The response body of ``page`` (empty for redirects)."""
        return self._body(page.host, page.path)

    def _render(self, host: str, path: str) -> bytes:
        page = self.model.page(host, path)
        rng = random.Random(f"{self.model.config.seed}:body:{host}:{path}")
        size = self.model.config.page_bytes
        if page.kind == "binary":
            return rng.randbytes(4096)
        if page.kind == "garbage":
            return rng.randbytes(max(64, size // 4))
        if page.kind == "redirect":
            return b""
        if page.kind == "missing":
            return _NOT_FOUND
        if page.kind != "html":
            return _xml(page)
        if page.article is not None:
            return _article(page, size, self.model.config.seed).encode("utf-8")
        return _html(page, size, rng).encode("utf-8")


_SITEMAP_NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _xml(page: Page) -> bytes:
    """A sitemap (plain, index, gzip or cut short by a fault) or an RSS feed."""
    entries = [link.url or link.href for link in page.links] + list(page.unfollowed)
    if page.kind == "feed":
        items = "".join(
            f"<item><title>{i}</title><link>{escape(url)}</link></item>"
            for i, url in enumerate(entries)
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel>'
            f"<title>{escape(page.host)}</title><link>{escape(page.url)}</link>{items}"
            "</channel></rss>\n"
        ).encode()
    root, record = (
        ("sitemapindex", "sitemap") if page.kind == "sitemap_index" else ("urlset", "url")
    )
    body = "".join(
        f"<{record}><loc>{escape(url)}</loc><lastmod>2026-01-0{i % 9 + 1}</lastmod></{record}>"
        for i, url in enumerate(entries)
    )
    text = f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} {_SITEMAP_NS}>{body}</{root}>\n'
    if page.kind == "sitemap_broken":
        text = text.replace(f"</{root}>", f"<{record}><loc>&undefined;</lo></{root}>")
    data = text.encode()
    return gzip.compress(data, mtime=0) if page.kind == "sitemap_gz" else data


def _html(page: Page, size: int, rng: random.Random) -> str:
    head = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(page.host)} {escape(page.path)}</title>",
    ]
    if page.meta_nofollow:
        head.append('<meta name="robots" content="nofollow">')
    if page.base_href:
        head.append(f'<base href="{escape(page.base_href)}">')
    anchors: list[str] = []
    extras: list[str] = []
    frames: list[str] = []
    for i, link in enumerate(page.links):
        href = escape(link.href)
        if link.kind == "canonical":
            head.append(f'<link rel="canonical" href="{href}">')
        elif link.kind == "feed":
            head.append(f'<link rel="alternate" type="application/rss+xml" href="{href}">')
        elif link.kind == "refresh":
            head.append(f'<meta http-equiv="refresh" content="0; url={href}">')
        elif link.kind == "frame":
            frames.append(f'<frame src="{href}">')
        elif link.kind == "iframe":
            extras.append(f'<iframe src="{href}" title="frame {i}"></iframe>')
        elif link.kind == "area":
            area = f'<area shape="rect" coords="0,0,10,10" href="{href}" alt="area {i}">'
            extras.append(f'<map name="m{i}">{area}</map>')
        else:
            anchors.append(_anchor(link, href, i))
    head.append("</head>")
    if frames:
        # A frameset document has no body, hence no filler.
        return "\n".join(head) + "\n<frameset>" + "".join(frames) + "</frameset></html>\n"
    title = f"<body><h1>{escape(page.host)}{escape(page.path)}</h1>"
    if page.topic is not None:  # SimWebConfig.topics: the page is about its host's topic
        words = " ".join(TOPIC_WORDS[page.topic])
        title += f"<p>This page is about {words}: more {words}.</p>"
    tail = "".join(extras) + "</body></html>\n"
    fixed = sum(map(len, head)) + len(title) + len(tail) + sum(map(len, anchors))
    step = _LINKS_PER_PARAGRAPH
    groups = [anchors[i : i + step] for i in range(0, len(anchors), step)] or [[]]
    per_paragraph = max(0, size - fixed - 8 * len(groups)) // len(groups)
    paragraphs = [f"<p>{_filler(rng, per_paragraph)} {' '.join(group)}</p>" for group in groups]
    return "\n".join(head) + "\n" + title + "\n".join(paragraphs) + tail


_MONTHS = ["January", "March", "May", "July", "September", "November"]
_ADS = ["buy", "cheap", "offer", "today", "store", "deal", "sale", "click", "free", "win"]
_WORDS_PER_PARAGRAPH = 60


def _article(page: Page, size: int, seed: int) -> str:
    """A planted duplicate (see SimWebConfig.duplicate_articles): the article's text,
    a function of its original's URL; the "near" copy has another date and ad block."""
    assert page.article is not None
    rng = random.Random(f"{seed}:article:{page.article}")
    words = rng.choices(_VOCABULARY, k=max(100, size // 8))
    near = random.Random(f"{seed}:article:{page.article}:{page.article_variant == 'near'}")
    date = f"{near.randint(1, 28)} {near.choice(_MONTHS)} {near.randint(2000, 2030)}"
    ad = " ".join(near.choices(_ADS, k=8))
    step = _WORDS_PER_PARAGRAPH
    paragraphs = [f"<p>{' '.join(words[i : i + step])}</p>" for i in range(0, len(words), step)]
    paragraphs.insert(len(paragraphs) // 2, f'<div class="ad">{ad}</div>')
    title = escape(page.article)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head>\n<body><h1>{title}</h1>"
        f'<p class="date">Posted on {date}</p>\n' + "\n".join(paragraphs) + "</body></html>\n"
    )


def _anchor(link: Link, href: str, i: int) -> str:
    rel = ' rel="nofollow"' if link.nofollow else ""
    return f'<a href="{href}"{rel}>link {i}</a>'


def _filler(rng: random.Random, n: int) -> str:
    if n >= len(_FILLER):
        return (_FILLER * (n // len(_FILLER) + 1))[:n]
    start = rng.randrange(len(_FILLER) - n)
    return _FILLER[start : start + n]
