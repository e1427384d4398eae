"""The web UI's HTTP side: ``GET /`` (the page), ``POST /agui`` (the AG-UI endpoint,
SSE) and ``POST /interrupt`` (the page's Interrupt buttons), on hypercorn's Trio worker.

Every request's ``Host`` must name the bound address or a loopback name, and an
``Origin``, when sent, must be a loopback ``http://`` origin: the checks ``serve`` makes
against DNS rebinding. A request body is capped at :data:`MAX_BODY` bytes.
"""

from __future__ import annotations

import contextlib
import json
import logging
from importlib import resources
from typing import Any, Final
from urllib.parse import urlsplit

import trio

from .._served import SHUTDOWN_GRACE, HttpServed
from ..a2a._server import is_loopback
from ._agui import AguiAgent

logger = logging.getLogger("toolnexus_trio.ui")

MAX_BODY: Final = 4 * 1024 * 1024
"""The largest request body read (a conversation's messages), in bytes."""

_SECURITY_HEADERS: Final = [
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


def _host_ok(headers: dict[bytes, bytes], bound_host: str) -> bool:
    host = headers.get(b"host", b"").decode("latin-1")
    name = urlsplit(f"//{host}").hostname or ""
    if not (is_loopback(name) or name == bound_host.strip("[]")):
        return False
    origin = headers.get(b"origin")
    if origin is None:
        return True
    parts = urlsplit(origin.decode("latin-1"))
    return parts.scheme == "http" and is_loopback(parts.hostname or "")


class UiApp:
    """The ASGI app of the web UI around an :class:`AguiAgent`."""

    def __init__(self, agent: AguiAgent, host: str) -> None:
        self.agent = agent
        self.host = host
        self._page: bytes | None = None

    async def load(self) -> None:
        """Read the page from the package (in a thread: no file I/O on the loop)."""

        def read() -> bytes:
            return (resources.files(__package__) / "static" / "index.html").read_bytes()

        self._page = await trio.to_thread.run_sync(read)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if not _host_ok(headers, self.host):
            await _plain(send, 403, b"Host or Origin not allowed")
            return
        method, path = scope["method"], scope["path"]
        if method == "GET" and path in ("/", "/index.html"):
            assert self._page is not None
            await _plain(send, 200, self._page, b"text/html; charset=utf-8")
        elif method == "POST" and path in ("/agui", "/interrupt"):
            body = await _body(receive)
            if body is None:
                await _plain(send, 413, b"request body too large")
                return
            try:
                data = json.loads(body)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                await _plain(send, 400, f"bad JSON body: {exc}".encode())
                return
            if path == "/interrupt":
                done = self.agent.interrupt(str(data.get("threadId")), str(data.get("agent")))
                await _plain(send, 200 if done else 404, b"ok" if done else b"no such agent")
            else:
                await self._stream(data, receive, send)
        else:
            await _plain(send, 404, b"not found")

    async def _stream(self, data: dict[str, Any], receive: Any, send: Any) -> None:
        """One AG-UI run as SSE; the client's disconnect ends the response (and so the
        run, see :meth:`AguiAgent.frames`)."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), *_SECURITY_HEADERS],
            }
        )
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        nursery.cancel_scope.cancel(reason="the AG-UI client disconnected")
                        return

            nursery.start_soon(watch)
            async with contextlib.aclosing(self.agent.frames(data)) as frames:
                async for frame in frames:
                    line = json.dumps(frame, separators=(",", ":"), ensure_ascii=False)
                    await send(
                        {
                            "type": "http.response.body",
                            "body": f"data: {line}\n\n".encode(),
                            "more_body": True,
                        }
                    )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel()


async def _body(receive: Any) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _plain(
    send: Any, status: int, body: bytes, content_type: bytes = b"text/plain; charset=utf-8"
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), *_SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})


class UiServing(HttpServed):
    """The web UI and its AG-UI endpoint served on *host*:*port* (loopback only).

    ``async with UiServing(agent) as served:`` (or ``await nursery.start(served)``);
    :attr:`url` is ``http://HOST:PORT/``, the endpoint ``url + "agui"``. Stopping it
    cancels every live run.
    """

    def __init__(self, agent: AguiAgent, host: str = "127.0.0.1", port: int = 0) -> None:
        if not is_loopback(host):
            raise ValueError(f"{host!r} is not a loopback address: the UI serves this machine only")
        super().__init__()
        self.agent = agent
        self.app = UiApp(agent, host)
        self.host, self.port = host, port

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` (the bound port when 0 was asked)."""
        if self._url is None:
            raise RuntimeError("not serving yet")
        return self._url + "/"

    async def __call__(
        self, *, task_status: trio.TaskStatus[UiServing] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until :meth:`aclose` or cancellation."""
        await self.app.load()
        done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.agent.run)
                binds: list[str] = await nursery.start(
                    self._hypercorn, self.app, self.host, self.port, "toolnexus_trio.ui.http", done
                )
                self._url = binds[0]
                task_status.started(self)
                await self._stop.wait()
                with trio.move_on_after(SHUTDOWN_GRACE + 1):
                    await done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._stopped.set()
