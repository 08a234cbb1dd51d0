"""DnsCache against a real UDP DNS responder (dnslib) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from dnslib import AAAA, CNAME, QTYPE, RCODE, RR, A, DNSError, DNSRecord
from dnslib.server import BaseResolver, DNSHandler

from drumbeat.fetch.dns import DnsAnswer, DnsCache
from tests.dnsserver import serve_dns


@dataclass
class Zone(BaseResolver):
    """Answers by the first label: a-* -> A, nx-* -> NXDOMAIN, sf-* -> SERVFAIL,
    mute-* -> no reply at all, six-* -> AAAA only, cname-* -> CNAME to a-target,
    empty-* -> NOERROR without records, slow-* -> A after 0.1 s."""

    # TTL 0 by default: c-ares keeps its own cache of answers with a TTL, and
    # these tests count what reaches the server through DnsCache alone.
    ttl: int = 0
    seen: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        qname = str(request.q.qname)
        qtype = QTYPE[request.q.qtype]
        with self.lock:
            self.seen.append((qname.rstrip("."), qtype))
        label = qname.split(".", 1)[0]
        kind = label.split("-", 1)[0]
        reply = request.reply()
        if kind == "mute":
            raise DNSError("dropped on purpose")
        if kind == "nx":
            reply.header.rcode = RCODE.NXDOMAIN
        elif kind == "sf":
            reply.header.rcode = RCODE.SERVFAIL
        elif kind in ("a", "slow") and qtype == "A":
            if kind == "slow":
                time.sleep(0.1)
            reply.add_answer(RR(qname, QTYPE.A, rdata=A("127.0.0.42"), ttl=self.ttl))
        elif kind == "six" and qtype == "AAAA":
            reply.add_answer(RR(qname, QTYPE.AAAA, rdata=AAAA("::1"), ttl=self.ttl))
        elif kind == "cname" and qtype == "A":
            reply.add_answer(RR(qname, QTYPE.CNAME, rdata=CNAME("a-target.test."), ttl=50))
            reply.add_answer(RR("a-target.test.", QTYPE.A, rdata=A("127.0.0.7"), ttl=self.ttl))
        return reply

    def count(self, name: str, qtype: str = "A") -> int:
        with self.lock:
            return self.seen.count((name, qtype))


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def dns_server() -> Iterator[tuple[Zone, str]]:
    zone = Zone()
    with serve_dns(zone) as address:
        yield zone, address


@pytest.fixture
def zone(dns_server: tuple[Zone, str]) -> tuple[Zone, str]:
    """The shared responder, reset: TTL 0 and no queries seen."""
    responder, ns = dns_server
    responder.ttl = 0
    with responder.lock:
        responder.seen.clear()
    return responder, ns


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_a_record_is_resolved_and_cached(zone: tuple[Zone, str]) -> None:
    server, ns = zone
    server.ttl = 300
    clock = FakeClock()

    async def main() -> tuple[DnsAnswer, DnsAnswer]:
        cache = DnsCache(nameserver=ns, clock=clock, min_ttl_s=1)
        try:
            first = await cache.resolve("a-one.test")
            second = await cache.resolve("A-ONE.test.")
            stats = cache.stats()
            assert (stats.misses, stats.hits, stats.queries, stats.entries) == (1, 1, 1, 1)
            return first, second
        finally:
            await cache.close()

    first, second = run(main())
    assert first == DnsAnswer("127.0.0.42", None, 300, 1300)
    assert second == first
    assert server.count("a-one.test") == 1


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("nx-gone.test", "dns:nxdomain"),
        ("sf-broken.test", "dns:servfail"),
        ("empty-x.test", "dns:noanswer"),
    ],
)
def test_failures_have_stable_reasons_and_are_cached(
    zone: tuple[Zone, str], name: str, reason: str
) -> None:
    server, ns = zone
    clock = FakeClock()

    async def main() -> None:
        cache = DnsCache(nameserver=ns, clock=clock, negative_ttl_s=30, tries=1)
        try:
            answer = await cache.resolve(name)
            assert answer == DnsAnswer(None, reason, 30, 1030)
            queries = len(server.seen)
            assert queries >= 1
            assert await cache.resolve(name) == answer
            clock.now += 29
            assert await cache.resolve(name) == answer
            assert len(server.seen) == queries  # served from the negative cache
            stats = cache.stats()
            assert stats.negative_hits == 2
            assert dict(stats.errors) == {reason: 1}
        finally:
            await cache.close()

    run(main())


def test_an_expired_negative_answer_is_asked_again(zone: tuple[Zone, str]) -> None:
    server, ns = zone
    clock = FakeClock()

    async def main() -> None:
        cache = DnsCache(nameserver=ns, clock=clock, negative_ttl_s=30)
        try:
            assert (await cache.resolve("nx-again.test")).error == "dns:nxdomain"
            clock.now += 31
            assert (await cache.resolve("nx-again.test")).error == "dns:nxdomain"
            assert dict(cache.stats().errors) == {"dns:nxdomain": 2}
        finally:
            await cache.close()

    run(main())
    assert server.count("nx-again.test") == 2


def test_a_silent_server_gives_a_timeout(zone: tuple[Zone, str]) -> None:
    _, ns = zone

    async def main() -> DnsAnswer:
        cache = DnsCache(nameserver=ns, timeout_s=0.2, tries=1)
        try:
            return await asyncio.wait_for(cache.resolve("mute-x.test"), 10)
        finally:
            await cache.close()

    answer = run(main())
    assert answer.ip is None and answer.error == "dns:timeout"


def test_ttl_is_clamped_and_expires_on_the_injected_clock(zone: tuple[Zone, str]) -> None:
    server, ns = zone
    clock = FakeClock()

    async def main() -> None:
        cache = DnsCache(nameserver=ns, clock=clock, min_ttl_s=60, max_ttl_s=120)
        try:
            assert (await cache.resolve("a-short.test")).ttl_s == 60  # 0 raised to min
            clock.now += 59.5
            await cache.resolve("a-short.test")
            assert server.count("a-short.test") == 1
            clock.now += 1
            await cache.resolve("a-short.test")
            assert server.count("a-short.test") == 2
            server.ttl = 10**6
            assert (await cache.resolve("a-long.test")).ttl_s == 120  # lowered to max
        finally:
            await cache.close()

    run(main())


def test_cname_chain_uses_the_smallest_ttl(zone: tuple[Zone, str]) -> None:
    server, ns = zone
    server.ttl = 300

    async def main() -> DnsAnswer:
        cache = DnsCache(nameserver=ns, clock=FakeClock(), min_ttl_s=1)
        try:
            return await cache.resolve("cname-x.test")
        finally:
            await cache.close()

    assert run(main()) == DnsAnswer("127.0.0.7", None, 50, 1050)


def test_aaaa_is_tried_when_there_is_no_a_record(zone: tuple[Zone, str]) -> None:
    server, ns = zone

    async def main() -> DnsAnswer:
        cache = DnsCache(nameserver=ns)
        try:
            answer = await cache.resolve("six-only.test")
            assert cache.stats().queries == 2
            return answer
        finally:
            await cache.close()

    assert run(main()).ip == "::1"
    assert server.count("six-only.test", "A") == 1
    assert server.count("six-only.test", "AAAA") == 1


def test_concurrent_lookups_share_one_query(zone: tuple[Zone, str]) -> None:
    server, ns = zone

    async def main() -> list[DnsAnswer]:
        cache = DnsCache(nameserver=ns)
        try:
            answers = await asyncio.gather(*(cache.resolve("slow-shared.test") for _ in range(20)))
            stats = cache.stats()
            assert (stats.misses, stats.joined, stats.queries) == (1, 19, 1)
            return list(answers)
        finally:
            await cache.close()

    answers = run(main())
    assert {a.ip for a in answers} == {"127.0.0.42"}
    assert server.count("slow-shared.test") == 1


def test_a_cancelled_asker_does_not_cancel_the_shared_query(zone: tuple[Zone, str]) -> None:
    _, ns = zone

    async def main() -> DnsAnswer:
        cache = DnsCache(nameserver=ns)
        try:
            impatient = asyncio.ensure_future(cache.resolve("slow-cancel.test"))
            patient = asyncio.ensure_future(cache.resolve("slow-cancel.test"))
            await asyncio.sleep(0)
            impatient.cancel()
            return await patient
        finally:
            await cache.close()

    assert run(main()).ip == "127.0.0.42"


def test_lru_bound(zone: tuple[Zone, str]) -> None:
    server, ns = zone

    async def main() -> None:
        cache = DnsCache(nameserver=ns, max_entries=3)
        try:
            for name in ("a-1.test", "a-2.test", "a-3.test"):
                await cache.resolve(name)
            await cache.resolve("a-1.test")  # a-1 is now the most recent
            await cache.resolve("a-4.test")  # evicts a-2, the least recent
            assert cache.stats().entries == 3
            await cache.resolve("a-1.test")
            await cache.resolve("a-3.test")
            assert server.count("a-1.test") == 1 and server.count("a-3.test") == 1
            await cache.resolve("a-2.test")
            assert server.count("a-2.test") == 2
            assert cache.stats().entries == 3
        finally:
            await cache.close()

    run(main())


def test_literals_and_localhost_need_no_query(zone: tuple[Zone, str]) -> None:
    server, ns = zone

    async def main() -> list[DnsAnswer]:
        cache = DnsCache(nameserver=ns)
        try:
            answers = [
                await cache.resolve(host)
                for host in (
                    "127.0.0.9",
                    "::1",
                    "[::1]",
                    "localhost",
                    "LOCALHOST.",
                    "app.localhost",
                )
            ]
            assert cache.stats().queries == 0 and cache.stats().entries == 0
            return answers
        finally:
            await cache.close()

    answers = run(main())
    assert all(a.error is None and a.expires == math.inf for a in answers)
    ips = [a.ip for a in answers]
    assert ips == ["127.0.0.9", "::1", "::1", "127.0.0.1", "127.0.0.1", "127.0.0.1"]
    assert server.seen == []


def test_a_malformed_name_is_an_error_not_an_exception(zone: tuple[Zone, str]) -> None:
    _, ns = zone

    async def main() -> DnsAnswer:
        cache = DnsCache(nameserver=ns, negative_ttl_s=10, clock=FakeClock())
        try:
            return await cache.resolve("a" * 300 + ".test")
        finally:
            await cache.close()

    answer = run(main())
    assert answer.ip is None and answer.error is not None and answer.error.startswith("dns:")
