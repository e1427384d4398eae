"""``python -m toolnexus_trio demo --durable``: an approval that survives a restart.

The agent asks to deploy; the run halts pending and is saved in a SQLite file. The
client and its store are then thrown away ("the process restarts"), a fresh client
opens the same file and approves: the deploy runs once. Approving again is refused.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .._schema import empty_schema
from .._toolkit import Toolkit, ToolkitOptions, create_toolkit
from .._tools import Tool, ToolContext, ToolResult, ToolSource, pending
from .._wire import Answer, Request
from ..builtins import BuiltinsConfig
from ..loop import (
    AlreadyAnswered,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    create_in_process_client,
)
from ..stores import SqliteConversationStore


async def _generate(req: GenerateRequest) -> InProcessResponse:
    last = req.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=f"Done: {last['content']}.")
    return InProcessResponse(
        tool_calls=[InProcessToolCall(id="call_deploy", name="deploy", arguments={"version": "v2"})]
    )


async def run_durable_demo(directory: Path | None = None) -> bool:
    """Run the demo in *directory* (default: a temporary one); ``True`` if all went as shown."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="toolnexus-durable-") as tmp:
            return await run_durable_demo(Path(tmp))
    path = directory / "approvals.db"
    runs: list[str] = []

    async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        version = args["version"]
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt=f"Deploy {version} to production?"))
        runs.append(version)
        print(f"    deploy({version}) runs: deployment #{len(runs)}", flush=True)
        return ToolResult.ok(f"{version} is live")

    async def new_toolkit() -> Toolkit:
        tool = Tool("deploy", "Deploy a version", empty_schema(), ToolSource.CUSTOM, deploy)
        options = ToolkitOptions(extra_tools=[tool], builtins=BuiltinsConfig.off())
        return await create_toolkit(options)

    print(f"conversation store: SQLite file {path}", flush=True)
    print("[before the restart] user: ship v2", flush=True)
    async with SqliteConversationStore(path) as store, await new_toolkit() as toolkit:
        client = create_in_process_client(
            InProcessOptions(model="scripted", generate=_generate, store=store)
        )
        halted = await client.ask("ship v2", toolkit, id="release-42")
        assert halted.pending is not None
        request_id = halted.pending.id
        print(f"    the run halts: {halted.pending.prompt} (status={halted.status})", flush=True)
    print("[restart] the client and its store are gone; a new one opens the file", flush=True)

    async with SqliteConversationStore(path) as store, await new_toolkit() as toolkit:
        client = create_in_process_client(
            InProcessOptions(model="scripted", generate=_generate, store=store)
        )
        state = await store.get_pending("release-42")
        print(f"[after the restart] pending run found: status={state and state.status}", flush=True)
        print("    a human approves", flush=True)
        done = await client.answer("release-42", [Answer(request_id, True)], toolkit=toolkit)
        print(f"    assistant: {done.text} (status={done.status})", flush=True)
        print("    the same approval arrives again (a retried webhook)", flush=True)
        try:
            await client.answer("release-42", [Answer(request_id, True)], toolkit=toolkit)
            refused = False
        except AlreadyAnswered as exc:
            print(f"    refused: {exc}", flush=True)
            refused = True
    print(f"deploy ran {len(runs)} time(s)", flush=True)
    return refused and runs == ["v2"] and done.status == "done"
