"""End-to-end: the crawl order (``--order``) and a focused crawl (``--focus``) in
`drumbeat crawl` (a real subprocess) against simweb on loopback, and a bad ``--focus``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log

PAGES = 60


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=13, hosts=16, ips=8, pages_per_host=5, topics=2)
    with run_in_thread(config) as w:
        yield w


def _crawl(web, state: Path, *flags: str, env: dict[str, str] | None = None):
    return subprocess.run(
        crawl_cmd(web, state, "--allow-loopback", "--max-pages", str(PAGES), *flags),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_indegree_order_crawls_the_web(web, tmp_path):
    state = tmp_path / "state"
    proc = _crawl(web, state, "--order", "indegree")
    assert proc.returncode == 0, proc.stderr
    pages = fetched_pages(read_log(state))
    assert len(pages) >= PAGES
    model = web.model
    assert all(model.host(u.split("/")[2].split(":")[0]) is not None for u in pages)
    # BEAST's queues have bands, and the policy's table is committed with them.
    beast = state / "frontier" / "beast"
    assert list(beast.glob("q000-b*")) and list(beast.glob("order-*.npz"))
    # Resumed: the banded queues and the policy's table reopen, and the crawl goes on.
    proc = _crawl(web, state, "--max-pages", str(2 * PAGES))
    assert proc.returncode == 0, proc.stderr
    again = fetched_pages(read_log(state))
    assert len(again) >= 2 * PAGES


def test_focus_scores_each_page_and_orders_its_links(web, tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "DRUMBEAT_FOCUS_KEYWORDS": "astronomy,telescope,galaxy"}
    proc = _crawl(web, state, "--focus", "drumbeat.focus.keywords:score", env=env)
    assert proc.returncode == 0, proc.stderr
    scored = [e for e in read_log(state) if "focus" in e]
    assert len(scored) >= PAGES // 2
    model = web.model
    for e in scored:  # topic 0 is astronomy: its pages name all three keywords
        assert e["focus"] == (1.0 if model.topic(e["url"]) == 0 else 0.0), e["url"]


BROKEN_FOCUS = '''
def score(text, url):
    """A focus function with a bug (the crawl must go on, scoring 0)."""
    raise RuntimeError("a bug")
'''


def test_a_focus_function_that_raises_scores_zero(web, tmp_path):
    # The module lies on the crawl's PYTHONPATH only, as an operator's own module would.
    (tmp_path / "broken_focus.py").write_text(BROKEN_FOCUS)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    state = tmp_path / "state"
    proc = _crawl(web, state, "--focus", "broken_focus:score", "--max-pages", "10", env=env)
    assert proc.returncode == 0, proc.stderr
    scored = [e["focus"] for e in read_log(state) if "focus" in e]
    assert scored and set(scored) == {0.0}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--focus", "no_such_module_x:score"], "--focus 'no_such_module_x:score': cannot import"),
        (["--focus", "drumbeat.focus:no_such"], "has no function no_such"),
        (["--focus", "not a spec"], "must be module:function (--focus)"),
        (["--focus", "drumbeat.focus:load_focus", "--order", "opic"], "must be bfs with --focus"),
    ],
)
def test_a_bad_focus_is_a_one_line_error(web, tmp_path, flags, says):
    proc = _crawl(web, tmp_path / "state", *flags)
    assert proc.returncode == 2
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
