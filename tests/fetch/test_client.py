"""drumbeat.fetch.client: the options the clients are built from, and the From setting.

The clients' behaviour with these options is tested against real servers in
tests/test_http.py (both clients) and tests/test_curl.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drumbeat import cli
from drumbeat.fetch.client import ClientOptions, client_class
from drumbeat.fetch.curl import CurlHttpClient
from drumbeat.fetch.guard import AddressPolicy
from drumbeat.fetch.http import AiohttpClient
from drumbeat.settings import HTTP_CLIENTS, Settings, SettingsError


def test_options_come_from_the_settings() -> None:
    settings = Settings(
        user_agent="bot/1 (+https://bot.example/)",
        from_header="ops@bot.example",
        concurrency=7,
        connect_timeout_s=1.5,
        read_timeout_s=2.5,
        total_timeout_s=3.5,
        max_body_bytes=1000,
        max_decoded_bytes=2000,
        tls_verify=False,
    )
    options = ClientOptions.from_settings(settings)
    assert (options.user_agent, options.from_header, options.max_connections) == (
        "bot/1 (+https://bot.example/)",
        "ops@bot.example",
        7,
    )
    assert (options.connect_timeout_s, options.read_timeout_s, options.total_timeout_s) == (
        1.5,
        2.5,
        3.5,
    )
    assert (options.max_body_bytes, options.max_decoded_bytes, options.verify_tls) == (
        1000,
        2000,
        False,
    )
    # The default options are the default settings': one place for each default.
    assert ClientOptions.from_settings(Settings()) == ClientOptions()


def test_request_headers_carry_from_only_when_set() -> None:
    assert [name for name, _ in ClientOptions().request_headers()] == [
        "User-Agent",
        "Accept-Encoding",
    ]
    assert ClientOptions(from_header="a@b.example").request_headers()[-1] == ("From", "a@b.example")


def test_every_settings_client_name_has_a_class() -> None:
    assert {name: client_class(name) for name in HTTP_CLIENTS} == {
        "aiohttp": AiohttpClient,
        "curl": CurlHttpClient,
    }
    with pytest.raises(ValueError, match="gopher"):
        client_class("gopher")


def test_an_unknown_option_keyword_is_refused() -> None:
    for cls in (AiohttpClient, CurlHttpClient):
        with pytest.raises(TypeError, match="no_such_option"):
            cls(policy=AddressPolicy(), resolver=None, no_such_option=1)


@pytest.mark.parametrize("value", ["ops@example.org", "Crawl Ops <ops@example.org>", ""])
def test_good_from_values(value: str) -> None:
    assert Settings().with_changes(from_header=value).from_header == value


@pytest.mark.parametrize(
    "value",
    [
        "no address",
        "ops@example.org\r\nX-Evil: 1",
        "ops@example.org\n",
        "opé@example.org",
        "ops@\0",
    ],
)
def test_bad_from_values_name_the_setting(value: str) -> None:
    with pytest.raises(SettingsError, match="from_header"):
        Settings().with_changes(from_header=value)


def test_the_from_flag_sets_it(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(
        ["crawl", "--state", str(tmp_path), "--from", "ops@example.org", "http://a.test/"]
    )
    assert cli.settings_from_args(args).from_header == "ops@example.org"
    args = cli.build_parser().parse_args(["crawl", "--state", str(tmp_path), "http://a.test/"])
    assert cli.settings_from_args(args).from_header == ""


def test_a_bad_from_flag_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["crawl", "--state", str(tmp_path), "--from", "nobody", "http://a.test/"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "from_header" in err
