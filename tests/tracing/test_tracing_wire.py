"""Trace context on the wire: HTTP model requests, a suspended run resumed in another
process, and the GenAI client metrics."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_helpers import Recorder, attrs_of

from toolnexus_trio import (
    ClientOptions,
    GenerateRequest,
    InProcessOptions,
    InProcessToolCall,
    Request,
    ToolContext,
    ToolkitOptions,
    create_client,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
)
from toolnexus_trio.testing import open_fake_provider

HERE = Path(__file__).parent


async def test_a_model_request_carries_the_chat_spans_traceparent() -> None:
    rec = Recorder()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    async with open_fake_provider([{"text": "hi back"}]) as fake:
        options = ClientOptions(
            base_url=fake.base_url, style="openai", model="gpt-x", api_key="k",
            tracer_provider=rec.provider, meter_provider=meters,
        )  # fmt: skip
        async with create_client(options) as client:
            await client.run("hi")
        sent = fake.requests[0].headers
    chat = rec.one("chat gpt-x")
    a = attrs_of(chat)
    assert a["gen_ai.provider.name"] == "openai"
    assert a["server.address"] == "127.0.0.1"
    assert a["server.port"] == int(fake.base_url.rsplit(":", 1)[1].split("/")[0])
    assert a["gen_ai.usage.input_tokens"] == 10
    assert a["gen_ai.usage.output_tokens"] == 5
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert isinstance(a["gen_ai.response.id"], str)
    assert a["gen_ai.response.model"]
    ctx = chat.context
    assert sent["traceparent"][:-3] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}"
    data = reader.get_metrics_data()
    points: dict[str, Any] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = (metric.unit, list(metric.data.data_points))
    unit, tokens = points["gen_ai.client.token.usage"]
    assert unit == "{token}"
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in tokens}
    assert by_type == {"input": 10, "output": 5}
    assert tokens[0].attributes["gen_ai.operation.name"] == "chat"
    assert tokens[0].attributes["gen_ai.provider.name"] == "openai"
    assert tokens[0].attributes["gen_ai.request.model"] == "gpt-x"
    unit, durations = points["gen_ai.client.operation.duration"]
    assert unit == "s"
    assert durations[0].count == 1


async def test_without_a_provider_no_traceparent_is_sent() -> None:
    async with open_fake_provider([{"text": "hi back"}]) as fake:
        options = ClientOptions(base_url=fake.base_url, style="openai", model="m", api_key="k")
        async with create_client(options) as client:
            await client.run("hi")
        assert "traceparent" not in fake.requests[0].headers


async def test_a_suspended_run_resumed_in_another_process_links_to_it() -> None:
    rec = Recorder()

    async def generate(req: GenerateRequest) -> dict[str, Any]:
        return {"tool_calls": [InProcessToolCall(id="c1", name="approve", arguments={})]}

    async def approve(args: dict[str, Any], ctx: ToolContext) -> Any:
        return pending(Request(kind="approval", prompt="may I?"))

    client = create_in_process_client(
        InProcessOptions(model="m", generate=generate, tracer_provider=rec.provider)
    )
    tools = [define_tool("approve", "", None, approve)]
    async with await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=False)) as kit:
        result = await client.run("go", kit)
    assert result.status == "pending"
    run = rec.one("invoke_agent")
    assert attrs_of(run)["toolnexus_trio.run.status"] == "pending"
    assert "error.type" not in attrs_of(run)
    assert attrs_of(rec.one("execute_tool approve"))["toolnexus_trio.tool.pending"] is True
    saved = json.dumps(result.to_json())
    ctx = run.context
    assert json.loads(saved)["trace_parent"][:-3] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    done = await trio.run_process(
        [sys.executable, str(HERE / "resume_child.py")],
        stdin=saved.encode(), capture_stdout=True, env=env,
    )  # fmt: skip
    spans = [json.loads(line) for line in done.stdout.decode().splitlines()]
    resumed = next(s for s in spans if s["name"] == "invoke_agent")
    assert resumed["links"] == [[ctx.trace_id, ctx.span_id]]
    assert resumed["trace_id"] != ctx.trace_id  # a new trace, linked to the first
    assert {s["name"] for s in spans} >= {"invoke_agent", "execute_tool approve", "chat m"}
