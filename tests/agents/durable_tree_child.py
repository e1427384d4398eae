"""A child process for test_durable_tree_processes.py: one agent runtime on a shared SQLite file.

    durable_tree_child.py DB LEDGER suspend [--exit-now]
    durable_tree_child.py DB LEDGER answer REQUEST_ID [--decline] [--pause taken]
    durable_tree_child.py DB LEDGER list

Each takes ``--model twice`` (the leaf deploys twice, asking each time) or ``--model
pair`` (the deputy delegates two deploys in one turn) instead of the one-deploy model.

``suspend`` runs a three-level tree (``lead`` delegates to ``deputy``, which delegates to
``deployer``, whose ``deploy`` tool asks for approval) with no ``wait_for`` anywhere: the
root comes back ``pending``. ``answer`` opens a brand-new runtime on the same file and
resumes the tree with the answer. ``list`` prints the handle table as the store has it.
``--exit-now`` ends the ``suspend`` process with ``os._exit(0)`` right after ``run()``
returned ``pending`` (as a crash would): nothing of the runtime's exit saves anything.
The last stdout line is a JSON summary; AlreadyAnswered exits 3.

The ledger file gets one line per run of the ``deploy`` tool: ``asked`` when it
suspended, ``deployed`` when it ran approved, so the test counts runs across processes.
``--pause taken`` stops right after the answer was taken (the child prints ``paused
taken`` and waits for SIGUSR1), so two answering processes can race exactly there.
"""

from __future__ import annotations

import json
import os
import signal
import sys
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


def say(summary: dict[str, Any]) -> None:
    print(json.dumps(summary), flush=True)


async def wait_for_go(message: str) -> None:
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        print(message, flush=True)
        async for _ in signals:
            return


def last_tool_text(req: GenerateRequest) -> str | None:
    last = req.messages[-1]
    return str(last["content"]) if last["role"] == "tool" else None


async def generate(req: GenerateRequest) -> InProcessResponse:
    """One scripted model per def (by its model name): delegate, then report."""
    done = last_tool_text(req)
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    if done is not None:
        return InProcessResponse(content=f"{req.model}: {done}", usage=usage)
    call = {
        "m-lead": InProcessToolCall(
            id="t-lead", name="task", arguments={"agent": "deputy", "prompt": "ship v1"}
        ),
        "m-deputy": InProcessToolCall(
            id="t-deputy", name="task", arguments={"agent": "deployer", "prompt": "deploy v1"}
        ),
        "m-deployer": InProcessToolCall(id="t-deploy", name="deploy", arguments={}),
    }[req.model]
    return InProcessResponse(tool_calls=[call], usage=usage)


async def generate_twice(req: GenerateRequest) -> InProcessResponse:
    """As :func:`generate`, but the leaf deploys twice, each deploy approved on its own."""
    if req.model != "m-deployer":
        return await generate(req)
    done = [m for m in req.messages if m["role"] == "tool"]
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    if len(done) < 2:
        call = InProcessToolCall(id=f"t-deploy-{len(done)}", name="deploy", arguments={})
        return InProcessResponse(tool_calls=[call], usage=usage)
    return InProcessResponse(content=f"m-deployer: {done[-1]['content']}", usage=usage)


async def generate_pair(req: GenerateRequest) -> InProcessResponse:
    """As :func:`generate`, but the deputy delegates two deploys in one turn: two
    suspensions of one turn, each reaching the host in turn."""
    if req.model != "m-deputy" or last_tool_text(req) is not None:
        return await generate(req)
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    calls = [
        InProcessToolCall(
            id=f"t-deputy-{n}",
            name="task",
            arguments={"agent": "deployer", "prompt": f"deploy {n}"},
        )
        for n in ("v1", "v2")
    ]
    return InProcessResponse(tool_calls=calls, usage=usage)


MODELS = {"once": generate, "twice": generate_twice, "pair": generate_pair}
"""The scripted models a child can run (``--model NAME``; ``once`` by default)."""


def registry(ledger: Path) -> dict[str, AgentDef]:
    async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            with ledger.open("a") as f:
                f.write("asked\n")
            return pending(Request(kind="approval", prompt="Deploy v1?"))
        with ledger.open("a") as f:
            f.write("deployed\n" if ctx.answer.ok else "declined\n")
        return ToolResult.ok("v1 is live" if ctx.answer.ok else "not deployed")

    tool = Tool("deploy", "Deploys v1", empty_schema(), ToolSource.CUSTOM, deploy)
    return {
        "lead": AgentDef("lead", "leads", "You lead.", "m-lead", task_targets=["deputy"]),
        "deputy": AgentDef(
            "deputy", "delegates", "You delegate.", "m-deputy", task_targets=["deployer"]
        ),
        "deployer": AgentDef("deployer", "deploys", "You deploy.", "m-deployer", tools=[tool]),
    }


async def main(argv: list[str]) -> int:
    db, ledger, command, *rest = argv
    model = MODELS[rest[rest.index("--model") + 1]] if "--model" in rest else generate
    async with (
        SqliteConversationStore(db) as store,
        open_agent_runtime(registry(Path(ledger)), generate=model, store=store) as rt,
    ):
        if command == "suspend":
            result = await rt.run("lead", "ship it")
            assert result.pending is not None, result
            path = (result.pending.data or {}).get("path")
            views = {v.id: v.state for v in rt.list() if v.id != "root"}
            say(
                {
                    "status": result.status,
                    "request": result.pending.id,
                    "path": path,
                    "states": views,
                }
            )
            if "--exit-now" in rest:
                os._exit(0)
            return 0
        if command == "answer":
            request_id = rest[0]
            if "--pause" in rest:
                durable_hook = rt.before_resume
                assert durable_hook is not None

                async def take_then_pause(answer: Answer) -> None:
                    await durable_hook(answer)
                    await wait_for_go("paused taken")

                rt.before_resume = take_then_pause
            try:
                result = await rt.resume(Answer(request_id, "--decline" not in rest))
            except AlreadyAnswered as exc:
                say({"error": "AlreadyAnswered", "status": exc.status})
                return 3
            views = {v.id: [v.state, list(v.transitions)] for v in rt.list() if v.id != "root"}
            summary = {"status": result.status, "text": result.text, "handles": views}
            if result.pending is not None:
                summary["request"] = result.pending.id
                summary["path"] = (result.pending.data or {}).get("path")
            say(summary)
            return 0
        if command == "list":
            say({"handles": {v.id: v.state for v in rt.list() if v.id != "root"}})
            return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
