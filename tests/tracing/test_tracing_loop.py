"""The loop's spans, read back from the OpenTelemetry SDK's in-memory exporter.

Names and attributes are the GenAI semantic conventions' literal strings, never the
library's own constants."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from helpers import TaskCensus
from opentelemetry.trace import SpanKind, StatusCode
from otel_helpers import Recorder, attrs_of, parent_of

from toolnexus_trio import (
    CancelToken,
    GenerateError,
    GenerateRequest,
    InProcessOptions,
    InProcessToolCall,
    RunTimeout,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
)


def _fan_out(n: int) -> Any:
    async def generate(req: GenerateRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in req.messages):
            return {"content": "all done", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
        calls = [InProcessToolCall(id=f"c{i}", name="work", arguments={"i": i}) for i in range(n)]
        return {"tool_calls": calls, "usage": {"prompt_tokens": 5, "completion_tokens": 2}}

    return generate


async def _work(args: dict[str, Any], ctx: ToolContext) -> Any:
    await trio.sleep(1 + args["i"])
    if args["i"] == 2:
        raise ValueError("bad two")
    return f"ok {args['i']}"


async def _toolkit(*tools: Any) -> Any:
    return await create_toolkit(ToolkitOptions(extra_tools=list(tools), builtins=False))


async def test_parallel_tool_calls_are_siblings_under_the_run(autojump_clock: Any) -> None:
    rec = Recorder()
    client = create_in_process_client(
        InProcessOptions(model="m-1", generate=_fan_out(3), tracer_provider=rec.provider)
    )
    async with await _toolkit(define_tool("work", "", None, _work)) as toolkit:
        with TaskCensus() as census:
            result = await client.run("go", toolkit)
            census.assert_no_new_tasks()
    assert result.status == "done"
    spans = rec.spans()
    run = rec.one("invoke_agent")
    assert run.kind is SpanKind.INTERNAL
    assert parent_of(run) is None
    assert attrs_of(run)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs_of(run)["gen_ai.usage.input_tokens"] == 12
    assert attrs_of(run)["gen_ai.usage.output_tokens"] == 5
    chats = rec.named("chat m-1")
    assert len(chats) == 2
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert parent_of(chat) == run.context.span_id
        a = attrs_of(chat)
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "m-1"
        assert isinstance(a["gen_ai.provider.name"], str)
        assert "gen_ai.input.messages" not in a  # content only when opted in
    assert attrs_of(chats[0])["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert attrs_of(chats[0])["gen_ai.usage.input_tokens"] == 5
    assert attrs_of(chats[1])["gen_ai.response.finish_reasons"] == ("stop",)
    tools = rec.named("execute_tool work")
    assert len(tools) == 3
    assert {parent_of(t) for t in tools} == {run.context.span_id}  # siblings
    assert sorted(attrs_of(t)["gen_ai.tool.call.id"] for t in tools) == ["c0", "c1", "c2"]
    for t in tools:
        a = attrs_of(t)
        assert t.kind is SpanKind.INTERNAL
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.name"] == "work"
        assert a["gen_ai.tool.type"] == "function"
        assert "gen_ai.tool.call.arguments" not in a
    failed = next(t for t in tools if attrs_of(t)["gen_ai.tool.call.id"] == "c2")
    assert attrs_of(failed)["error.type"] == "tool_error"
    assert failed.status.status_code is StatusCode.ERROR
    # The tools ran at once: each began before the first one ended.
    assert max(t.start_time for t in tools) < min(t.end_time for t in tools)
    # Every tool span closes inside its run's span.
    assert all(run.start_time <= s.start_time and s.end_time <= run.end_time for s in spans)


async def test_content_is_captured_only_when_asked(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ok(args: dict[str, Any], ctx: ToolContext) -> Any:
        return "secret-free result"

    for how in ("option", "environment"):
        rec = Recorder()
        if how == "environment":
            monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        client = create_in_process_client(
            InProcessOptions(
                model="m",
                generate=_fan_out(1),
                tracer_provider=rec.provider,
                capture_content=how == "option",
            )
        )
        async with await _toolkit(define_tool("work", "", None, ok)) as toolkit:
            await client.run("hello there", toolkit)
        first = rec.named("chat m")[0]
        sent = json.loads(attrs_of(first)["gen_ai.input.messages"])
        assert sent == [{"role": "user", "parts": [{"type": "text", "content": "hello there"}]}]
        out = json.loads(attrs_of(first)["gen_ai.output.messages"])
        assert out[0]["role"] == "assistant"
        assert out[0]["parts"][0]["type"] == "tool_call"
        tool = rec.one("execute_tool work")
        assert attrs_of(tool)["gen_ai.tool.call.arguments"] == '{"i":0}'
        assert attrs_of(tool)["gen_ai.tool.call.result"] == "secret-free result"


async def test_a_cancel_mid_tool_ends_every_open_span_with_error_type(autojump_clock: Any) -> None:
    rec = Recorder()
    token = CancelToken()
    started = trio.Event()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> Any:
        started.set()
        await trio.sleep_forever()

    client = create_in_process_client(
        InProcessOptions(model="m", generate=_fan_out(2), tracer_provider=rec.provider)
    )

    async def cancel_soon() -> None:
        await started.wait()
        await trio.sleep(1)
        token.cancel()

    async with (
        await _toolkit(define_tool("work", "", None, slow)) as toolkit,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(cancel_soon)
        result = await client.run("go", toolkit, cancel=token)
    assert result.status == "cancelled"
    tools = rec.named("execute_tool work")
    assert len(tools) == 2
    for t in tools:
        assert attrs_of(t)["error.type"] == "cancelled"
        assert t.status.status_code is StatusCode.ERROR
    run = rec.one("invoke_agent")
    assert attrs_of(run)["error.type"] == "cancelled"
    assert all(t.end_time <= run.end_time for t in tools)


async def test_a_run_timeout_sets_timeout_on_the_run(autojump_clock: Any) -> None:
    rec = Recorder()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> Any:
        await trio.sleep_forever()

    client = create_in_process_client(
        InProcessOptions(
            model="m", generate=_fan_out(1), tracer_provider=rec.provider, run_timeout_ms=500
        )
    )
    async with await _toolkit(define_tool("work", "", None, slow)) as toolkit:
        with pytest.raises(RunTimeout):
            await client.run("go", toolkit)
    assert attrs_of(rec.one("execute_tool work"))["error.type"] == "cancelled"
    assert attrs_of(rec.one("invoke_agent"))["error.type"] == "timeout"


async def test_tracing_off_makes_no_spans_and_no_trace_state() -> None:
    client = create_in_process_client(InProcessOptions(model="m", generate=_fan_out(1)))

    async def ok(args: dict[str, Any], ctx: ToolContext) -> Any:
        return "ok"

    async with await _toolkit(define_tool("work", "", None, ok)) as toolkit:
        result = await client.run("go", toolkit)
    assert result.trace_parent is None
    assert "trace_parent" not in result.to_json()


async def test_a_failing_model_call_sets_error_type_on_chat_and_run() -> None:
    rec = Recorder()

    async def broken(req: GenerateRequest) -> dict[str, Any]:
        raise RuntimeError("the model is down")

    client = create_in_process_client(
        InProcessOptions(model="m", generate=broken, tracer_provider=rec.provider)
    )
    with pytest.raises(GenerateError):
        await client.run("go")
    chat = rec.one("chat m")
    assert attrs_of(chat)["error.type"] == "GenerateError"
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs_of(rec.one("invoke_agent"))["error.type"] == "GenerateError"
