"""Controls: pause, the speed ceiling's token bucket, durable blocks."""

from __future__ import annotations

import json

import pytest

from drumbeat.manager.controls import BLOCKS_NAME, Blocks, ControlError, Controls, SpeedLimit


def test_nothing_set_leaves_the_hot_path_flags_down(tmp_path):
    c = Controls(tmp_path)
    assert not c.paused and not c.blocking and c.speed is None
    assert not (tmp_path / BLOCKS_NAME).exists()


def test_changes_wake_the_loop():
    woken = []
    c = Controls(on_change=lambda: woken.append(1))
    c.pause()
    assert c.paused
    c.resume()
    assert not c.paused
    c.request_checkpoint()
    assert c.checkpoint_requested
    c.checkpoint_started()
    assert not c.checkpoint_requested
    assert len(woken) == 3


def test_blocks_match_host_pld_and_regex_and_survive_a_restart(tmp_path):
    c = Controls(tmp_path)
    assert c.block("host", "A.Example.org.")
    assert not c.block("host", "a.example.org")
    c.block("pld", "spam.example")
    c.block("regex", r"/calendar/\d+")
    assert c.blocking
    b = c.blocks
    assert b.host_blocked("a.example.org") and not b.host_blocked("b.example.org")
    assert b.host_blocked("x.y.spam.example") and not b.host_blocked("spam.example.com")
    assert b.url_blocked("http://c.org/calendar/2024") and not b.url_blocked("http://c.org/")
    saved = json.loads((tmp_path / BLOCKS_NAME).read_text())
    assert saved["version"] == 1 and saved["hosts"] == ["a.example.org"]

    again = Controls(tmp_path)
    assert again.blocking and again.blocks.as_dict() == b.as_dict()
    assert again.unblock("host", "a.example.org") and not again.unblock("host", "a.example.org")
    again.unblock("pld", "spam.example")
    again.unblock("regex", r"/calendar/\d+")
    assert not again.blocking
    assert not Controls(tmp_path).blocking


def test_bad_blocks_are_refused(tmp_path):
    c = Controls(tmp_path)
    with pytest.raises(ControlError):
        c.block("regex", "(")
    with pytest.raises(ControlError):
        c.block("ip", "1.2.3.4")
    with pytest.raises(ControlError):
        c.block("host", "")
    assert not c.blocking
    (tmp_path / BLOCKS_NAME).write_text("{}")
    with pytest.raises(ControlError):
        Blocks(tmp_path / BLOCKS_NAME)


def test_speed_limit_grants_rate_per_second_and_at_most_a_second_saved():
    s = SpeedLimit(10, now=0.0)
    assert s.available(0.0) == 1
    s.take(1)
    assert s.available(0.05) == 0 and s.wait_s(0.05) == pytest.approx(0.05)
    assert s.available(0.5) == 5
    s.take(5)
    assert s.available(100.0) == 10  # idle time saves up one second's worth only
    with pytest.raises(ControlError):
        SpeedLimit(0, now=0.0)
