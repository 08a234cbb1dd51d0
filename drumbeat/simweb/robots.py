"""robots.txt variants of the synthetic web and the oracle's own matcher.

The matcher is deliberately independent of protego (the crawler's parser), so a
test can hold one against the other. Semantics are the common (Google / RFC 9309)
ones, restricted to what the variants below use:

* only the ``User-agent: *`` group applies to the crawler;
* a pattern matches a path (with its query) from the start; ``*`` matches any run
  of characters and a trailing ``$`` anchors at the end;
* the longest matching pattern wins; no match means allowed. The variants never
  put an Allow and a Disallow of equal length on the same path, so tie-breaking
  is not exercised.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

RobotsVariant = Literal[
    "allow_all",  # 200, allows everything
    "private",  # 200, Disallow: /private/
    "wildcard",  # 200, `*` and `$` rules, an Allow inside a Disallow, a foreign group
    "crawl_delay",  # 200, Crawl-delay plus Disallow: /private/
    "missing",  # 404: crawl everything
    "error",  # 500: crawl nothing on the host
    "garbage",  # 200 with random bytes: no usable rule, crawl everything
]

# Host i gets CYCLE[i % len(CYCLE)]: host 0 is always allow_all (it carries the
# special pages), and any web of 10 or more hosts has every variant.
CYCLE: tuple[RobotsVariant, ...] = (
    "allow_all",
    "private",
    "allow_all",
    "wildcard",
    "crawl_delay",
    "allow_all",
    "missing",
    "private",
    "error",
    "garbage",
)


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``Allow``/``Disallow`` line of the ``*`` group."""

    allow: bool
    pattern: str

    def matches(self, path: str) -> bool:
        return _compile(self.pattern).match(path) is not None


@dataclass(frozen=True, slots=True)
class RobotsFile:
    """What ``/robots.txt`` of a host serves, and what it means for a crawler."""

    variant: RobotsVariant
    status: int
    body: bytes
    rules: tuple[Rule, ...]
    crawl_delay: float | None
    sitemaps: tuple[str, ...] = ()  # the canonical URLs of its Sitemap lines

    @property
    def fetch_nothing(self) -> bool:
        """True when a careful crawler fetches no page of the host (5xx robots)."""
        return self.status >= 500

    def allows(self, path: str) -> bool:
        """Whether a page at ``path`` (path plus ``?query``) may be fetched."""
        if self.fetch_nothing:
            return False
        best: Rule | None = None
        for rule in self.rules:
            if rule.matches(path) and (best is None or len(rule.pattern) > len(best.pattern)):
                best = rule
        return best is None or best.allow


def robots_file(variant: RobotsVariant, crawl_delay_s: float, rng: random.Random) -> RobotsFile:
    """Build the robots.txt of one variant; ``rng`` only feeds the garbage body."""
    if variant == "allow_all":
        return _text(variant, "User-agent: *\nDisallow:\n", ())
    if variant == "private":
        return _text(variant, "User-agent: *\nDisallow: /private/\n", (Rule(False, "/private/"),))
    if variant == "wildcard":
        rules = (
            Rule(False, "/*.bin$"),
            Rule(False, "/*?q="),
            Rule(False, "/private/"),
            Rule(True, "/private/open/"),
        )
        # The first group must be ignored: it names another robot.
        text = "User-agent: badbot\nDisallow: /\n\nUser-agent: *\n" + "".join(
            f"{'Allow' if r.allow else 'Disallow'}: {r.pattern}\n" for r in rules
        )
        return _text(variant, text, rules)
    if variant == "crawl_delay":
        text = f"User-agent: *\nCrawl-delay: {crawl_delay_s:g}\nDisallow: /private/\n"
        return _text(variant, text, (Rule(False, "/private/"),), crawl_delay_s)
    if variant == "missing":
        return RobotsFile(variant, 404, b"not found\n", (), None)
    if variant == "error":
        return RobotsFile(variant, 500, b"internal error\n", (), None)
    # Garbage: no newline-separated "Disallow:" can survive in random bytes
    # with any meaningful chance, so the file allows everything.
    return RobotsFile(variant, 200, rng.randbytes(512), (), None)


def _text(
    variant: RobotsVariant, text: str, rules: tuple[Rule, ...], delay: float | None = None
) -> RobotsFile:
    return RobotsFile(variant, 200, text.encode("ascii"), rules, delay)


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        anchored = pattern.endswith("$")
        body = pattern[:-1] if anchored else pattern
        regex = ".*".join(re.escape(part) for part in body.split("*"))
        compiled = re.compile(regex + ("$" if anchored else ""))
        _PATTERNS[pattern] = compiled
    return compiled
