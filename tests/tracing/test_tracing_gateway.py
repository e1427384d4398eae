"""Trace context from the gateway into a Tesseron action: the host runs the handler
under the agent's tool-call span (``params._meta`` of ``actions/invoke``), so the
handler's own spans are children of it, across the WebSocket."""

from __future__ import annotations

from typing import Any

from gateway_rig import call, client, rig
from opentelemetry import trace
from otel_helpers import global_recorder, parent_of

from toolnexus_trio import InProcessResponse
from toolnexus_trio.tesseron import ActionContext, TesseronApp


def _app() -> TesseronApp:
    app = TesseronApp("shop", "Shop")

    @app.action("stock", description="Count the stock")
    async def stock(input: Any, ctx: ActionContext) -> Any:
        with trace.get_tracer("shop-app").start_as_current_span("count shelves"):
            return 7

    return app


async def test_a_gateway_invocation_parents_the_handlers_span() -> None:
    model = _Model()
    with global_recorder() as rec:
        async with rig(_app()) as r:
            name = next(t.name for t in r.toolkit.tools() if t.name.endswith("stock"))
            model.name = name
            result = await client(model).run("how many?", r.toolkit)
    assert result.tool_calls[0].output == "7"
    tool = rec.one(f"execute_tool {name}")
    handler = rec.one("count shelves")
    assert parent_of(handler) == tool.context.span_id
    assert handler.context.trace_id == tool.context.trace_id


async def test_without_a_span_the_invoke_has_no_meta() -> None:
    seen: list[Any] = []
    app = TesseronApp("shop", "Shop")

    @app.action("stock", description="Count the stock")
    async def stock(input: Any, ctx: ActionContext) -> Any:
        seen.append(trace.get_current_span().get_span_context().is_valid)
        return 7

    async with rig(app) as r:
        name = next(t.name for t in r.toolkit.tools() if t.name.endswith("stock"))
        model = _Model()
        model.name = name
        await client(model).run("how many?", r.toolkit)
    assert seen == [False]


class _Model:
    name = ""

    async def __call__(self, req: Any) -> InProcessResponse:
        if req.messages[-1]["role"] == "tool":
            return InProcessResponse(content=str(req.messages[-1]["content"]))
        return InProcessResponse(tool_calls=(call(self.name, {}, "g1"),))
