"""End-to-end: a `drumbeat crawl` subprocess with its control API, against simweb.

What the API claims is checked from the server's side, on simweb's request log: after a
pause nothing arrives, after a block nothing of that host, and the block holds after a
restart.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread

pytestmark = [pytest.mark.e2e]

CONFIG = """\
checkpoint_interval_s = 1.0
dns_timeout_s = 2.0
connect_timeout_s = 3.0
total_timeout_s = 5.0
"""
# A request dispatched just before a call may reach the server a little after it.
HANDOFF_SLACK_S = 0.5


def crawl_cmd(web, state: Path, *extra: str) -> list[str]:
    cfg = state.parent / "crawl.toml"
    cfg.write_text(CONFIG)
    return [
        sys.executable,
        "-m",
        "drumbeat",
        "crawl",
        *web.seeds,
        "--state",
        str(state),
        "--dns-server",
        web.dns_address,
        "--host-delay",
        "0.1",
        "--ip-delay",
        "0",
        "--allow-loopback",
        "--fetchers",
        "1",
        "--config",
        str(cfg),
        "--no-progress",
        *extra,
    ]


def wait_for(pred, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def request(url: str, method: str = "GET", body=None, headers=None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def ctl(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "drumbeat", "ctl", "--state", str(state), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=11, hosts=12, ips=4, pages_per_host=400)
    with run_in_thread(config) as w:
        yield w


@pytest.mark.alone
def test_control_api_steers_a_running_crawl(web, tmp_path):
    state = tmp_path / "state"
    proc = subprocess.Popen(
        crawl_cmd(web, state, "--web", "127.0.0.1:0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        doc = wait_for(
            lambda: (state / "web.json").exists() and json.loads((state / "web.json").read_text()),
            30,
            "web.json",
        )
        base, token = doc["url"], (state / "web.token").read_text().strip()
        assert doc["pid"] == proc.pid
        assert stat.S_IMODE(os.stat(state / "web.token").st_mode) == 0o600
        auth = {"Authorization": f"Bearer {token}"}

        # Access rules.
        assert request(base + "/api/pause", "POST")[0] == 401
        assert request(base + "/api/pause", "POST", headers={"Authorization": "Bearer x"})[0] == 401
        foreign = {**auth, "Origin": "http://evil.example"}
        assert request(base + "/api/pause", "POST", headers=foreign)[0] == 403
        assert request(base + "/api/block", "POST", {"host": "x.y"}, foreign)[0] == 403
        code, body = request(base + "/api/status")
        assert code == 200 and json.loads(body)["paused"] is False

        wait_for(lambda: len(web.requests) > 50, 30, "the crawl to get going")

        # /metrics in Prometheus text format.
        code, body = request(base + "/metrics")
        assert code == 200
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        pages = families["drumbeat_pages"]
        assert sum(s.value for s in pages.samples if s.labels.get("class") == "2xx") > 0
        queued = {s.labels["place"] for s in families["drumbeat_queued_urls"].samples}
        assert {"ram", "beast", "qr"} <= queued
        assert "drumbeat_in_flight" in families and "drumbeat_hosts" in families

        # Pause: nothing reaches the server from 1 s after the call until resume.
        paused_at = time.time()
        code, body = request(base + "/api/pause", "POST", headers=auth)
        assert code == 200 and json.loads(body)["paused"] is True
        time.sleep(2.5)
        resumed_at = time.time()
        during = [r for r in web.requests if paused_at + 1.0 < r.time < resumed_at]
        assert during == []
        assert ctl(state, "resume").returncode == 0
        wait_for(lambda: any(r.time > resumed_at for r in web.requests), 10, "requests again")

        # Why (not) fetching, for a host the crawl knows.
        busy = max(
            {r.host for r in web.requests},
            key=lambda h: sum(r.host == h for r in web.requests[-200:]),
        )
        host = json.loads(request(base + f"/api/host/{busy}")[1])
        assert host["host"] == busy and host["state"] in {
            "ready",
            "waiting",
            "in_flight",
            "waiting_for_ip",
            "idle",
            "robots",
            "backed_off",
        }
        assert json.loads(request(base + "/api/host/nowhere.invalid")[1])["state"] == "unknown"

        # Block the busiest host: none of its requests after the call.
        blocked_at = time.time()
        code, body = request(base + "/api/block", "POST", {"host": busy}, auth)
        assert code == 200 and busy in json.loads(body)["blocks"]["hosts"]
        assert json.loads(request(base + f"/api/host/{busy}")[1])["state"] == "blocked"
        assert request(base + "/api/block", "POST", {"regex": "("}, auth)[0] == 400
        time.sleep(1.5)
        late = [r for r in web.requests if r.host == busy and r.time > blocked_at + HANDOFF_SLACK_S]
        assert late == []
        saved = json.loads((state / "blocks.json").read_text())
        assert saved["hosts"] == [busy]

        out = ctl(state, "status")
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        assert status["blocks"]["hosts"] == [busy] and status["pages_done"] > 0
        out = ctl(state, "hosts", "--top", "3")
        assert out.returncode == 0 and len(json.loads(out.stdout)["hosts"]) <= 3
        out = ctl(state, "host", busy)
        assert out.returncode == 0 and json.loads(out.stdout)["state"] == "blocked"
        # Speed: any window of T s sees at most rate * T requests, plus a second's worth
        # saved up (the token bucket's burst).
        assert ctl(state, "speed", "5").returncode == 0
        assert json.loads(ctl(state, "status").stdout)["speed"]["pages_per_s"] == 5
        limited_at = time.time()
        time.sleep(2.5)
        window = [r for r in web.requests if limited_at + 0.5 < r.time < limited_at + 2.5]
        assert 0 < len(window) <= 5 * 2 + 5
        assert ctl(state, "speed", "none").returncode == 0
        assert ctl(state, "checkpoint").returncode == 0

        out = ctl(state, "stop")
        assert out.returncode == 0, out.stderr
        assert proc.wait(timeout=30) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (state / "web.json").exists()
    out = ctl(state, "status")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr

    # Restart with the same state: the block holds.
    restarted_at = time.time()
    again = subprocess.run(
        crawl_cmd(web, state, "--max-time", "3", "--web", "off"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert not (state / "web.json").exists()
    after = [r for r in web.requests if r.time > restarted_at]
    assert after, "the resumed crawl fetched nothing"
    assert not [r for r in after if r.host == busy]
    log = [json.loads(ln) for ln in (state / "crawl.log").read_text().splitlines()]
    assert any(e.get("error") == "blocked" for e in log)
