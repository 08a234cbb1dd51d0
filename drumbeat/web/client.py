"""``drumbeat ctl``: the control API of a running crawl, from the shell.

It finds the crawl through ``STATE/web.json`` and ``STATE/web.token`` and makes one
request with the standard library (no event loop to start for one call).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from drumbeat.web import WEB_JSON, WEB_TOKEN

TIMEOUT_S = 10.0


class CtlError(RuntimeError):
    """The call could not be made or was refused; the message is one line."""


def find(state_dir: Path) -> tuple[str, str]:
    """The URL and token of the crawl running in ``state_dir``."""
    try:
        doc = json.loads((state_dir / WEB_JSON).read_text(encoding="utf-8"))
        url = str(doc["url"])
    except FileNotFoundError:
        raise CtlError(
            f"no crawl with a web server is running in {state_dir} (no {WEB_JSON})"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CtlError(f"cannot read {state_dir / WEB_JSON}: {e}") from None
    try:
        token = (state_dir / WEB_TOKEN).read_text(encoding="ascii").strip()
    except OSError as e:
        raise CtlError(f"cannot read {state_dir / WEB_TOKEN}: {e.strerror}") from None
    return url, token


def call(
    state_dir: Path, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One API call; returns the JSON answer or raises CtlError."""
    url, token = find(state_dir)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            answer = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error", e.reason)
        except (ValueError, AttributeError):
            message = e.reason
        raise CtlError(f"{method} {path}: {e.code} {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise CtlError(
            f"the crawl in {state_dir} is not answering at {url} ({reason}): not running?"
        ) from None
    except ValueError:
        raise CtlError(f"{method} {path}: the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise CtlError(f"{method} {path}: unexpected answer")
    return answer


def host_path(name: str) -> str:
    return "/api/host/" + quote(name, safe="")
