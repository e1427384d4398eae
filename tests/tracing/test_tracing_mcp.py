"""Trace context through MCP: a real stdio server (another process, its own exporter)
and our toolkit served with ``serve``; the server's spans are children of the agent's
tool call, across the process boundary too (W3C trace context in ``params._meta``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind
from otel_helpers import attrs_of, global_recorder, parent_of

from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessToolCall,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
    open_toolkit,
)

HERE = Path(__file__).parent


def _calls(name: str, args: dict[str, Any]) -> Any:
    async def generate(req: GenerateRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in req.messages):
            return {"content": "done"}
        return {"tool_calls": [InProcessToolCall(id="c1", name=name, arguments=args)]}

    return generate


async def test_an_mcp_call_through_a_real_stdio_server(tmp_path: Path) -> None:
    lines = tmp_path / "server-spans.jsonl"
    server = {"command": [sys.executable, str(HERE / "traced_mcp_server.py"), str(lines)]}
    options = ToolkitOptions(mcp={"ev": server}, builtins=False)
    client = create_in_process_client(
        InProcessOptions(model="m", generate=_calls("ev_add", {"a": 2, "b": 3}))
    )
    with global_recorder() as rec:
        async with open_toolkit(options) as toolkit:
            result = await client.run("add", toolkit)
    assert result.tool_calls[0].output == '{"result":5}'
    tool = rec.one("execute_tool ev_add")
    sent = [
        s
        for s in rec.spans()
        if s.kind is SpanKind.CLIENT and attrs_of(s).get("mcp.method.name") == "tools/call"
    ]
    assert len(sent) == 1
    assert parent_of(sent[0]) == tool.context.span_id
    assert attrs_of(sent[0])["jsonrpc.request.id"]
    theirs = [json.loads(line) for line in lines.read_text().splitlines()]
    served = [s for s in theirs if s["attributes"].get("mcp.method.name") == "tools/call"]
    assert len(served) == 1
    call = served[0]
    assert call["name"] == "tools/call add"  # {mcp.method.name} {target}
    assert call["kind"] == "SERVER"
    assert call["attributes"]["gen_ai.tool.name"] == "add"
    assert call["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert call["attributes"]["jsonrpc.request.id"] == attrs_of(sent[0])["jsonrpc.request.id"]
    # One trace across the process boundary: the server's span is the client span's child.
    assert call["trace_id"] == tool.context.trace_id
    assert call["parent"] == sent[0].context.span_id


async def test_an_mcp_call_through_serve() -> None:
    seen: list[Any] = []

    async def hello(args: dict[str, Any], ctx: ToolContext) -> str:
        from opentelemetry import trace

        seen.append(trace.get_current_span().get_span_context())
        return "hello"

    served_kit = await create_toolkit(
        ToolkitOptions(extra_tools=[define_tool("hello", "Hi.", None, hello)], builtins=False)
    )
    client = create_in_process_client(InProcessOptions(model="m", generate=_calls("srv_hello", {})))
    with global_recorder() as rec:
        async with served_kit, served_kit.serve() as served:
            options = ToolkitOptions(mcp={"srv": {"url": served.url}}, builtins=False)
            async with open_toolkit(options) as toolkit:
                result = await client.run("hi", toolkit)
    assert result.tool_calls[0].output == "hello"
    tool = rec.one("execute_tool srv_hello")
    sent = next(
        s
        for s in rec.spans()
        if s.kind is SpanKind.CLIENT and attrs_of(s).get("mcp.method.name") == "tools/call"
    )
    server = next(
        s
        for s in rec.spans()
        if s.kind is SpanKind.SERVER and attrs_of(s).get("mcp.method.name") == "tools/call"
    )
    assert parent_of(sent) == tool.context.span_id
    assert server.name == "tools/call hello"
    assert parent_of(server) == sent.context.span_id
    # The MCP conventions' mcp.session.id: the streamable HTTP session, on every request
    # after initialize (which makes it), all of them with the same id.
    sessions = {
        attrs_of(s).get("mcp.session.id")
        for s in rec.spans()
        if s.kind is SpanKind.SERVER and attrs_of(s).get("mcp.method.name") != "initialize"
    }
    assert len(sessions) == 1
    (session_id,) = sessions
    assert isinstance(session_id, str) and session_id
    assert server.context.trace_id == tool.context.trace_id
    # The served tool ran inside the server's span: its own spans would be its children.
    assert seen[0].span_id == server.context.span_id
