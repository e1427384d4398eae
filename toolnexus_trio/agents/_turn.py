"""One turn of a handle: the shared loop (:class:`~toolnexus_trio.Client`) under the
runtime's gates and live budgets.

The seam is the loop's :class:`~toolnexus_trio.loop._turns.TurnSource`: each handle's
client gets the model's source wrapped in :class:`_GatedTurns`, which holds the turn gate
only around the model call and checks the token budget before the call and after the
response; each tool is wrapped to check the tool-call budget before it runs. A stop
cancels the handle's :class:`CancelToken`, which the loop has bound to the run's cancel
scope: the model call or tools in flight end at once and the loop returns its balanced
transcript with ``status="cancelled"``, which becomes ``"incomplete"`` with the limit.
``max_wall_ms`` is a watchdog in the turn's nursery that cancels the same token at the
chain's earliest deadline.
"""

from __future__ import annotations

import contextvars
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _tracing
from .._cancel import CancelToken
from .._groups import collapse_groups
from .._toolkit import Toolkit
from .._tools import Tool, ToolContext, ToolHints, ToolResult
from .._wire import Answer, Request
from ..loop._client import Client
from ..loop._output import output_json
from ..loop._results import GenerateRequest, InProcessOptions, RunError, RunResult, TranslateResult
from ..loop._turns import Emit, InProcessTurns, TranslateCall, Turn, TurnSource
from ..models._source import HttpTurns
from . import _budget, _recovery
from ._completion import LIMIT_COMPLETION
from ._escalation import ask as _ask
from ._escalation import stamp
from ._harness import gated_turn
from ._task import task_tool
from ._types import (
    LIMIT_MAX_TURNS,
    LIMIT_MAX_WALL_MS,
    BudgetInfo,
    Handle,
    TaskResult,
)

if TYPE_CHECKING:
    from ._runtime import AgentRuntime

DEFAULT_MAX_TURNS = 50
"""Model calls per wake when no ``max_turns`` budget is set (a loop must end somewhere)."""

_CLIENTS_KEPT = 256
"""The most shared loop clients a runtime keeps (one per def and turn allowance)."""


def _as_wait_for(wait_for: Any) -> Callable[[Request], Awaitable[Answer]] | None:
    """The loop's ``wait_for`` (an async function) for a def's plain-or-async one."""
    if wait_for is None:
        return None

    async def ask(request: Request) -> Answer:
        answer = await _ask(wait_for, request)
        # No answer is a refusal, as the loop reads it.
        return answer if answer is not None else Answer(request.id, False)

    return ask


_TURN_HANDLE: contextvars.ContextVar[Handle] = contextvars.ContextVar("toolnexus_trio_agent")
"""The handle whose turn runs in this task (set by :meth:`Turns._drive`): one loop client
serves every handle of a def, and its gated source meters the handle it runs for."""


def current_handle() -> Handle | None:
    """The handle whose turn runs in the calling task (its tools, hooks and ``wait_for``
    included), or ``None`` outside any agent's turn (the host, a root agent's own loop).

    One def's hooks serve all its handles: this tells them which one they run for, also
    for a handle restored from a store."""
    return _TURN_HANDLE.get(None)


class _GatedTurns:
    """A :class:`TurnSource` that gates and meters another one for the handle whose turn
    is running (:data:`_TURN_HANDLE`)."""

    def __init__(self, inner: TurnSource, turns: Turns) -> None:
        self._inner = inner
        self._turns = turns
        self.trace_attributes = _tracing.source_attributes(inner)  # the chat spans'

    def tools_for(self, toolkit: Toolkit | None) -> list[dict[str, Any]]:
        return self._inner.tools_for(toolkit)

    async def turn(self, request: GenerateRequest, emit: Emit | None) -> Turn:
        h = _TURN_HANDLE.get()
        await self._turns.check_tokens(h, overspent=False)
        gate = self._turns.rt.turn_gate
        try:
            # A free slot is taken at once; only a full gate parks (the model call that
            # follows checkpoints anyway). Released on any exit, cancellation included.
            gate.acquire_nowait()
        except trio.WouldBlock:
            await gate.acquire()
        try:
            produced = await self._inner.turn(request, emit)
        finally:
            gate.release()
        h.turns += 1
        _budget.add_tokens(h, produced.usage["total_tokens"])
        if produced.response.tool_calls:
            # More work would follow this response: stop here if it overspent a pool.
            await self._turns.check_tokens(h, overspent=True)
        return produced

    async def translate(self, call: TranslateCall) -> TranslateResult:
        return await self._inner.translate(call)

    async def aclose(self) -> None:
        """The runtime owns the inner sources."""


class Turns:
    """Runs the turns of the runtime's handles (one instance per runtime)."""

    def __init__(self, rt: AgentRuntime) -> None:
        self.rt = rt
        # One loop client per (def, turn allowance), shared by the def's handles: a
        # client holds no run state, and building one per handle was a fan-out's cost.
        self._clients: dict[tuple[str, int], Client] = {}
        self._no_tools = Toolkit([])  # the toolkit of every def without tools or team

    # -- budget checks (live chain walk) ----------------------------------------------

    async def check_tokens(self, h: Handle, *, overspent: bool) -> None:
        hit = _budget.tokens_exhausted(h, overspent=overspent)
        if hit is not None and hit[0] not in h.extended:
            limit, holder = hit
            await self._limit(h, limit, holder.tokens, holder.budget.max_tokens or 0)

    async def check_tool_call(self, h: Handle) -> None:
        hit = _budget.tool_calls_exhausted(h)
        if hit is not None and hit[0] not in h.extended:
            limit, holder = hit
            await self._limit(h, limit, holder.tool_calls, holder.budget.max_tool_calls or 0)
        _budget.add_tool_call(h)

    async def _limit(self, h: Handle, limit: str, used: float, cap: float) -> None:
        """A limit is reached: ask ``on_budget``; stop (cancel the run) unless extended."""
        assert h.defn is not None
        verdict: Any = "stop"
        if h.defn.on_budget is not None:
            verdict = h.defn.on_budget(BudgetInfo(h.id, limit, used, cap))
            if inspect.isawaitable(verdict):
                verdict = await verdict
        if verdict == "suspend":
            verdict = await self._ask_to_extend(h, limit, used, cap)
            if verdict == "suspend":
                # No interpreter on the chain: the handle suspends on the approval and
                # the request travels up like a tool's (the root returns pending).
                h.budget_ask = Request(
                    kind="approval",
                    prompt=f"{h.id} reached {limit} ({used:g} of {cap:g}): continue?",
                    data={"limit": limit},
                )
        if verdict == "extend":
            h.extended.add(limit)
            return
        self.rt._stop_tree(h, "limit", limit)
        await trio.lowlevel.checkpoint()  # the run's scope is cancelled: raises Cancelled

    async def _ask_to_extend(self, h: Handle, limit: str, used: float, cap: float) -> str:
        """``on_budget`` said "suspend": an approval through the nearest ``wait_for``."""
        for node in _budget.chain(h):
            assert node.defn is not None
            if node.defn.wait_for is not None:
                request = Request(
                    kind="approval",
                    prompt=f"{h.id} reached {limit} ({used:g} of {cap:g}): continue?",
                    data={"path": h.id.split("/"), "limit": limit},
                )
                answer = await _ask(node.defn.wait_for, request)
                return "extend" if answer is not None and answer.ok else "stop"
        return "suspend"

    # -- the client and the toolkit of a handle -------------------------------------------

    def _max_turns(self, h: Handle, already: int = 0) -> int:
        cap = h.budget.max_turns
        if cap is None:
            return already + DEFAULT_MAX_TURNS
        return already + max(0, cap - h.turns)

    def client(self, h: Handle, max_turns: int) -> Client:
        assert h.defn is not None
        key = (h.defn.name, max_turns)
        client = self._clients.get(key)
        if client is None:
            if len(self._clients) >= _CLIENTS_KEPT:
                self._clients.clear()  # bounded: max_turns budgets make many allowances
            client = self._clients[key] = self._new_client(h, max_turns)
        return client

    def _new_client(self, h: Handle, max_turns: int) -> Client:
        rt = self.rt
        defn = h.defn
        assert defn is not None
        # §8 seams: def over runtime, each field on its own, forwarded as they are.
        hooks = defn.hooks if defn.hooks is not None else rt._hooks
        on_metric = defn.on_metric if defn.on_metric is not None else rt._on_metric
        source: TurnSource
        if rt._generate is not None:
            options: Any = InProcessOptions(
                model=defn.model,
                generate=rt._generate,
                wait_for=_as_wait_for(defn.wait_for),
                system_prompt=defn.system_prompt or None,
                max_turns=max_turns,
                hooks=hooks,
                on_metric=on_metric,
                output_type=defn.output_type,
            )
            if rt.checkpoints is not None:  # a durable tree's runs (agents/_recovery.py)
                options = _recovery.durable_options(rt, defn, options)
            source = InProcessTurns(options)
        else:
            assert rt._llm is not None
            model = rt._llm.model if defn.model in ("", "inherit") else defn.model
            options = attrs.evolve(
                rt._llm,
                model=model,
                system_prompt=defn.system_prompt or None,
                max_turns=max_turns,
                hooks=hooks,
                on_metric=on_metric,
                wait_for=_as_wait_for(defn.wait_for),
                store=None,
                output_type=defn.output_type,  # the def's, also when a restored run resumes
            )
            if rt.checkpoints is not None:  # a durable tree's runs (agents/_recovery.py)
                options = _recovery.durable_options(rt, defn, options)
            shared = rt._sources.get(model)
            if shared is None:
                shared = rt._sources[model] = HttpTurns(attrs.evolve(rt._llm, model=model))
            source = shared
        return Client(options, _GatedTurns(source, self))

    def toolkit(self, h: Handle) -> Toolkit:
        # Built once per handle: its def (tools, team) never changes.
        if h.toolkit is None:
            assert h.defn is not None
            if not h.defn.tools and not h.defn.task_targets:
                return self._no_tools
            tools = [self._metered(h, t) for t in h.defn.tools or ()]
            if h.defn.task_targets:
                task = task_tool(self.rt, h)
                if self.rt.checkpoints is not None:
                    # In a durable tree a task call run again finds the child it
                    # recorded (agents/_recovery.py): a recovery re-runs it, never
                    # reports it in doubt.
                    task = attrs.evolve(task, hints=ToolHints(idempotent=True))
                tools.append(self._metered(h, task))
            h.toolkit = Toolkit(tools)
        toolkit: Toolkit = h.toolkit
        return toolkit

    def _metered(self, h: Handle, tool: Tool) -> Tool:
        inner = tool.execute

        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            await self.check_tool_call(h)
            return await inner(args, ctx)

        return attrs.evolve(tool, execute=execute)

    # -- turns --------------------------------------------------------------------------

    async def fresh(self, h: Handle, text: str) -> None:
        """A wake's turn: a new run of the loop on *text* over the stored transcript."""

        async def body(token: CancelToken) -> RunResult | None:
            assert h.defn is not None
            if not h.spawn_hook_done:
                h.spawn_hook_done = True
                if h.defn.on_spawn is not None:
                    out = h.defn.on_spawn(h)
                    if inspect.isawaitable(out):
                        await out
            max_turns = self._max_turns(h)
            if max_turns <= 0:
                h.stop_reason, h.stop_limit = "limit", LIMIT_MAX_TURNS
                return None
            await self.check_tokens(h, overspent=False)  # live walk before the turn
            history = await self.rt.load(h.id)
            if h.defn.completion is not None:  # the gate reaches children via the registry
                return await gated_turn(self, h, text, history, token)
            client = self.client(h, max_turns)
            if _recovery.durable(self.rt, h):
                # The durable run keeps its own thread under its run id.
                return await _recovery.durable_turn(
                    self.rt, h, client, text, self.toolkit(h), token
                )
            return await client.run(text, self.toolkit(h), history=history, cancel=token)

        await self._drive(h, body)

    async def resumed(self, h: Handle, answer: Answer) -> None:
        """The halted run of suspended *h* goes on with *answer* (SPEC §10 resume)."""
        halted: RunResult | None = h.pending_run
        h.pending = h.pending_run = None
        asked, h.budget_ask = h.budget_ask, None
        if asked is not None:
            await self._after_budget_answer(h, asked, halted, answer)
            return
        assert halted is not None

        async def body(token: CancelToken) -> RunResult | None:
            client = self.client(h, self._max_turns(h, halted.turns))

            # resuspend: a call still waiting (a child that asks again, or a sibling
            # suspension of the halted turn not answered yet) keeps this level pending
            # on it, to be escalated like the first request (SPEC §10 first-in-order).
            async def resume() -> RunResult:
                return await client.resume(
                    halted,
                    {answer.id: answer},
                    toolkit=self.toolkit(h),
                    cancel=token,
                    resuspend=True,
                )

            assert h.defn is not None
            if h.defn.completion is not None:  # an approval does not get a run past the gate
                return await gated_turn(self, h, "", None, token, first=resume)
            return await resume()

        await self._drive(h, body)

    async def _after_budget_answer(
        self, h: Handle, asked: Request, halted: RunResult | None, answer: Answer
    ) -> None:
        """The answer to an on_budget "suspend": go on past the limit, or stop there."""
        limit = str((asked.data or {}).get("limit", ""))

        async def body(token: CancelToken) -> RunResult | None:
            if not answer.ok:
                h.stop_reason, h.stop_limit = "limit", limit
                return None
            h.extended.add(limit)
            history = halted.messages if halted is not None else await self.rt.load(h.id)
            client = self.client(h, self._max_turns(h))
            note = f"The budget limit {limit} was extended; continue the task."
            return await client.run(note, self.toolkit(h), history=history, cancel=token)

        await self._drive(h, body)

    async def _drive(
        self, h: Handle, body: Callable[[CancelToken], Awaitable[RunResult | None]]
    ) -> None:
        # The turn's invoke_agent span; a child made by `task` is parented on the tool
        # call that made it (its service task runs in the runtime's nursery).
        tracer = _tracing.tracer(getattr(self.rt._llm, "tracer_provider", None))
        if tracer is None:
            return await self._drive_turn(h, body)
        with _tracing.agent_span(tracer, h.defn.name if h.defn else "", h.id, h.trace) as live:
            await self._drive_turn(h, body)
            _tracing.end_agent(live, h.last_result)
        return None

    async def _drive_turn(
        self, h: Handle, body: Callable[[CancelToken], Awaitable[RunResult | None]]
    ) -> None:
        token = h.token
        assert token is not None
        run: RunResult | None = None
        error: Exception | None = None
        deadline = _budget.wall_deadline(h)
        # The handle's turns run in its own service task, one at a time: this task's
        # context names the handle for the shared client's gated source.
        _TURN_HANDLE.set(h)
        try:
            if deadline < math.inf:
                # The nursery only hosts the watchdog: its caller expects the run's error.
                with collapse_groups():
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._watchdog, h, deadline)
                        try:
                            run = await self._guarded(h, token, body)
                        finally:
                            nursery.cancel_scope.cancel()
            else:
                run = await body(token)  # _guarded, inlined (the common turn)
                if token.is_cancelled and h.stop_reason is None:
                    h.stop_reason = "interrupt"
        except Exception as exc:
            error = exc
        if h.stop_reason is not None:
            # The stop cancelled the descendants' turns too: the waiters hear of it only
            # once every one of them has unwound (their tools' processes reaped).
            await self.rt._quiesce(h)
        result, restore, save = self._outcome(h, run, error)
        if save is not None:
            await self.rt.keep(h.id, save)
        await self.rt._settle(h, result, restore_drain=restore)

    async def _guarded(
        self,
        h: Handle,
        token: CancelToken,
        body: Callable[[CancelToken], Awaitable[RunResult | None]],
    ) -> RunResult | None:
        # No scope of our own: the loop binds the token to its run's scope, and a token
        # cancelled before that (during the store read) ends the run before any call.
        run = await body(token)
        if token.is_cancelled and h.stop_reason is None:
            h.stop_reason = "interrupt"
        return run

    async def _watchdog(self, h: Handle, deadline: float) -> None:
        await trio.sleep_until(deadline)
        self.rt._stop_tree(h, "limit", LIMIT_MAX_WALL_MS)

    def _outcome(
        self, h: Handle, run: RunResult | None, error: Exception | None
    ) -> tuple[TaskResult, bool, list[Any] | None]:
        """(the result, whether the drained inbox goes back, the transcript to save)."""
        rt = self.rt
        if error is not None:
            h.error = error
            partial = error.result if isinstance(error, RunError) else None
            text = f"error: {error}"
            return rt._result(h, text, "error"), False, partial.messages if partial else None
        h.error = None
        if (run is None or run.status == "cancelled") and h.budget_ask is not None:
            h.pending = stamp(h.budget_ask, h)
            h.pending_run = run
            result = TaskResult(
                h.pending.prompt,
                True,
                "pending",
                pending=h.pending,
                turns=h.turns,
                total_tokens=h.tokens,
                own_tokens=h.own_tokens,
            )
            return result, False, None
        if run is None or run.status == "cancelled":
            if h.stop_limit is not None:
                limit = h.stop_limit
                text = f"incomplete: budget exhausted ({limit})"
                if run is not None and run.text:
                    text += f"; partial: {run.text}"
                messages = run.messages if run is not None else None
                return rt._result(h, text, "incomplete", limit), False, messages
            if h.stop_reason == "close":
                return rt._result(h, "closed while running", "closed"), True, None
            return rt._result(h, "interrupted", "interrupted"), True, None
        if run.status == "pending":
            assert run.pending is not None
            h.pending = stamp(run.pending, h)
            h.pending_run = run
            # Rewind: the stored transcript stays the pre-turn checkpoint.
            result = TaskResult(
                run.text,
                True,
                "pending",
                pending=h.pending,
                turns=h.turns,
                total_tokens=h.tokens,
                own_tokens=h.own_tokens,
            )
            return result, False, None
        if run.status == "incomplete":
            limit = run.limit or LIMIT_MAX_TURNS
            if limit == LIMIT_COMPLETION:  # the text is the gate's own message
                return rt._result(h, run.text, "incomplete", limit), False, run.messages
            text = f"incomplete: budget exhausted ({limit})"
            if run.text:
                text += f"; partial: {run.text}"
            return rt._result(h, text, "incomplete", limit), False, run.messages
        if run.output is not None:
            # A typed result: the value, and its JSON as the text a parent's task reads.
            text = output_json(run.output)
            typed = attrs.evolve(rt._result(h, text, "done"), output=run.output)
            return typed, False, run.messages
        return rt._result(h, run.text, "done"), False, run.messages
