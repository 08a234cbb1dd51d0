"""The throughput benchmark's web: one static document tree, many host names, nginx on loopback.

Every host serves the same files (nginx answers any ``Host``), so the disk holds one tree
of ``pages`` pages however many hosts there are:

* ``/`` (``index.html``) and ``/p/0000.html`` ... ``/p/{pages-1:04d}.html``: HTML of about
  ``PAGE_BYTES`` bytes with ``RELATIVE_LINKS`` same-host links (spelled ``0012.html``,
  ``/p/0012.html``, ``../p/0012.html``, one with a ``#fragment``), ``ABSOLUTE_LINKS``
  links to pages of other hosts (``http://h01234.test:PORT/p/0042.html``) and one link
  into ``/private/``, which robots.txt disallows (those files do not exist: a request
  for one shows up in the access log as a 404 and counts as a robots violation).
* ``/robots.txt``: ``User-agent: *`` / ``Disallow: /private/``.

The absolute links of the whole tree name every host at least once (``pages`` grows with
``hosts`` if needed), so a crawl from a few hundred front pages fans out to all of them.
Host ``i`` is ``h{i:05d}.test`` (each its own pay-level domain) or, in a web of one PLD
(``WebShape.pld``: an organisation's sites), ``h{i:05d}.{pld}``: all subdomains of one
pay-level domain, so no page links to it from another PLD. Either resolves to
``127.77.{j // 250}.{j % 250 + 1}`` with ``j = i % ips``: many addresses, so per-IP
politeness does not cap the rate, in a range simweb (127.1.x.y) does not use.

nginx listens on ``IP:port`` for each of the ``ips`` addresses and nowhere else, writes
``$msec $host $request_uri $status`` per request to its access log, and runs from its own
prefix directory with its own config (never the system's).
"""

from __future__ import annotations

import itertools
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

IP_PREFIX = "127.77"
TLD = "test"
ONE_PLD = f"campus.{TLD}"  # the PLD of the one-PLD web (``WebShape.pld``)
PRIVATE_PREFIX = "/private/"
ROBOTS_TXT = f"User-agent: *\nDisallow: {PRIVATE_PREFIX}\n"
# $msec has millisecond resolution: gaps are trusted to that.
GAP_TOLERANCE_S = 0.001
# MEASURED.md: the hard open-files limit is 20,000; stay under it. A polite crawler keeps
# an idle keep-alive connection per host and fetcher (5,000 hosts x 2 fetchers): with
# fewer worker_connections nginx closes idle ones and the crawl pays for reconnecting
# (measured: 2.9 requests per connection at 8,192, 4.4 at 15,000, in a 30 s crawl).
NGINX_RLIMIT_NOFILE = 19_000
NGINX_OPEN_FILE_CACHE = 4000
NGINX_WORKER_CONNECTIONS = 15_000
RELATIVE_LINKS = 40  # per page, besides one into /private/
ABSOLUTE_LINKS = 20  # per page, to other hosts
PAGE_BYTES = 20_000
LOG_FORMAT = "$msec $host $request_uri $status $connection_requests"  # read_access_log's
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0
_VOCABULARY = (  # noqa: SIM905 (one string reads better than 45 lines)
    "crawl polite frontier queue budget server host domain page link anchor robot delay "
    "fetch parse archive record bucket disk memory batch sort merge check update seen "
    "unique fresh index graph degree rank random steady river stone cloud lantern harbor "
    "meadow copper violet orbit signal pattern"
).split()


@dataclass(frozen=True, slots=True)
class WebShape:
    """How big the web is; everything else is derived from it."""

    hosts: int
    pages: int  # pages per host (one shared tree), besides the front page
    ips: int
    seeds: int  # front pages the crawls start from
    pld: str | None = None  # every host a subdomain of this PLD; None: each its own PLD

    @classmethod
    def make(cls, hosts: int, pages: int, ips: int, seeds: int, pld: str | None = None) -> WebShape:
        """A shape whose absolute links can name every host at least once."""
        pages = max(pages, math.ceil(hosts / ABSOLUTE_LINKS))
        return cls(
            hosts=hosts,
            pages=pages,
            ips=max(1, min(ips, hosts)),
            seeds=max(1, min(seeds, hosts)),
            pld=pld,
        )

    def host(self, i: int) -> str:
        return f"h{i:05d}.{self.pld or TLD}"

    def ip(self, j: int) -> str:
        return f"{IP_PREFIX}.{j // 250}.{j % 250 + 1}"

    def addresses(self) -> list[str]:
        return [self.ip(j) for j in range(self.ips)]

    def dns_table(self) -> dict[str, str]:
        return {self.host(i): self.ip(i % self.ips) for i in range(self.hosts)}

    def hosts_per_ip(self) -> int:
        return math.ceil(self.hosts / self.ips)

    def seed_urls(self, port: int) -> list[str]:
        """Front pages of ``seeds`` hosts spread evenly over the host range."""
        return [
            f"http://{self.host(k * self.hosts // self.seeds)}:{port}/" for k in range(self.seeds)
        ]


def build_tree(root: Path, shape: WebShape, port: int, seed: int = 5) -> int:
    """Write the document tree under ``root``; returns the number of files written."""
    rng = random.Random(seed)
    slots = (shape.pages + 1) * ABSOLUTE_LINKS
    # Every host once (make() leaves enough slots), the rest at random, in random order.
    targets = list(range(shape.hosts)) + [
        rng.randrange(shape.hosts) for _ in range(slots - shape.hosts)
    ]
    rng.shuffle(targets)
    filler = " ".join(rng.choices(_VOCABULARY, k=PAGE_BYTES // 3))
    (root / "p").mkdir(parents=True, exist_ok=True)
    (root / "robots.txt").write_text(ROBOTS_TXT, encoding="ascii")
    for n in range(shape.pages + 1):
        front = n == 0
        abs_targets = targets[n * ABSOLUTE_LINKS : (n + 1) * ABSOLUTE_LINKS]
        links = (
            _relative_links(rng, shape, front)
            + [
                f"http://{shape.host(h)}:{port}/p/{rng.randrange(shape.pages):04d}.html"
                for h in abs_targets
            ]
            + [f"{PRIVATE_PREFIX}{rng.randrange(shape.pages)}.html"]
        )
        rng.shuffle(links)
        title = "front page" if front else f"page {n - 1}"
        html = _page(title, links, filler, rng, PAGE_BYTES)
        path = root / "index.html" if front else root / "p" / f"{n - 1:04d}.html"
        path.write_text(html, encoding="utf-8")
    return shape.pages + 2


def _relative_links(rng: random.Random, shape: WebShape, front: bool) -> list[str]:
    out = []
    for k in range(RELATIVE_LINKS):
        target = f"{rng.randrange(shape.pages):04d}.html"
        if front:  # relative to "/", only paths into /p/ reach a page
            out.append(f"p/{target}" if k % 2 else f"/p/{target}")
        elif k % 4 == 0:
            out.append(f"/p/{target}")
        elif k % 4 == 1:
            out.append(f"../p/{target}")
        elif k == 2:
            out.append(f"{target}#section")
        else:
            out.append(target)
    return out


def _page(title: str, links: list[str], filler: str, rng: random.Random, size: int) -> str:
    head = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head>\n<body><h1>{title}</h1>\n"
    )
    per_paragraph = 4
    paragraphs = math.ceil(len(links) / per_paragraph)
    anchors = sum(len(u) + 30 for u in links)
    text_bytes = max(0, (size - len(head) - anchors - 20) // max(paragraphs, 1) - 10)
    parts = [head]
    for p in range(paragraphs):
        start = rng.randrange(max(1, len(filler) - text_bytes))
        parts.append(f"<p>{filler[start : start + text_bytes]} ")
        for url in links[p * per_paragraph : (p + 1) * per_paragraph]:
            parts.append(f'<a href="{url}">{rng.choice(_VOCABULARY)}</a> ')
        parts.append("</p>\n")
    parts.append("</body></html>\n")
    return "".join(parts)


def nginx_binary() -> str | None:
    """Path of the nginx executable, or None (Debian installs it in /usr/sbin)."""
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def pick_port(address: str, rng: random.Random) -> int:
    """A port that ``address`` can listen on now, below the ephemeral range (so the
    crawlers' outgoing connections do not take it first)."""
    for _ in range(100):
        port = rng.randrange(20000, 30000)
        with socket.socket() as s:
            try:
                s.bind((address, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port found on {address}")


class Nginx:
    """One nginx master (``daemon off``) serving ``docroot`` on ``addresses`` x ``port``.

    ``start`` returns once every address accepts connections; ``stop`` shuts it down
    gracefully (which flushes the buffered access log) and waits for it.
    """

    def __init__(
        self,
        binary: str,
        prefix: Path,
        docroot: Path,
        addresses: list[str],
        port: int,
        workers: int,
        log_format: str = LOG_FORMAT,
    ) -> None:
        self.binary = binary
        self.log_format = log_format
        self.prefix = prefix
        self.docroot = docroot
        self.addresses = addresses
        self.port = port
        self.workers = workers
        self.access_log = prefix / "access.log"
        self.error_log = prefix / "error.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        listens = "\n".join(f"        listen {a}:{self.port};" for a in self.addresses)
        temp = self.prefix / "temp"
        # Started by root, nginx runs its workers as "nobody", who may not be able to reach
        # the tree (pytest's and mkdtemp's directories are 0700): keep root's identity.
        user = "user root;\n" if os.geteuid() == 0 else ""
        return f"""\
{user}worker_processes {self.workers};
worker_rlimit_nofile {NGINX_RLIMIT_NOFILE};
daemon off;
pid {self.prefix / "nginx.pid"};
error_log {self.error_log} warn;
events {{ worker_connections {NGINX_WORKER_CONNECTIONS}; }}
http {{
    types {{ text/html html; text/plain txt; }}
    default_type application/octet-stream;
    log_format bench '{self.log_format}';
    access_log {self.access_log} bench buffer=256k flush=1s;
    open_file_cache max={NGINX_OPEN_FILE_CACHE} inactive=60s;
    open_file_cache_valid 60s;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
    client_body_temp_path {temp / "body"};
    proxy_temp_path {temp / "proxy"};
    fastcgi_temp_path {temp / "fastcgi"};
    uwsgi_temp_path {temp / "uwsgi"};
    scgi_temp_path {temp / "scgi"};
    server {{
{listens}
        server_name _;
        root {self.docroot};
        index index.html;
        log_not_found off;
    }}
}}
"""

    def start(self) -> None:
        self.prefix.mkdir(parents=True, exist_ok=True)
        (self.prefix / "temp").mkdir(exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config(), encoding="utf-8")
        # -e: the compiled-in error log (/var/log/nginx) is never opened.
        self._proc = subprocess.Popen(
            [self.binary, "-p", str(self.prefix), "-c", str(conf), "-e", str(self.error_log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        pending = [self.addresses[0], self.addresses[-1]]
        while pending:
            if self._proc.poll() is not None:
                raise RuntimeError(f"nginx exited at start: {self.error_text()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nginx did not listen within {_START_TIMEOUT_S:.0f} s")
            try:
                socket.create_connection((pending[0], self.port), timeout=1).close()
                pending.pop(0)
            except OSError:
                time.sleep(0.05)

    def stop(self) -> float | None:
        """Shut nginx down; returns the CPU seconds its master and workers used (None if it
        had already exited or had to be killed)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return None
        # SIGQUIT is the graceful shutdown; SIGTERM the fast one. Both flush the log buffers.
        for sig in (signal.SIGQUIT, signal.SIGTERM):
            proc.send_signal(sig)
            cpu = _reap(proc, _STOP_TIMEOUT_S)
            if cpu is not None:
                return cpu
        proc.kill()
        proc.wait()
        return None

    @property
    def pid(self) -> int | None:
        """The nginx master's pid while it runs (its workers are its children)."""
        return self._proc.pid if self._proc is not None else None

    def error_text(self) -> str:
        try:
            return self.error_log.read_text(encoding="utf-8", errors="replace")[-1000:].strip()
        except OSError:
            return "(no error log)"

    def __enter__(self) -> Nginx:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _reap(proc: subprocess.Popen[bytes], timeout_s: float) -> float | None:
    """Wait for ``proc`` to exit; its CPU seconds (workers included), or None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        time.sleep(0.05)
    return None


@dataclass(frozen=True, slots=True)
class ServerLog:
    """What nginx saw during one crawl.

    ``min_gap_s`` is the smallest time between two requests to one host (any path,
    robots.txt included); ``hosts_under_delay`` counts hosts with a gap below the host
    delay (less ``GAP_TOLERANCE_S``); ``disallowed`` counts requests under /private/;
    ``errors`` counts the other responses with a status of 400 or more;
    ``connections`` counts the connections that carried the requests.
    """

    requests: int
    pages: int
    robots: int
    disallowed: int
    errors: int
    hosts: int
    statuses: dict[int, int]
    delay_s: float
    min_gap_s: float | None
    hosts_under_delay: int
    connections: int  # TCP connections the requests came on (keep-alive reuse)


def read_access_log(path: Path, delay_s: float) -> ServerLog:
    """Parse a ``$msec $host $request_uri $status $connection_requests`` access log."""
    times: dict[str, list[float]] = defaultdict(list)
    statuses: Counter[int] = Counter()
    robots = disallowed = requests = errors = connections = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue
            msec, host, uri, status, nth = parts
            requests += 1
            connections += nth == "1"  # the first request on its connection
            times[host].append(float(msec))
            statuses[int(status)] += 1
            if uri == "/robots.txt":
                robots += 1
            elif uri.startswith(PRIVATE_PREFIX):
                disallowed += 1
                continue
            errors += int(status) >= 400
    min_gap: float | None = None
    under = 0
    for stamps in times.values():
        stamps.sort()
        gap = min((b - a for a, b in itertools.pairwise(stamps)), default=None)
        if gap is None:
            continue
        min_gap = gap if min_gap is None else min(min_gap, gap)
        under += gap < delay_s - GAP_TOLERANCE_S
    return ServerLog(
        requests=requests,
        pages=requests - robots,
        robots=robots,
        disallowed=disallowed,
        errors=errors,
        hosts=len(times),
        statuses=dict(statuses),
        delay_s=delay_s,
        min_gap_s=min_gap,
        hosts_under_delay=under,
        connections=connections,
    )
