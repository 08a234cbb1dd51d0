"""The web server's life in a crawl: the address, the token file, ``web.json``."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from drumbeat.web import WEB_JSON, WEB_TOKEN
from drumbeat.web.address import WebAddress
from drumbeat.web.app import build_app

if TYPE_CHECKING:
    from drumbeat.manager import Manager


def write_token(state_dir: Path) -> str:
    """A new token in ``state_dir/web.token``, readable by this user only."""
    token = secrets.token_urlsafe(32)
    path = state_dir / WEB_TOKEN
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    return token


class WebServer:
    """Serves the API of ``manager`` on the running event loop, from :meth:`start` to
    :meth:`close`."""

    def __init__(self, manager: Manager, state_dir: Path, address: WebAddress) -> None:
        self.manager = manager
        self.state_dir = state_dir
        self.address = address
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen, write web.token and web.json; returns the URL."""
        token = write_token(self.state_dir)
        app = build_app(self.manager, token, read_open=self.address.loopback)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.address.host, self.address.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        port = runner.addresses[0][1]
        host = self.address.host
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        doc = {"url": self.url, "pid": os.getpid()}
        tmp = self.state_dir / (WEB_JSON + ".tmp")
        tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_dir / WEB_JSON)
        return self.url

    async def close(self) -> None:
        (self.state_dir / WEB_JSON).unlink(missing_ok=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
