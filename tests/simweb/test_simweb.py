"""simweb: a real SimWeb on loopback, probed with aiohttp, aiodns, protego and selectolax."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import ada_url
import aiodns
import aiohttp
import pytest
from protego import Protego
from selectolax.lexbor import LexborHTMLParser

from drumbeat.simweb import SimWeb, SimWebConfig, SimWebModel, run_in_thread
from drumbeat.simweb.model import REFUSED_IP
from drumbeat.simweb.render import Renderer

SMALL = SimWebConfig(
    seed=7,
    hosts=12,
    ips=4,
    pages_per_host=5,
    page_bytes=4_000,
    links_per_page=15,
    crawl_delay_s=0.05,
)


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("simweb") / "requests.jsonl"


@pytest.fixture(scope="module")
def sim(log_path: Path) -> Iterator[SimWeb]:
    with run_in_thread(SMALL, request_log=log_path) as web:
        yield web


async def fetch(web: SimWeb, url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """GET ``url`` from the web without redirects, connecting to the host's own IP."""
    parts = urlsplit(url)
    host = web.model.host(parts.hostname or "")
    assert host is not None, url
    target = f"http://{host.ip}:{web.port}" + _split(url)[1]
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, target, headers={"Host": parts.netloc}, allow_redirects=False
        ) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 20))


# -- model ---------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    cfg = dataclasses.replace(SMALL, port=8123)
    a, b = Renderer(SimWebModel(cfg)), Renderer(SimWebModel(cfg))
    c = Renderer(SimWebModel(dataclasses.replace(cfg, seed=8)))
    for path in a.model.paths("site1.test"):
        page = a.model.page("site1.test", path)
        assert a.body(page) == b.body(b.model.page("site1.test", path))
    home = a.model.page("site1.test", "/")
    assert a.body(home) != c.body(c.model.page("site1.test", "/"))


def test_default_web_has_every_feature() -> None:
    model = SimWebModel(SimWebConfig(port=8080))
    assert {h.robots_variant for h in model.hosts} == {
        "allow_all",
        "private",
        "wildcard",
        "crawl_delay",
        "missing",
        "error",
        "garbage",
    }
    assert len({h.ip for h in model.hosts}) == 8 and "127.0.0.1" not in {h.ip for h in model.hosts}
    assert len({h.pld for h in model.hosts}) < len(model.hosts)
    sizes = [h.backbone_pages for h in model.hosts]
    assert min(sizes) >= 1 and max(sizes) > 2 * 20 > min(sizes)
    pages = [model.page(h.name, p) for h in model.hosts for p in model.paths(h.name)]
    links = [link for page in pages for link in page.links]
    kinds = Counter(link.kind for link in links)
    assert set(kinds) == {"a", "area", "frame", "iframe", "refresh", "canonical"}
    assert any(link.nofollow for link in links)
    assert any(link.url is None for link in links)
    assert {"mailto", "javascript"} <= {link.href.split(":")[0] for link in links}
    site0 = [model.page("site0.test", p) for p in model.paths("site0.test")]
    assert any(p.meta_nofollow for p in site0) and any(p.base_href for p in site0)
    assert {p.status for p in site0 if p.kind == "redirect"} == {301, 302}
    assert {p.kind for p in site0} == {"html", "redirect", "binary", "garbage"}
    cross = [link for link in links if link.url and "site0.test" not in link.url]
    assert cross
    truth = model.crawl()
    assert truth.fetched and truth.disallowed and truth.host_blocked and truth.unreachable
    assert any(model.page(*_split(u)).status == 404 for u in truth.fetched)
    # Popularity is skewed: the most linked-to page draws far more than the median.
    indegree = sorted(Counter(link.url for link in links if link.url).values())
    assert indegree[-1] > 20 * indegree[len(indegree) // 2]


def test_every_backbone_page_is_reachable_from_the_seeds() -> None:
    model = SimWebModel(dataclasses.replace(SMALL, port=8080))
    fetched = model.reachable()
    for host in model.hosts:
        for path in model.paths(host.name):
            url = model.url(host.name, path)
            page = model.page(host.name, path)
            if host.robots_variant == "error" or not model.robots_allows(host.name, path):
                assert url not in fetched
            elif "hidden" not in path:
                assert url in fetched, url
            else:
                assert url not in fetched  # only nofollow links lead there
            assert page.status in (200, 301, 302)
    dead = {model.refused_host, model.nxdomain_host}
    attempts = model.unreachable_attempts()
    assert attempts and {_split(u)[0] for u in attempts} <= dead
    kinds_a = model.reachable(kinds=frozenset({"a"}))
    assert "http://site0.test:8080/special/framed-1.html" in fetched - kinds_a


def test_page_sizes_and_link_counts_follow_the_config() -> None:
    cfg = SimWebConfig(port=8080, hosts=10)
    model = SimWebModel(cfg)
    renderer = Renderer(model)
    for host in model.hosts[:5]:
        for path in model.paths(host.name):
            page = model.page(host.name, path)
            if page.kind != "html" or path == "/special/frames.html":
                continue
            size = len(renderer.body(page))
            assert 0.8 * cfg.page_bytes <= size <= 1.3 * cfg.page_bytes, (path, size)
            assert cfg.links_per_page <= len(page.links) <= cfg.links_per_page + 20


def test_oracle_links_match_the_html() -> None:
    """Every link the oracle lists is in the HTML, and resolves to the oracle's URL."""
    model = SimWebModel(dataclasses.replace(SMALL, port=8080))
    renderer = Renderer(model)
    checked = 0
    for host in model.hosts:
        for path in model.paths(host.name):
            page = model.page(host.name, path)
            if page.kind != "html":
                continue
            tree = LexborHTMLParser(renderer.body(page))
            found = _links_in_html(tree)
            assert Counter((h, k, n) for h, k, n in found) == Counter(
                (link.href, link.kind, link.nofollow) for link in page.links
            )
            meta = tree.css_first('meta[name="robots"]')
            content = (meta.attributes.get("content") or "") if meta is not None else ""
            assert page.meta_nofollow == ("nofollow" in content)
            base = page.base_href or page.url
            for link in page.links:
                assert _resolve(base, link.href) == link.url, (page.url, link)
            checked += 1
    assert checked > 50


def test_robots_oracle_agrees_with_protego() -> None:
    model = SimWebModel(dataclasses.replace(SMALL, port=8080))
    for host in model.hosts:
        robots = model.robots(host.name)
        if robots.status != 200:
            continue
        parser = Protego.parse(robots.body.decode("utf-8", errors="replace"))
        for path in [*model.paths(host.name), "/x.bin", "/a.bin?x=1", "/private/open/z"]:
            assert parser.can_fetch(model.url(host.name, path), "drumbeat") == model.robots_allows(
                host.name, path
            ), (host.robots_variant, path)
        delay = parser.crawl_delay("drumbeat")
        assert delay == model.crawl_delay(host.name)
    delayed = next(h for h in model.hosts if h.robots_variant == "crawl_delay")
    assert model.crawl_delay(delayed.name) == 0.05
    blocked = next(h for h in model.hosts if h.robots_variant == "error")
    assert not model.robots_allows(blocked.name, "/")


# -- server --------------------------------------------------------------------


def test_every_ip_answers_and_host_header_routes(sim: SimWeb) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as session:
            bodies = {}
            for ip in sim.model.ips:
                for name in ("site0.test", f"SITE1.test:{sim.port}", "nowhere.test"):
                    url = f"http://{ip}:{sim.port}/"
                    async with session.get(url, headers={"Host": name}) as resp:
                        bodies[ip, name] = (resp.status, await resp.read())
        renderer = Renderer(sim.model)
        site0 = renderer.body(sim.model.page("site0.test", "/"))
        site1 = renderer.body(sim.model.page("site1.test", "/"))
        for ip in sim.model.ips:
            assert bodies[ip, "site0.test"] == (200, site0)
            assert bodies[ip, f"SITE1.test:{sim.port}"] == (200, site1)
            assert bodies[ip, "nowhere.test"][0] == 404

    run(go())
    served_ips = {r.server_ip for r in sim.requests}
    assert set(sim.model.ips) <= served_ips


def test_special_responses(sim: SimWeb) -> None:
    model = sim.model

    async def go() -> None:
        status, headers, _ = await fetch(sim, model.url("site0.test", "/special/moved"))
        assert status == 301
        assert headers["Location"] == model.url("site0.test", "/special/moved-target.html")
        temp = model.url("site0.test", "/special/temp")
        status, headers, _ = await fetch(sim, temp)
        assert status == 302
        assert _resolve(temp, headers["Location"]) == model.page(*_split(temp)).location
        status, headers, body = await fetch(sim, model.url("site0.test", "/data.bin"))
        assert (status, len(body)) == (200, 4096)
        assert headers["Content-Type"] == "application/octet-stream"
        status, headers, body = await fetch(sim, model.url("site0.test", "/special/garbage.html"))
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")
        status, _, _ = await fetch(sim, model.url("site0.test", "/nowhere.html"))
        assert status == 404
        status, _, body = await fetch(sim, model.url("site0.test", "/"), method="HEAD")
        assert (status, body) == (200, b"")

    run(go())


def test_robots_variants_are_served(sim: SimWeb) -> None:
    model = sim.model

    async def go() -> dict[str, tuple[int, bytes]]:
        got = {}
        for host in model.hosts:
            status, _, body = await fetch(sim, model.url(host.name, "/robots.txt"))
            got[host.robots_variant] = (status, body)
        return got

    got = run(go())
    assert got["allow_all"][0] == got["private"][0] == got["wildcard"][0] == 200
    assert b"Disallow: /private/" in got["private"][1]
    assert b"Disallow: /*.bin$" in got["wildcard"][1] and b"Disallow: /*?q=" in got["wildcard"][1]
    assert b"Crawl-delay: 0.05" in got["crawl_delay"][1]
    assert got["missing"][0] == 404 and got["error"][0] == 500
    assert got["garbage"][0] == 200 and b"User-agent" not in got["garbage"][1]


def test_dns_answers_a_nxdomain_and_empty_aaaa(sim: SimWeb) -> None:
    async def go() -> None:
        resolver = aiodns.DNSResolver(nameservers=[sim.dns_address], timeout=2, tries=2)
        for host in sim.model.hosts[:5]:
            result = await resolver.query_dns(host.name, "A")
            assert [(r.data.addr, r.ttl) for r in result.answer] == [(host.ip, 300)]
        result = await resolver.query_dns(sim.model.refused_host.upper(), "A")
        assert [r.data.addr for r in result.answer] == [REFUSED_IP]
        for name in (sim.model.nxdomain_host, "unknown.example.test"):
            with pytest.raises(aiodns.error.DNSError) as err:
                await resolver.query_dns(name, "A")
            assert err.value.args[0] == aiodns.error.ARES_ENOTFOUND
        with pytest.raises(aiodns.error.DNSError) as err:
            await resolver.query_dns("site0.test", "AAAA")
        assert err.value.args[0] == aiodns.error.ARES_ENODATA  # NOERROR, no records

    run(go())


def test_requests_are_recorded_in_memory_and_in_the_log(sim: SimWeb, log_path: Path) -> None:
    before = len(sim.requests)
    url = sim.model.url("site2.test", "/search?q=1")
    status, _, _ = run(fetch(sim, url))
    records = sim.requests
    assert len(records) == before + 1
    last = records[-1]
    host = sim.model.host("site2.test")
    assert host is not None
    assert (last.host, last.path, last.status, last.server_ip, last.method) == (
        "site2.test",
        "/search?q=1",
        status,
        host.ip,
        "GET",
    )
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert len(lines) == len(records)
    assert lines[-1] == dataclasses.asdict(last)
    assert all(a.time <= b.time for a, b in itertools.pairwise(records))


def test_http_crawl_agrees_with_the_oracle(sim: SimWeb) -> None:
    """A small reference crawler over real HTTP + DNS finds exactly the oracle's sets."""
    model = sim.model

    async def crawl() -> tuple[set[str], set[str], set[str], set[str]]:
        resolver = aiodns.DNSResolver(nameservers=[sim.dns_address], timeout=2, tries=2)
        robots: dict[str, Protego | None] = {}
        fetched: set[str] = set()
        disallowed: set[str] = set()
        blocked: set[str] = set()
        failed: set[str] = set()
        queue = deque(model.seeds())
        seen = set(queue)
        async with aiohttp.ClientSession() as session:
            while queue:
                assert len(seen) < 2_000
                url = queue.popleft()
                parts = urlsplit(url)
                try:
                    answer = await resolver.query_dns(parts.hostname or "", "A")
                except aiodns.error.DNSError:
                    failed.add(url)
                    continue
                ip = answer.answer[0].data.addr
                if ip == REFUSED_IP:
                    failed.add(url)  # nothing listens there; no need to knock
                    continue
                origin = f"http://{ip}:{parts.port}"
                headers = {"Host": parts.netloc}
                if parts.netloc not in robots:
                    async with session.get(origin + "/robots.txt", headers=headers) as resp:
                        text = (await resp.read()).decode("utf-8", errors="replace")
                        if resp.status >= 500:
                            robots[parts.netloc] = None
                        else:
                            robots[parts.netloc] = Protego.parse(text if resp.status == 200 else "")
                rules = robots[parts.netloc]
                if rules is None:
                    blocked.add(url)
                    continue
                if not rules.can_fetch(url, "drumbeat"):
                    disallowed.add(url)
                    continue
                fetched.add(url)
                target = origin + url[len(f"http://{parts.netloc}") :]
                async with session.get(target, headers=headers, allow_redirects=False) as resp:
                    body = await resp.read()
                    found = [(url, resp.headers["Location"])] if "Location" in resp.headers else []
                    if resp.status == 200 and resp.content_type == "text/html":
                        tree = LexborHTMLParser(body)
                        base = _base_of(tree, url)
                        found += [(base, href) for href in _followed_hrefs(tree)]
                for base, href in found:
                    link = _resolve(base, href)
                    if link and link.startswith("http") and link not in seen:
                        seen.add(link)
                        queue.append(link)
        return fetched, disallowed, blocked, failed

    fetched, disallowed, blocked, failed = run(crawl())
    truth = model.crawl()
    assert fetched == truth.fetched
    assert disallowed == truth.disallowed
    assert blocked == truth.host_blocked
    assert failed == truth.unreachable == model.unreachable_attempts()


def test_module_runs_as_a_process_and_stops_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "sub.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "drumbeat.simweb",
            "--hosts",
            "3",
            "--ips",
            "2",
            "--pages-per-host",
            "2",
            "--seed",
            "5",
            "--request-log",
            str(log),
            "--crawl-delay",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["dns"].startswith("127.0.0.1:")
        assert info["seeds"][0] == f"http://site0.test:{info['port']}/"

        async def get() -> int:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.1.0.1:{info['port']}/robots.txt"
                async with session.get(url, headers={"Host": "site0.test"}) as resp:
                    return resp.status

        assert run(get()) == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        record = json.loads(log.read_text().splitlines()[0])
        assert (record["host"], record["path"]) == ("site0.test", "/robots.txt")
        assert record["status"] == 200
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- helpers -------------------------------------------------------------------


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname or "", (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _resolve(base: str, href: str) -> str | None:
    """WHATWG join plus the crawler's normalization (no fragment)."""
    try:
        joined = ada_url.URL(href, base).href
    except ValueError:
        return None
    return joined.split("#", 1)[0]


def _links_in_html(tree: LexborHTMLParser) -> list[tuple[str, str, bool]]:
    """(href, kind, nofollow) of every reference the oracle knows about, in any order."""
    found = []
    for node in tree.css("a[href], area[href]"):
        rel = (node.attributes.get("rel") or "").split()
        found.append((node.attributes["href"] or "", node.tag, "nofollow" in rel))
    for node in tree.css("frame[src], iframe[src]"):
        found.append((node.attributes["src"] or "", node.tag, False))
    for node in tree.css('link[rel="canonical"]'):
        found.append((node.attributes["href"] or "", "canonical", False))
    for node in tree.css('meta[http-equiv="refresh"]'):
        content = node.attributes.get("content") or ""
        found.append((content.split("url=", 1)[1], "refresh", False))
    return found


def _followed_hrefs(tree: LexborHTMLParser) -> list[str]:
    meta = tree.css_first('meta[name="robots"]')
    if meta is not None and "nofollow" in (meta.attributes.get("content") or ""):
        return []
    return [href for href, _, nofollow in _links_in_html(tree) if not nofollow]


def _base_of(tree: LexborHTMLParser, url: str) -> str:
    base = tree.css_first("base[href]")
    return (_resolve(url, base.attributes["href"] or "") or url) if base is not None else url


# -- frontier scenarios: spam farms, calendar traps, a big site -----------------

SCENARIOS = dataclasses.replace(SMALL, spam_farms=2, calendar_traps=1, big_site_pages=60)


@pytest.fixture(scope="module")
def scenario_web() -> Iterator[SimWeb]:
    with run_in_thread(SCENARIOS) as web:
        yield web


def _digest(config: SimWebConfig) -> str:
    model = SimWebModel(config)
    renderer = Renderer(model)
    h = hashlib.sha256()
    for host in model.hosts:
        h.update(model.robots(host.name).body)
        for path in model.paths(host.name):
            page = model.page(host.name, path)
            h.update(f"{host.name}{path}{page.status}{host.ip}".encode())
            h.update(renderer.body(page))
    h.update(repr(sorted(model.dns_records().items())).encode())
    return h.hexdigest()


def test_webs_without_scenarios_are_byte_identical_to_before() -> None:
    # Digests taken from the code as it was before scenarios existed.
    assert _digest(dataclasses.replace(SMALL, port=8080)) == (
        "5414a938a3df624c03a130188f54ba94d094ed161304498b7bb5104511cb6640"
    )
    assert _digest(SimWebConfig(port=8080, hosts=20, page_bytes=2000)) == (
        "3c3f9060e22a453f31aaaef0d80a6a984cbd8f6b9d59fea0481f28d7e1a81c6b"
    )


def test_scenarios_change_only_the_home_pages_that_link_into_them() -> None:
    plain = SimWebModel(dataclasses.replace(SMALL, port=8080))
    model = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    assert model.hosts == plain.hosts and model.ips[: SMALL.ips] == plain.ips
    special = {h.name for h in model.scenario_hosts}
    assert special == {"spamfarm0.test", "spamfarm1.test", "calendar0.test", "bigsite.test"}
    assert {h.ip for h in model.scenario_hosts} <= set(model.ips[SMALL.ips :])
    for host in model.hosts:
        for path in plain.paths(host.name):
            page = model.page(host.name, path)
            targets = {_split(link.url)[0] for link in page.links if link.url}
            if path != "/" or not targets & special:
                assert page == plain.page(host.name, path), (host.name, path)
    linked_from = {
        name: {h.name for h in model.hosts if name in _hosts_linked(model, h.name)}
        for name in special
    }
    # A seed links to each endless PLD; only one other host does.
    seeds = {_split(u)[0] for u in model.seeds()}
    for name in ("spamfarm0.test", "spamfarm1.test", "calendar0.test"):
        assert len(linked_from[name]) == 2 and linked_from[name] & seeds, name
    assert len(linked_from["bigsite.test"]) == sum(1 for h in model.hosts if h.index % 4 != 3)


def test_pld_class_tells_the_scenarios_apart() -> None:
    model = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    cases = {
        "spamfarm0.test": "spam",
        "cheap.Win42.SPAMFARM1.test": "spam",
        "http://a.b.c.spamfarm0.test:8080/x/y.html?q=1": "spam",
        "calendar0.test": "trap",
        "http://calendar0.test:8080/cal/2024/01": "trap",
        "bigsite.test": "big",
        "http://BIGSITE.test:8080/p/5": "big",
        "site0.test": "legit",
        "http://www.site2.test:8080/": "legit",
        "down.test": "legit",
        "x.spamfarm2.test": "legit",  # farm 2 does not exist in this web
        "calendar1.test": "legit",
        "example.org": "legit",
    }
    assert {name: model.pld_class(name) for name in cases} == cases
    farm_host = model.host("a.b.spamfarm1.test")
    assert farm_host is not None and farm_host.pld == "spamfarm1.test"
    plain = SimWebModel(dataclasses.replace(SMALL, port=8080))
    assert plain.pld_class("spamfarm0.test") == "legit" and plain.host("spamfarm0.test") is None


def test_spam_farm_answers_any_name_and_path_with_new_links() -> None:
    model = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    again = Renderer(SimWebModel(dataclasses.replace(SCENARIOS, port=8080)))
    renderer = Renderer(model)
    farm_ips = set(model.ips[SMALL.ips : SMALL.ips + 2 * SCENARIOS.spam_ips])
    for name, path in [
        ("spamfarm0.test", "/"),
        ("deals7.spamfarm0.test", "/anything/at/all?x=1"),
        ("a.b.c.spamfarm1.test", "/win/3.html"),
    ]:
        host = model.host(name)
        assert host is not None and host.ip in farm_ips and model.robots_allows(name, "/private/")
        page = model.page(name, path)
        assert (page.status, page.kind) == (200, "html")
        assert len(page.links) == SCENARIOS.spam_links_per_page
        targets = [_split(link.url) for link in page.links if link.url]
        assert all(
            model.pld_class(h) == "spam" and model.host(h).pld == host.pld for h, _ in targets
        )
        assert sum(h != name for h, _ in targets) >= len(targets) // 3
        assert renderer.body(page) == again.body(again.model.page(name, path))
    assert model.host("spamfarm0.test.evil") is None and model.host("x..spamfarm0.test") is None
    with pytest.raises(ValueError):
        model.paths("x.spamfarm0.test")


def test_calendar_pages_and_their_spellings() -> None:
    model = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    cal = "calendar0.test"

    def targets(path: str) -> list[str]:
        page = model.page(cal, path)
        assert page.status == 200, path
        return [_split(link.url)[1] for link in page.links if link.url]

    assert targets("/") == ["/cal/2024/01"]
    month = targets("/cal/2024/02")
    assert month[:2] == ["/cal/2024/01", "/cal/2024/03"] and len(month) == 2 + 29
    assert targets("/cal/1/01")[0] == "/cal/0/12"
    assert targets("/cal/0/01")[0] == "/cal/-1/12"  # no year zero wall: endless backwards
    assert targets("/cal/-1/12/31") == ["/cal/-1/12/30", "/cal/0/01/01", "/cal/-1/12"]
    assert targets("/cal/1900/02/28")[1] == "/cal/1900/03/01"  # 1900 is no leap year
    for missing in (
        "/cal/2024/13",
        "/cal/02024/01",
        "/cal/-0/01",
        "/cal/2023/02/29",
        "/cal/2024/1",
        "/cal/",
        "/cal/2024/01/",
        "/p/1",
        "/cal/" + "9" * 5000 + "/01",
    ):
        assert model.page(cal, missing).status == 404, missing
    with pytest.raises(ValueError):
        model.paths(cal)


def test_scenario_html_matches_the_model() -> None:
    model = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    renderer = Renderer(model)
    pages = [
        ("free1.spamfarm0.test", "/"),
        ("spamfarm1.test", "/top/9.html"),
        ("calendar0.test", "/"),
        ("calendar0.test", "/cal/2024/05"),
        ("calendar0.test", "/cal/2024/05/31"),
        ("bigsite.test", "/"),
        ("bigsite.test", "/p/13"),
    ]
    for name, path in pages:
        page = model.page(name, path)
        tree = LexborHTMLParser(renderer.body(page))
        assert Counter((h, k, n) for h, k, n in _links_in_html(tree)) == Counter(
            (link.href, link.kind, link.nofollow) for link in page.links
        )
        assert all(_resolve(page.url, link.href) == link.url for link in page.links)
        assert 0.8 * SCENARIOS.page_bytes <= len(renderer.body(page)) <= 1.3 * SCENARIOS.page_bytes


def test_oracle_walks_the_finite_part_and_records_where_it_meets_endless_plds() -> None:
    model = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    truth = model.crawl()
    assert truth.endless == {
        "http://spamfarm0.test:8080/",
        "http://spamfarm1.test:8080/",
        "http://calendar0.test:8080/",
    }
    assert {model.pld_class(u) for u in truth.fetched} == {"legit", "big"}
    big = {model.url("bigsite.test", p) for p in model.paths("bigsite.test")}
    assert len(big) == SCENARIOS.big_site_pages and big <= truth.fetched
    assert model.page("bigsite.test", "/p/61").status == 404  # past the last page
    assert model.page("bigsite.test", "/p/01").status == 404  # one spelling per page


def test_wildcard_dns_through_the_responder(scenario_web: SimWeb) -> None:
    model = scenario_web.model

    async def go() -> None:
        resolver = aiodns.DNSResolver(nameservers=[scenario_web.dns_address], timeout=2, tries=2)
        names = [
            "spamfarm0.test",
            "x.spamfarm0.test",
            "A.B.C.spamfarm1.TEST",
            "casino123456.spamfarm1.test",
            "calendar0.test",
            "bigsite.test",
            "site0.test",
        ]
        farm_ips = set(model.ips[SCENARIOS.ips : SCENARIOS.ips + 2 * SCENARIOS.spam_ips])
        for name in names:
            result = await resolver.query_dns(name, "A")
            assert [r.data.addr for r in result.answer] == [model.resolve(name)], name
            if "spamfarm" in name:
                assert result.answer[0].data.addr in farm_ips
        spread = set()
        for i in range(40):
            result = await resolver.query_dns(f"h{i}.spamfarm0.test", "A")
            spread.add(result.answer[0].data.addr)
        assert len(spread) == SCENARIOS.spam_ips  # a farm uses all of its few IPs
        for name in ("x.spamfarm2.test", "spamfarm0.test.other", "calendar0.test.x"):
            with pytest.raises(aiodns.error.DNSError) as err:
                await resolver.query_dns(name, "A")
            assert err.value.args[0] == aiodns.error.ARES_ENOTFOUND, name
        with pytest.raises(aiodns.error.DNSError) as err:
            await resolver.query_dns("y.spamfarm0.test", "AAAA")
        assert err.value.args[0] == aiodns.error.ARES_ENODATA

    run(go())


def test_bfs_walk_over_http_drowns_in_the_spam_farm(scenario_web: SimWeb) -> None:
    """A plain BFS from the seeds, 300 fetches over real DNS + HTTP: the farm takes over."""
    model = scenario_web.model
    walk = run(_bfs_walk(scenario_web, model.seeds(), pages=300))
    classes = Counter(model.pld_class(url) for url, _, _ in walk.fetched)
    assert classes["spam"] + classes["trap"] >= 150, classes
    assert classes["legit"] and classes["big"]
    last = [model.pld_class(url) for url, _, _ in walk.fetched[-100:]]
    assert last.count("spam") >= 90  # and it only gets worse from there
    spam = [
        (url, status, new) for url, status, new in walk.fetched if model.pld_class(url) == "spam"
    ]
    assert all(status == 200 for _, status, _ in spam)
    # Endless fan-out: every spam page brings (nearly) all-new URLs, on new host names.
    assert all(new >= 0.9 * SCENARIOS.spam_links_per_page for _, _, new in spam)
    assert len({_split(url)[0] for url, _, _ in spam}) > 50
    queued = Counter(model.pld_class(url) for url in walk.queue)
    assert queued["spam"] > 20 * (queued["legit"] + queued["big"])
    farm_ips = set(model.ips[SCENARIOS.ips : SCENARIOS.ips + 2 * SCENARIOS.spam_ips])
    served = {r.server_ip for r in scenario_web.requests if model.pld_class(r.host) == "spam"}
    assert served and served <= farm_ips


def test_calendar_chain_is_endless_over_http(scenario_web: SimWeb) -> None:
    model = scenario_web.model

    async def follow(start: str, which: int, steps: int) -> list[str]:
        """Follow the previous (0) or next (1) month link ``steps`` times."""
        visited = [start]
        async with aiohttp.ClientSession() as session:
            for _ in range(steps):
                status, body = await _get(session, scenario_web, visited[-1])
                assert status == 200
                hrefs = [href for href, _, _ in _links_in_html(LexborHTMLParser(body))]
                links = [_resolve(visited[-1], href) for href in hrefs]
                days = len(links) - 2  # previous month, next month, then each day
                assert 28 <= days <= 31 and all(link and "/cal/" in link for link in links)
                visited.append(links[which] or "")
        return visited

    start = model.url("calendar0.test", "/cal/2024/01")
    forward = run(follow(start, 1, 30))
    backward = run(follow(start, 0, 30))
    assert len(set(forward + backward)) == 61
    assert forward[-1].endswith("/cal/2026/07") and backward[-1].endswith("/cal/2021/07")
    robots = run(fetch(scenario_web, model.url("calendar0.test", "/robots.txt")))
    assert robots[0] == 200 and Protego.parse(robots[2].decode()).can_fetch(start, "drumbeat")


def test_big_site_is_linked_from_most_plds_over_http(scenario_web: SimWeb) -> None:
    model = scenario_web.model

    async def homes() -> dict[str, set[str]]:
        linked: dict[str, set[str]] = {}
        async with aiohttp.ClientSession() as session:
            for host in model.hosts:
                url = model.url(host.name, "/")
                status, body = await _get(session, scenario_web, url)
                assert status == 200
                tree = LexborHTMLParser(body)
                targets = {_resolve(url, href) for href in _followed_hrefs(tree)}
                linked[host.pld] = linked.get(host.pld, set()) | {
                    model.host(_split(t)[0]).pld
                    for t in targets
                    if t and t.startswith("http") and model.host(_split(t)[0]) is not None
                }
        return linked

    linked = run(homes())
    indegree = Counter(pld for source, targets in linked.items() for pld in targets - {source})
    legit_plds = sorted({h.pld for h in model.hosts})
    assert indegree["bigsite.test"] >= 0.75 * len(legit_plds)
    for name in ("spamfarm0.test", "spamfarm1.test", "calendar0.test"):
        assert 1 <= indegree[name] <= 2
    tail = sorted(indegree[p] for p in legit_plds)
    assert indegree["bigsite.test"] > 2 * tail[len(tail) // 2]  # the legit PLDs' median


def test_module_flags_for_scenarios() -> None:
    from drumbeat.simweb.__main__ import build_parser, config_from_args, main

    args = build_parser().parse_args(
        [
            "--spam-farms",
            "3",
            "--spam-ips",
            "4",
            "--spam-links-per-page",
            "25",
            "--calendar-traps",
            "2",
            "--big-site-pages",
            "5000",
            "--hosts",
            "9",
        ]
    )
    assert config_from_args(args) == SimWebConfig(
        hosts=9,
        spam_farms=3,
        spam_ips=4,
        spam_links_per_page=25,
        calendar_traps=2,
        big_site_pages=5000,
    )
    assert config_from_args(build_parser().parse_args([])) == SimWebConfig()
    with pytest.raises(SystemExit) as exit_:
        main(["--spam-farms", "-1"])
    assert exit_.value.code == 2


@dataclasses.dataclass
class _Walk:
    fetched: list[tuple[str, int, int]]  # (url, status, links new to the walk)
    queue: deque[str]


async def _bfs_walk(web: SimWeb, seeds: list[str], pages: int) -> _Walk:
    """Plain BFS: no robots, no politeness, no budgets; DNS through the web's responder."""
    resolver = aiodns.DNSResolver(nameservers=[web.dns_address], timeout=2, tries=2)
    addresses: dict[str, str | None] = {}
    walk = _Walk([], deque(seeds))
    seen = set(walk.queue)
    async with aiohttp.ClientSession() as session:
        while walk.queue and len(walk.fetched) < pages:
            url = walk.queue.popleft()
            host = _split(url)[0]
            if host not in addresses:
                try:
                    answer = await resolver.query_dns(host, "A")
                    addresses[host] = answer.answer[0].data.addr
                except aiodns.error.DNSError:
                    addresses[host] = None
            if addresses[host] in (None, REFUSED_IP):
                continue
            status, body = await _get(session, web, url, addresses[host])
            new = 0
            if status == 200 and body.lstrip().startswith(b"<!DOCTYPE html>"):
                tree = LexborHTMLParser(body)
                base = _base_of(tree, url)
                for href in _followed_hrefs(tree):
                    link = _resolve(base, href)
                    if link and link.startswith("http") and link not in seen:
                        seen.add(link)
                        walk.queue.append(link)
                        new += 1
            walk.fetched.append((url, status, new))
    return walk


async def _get(
    session: aiohttp.ClientSession, web: SimWeb, url: str, ip: str | None = None
) -> tuple[int, bytes]:
    parts = urlsplit(url)
    if ip is None:
        ip = web.model.resolve(parts.hostname or "")
    target = f"http://{ip}:{web.port}" + _split(url)[1]
    async with session.get(target, headers={"Host": parts.netloc}, allow_redirects=False) as resp:
        return resp.status, await resp.read()


def _hosts_linked(model: SimWebModel, host: str) -> set[str]:
    return {_split(link.url)[0] for link in model.page(host, "/").links if link.url}
