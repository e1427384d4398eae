"""The agent the crash-durable tests run, in the test process and in child processes.

A scripted model and two tools that append a line to a *ledger* file each time they
run (the ledger counts real executions across every process sharing it):
``charge(v)`` (not idempotent) and ``lookup(v)`` (``ToolHints(idempotent=True)``).

The prompt ``job`` runs three model steps: ``charge a`` and ``lookup b`` in one turn,
then ``charge c``, then the answer ``finished: <the three tool outputs>``. ``steps N``
runs N turns of one ``lookup`` each, then answers ``done N``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    BuiltinsConfig,
    Client,
    ConversationStore,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Tool,
    ToolContext,
    ToolHints,
    Toolkit,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    empty_schema,
)

Pause = Callable[[str], Awaitable[None]]


def _tool_outputs(req: GenerateRequest) -> list[str]:
    return [str(m["content"]) for m in req.messages if m["role"] == "tool"]


def _call(call_id: str, name: str, v: str) -> InProcessToolCall:
    return InProcessToolCall(id=call_id, name=name, arguments={"v": v})


async def generate(req: GenerateRequest) -> InProcessResponse:
    users = [m for m in req.messages if m["role"] == "user"]
    words = str(users[-1]["content"]).split() if users else []
    outputs = _tool_outputs(req)
    if words == ["job"]:
        if not outputs:
            return InProcessResponse(
                tool_calls=[_call("c1", "charge", "a"), _call("c2", "lookup", "b")]
            )
        if len(outputs) == 2:
            return InProcessResponse(tool_calls=[_call("c3", "charge", "c")])
        return InProcessResponse(content="finished: " + "; ".join(outputs))
    if len(words) == 2 and words[0] == "steps":
        total = int(words[1])
        if len(outputs) < total:
            n = len(outputs)
            return InProcessResponse(tool_calls=[_call(f"s{n}", "lookup", f"s{n}")])
        return InProcessResponse(content=f"done {total}")
    return InProcessResponse(content="re: " + " ".join(words))


def ledger_tool(
    name: str, verb: str, ledger: Path, *, idempotent: bool, pause: Pause | None = None
) -> Tool:
    """A tool that appends ``"<name> <v>"`` to *ledger*, then awaits *pause* with
    ``"tool:<name> <v>"`` (so a test can kill the process inside the tool)."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        v = args["v"]
        async with await trio.open_file(ledger, "a") as f:
            await f.write(f"{name} {v}\n")
            await f.flush()
        if pause is not None:
            await pause(f"tool:{name} {v}")
        return ToolResult.ok(f"{verb} {v}")

    return Tool(
        name,
        f"{verb} a value",
        empty_schema(),
        ToolSource.CUSTOM,
        execute,
        hints=ToolHints(idempotent=idempotent),
    )


async def toolkit(ledger: Path, pause: Pause | None = None) -> Toolkit:
    tools = [
        ledger_tool("charge", "charged", ledger, idempotent=False, pause=pause),
        ledger_tool("lookup", "found", ledger, idempotent=True, pause=pause),
    ]
    return await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off()))


def client(store: ConversationStore, *, lease_ms: int = 30_000, **kw: Any) -> Client:
    return create_in_process_client(
        InProcessOptions(
            model="m", generate=generate, store=store, durable=True, lease_ms=lease_ms, **kw
        )
    )


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []
