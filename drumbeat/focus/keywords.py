"""A focus function for a topic given by keywords: ``--focus drumbeat.focus.keywords:score``.

The keywords are read once, at import, from the environment variable
``DRUMBEAT_FOCUS_KEYWORDS`` (comma-separated, case-insensitive, e.g.
``astronomy,telescope,galaxy``); fetcher processes inherit it. A page's score is the share
of the keywords that occur in its text or URL as whole words: a page naming all of them
scores 1, a page naming none 0. Counting distinct keywords rather than occurrences keeps
a page that repeats one word (keyword stuffing) from outranking one about the topic.
"""

from __future__ import annotations

import os
import re

ENV = "DRUMBEAT_FOCUS_KEYWORDS"


def _keywords(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w.strip().lower() for w in value.split(",") if w.strip()))


KEYWORDS = _keywords(os.environ.get(ENV, ""))
if not KEYWORDS:
    raise ImportError(f"set {ENV} to the topic's keywords, comma-separated")
_PATTERN = re.compile(r"\b(" + "|".join(map(re.escape, KEYWORDS)) + r")\b", re.IGNORECASE)


def score(text: str, url: str) -> float:
    """The share of the keywords found in ``text`` or ``url``."""
    found = {m.lower() for m in _PATTERN.findall(text)} | {m.lower() for m in _PATTERN.findall(url)}
    return len(found) / len(KEYWORDS)
