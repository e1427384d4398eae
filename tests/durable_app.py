"""The agent the durable-approval tests run, in the test process and in child processes.

A scripted model and one ``deploy`` tool that suspends for approval and, once
approved, appends a line to a *ledger* file: the ledger counts how many times an
approved action really ran, across every process that shares it.

Prompts: ``deploy a b c`` calls ``deploy`` for a, b and c in one turn; ``chain a b``
deploys a, then (after its result) b; anything else is answered ``re: <prompt>``.
After the tools of a turn the model answers ``finished: <their outputs, joined>``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    BuiltinsConfig,
    Client,
    ConversationStore,
    GenerateRequest,
    InMemoryConversationStore,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    PendingStore,
    PostgresConversationStore,
    Request,
    SqliteConversationStore,
    Tool,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    empty_schema,
    pending,
)

Pause = Callable[[str], Awaitable[None]]


def _deploys(prompt: str) -> list[str]:
    return prompt.split()[1:]


async def generate(req: GenerateRequest) -> InProcessResponse:
    users = [m for m in req.messages if m["role"] == "user"]
    prompt = str(users[-1]["content"]) if users else ""
    tail: list[str] = []
    for message in reversed(req.messages):
        if message["role"] != "tool":
            break
        tail.insert(0, str(message["content"]))
    words = prompt.split()
    if words and words[0] == "chain":
        done = 0
        for message in req.messages[req.messages.index(users[-1]) :]:
            if message["role"] == "tool":
                done += 1
        if done < len(words) - 1:
            name = words[1 + done]
            return InProcessResponse(
                tool_calls=[
                    InProcessToolCall(id=f"call-{name}", name="deploy", arguments={"v": name})
                ]
            )
        return InProcessResponse(content="finished: " + "; ".join(tail))
    if tail:
        return InProcessResponse(content="finished: " + "; ".join(tail))
    if words and words[0] == "deploy":
        return InProcessResponse(
            tool_calls=[
                InProcessToolCall(id=f"call-{v}", name="deploy", arguments={"v": v})
                for v in _deploys(prompt)
            ]
        )
    return InProcessResponse(content=f"re: {prompt}")


def deploy_tool(
    ledger: Path,
    *,
    expires_at: dict[str, str] | None = None,
    pause: Pause | None = None,
) -> Tool:
    """``deploy(v)``: suspends for approval, and once approved appends ``v`` to *ledger*.

    *expires_at* maps a version to its request's ``expires_at``; *pause*, when given, is
    awaited with ``"tool"`` right after the ledger line is written.
    """

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        v = args["v"]
        if ctx.answer is None:
            request = Request(
                id=f"req-{v}-{ctx.call_id}",
                kind="approval",
                prompt=f"Deploy {v}?",
                expires_at=(expires_at or {}).get(v),
            )
            return pending(request)
        async with await trio.open_file(ledger, "a") as f:
            await f.write(f"{v}\n")
            await f.flush()
        if pause is not None:
            await pause("tool")
        return ToolResult.ok(f"deployed {v}")

    return Tool("deploy", "Deploy a version", empty_schema(), ToolSource.CUSTOM, execute)


async def toolkit(ledger: Path, **kw: Any) -> Toolkit:
    return await create_toolkit(
        ToolkitOptions(extra_tools=[deploy_tool(ledger, **kw)], builtins=BuiltinsConfig.off())
    )


def client(store: ConversationStore) -> Client:
    return create_in_process_client(InProcessOptions(model="m", generate=generate, store=store))


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


@asynccontextmanager
async def open_store(where: str) -> AsyncIterator[PendingStore]:
    """``"memory"``, a ``postgresql://`` DSN, or else a SQLite file path."""
    if where == "memory":
        yield InMemoryConversationStore()
    elif where.startswith("postgresql://"):
        async with PostgresConversationStore(where) as pg:
            yield pg
    else:
        async with SqliteConversationStore(where) as sqlite:
            yield sqlite
