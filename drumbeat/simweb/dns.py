"""A UDP DNS responder for the synthetic web's names, built on dnslib.

Answers, for a name in ``records`` (case-insensitive, trailing dot optional) or one
``fallback`` gives an address for (wildcards: names too many to list): an ``A`` query
gets one A record (``ttl`` seconds); any other type gets NOERROR with no records (so
``AAAA`` is an empty answer). Any other name gets NXDOMAIN. A name in ``faults`` gets
its fault instead, whatever the type: ``servfail`` (rcode SERVFAIL), ``nodata``
(NOERROR, no records) or ``timeout`` (no reply at all, so the client times out).
Unparsable datagrams are dropped. Runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Literal, cast

from dnslib import QTYPE, RCODE, RR, A, DNSError, DNSRecord

DnsFault = Literal["servfail", "nodata", "timeout"]


class SimDNS:
    """Authoritative-looking answers for a name -> IPv4 table plus an optional fallback.

    ``fallback`` gets a lower-case name without trailing dot and returns its address or
    None (NXDOMAIN); it runs on the event loop, so it must be cheap.
    """

    def __init__(
        self,
        records: Mapping[str, str],
        ttl: int = 300,
        fallback: Callable[[str], str | None] | None = None,
        faults: Mapping[str, DnsFault] | None = None,
    ) -> None:
        self._records = {name.lower().rstrip("."): ip for name, ip in records.items()}
        self._faults = {name.lower().rstrip("."): f for name, f in (faults or {}).items()}
        self._ttl = ttl
        self._fallback = fallback
        self._transport: asyncio.DatagramTransport | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(
            lambda: _Protocol(self), local_addr=(host, port)
        )

    @property
    def address(self) -> str:
        """``"host:port"`` as aiodns takes it in ``nameservers``."""
        host, port = self._sockname()
        return f"{host}:{port}"

    @property
    def port(self) -> int:
        return self._sockname()[1]

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def answer(self, query: bytes) -> bytes | None:
        """The wire-format reply to one wire-format query, or None to drop it."""
        try:
            request = DNSRecord.parse(query)
        except (DNSError, ValueError, IndexError):
            return None
        if not request.questions:
            return None
        reply = request.reply()
        question = request.q
        name = str(question.qname).lower().rstrip(".")
        fault = self._faults.get(name)
        if fault == "timeout":
            return None
        if fault == "servfail":
            reply.header.rcode = RCODE.SERVFAIL
            return reply.pack()
        if fault == "nodata":
            return reply.pack()
        ip = self._records.get(name)
        if ip is None and self._fallback is not None:
            ip = self._fallback(name)
        if ip is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif question.qtype == QTYPE.A:
            reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(ip), ttl=self._ttl))
        return reply.pack()

    def _sockname(self) -> tuple[str, int]:
        if self._transport is None:
            raise RuntimeError("SimDNS is not started")
        host, port = self._transport.get_extra_info("sockname")[:2]
        return host, port


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, dns: SimDNS) -> None:
        self._dns = dns
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport is not a DatagramTransport subclass.
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = self._dns.answer(data)
        if reply is not None and self._transport is not None:
            self._transport.sendto(reply, addr)
