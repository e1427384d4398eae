"""A headless Chromium driven over the DevTools protocol (our WebSocket client)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio.gateway._ws_client import connect_websocket
from toolnexus_trio.tesseron._ws import WebSocket


class Page:
    """One tab: :meth:`call` sends a DevTools command in its session."""

    def __init__(self, ws: WebSocket, session: str, target: str) -> None:
        self.ws = ws
        self.session = session
        self.target = target
        self._id = 0

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   browser: bool = False) -> dict[str, Any]:  # fmt: skip
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if not browser:
            message["sessionId"] = self.session
        await self.ws.send(json.dumps(message))
        while True:
            for text in await self.ws.receive_batch():
                reply = json.loads(text)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    result: dict[str, Any] = reply.get("result", {})
                    return result

    async def js(self, expression: str) -> Any:
        """The value of *expression* in the page (promises awaited)."""
        reply = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def wait_js(self, expression: str) -> Any:
        """Poll *expression* until it is truthy (the page has no event to wait on)."""
        while True:
            value = await self.js(expression)
            if value:
                return value
            await trio.sleep(0.05)


@asynccontextmanager
async def open_page(chromium: str, url: str, tmp: Path) -> AsyncIterator[Page]:
    """Chromium (headless, its own process group) with one tab on *url*."""
    log = tmp / "chromium.log"
    with open(log, "wb") as err:  # noqa: ASYNC230 - opened once, before the browser starts
        process = await trio.lowlevel.open_process(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-dev-shm-usage", "--window-size=1200,800",
             f"--user-data-dir={tmp / 'profile'}", "--remote-debugging-port=0",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True,
        )  # fmt: skip
    try:
        while True:
            found = re.search(r"DevTools listening on (ws://\S+)", log.read_text(errors="replace"))
            if found:
                break
            if process.poll() is not None:
                raise RuntimeError(f"chromium exited: {log.read_text(errors='replace')[-2000:]}")
            await trio.sleep(0.05)
        async with connect_websocket(found.group(1), subprotocols=(),
                                     max_message_bytes=64 * 1024 * 1024) as ws:  # fmt: skip
            page = Page(ws, "", "")
            target = (await page.call("Target.createTarget", {"url": url}, browser=True))[
                "targetId"
            ]
            attached = await page.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, browser=True
            )
            page.session, page.target = attached["sessionId"], target
            # about:blank is "complete" too: wait for the page itself.
            await page.wait_js(
                f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
            )
            yield page
    finally:
        with trio.move_on_after(5, shield=True):
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
