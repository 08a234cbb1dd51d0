"""Helpers for testing drumbeat's parts, as ``trio.testing`` is for trio's.

* :class:`FakeClock`: the one clock tests drive by hand; every part that keeps time takes a
  ``clock`` callable, so a test jumps time instead of sleeping, exactly and fast.
* :func:`offline_manager`: a real Manager driven by hand, for tests and ``bench frontier``'s
  RSS runs: its state and crawl log under a work dir, a loopback SimDNS that answers
  127.1.0.1 for every name, a LocalTaskQueue. Nothing is fetched; robots answers are
  recorded by the caller.
* :class:`RedisServer`: a real ``redis-server`` on loopback in a work dir, for the cluster's
  tests and ``bench cluster``; it can be stopped and started again on the same port (an
  outage) and keeps its data across that (append-only file).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from drumbeat.manager import Manager
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings, build
from drumbeat.simweb.dns import SimDNS
from drumbeat.store.crawllog import CrawlLog

ANSWER = "127.1.0.1"  # what the responder answers for any name (loopback only)


class FakeClock:
    """A monotonic clock that moves only when a test moves it: call it for the time,
    :meth:`advance` it, or set :attr:`now` (never backwards: the parts it drives assume a
    monotonic clock)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        if value < self._now:
            raise ValueError(f"a monotonic clock does not go back ({value} < {self._now})")
        self._now = value

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward; returns the new time."""
        self.now = self._now + seconds
        return self._now


@asynccontextmanager
async def offline_manager(
    work: Path, *, clock: Callable[[], float] = time.monotonic, **changes: object
) -> AsyncIterator[Manager]:
    """A restored Manager on ``work``/state with ``changes`` to the default Settings;
    everything it opened (DNS lookups under way, resolver, responder, crawl log) is
    closed on exit."""
    dns = SimDNS({}, fallback=lambda name: ANSWER)
    await dns.start("127.0.0.1", 0)
    settings = build(
        Settings(),
        {
            "state_dir": str(work / "state"),
            "dns_server": dns.address,
            "allow_loopback": True,
            **changes,
        },
    )
    crawl_log = CrawlLog(work / "crawl.log")
    manager = Manager(settings, LocalTaskQueue(), crawl_log, clock=clock)
    try:
        manager.restore()
        yield manager
    finally:
        for task in list(manager.gate.resolving.values()):
            task.cancel()
        await asyncio.gather(*manager.gate.resolving.values(), return_exceptions=True)
        await manager.dns.close()
        dns.close()
        crawl_log.close()


class RedisServer:
    """A ``redis-server`` process listening on 127.0.0.1 only, its files in ``work``.

    Its data survives :meth:`stop` then :meth:`start` (append-only file, fsync always), as
    an operator's Redis would with persistence on. Use as a context manager or call
    :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        work: Path,
        *,
        port: int | None = None,
        password: str | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """``tls``: (certificate chain, key) PEM files: the server then speaks TLS only
        (``rediss://``), with no client certificate asked for."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test installs it)")
        self.binary = binary
        self.work = work
        # A socket bound to the port (never listening) holds it for this server's life:
        # while the server is stopped, connections are refused and no other process
        # (another test's server) can take the port. redis-server binds beside it, as
        # both allow address reuse.
        self._hold = socket.socket()
        self._hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._hold.bind(("127.0.0.1", port or 0))
        self.port: int = self._hold.getsockname()[1]
        self.password = password
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.work),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--daemonize", "no",
            "--logfile", str(self.work / "redis.log"),
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls:
            cert, key = self.tls
            port = args.index("--port") + 1
            args[port] = "0"  # no plain-text port: TLS only
            args += ["--tls-port", str(self.port), "--tls-cert-file", str(cert)]
            args += ["--tls-key-file", str(key), "--tls-auth-clients", "no"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                reply = self._ping()
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    return
                if not reply.startswith(b"-LOADING"):
                    raise RuntimeError(f"redis-server answered {reply!r}")
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {self.work / 'redis.log'}")
            time.sleep(0.02)

    def _ping(self) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
            sock = raw
            if self.tls:  # readiness only: the certificate is the tests' business
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                sock = context.wrap_socket(raw)
            sock.sendall(b"PING\r\n")
            return sock.recv(64)

    def stop(self) -> None:
        """Stop the server (SIGTERM: it finishes writing its append-only file)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop the server and give its port up."""
        self.stop()
        self._hold.close()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
