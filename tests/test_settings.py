from pathlib import Path

import pytest

from drumbeat.settings import Settings, SettingsError, build, load_toml, parse_hostport


def test_defaults_are_polite():
    s = Settings()
    assert s.host_delay_s == 2.0 and s.ip_delay_s == 0.5
    assert not s.allow_loopback and not s.allow_private
    assert "drumbeat" in s.user_agent and "http" in s.user_agent


def test_layers_override_in_order(tmp_path: Path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('host_delay_s = 1.5\n[crawl]\nconcurrency = 7\nscope = "host"\n')
    s = build(Settings(), load_toml(cfg), {"concurrency": 9, "ip_delay_s": 0})
    assert (s.host_delay_s, s.concurrency, s.scope, s.ip_delay_s) == (1.5, 9, "host", 0.0)


@pytest.mark.parametrize(
    "layer, name",
    [
        ({"host_delay_s": -1}, "host_delay_s"),
        ({"host_delay_s": "fast"}, "host_delay_s"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"scope": "galaxy"}, "scope"),
        ({"allow_loopback": "yes"}, "allow_loopback"),
        ({"no_such_thing": 1}, "no_such_thing"),
        ({"dns_server": "127.0.0.1:99999"}, "dns_server"),
        ({"user_agent": ""}, "user_agent"),
    ],
)
def test_bad_values_name_the_setting(layer, name):
    with pytest.raises(SettingsError, match=name):
        build(Settings(), layer)


def test_bad_toml_is_reported(tmp_path: Path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("host_delay_s = = 3")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_toml(cfg)
    with pytest.raises(SettingsError, match="does not exist"):
        load_toml(tmp_path / "missing.toml")


def test_hostport():
    assert parse_hostport("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert parse_hostport("ns.example") == ("ns.example", 53)
    assert parse_hostport("[::1]:54") == ("::1", 54)


def test_saved_settings_round_trip(tmp_path: Path):
    from drumbeat.settings import load_saved, save_for_resume

    s = build(
        Settings(),
        {
            "state_dir": str(tmp_path),
            "host_delay_s": 0.7,
            "dns_server": "127.0.0.1:5353",
            "seeds": ["http://a.test/"],
        },
    )
    save_for_resume(s)
    saved = load_saved(tmp_path)
    assert "seeds" not in saved and "state_dir" not in saved
    resumed = build(Settings(), saved, {"state_dir": str(tmp_path), "ip_delay_s": 0.1})
    assert (resumed.host_delay_s, resumed.dns_server, resumed.ip_delay_s) == (
        0.7,
        "127.0.0.1:5353",
        0.1,
    )
    assert load_saved(tmp_path / "nothing-here") == {}


def test_max_time_limits_one_run_and_is_not_saved(tmp_path: Path):
    from drumbeat.settings import SAVED_FILE, load_saved, save_for_resume

    save_for_resume(
        build(Settings(), {"state_dir": str(tmp_path), "max_time_s": 5, "max_pages": 100})
    )
    saved = load_saved(tmp_path)
    assert "max_time_s" not in saved and saved["max_pages"] == 100
    # A state dir an older drumbeat saved it in: a resume ignores it.
    (tmp_path / SAVED_FILE).write_text('{"max_time_s": 5.0, "host_delay_s": 1.0}')
    assert load_saved(tmp_path) == {"host_delay_s": 1.0}
