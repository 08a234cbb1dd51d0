"""The address guard: which IP addresses the crawler may connect to.

A crawler that follows links from the open web must not be steered into the
operator's own network (SSRF). Every address is classified *before* a connection
is made; the policy refuses everything but public addresses unless the operator
opts in (``--allow-loopback`` for tests and demos, ``--allow-private`` for
intranet crawls).

Classes returned by :func:`classify`:

``public``      globally routable unicast
``loopback``    127.0.0.0/8, ::1
``private``     RFC 1918, 100.64.0.0/10 (CGNAT), fc00::/7 (ULA), fec0::/10
                (deprecated site-local), 64:ff9b:1::/48 (local-use NAT64)
``link_local``  169.254.0.0/16, fe80::/10
``multicast``   224.0.0.0/4, ff00::/8
``reserved``    unspecified (0.0.0.0/8, ::), 240.0.0.0/4 incl. broadcast,
                documentation and benchmarking nets, IETF protocol assignments,
                the 6to4 relay anycast, discard-only 100::/64, deprecated
                IPv4-compatible IPv6, Teredo, and IPv6 outside 2000::/3
``invalid``     not a bare IP address (names, bracketed or legacy numeric forms)

IPv6 addresses that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
NAT64 ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``) are classified by the
embedded IPv4 address, because that is where the packets end up.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from typing import Final

PUBLIC: Final = "public"
LOOPBACK: Final = "loopback"
PRIVATE: Final = "private"
LINK_LOCAL: Final = "link_local"
MULTICAST: Final = "multicast"
RESERVED: Final = "reserved"
INVALID: Final = "invalid"

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Checked in order; the first match wins. Python's own is_private / is_global
# changed between 3.11 patch releases, so the tables are spelled out here.
_V4_TABLE: Final[tuple[tuple[ipaddress.IPv4Network, str], ...]] = (
    (_V4("127.0.0.0/8"), LOOPBACK),
    (_V4("0.0.0.0/8"), RESERVED),
    (_V4("10.0.0.0/8"), PRIVATE),
    (_V4("172.16.0.0/12"), PRIVATE),
    (_V4("192.168.0.0/16"), PRIVATE),
    (_V4("100.64.0.0/10"), PRIVATE),
    (_V4("169.254.0.0/16"), LINK_LOCAL),
    (_V4("224.0.0.0/4"), MULTICAST),
    (_V4("240.0.0.0/4"), RESERVED),
    (_V4("192.0.0.0/24"), RESERVED),
    (_V4("192.0.2.0/24"), RESERVED),
    (_V4("198.51.100.0/24"), RESERVED),
    (_V4("203.0.113.0/24"), RESERVED),
    (_V4("198.18.0.0/15"), RESERVED),
    (_V4("192.88.99.0/24"), RESERVED),
)

_MAPPED: Final = _V6("::ffff:0:0/96")
_NAT64: Final = _V6("64:ff9b::/96")
_SIX_TO_FOUR: Final = _V6("2002::/16")
_GLOBAL_UNICAST: Final = _V6("2000::/3")

_V6_TABLE: Final[tuple[tuple[ipaddress.IPv6Network, str], ...]] = (
    (_V6("::1/128"), LOOPBACK),
    (_V6("::/128"), RESERVED),
    (_V6("64:ff9b:1::/48"), PRIVATE),
    (_V6("fc00::/7"), PRIVATE),
    (_V6("fec0::/10"), PRIVATE),
    (_V6("fe80::/10"), LINK_LOCAL),
    (_V6("ff00::/8"), MULTICAST),
    (_V6("100::/64"), RESERVED),
    (_V6("2001:db8::/32"), RESERVED),
    (_V6("3fff::/20"), RESERVED),
    # Teredo (2001::/32), benchmarking (2001:2::/48), ORCHID and the rest of the
    # IETF protocol assignments: no web server is legitimately reached there.
    (_V6("2001::/23"), RESERVED),
)


@functools.lru_cache(maxsize=1 << 16)  # a fetcher checks every request: parse each IP once
def classify(ip: str) -> str:
    """Return the class of the bare IP address ``ip`` (see the module docstring).

    Never raises; anything that is not an IPv4 or IPv6 address is ``"invalid"``.
    """
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return INVALID
    if isinstance(address, ipaddress.IPv4Address):
        return _classify_v4(address)
    return _classify_v6(address)


def _classify_v4(address: ipaddress.IPv4Address) -> str:
    for network, kind in _V4_TABLE:
        if address in network:
            return kind
    return PUBLIC


def _classify_v6(address: ipaddress.IPv6Address) -> str:
    if address in _MAPPED:
        assert address.ipv4_mapped is not None
        return _classify_v4(address.ipv4_mapped)
    if address in _NAT64:
        return _classify_v4(ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF))
    if address in _SIX_TO_FOUR:
        assert address.sixtofour is not None
        return _classify_v4(address.sixtofour)
    for network, kind in _V6_TABLE:
        if address in network:
            return kind
    # Outside 2000::/3 nothing is allocated for global unicast (the special
    # ranges that live there were matched above), including the deprecated
    # IPv4-compatible ::a.b.c.d form.
    return PUBLIC if address in _GLOBAL_UNICAST else RESERVED


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which address classes may be connected to.

    By default only ``public`` addresses are allowed. ``allow_loopback`` adds
    127.0.0.0/8 and ::1. ``allow_private`` permits every private range an
    intranet crawl needs: loopback, private and link-local. ``multicast``,
    ``reserved`` and ``invalid`` are always refused: nothing serves HTTP there.
    """

    allow_loopback: bool = False
    allow_private: bool = False

    def refusal(self, ip: str) -> str | None:
        """Return None if ``ip`` may be connected to, else ``"guard:<class>"``."""
        kind = classify(ip)
        if kind == PUBLIC:
            return None
        if kind == LOOPBACK and (self.allow_loopback or self.allow_private):
            return None
        if kind in (PRIVATE, LINK_LOCAL) and self.allow_private:
            return None
        return f"guard:{kind}"
