"""The scope rules' parts: the matcher, the blocklist file and its reloads, the count
sketch and the caps (drumbeat.frontier.scope)."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest

from drumbeat.frontier.scope import (
    BLOCKLIST,
    EXCLUDE,
    INCLUDE,
    MAX_BYTES_PER_HOST,
    MAX_PAGES_PER_HOST,
    MAX_PAGES_PER_PLD,
    Blocklist,
    Caps,
    CountSketch,
    Patterns,
    Scope,
    ScopeError,
    read_blocklist,
    save_counts,
)
from drumbeat.manager.controls import Blocks
from drumbeat.settings import Settings, SettingsError, build, load_toml
from drumbeat.testing import FakeClock


def test_patterns_match_hosts_plds_and_regexes():
    p = Patterns(hosts=["a.example"], plds=["spam.test"], regexes=[r"/cal/\d+", r"\?sid="])
    assert p.host_blocked("a.example") and not p.host_blocked("b.a.example")
    assert p.host_blocked("spam.test") and p.host_blocked("x.y.spam.test")
    assert not p.host_blocked("notspam.test")
    assert p.url_blocked("http://o.test/cal/2024") and p.url_blocked("http://o.test/?sid=1")
    assert not p.url_blocked("http://o.test/cal/x")
    assert not Patterns() and not Patterns().url_blocked("http://o.test/")


def test_the_control_apis_blocks_match_as_patterns_do(tmp_path: Path):
    blocks = Blocks(tmp_path / "blocks.json")
    blocks.add("pld", "spam.test")
    blocks.add("regex", "/cal/")
    assert isinstance(blocks, Patterns)
    assert blocks.host_blocked("www.spam.test") and blocks.url_blocked("http://a.test/cal/1")
    blocks.remove("pld", "spam.test")
    assert not blocks.host_blocked("www.spam.test")  # its PLD answer is not remembered


def test_blocklist_file_lines(tmp_path: Path):
    path = tmp_path / "blocklist.txt"
    path.write_text(
        "# comment\n\n"
        "example.org\n"  # a PLD: every host of it
        "www.example.com  # a host\n"
        "host:example.net\n"
        "pld:co.uk.example\n"
        "re:/cal/\\d{4}/ # the rest of the line is the regex\n"
        "WWW.Upper.Test.\n"
    )
    p = read_blocklist(path)
    assert p.plds == {"example.org", "co.uk.example"}
    assert p.hosts == {"www.example.com", "example.net", "www.upper.test"}
    assert p.regexes == ["/cal/\\d{4}/ # the rest of the line is the regex"]
    assert p.host_blocked("deep.www.example.org") and not p.host_blocked("example.com")


@pytest.mark.parametrize(
    "text, where",
    [("ok.test\nre:(unclosed\n", ":2: bad regex"), ("http://a.test/x\n", ":1: not a host")],
)
def test_bad_blocklist_lines_name_the_file_and_line(tmp_path: Path, text: str, where: str):
    path = tmp_path / "bl.txt"
    path.write_text(text)
    with pytest.raises(ScopeError, match=f"{path}{where}"):
        read_blocklist(path)


def _touch_later(path: Path, text: str) -> None:
    """Write ``text`` with an mtime surely different from the file's last one."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_blocklist_is_read_again_only_when_changed_and_due(tmp_path: Path):
    path = tmp_path / "bl.txt"
    path.write_text("a.test\n")
    clock = FakeClock()
    bl = Blocklist(path, check_s=5.0, clock=clock)
    assert bl.patterns.host_blocked("a.test")
    _touch_later(path, "b.test\n")
    clock.advance(4.9)
    assert not bl.maybe_reload() and bl.patterns.host_blocked("a.test")  # not due yet
    clock.advance(0.2)
    assert bl.maybe_reload()
    assert bl.patterns.host_blocked("b.test") and not bl.patterns.host_blocked("a.test")
    clock.advance(5.1)
    assert not bl.maybe_reload()  # unchanged: nothing read
    # A broken file, or none, keeps what was read last.
    _touch_later(path, "re:(\n")
    clock.advance(5.1)
    assert not bl.maybe_reload() and bl.patterns.host_blocked("b.test")
    path.unlink()
    clock.advance(5.1)
    assert not bl.maybe_reload() and bl.patterns.host_blocked("b.test")
    path.write_text("c.test\n")
    clock.advance(5.1)
    assert bl.maybe_reload() and bl.patterns.host_blocked("c.test")
    assert bl.reloads == 2


def test_sketch_never_undercounts_and_is_exact_when_sparse():
    rng = random.Random(5)
    keys = [f"h{i}.test" for i in range(5000)]
    truth: Counter[str] = Counter()
    sketch = CountSketch(1024)  # far fewer counters than keys: collisions
    for _ in range(20_000):
        k = rng.choice(keys)
        truth[k] += 1
        sketch.add(k)
    assert all(sketch.get(k) >= n for k, n in truth.items())
    # The count-min bound, e/width of the total, holds for the great majority of keys.
    bound = 2.72 / 1024 * sum(truth.values())
    assert sum(sketch.get(k) - n > bound for k, n in truth.items()) < len(truth) * 0.05
    sparse = CountSketch(1 << 16)
    for k in keys[:50]:
        sparse.add(k, 3)
    assert [sparse.get(k) for k in keys[:50]] == [3] * 50
    assert sparse.get("never.test") == 0


def test_sketch_round_trips_and_refuses_another_shape():
    a = CountSketch(256, typecode="Q")
    a.add("x", 1 << 40)
    b = CountSketch(256, typecode="Q")
    assert b.load(a.to_bytes()) and b.get("x") == 1 << 40
    assert not CountSketch(512, typecode="Q").load(a.to_bytes())


def _settings(**changes) -> Settings:
    return build(Settings(), {"scope_sketch_width": 4096, **changes})


def test_caps_count_pages_and_bytes_and_survive_a_checkpoint(tmp_path: Path):
    caps = Caps(_settings(max_pages_per_host=2, max_pages_per_pld=3, max_bytes_per_host=1000))
    caps.count("a.one.test", 10)
    assert caps.reason("a.one.test") is None
    caps.count("a.one.test", 10)
    assert caps.reason("a.one.test") == MAX_PAGES_PER_HOST
    caps.count("b.one.test", 10)  # the PLD's third page
    assert caps.reason("b.one.test") == MAX_PAGES_PER_PLD
    assert caps.reason("c.one.test") == MAX_PAGES_PER_PLD  # known from the sketch alone
    caps.count("two.test", 5000)
    assert caps.reason("two.test") == MAX_BYTES_PER_HOST
    assert caps.reason("three.test") is None
    save_counts(tmp_path, [(name, s.to_bytes()) for name, s in caps.sketches.items()])
    again = Caps(_settings(max_pages_per_host=2, max_pages_per_pld=3, max_bytes_per_host=1000))
    again.load(tmp_path)
    assert not again.capped  # the cache is rebuilt from the counts
    assert again.reason("a.one.test") == MAX_PAGES_PER_HOST
    assert again.reason("two.test") == MAX_BYTES_PER_HOST


def test_no_rules_cost_nothing_per_url():
    scope = Scope(Settings())
    assert not scope.per_link and not scope.at_dispatch and scope.max_depth is None
    assert scope.caps is None and scope.blocklist is None


def test_link_reasons_exclude_wins(tmp_path: Path):
    bl = tmp_path / "bl.txt"
    bl.write_text("blocked.test\nre:/private/\n")
    scope = Scope(
        _settings(include=[r"\.test/", r"^https://"], exclude=[r"\.pdf$"], blocklist_file=bl)
    )
    assert scope.per_link and scope.at_dispatch
    assert scope.link_reason("http://a.test/doc.pdf") == EXCLUDE
    assert scope.link_reason("http://a.org/") == INCLUDE
    assert scope.link_reason("https://a.org/") is None
    assert scope.link_reason("http://www.blocked.test/") == BLOCKLIST
    assert scope.link_reason("http://a.test/private/x") == BLOCKLIST
    assert scope.link_reason("http://a.test/x") is None
    assert scope.dispatch_reason("www.blocked.test", "http://www.blocked.test/") == BLOCKLIST
    assert scope.host_reason("www.blocked.test") == BLOCKLIST
    assert scope.host_reason("a.test") is None


@pytest.mark.parametrize(
    "layer, words",
    [
        ({"include": ["ok", "(bad"]}, "setting 'include' (--include) has a bad regex '(bad'"),
        ({"exclude": ["[z-a]"]}, "setting 'exclude' (--exclude) has a bad regex"),
        ({"blocklist_file": "/no/such/file"}, "'blocklist_file' (--blocklist): no such file"),
        ({"max_pages_per_host": 0}, "max_pages_per_host"),
        ({"max_depth": -1}, "max_depth"),
        ({"include": [1]}, "setting 'include' must be"),
    ],
)
def test_bad_scope_settings_are_one_line_errors(layer, words):
    with pytest.raises(SettingsError) as e:
        build(Settings(), layer)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_config_files_single_pattern_is_a_list_of_one(tmp_path: Path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('include = "\\\\.org/"\nexclude = ["a", "b"]\nmax_depth = 3\n')
    s = build(Settings(), load_toml(cfg))
    assert (s.include, s.exclude, s.max_depth) == ((r"\.org/",), ("a", "b"), 3)
