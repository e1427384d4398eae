"""Shared pieces of the gateway tests: a probe app, a scripted model, a connected rig."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio
from gateway_helpers import FakeGateway, serving

from toolnexus_trio import (
    Client,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Toolkit,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.tesseron import (
    ActionContext,
    ActionError,
    ElicitRequest,
    Gateway,
    GatewayOptions,
    GatewaySession,
    LogEntry,
    SampleRequest,
    TesseronApp,
    TesseronHost,
)
from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed
from toolnexus_trio.tesseron._ws_server import serve_websocket

NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


@attrs.define
class Probe:
    """What the probe app's handlers saw."""

    started: trio.Event = attrs.field(factory=trio.Event)
    finished: trio.Event = attrs.field(factory=trio.Event)
    cancelled_seen: list[bool] = attrs.field(factory=list)
    errors: list[tuple[int, Any]] = attrs.field(factory=list)


def probe_app(probe: Probe) -> TesseronApp:
    """An app whose actions exercise every part of the gateway."""
    app = TesseronApp("shop", "Shop")

    @app.action(
        "add",
        description="Add two numbers",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        annotations={"readOnly": True, "idempotent": True},
    )
    async def add(input: Any, ctx: ActionContext) -> Any:
        return input["a"] + input["b"]

    @app.action("slow", description="Runs until cancelled")
    async def slow(input: Any, ctx: ActionContext) -> Any:
        probe.started.set()
        try:
            await trio.sleep_forever()
        finally:
            probe.cancelled_seen.append(ctx.is_cancelled())
            probe.finished.set()

    @app.action("ask")
    async def ask(input: Any, ctx: ActionContext) -> Any:
        try:
            return await ctx.sample(SampleRequest("What is 2+2?", max_tokens=7))
        except ActionError as exc:
            probe.errors.append((int(exc.code), exc.data))
            raise

    @app.action("deep")
    async def deep(input: Any, ctx: ActionContext) -> Any:
        try:
            return await ctx.sample(SampleRequest("go deeper"))
        except ActionError as exc:
            probe.errors.append((int(exc.code), exc.data))
            return "limit"

    @app.action("rename", annotations={"destructive": True})
    async def rename(input: Any, ctx: ActionContext) -> Any:
        return {"value": await ctx.elicit(ElicitRequest("New name?", NAME_SCHEMA))}

    @app.action("delete", annotations={"destructive": True})
    async def delete(input: Any, ctx: ActionContext) -> Any:
        return {"confirmed": await ctx.confirm("Delete everything?")}

    @app.action("work")
    async def work(input: Any, ctx: ActionContext) -> Any:
        await ctx.progress(55, "first")
        await ctx.progress(10, "second")
        await ctx.log(LogEntry.info("working").meta({"step": 2}))
        return "worked"

    app.resource("count", read=lambda: 42, description="A number")
    return app


def call(name: str, args: Any = None, id: str = "") -> InProcessToolCall:
    return InProcessToolCall(id=id, name=name, arguments={} if args is None else args)


class Model:
    """A scripted model: tool-turn replies in order, then echo the last tool output.

    A request without tools that ends in a user message is a host's sampling request:
    it goes to *sample*.
    """

    def __init__(
        self,
        *replies: InProcessResponse,
        sample: Callable[[GenerateRequest], Awaitable[str]] | None = None,
    ) -> None:
        self.replies = list(replies)
        self.sample = sample
        self.sampled: list[GenerateRequest] = []

    async def __call__(self, req: GenerateRequest) -> InProcessResponse:
        if req.tools is None and req.messages[-1]["role"] == "user":
            self.sampled.append(req)
            assert self.sample is not None, "unexpected sampling request"
            return InProcessResponse(content=await self.sample(req))
        if self.replies:
            return self.replies.pop(0)
        last = req.messages[-1]
        return InProcessResponse(content=last["content"] if last["role"] == "tool" else "done")


def client(generate: Any, **kw: Any) -> Client:
    return create_in_process_client(InProcessOptions(model="m", generate=generate, **kw))


@attrs.frozen
class Rig:
    host: TesseronHost
    gateway: Gateway
    session: GatewaySession
    toolkit: Toolkit


@asynccontextmanager
async def rig(app: TesseronApp, **options: Any) -> AsyncIterator[Rig]:
    """Our host on loopback, a gateway (auto_claim unless told) connected, a toolkit."""
    options.setdefault("auto_claim", True)
    async with serving(app) as host, Gateway(GatewayOptions(**options)) as gw:
        session = await gw.connect(host.url)
        toolkit = await create_toolkit(ToolkitOptions(tesseron=gw, builtins=False))
        async with toolkit:
            yield Rig(host, gw, session, toolkit)


@asynccontextmanager
async def fake_host(handler: Callable[[FakeGateway], Awaitable[None]]) -> AsyncIterator[str]:
    """A hand-driven host on loopback (``FakeGateway`` is symmetric): yields its URL.

    An exception in *handler* (a failed assertion on what the gateway sent) is re-raised
    when the block exits, so it fails the test instead of only closing the socket.
    """
    failures: list[Exception] = []

    async def serve(ws: WebSocket) -> None:
        try:
            await handler(FakeGateway(ws))
        except WebSocketClosed:
            pass  # the gateway went away: the test decides whether that was expected
        except Exception as exc:
            failures.append(exc)
            raise

    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_websocket, serve, host="127.0.0.1", port=0))
        yield f"ws://127.0.0.1:{port}/"
        nursery.cancel_scope.cancel()
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ExceptionGroup("fake host handlers failed", failures)


async def until_closed(peer: FakeGateway) -> None:
    """Read (and drop) frames until the gateway closes, answering its close promptly."""
    with contextlib.suppress(WebSocketClosed):
        while True:
            await peer.recv()


def hello_params(app_id: str = "fake", version: str = "1.2.0", **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "protocolVersion": version,
        "app": {"id": app_id, "name": "Fake", "origin": "http://127.0.0.1"},
        "actions": [],
        "resources": [],
        "capabilities": {
            "streaming": True,
            "subscriptions": True,
            "sampling": True,
            "elicitation": True,
        },
    }
    params.update(extra)
    return params
