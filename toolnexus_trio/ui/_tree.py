"""One agent tree's typed events (:func:`stream_tree`): the root agent's loop, a
``delegate`` tool whose ``helper`` sub-agents run in an agent runtime opened for the
run, and the continuation of a durably stored pending run (:meth:`Client.answer`); with
a store for the tree, a sub-agent's approval suspends the whole tree there and the
continuation resumes it, in this process or another."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import attrs

from .._toolkit import Toolkit
from .._tools import Tool, ToolContext, ToolResult, ToolSource, pending
from .._wire import Answer, Request
from ..agents import (
    AgentDef,
    AgentRuntime,
    Budget,
    Handle,
    TaskResult,
    current_handle,
    open_agent_runtime,
)
from ..loop._events import (
    AgentFinished,
    AgentSpawned,
    AgentStateChanged,
    ApprovalAnswered,
    ApprovalRequested,
    SendEvent,
    ToolCallFinished,
    ToolCallStarted,
    answer_events,
    stream_events,
)
from ..loop._results import Hooks, Message, RunResult
from ..models import ClientOptions, create_client
from ..stores._base import PendingStore

HELPER: Final = "helper"
"""The sub-agent the ``delegate`` tool spawns."""


def _budget_dict(budget: Budget) -> dict[str, Any]:
    return {k: v for k, v in attrs.asdict(budget).items() if v is not None}


def _agent() -> str:
    """The sub-agent whose turn runs in this task (its tools, hooks, approvals), else
    ``root``."""
    h = current_handle()
    return h.id if h is not None else "root"


async def stream_tree(
    llm: ClientOptions,
    prompt: str,
    send: SendEvent,
    tools: Sequence[Tool] = (),
    *,
    wait_for: Callable[[str, Request], Awaitable[Answer]] | None = None,
    history: Sequence[Message] | None = None,
    system_prompt: str | None = None,
    helper_budget: Budget | None = None,
    on_runtime: Callable[[AgentRuntime], None] | None = None,
    halt: bool = False,
    answer: tuple[str, dict[str, Answer]] | None = None,
    tree_store: PendingStore | None = None,
) -> RunResult:
    """Run an agent tree on *prompt*: one stream of typed events for all of it.

    With *halt*, a root approval halts the run (``RunFinished`` with status
    ``pending`` and the requests in its result) instead of awaiting *wait_for*; with
    *answer* (``(id, answers)``), the run is instead the continuation of the pending run
    stored under *id* in ``llm.store``, answered once by :meth:`Client.answer` and
    streamed as a live run is. With *halt* and *tree_store* (one per conversation: the
    runtime keeps its tree there), a sub-agent's approval halts too: the sub-agent
    suspends, its ``delegate`` call returns its request (``data.path`` names it), the
    root halts on it, and the continuation resumes the tree from *tree_store* and
    answers the sub-agent (its take-once record is taken too). *wait_for* is needed
    unless both are given.

    The root agent (*llm*, *tools* and a ``delegate`` tool) runs the loop
    (:func:`~toolnexus_trio.loop.stream_events`); each ``delegate`` call spawns a
    ``helper`` sub-agent (the same tools, *helper_budget*) in an agent runtime opened for
    this run. Every event of the tree goes to *send*, awaited in the task where it
    happens: the root's, and the helpers' ``AgentSpawned``, ``AgentStateChanged``
    (``running``, ``suspended`` while asking), ``AgentFinished`` and their tool calls
    (ids prefixed with the helper's id). A tool's §10 request, anywhere in the tree, is
    sent as :class:`ApprovalRequested`, then answered by ``wait_for(agent id, request)``
    (then :class:`ApprovalAnswered`). *on_runtime* is told the runtime once it is open (its
    ``interrupt`` stops one helper). Cancelling the caller's scope ends the whole tree.
    """
    durable_tree = halt and tree_store is not None
    if wait_for is None and not durable_tree:
        raise ValueError("stream_tree needs wait_for= unless halt=True with a tree_store")

    async def ask(request: Request) -> Answer:
        agent = _agent()
        if agent != "root":  # the tree shows who waits
            await send(AgentStateChanged(agent, "suspended"))
        await send(ApprovalRequested(agent, request))
        assert wait_for is not None
        answer = await wait_for(agent, request)
        await send(ApprovalAnswered(agent, answer))
        if agent != "root":
            await send(AgentStateChanged(agent, "running"))
        return answer

    async def before_tool(event: dict[str, Any]) -> None:
        agent = _agent()
        args = json.dumps(event["args"], separators=(",", ":"))
        await send(ToolCallStarted(agent, f"{agent}:{event['id']}", event["name"], args))

    async def after_tool(event: dict[str, Any]) -> None:
        agent = _agent()
        result: ToolResult = event["result"]
        outcome = "error" if result.is_error else "result"
        call = f"{agent}:{event['id']}"
        await send(ToolCallFinished(agent, call, event["name"], result.output, outcome))

    helper = AgentDef(
        name=HELPER,
        description="a helper that does one self-contained task with the same tools",
        system_prompt="Do the task you are given and answer with the result.",
        model="inherit",
        budget=helper_budget or Budget(max_turns=20, max_tool_calls=50),
        tools=list(tools),
        # In a durable tree the helper suspends on an approval (the tree halts).
        wait_for=None if durable_tree else ask,
        hooks=Hooks(before_tool=before_tool, after_tool=after_tool),
    )
    store = tree_store if durable_tree else None
    async with open_agent_runtime({HELPER: helper}, llm=llm, store=store) as runtime:
        if durable_tree and answer is None:
            # A new prompt: the helpers a halted run left (their approvals never
            # answered: the conversation moved on) are closed, their records superseded.
            for h in list(runtime.root.children):
                await runtime.close(h)
        if on_runtime is not None:
            on_runtime(runtime)
        toolkit = Toolkit([*tools, _delegate_tool(runtime, send)])
        options = attrs.evolve(llm, wait_for=None if halt else ask, system_prompt=system_prompt)
        async with create_client(options) as client:
            if answer is not None:  # streamed as a live run is
                id, answers = answer
                result = await answer_events(client, id, answers, send, toolkit)
            else:
                result = await stream_events(client, prompt, send, toolkit, history=history)
        if durable_tree and result.status != "pending":
            # The run is over: a helper still open is one no answer will reach (its
            # approval declined, so its call never ran again): the stored tree lets it go.
            for h in list(runtime.root.children):
                await runtime.close(h)
        return result


def _suspended_on(runtime: AgentRuntime, request_id: str) -> Handle | None:
    return next(
        (
            h
            for h in runtime.root.children
            if h.state == "suspended" and h.pending is not None and h.pending.id == request_id
        ),
        None,
    )


def _delegate_tool(runtime: AgentRuntime, send: SendEvent) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result: TaskResult
        if ctx.answer is not None:
            # The continuation of a durable tree: the helper this call left suspended
            # (restored from the store) is answered; the runtime takes its record once.
            found = _suspended_on(runtime, ctx.answer.id)
            if found is None:
                return ToolResult.error(f"no sub-agent waits on {ctx.answer.id!r} any more")
            h = found
            await send(AgentSpawned(h.id, "root", HELPER, _budget_dict(h.budget)))
            await send(AgentStateChanged(h.id, "running"))
            result = await runtime.resume(ctx.answer)
        else:
            h = runtime.spawn(runtime.root, HELPER)
            await send(AgentSpawned(h.id, "root", HELPER, _budget_dict(h.budget)))
            runtime.wake(h, str(args["prompt"]))
            await send(AgentStateChanged(h.id, "running"))
            result = await runtime.wait(h)
        if result.status == "pending" and result.pending is not None:
            # Only in a durable tree (else the helper asks through wait_for): the tree
            # is saved; the root halts on the helper's own request.
            await send(AgentStateChanged(h.id, "suspended"))
            return pending(result.pending)
        await send(
            AgentFinished(h.id, result.status, result.text, result.total_tokens, result.turns)
        )
        await runtime.close(h)  # its task is over: the tree (and a stored one) lets it go
        return ToolResult(result.text, result.is_error or result.status != "done")

    return Tool(
        name="delegate",
        description="Give a self-contained task to a helper agent (same tools) and get its "
        "answer. Calls in one turn run in parallel.",
        input_schema={
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "the task"}},
            "required": ["prompt"],
            "additionalProperties": False,
        },
        source=ToolSource.CUSTOM,
        execute=execute,
    )
