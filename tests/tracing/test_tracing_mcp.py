"""Trace context through MCP: a real stdio server (another process, its own exporter)
and our toolkit served with ``serve``; the server's spans are children of the agent's
tool call, across the process boundary too (W3C trace context in ``params._meta``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind, StatusCode
from otel_helpers import attrs_of, global_recorder, parent_of

from toolnexus_trio import (
    CancelToken,
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
    # The MCP conventions' CLIENT span, ours: named {mcp.method.name} {target}, under the
    # agent's tool call, with the request's id as the SDK wrote it on the wire.
    ours = rec.one("tools/call add")
    assert ours.kind is SpanKind.CLIENT
    assert parent_of(ours) == tool.context.span_id
    mine = attrs_of(ours)
    assert mine["mcp.method.name"] == "tools/call"
    assert mine["gen_ai.tool.name"] == "add"
    assert mine["gen_ai.operation.name"] == "execute_tool"
    assert mine["network.transport"] == "pipe"
    assert isinstance(mine["mcp.protocol.version"], str) and mine["mcp.protocol.version"]
    assert "mcp.session.id" not in mine  # stdio has no session id
    assert "error.type" not in mine
    # The SDK's own span of the request is its child; the traceparent it writes is its.
    sent = [
        s
        for s in rec.spans()
        if s.kind is SpanKind.CLIENT
        and attrs_of(s).get("mcp.method.name") == "tools/call"
        and s is not ours
    ]
    assert len(sent) == 1
    assert parent_of(sent[0]) == ours.context.span_id
    assert mine["jsonrpc.request.id"] == attrs_of(sent[0])["jsonrpc.request.id"]
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
    ours = next(
        s for s in rec.spans() if s.kind is SpanKind.CLIENT and s.name == "tools/call hello"
    )
    sent = next(
        s
        for s in rec.spans()
        if s.kind is SpanKind.CLIENT
        and attrs_of(s).get("mcp.method.name") == "tools/call"
        and s is not ours
    )
    server = next(
        s
        for s in rec.spans()
        if s.kind is SpanKind.SERVER and attrs_of(s).get("mcp.method.name") == "tools/call"
    )
    assert parent_of(ours) == tool.context.span_id
    assert parent_of(sent) == ours.context.span_id
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
    # The client span has the same session id (the server's Mcp-Session-Id answer).
    mine = attrs_of(ours)
    assert mine["mcp.session.id"] == session_id
    assert mine["mcp.method.name"] == "tools/call"
    assert mine["gen_ai.tool.name"] == "hello"
    assert mine["gen_ai.operation.name"] == "execute_tool"
    assert mine["network.transport"] == "tcp"
    assert mine["server.address"] == "127.0.0.1"
    assert isinstance(mine["server.port"], int)
    assert mine["jsonrpc.request.id"] == attrs_of(sent)["jsonrpc.request.id"]
    assert mine["mcp.protocol.version"]
    # The listing has its span too, in the same session.
    listed = [s for s in rec.spans() if s.kind is SpanKind.CLIENT and s.name == "tools/list"]
    assert listed and all(attrs_of(s)["mcp.session.id"] == session_id for s in listed)
    assert server.context.trace_id == tool.context.trace_id
    # The served tool ran inside the server's span: its own spans would be its children.
    assert seen[0].span_id == server.context.span_id


async def test_mcp_client_spans_of_a_tool_error_and_a_cancel(tmp_path: Path) -> None:
    """Outside a run (the global provider): a tool answering ``isError`` ends its MCP
    CLIENT span with ``error.type`` ``tool_error``; a cancel mid-call with ``cancelled``."""
    import trio

    lines = tmp_path / "server-spans.jsonl"
    server = {"command": [sys.executable, str(HERE / "traced_mcp_server.py"), str(lines)]}
    with global_recorder() as rec:
        async with open_toolkit(ToolkitOptions(mcp={"ev": server}, builtins=False)) as toolkit:
            failed = await toolkit.execute("ev_fail", {"message": "no"})
            assert failed.is_error
            token = CancelToken()
            out: list[Any] = []

            async def call() -> None:
                ctx = ToolContext(cancel=token)
                out.append(await toolkit.execute("ev_slow", {"tag": "t"}, ctx))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                seen = {"started_calls": True}
                with trio.fail_after(15):
                    while "t" not in (await toolkit.execute("ev_seen_cancels", seen)).output:  # noqa: ASYNC110 - the state is in the server process
                        await trio.sleep(0.01)
                token.cancel()
    assert out[0].output == "cancelled"
    fail = rec.one("tools/call fail")
    assert attrs_of(fail)["error.type"] == "tool_error"
    assert fail.status.status_code is StatusCode.ERROR
    slow = rec.one("tools/call slow")
    assert attrs_of(slow)["error.type"] == "cancelled"
    assert attrs_of(slow)["jsonrpc.request.id"]
    for span in (fail, slow):
        assert span.kind is SpanKind.CLIENT
        assert span.parent is None  # no span around a direct toolkit call


async def test_a_json_rpc_error_answer_on_the_mcp_client_span() -> None:
    server = {"command": [sys.executable, str(HERE / "refusing_mcp_server.py")]}
    with global_recorder() as rec:
        async with open_toolkit(ToolkitOptions(mcp={"no": server}, builtins=False)) as toolkit:
            result = await toolkit.execute("no_refuse", {})
    assert result.is_error and "refused here" in result.output
    span = rec.one("tools/call refuse")
    assert span.kind is SpanKind.CLIENT
    assert attrs_of(span)["error.type"] == "-32001"
    assert attrs_of(span)["rpc.response.status_code"] == "-32001"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "refused here"
