"""The Level-1 surface (SPEC §7D): ``agent(name, does=..., ...)`` with ``run`` and ``as_tool``.

An :class:`Agent` is a definition plus its team; its registry is the transitive
closure of the team graph. ``run`` opens a runtime for one prompt; ``as_tool`` makes
the agent a tool for any toolkit (the axiom's other direction: an Agent is a Tool);
``serve`` makes it an A2A agent that remote agents delegate to.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from .._toolkit import Toolkit
from .._tools import Tool, ToolContext, ToolResult, ToolSource, pending
from .._wire import Answer
from ..a2a import DEFAULT_INPUT_TIMEOUT_MS, A2AServeConfig, A2AServing, OnTask
from ..a2a import serve as serve_a2a
from ._completion import Completion
from ._harness import Guardrail, Loop, Options, guarded_hooks
from ._runtime import AgentRuntime, open_agent_runtime
from ._types import AgentDef, Budget, Handle, OnBudget, TaskResult, WaitFor
from ._uses import tools_of

_PROMPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "the task, self-contained"}},
    "required": ["prompt"],
    "additionalProperties": False,
}


@attrs.frozen
class Agent:
    """An agent of the Level-1 surface: made by :func:`agent`.

    ``definition`` is its :class:`AgentDef`; ``team`` the agents its ``task`` tool may
    delegate to; ``guardrails`` as given (the definition's ``hooks`` hold them compiled).
    """

    definition: AgentDef
    team: tuple[Agent, ...] = ()
    guardrails: tuple[Guardrail, ...] = ()

    def loop(
        self, client_options: Options | Mapping[str, Any], toolkit: Toolkit | None = None
    ) -> Loop:
        """The agent as a plain §8 loop over *toolkit* (see :class:`Loop`); what it
        cannot honour is :func:`loop_unsupported`'s list."""
        return Loop(self, client_options, toolkit)

    @property
    def name(self) -> str:
        """The agent's name (its registry key)."""
        return self.definition.name

    def registry(self) -> dict[str, AgentDef]:
        """Every definition reachable through the team graph, by name."""
        found: dict[str, AgentDef] = {}
        stack: list[Agent] = [self]
        while stack:
            current = stack.pop()
            known = found.get(current.name)
            if known is not None:
                if known is not current.definition:
                    raise ValueError(f"two different agents are called {current.name!r}")
                continue
            found[current.name] = current.definition
            stack.extend(current.team)
        return dict(sorted(found.items()))

    async def run(self, prompt: str, **runtime_options: Any) -> TaskResult:
        """Run the agent once on *prompt* in a fresh runtime (options as
        :func:`open_agent_runtime`); a failing model raises, as only the root may."""
        async with open_agent_runtime(self.registry(), **runtime_options) as runtime:
            result = await runtime.run(self.name, prompt)
            top = runtime.root.children[-1]
            if result.status == "error" and top.error is not None:
                raise top.error
            return result

    def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        a2a: A2AServeConfig | None = None,
        on_task: OnTask | None = None,
        allow_remote: bool = False,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        input_timeout_ms: float = DEFAULT_INPUT_TIMEOUT_MS,
        **runtime_options: Any,
    ) -> A2AServing:
        """Serve the agent as an A2A agent (SPEC §7B): ``async with agent.serve(generate=
        model) as served:``, then a remote agent reads ``served.card_url``.

        The card is named after the agent and described by its ``does`` (*a2a* overrides
        them, and sets the store, version, provider and bounds as for ``Toolkit.serve``);
        its one skill is the agent. Each A2A task is one run in a fresh runtime
        (*runtime_options* as :func:`open_agent_runtime`), inside the task's cancel
        scope: ``CancelTask`` cancels the running turn and every descendant's model call
        and tool. A ``pending`` result (a §10 request nobody in the tree answers) puts
        the task in ``input-required``; the caller's next message on the task answers
        it and the same tree resumes (no answer within *input_timeout_ms*: ``failed``).
        See :func:`toolnexus_trio.a2a.serve`.
        """
        # Every task opens its own runtime: check the options now, not at the first task.
        inspect.signature(open_agent_runtime).bind({}, **runtime_options)
        if (runtime_options.get("generate") is None) == (runtime_options.get("llm") is None):
            raise ValueError("Agent.serve needs exactly one of generate= or llm=")
        return serve_a2a(
            _Served(self, runtime_options),
            host,
            port,
            a2a=a2a,
            on_task=on_task,
            allow_remote=allow_remote,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            input_timeout_ms=input_timeout_ms,
        )

    def as_tool(self, **runtime_options: Any) -> Tool:
        """The agent as a tool (``{prompt}`` in, its final text out, with metadata
        ``{agent, turns, totalTokens}``), for ``ToolkitOptions.extra_tools``. Each call
        runs in its own runtime; a pending result is a §10 suspension of the tool."""

        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            async with open_agent_runtime(self.registry(), **runtime_options) as runtime:
                result = await runtime.run(self.name, args["prompt"])
            if result.status == "pending" and result.pending is not None:
                return pending(result.pending)
            metadata = {
                "agent": self.name,
                "turns": result.turns,
                "totalTokens": result.total_tokens,
                "status": result.status,
            }
            return ToolResult(result.text, result.is_error, metadata)

        return Tool(
            name=self.name,
            description=self.definition.description,
            input_schema=_PROMPT_SCHEMA,
            source=ToolSource.NATIVE,
            execute=execute,
        )


@attrs.frozen
class _Served:
    """An :class:`Agent` with its runtime options: what the A2A server runs."""

    agent: Agent
    options: dict[str, Any]

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def description(self) -> str:
        return self.agent.definition.description

    @asynccontextmanager
    async def session(self) -> AsyncIterator[_Session]:
        async with open_agent_runtime(self.agent.registry(), **self.options) as runtime:
            yield _Session(self.agent.name, runtime)


@attrs.frozen
class _Session:
    """One served task's runtime: a run, then a resume per answered request."""

    name: str
    runtime: AgentRuntime

    async def run(self, prompt: str, /) -> TaskResult:
        result = await self.runtime.run(self.name, prompt)
        top = self.runtime.root.children[-1]
        if result.status == "error" and top.error is not None:
            raise top.error
        return result

    async def resume(self, answer: Answer, /) -> TaskResult:
        return await self.runtime.resume(answer)


def agent(
    name: str,
    *,
    does: str,
    uses: Sequence[Tool] | Mapping[str, Sequence[Tool]] | None = None,
    soul: str | None = None,
    soul_file: str | Path | None = None,
    team: Sequence[Agent] | None = None,
    budget: Budget | None = None,
    model: str | None = None,
    wait_for: WaitFor | None = None,
    on_spawn: Callable[[Handle], Any] | None = None,
    on_close: Callable[[Handle, str], Any] | None = None,
    hooks: Any = None,
    on_metric: Callable[[dict[str, Any]], None] | None = None,
    on_budget: OnBudget | None = None,
    output_type: Any = None,
    guardrails: Sequence[Guardrail] = (),
    completion: Completion | None = None,
) -> Agent:
    """An :class:`Agent`: *does* is its description (what a team lead reads), *uses* its
    tools (a list, or the peer's ``{"tools": [...]}``), *soul* (or the text of
    *soul_file*) its system prompt, *team* the agents it may delegate to with ``task``,
    *model* its model (``None``: ``"inherit"``, the runtime's), *output_type* the type
    of its result (:attr:`TaskResult.output`). *guardrails* are compiled into its
    ``before_tool`` (:func:`guarded_hooks`) and *completion* is its completion gate;
    both travel with its definition, so they hold wherever it runs, as a delegated
    child included. The other options are :class:`AgentDef`'s.
    """
    if soul is not None and soul_file is not None:
        raise ValueError("give soul or soul_file, not both")
    if soul_file is not None:
        soul = Path(soul_file).read_text(encoding="utf-8")
    members = tuple(team or ())
    tools = tools_of(uses)
    rails = tuple(guardrails)
    if rails:
        hooks = guarded_hooks(rails, hooks)
    if completion is not None and not isinstance(completion, Completion):
        raise TypeError(f"completion must be a Completion, not {type(completion).__name__}")
    definition = AgentDef(
        name=name,
        description=does,
        system_prompt=soul or "",
        model=model or "inherit",
        budget=budget,
        tools=tools,
        wait_for=wait_for,
        on_spawn=on_spawn,
        on_close=on_close,
        task_targets=[m.name for m in members] or None,
        hooks=hooks,
        on_metric=on_metric,
        on_budget=on_budget,
        output_type=output_type,
        completion=completion,
    )
    return Agent(definition, members, rails)
