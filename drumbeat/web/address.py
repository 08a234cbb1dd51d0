"""Where a crawl's web server listens: ``--web [HOST:]PORT | off``.

Kept apart from the server (aiohttp) so that the command line checks the flag before
``drumbeat crawl`` executes itself again for its allocator, without importing the
server into the process it replaces."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_ADDRESS = "127.0.0.1:0"  # loopback, a free port


class AddressError(ValueError):
    """A --web value that is not [HOST:]PORT or off."""


@dataclass(frozen=True)
class WebAddress:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_address(text: str) -> WebAddress | None:
    """``[HOST:]PORT`` (HOST 127.0.0.1 when left out; PORT 0: a free one), or None for
    ``off``."""
    text = text.strip()
    if text.lower() == "off":
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise AddressError(f"--web {text!r}: expected [HOST:]PORT or off") from None
    if not 0 <= port <= 65535:
        raise AddressError(f"--web {text!r}: port out of range")
    return WebAddress(host, port)
