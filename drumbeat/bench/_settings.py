"""``--set NAME=VALUE``, the option of the benchmarks that run ``drumbeat crawl`` (``bench
throughput``, ``bench site``): a crawl setting for drumbeat's runs, as a config-file line
(a TOML value), checked here as drumbeat checks its settings so that a typo is a usage
error, not a run that measures the defaults or fails half-way."""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Iterable

from drumbeat.settings import Settings, SettingsError, build

__all__ = ["setting_lines"]


def setting_lines(ap: argparse.ArgumentParser, texts: Iterable[str]) -> list[str]:
    """Each ``NAME=VALUE`` of ``texts`` as a config-file line (``name = value``), or a
    usage error through ``ap``: NAME must be a setting, VALUE a TOML value of its kind
    and range."""
    lines = []
    for text in texts:
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            ap.error(f"--set {text!r}: give NAME=VALUE, NAME a crawl setting")
        try:
            build(Settings(), {name: tomllib.loads(f"v = {value}")["v"]})
        except (tomllib.TOMLDecodeError, SettingsError) as e:
            ap.error(f"--set {text!r}: {e}")
        lines.append(f"{name} = {value}")
    return lines
