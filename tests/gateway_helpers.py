"""A fake Tesseron gateway for tests: the real protocol over a real loopback socket.

It dials the host with :func:`connect_websocket` (the ``tesseron-gateway``
subprotocol) and speaks JSON-RPC by hand, so tests exercise the host exactly as a
gateway would, without mocking any of our own code.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.lowlevel

from toolnexus_trio.gateway._ws_client import connect_websocket
from toolnexus_trio.tesseron import TesseronApp, TesseronHost
from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed

ALL_CAPS = {"streaming": True, "subscriptions": True, "sampling": True, "elicitation": True}
NO_CAPS = {"streaming": True, "subscriptions": True, "sampling": False, "elicitation": False}

Frame = dict[str, Any]

AUTO: Any = object()
"""Default request id: a fresh one (``None`` means a JSON null id)."""


def welcome(
    caps: dict[str, bool] | None = None,
    *,
    session_id: str = "s_test_0001",
    resume_token: str | None = "rt_test_0001",
    claim_code: str | None = "AB3X-7K",
    protocol_version: str = "1.2.0",
) -> Frame:
    """A welcome result."""
    result: Frame = {
        "sessionId": session_id,
        "protocolVersion": protocol_version,
        "capabilities": dict(ALL_CAPS if caps is None else caps),
        "agent": {"id": "pending", "name": "Awaiting agent"},
    }
    if claim_code is not None:
        result["claimCode"] = claim_code
    if resume_token is not None:
        result["resumeToken"] = resume_token
    return result


class FakeGateway:
    """The gateway side of one connection."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self._ready: deque[str] = deque()
        self._next_id = 0
        self.hello: Frame | None = None

    # -- raw frames -------------------------------------------------------------

    async def recv_text(self) -> str:
        """The next text frame from the host."""
        while not self._ready:
            self._ready.extend(await self.ws.receive_batch())
        return self._ready.popleft()

    async def recv(self) -> Frame:
        """The next frame from the host, parsed."""
        frame = json.loads(await self.recv_text())
        assert isinstance(frame, dict)
        return frame

    def send_text(self, text: str) -> None:
        """Send one raw text frame."""
        self.ws.send_nowait(text)

    def send(self, frame: Frame) -> None:
        """Send one frame."""
        self.send_text(json.dumps(frame))

    # -- JSON-RPC helpers -------------------------------------------------------

    def new_id(self) -> str:
        """A fresh gateway request id (strings, as the reference gateway's ids differ)."""
        self._next_id += 1
        return f"g-{self._next_id}"

    def request(self, method: str, params: Any, id: Any = AUTO) -> Any:
        """Send a request; return its id."""
        rid = self.new_id() if id is AUTO else id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def notify(self, method: str, params: Any) -> None:
        """Send a notification."""
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, id: Any, result: Any) -> None:
        """Answer a host request."""
        self.send({"jsonrpc": "2.0", "id": id, "result": result})

    def respond_error(self, id: Any, code: int, message: str, data: Any = None) -> None:
        """Answer a host request with an error."""
        error: Frame = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.send({"jsonrpc": "2.0", "id": id, "error": error})

    def invoke(
        self, name: str, input: Any = None, invocation_id: str | None = None, id: Any = AUTO
    ) -> Any:
        """Send ``actions/invoke``; return the request id."""
        rid = self.new_id() if id is AUTO else id
        inv = invocation_id if invocation_id is not None else f"inv-{rid}"
        return self.request(
            "actions/invoke", {"name": name, "input": input, "invocationId": inv}, id=rid
        )

    def cancel(self, invocation_id: str) -> None:
        """Send ``actions/cancel``."""
        self.notify("actions/cancel", {"invocationId": invocation_id})

    async def response(self, id: Any, *, others: list[Frame] | None = None) -> Frame:
        """Read frames until the response to *id*; other frames go to *others*."""
        while True:
            frame = await self.recv()
            if "method" not in frame and frame.get("id") == id:
                return frame
            if others is None:
                raise AssertionError(f"unexpected frame while waiting for {id!r}: {frame}")
            others.append(frame)

    async def call(self, name: str, input: Any = None, **kw: Any) -> Frame:
        """Invoke and wait for the response (no other frames allowed meanwhile)."""
        rid = self.invoke(name, input, **kw)
        return await self.response(rid)

    async def expect_method(self, method: str) -> Frame:
        """The next frame, which must be *method*."""
        frame = await self.recv()
        assert frame.get("method") == method, frame
        return frame

    async def handshake(self, caps: dict[str, bool] | None = None, **kw: Any) -> Frame:
        """Read the hello (or resume), answer with a welcome; return the host's frame."""
        hello = await self.recv()
        assert hello["method"] in ("tesseron/hello", "tesseron/resume"), hello
        self.hello = hello
        self.respond(hello["id"], welcome(caps, **kw))
        return hello

    async def expect_closed(self) -> WebSocketClosed:
        """Read until the host closes; no further frames are allowed."""
        try:
            frame = await self.recv()
        except WebSocketClosed as exc:
            return exc
        raise AssertionError(f"expected a close, got {frame}")


@asynccontextmanager
async def dial(host: TesseronHost | str) -> AsyncIterator[FakeGateway]:
    """Connect a fake gateway (no handshake)."""
    url = host if isinstance(host, str) else host.url
    async with connect_websocket(url) as ws:
        yield FakeGateway(ws)


@asynccontextmanager
async def gateway(
    host: TesseronHost, caps: dict[str, bool] | None = None, **kw: Any
) -> AsyncIterator[FakeGateway]:
    """Connect a fake gateway and complete the handshake."""
    async with dial(host) as gw:
        await gw.handshake(caps, **kw)
        yield gw


@asynccontextmanager
async def serving(app: TesseronApp, **kw: Any) -> AsyncIterator[TesseronHost]:
    """``app.listen`` on an OS-picked loopback port without publishing a manifest."""
    kw.setdefault("manifest_dir", None)
    async with app.listen(**kw) as host:
        yield host


async def wait_until(predicate: Any) -> None:
    """Yield to other tasks until *predicate()* holds (the test's fail_after bounds it)."""
    while not predicate():
        await trio.lowlevel.checkpoint()
