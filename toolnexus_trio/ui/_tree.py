"""One agent tree's typed events (:func:`stream_tree`): the root agent's loop, a
``delegate`` tool whose ``helper`` sub-agents run in an agent runtime opened for the
run, and the continuation of a durably stored pending run (:meth:`Client.answer`)."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import attrs

from .._toolkit import Toolkit
from .._tools import Tool, ToolContext, ToolResult, ToolSource
from .._wire import Answer, Request
from ..agents import AgentDef, AgentRuntime, Budget, open_agent_runtime
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

HELPER: Final = "helper"
"""The sub-agent the ``delegate`` tool spawns."""

_SUB_AGENT: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar(
    "toolnexus_trio_ui_agent"
)
"""Which sub-agent runs in this task: set around ``spawn``, whose service task copies
the context, so the helper's hooks and approvals know their handle id."""


def _budget_dict(budget: Budget) -> dict[str, Any]:
    return {k: v for k, v in attrs.asdict(budget).items() if v is not None}


async def stream_tree(
    llm: ClientOptions,
    prompt: str,
    send: SendEvent,
    tools: Sequence[Tool] = (),
    *,
    wait_for: Callable[[str, Request], Awaitable[Answer]],
    history: Sequence[Message] | None = None,
    system_prompt: str | None = None,
    helper_budget: Budget | None = None,
    on_runtime: Callable[[AgentRuntime], None] | None = None,
    halt: bool = False,
    answer: tuple[str, dict[str, Answer]] | None = None,
) -> RunResult:
    """Run an agent tree on *prompt*: one stream of typed events for all of it.

    With *halt*, a root approval halts the run (``RunFinished`` with status
    ``pending`` and the requests in its result) instead of awaiting *wait_for*; with
    *answer* (``(id, answers)``), the run is instead the continuation of the pending run
    stored under *id* in ``llm.store``, answered once by :meth:`Client.answer`.

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

    async def ask(request: Request) -> Answer:
        box = _SUB_AGENT.get(None)
        agent = box["agent"] if box is not None else "root"
        if agent != "root":  # the tree shows who waits
            await send(AgentStateChanged(agent, "suspended"))
        await send(ApprovalRequested(agent, request))
        answer = await wait_for(agent, request)
        await send(ApprovalAnswered(agent, answer))
        if agent != "root":
            await send(AgentStateChanged(agent, "running"))
        return answer

    def sub_agent() -> str:
        box = _SUB_AGENT.get(None)
        return box["agent"] if box is not None else "?"

    async def before_tool(event: dict[str, Any]) -> None:
        agent = sub_agent()
        args = json.dumps(event["args"], separators=(",", ":"))
        await send(ToolCallStarted(agent, f"{agent}:{event['id']}", event["name"], args))

    async def after_tool(event: dict[str, Any]) -> None:
        agent = sub_agent()
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
        wait_for=ask,
        hooks=Hooks(before_tool=before_tool, after_tool=after_tool),
    )
    async with open_agent_runtime({HELPER: helper}, llm=llm) as runtime:
        if on_runtime is not None:
            on_runtime(runtime)
        toolkit = Toolkit([*tools, _delegate_tool(runtime, send)])
        options = attrs.evolve(llm, wait_for=None if halt else ask, system_prompt=system_prompt)
        async with create_client(options) as client:
            if answer is not None:  # streamed as a live run is
                id, answers = answer
                return await answer_events(client, id, answers, send, toolkit)
            return await stream_events(client, prompt, send, toolkit, history=history)


def _delegate_tool(runtime: AgentRuntime, send: SendEvent) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        box = {"agent": "?"}
        token = _SUB_AGENT.set(box)
        try:
            h = runtime.spawn(runtime.root, HELPER)
        finally:
            _SUB_AGENT.reset(token)
        box["agent"] = h.id
        await send(AgentSpawned(h.id, "root", HELPER, _budget_dict(h.budget)))
        runtime.wake(h, str(args["prompt"]))
        await send(AgentStateChanged(h.id, "running"))
        result = await runtime.wait(h)
        await send(
            AgentFinished(h.id, result.status, result.text, result.total_tokens, result.turns)
        )
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
