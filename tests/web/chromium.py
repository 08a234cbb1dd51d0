"""A headless Chromium driven over the DevTools protocol (CDP), for the dashboard's test.

Debian's ``chromium`` is started on loopback (``--remote-debugging-port=0``; the port
is read from ``DevToolsActivePort`` in its profile) and one page target is driven over
a websocket with aiohttp's client: no Selenium, no Playwright, no driver download. Its
background services are switched off and every host name but loopback resolves to
nothing (``--host-resolver-rules``), so the browser reaches no other machine.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0
FLAGS = (
    "--headless=new",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--no-sandbox",  # tests may run as root, where the sandbox cannot start
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--no-pings",
    "--metrics-recording-only",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1, EXCLUDE localhost",
    "--window-size=1400,1000",
)


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One page target: :meth:`call` a CDP method; events are kept in :attr:`events`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            doc = msg.json()
            if "id" in doc:
                future = self._waiting.pop(doc["id"], None)
                if future is not None and not future.done():
                    future.set_result(doc)
            else:
                self.events.append(doc)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[n] = future
        await self.ws.send_json({"id": n, "method": method, "params": params})
        doc = await asyncio.wait_for(future, CALL_TIMEOUT_S)
        if "error" in doc:
            raise RuntimeError(f"{method}: {doc['error']}")
        result: dict[str, Any] = doc.get("result", {})
        return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise)."""
        doc = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in doc:
            raise RuntimeError(f"{expression}: {doc['exceptionDetails']}")
        return doc["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        """The whole page as PNG."""
        metrics = await self.call("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        shot = await self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def errors(self) -> list[dict[str, Any]]:
        """Console errors, log entries of level error and uncaught exceptions so far."""
        out = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if (
                (method == "Runtime.consoleAPICalled" and params.get("type") == "error")
                or (method == "Log.entryAdded" and params["entry"].get("level") == "error")
                or method == "Runtime.exceptionThrown"
            ):
                out.append(e)
        return out

    def requested(self) -> list[str]:
        """The URLs the page has requested so far."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with one blank page, its profile in ``profile``."""
    exe = find_chromium()
    assert exe is not None
    profile.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = await _port(profile / "DevToolsActivePort", proc)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as r:
                targets = await r.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            ws = await session.ws_connect(url, max_msg_size=64 << 20)
            page = Page(ws)
            try:
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await page.call(f"{domain}.enable")
                yield page
            finally:
                await page.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _port(path: Path, proc: subprocess.Popen[bytes]) -> int:
    end = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} at start")
        if path.exists():
            first = path.read_text().split("\n", 1)[0].strip()
            if first.isdigit():
                return int(first)
        await asyncio.sleep(0.05)
    raise RuntimeError("chromium did not open its DevTools port")
