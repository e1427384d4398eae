"""A child process for tests/loop/test_mcp_task_crash.py: a durable agent on a shared
store (DB: a SQLite file, or a ``postgresql://`` DSN) whose one tool call is an MCP task of the peer at URL (tests/mcp_servers/
tasks_peer.py, started by the test over streamable HTTP, so it outlives this process).

    task_crash_child.py DB URL ask ID [--pause POINT]
    task_crash_child.py DB URL recover ID

``ask`` asks ``job`` under ID durably: the model calls ``peer_slow`` once, then
answers ``finished: <its output>``. ``--pause POINT`` (a checkpoint write's kind, as in
crash_child.py, e.g. ``resume``: the task id saved) prints ``paused POINT`` there and
waits for SIGUSR1, so the test kills it exactly there. ``recover`` waits until ID's
lease has expired, then recovers it. The last stdout line is a JSON summary.
"""

from __future__ import annotations

import json
import sys

import trio
from crash_child import LEASE_MS, WAIT_S, wait_for_go
from durable_app import open_store

import toolnexus_trio.loop._checkpoint as checkpoint
from toolnexus_trio import (
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolkitOptions,
    create_in_process_client,
    open_toolkit,
)


async def generate(req: GenerateRequest) -> InProcessResponse:
    outputs = [str(m["content"]) for m in req.messages if m["role"] == "tool"]
    if not outputs:
        call = InProcessToolCall(id="t1", name="peer_slow", arguments={"label": "L"})
        return InProcessResponse(tool_calls=[call])
    return InProcessResponse(content="finished: " + "; ".join(outputs))


async def main(argv: list[str]) -> int:
    db, url, command, thread, *rest = argv
    pause_at = rest[rest.index("--pause") + 1] if "--pause" in rest else None

    async def pause(point: str) -> None:
        if point == pause_at:
            await wait_for_go(f"paused {pause_at}")

    checkpoint._pause_hook = pause
    options = ToolkitOptions(
        mcp={"mcpServers": {"peer": {"url": url}}}, builtins=BuiltinsConfig.off()
    )
    async with open_store(db) as store, open_toolkit(options) as tk:
        agent = create_in_process_client(
            InProcessOptions(
                model="m", generate=generate, store=store, durable=True, lease_ms=LEASE_MS
            )
        )
        if command == "ask":
            result = await agent.ask("job", tk, id=thread)
        else:
            with trio.fail_after(WAIT_S):
                while thread not in await agent.orphaned_runs():  # noqa: ASYNC110 - the store's clock
                    await trio.sleep(LEASE_MS / 4000)
            result = await agent.recover(thread, tk)
        print(json.dumps({"status": result.status, "text": result.text}), flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
