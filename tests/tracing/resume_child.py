"""A second process: resume a pending run from its saved JSON, with its own exporter,
and print the spans it made (name, trace id, span id, links) as JSON lines."""

from __future__ import annotations

import json
import sys
from typing import Any

import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from toolnexus_trio import (
    Answer,
    GenerateRequest,
    InProcessOptions,
    RunResult,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
)


async def generate(req: GenerateRequest) -> dict[str, Any]:
    return {"content": "approved and done"}


async def approve(args: dict[str, Any], ctx: ToolContext) -> Any:
    return "approved" if ctx.answer is not None else "no answer"


async def main() -> None:
    saved = json.loads(sys.stdin.read())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = create_in_process_client(
        InProcessOptions(model="m", generate=generate, tracer_provider=provider)
    )
    result = RunResult.from_json(saved)
    tools = [define_tool("approve", "", None, approve)]
    async with await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=False)) as kit:
        answer = Answer(id=result.pending.id, ok=True) if result.pending else None
        assert answer is not None
        done = await client.resume(result, [answer], toolkit=kit)
    assert done.status == "done", done.status
    for s in exporter.get_finished_spans():
        print(json.dumps({
            "name": s.name,
            "trace_id": s.context.trace_id,
            "links": [[link.context.trace_id, link.context.span_id] for link in s.links],
        }))  # fmt: skip


trio.run(main)
