"""``agents.current_handle``: the handle whose turn runs in the calling task, seen by its
tools and hooks (one def serves many handles), also for a handle restored from a store;
``None`` in the host."""

from __future__ import annotations

from typing import Any

from toolnexus_trio import Answer, InMemoryConversationStore, Request, ToolContext, pending, tool
from toolnexus_trio.agents import AgentDef, current_handle, open_agent_runtime
from toolnexus_trio.loop import GenerateRequest, Hooks, InProcessResponse, InProcessToolCall

seen: list[tuple[str, str | None]] = []


def _who() -> str | None:
    h = current_handle()
    return h.id if h is not None else None


@tool
async def where(ctx: ToolContext) -> str:
    """Say which agent runs this call, once a person approves."""
    if ctx.answer is None:
        seen.append(("ask", _who()))
        return pending(Request(kind="approval", prompt="go?"))
    seen.append(("tool", _who()))
    return "here"


async def _after(event: dict[str, Any]) -> None:
    seen.append(("hook", _who()))


async def _model(request: GenerateRequest) -> InProcessResponse:
    if request.turn == 0:
        return InProcessResponse(content="", tool_calls=[InProcessToolCall("c1", "where", {})])
    return InProcessResponse(content="done")


def _registry() -> dict[str, AgentDef]:
    worker = AgentDef(
        "worker", "says where it runs", "", "m", tools=[where], hooks=Hooks(after_tool=_after)
    )
    return {"worker": worker}


async def test_tools_and_hooks_know_their_handle_also_once_restored() -> None:
    seen.clear()
    store = InMemoryConversationStore()
    assert current_handle() is None  # the host
    async with open_agent_runtime(_registry(), generate=_model, store=store) as rt:
        a, b = rt.spawn(rt.root, "worker"), rt.spawn(rt.root, "worker")
        rt.wake(a, "go")
        rt.wake(b, "go")
        pending_a, pending_b = await rt.wait(a), await rt.wait(b)
        assert pending_a.pending is not None and pending_b.pending is not None
        assert sorted(seen) == [("ask", "root/worker.1"), ("ask", "root/worker.2")]
    seen.clear()
    # Another runtime on the store restores both; each resumed turn still knows its own.
    async with open_agent_runtime(_registry(), generate=_model, store=store) as rt:
        assert (await rt.resume(Answer(pending_b.pending.id, True))).status == "done"
        assert (await rt.resume(Answer(pending_a.pending.id, True))).status == "done"
    assert seen == [
        ("tool", "root/worker.2"),
        ("hook", "root/worker.2"),
        ("tool", "root/worker.1"),
        ("hook", "root/worker.1"),
    ]
    assert current_handle() is None
