"""Frontier scenarios of the synthetic web: spam farms, calendar traps and one big site.

These are the "web monsters" of IRLbot §VI: PLDs whose pages never end, against which a
plain BFS frontier drowns, and one large legitimate PLD that a budgeted crawler should
still crawl deeply. Each is a pure function of the config and the requested name or path,
so the endless parts are generated per request and never enumerated.

* **Spam farm** ``k`` is the PLD ``spamfarm{k}.{tld}``. It answers for any name below it
  (``*.spamfarm{k}.{tld}``, any depth, and the apex) and for any path: every page links
  to ``spam_links_per_page`` URLs of the same farm, most of them on subdomains never seen
  before. Its hosts spread over ``spam_ips`` addresses of its own.
* **Calendar trap** ``k`` is the host ``calendar{k}.{tld}``: ``/`` links to
  ``/cal/2024/01``; ``/cal/Y/MM`` links to the previous and next month and to each of its
  days ``/cal/Y/MM/DD``; a day links to the previous and next day and to its month. Years
  run through every integer (``/cal/-3/07`` exists), so the chain has no end either way.
* **Big site** is the host ``bigsite.{tld}`` with ``big_site_pages`` backbone pages laid
  out like an ordinary host's (see ``model.backbone_path``).

* **Spammed hosts** (``spammed_hosts``) are ordinary ring hosts whose pages carry spam
  comments: :func:`spammed_host_indices` says which, :func:`comment_spam_targets` where each
  page's spam links go. IRLbot §VI.A: spam aims at "inflating the page rank of target
  hosts", and comment, guestbook and wiki spam (or links injected into hacked pages) is how
  it gets links from pages that spammers do not own. Spammers aim at pages that are
  themselves well linked, so the spammed hosts are popular ones: the ring's low indices,
  which ``model._skewed`` makes the likeliest targets of cross-host links.

Each calendar and the big site sits on one address of its own; scenario addresses are
``127.2.{j // 254}.{j % 254 + 1}``, spam farms first, then calendars, then the big site.
"""

from __future__ import annotations

import random
import re
import zlib
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # model imports this module
    from drumbeat.simweb.model import SimWebConfig

PLDClass = Literal["legit", "spam", "trap", "big"]
# PLDs whose pages never end: the oracle records their URLs instead of walking them.
ENDLESS: frozenset[PLDClass] = frozenset(("spam", "trap"))

CALENDAR_START = (2024, 1)
_SPAM_WORDS = ("cheap", "best", "free", "casino", "pills", "loans", "deals", "win", "top", "hot")
_NEW_HOST_SHARE = 0.6  # of a spam page's links; the rest are new paths on its own host
_DEEP_NAME_SHARE = 0.2  # of new spam hosts, two labels below the farm instead of one
_CAL_PATH = re.compile(r"/cal/(-?\d{1,18})/(\d\d)(?:/(\d\d))?")


def spam_farm_name(k: int, tld: str) -> str:
    return f"spamfarm{k}.{tld}"


def calendar_name(k: int, tld: str) -> str:
    return f"calendar{k}.{tld}"


def big_site_name(tld: str) -> str:
    return f"bigsite.{tld}"


def special_ip(j: int) -> str:
    """Scenario address ``j`` (see module doc)."""
    return f"127.2.{j // 254}.{j % 254 + 1}"


def special_ip_count(config: SimWebConfig) -> int:
    return (
        config.spam_farms * config.spam_ips
        + config.calendar_traps
        + (1 if config.big_site_pages else 0)
    )


def spam_pattern(tld: str) -> re.Pattern[str]:
    """Matches every lower-case name of any spam farm; group 1 is the farm number."""
    return re.compile(r"(?:[a-z0-9-]{1,63}\.)*spamfarm(0|[1-9]\d{0,8})\." + re.escape(tld))


def spam_ip_index(config: SimWebConfig, farm: int, name: str) -> int:
    """Which scenario address serves ``name`` of spam farm ``farm``.

    crc32 rather than ``hash()``: string hashes are salted per process, and the DNS
    answer must not change between runs.
    """
    return farm * config.spam_ips + zlib.crc32(name.encode()) % config.spam_ips


def spam_targets(config: SimWebConfig, apex: str, host: str, path: str) -> list[tuple[str, str]]:
    """(host, path) of every link of the page at ``host`` + ``path`` of the farm ``apex``.

    Drawn from a space of millions of names and paths, so nearly all are new to a crawler.
    """
    rng = random.Random(f"{config.seed}:spam:{host}:{path}")
    targets = []
    for _ in range(config.spam_links_per_page):
        target_host = host
        if rng.random() < _NEW_HOST_SHARE:
            label = f"{rng.choice(_SPAM_WORDS)}{rng.randrange(1_000_000)}"
            if rng.random() < _DEEP_NAME_SHARE:
                label = f"{rng.choice(_SPAM_WORDS)}.{label}"
            target_host = f"{label}.{apex}"
        target_path = f"/{rng.choice(_SPAM_WORDS)}/{rng.randrange(1_000_000)}.html"
        targets.append((target_host, target_path))
    return targets


def spammed_host_indices(config: SimWebConfig) -> list[int]:
    """Ring host indices whose pages carry comment spam: ``5, 10, 15, ...`` (the first
    ``config.spammed_hosts`` of them). Popular (low index) but past host 0 and the hosts of
    ``seeds()``, one per PLD (``i % 5 == 0`` is the apex ``site{i}`` of its own PLD), and
    allow-all in robots.txt (``robots.CYCLE`` at 0 and 5)."""
    return list(range(5, config.hosts, 5))[: config.spammed_hosts]


def comment_spam_targets(
    config: SimWebConfig, apex: str, host: str, path: str
) -> list[tuple[str, str]]:
    """(host, path) of the spam links appended to ``path`` of the spammed ring host
    ``host``: ``spammed_links_per_page`` URLs, each on a fresh subdomain of the farm
    ``apex`` (a spam comment advertises its own name), drawn from millions of names."""
    rng = random.Random(f"{config.seed}:comment-spam:{host}:{path}")
    targets: list[tuple[str, str]] = []
    for _ in range(config.spammed_links_per_page):
        label = f"{rng.choice(_SPAM_WORDS)}{rng.randrange(1_000_000)}"
        page = f"/{rng.choice(_SPAM_WORDS)}/{rng.randrange(1_000_000)}.html"
        targets.append((f"{label}.{apex}", page))
    return targets


def calendar_targets(path: str) -> list[str] | None:
    """Same-host paths a calendar page links to; None when ``path`` is not a page (404)."""
    if path == "/":
        return [_month_path(*CALENDAR_START)]
    match = _CAL_PATH.fullmatch(path)
    if match is None:
        return None
    year_text, month_text, day_text = match.groups()
    year, month = int(year_text), int(month_text)
    if str(year) != year_text or not 1 <= month <= 12:
        return None  # one spelling per page: no "-0", "007" or month 13
    if day_text is None:
        days = [_day_path(year, month, d) for d in range(1, _days_in(year, month) + 1)]
        around = [_month_path(*_add_month(year, month, step)) for step in (-1, 1)]
        return around + days
    day = int(day_text)
    if not 1 <= day <= _days_in(year, month):
        return None
    prev, nxt = _add_day(year, month, day, -1), _add_day(year, month, day, 1)
    return [_day_path(*prev), _day_path(*nxt), _month_path(year, month)]


def _month_path(year: int, month: int) -> str:
    return f"/cal/{year}/{month:02d}"


def _day_path(year: int, month: int, day: int) -> str:
    return f"/cal/{year}/{month:02d}/{day:02d}"


def _add_month(year: int, month: int, step: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + step
    return index // 12, index % 12 + 1


def _add_day(year: int, month: int, day: int, step: int) -> tuple[int, int, int]:
    """``step`` is -1 or 1."""
    day += step
    if day < 1:
        year, month = _add_month(year, month, -1)
        day = _days_in(year, month)
    elif day > _days_in(year, month):
        year, month = _add_month(year, month, 1)
        day = 1
    return year, month, day


def _days_in(year: int, month: int) -> int:
    # Proleptic Gregorian for every integer year; the calendar module stops at year 1.
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31
