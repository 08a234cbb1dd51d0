"""``drumbeat bench frontier``: STAR + BEAST against plain BFS, Manager RSS, BEAST disk I/O.

Three measurements, one run (issue 4, "Benchmarks"):

1. **Spam share.** One synthetic web (``drumbeat.simweb`` in a subprocess) with ordinary
   hosts, spam farms, calendar traps and a big site, is crawled twice from the same seeds
   with the same politeness by ``drumbeat crawl --max-pages N`` (each in its own process
   and state dir): drumbeat as configured (STAR budgets + BEAST), and plain BFS: the same
   crawler with ``budget_default = budget_max = 10**9``, so every PLD fits in the next
   BEAST queue and BEAST is one FIFO, and ``beast_turn_s = 0`` (a FIFO has no turns to
   pace). Reported per contender, from its crawl.log: the share of
   the first N page fetches per PLD class (spam, trap, big, legit), by tenth of N, pages/s
   and wall time; and every request up to the N-th page fetch, robots.txt included (a
   spam host's robots.txt is a request spent on spam: IRLbot §II.B (b), the resolver
   "succumbs to the rate at which new hostnames are dynamically created"), with a
   breakdown per spam and trap PLD (pages, robots.txt, hosts, pages linked from legit
   pages, pages by tenth of N). Targets: drumbeat <= 5 % spam + trap, BFS >= 50 %.

   The web (choices made to resemble a real crawl; none is known to the crawler):

   * *Depth*: IRLbot §VI.A: BFS meets "a quickly branching site that will start to
     dominate the queue after 3-4 levels in the BFS tree". N must therefore reach past
     BFS level 3 of the web, and the levels grow with the seed count: spam dominates
     the URLs first found at level 3 and beyond. Hence few seeds (``Plan.seeds``: 1
     full, 2 quick) and a full N that reaches well past level 3; quick's N reaches into
     level 3 and stays within a minute.
   * *Curated seeds* (:func:`seed_urls`): home pages spread over the ordinary hosts,
     leaving out the hosts that link straight to a farm or calendar and the spammed ones:
     the crawl meets spam through links, not in its seed list.
   * *Comment spam on popular hosts* (``SPAMMED_HOSTS``, ``SPAMMED_LINKS``; simweb's
     ``spammed_hosts``): every page of 16 popular ordinary hosts carries 50 links to fresh
     subdomains of a farm, as blog comments, guestbooks and hacked pages do (spam aims at
     "inflating the page rank of target hosts", §VI.A, from pages spammers do not own).
     That makes spam reachable early and in bulk, while each farm's PLD in-degree stays at
     2 + 8 = 10 = ``budget_indegree_floor``: STAR keys on PLD in-degree, and a farm still
     has few PLDs linking to it.
   * *Spam farms on few servers* (``FARM_IPS`` addresses each), as real farms with
     millions of subdomains are (IRLbot §VII.A: many virtual hosts on one server are
     what τs is for); ordinary hosts share 16 addresses.
   * *Link-farm pages are long link lists* (``SPAM_LINKS`` links a page, nearly all to
     URLs never seen, most on new subdomains): the farm's share of the link graph grows
     by that factor per level, IRLbot §VI.A's "quickly branching site".
   * *RAM small against N* (``Plan.frontier_ram_urls``, the same for both crawls): IRLbot's
     problem is a crawl whose rate-limited URLs "do not fit into RAM" (§I.C), so its queues
     are on disk and RAM holds a sliver of what it fetches. The scheduler's RAM is a window
     over BEAST's order: inside it, a host whose robots rules are known is fetched at its
     delay while URLs of new hosts wait for robots.txt, and every spam page is on a new
     host, so the wider the window against N, the further legit URLs overtake spam and the
     less the BFS contender is a BFS. Full plan: 1,000 URLs, 5 % of N (quick's 1,000 is
     67 % of its N); this window was the lever that made BFS meet its target.

   Why this plan (the runs behind it are in docs/benchmarks.md): seeds that link to
   every farm, or many seeds, keep BFS from ever leaving the shallow levels, so it
   never meets the spam; fewer seeds let it. Quick's BFS share is noisy, as each spam
   page is on a new subdomain whose robots.txt is fetched first, and only
   ``frontier_ram_urls / 10`` hosts wait for robots.txt at a time, while ordinary hosts
   are fetched from RAM at their delay. A larger N outruns this web's legitimate part
   (drumbeat then goes on at its spam and trap budgets), and a bigger web for it only
   moves BFS level 3 later, past which BFS's share levels off (the robots loop above):
   so the plan stays at 1,000 hosts and N = 20,000, which keeps the web's legit part
   above N. A smaller RAM window for quick lowered BFS's share (robots hosts stay at
   their floor), so quick keeps 1,000.
2. **Manager RSS with queued URLs.** One fresh process per size builds a ``Manager`` on a
   temp state dir (``LocalTaskQueue``, ``CrawlLog``, DNS from a loopback ``SimDNS`` that
   answers 127.1.0.1 for any name), admits N unique URLs over 10 000 hosts and 5 000 PLDs
   through URL-seen into BEAST, records allow-all robots for every origin and runs the feed
   path until the scheduler's RAM is at its bound. 10 000 hosts = the default robots RAM
   LRU, so routing measures the scheduler, not per-URL RobotsCache DRUM checks. Peak (VmHWM),
   current and *live* RSS (current after glibc's ``malloc_trim(0)``) per size, URL-seen's
   merge rounds, and the RAM the configuration grants the DRUMs; target: RSS at 10 M <= 1.2x
   RSS at 100 k. What grows is DRUM's configured memory coming into use: URL-seen's record
   buffer (a quarter of ``urlseen_ram_bytes``) is touched only as it fills, which 100 k URLs
   do not, and its merge rounds work on buckets that are only full at the larger sizes
   (their transient arrays are bounded by ``urlseen_ram_bytes``, and glibc may keep the
   freed pages: current minus live).
3. **BEAST disk I/O per page vs Theorem 7.** From each crawl of part 1, BEAST's bytes read
   and written (the checkpoint's ``frontier.beast`` queue commits) per page fetched, next to
   Theorem 7's bound per page, 2b(2L-1): b = mean BEAST record (payload + frame) in bytes,
   L = unique URLs admitted per page.

4. **Crawl order and focus** (issue 51; survey §4.1-4.2). Another web, of ordinary hosts
   only (finite, so every page's true in-degree is known: simweb's model knows every
   page's links) whose hosts are about one of four topics and link mostly within it
   (simweb's ``topics``), is crawled to N pages once per order policy
   (``--order bfs | indegree | opic | larger-sites``) and once focused on topic 0
   (``--focus drumbeat.focus.keywords:score`` with that topic's words), same seeds, same
   politeness and RAM. Reported per contender, from its crawl.log: the in-degree-weighted
   pages of its first N fetches (sum of their true in-degrees, links from every page
   the crawler may fetch, rel=nofollow not counted) against the most any N fetchable
   pages have, their mean in-degree, and the share of them on topic 0 (against the share
   of the web's fetchable pages). The scheduler's RAM is small against N
   (``Plan.order_ram_urls``), so that BEAST's order, which the policies change, is what
   the crawl follows (a wide window lets politeness reorder everything).

``--quick`` is a smaller web and N, and sizes 100 k and 1 M; ``--tiny`` (tests) smaller
still. ``--order-only`` runs part 4 alone. ``--json`` prints the same figures as one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from drumbeat.frontier.beast import theorem7_bound
from drumbeat.frontier.diskqueue import FRAME_SIZE, DiskQueue, QueueState
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.simweb.model import TOPIC_WORDS, SimWebConfig, SimWebModel
from drumbeat.simweb.scenarios import PLDClass, spammed_host_indices

if TYPE_CHECKING:
    from rich.table import Table

CLASSES: tuple[PLDClass, ...] = ("spam", "trap", "big", "legit")
BFS_BUDGET = 10**9  # every PLD fits in the next BEAST queue: one FIFO
HOST_DELAY_S = 1.0
IP_DELAY_S = 0.01
# Settings both crawls share; checkpoints rarely (only the final one is read).
CRAWL_TOML = "checkpoint_interval_s = 30.0\n"
RSS_BATCH = 50_000  # URLs per _admit call; small so the harness's own lists barely count
RSS_FEEDS = 40  # feed rounds at most; RAM is usually full after a handful
B_SAMPLE = 20_000  # BEAST records read per queue to measure b
# The web's realism choices (module doc, "The web"):
FARM_IPS = 2  # addresses per spam farm: farms sit on few servers
SPAM_LINKS = 100  # links per spam page: link-farm pages are long link lists
# Comment-spammed popular hosts, 8 per farm: with the 2 hosts that link each farm's apex,
# a farm's PLD in-degree stays <= budget_indegree_floor (10), so STAR gives it B0.
SPAMMED_HOSTS = 16
SPAMMED_LINKS = 50  # spam links on every page of a spammed host (a busy guestbook/blog)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one mode measures: the web and N of part 1, the sizes of part 2."""

    web: SimWebConfig
    pages: int  # N
    seeds: int  # legit home pages the crawls start from (see seed_urls)
    frontier_ram_urls: int  # for both crawls of part 1 (see _ram_note)
    rss_sizes: tuple[int, ...]
    rss_hosts: int  # hosts the queued URLs spread over (PLDs: half of that)
    order_web: SimWebConfig  # part 4's web: ordinary hosts about topics
    order_pages: int  # part 4's N
    order_ram_urls: int = 200  # part 4's frontier_ram_urls (see the module docstring)
    order_host_delay_s: float = HOST_DELAY_S  # part 4's host delay (tiny: shorter)


def _web(
    hosts: int,
    pages_per_host: int,
    ips: int,
    farms: int,
    farm_ips: int,
    links: int,
    traps: int,
    big: int,
    spammed: int,
) -> SimWebConfig:
    return SimWebConfig(
        seed=3,
        hosts=hosts,
        ips=ips,
        pages_per_host=pages_per_host,
        spam_farms=farms,
        spam_ips=farm_ips,
        spam_links_per_page=links,
        calendar_traps=traps,
        big_site_pages=big,
        spammed_hosts=spammed,
        spammed_links_per_page=SPAMMED_LINKS,
    )


def _topic_web(hosts: int, pages_per_host: int, ips: int) -> SimWebConfig:
    return SimWebConfig(seed=3, hosts=hosts, ips=ips, pages_per_host=pages_per_host, topics=4)


PLANS = {
    "full": Plan(
        _web(1000, 20, 16, 2, FARM_IPS, SPAM_LINKS, 2, 5000, SPAMMED_HOSTS),
        20000,
        1,
        1000,
        (100_000, 1_000_000, 10_000_000),
        10_000,
        _topic_web(1000, 20, 16),
        5000,
    ),
    "quick": Plan(
        _web(300, 20, 16, 2, FARM_IPS, SPAM_LINKS, 2, 2000, SPAMMED_HOSTS),
        1500,
        2,
        1000,
        (100_000, 1_000_000),
        10_000,
        _topic_web(300, 20, 16),
        1500,
    ),
    "tiny": Plan(
        _web(40, 6, 4, 1, FARM_IPS, SPAM_LINKS, 1, 100, 2),
        80,
        4,
        200,
        (10_000,),
        1_000,
        _topic_web(40, 6, 4),
        80,
        50,
        0.25,
    ),
}
# Part 4's contenders: each order policy, and a crawl focused on topic FOCUS_TOPIC.
ORDER_CONTENDERS = ("bfs", "indegree", "opic", "larger-sites", "focus")
FOCUS_TOPIC = 0


# ------------------------------------------------------------------ part 1: spam share


def _start_web(config: SimWebConfig) -> tuple[subprocess.Popen[str], dict]:
    """Serve the web from its own process (the crawler gets the other core)."""
    cmd = [
        sys.executable,
        "-m",
        "drumbeat.simweb",
        "--hosts",
        str(config.hosts),
        "--ips",
        str(config.ips),
        "--pages-per-host",
        str(config.pages_per_host),
        "--seed",
        str(config.seed),
        "--spam-farms",
        str(config.spam_farms),
        "--spam-ips",
        str(config.spam_ips),
        "--spam-links-per-page",
        str(config.spam_links_per_page),
        "--calendar-traps",
        str(config.calendar_traps),
        "--big-site-pages",
        str(config.big_site_pages),
        "--spammed-hosts",
        str(config.spammed_hosts),
        "--spammed-links-per-page",
        str(config.spammed_links_per_page),
        "--topics",
        str(config.topics),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        raise RuntimeError(f"simweb did not start (exit {proc.returncode})")
    return proc, json.loads(line)


def seed_urls(model: SimWebModel, n: int) -> list[str]:
    """``n`` legit home pages spread evenly over the ordinary hosts whose robots.txt lets
    them be crawled, leaving out the hosts that link straight to a spam farm or calendar
    (``model.seeds()`` and their partners half the ring away) and the comment-spammed
    hosts: a seed list is curated, and the crawl meets spam through links, as IRLbot's did."""
    linkers = {name for _, hosts in model._endless_linkers for name in hosts}
    spammed = set(spammed_host_indices(model.config))
    homes = [
        model.url(h.name, "/")
        for h in model.hosts
        if h.robots_variant != "error" and h.index not in linkers | spammed
    ]
    step = max(1, len(homes) // max(1, n))
    return homes[::step][:n]


def _crawl(
    name: str,
    seeds: list[str],
    info: dict[str, Any],
    state: Path,
    pages: int,
    toml: str,
    env: dict[str, str] | None = None,
    host_delay_s: float = HOST_DELAY_S,
) -> float:
    """Run ``drumbeat crawl`` to ``pages`` pages; returns the wall time."""
    config = state.parent / f"{name}.toml"
    config.write_text(toml, encoding="utf-8")
    cmd = [
        sys.executable,
        "-m",
        "drumbeat",
        "crawl",
        *seeds,
        "--state",
        str(state),
        "--dns-server",
        info["dns"],
        "--allow-loopback",
        "--host-delay",
        str(host_delay_s),
        "--ip-delay",
        str(IP_DELAY_S),
        "--max-pages",
        str(pages),
        "--no-progress",
        "--config",
        str(config),
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"{name} crawl failed: {done.stderr.strip()[-500:]}")
    return wall


def _answered(state: Path) -> list[dict[str, Any]]:
    """Requests that got an HTTP response (page fetches and robots.txt fetches), in the
    order the crawl log has them."""
    out = []
    with open(state / "crawl.log", encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            if entry["status"] is not None and entry["kind"] in ("page", "robots"):
                out.append(entry)
    return out


def _tenths(flags: list[bool]) -> list[float]:
    """The share of True in each tenth of ``flags``."""
    tenth = max(len(flags) // 10, 1)
    return [
        sum(flags[i : i + tenth]) / tenth for i in range(0, tenth * 10, tenth) if i < len(flags)
    ]


def _shares(model: SimWebModel, answered: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Part 1's figures for one crawl: the first ``n`` page fetches by PLD class, and every
    request up to the ``n``-th page fetch (robots.txt included) by the class of its host."""
    pages = [e for e in answered if e["kind"] == "page"]
    first = pages[:n]
    classes = [model.pld_class(e["url"]) for e in first]
    counts = Counter(classes)
    total = max(len(first), 1)
    endless = [c in ("spam", "trap") for c in classes]
    # Requests: everything answered up to (and with) the n-th page fetch.
    window = answered
    if len(pages) >= n:
        seen = 0
        for i, e in enumerate(answered):
            seen += e["kind"] == "page"
            if seen == n:
                window = answered[: i + 1]
                break
    req_classes = [model.pld_class(e["url"]) for e in window]
    req_counts = Counter(req_classes)
    robots = [c for e, c in zip(window, req_classes) if e["kind"] == "robots"]
    req_total = max(len(window), 1)
    # Where spam and trap requests went: which PLD, how many of its hosts, robots.txt or
    # pages, in which tenth of the first n pages, linked from a legit page or its own.
    breakdown: dict[str, dict] = {}

    def bucket(entry: dict[str, Any], cls: str) -> dict[str, Any]:
        host = model.host(urlsplit(entry["url"]).hostname or "")
        assert host is not None  # spam and trap URLs are hosts of the web
        b = breakdown.setdefault(
            host.pld,
            {
                "class": cls,
                "pages": 0,
                "robots": 0,
                "hosts": set(),
                "via_legit": 0,
                "pages_by_tenth": [0] * 10,
            },
        )
        b["hosts"].add(host.name)
        return b

    tenth = max(len(first) // 10, 1)
    for i, (e, c) in enumerate(zip(first, classes)):
        if c in ("spam", "trap"):
            b = bucket(e, c)
            b["pages"] += 1
            b["pages_by_tenth"][min(i // tenth, 9)] += 1
            b["via_legit"] += e["via"] is not None and model.pld_class(e["via"]) == "legit"
    for e, c in zip(window, req_classes):
        if e["kind"] == "robots" and c in ("spam", "trap"):
            bucket(e, c)["robots"] += 1
    for b in breakdown.values():
        b["hosts"] = len(b["hosts"])
    return {
        "pages": len(first),
        "share": {c: counts[c] / total for c in CLASSES},
        "spam_trap_share": (counts["spam"] + counts["trap"]) / total,
        "spam_trap_share_by_tenth": _tenths(endless),
        "spam_trap_max_depth": max(
            (e["depth"] for e, c in zip(first, classes) if c in ("spam", "trap")), default=None
        ),
        "requests": len(window),
        "robots_requests": len(robots),
        "request_share": {c: req_counts[c] / req_total for c in CLASSES},
        "spam_trap_request_share": (req_counts["spam"] + req_counts["trap"]) / req_total,
        "spam_trap_request_share_by_tenth": _tenths([c in ("spam", "trap") for c in req_classes]),
        "spam_trap_robots": sum(c in ("spam", "trap") for c in robots),
        "spam_trap_breakdown": dict(sorted(breakdown.items())),
    }


def _checkpoint_state(state: Path) -> dict[str, Any]:
    root = state / "checkpoints"
    current = (root / "CURRENT").read_text(encoding="utf-8").strip()
    return json.loads((root / current / "state.json").read_text(encoding="utf-8"))


def _beast_io(state: Path, pages: int, fetched: list[dict[str, Any]]) -> dict[str, Any]:
    """Part 3 for one crawl: BEAST bytes per page next to Theorem 7's 2b(2L-1)."""
    meta = _checkpoint_state(state)
    beast = meta["frontier"]["beast"]
    queues = [*beast["ring"], beast["qf"]]
    written = sum(q["bytes_written"] for q in queues)
    read = sum(q["bytes_read"] for q in queues)
    admitted = meta["counters"].get("urls_admitted", 0)
    b = _mean_record_bytes(state, queues, fetched)
    links = admitted / max(pages, 1)
    bound = theorem7_bound(1.0, b, links)  # S = 1: bytes per page
    return {
        "pages": pages,
        "urls_admitted": admitted,
        "L": links,
        "b": b,
        "bytes_written": written,
        "bytes_read": read,
        "bytes_per_page": (written + read) / max(pages, 1),
        "theorem7_bytes_per_page": bound,
        "ratio_to_bound": (written + read) / max(pages, 1) / bound if bound > 0 else None,
        "queues": beast["queues"],
        "qf_rescans": beast["counters"]["qf_rescans"],
        "deferred_to_qf": beast["counters"]["deferred_to_qf"],
    }


def _mean_record_bytes(
    state: Path, queue_states: list[dict[str, Any]], fetched: list[dict[str, Any]]
) -> float:
    """Mean BEAST record (payload + frame): records still queued (a sample per queue) and
    the fetched pages' records, which BEAST held before they were read."""
    sizes: list[int] = [len(encode_payload(e["url"], e["depth"], e["via"])) for e in fetched]
    base = state / "frontier" / "beast"
    dirs = [base / f"q{i:03d}" for i in range(len(queue_states) - 1)] + [base / "qf"]
    for directory, qstate in zip(dirs, queue_states):
        if "bands" in qstate:  # an order with bands: band 0 is the queue's directory
            qstate = qstate["bands"][0]
        # The crawl is over: reading its queues cannot disturb it.
        queue = DiskQueue(directory, state=cast("QueueState", qstate), fsync=False)
        try:
            sizes.extend(map(len, queue.read(min(len(queue), B_SAMPLE))))
        finally:
            queue.close()
    return sum(sizes) / max(len(sizes), 1) + FRAME_SIZE


def spam_share(plan: Plan, work: Path, log: bool) -> dict[str, Any]:
    proc, info = _start_web(plan.web)
    model = SimWebModel(replace(plan.web, port=info["port"]))
    seeds = seed_urls(model, plan.seeds)
    ram = f"frontier_ram_urls = {plan.frontier_ram_urls}\n"
    contenders = {
        "drumbeat": CRAWL_TOML + ram,
        "bfs": CRAWL_TOML + ram + f"budget_default = {BFS_BUDGET}\nbudget_max = {BFS_BUDGET}\n"
        "beast_turn_s = 0\n",
    }
    results: dict[str, dict] = {}
    io: dict[str, dict] = {}
    try:
        for name, toml in contenders.items():
            if log:
                print(f"crawling: {name}, {plan.pages:,} pages ...", file=sys.stderr)
            state = work / name
            wall = _crawl(name, seeds, info, state, plan.pages, toml)
            answered = _answered(state)
            fetched = [e for e in answered if e["kind"] == "page"]
            out = _shares(model, answered, plan.pages)
            out.update(wall_s=wall, pages_per_s=len(fetched) / wall)
            results[name] = out
            io[name] = _beast_io(state, len(fetched), fetched)
            shutil.rmtree(state, ignore_errors=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {
        "web": {
            **{
                k: v
                for k, v in asdict(plan.web).items()
                if k not in ("port", "dns_port", "tld", "seed")
            },
            "legit_pages": sum(len(model.paths(h.name)) for h in model.hosts),
            "legit_plds": len({h.pld for h in model.hosts}),
        },
        "pages": plan.pages,
        "seeds": len(seeds),
        "settings": {
            "host_delay_s": HOST_DELAY_S,
            "ip_delay_s": IP_DELAY_S,
            "frontier_ram_urls": plan.frontier_ram_urls,
            "bfs_budget": BFS_BUDGET,
        },
        "contenders": results,
        "beast_io": io,
    }


# ------------------------------------------------------------------ part 4: crawl order


def true_indegrees(model: SimWebModel, seeds: list[str]) -> dict[str, int]:
    """Every page a crawler may fetch from ``seeds`` (reachable through followed links,
    allowed by robots.txt), with its in-degree: the distinct pages of that set that
    link to it (rel=nofollow and meta nofollow links are not followed, so not counted)."""
    indegree: dict[str, int] = {}
    queue, seen, fetchable = list(seeds), set(seeds), []
    while queue:
        url = queue.pop()
        parts = urlsplit(url)
        host = parts.hostname or ""
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        h = model.host(host)
        if h is None or h.pld_class != "legit":
            continue
        robots = model.robots(host)
        if robots.fetch_nothing or not robots.allows(path):
            continue
        page = model.page(host, path)
        if page.status != 200 and page.location is None:
            continue
        fetchable.append(url)
        targets = {page.location} if page.location else set()
        if not page.meta_nofollow:
            targets |= {link.url for link in page.links if not link.nofollow and link.url}
        for target in targets - {url}:
            if not target.startswith("http"):
                continue
            indegree[target] = indegree.get(target, 0) + 1
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return {u: indegree.get(u, 0) for u in fetchable}


def _order_figures(
    model: SimWebModel, truth: dict[str, int], state: Path, n: int
) -> dict[str, Any]:
    first = [e["url"] for e in _answered(state) if e["kind"] == "page"][:n]
    weighted = sum(truth.get(u, 0) for u in first)
    best = sum(sorted(truth.values(), reverse=True)[: len(first)])
    on_topic = [model.topic(u) == FOCUS_TOPIC for u in first]
    return {
        "pages": len(first),
        "indegree_weighted": weighted,
        "indegree_of_best": weighted / best if best else None,
        "mean_indegree": weighted / max(len(first), 1),
        "on_topic_share": sum(on_topic) / max(len(first), 1),
        "on_topic_by_tenth": _tenths(on_topic),
    }


def crawl_order(plan: Plan, work: Path, log: bool) -> dict[str, Any]:
    """Part 4: each order policy and a focused crawl on the topic web."""
    proc, info = _start_web(plan.order_web)
    model = SimWebModel(replace(plan.order_web, port=info["port"]))
    seeds = seed_urls(model, plan.seeds)
    truth = true_indegrees(model, seeds)
    base_toml = CRAWL_TOML + f"frontier_ram_urls = {plan.order_ram_urls}\n"
    env = {**os.environ, "DRUMBEAT_FOCUS_KEYWORDS": ",".join(TOPIC_WORDS[FOCUS_TOPIC])}
    results: dict[str, dict] = {}
    try:
        for name in ORDER_CONTENDERS:
            if log:
                print(f"crawling: order {name}, {plan.order_pages:,} pages ...", file=sys.stderr)
            toml = base_toml + (
                'focus = "drumbeat.focus.keywords:score"\n'
                if name == "focus"
                else f'order = "{name}"\n'
            )
            state = work / f"order-{name}"
            wall = _crawl(
                name, seeds, info, state, plan.order_pages, toml, env, plan.order_host_delay_s
            )
            out = _order_figures(model, truth, state, plan.order_pages)
            out.update(wall_s=wall, pages_per_s=out["pages"] / wall)
            results[name] = out
            shutil.rmtree(state, ignore_errors=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return {
        "web": {
            "hosts": plan.order_web.hosts,
            "pages_per_host": plan.order_web.pages_per_host,
            "topics": plan.order_web.topics,
            "fetchable_pages": len(truth),
            "on_topic_share": sum(model.topic(u) == FOCUS_TOPIC for u in truth) / len(truth),
            "focus_keywords": list(TOPIC_WORDS[FOCUS_TOPIC]),
        },
        "pages": plan.order_pages,
        "seeds": len(seeds),
        "frontier_ram_urls": plan.order_ram_urls,
        "host_delay_s": plan.order_host_delay_s,
        "contenders": results,
    }


# ------------------------------------------------------------------ part 2: Manager RSS


def rss_origin(i: int, hosts: int) -> str:
    return f"http://h{i % hosts}.p{i % (hosts // 2)}.test"


def _memory() -> dict[str, int]:
    """Peak and current RSS in bytes, from one read of /proc/self/status."""
    kib = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            kib[name] = int(value.split()[0])
    return {"peak_rss": kib["VmHWM"] << 10, "rss": kib["VmRSS"] << 10}


def _live_rss() -> int | None:
    """Current RSS after glibc's ``malloc_trim(0)``: memory in use, without the freed heap
    pages the allocator keeps (None where there is no glibc)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return _memory()["rss"]


async def _rss_child(n: int, hosts: int, work: Path) -> dict[str, Any]:
    from drumbeat.testing import FakeClock, offline_manager

    clock = FakeClock(time.monotonic())  # the manager's clock, moved by the loop below
    async with offline_manager(work, clock=clock) as manager:
        settings = manager.settings
        t0 = time.perf_counter()
        for start in range(0, n, RSS_BATCH):
            manager.admission.admit(
                [f"{rss_origin(i, hosts)}/x/{i}" for i in range(start, min(n, start + RSS_BATCH))],
                1,
                None,
            )
            manager.admission.take_new_urls(manager.clock())
        manager.stores.seen.flush()
        manager.admission.take_new_urls(manager.clock())
        queue_s = time.perf_counter() - t0
        queued = len(manager.stores.beast)
        for i in range(min(n, hosts)):
            manager.stores.robots.record(rss_origin(i, hosts), 404, None)
        t0 = time.perf_counter()
        bound = settings.frontier_ram_urls
        feeds = 0
        while (
            feeds < RSS_FEEDS
            and manager.scheduler.queued_urls < bound
            and (len(manager.stores.beast) or manager.gate.checking or len(manager.stores.qr))
        ):
            # Each round is past every flush interval (it merges what it asked for) and
            # past a whole paced BEAST turn (each PLD passes its budget once more).
            manager.gate.feed(clock.advance(max(1.0, settings.beast_turn())))
            feeds += 1
            await asyncio.sleep(0)  # let DNS lookups (loopback SimDNS) run
        feed_s = time.perf_counter() - t0
        memory = _memory()  # before _live_rss trims the heap
        drum = manager.stores.seen.drum
        return {
            "urls": n,
            "hosts": hosts,
            "queued_beast": queued,
            "queued_ram": manager.scheduler.queued_urls,
            "ram_bound": bound,
            "hosts_in_ram": len(manager.scheduler.hosts),
            "feed_rounds": feeds,
            "queue_s": queue_s,
            "feed_s": feed_s,
            "urls_per_s": n / queue_s,
            **memory,
            "live_rss": _live_rss(),
            # RAM the configuration grants DRUM (URL-seen, PLD graph, robots), used only
            # as the DRUMs fill: the 100 k run does not fill URL-seen's buffers.
            "drum_ram_bytes": (
                settings.urlseen_ram_bytes + settings.pld_ram_bytes + settings.robots_ram_bytes
            ),
            "urlseen_buffer_records": drum.buffer.spill_at,
            "urlseen_merges": drum.stats().merges,
        }


def manager_rss(sizes: tuple[int, ...], hosts: int, work: Path, log: bool) -> dict[str, Any]:
    """Each size in a fresh process, so each peak RSS is its own."""
    runs: dict[str, dict] = {}
    for n in sizes:
        if log:
            print(f"manager RSS: {n:,} URLs ...", file=sys.stderr)
        state = work / f"rss-{n}"
        state.mkdir(parents=True)
        cmd = [
            sys.executable,
            "-m",
            "drumbeat.bench.frontier",
            "--rss-child",
            str(n),
            "--rss-hosts",
            str(hosts),
            "--dir",
            str(state),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"RSS run of {n:,} URLs failed: {done.stderr.strip()[-500:]}")
        runs[str(n)] = json.loads(done.stdout.strip().splitlines()[-1])
        shutil.rmtree(state, ignore_errors=True)
    first, last = runs[str(sizes[0])], runs[str(sizes[-1])]
    for run in runs.values():
        run["peak_rss_vs_smallest"] = run["peak_rss"] / first["peak_rss"]
    live = last["live_rss"] / first["live_rss"] if last["live_rss"] and first["live_rss"] else None
    return {
        "sizes": list(sizes),
        "runs": runs,
        "peak_rss_ratio": last["peak_rss"] / first["peak_rss"],
        "rss_ratio": last["rss"] / first["rss"],
        "live_rss_ratio": live,
        "ratio_sizes": [sizes[0], sizes[-1]],
    }


# ------------------------------------------------------------------ command line


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="drumbeat bench frontier", description=__doc__.splitlines()[0]
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="smaller web and N, RSS at 100 k and 1 M (about a minute)",
    )
    mode.add_argument("--tiny", action="store_true", help="smallest run, for tests")
    ap.add_argument("--order-only", action="store_true", help="only part 4: crawl order and focus")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rss-hosts", type=int, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.rss_child is not None:  # child mode: one size of part 2
        print(json.dumps(asyncio.run(_rss_child(args.rss_child, args.rss_hosts, args.dir))))
        return 0
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    plan = PLANS[mode]
    base = Path(tempfile.mkdtemp(prefix="frontierbench-", dir=args.dir))
    t0 = time.perf_counter()
    report: dict[str, Any] = {"mode": mode}
    try:
        if not args.order_only:
            share = spam_share(plan, base, not args.json)
            report["spam_share"] = share
            report["manager_rss"] = manager_rss(plan.rss_sizes, plan.rss_hosts, base, not args.json)
            report["beast_io"] = share.pop("beast_io")
        report["order"] = crawl_order(plan, base, not args.json)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report.update(elapsed_s=time.perf_counter() - t0, cpus=os.cpu_count())
    if args.json:
        print(json.dumps(report))
    else:
        _print_tables(report)
    return 0


def _print_tables(report: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console(width=150)
    if "spam_share" in report:
        share, rss = report["spam_share"], report["manager_rss"]
        console.print(_share_table(share))
        console.print(_request_table(share))
        console.print(_spam_trap_table(share))
        console.print(_web_note(share))
        console.print(_rss_table(rss))
        console.print(_rss_note(rss))
        console.print(_beast_io_table(report["beast_io"]))
    console.print(_order_table(report["order"]))
    console.print(_order_note(report["order"]))
    console.print(f"{report['mode']} run, {report['elapsed_s']:.0f} s")


def _order_table(order: dict[str, Any]) -> Table:
    table = _table(
        f"Crawl order and focus: the first {order['pages']:,} page fetches",
        (
            "order",
            "in-degree weighted",
            "of the best N",
            "mean in-degree",
            f"on topic {FOCUS_TOPIC}",
            "on topic by tenth of N",
            "pages/s",
            "wall s",
        ),
        left=("order", "on topic by tenth of N"),
    )
    for name, out in order["contenders"].items():
        best = out["indegree_of_best"]
        table.add_row(
            name,
            f"{out['indegree_weighted']:,}",
            f"{best:.1%}" if best is not None else "",
            f"{out['mean_indegree']:.2f}",
            f"{out['on_topic_share']:.1%}",
            " ".join(f"{x:.0%}" for x in out["on_topic_by_tenth"]),
            f"{out['pages_per_s']:,.0f}",
            f"{out['wall_s']:,.1f}",
        )
    return table


def _order_note(order: dict[str, Any]) -> str:
    web = order["web"]
    return (
        f"web: {web['hosts']:,} ordinary hosts about {web['topics']} topics, "
        f"{web['fetchable_pages']:,} fetchable pages, {web['on_topic_share']:.1%} of them on "
        f"topic {FOCUS_TOPIC}; {order['seeds']} seeds; frontier_ram_urls "
        f"{order['frontier_ram_urls']:,}; host delay {order['host_delay_s']:g} s. in-degree = "
        f"links from the fetchable pages (the model's truth); 'of the best N' = against "
        f"the N fetchable pages of highest in-degree. focus = --focus "
        f"drumbeat.focus.keywords:score with DRUMBEAT_FOCUS_KEYWORDS="
        f"{','.join(web['focus_keywords'])} (order bfs)."
    )


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...] = ()) -> Table:
    """A table of ``columns``, right-justified but for those in ``left``."""
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table


def _share_table(share: dict[str, Any]) -> Table:
    table = _table(
        f"Share of the first {share['pages']:,} page fetches by PLD class "
        f"(targets: drumbeat <= 5 % spam+trap, BFS >= 50 %)",
        ("frontier", *CLASSES, "spam+trap", "by tenth of N", "pages/s", "wall s"),
        left=("frontier", "by tenth of N"),
    )
    for name, out in share["contenders"].items():
        table.add_row(
            name,
            *(f"{out['share'][c]:.1%}" for c in CLASSES),
            f"{out['spam_trap_share']:.1%}",
            " ".join(f"{x:.0%}" for x in out["spam_trap_share_by_tenth"]),
            f"{out['pages_per_s']:,.0f}",
            f"{out['wall_s']:,.1f}",
        )
    return table


def _request_table(share: dict[str, Any]) -> Table:
    table = _table(
        f"Every request up to the {share['pages']:,}th page fetch "
        "(robots.txt included) by the PLD class of its host",
        (
            "frontier",
            "requests",
            "robots.txt",
            *CLASSES,
            "spam+trap",
            "of which robots.txt",
            "by tenth of the requests",
        ),
        left=("frontier", "by tenth of the requests"),
    )
    for name, out in share["contenders"].items():
        table.add_row(
            name,
            f"{out['requests']:,}",
            f"{out['robots_requests']:,}",
            *(f"{out['request_share'][c]:.1%}" for c in CLASSES),
            f"{out['spam_trap_request_share']:.1%}",
            f"{out['spam_trap_robots']:,}",
            " ".join(f"{x:.0%}" for x in out["spam_trap_request_share_by_tenth"]),
        )
    return table


def _spam_trap_table(share: dict[str, Any]) -> Table:
    table = _table(
        "Spam and trap requests by PLD (first N pages; robots.txt up to the Nth page)",
        (
            "frontier",
            "PLD",
            "class",
            "pages",
            "robots.txt",
            "hosts",
            "pages linked from legit",
            "pages by tenth of N",
        ),
        left=("frontier", "PLD", "class", "pages by tenth of N"),
    )
    for name, out in share["contenders"].items():
        for pld, b in out["spam_trap_breakdown"].items():
            table.add_row(
                name,
                pld,
                b["class"],
                f"{b['pages']:,}",
                f"{b['robots']:,}",
                f"{b['hosts']:,}",
                f"{b['via_legit']:,}",
                " ".join(str(x) for x in b["pages_by_tenth"]),
            )
    return table


def _web_note(share: dict[str, Any]) -> str:
    web, s = share["web"], share["settings"]
    return (
        f"seeds: {share['seeds']:,} legit home pages (curated: none links to spam or a trap); "
        f"web: {web['hosts']:,} ordinary hosts ({web['legit_plds']:,} PLDs, about "
        f"{web['legit_pages']:,} pages) on {web['ips']} IPs, {web['spam_farms']} spam farms "
        f"({web['spam_ips']} IPs each, {web['spam_links_per_page']} links a page), "
        f"{web['spammed_hosts']} popular hosts carrying comment spam into them "
        f"({web['spammed_links_per_page']} links a page), "
        f"{web['calendar_traps']} calendar traps, a big site of {web['big_site_pages']:,} "
        f"pages; host delay {s['host_delay_s']:g} s, IP delay {s['ip_delay_s']:g} s, "
        f"frontier_ram_urls {s['frontier_ram_urls']:,} for both; BFS = budgets of "
        f"{s['bfs_budget']:.0e} (one FIFO). Requests count every answered fetch, robots.txt "
        f"included: a spam host's robots.txt is a request the crawler spent on spam."
    )


def _rss_table(rss: dict[str, Any]) -> Table:
    table = _table(
        "Manager RSS with queued URLs (each size in a fresh process; "
        "target: largest <= 1.2x smallest)",
        (
            "queued URLs",
            "in RAM",
            "hosts in RAM",
            "queue s",
            "URLs/s",
            "feed s",
            "URL-seen merges",
            "peak RSS MiB",
            "RSS MiB",
            "live MiB",
            "peak vs smallest",
        ),
    )
    for run in rss["runs"].values():
        live = run["live_rss"]
        table.add_row(
            f"{run['urls']:,}",
            f"{run['queued_ram']:,}",
            f"{run['hosts_in_ram']:,}",
            f"{run['queue_s']:.1f}",
            f"{run['urls_per_s']:,.0f}",
            f"{run['feed_s']:.1f}",
            str(run["urlseen_merges"]),
            f"{run['peak_rss'] / 2**20:,.0f}",
            f"{run['rss'] / 2**20:,.0f}",
            f"{live / 2**20:,.0f}" if live else "",
            f"{run['peak_rss_vs_smallest']:.2f}x",
        )
    return table


def _rss_note(rss: dict[str, Any]) -> str:
    lo, hi = rss["ratio_sizes"]
    first = rss["runs"][str(lo)]
    live = rss["live_rss_ratio"]
    return (
        f"RSS {hi:,} / {lo:,} URLs: peak {rss['peak_rss_ratio']:.2f}x, current "
        f"{rss['rss_ratio']:.2f}x, live {f'{live:.2f}x' if live else 'n/a'}. live = current "
        f"RSS after malloc_trim(0) (freed heap the allocator kept is returned). The "
        f"configuration grants the DRUMs {first['drum_ram_bytes'] / 2**20:,.0f} MiB "
        f"(URL-seen's record buffer holds {first['urlseen_buffer_records']:,} URLs, its merge "
        f"works on buckets of up to about as many); DRUM touches those pages only as its "
        f"buffers fill, which {lo:,} URLs do not, so peak growth up to the largest size is "
        f"configured memory coming into use, not memory per queued URL."
    )


def _beast_io_table(beast_io: dict[str, Any]) -> Table:
    table = _table(
        "BEAST disk I/O per page fetched vs Theorem 7, 2b(2L-1)",
        (
            "crawl",
            "pages",
            "L (URLs/page)",
            "b (bytes)",
            "written/page",
            "read/page",
            "I/O per page",
            "Theorem 7",
            "ratio",
            "queues",
            "QF rescans",
        ),
        left=("crawl",),
    )
    for name, io in beast_io.items():
        pages = max(io["pages"], 1)
        table.add_row(
            name,
            f"{io['pages']:,}",
            f"{io['L']:.1f}",
            f"{io['b']:.0f}",
            f"{io['bytes_written'] / pages:,.0f}",
            f"{io['bytes_read'] / pages:,.0f}",
            f"{io['bytes_per_page']:,.0f}",
            f"{io['theorem7_bytes_per_page']:,.0f}",
            f"{io['ratio_to_bound']:.2f}" if io["ratio_to_bound"] else "",
            str(io["queues"]),
            str(io["qf_rescans"]),
        )
    return table


if __name__ == "__main__":
    raise SystemExit(main())
