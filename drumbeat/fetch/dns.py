"""A bounded, TTL-respecting DNS cache on top of aiodns (c-ares).

The manager resolves each host once and hands the address to the fetchers, so
this cache sits on the manager's hot path: it must answer repeated names from
RAM, share one query between concurrent askers, and never grow past
``max_entries`` however many hosts the crawl discovers.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Protocol

import aiodns
import pycares
from aiodns import error as ares

NXDOMAIN: Final = "dns:nxdomain"
SERVFAIL: Final = "dns:servfail"
TIMEOUT: Final = "dns:timeout"
NOANSWER: Final = "dns:noanswer"
ERROR: Final = "dns:error"

_ARES_REASONS: Final[Mapping[int, str]] = {
    ares.ARES_ENOTFOUND: NXDOMAIN,
    ares.ARES_ESERVFAIL: SERVFAIL,
    ares.ARES_ETIMEOUT: TIMEOUT,
    ares.ARES_ENODATA: NOANSWER,
}

_LOCALHOST: Final = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class DnsAnswer:
    """The outcome of resolving one host name.

    Exactly one of ``ip`` and ``error`` is set. ``error`` is one of the stable
    reasons ``dns:nxdomain``, ``dns:servfail``, ``dns:timeout``,
    ``dns:noanswer``, ``dns:error``. ``ttl_s`` is how long the answer is cached
    (already clamped); ``expires`` is when it stops being served, on the cache's
    clock (``math.inf`` for IP literals and ``localhost``).
    """

    ip: str | None
    error: str | None
    ttl_s: float
    expires: float


class Resolver(Protocol):
    """Anything that turns a host name into a :class:`DnsAnswer` without raising."""

    async def resolve(self, host: str) -> DnsAnswer: ...


@dataclass(frozen=True, slots=True)
class DnsStats:
    """Counters since the cache was created.

    ``hits`` are positive answers served from the cache, ``negative_hits``
    cached failures served again; ``misses`` are lookups that were not cached
    and started a query; ``joined`` are lookups that waited for a query already
    in flight. ``queries`` counts DNS queries sent (an A miss followed by an
    AAAA fallback is two). ``errors`` counts fresh failures by reason.
    ``entries`` is the current number of cached names.
    """

    hits: int
    negative_hits: int
    misses: int
    joined: int
    queries: int
    errors: Mapping[str, int]
    entries: int


class DnsCache:
    """Resolve host names through aiodns and cache the answers (a :class:`Resolver`).

    * IP literals (``1.2.3.4``, ``::1``, ``[::1]``) resolve to themselves and
      ``localhost`` (and ``*.localhost``, RFC 6761) to 127.0.0.1, without a query.
    * Names are looked up as A records; when a name has no A record, AAAA is
      tried before the name counts as ``dns:noanswer``.
    * A positive answer is cached for its smallest record TTL clamped to
      ``[min_ttl_s, max_ttl_s]``. Every failure (NXDOMAIN, SERVFAIL, timeout, no
      data, other errors) is cached for ``negative_ttl_s``: a dead host must not
      cost a query per URL.
    * Concurrent lookups of one name share one query.
    * At most ``max_entries`` names are cached; the least recently used go first.
    * ``nameserver`` is ``"HOST"`` or ``"HOST:PORT"``; None uses the system
      configuration. ``timeout_s`` and ``tries`` are passed to c-ares.

    :meth:`resolve` never raises for DNS problems; the answer carries the reason.

    c-ares (>= 1.23) keeps its own query cache in the channel, honouring record
    TTLs up to one hour, and pycares offers no option to switch it off. It never
    serves an answer past its TTL, so answers stay correct, but its size is set
    by the names resolved in the last hour rather than by ``max_entries``.
    """

    def __init__(
        self,
        *,
        nameserver: str | None = None,
        timeout_s: float = 5.0,
        tries: int = 2,
        min_ttl_s: float = 60,
        max_ttl_s: float = 86400,
        negative_ttl_s: float = 300,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if min_ttl_s > max_ttl_s:
            raise ValueError("min_ttl_s must not exceed max_ttl_s")
        self._nameserver = nameserver
        self._timeout_s = timeout_s
        self._tries = tries
        self._min_ttl_s = min_ttl_s
        self._max_ttl_s = max_ttl_s
        self._negative_ttl_s = negative_ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[str, DnsAnswer] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[DnsAnswer]] = {}
        # Created on first use: c-ares binds to the running event loop.
        self._channel: aiodns.DNSResolver | None = None
        self._hits = 0
        self._negative_hits = 0
        self._misses = 0
        self._joined = 0
        self._queries = 0
        self._errors: Counter[str] = Counter()

    async def resolve(self, host: str) -> DnsAnswer:
        """Return the address of ``host`` (or why there is none), from cache if fresh."""
        name = host.strip().lower().rstrip(".")
        literal = _literal_answer(name)
        if literal is not None:
            return literal
        cached = self._cache.get(name)
        if cached is not None:
            if cached.expires > self._clock():
                self._cache.move_to_end(name)
                if cached.ip is None:
                    self._negative_hits += 1
                else:
                    self._hits += 1
                return cached
            del self._cache[name]
        task = self._inflight.get(name)
        if task is None:
            self._misses += 1
            task = asyncio.get_running_loop().create_task(self._lookup(name))
            self._inflight[name] = task
            task.add_done_callback(lambda _: self._inflight.pop(name, None))
        else:
            self._joined += 1
        # Shielded so that one cancelled asker does not cancel the query the
        # others are waiting for.
        return await asyncio.shield(task)

    def stats(self) -> DnsStats:
        """A snapshot of the counters."""
        return DnsStats(
            hits=self._hits,
            negative_hits=self._negative_hits,
            misses=self._misses,
            joined=self._joined,
            queries=self._queries,
            errors=MappingProxyType(dict(self._errors)),
            entries=len(self._cache),
        )

    async def close(self) -> None:
        """Cancel queries in flight and release the c-ares channel."""
        for task in list(self._inflight.values()):
            task.cancel()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def __repr__(self) -> str:
        return (
            f"<DnsCache [{len(self._cache)}/{self._max_entries} entries, "
            f"{len(self._inflight)} in flight, {self._queries} queries]>"
        )

    async def _lookup(self, name: str) -> DnsAnswer:
        ip, ttl, error = await self._query(name, "A")
        if error == NOANSWER:
            ip, ttl, error = await self._query(name, "AAAA")
        now = self._clock()
        if error is not None:
            self._errors[error] += 1
            answer = DnsAnswer(None, error, self._negative_ttl_s, now + self._negative_ttl_s)
        else:
            ttl_s = min(max(ttl, self._min_ttl_s), self._max_ttl_s)
            answer = DnsAnswer(ip, None, ttl_s, now + ttl_s)
        self._cache[name] = answer
        self._cache.move_to_end(name)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return answer

    async def _query(self, name: str, qtype: str) -> tuple[str | None, float, str | None]:
        """One query: (address, smallest TTL of the answer records, error reason)."""
        self._queries += 1
        try:
            result = await self._resolver().query_dns(name, qtype)
        except ares.DNSError as exc:
            return None, 0.0, _ARES_REASONS.get(exc.args[0], ERROR) if exc.args else ERROR
        wanted = pycares.QUERY_TYPE_A if qtype == "A" else pycares.QUERY_TYPE_AAAA
        addresses = [r for r in result.answer if r.type == wanted]
        if not addresses:
            # A CNAME chain that ends nowhere: no usable address.
            return None, 0.0, NOANSWER
        # The whole chain (CNAMEs included) is only valid as long as its
        # shortest-lived record.
        ttl = min(record.ttl for record in result.answer)
        data = addresses[0].data
        assert isinstance(data, (pycares.ARecordData, pycares.AAAARecordData))
        return str(data.addr), float(ttl), None

    def _resolver(self) -> aiodns.DNSResolver:
        if self._channel is None:
            self._channel = aiodns.DNSResolver(
                nameservers=[self._nameserver] if self._nameserver else None,
                timeout=self._timeout_s,
                tries=self._tries,
            )
        return self._channel


def _literal_answer(name: str) -> DnsAnswer | None:
    """The answer for names that need no query, or None."""
    if name == "localhost" or name.endswith(".localhost"):
        return DnsAnswer(_LOCALHOST, None, math.inf, math.inf)
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    return DnsAnswer(str(address), None, math.inf, math.inf)
