"""Agents: a coordinator with two sub-agents; one is interrupted, one asks for approval,
and a second process answers it.

The coordinator's model delegates two ``task`` calls at once: the researcher starts a
slow tool and the host interrupts it (its tool is cancelled where it is, and the
coordinator's model gets an error result for that call); the deployer's ``deploy``
tool asks for approval, nobody in the tree has a ``wait_for``, so the run comes back
``pending``. This process then exits. A second process (this script again, started
with ``answer``) opens a brand-new runtime on the same SQLite file and answers: the
deploy runs once, the coordinator's replayed ``task`` calls reattach to their existing
children, and a replay of the same answer is refused.
"""

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    GenerateRequest,
    InProcessResponse,
    InProcessToolCall,
    Request,
    SqliteConversationStore,
    Tool,
    ToolContext,
    ToolResult,
    ToolSource,
    empty_schema,
    pending,
)
from toolnexus_trio.agents import AgentDef, open_agent_runtime

researching = trio.Event()  # set when the researcher's slow tool is running


async def read_everything(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """A slow tool: an hour of reading, unless it is cancelled first."""
    researching.set()
    await trio.sleep(3600)
    return ToolResult.ok("read it all")


async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Asks for approval; runs once approved (``ctx.answer`` is the approval)."""
    if ctx.answer is None:
        return pending(Request(kind="approval", prompt="Deploy v2 to production?"))
    print("deploy: v2 is live (this line is printed once, by the second process)")
    return ToolResult.ok("v2 is live" if ctx.answer.ok else "not deployed")


async def model(req: GenerateRequest) -> InProcessResponse:
    """A scripted model, one script per agent (by the def's model name)."""
    tools = [m for m in req.messages if m["role"] == "tool"]
    if req.model == "coordinator-model":
        if tools:
            return InProcessResponse(content="; ".join(str(m["content"]) for m in tools))
        calls = [
            InProcessToolCall(
                id="t1", name="task", arguments={"agent": "researcher", "prompt": "read it"}
            ),
            InProcessToolCall(
                id="t2", name="task", arguments={"agent": "deployer", "prompt": "ship v2"}
            ),
        ]
        return InProcessResponse(tool_calls=calls)
    if tools:
        return InProcessResponse(content=f"{req.model}: {tools[-1]['content']}")
    name = {"researcher-model": "read_everything", "deployer-model": "deploy"}[req.model]
    return InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name=name)])


def tool(name: str, fn: Any) -> Tool:
    return Tool(name, str(fn.__doc__), empty_schema(), ToolSource.CUSTOM, fn)


REGISTRY = {
    "coordinator": AgentDef(
        "coordinator",
        "plans and delegates",
        "You coordinate.",
        "coordinator-model",
        task_targets=["deployer", "researcher"],
    ),
    "researcher": AgentDef(
        "researcher",
        "reads the code",
        "You research.",
        "researcher-model",
        tools=[tool("read_everything", read_everything)],
    ),
    "deployer": AgentDef(
        "deployer",
        "ships releases",
        "You deploy.",
        "deployer-model",
        tools=[tool("deploy", deploy)],
    ),
}


async def first_process(db: Path) -> str:
    """Run the coordinator until it needs a human; return the approval's request id."""
    async with (
        SqliteConversationStore(db) as store,
        open_agent_runtime(REGISTRY, generate=model, store=store) as runtime,
        trio.open_nursery() as nursery,
    ):

        async def interrupt_the_researcher() -> None:
            await researching.wait()
            runtime.interrupt(runtime.handle("root/coordinator.1/researcher.1"))
            print("host: interrupted the researcher in the middle of its tool")

        nursery.start_soon(interrupt_the_researcher)
        result = await runtime.run("coordinator", "ship v2 after a look at the code")
        asked = result.pending
        if asked is None:  # the script above always asks; a real model might not
            raise RuntimeError(f"the run ended {result.status}, with nothing to approve")
        print(f"coordinator: {result.status}, asks {asked.prompt!r}")
        path = (asked.data or {}).get("path", [])  # stamped by each relaying level
        print(f"  relayed by {'/'.join(path)}; this process exits now")
        return asked.id


async def second_process(db: Path, request_id: str) -> None:
    """A brand-new runtime on the same file answers the approval, once."""
    async with (
        SqliteConversationStore(db) as store,
        open_agent_runtime(REGISTRY, generate=model, store=store) as runtime,
    ):
        done = await runtime.resume(Answer(request_id, True))
        print(f"coordinator: {done.status}: {done.text}")
        try:
            await runtime.resume(Answer(request_id, True))
        except AlreadyAnswered as exc:
            print(f"replay refused: {exc.status}")
        print(json.dumps({v.id: v.state for v in runtime.list()}))


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "agents.db"
        request_id = await first_process(db)
        answer = [sys.executable, __file__, "answer", str(db), request_id]
        with trio.fail_after(60):
            second = await trio.run_process(answer, capture_stdout=True, check=True)
        print("a second process, a new runtime on the same file, answers yes:")
        print(second.stdout.decode(), end="")


if __name__ == "__main__":
    if sys.argv[1:2] == ["answer"]:
        trio.run(second_process, Path(sys.argv[2]), sys.argv[3])
    else:
        trio.run(main)
