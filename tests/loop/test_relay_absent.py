"""SPEC §10 relay addendum: "No relay tool declared ⇒ not one observable difference".

One scenario that touches every path the relay feature changes (a turn of concurrent
calls with suspensions resolved by ``wait_for``, a declined one, a durable halt and its
``resume``, the stream's events, every metric event and the Prometheus text, the JSON
of each result, the adapters' declarations, a ``translate``) is recorded as one JSON
document and compared with ``tests/fixtures/relay/no_relay_golden.json``, which was
written by this very scenario on the code *before* relay tools existed (commit
da2c8c3, exported with ``git archive`` and put first on ``PYTHONPATH``). Regenerate it
only that way, never from code that has relay tools.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio
import trio.testing

from toolnexus_trio import (
    Answer,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
)

GOLDEN = Path(__file__).parent.parent / "fixtures" / "relay" / "no_relay_golden.json"


async def _add(args: dict[str, Any], ctx: ToolContext) -> str:
    await trio.sleep(0.25)  # virtual time: gives the metrics a duration
    return str(args["a"] + args["b"])


async def _deploy(args: dict[str, Any], ctx: ToolContext) -> str | ToolResult:
    # Different virtual durations: the two suspensions surface in a fixed order.
    await trio.sleep(0.1 if args["env"] == "prod" else 0.2)
    if ctx.answer is None:
        return pending(
            Request(id=f"req-{args['env']}", kind="approval", prompt=f"deploy to {args['env']}?")
        )
    return f"deployed {args['env']}"


async def _boom(args: dict[str, Any], ctx: ToolContext) -> str:
    raise RuntimeError("boom")


def _tools() -> list[Any]:
    number = {"type": "integer"}
    return [
        define_tool(
            "add",
            "Add two integers.",
            {"type": "object", "properties": {"a": number, "b": number}, "required": ["a", "b"]},
            _add,
        ),
        define_tool(
            "deploy",
            "Deploy after an approval.",
            {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
            _deploy,
        ),
        define_tool("boom", "Always fails.", None, _boom),
    ]


def _calls() -> list[InProcessToolCall]:
    return [
        InProcessToolCall("c1", "add", {"a": 2, "b": 3}),
        InProcessToolCall("c2", "deploy", '{"env": "prod"}'),
        InProcessToolCall("c3", "deploy", {"env": "dev"}),
        InProcessToolCall("c4", "boom", {}),
        InProcessToolCall("c5", "nope", "{not json"),
    ]


async def _generate(request: GenerateRequest) -> InProcessResponse:
    if request.messages[-1]["role"] == "tool":
        tail = [m["content"] for m in request.messages if m["role"] == "tool"]
        return InProcessResponse(content="summary: " + " | ".join(tail))
    return InProcessResponse(content="working", tool_calls=_calls())


def _plain(value: Any) -> Any:
    """A JSON-safe copy: results as their JSON, requests as their wire form."""
    if hasattr(value, "to_json"):
        return _plain(value.to_json())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cancel"}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


async def _scenario() -> dict[str, Any]:
    out: dict[str, Any] = {}
    toolkit = await create_toolkit(ToolkitOptions(extra_tools=_tools(), builtins=False))
    with_builtins = await create_toolkit(ToolkitOptions(extra_tools=_tools()))
    out["declared"] = {
        "openai": with_builtins.to_openai(),
        "anthropic": with_builtins.to_anthropic(),
        "gemini": with_builtins.to_gemini(),
    }

    # In process: wait_for approves prod and declines dev, streamed.
    metrics: list[dict[str, Any]] = []

    async def wait_for(request: Request) -> Answer:
        await trio.sleep(0.5)
        return Answer(request.id, request.id == "req-prod", reason=None)

    client = create_in_process_client(
        InProcessOptions(model="m", generate=_generate, wait_for=wait_for, on_metric=metrics.append)
    )
    async with client.stream("go", toolkit) as channel:
        out["stream"] = [_plain(event) async for event in channel]
    out["run"] = _plain(await client.run("go again", toolkit))
    # Concurrent calls finish in a scheduling-dependent order: compare them sorted.
    out["metric_events"] = sorted(metrics, key=lambda e: json.dumps(e, sort_keys=True))
    out["prometheus"] = client.metrics()

    # Durable: no wait_for, the run halts; resume approves one and declines the other.
    durable_metrics: list[dict[str, Any]] = []
    durable = create_in_process_client(
        InProcessOptions(model="m", generate=_generate, on_metric=durable_metrics.append)
    )
    halted = await durable.run("go", toolkit)
    out["halted"] = _plain(halted)
    async with durable.stream("go", toolkit) as channel:
        out["durable_stream"] = [_plain(event) async for event in channel]
    resumed = await durable.resume(
        halted, [Answer("req-prod", True), Answer("req-dev", False, reason="declined")]
    )
    out["resumed"] = _plain(resumed)
    out["durable_metric_events"] = sorted(
        durable_metrics, key=lambda e: json.dumps(e, sort_keys=True)
    )

    # Hooks: before_tool changes arguments, after_tool replaces results (one of them
    # with a suspension-bearing result, on a resume too).
    def before_tool(event: dict[str, Any]) -> Any:
        if event["name"] == "add":
            return {"args": {"a": 10, "b": 20}}
        return None

    def after_tool(event: dict[str, Any]) -> Any:
        if event["name"] in ("boom", "deploy"):
            late = Request(id=f"late-{event['id']}", kind="approval", prompt="late")
            return {"result": pending(late)}
        return None

    hooked_metrics: list[dict[str, Any]] = []
    hooked = create_in_process_client(
        InProcessOptions(
            model="m",
            generate=_generate,
            hooks={"before_tool": before_tool, "after_tool": after_tool},
            on_metric=hooked_metrics.append,
        )
    )
    halted = await hooked.run("go", toolkit)
    out["hooked_halted"] = _plain(halted)
    out["hooked_resumed"] = _plain(
        await hooked.resume(halted, [Answer("req-prod", True), Answer("req-dev", True)])
    )
    out["hooked_metric_events"] = sorted(
        hooked_metrics, key=lambda e: json.dumps(e, sort_keys=True)
    )

    # translate: declared, never executed.
    async def one_call(request: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(tool_calls=[InProcessToolCall("t1", "add", {"a": 1, "b": 1})])

    translator = create_in_process_client(InProcessOptions(model="m", generate=one_call))
    translated = await translator.translate([{"role": "user", "content": "hi"}], toolkit=toolkit)
    out["translate"] = {
        "text": translated.text,
        "tool_calls": _plain(list(translated.tool_calls)),
        "finish_reason": translated.finish_reason,
    }
    return out


async def test_no_relay_tool_is_byte_identical_to_before_relay_existed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    document = json.dumps(await _scenario(), indent=1, sort_keys=True, default=repr)
    if os.environ.get("TOOLNEXUS_WRITE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(document + "\n")
    assert document + "\n" == GOLDEN.read_text()
