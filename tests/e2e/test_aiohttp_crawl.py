"""End-to-end with the aiohttp backend: `drumbeat crawl` with ``http_client = "aiohttp"``
(a real subprocess) against simweb on loopback, checked against the oracle as
tests/test_crawl.py checks the default (curl) backend."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from tests.e2e.test_crawl import (
    assert_matches_oracle,
    assert_polite,
    crawl_cmd,
    read_log,
    read_warc_targets,
)


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=7, hosts=50, ips=8, pages_per_host=8, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


@pytest.mark.parametrize("fetchers", ["0", "2"])
def test_an_aiohttp_crawl_fetches_what_the_oracle_says_politely(web, tmp_path, fetchers):
    state = tmp_path / "state"
    cmd = crawl_cmd(web, state, "--allow-loopback", "--fetchers", fetchers)
    if fetchers == "0":  # the backend chosen in the config file, then on the command line
        with open(tmp_path / "state.toml", "a") as cfg:  # crawl_cmd's config file
            cfg.write('http_client = "aiohttp"\n')
    else:
        cmd += ["--http-client", "aiohttp"]
    start = len(web.requests)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "crawl stopped (done)" in proc.stderr
    assert json.loads((state / "settings.json").read_text())["http_client"] == "aiohttp"
    assert_polite(web, web.requests[start:])

    entries = read_log(state)
    assert_matches_oracle(web, entries)

    # Every answered fetch is a request + response pair in the WARC files, readable back.
    answered = [e for e in entries if e["status"] is not None]
    responses, requests = read_warc_targets(state)
    assert Counter(responses) == Counter(e["url"] for e in answered)
    assert requests == len(responses)
