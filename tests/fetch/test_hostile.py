"""The fetch layer against simweb's hostile hosts (real servers on 127.4.0.x, real DNS).

Every case is fetched once by an HttpClient whose policy refuses loopback except the
hostile servers' own addresses; what the fetcher would do next (link extraction,
robots parsing) runs on the result. Each outcome must be bounded in bytes, time and
memory, carry a stable reason or flag, and raise nothing. ``python -m tests.test_hostile``
prints the outcome table.

The fetches run once per backend (the module-scoped ``backend`` fixture: "aiohttp" is
HttpClient, "curl" is CurlHttpClient) and every assertion holds for both.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from drumbeat import urls
from drumbeat.fetch import guard
from drumbeat.fetch.client import HttpClient
from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.dns import DnsCache
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.fetch.response import FetchResponse
from drumbeat.frontier.robots import ALLOW_ALL, RULES, UNAVAILABLE, RobotsStore
from drumbeat.parse.links import DEFAULT_MAX_PARSE_BYTES, extract_links
from drumbeat.simweb import SimWeb, SimWebConfig, SimWebModel, hostile, run_in_thread

# Its fetches run against 1 s timeouts, in one process with the servers and under
# tracemalloc: other tests' load could time them out. One pytest-xdist worker runs them
# all, so that each backend's cases are fetched once.
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("fetch_hostile")]

UA = "drumbeat-test/1.0 (+http://example.invalid/bot)"
BODY_CAP = 8 << 20
DECODED_CAP = 16 << 20
ROBOTS_CAP = 512 << 10
MAX_LINKS = 10_000
TOTAL_TIMEOUT_S = 2.0
INTERVAL_S = 0.3  # slow cases: one byte per interval, well inside the read timeout
# Bounds, not speeds: a case that is not bounded runs into the server's own limits
# (minutes, gigabytes), far beyond these.
TIME_BOUND_S = TOTAL_TIMEOUT_S + 10
# A few copies of the capped bodies, plus lexbor's DOM of the parsed bytes (up to ~70
# bytes per byte of markup): set by the caps, not by the gigabytes a bomb expands to.
MEMORY_BOUND = 4 * (BODY_CAP + DECODED_CAP) + 80 * DEFAULT_MAX_PARSE_BYTES


@dataclass(frozen=True, slots=True)
class OnlyHostileServers:
    """The operator's policy for this test: loopback refused, except the case servers.

    Anything else is judged by the default policy (public only), so every other
    loopback address, the sentinel's included, gets ``guard:loopback``.
    """

    allowed: frozenset[str]
    default: AddressPolicy = AddressPolicy()

    def refusal(self, ip: str) -> str | None:
        return None if ip in self.allowed else self.default.refusal(ip)


@dataclass(slots=True)
class Outcome:
    """One row of the table: the response plus what the crawler made of it."""

    case: hostile.HostileCase
    response: FetchResponse
    seconds: float
    peak_bytes: int
    recorded: str
    links: list[str] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    robots_state: str | None = None


@pytest.fixture(scope="module")
def sim() -> Iterator[SimWeb]:
    config = SimWebConfig(hosts=3, pages_per_host=2, hostile=True, hostile_interval_s=INTERVAL_S)
    with run_in_thread(config) as web:
        yield web


CLIENTS = {"aiohttp": AiohttpClient, "curl": CurlHttpClient}


@pytest.fixture(scope="module", params=sorted(CLIENTS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def outcomes(sim: SimWeb, backend: str) -> dict[str, Outcome]:
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(asyncio.wait_for(run_cases(sim, Path(tmp), backend), 120))


def make_client(sim: SimWeb, dns: DnsCache, backend: str = "aiohttp") -> HttpClient:
    policy = OnlyHostileServers(frozenset(hostile.address(c) for c in hostile.SERVED))
    return CLIENTS[backend](  # type: ignore[return-value]
        user_agent=UA,
        policy=policy,
        resolver=dns,  # type: ignore[arg-type]
        connect_timeout_s=1,
        read_timeout_s=1,
        total_timeout_s=TOTAL_TIMEOUT_S,
        max_body_bytes=BODY_CAP,
        max_decoded_bytes=DECODED_CAP,
    )


async def run_cases(sim: SimWeb, tmp: Path, backend: str = "aiohttp") -> dict[str, Outcome]:
    dns = DnsCache(nameserver=sim.dns_address, timeout_s=0.5, tries=1)
    http = make_client(sim, dns, backend)
    store = RobotsStore(
        tmp / "robots",
        robots_agent="drumbeat",
        expiry_s=3600,
        retry_s=60,
        max_attempts=3,
        fsync=False,
    )
    results: dict[str, Outcome] = {}
    # tracemalloc sees the server's thread too: let it build its bombs before measuring.
    for name in ("gzip-bomb", "deflate-bomb", "brotli-bomb"):
        await http.fetch(hostile.entry_url(hostile.case(name), "test", sim.port), None)
    tracemalloc.start()
    try:
        for c in hostile.CASES:
            url = hostile.entry_url(c, sim.model.config.tld, sim.port)
            tracemalloc.reset_peak()
            # Outcomes already kept stay traced: count what this case adds on top.
            base = tracemalloc.get_traced_memory()[0]
            started = time.perf_counter()
            if c.target == "robots":
                response = await http.fetch_robots(url, None, max_bytes=ROBOTS_CAP)
            else:
                response = await http.fetch(url, None)
            outcome = Outcome(c, response, 0.0, 0, "")
            after_fetch(outcome, store)
            outcome.seconds = time.perf_counter() - started
            outcome.peak_bytes = tracemalloc.get_traced_memory()[1] - base
            results[c.name] = outcome
    finally:
        tracemalloc.stop()
        store.close()
        await http.close()
        await dns.close()
    return results


def after_fetch(outcome: Outcome, store: RobotsStore) -> None:
    """What the fetcher and manager do with a response, as far as it concerns bounds."""
    r = outcome.response
    if outcome.case.target == "robots":
        # As the fetcher hands it on: a failed fetch has no robots text.
        ok = r.error is None and r.decoded is not None
        text = r.decoded.decode("utf-8", "replace") if ok and r.decoded is not None else None
        entry = store.record(urls.origin_of(r.url), r.status if ok else None, text)
        entry.allows(r.url)
        outcome.robots_state = entry.state
        outcome.recorded = f"robots {entry.state}" + (f" ({r.error})" if r.error else "")
        return
    if r.status is not None and 200 <= r.status < 300 and r.decoded is not None:
        content_type = next((v for k, v in r.headers if k.lower() == "content-type"), None)
        page = extract_links(r.decoded, r.url, max_links=MAX_LINKS, content_type=content_type)
        outcome.links, outcome.dropped = page.links, page.dropped
    parts = [r.error or f"status {r.status}"]
    if r.truncated:
        parts.append(f"truncated: {r.truncated}")
    if r.decoded_truncated:
        parts.append("decoded_truncated")
    if r.retry_after_s is not None:
        parts.append(f"retry_after_s={r.retry_after_s:.0f}")
    if r.location:
        parts.append("location")
    if outcome.links or outcome.dropped:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(outcome.dropped.items()))
        parts.append(f"{len(outcome.links)} links" + (f"; dropped {dropped}" if dropped else ""))
    outcome.recorded = "; ".join(parts)


def table(outcomes: dict[str, Outcome]) -> str:
    lines = [
        "| case | what the server does | bytes read (wire / decoded) | time | peak RAM | recorded |",  # noqa: E501 (the table as printed)
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes.values():
        r = o.response
        decoded = "-" if r.decoded is None else f"{len(r.decoded):,}"
        lines.append(
            f"| {o.case.name} | {o.case.description} | {len(r.body):,} / {decoded} "
            f"| {o.seconds:.2f} s | {o.peak_bytes / 2**20:.1f} MiB | {o.recorded} |"
        )
    return "\n".join(lines)


# -- every case is bounded ----------------------------------------------------------------


def test_every_case_is_bounded_in_bytes_time_and_memory(outcomes: dict[str, Outcome]) -> None:
    assert set(outcomes) == {c.name for c in hostile.CASES}
    for name, o in outcomes.items():
        r = o.response
        assert len(r.body) <= BODY_CAP, name
        assert r.decoded is None or len(r.decoded) <= DECODED_CAP, name
        assert o.seconds < TIME_BOUND_S, name
        assert o.peak_bytes < MEMORY_BOUND, name
        assert len(r.redirects) <= 5, name
        assert r.status is not None or r.error is not None, name


EXPECTED_ERRORS = {
    "slow-head": {"timeout"},
    "slow-body": {"timeout"},
    "huge-header": {"http:header_too_large"},
    "many-headers": {"http:header_too_large"},
    "bad-header": {"http:bad_header", "http:bad_message"},
    "bad-status": {"http:bad_status_line"},
    "no-status": {"http:bad_status_line"},
    "garbage": {"http:bad_status_line"},
    "reset": {"http:incomplete_body", "http:disconnected"},
    "short-body": {"http:incomplete_body"},
    "robots-slow": {"timeout"},
    "robots-loop": {"too_many_redirects"},
    "robots-chain": {"too_many_redirects"},
    "robots-loopback": {"guard:loopback"},
    "nxdomain": {"dns:nxdomain"},
    "servfail": {"dns:servfail"},
    "dns-timeout": {"dns:timeout"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_ERRORS))
def test_failures_have_stable_reasons(outcomes: dict[str, Outcome], name: str) -> None:
    assert outcomes[name].response.error in EXPECTED_ERRORS[name]


def test_every_other_case_is_a_response(outcomes: dict[str, Outcome]) -> None:
    for name, o in outcomes.items():
        if name not in EXPECTED_ERRORS:
            assert o.response.error is None and o.response.status is not None, name


@pytest.mark.parametrize("name", ["gzip-bomb", "deflate-bomb", "brotli-bomb"])
def test_bombs_are_decoded_up_to_the_cap(outcomes: dict[str, Outcome], name: str) -> None:
    r = outcomes[name].response
    assert r.decoded_truncated and r.decoded is not None and len(r.decoded) == DECODED_CAP
    assert r.truncated is None and len(r.body) < 2 << 20  # the whole bomb is small on the wire


@pytest.mark.parametrize("name", ["endless", "endless-chunked"])
def test_endless_bodies_stop_at_the_body_cap(outcomes: dict[str, Outcome], name: str) -> None:
    r = outcomes[name].response
    assert r.truncated == "length" and len(r.body) == BODY_CAP


def test_slow_body_keeps_what_arrived(outcomes: dict[str, Outcome]) -> None:
    r = outcomes["slow-body"].response
    assert r.status == 200 and 0 < len(r.body) < 100
    assert (r.error, r.truncated) == ("timeout", "time")  # WARC-Truncated: time


def test_a_reset_keeps_what_arrived(outcomes: dict[str, Outcome]) -> None:
    r = outcomes["reset"].response
    assert r.status == 200 and 0 < len(r.body) < 1 << 20
    assert r.truncated == "disconnect"  # WARC-Truncated: disconnect


def test_a_short_body_is_marked_cut_by_disconnect(outcomes: dict[str, Outcome]) -> None:
    r = outcomes["short-body"].response
    assert (r.status, r.error, r.truncated) == (200, "http:incomplete_body", "disconnect")
    assert 0 < len(r.body) < 1 << 20


def test_many_links_are_cut_and_counted(outcomes: dict[str, Outcome]) -> None:
    o = outcomes["many-links"]
    assert len(o.links) == MAX_LINKS
    # The parse stops once the page has a few times MAX_LINKS distinct references; the
    # references never parsed are not counted.
    assert 0 < o.dropped["too_many_links"] < hostile.MANY_LINKS - MAX_LINKS
    r = o.response
    assert r.decoded is not None
    assert extract_links(r.decoded, r.url, max_links=MAX_LINKS).cut == "max_links"


def test_long_and_malformed_urls_are_dropped_with_reasons(
    sim: SimWeb, outcomes: dict[str, Outcome]
) -> None:
    o = outcomes["long-urls"]
    assert o.dropped["too_long"] >= 3
    assert o.dropped["unparsable"] >= 3 and o.dropped["scheme"] >= 3
    assert set(o.dropped) <= {"too_long", "unparsable", "scheme", "no_host", "bad_port"}
    # Every reference is either kept or counted: nothing vanishes silently.
    assert len(o.links) + sum(o.dropped.values()) == len(hostile.malformed_links("test"))
    assert all(len(link) <= urls.DEFAULT_MAX_URL_BYTES for link in o.links)


def test_long_location_is_rejected_by_normalization(outcomes: dict[str, Outcome]) -> None:
    r = outcomes["long-location"].response
    assert r.status == 302 and r.location is not None
    with pytest.raises(urls.URLRejected) as rejected:
        urls.normalize(r.location)
    assert rejected.value.reason == "too_long"


@pytest.mark.parametrize(
    "name", ["charset-wrong", "charset-absent", "charset-invalid", "charset-bogus", "binary-html"]
)
def test_bad_encodings_still_parse(outcomes: dict[str, Outcome], name: str) -> None:
    o = outcomes[name]
    assert o.response.status == 200
    for link in o.links:
        assert urls.normalize(link) == link and link.isascii()


def test_utf8_under_a_wrong_charset_label(sim: SimWeb, outcomes: dict[str, Outcome]) -> None:
    """The HTTP charset wins, as in a browser, which follows the same link."""
    origin = hostile.origin(hostile.case("charset-wrong"), "test", sim.port)
    assert outcomes["charset-wrong"].links == [origin + "/caf%C3%83%C2%A9"]


def test_windows_1252_without_a_charset(sim: SimWeb, outcomes: dict[str, Outcome]) -> None:
    origin = hostile.origin(hostile.case("charset-absent"), "test", sim.port)
    assert outcomes["charset-absent"].links == [origin + "/caf%C3%A9"]


def test_idn_links_normalize_to_punycode(sim: SimWeb, outcomes: dict[str, Outcome]) -> None:
    o = outcomes["idn"]
    origin = hostile.origin(hostile.case("idn"), "test", sim.port)
    assert origin.startswith("http://xn--bcher-kva.hostile.test")
    for path in ("/unicode", "/punycode", "/upper", "/escaped"):
        assert origin + path in o.links
    assert all(link.isascii() for link in o.links)
    assert sum(o.dropped.values()) >= 1  # the broken IDNs


def test_retry_after(outcomes: dict[str, Outcome]) -> None:
    assert outcomes["status-429"].response.status == 429
    assert outcomes["status-429"].response.retry_after_s == hostile.RETRY_AFTER_S
    late = outcomes["status-503"].response
    assert late.status == 503 and late.retry_after_s is not None
    # The date is the server's clock + RETRY_AFTER_S when it answered, counted from when
    # the fetch began (fetch_time): up to the fetch's duration more (seconds, on a loaded
    # machine's full test run).
    assert (
        hostile.RETRY_AFTER_S - 30
        < late.retry_after_s
        <= hostile.RETRY_AFTER_S + late.elapsed_ms / 1000
    )
    assert outcomes["status-503-bad-retry"].response.retry_after_s is None


def test_robots_outcomes(outcomes: dict[str, Outcome]) -> None:
    huge = outcomes["robots-huge"]
    assert huge.response.truncated and len(huge.response.body) == ROBOTS_CAP
    assert huge.robots_state == RULES
    assert outcomes["robots-binary"].robots_state in (RULES, ALLOW_ALL)
    assert outcomes["robots-html"].robots_state in (RULES, ALLOW_ALL)
    for name in ("robots-slow", "robots-loop", "robots-chain", "robots-loopback"):
        assert outcomes[name].robots_state == UNAVAILABLE, name
    assert len(outcomes["robots-chain"].response.redirects) == 5


# -- redirects and the address guard ------------------------------------------------------


def test_redirect_loop_and_chain_as_a_crawler_follows_them(sim: SimWeb, backend: str) -> None:
    """Redirects come back unfollowed; a crawler that follows them as links with a seen
    set leaves a loop after one round and a 50-hop chain after 50 fetches."""

    async def follow(start: str, limit: int) -> tuple[int, FetchResponse]:
        dns = DnsCache(nameserver=sim.dns_address, timeout_s=0.5, tries=1)
        http = make_client(sim, dns, backend)
        seen, url, fetches = {start}, start, 0
        try:
            while fetches < limit:
                response = await http.fetch(url, None)
                fetches += 1
                if response.location is None:
                    return fetches, response
                nxt = urls.normalize(response.location)
                if nxt in seen:
                    return fetches, response
                seen.add(nxt)
                url = nxt
            raise AssertionError(f"no end after {limit} fetches")
        finally:
            await http.close()
            await dns.close()

    loop_url = hostile.entry_url(hostile.case("redirect-loop"), "test", sim.port)
    fetches, last = asyncio.run(follow(loop_url, 10))
    assert fetches == 2 and last.status == 302
    chain_url = hostile.entry_url(hostile.case("redirect-chain"), "test", sim.port)
    fetches, last = asyncio.run(follow(chain_url, 100))
    assert fetches == hostile.REDIRECT_CHAIN_HOPS + 1 and last.status == 200


def test_redirects_to_loopback_are_refused_before_connecting(sim: SimWeb, backend: str) -> None:
    """Every Location of redirect-loopback is refused after DNS, and nothing connects."""
    c = hostile.case("redirect-loopback")
    origin = hostile.origin(c, "test", sim.port)
    targets = hostile.loopback_targets("test", sim.port)

    async def main() -> list[FetchResponse]:
        dns = DnsCache(nameserver=sim.dns_address, timeout_s=0.5, tries=1)
        http = make_client(sim, dns, backend)
        try:
            found = []
            for path, target in targets.items():
                hop = await http.fetch(origin + path, None)
                assert hop.status == 302 and hop.location == target
                found.append(await http.fetch(urls.normalize(hop.location), None))
            return found
        finally:
            await http.close()
            await dns.close()

    before = sim.hostile_server.sentinel_connections
    followed = asyncio.run(main())
    assert [r.error for r in followed] == ["guard:loopback"] * len(targets)
    assert {r.ip for r in followed} <= {"127.0.0.1", "::1", hostile.SENTINEL_IP}
    assert sim.hostile_server.sentinel_connections == before == 0


def test_the_classifier_on_the_loopback_targets() -> None:
    for ip in ("127.0.0.1", "::1", hostile.SENTINEL_IP, "::ffff:127.0.0.1", "127.4.0.1"):
        assert guard.classify(ip) == guard.LOOPBACK
        assert AddressPolicy().refusal(ip) == "guard:loopback"
        assert AddressPolicy(allow_loopback=True).refusal(ip) is None


def test_idn_host_is_fetched_by_its_unicode_url(sim: SimWeb, backend: str) -> None:
    async def main() -> FetchResponse:
        dns = DnsCache(nameserver=sim.dns_address, timeout_s=0.5, tries=1)
        http = make_client(sim, dns, backend)
        try:
            return await http.fetch(f"http://bücher.hostile.test:{sim.port}/unicode", None)
        finally:
            await http.close()
            await dns.close()

    response = asyncio.run(main())
    assert response.error is None and response.status == 200


def test_the_model_links_to_every_case_only_when_hostile() -> None:
    plain = SimWebModel(SimWebConfig(hosts=3, port=8080))
    assert plain.hostile_entry_urls() == []
    model = SimWebModel(SimWebConfig(hosts=3, port=8080, hostile=True))
    home = {link.url for link in model.page(model.hosts[0].name, "/").links}
    entries = [u for u in model.hostile_entry_urls() if u.endswith("/")]
    assert len(entries) == len(hostile.CASES) and set(entries) <= home
    # Hostile hosts are not hosts of the model: the oracle leaves their URLs out.
    truth = model.crawl()
    for found in (truth.fetched, truth.disallowed, truth.host_blocked, truth.unreachable):
        assert not any(".hostile." in url for url in found)


def test_table(
    outcomes: dict[str, Outcome], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = table(outcomes)
    assert text.count("\n") == len(hostile.CASES) + 1
    with capsys.disabled():
        print(f"\n{backend}:\n" + text)


if __name__ == "__main__":
    config = SimWebConfig(hosts=3, pages_per_host=2, hostile=True, hostile_interval_s=INTERVAL_S)
    with run_in_thread(config) as web, tempfile.TemporaryDirectory() as tmpdir:
        print(table(asyncio.run(run_cases(web, Path(tmpdir)))))
