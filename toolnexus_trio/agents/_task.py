"""The ``task {agent, prompt}`` tool (SPEC §7D "Model surface"): spawn, wake, wait and
close fused into one tool call, with reattachment by task key.

The caller's model sees only its team (sorted by name, each with its ``does``). One
call is one tool message; the child's usage is rolled up live by the runtime's
ledger. A re-invoked call with the same ``(agent, prompt)`` in the same (suspended,
then resumed) run reattaches to the child it made: a settled child gives its recorded
result, a suspended one its pending request (or is resumed inline when the call carries
the answer to it), a running one is awaited. A duplicate child is never spawned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from .. import _tracing
from .._tools import Tool, ToolContext, ToolResult, ToolSource
from .._wire import Answer
from . import _recovery
from ._escalation import ask
from ._types import Handle, SpawnError, TaskResult

if TYPE_CHECKING:
    from ._runtime import AgentRuntime

TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "the team member to delegate to"},
        "prompt": {"type": "string", "description": "the task, self-contained"},
    },
    "required": ["agent", "prompt"],
    "additionalProperties": False,
}


def team_of(rt: AgentRuntime, h: Handle) -> list[str]:
    """The caller's team: its def's ``task_targets`` that the registry knows, sorted."""
    assert h.defn is not None
    return sorted(name for name in h.defn.task_targets or () if name in rt.registry)


def task_description(rt: AgentRuntime, h: Handle) -> str:
    """The ``task`` tool's description: what it does, then the team, one line each."""
    lines = [
        "Delegate a self-contained task to a member of your team and get its final answer.",
        "Each call runs that agent on a fresh transcript; calls in one turn run in parallel.",
        "",
        "Team:",
    ]
    lines += [f"- {name}: {rt.registry[name].description}" for name in team_of(rt, h)]
    return "\n".join(lines)


def _to_tool_result(agent: str, child: Handle, result: TaskResult) -> ToolResult:
    metadata: dict[str, Any] = {
        "agent": agent,
        "handle": child.id,
        "status": result.status,
        "turns": result.turns,
        "totalTokens": result.total_tokens,
    }
    if result.limit is not None:
        metadata["limit"] = result.limit
    if result.status == "pending" and result.pending is not None:
        # A suspending child presents to its parent exactly as a suspending tool (§10).
        metadata["pending"] = result.pending
        return ToolResult(result.text or result.pending.prompt, True, metadata)
    return ToolResult(result.text, result.is_error, metadata)


def task_tool(rt: AgentRuntime, h: Handle) -> Tool:
    """The ``task`` tool of handle *h* (its def declares a team)."""
    team = team_of(rt, h)

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        agent, prompt = args["agent"], args["prompt"]
        if agent not in team:
            return ToolResult.error(
                f"unknown agent {agent!r}: your team is {', '.join(team) or '(empty)'}"
            )
        key = (agent, prompt)
        made: list[Handle] = []
        try:
            return await _delegate(rt, h, agent, prompt, key, ctx, made)
        except BaseException:
            # The call was cancelled (its caller interrupted, stopped or torn down):
            # the child it made or reattached goes with it, leaf-first, bounded.
            for child in made:
                if child.state not in ("closed", "suspended"):
                    with trio.move_on_after(rt._shutdown_ms / 1000 + 1, shield=True):
                        await rt.close(child, force=True, reason="interrupted")
            raise

    return Tool(
        name="task",
        description=task_description(rt, h),
        input_schema=TASK_SCHEMA,
        source=ToolSource.NATIVE,
        execute=execute,
    )


async def _delegate(
    rt: AgentRuntime,
    h: Handle,
    agent: str,
    prompt: str,
    key: tuple[str, str],
    ctx: ToolContext,
    made: list[Handle],
) -> ToolResult:
    """One ``task`` call: reattach by key or spawn, wake, wait, close; *made* gets the
    child as soon as there is one (for the caller's cleanup)."""
    child = h.task_children.get(key)
    if child is not None:
        rt._note(h, f"task replay → REATTACH {child.id}")
        made.append(child)
        child.trace = _tracing.current()  # its next turn's span goes under this call
        if child.state == "suspended":
            answer = ctx.answer
            if answer is not None and child.pending is not None and answer.id == child.pending.id:
                result = await rt.resume_inline(child, answer)
                declined = await _ask_again(rt, h, child, answer, result)
                if declined is not None:
                    return declined
                result = child.last_result or result
            else:
                assert child.last_result is not None
                result = child.last_result
        else:
            result = await rt.wait(child)
    else:
        durable: tuple[str, bool] | None = None
        if h.checkpointer is not None:
            # A durable tree: the child's run id, recorded before it starts; a child
            # that finished before a crash gives its answer without running again.
            found = await _recovery.durable_child(rt, h, agent, ctx.call_id)
            if isinstance(found, ToolResult):
                return found
            durable = found
        try:
            child = rt.spawn(h, agent)
        except SpawnError as exc:
            return ToolResult.error(str(exc), {"agent": agent, "limit": exc.limit})
        if durable is not None:
            child.durable_id, child.recovering = durable
            child.tree_meta = _recovery.tree_record(agent, h.durable_id)
        made.append(child)
        child.trace = _tracing.current()  # its spans go under this execute_tool span
        child.task_key = key
        h.task_children[key] = child
        woke = rt.wake(child, prompt)
        if not woke.ok:
            await rt.close(child, force=True, reason="error")
            return ToolResult.error(woke.error or "wake refused", {"agent": agent})
        result = await rt.wait(child)
    if result.status != "pending" and child.state != "closed":
        await rt.close(child, reason=_close_reason(result))
    return _to_tool_result(agent, child, result)


async def _ask_again(
    rt: AgentRuntime, h: Handle, child: Handle, answer: Answer, result: TaskResult
) -> ToolResult | None:
    """After an inline resume, a child that asks something new goes to *h*'s own
    ``wait_for`` (the one that answered the first request), as often as it asks.

    The loop would call a retried call's new request "unresolved"; here each new
    request is escalated exactly as the first one was. A decline ends the call as the
    loop ends it (``"declined/expired: <prompt>"``); the child stays suspended.
    """
    assert h.defn is not None
    while (
        h.defn.wait_for is not None
        and result.status == "pending"
        and child.state == "suspended"
        and child.pending is not None
        and child.pending.id != answer.id
    ):
        request = result.pending or child.pending
        answer = await ask(h.defn.wait_for, request) or Answer(request.id, False)
        if not answer.ok or answer.id != child.pending.id:
            return ToolResult.error(f"declined/expired: {request.prompt}")
        result = await rt.resume_inline(child, answer)
    return None


def _close_reason(result: TaskResult) -> str:
    if result.status == "incomplete":
        return "budget"
    if result.status in ("interrupted", "error"):
        return result.status
    return "closed"
