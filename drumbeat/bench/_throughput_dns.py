"""The benchmark web's DNS: ``SimDNS`` answering a name -> address table from a thread.

A thread of the benchmark process, not a subprocess, so its few lookups (one per host,
cached by the crawler for the TTL) cost the crawlers under test nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

from drumbeat.simweb.dns import SimDNS

_START_TIMEOUT_S = 10.0


class DnsThread:
    """Serves ``records`` on ``127.0.0.1:<free port>`` until ``close``; ``address`` is
    ``"127.0.0.1:PORT"`` as ``--dns-server`` takes it. Unknown names get NXDOMAIN."""

    def __init__(self, records: Mapping[str, str], ttl: int = 3600) -> None:
        self._dns = SimDNS(records, ttl=ttl)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-dns", daemon=True)
        self.address = ""

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S) or self._error is not None:
            raise RuntimeError(f"DNS responder did not start: {self._error!r}")
        self.address = self._dns.address

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._dns.start("127.0.0.1", 0))
        except BaseException as e:  # reported by start()
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._dns.close()
        self._loop.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    def __enter__(self) -> DnsThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
