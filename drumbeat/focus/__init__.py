"""Focused crawling: an operator's relevance function orders the crawl (``--focus``).

``--focus module:function`` names a function ``function(text, url) -> float`` that
scores an HTML page's relevance in [0, 1] from its text (tags, scripts and styles left
out) and its URL. Each fetcher imports it once, at start, and scores every HTML page it
parses; the score goes back with the page's links (``ItemResult.focus``) and becomes
their priority band in BEAST's queues (``drumbeat.frontier.order.Focus``): links of the
most relevant pages are fetched first within the crawl's budgets. Without ``--focus``
nothing is scored and no page pays for it.

:mod:`drumbeat.focus.keywords` is a worked example: a topic given by keywords.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

from selectolax.lexbor import LexborHTMLParser

FocusFunction = Callable[[str, str], float]


class FocusError(ValueError):
    """A ``--focus`` that names no usable function (a one-line message)."""


def load_focus(spec: str) -> FocusFunction:
    """The function ``spec`` ("module:function") names, imported now."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise FocusError(f"--focus {spec!r}: expected module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the operator's module may raise anything at import
        raise FocusError(f"--focus {spec!r}: cannot import {module_name}: {e}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise FocusError(f"--focus {spec!r}: {module_name} has no function {name}")
    return function


def page_text(html: bytes) -> str:
    """The text of an HTML page, without its scripts and styles, words separated."""
    tree = LexborHTMLParser(html)
    tree.strip_tags(["script", "style", "noscript"])
    body = tree.body
    return "" if body is None else body.text(separator=" ")


def clamp_score(value: object) -> float:
    """A focus function's answer as a score in [0, 1] (anything else, NaN: 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return 0.0
    return min(max(float(value), 0.0), 1.0)
