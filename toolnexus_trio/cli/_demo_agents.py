"""The demo's sub-agent part: a coordinator delegates to two agents at once; one is
interrupted in the middle of its tool, the other asks for approval, which a fresh
runtime on the same SQLite file answers (as another process would), once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import trio

from .._schema import empty_schema
from .._tools import Tool, ToolContext, ToolResult, ToolSource, pending
from .._wire import Answer, Request
from ..agents import AgentDef, open_agent_runtime
from ..loop import AlreadyAnswered, GenerateRequest, InProcessResponse, InProcessToolCall
from ..stores import SqliteConversationStore

_RESEARCHER = "root/coordinator.1/researcher.1"


class _Clock:
    def __init__(self) -> None:
        self.start = trio.current_time()

    def say(self, text: str) -> None:
        print(f"[{(trio.current_time() - self.start) * 1000:6.0f} ms] {text}", flush=True)


async def _model(req: GenerateRequest) -> InProcessResponse:
    tools = [m for m in req.messages if m["role"] == "tool"]
    if req.model == "coordinator":
        if tools:
            return InProcessResponse(content="; ".join(str(m["content"]) for m in tools))
        return InProcessResponse(
            tool_calls=[
                InProcessToolCall(
                    id="t1", name="task", arguments={"agent": "researcher", "prompt": "read it"}
                ),
                InProcessToolCall(
                    id="t2", name="task", arguments={"agent": "deployer", "prompt": "ship v2"}
                ),
            ]
        )
    if tools:
        return InProcessResponse(content=f"{req.model}: {tools[-1]['content']}")
    name = {"researcher": "read_everything", "deployer": "deploy"}[req.model]
    return InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name=name)])


def _registry(clock: _Clock, researching: trio.Event) -> dict[str, AgentDef]:
    async def read_everything(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        clock.say("  researcher: tool read_everything started (takes an hour)")
        researching.set()
        try:
            await trio.sleep(3600)
        except trio.Cancelled:
            clock.say("  researcher: its tool sees the cancellation and unwinds")
            raise
        return ToolResult.ok("read it all")

    async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            clock.say("  deployer: tool deploy suspends: needs approval")
            return pending(Request(kind="approval", prompt="Deploy v2?"))
        clock.say("  deployer: tool deploy re-run with the approval: deploying (once)")
        return ToolResult.ok("v2 is live")

    def tool(name: str, fn: Any) -> Tool:
        return Tool(name, name, empty_schema(), ToolSource.CUSTOM, fn)

    return {
        "coordinator": AgentDef(
            "coordinator",
            "plans",
            "You coordinate.",
            "coordinator",
            task_targets=["deployer", "researcher"],
        ),
        "deployer": AgentDef(
            "deployer", "ships", "You deploy.", "deployer", tools=[tool("deploy", deploy)]
        ),
        "researcher": AgentDef(
            "researcher",
            "reads",
            "You read.",
            "researcher",
            tools=[tool("read_everything", read_everything)],
        ),
    }


async def run_agents_demo(directory: Path | None = None) -> bool:
    """Run the sub-agent demo in *directory* (default: a temporary one); ``True`` if all
    went as shown."""
    if directory is None:
        with tempfile.TemporaryDirectory() as tmp:
            return await run_agents_demo(Path(tmp))
    clock = _Clock()
    researching = trio.Event()
    registry = _registry(clock, researching)
    db = directory / "agents.db"
    clock.say("coordinator -> task(researcher, 'read it') and task(deployer, 'ship v2'), at once")
    async with (
        SqliteConversationStore(db) as store,
        open_agent_runtime(registry, generate=_model, store=store) as runtime,
        trio.open_nursery() as nursery,
    ):

        async def interrupt() -> None:
            await researching.wait()
            clock.say(f"host: interrupt({_RESEARCHER})")
            runtime.interrupt(runtime.handle(_RESEARCHER))

        nursery.start_soon(interrupt)
        halted = await runtime.run("coordinator", "ship v2 after a look at the code")
    if halted.pending is None:
        return False
    clock.say(f"run: status={halted.status}, asks {halted.pending.prompt!r}")
    clock.say("(that runtime is gone; a fresh one opens the same SQLite file)")
    async with (
        SqliteConversationStore(db) as store,
        open_agent_runtime(registry, generate=_model, store=store) as runtime,
    ):
        clock.say("host: resume(approve)")
        done = await runtime.resume(Answer(halted.pending.id, True))
        clock.say(f"coordinator: status={done.status}: {done.text}")
        try:
            await runtime.resume(Answer(halted.pending.id, True))
        except AlreadyAnswered as exc:
            clock.say(f"host: the same approval again -> refused (AlreadyAnswered: {exc.status})")
        else:
            return False
    return done.status == "done"
