"""A real dnslib UDP responder on 127.0.0.1 for tests (the resolver object decides answers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dnslib.server import DNSLogger, DNSServer


@contextmanager
def serve_dns(resolver: Any) -> Iterator[str]:
    """Serve ``resolver`` (a dnslib BaseResolver) on a free UDP port; yield "127.0.0.1:PORT"."""
    server = DNSServer(resolver, address="127.0.0.1", port=0, logger=DNSLogger(logf=lambda _: None))
    thread = threading.Thread(
        target=server.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"127.0.0.1:{server.server.server_address[1]}"
    finally:
        server.stop()
        server.server.server_close()
        thread.join(5)
