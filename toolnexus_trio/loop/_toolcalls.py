"""One turn's tool calls: run concurrently in the turn's nursery, recorded in call order.
This module is long because every path a call can take (hooks, ordering, suspension,
``wait_for``, resume, cancel, metrics) ends in one place that records it.

:class:`ToolCalls` is the part of :class:`~toolnexus_trio.Client` that executes the tool
calls of one model message (hooks, ``concurrency_safe`` ordering, §10 suspension and
``wait_for``, resume, a durable run's per-call checkpoints) and reports metrics. The
loop that asks the model is in :mod:`toolnexus_trio.loop._client`.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import _tracing
from .._cancel import CancelToken
from .._relay import RELAY_KIND, relay_call, relay_request, relay_result
from .._runctx import current_resume
from .._toolkit import Toolkit
from .._tools import (
    Tool,
    ToolContext,
    ToolResult,
    ToolSource,
    describe_exception,
    error_result,
    pending,
    pending_of,
)
from .._wire import Answer, Request
from ._gate import _Gate, _gate_for, _is_relay, _raw_arguments, _relay_source
from ._metrics import PrometheusRegistry
from ._output import bounded_retry
from ._parts import PartLedger
from ._records import RunStatus, SuspendedCall, ToolCallRecord
from ._results import HookFn, Hooks, InProcessOptions, Message

if TYPE_CHECKING:
    # The HTTP client's options: the models family sits above the loop.
    from ..models import ClientOptions
    from ._checkpoint import Checkpointer
    from ._output import OutputRun

logger = logging.getLogger("toolnexus_trio")

_REGISTRY_EVENTS = frozenset({"llm", "tool", "run", "sample", "attempt"})


@attrs.define
class _Call:
    id: str
    name: str
    args: Any
    arguments_json: str
    error: str | None = None


@attrs.define
class _Run:
    toolkit: Toolkit | None
    messages: list[Message]
    records: list[ToolCallRecord] = attrs.field(factory=list)
    usage: dict[str, int] = attrs.field(
        factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )
    turns: int = 0
    # The run's cost so far (issue 38): None once a call of it had no price.
    cost: float | None = 0.0
    text: str = ""
    status: RunStatus = "done"
    limit: str | None = None
    suspended: list[SuspendedCall] = attrs.field(factory=list)
    emit: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    # Set when a call of the current turn relayed (SPEC §10 relay addendum): only then
    # does the turn gather its relay calls, so a run without relay tools never looks.
    relayed: bool = False
    output: OutputRun | None = None  # a run with an output_type (loop/_output.py)
    tool_retries: dict[str, int] = attrs.field(factory=dict)  # RetryTool uses, per tool
    parts: PartLedger = attrs.field(factory=PartLedger)
    # The model the last turn was sent to (a before_llm hook may override it per turn):
    # what RunResult.model and the run metric report. None until a turn is sent.
    model: str | None = None
    # A durable run's checkpointer (loop/_checkpoint.py); None: nothing is written.
    checkpoint: Checkpointer | None = None
    # The run's OpenTelemetry tracer (None: tracing off) and content capture.
    tracer: Any = None
    capture: bool = False


async def _call_hook(fn: HookFn, event: dict[str, Any]) -> Any:
    out = fn(event)
    if inspect.isawaitable(out):
        out = await out
    return out


@attrs.define  # not frozen: a frozen attrs __init__ costs about 2.5x per call
class _Outcome:
    result: ToolResult
    args: Any


_SOURCE_LABEL: dict[ToolSource, str] = {source: source.value for source in ToolSource}


@attrs.define
class _Meter:
    """Per-call metric state: one ``tool`` event per execution, or one for the call."""

    started: float
    source: str = "unknown"
    metered: bool = False
    ctx: ToolContext | None = None  # the execution's, for its declared cancelled_result


class ToolCalls:
    """Tool execution and metrics for :class:`~toolnexus_trio.Client` (a mixin)."""

    options: InProcessOptions | ClientOptions
    _hooks: Hooks
    _registry: PrometheusRegistry

    # -- one turn -----------------------------------------------------------

    async def _turn(
        self,
        run: _Run,
        calls: list[_Call],
        turn: int,
        text: str,
        known: Sequence[_Outcome | None] | None = None,
    ) -> None:
        # *known*: the outcomes a recovered run already has (those calls do not run).
        token = CancelToken()
        outcomes: list[_Outcome | None] = [None] * len(calls) if known is None else list(known)
        gate = _gate_for(run.toolkit, [c.name for c in calls])
        try:
            # Inside the try: a cancel while these events wait for the consumer still
            # leaves every call with its tool message.
            if run.emit is not None:
                if text:
                    await run.emit({"type": "text", "delta": text})
                for c in calls:
                    await run.emit(
                        {"type": "tool_call", "id": c.id, "name": c.name, "args": c.args,
                         "cancel": token}
                    )  # fmt: skip
            async with trio.open_nursery() as nursery:
                # The turn's token *is* this nursery's cancel scope.
                token.attach(nursery.cancel_scope)
                checkpoint = run.checkpoint
                direct = self._direct_tools(run, gate) if checkpoint is None else {}
                for i, call in enumerate(calls):
                    if outcomes[i] is not None:
                        if gate is not None:
                            gate.done[i].set()
                        continue
                    found = direct.get(call.name) if call.error is None else None
                    if found is not None:
                        nursery.start_soon(self._direct_call, run, call, found, i, token, outcomes)
                    elif checkpoint is not None:
                        nursery.start_soon(
                            self._checkpointed_call, run, call, i, turn, token, gate, outcomes
                        )
                    else:
                        nursery.start_soon(
                            self._call_task, run, call, i, turn, token, gate, outcomes
                        )
            if run.relayed:
                run.relayed = False
                await self._relay_turn(run, calls, outcomes, turn, token)
        finally:
            # Runs on every exit, a run cancel or timeout included: each call gets its
            # tool message so the transcript stays balanced.
            self._record_turn(run, calls, outcomes)
        if run.emit is not None:
            for c, outcome in zip(calls, outcomes, strict=True):
                assert outcome is not None
                await run.emit(
                    {"type": "tool_result", "id": c.id, "name": c.name,
                     "output": outcome.result.output, "is_error": outcome.result.is_error}
                )  # fmt: skip

    def _record_turn(self, run: _Run, calls: list[_Call], outcomes: list[_Outcome | None]) -> None:
        # _record_and_message inlined, the appends bound once: a fan-out's 1,000 calls
        # pass here in one go.
        records, messages = run.records, run.messages
        add_record, add_message = records.append, messages.append
        for i, call in enumerate(calls):
            outcome = outcomes[i]
            if outcome is None:
                outcome = outcomes[i] = _Outcome(ToolResult.error("cancelled"), call.args)
            result = outcome.result
            if result.metadata is not None:  # pending_of's own first test, without a call
                if result.metadata.get("retry") is True:
                    result = outcome.result = bounded_retry(
                        run.toolkit, run.tool_retries, call.name, result
                    )
                request = pending_of(result)
                if request is not None:
                    run.suspended.append(
                        SuspendedCall(call.id, call.name, dict(outcome.args), request,
                                      len(messages), len(records))
                    )  # fmt: skip
            output = result.output
            add_record(
                ToolCallRecord(call.id, call.name, outcome.args, output, result.is_error,
                               result.metadata)
            )  # fmt: skip
            add_message({"role": "tool", "tool_call_id": call.id, "content": output})
            if result.parts:  # beside the transcript, never in it
                run.parts.take(call.id, result.parts, self.options)

    def _direct_tools(self, run: _Run, gate: _Gate | None) -> Mapping[str, Tool]:
        """The toolkit's tools, when this turn's calls may take :meth:`_direct_call`:
        no tool hook, no gate, no per-call timeout (each would need its own step)."""
        toolkit = run.toolkit
        hooks = self._hooks
        if (
            toolkit is None
            or gate is not None
            or hooks.before_tool is not None
            or hooks.after_tool is not None
            or self.options.tool_timeout_ms > 0
        ):
            return {}
        return toolkit._current()

    async def _direct_call(
        self,
        run: _Run,
        call: _Call,
        tool: Tool,
        index: int,
        token: CancelToken,
        outcomes: list[_Outcome | None],
    ) -> None:
        """:meth:`_call_task` for a call that needs no hook, gate or timeout, in one
        coroutine per call instead of five (the fan-out's hot path).

        The same steps and results: validate, run under the turn's scope, contain an
        exception, meter once, then a suspension takes :meth:`_suspended` as usual.
        """
        # No _Meter here (one object fewer per in-flight call): locals, and a meter
        # only for a call that suspends and is answered (its re-run meters itself).
        with _tracing.tool_span(run.tracer, call, run.capture) as live:
            source = _SOURCE_LABEL[tool.source]
            started = math.nan
            metered = False
            result: ToolResult | None = None
            ctx: ToolContext | None = None
            try:
                args = call.args
                result = tool._invalid(args)
                if result is None:
                    started = trio.current_time()
                    try:
                        await trio.lowlevel.checkpoint_if_cancelled()
                        execute, native = tool._direct()
                        value = await execute(args, ctx := ToolContext(token, call.id))
                        result = tool._value_result(value, native)
                    except Exception as exc:
                        result = error_result(exc)
                metered = True
                self._metric_tool(call.name, result, source, started)
                request = pending_of(result)
                if request is not None:
                    meter = _Meter(started, source, metered=True)
                    result = await self._suspended(run, call, args, result, request, token, meter)
                outcomes[index] = _Outcome(result, args)
                if live is not _tracing.NOOP:
                    _tracing.end_tool(live, result, run.capture)
            except* Exception as group:
                # As in _call_task: a tool's own nursery that failed while being cancelled.
                outcomes[index] = _Outcome(ToolResult.error(describe_exception(group)), call.args)
            finally:
                if outcomes[index] is None and ctx is not None and ctx.cancelled_result is not None:
                    outcomes[index] = _Outcome(ctx.cancelled_result, call.args)  # see ToolContext
                if not metered:
                    self._metric_tool(call.name, ToolResult.error("cancelled"), source, started)

    async def _checkpointed_call(
        self,
        run: _Run,
        call: _Call,
        index: int,
        turn: int,
        token: CancelToken,
        gate: _Gate | None,
        outcomes: list[_Outcome | None],
    ) -> None:
        """:meth:`_call_task`, then its result written to the durable run's store
        before the turn can end (a cancelled call writes nothing: it is in doubt)."""
        checkpoint = run.checkpoint
        assert checkpoint is not None
        try:
            if gate is not None:  # its turn first: a call waiting at the gate has not started
                await gate.wait_turn(index)
            await checkpoint.tool_started(index)
            await trio.lowlevel.checkpoint_if_cancelled()  # a fenced-off write stops here
            # The tool (an MCP task) may save a resume token into this call's checkpoint.
            reset = current_resume.set(checkpoint.resume_point(index))
            try:
                await self._call_task(run, call, index, turn, token, None, outcomes)
            finally:
                current_resume.reset(reset)
        finally:
            if gate is not None:
                gate.done[index].set()
        await checkpoint.tool_done(index, outcomes[index])

    async def _call_task(
        self,
        run: _Run,
        call: _Call,
        index: int,
        turn: int,
        token: CancelToken,
        gate: _Gate | None,
        outcomes: list[_Outcome | None],
    ) -> None:
        # No clock read here: _execute stamps the tool's start; a call that never got
        # there (cancelled at its gate or hook) is reported with 0 ms.
        with _tracing.tool_span(run.tracer, call, run.capture) as live:
            meter = _Meter(math.nan)
            try:
                if gate is not None:
                    await gate.wait_turn(index)
                outcomes[index] = await self._run_call(run, call, turn, token, meter)
            except* Exception as group:
                # Only a tool whose own nursery failed while being cancelled gets here (any
                # other exception is already a result); the Cancelled part propagates.
                outcomes[index] = _Outcome(ToolResult.error(describe_exception(group)), call.args)
            finally:
                if gate is not None:
                    gate.done[index].set()
                if not meter.metered:
                    outcome = outcomes[index]
                    final = outcome.result if outcome is not None else ToolResult.error("cancelled")
                    self._metric_tool(call.name, final, meter.source, meter.started)
                if outcomes[index] is None and meter.ctx is not None and meter.ctx.cancelled_result:
                    outcomes[index] = _Outcome(meter.ctx.cancelled_result, call.args)  # ToolContext
            finished = outcomes[index]
            if live is not _tracing.NOOP and finished is not None:
                _tracing.end_tool(live, finished.result, run.capture)

    async def _run_call(
        self, run: _Run, call: _Call, turn: int, token: CancelToken, meter: _Meter
    ) -> _Outcome:
        hooks = self._hooks
        args = call.args
        if call.error is not None:
            return _Outcome(ToolResult.error(f"{call.error} (tool '{call.name}')"), args)
        short_circuit: ToolResult | None = None
        if hooks.before_tool is not None:
            event = {"name": call.name, "args": args, "id": call.id, "turn": turn, "cancel": token}
            try:
                change = await _call_hook(hooks.before_tool, event)
            except Exception as exc:
                return _Outcome(ToolResult.error(f"before_tool hook failed: {exc}"), args)
            if isinstance(change, Mapping):
                if "result" in change:
                    if not isinstance(change["result"], ToolResult):
                        # Fail closed: a guard that meant to deny must not let the tool run.
                        kind = type(change["result"]).__name__
                        message = f"before_tool hook returned a {kind} result, not a ToolResult"
                        return _Outcome(ToolResult.error(message), args)
                    short_circuit = change["result"]
                elif "args" in change:
                    if not isinstance(change["args"], dict):
                        kind = type(change["args"]).__name__
                        message = f"before_tool hook returned {kind} args, not a dict"
                        return _Outcome(ToolResult.error(message), args)
                    args = change["args"]
        if short_circuit is not None and pending_of(short_circuit) is None:
            return _Outcome(short_circuit, args)
        ctx = ToolContext(cancel=token, call_id=call.id, timeout_ms=self.options.tool_timeout_ms)
        result = short_circuit or await self._execute(run, call.name, args, ctx, meter)
        request = pending_of(result)
        if request is not None:
            result = await self._suspended(run, call, args, result, request, token, meter)
            if pending_of(result) is not None:  # still suspended: no after_tool yet
                return _Outcome(result, args)
        if self._hooks.after_tool is not None:  # no coroutine per call without the hook
            result = await self._after_tool(call, args, result, turn, token)
        return _Outcome(result, args)

    async def _suspended(
        self,
        run: _Run,
        call: _Call,
        args: dict[str, Any],
        result: ToolResult,
        request: Request,
        token: CancelToken,
        meter: _Meter,
    ) -> ToolResult:
        """A call whose tool suspended on *request* (SPEC §10).

        A relay call is gathered with the turn's other relay calls once every call is
        done; without ``wait_for`` the run halts on the request; with it the call is
        answered and re-run. A result still pending afterwards is a relay call's.
        """
        if _is_relay(run.toolkit, call.name, request):
            run.relayed = True
            return result
        if self.options.wait_for is None:
            if run.emit is not None:
                await run.emit({"type": "pending", "request": request})
            return result
        result = await self._resolve(run, call, args, request, token, meter)
        if self._relays(run, call.name, result):
            # A guard approved a relay call, which now relays with the turn's others.
            run.relayed = True
        return result

    async def _execute(
        self, run: _Run, name: str, args: dict[str, Any], ctx: ToolContext, meter: _Meter
    ) -> ToolResult:
        meter.started = trio.current_time()  # the tool's own time, not the gate's wait
        meter.ctx = ctx
        toolkit = run.toolkit
        found = toolkit.get(name) if toolkit is not None else None
        if found is None:
            result = ToolResult.error(f"Unknown tool: {name}")
        else:
            meter.source = _SOURCE_LABEL[found.source]  # Enum.value is a slow descriptor
            result = await found._call(args, ctx, own_scope=False)
        meter.metered = True
        self._metric_tool(name, result, meter.source, meter.started)
        return result

    async def _resolve(
        self,
        run: _Run,
        call: _Call,
        args: dict[str, Any],
        request: Request,
        token: CancelToken,
        meter: _Meter,
    ) -> ToolResult:
        assert self.options.wait_for is not None
        if run.emit is not None:
            await run.emit({"type": "pending", "request": request})
        try:
            answer: object = await self.options.wait_for(request)
        except Exception as exc:
            return ToolResult.error(f"wait_for failed: {exc}")
        if answer is not None and not isinstance(answer, Answer):
            kind = type(answer).__name__
            return ToolResult.error(f"wait_for returned {kind}, not an Answer")
        return await self._answered(run, call.id, call.name, args, request, answer, token, meter)

    async def _answered(
        self,
        run: _Run,
        call_id: str,
        name: str,
        args: dict[str, Any],
        request: Request,
        answer: Answer | None,
        token: CancelToken,
        meter: _Meter,
        resuspend: bool = False,
    ) -> ToolResult:
        relay = _relay_source(run.toolkit, name)
        if relay and request.kind == RELAY_KIND:
            # Nothing to re-run: the host ran the call, its answer holds the result.
            return relay_result(request, answer, call_id)
        if answer is None or not answer.ok:
            return ToolResult.error(f"declined/expired: {request.prompt}")
        # A relay call a guard suspended (an approval) is run again without that answer:
        # it then relays, and the host's answer to the relay is its result.
        ctx = ToolContext(
            cancel=token,
            call_id=call_id,
            timeout_ms=self.options.tool_timeout_ms,
            answer=None if relay else answer,
        )
        retried = await self._execute(run, name, args, ctx, meter)
        again = pending_of(retried)
        if again is not None:
            if relay and again.kind == RELAY_KIND:
                return retried
            if resuspend and again.id != request.id:
                # Answered, the call asks something new (an agent's child asking again):
                # it waits for that answer; the same request again is still unresolved.
                return retried
            return ToolResult.error(f"unresolved: {request.prompt}")
        return retried

    @staticmethod
    def _relays(run: _Run, name: str, result: ToolResult | None) -> bool:
        request = pending_of(result) if result is not None else None
        return request is not None and _is_relay(run.toolkit, name, request)

    async def _relay_turn(
        self,
        run: _Run,
        calls: list[_Call],
        outcomes: list[_Outcome | None],
        turn: int,
        token: CancelToken,
    ) -> None:
        """One request for all the turn's relay calls, in call order (SPEC §10 relay).

        Without ``wait_for`` each relay call's placeholder carries that request, so the
        run halts on it (or on an earlier suspension: the first-in-order rule holds) and
        :meth:`resume` answers every relay call with one :class:`Answer`. With
        ``wait_for``, it is called once and each call gets its result from the answer.
        It runs after the turn's nursery, so a relay call waits for nobody: a
        ``concurrency_safe=False`` call between two relay calls cannot deadlock.
        """
        relayed: list[int] = []
        for i, (call, outcome) in enumerate(zip(calls, outcomes, strict=True)):
            if outcome is None:
                continue
            request = pending_of(outcome.result)
            if request is not None and _is_relay(run.toolkit, call.name, request):
                relayed.append(i)
        if not relayed:
            return
        entries = []
        for i in relayed:
            call, outcome = calls[i], outcomes[i]
            assert outcome is not None
            # The raw text only when a before_tool hook did not replace the arguments
            # (and there is one: a resumed call may not find its own).
            raw = call.arguments_json if outcome.args is call.args and call.arguments_json else None
            entries.append(relay_call(call.id, call.name, outcome.args, raw))
        request = relay_request(entries)
        placeholder = pending(request)
        for i in relayed:
            outcome = outcomes[i]
            assert outcome is not None
            outcome.result = placeholder
        if run.emit is not None:
            await run.emit({"type": "pending", "request": request})
        wait_for = self.options.wait_for
        if wait_for is None:
            return
        answer: object = None
        failed: ToolResult | None = None
        # The turn's token cancels this wait as it cancels the turn's calls.
        with trio.CancelScope() as scope, token.bound(scope):
            try:
                answer = await wait_for(request)
            except Exception as exc:
                failed = ToolResult.error(f"wait_for failed: {exc}")
        if scope.cancelled_caught:
            failed = ToolResult.error("cancelled")
        elif answer is not None and not isinstance(answer, Answer):
            failed = ToolResult.error(f"wait_for returned {type(answer).__name__}, not an Answer")
        for i in relayed:
            call, outcome = calls[i], outcomes[i]
            assert outcome is not None
            if failed is not None:
                outcome.result = failed
                continue
            assert answer is None or isinstance(answer, Answer)
            result = relay_result(request, answer, call.id)
            if self._hooks.after_tool is not None:
                result = await self._after_tool(call, outcome.args, result, turn, token)
            outcome.result = result

    async def _after_tool(
        self, call: _Call, args: Any, result: ToolResult, turn: int, token: CancelToken
    ) -> ToolResult:
        if self._hooks.after_tool is None:
            return result
        event = {
            "name": call.name,
            "args": args,
            "result": result,
            "id": call.id,
            "turn": turn,
            "cancel": token,
        }
        try:
            change = await _call_hook(self._hooks.after_tool, event)
        except Exception as exc:
            return ToolResult.error(f"after_tool hook failed: {exc}")
        replaced = change.get("result") if isinstance(change, Mapping) else None
        return replaced if isinstance(replaced, ToolResult) else result

    async def _resume_turn(
        self,
        run: _Run,
        suspended: Sequence[SuspendedCall],
        answers: Mapping[str, Answer],
        resuspend: bool = False,
    ) -> None:
        token = CancelToken()
        results: list[ToolResult | None] = [None] * len(suspended)
        gate = _gate_for(run.toolkit, [s.name for s in suspended])

        async def redo(i: int, s: SuspendedCall) -> None:
            # The re-run's own execute_tool span, under the resumed run's span.
            traced = _Call(s.id, s.name, s.args, "")
            with _tracing.tool_span(run.tracer, traced, run.capture) as live:
                await attempt(i, s)
                done = results[i]
                if live is not _tracing.NOOP and done is not None:
                    _tracing.end_tool(live, done, run.capture)

        async def attempt(i: int, s: SuspendedCall) -> None:
            meter = _Meter(trio.current_time())
            try:
                if gate is not None:
                    await gate.wait_turn(i)
                answer = answers.get(s.request.id)
                if answer is None:
                    if resuspend:
                        # Not answered yet: it still waits, nothing re-runs (first-in-order).
                        results[i] = _still_waiting(run, s)
                        return
                    results[i] = ToolResult.error(f"unresolved: {s.request.prompt}")
                    return
                result = await self._answered(
                    run, s.id, s.name, s.args, s.request, answer, token, meter, resuspend
                )
                if self._relays(run, s.name, result):  # an approved relay call relays now
                    results[i] = result
                    return
                call = _Call(s.id, s.name, s.args, "")
                results[i] = await self._after_tool(call, s.args, result, run.turns - 1, token)
            except* Exception as group:
                results[i] = ToolResult.error(describe_exception(group))
            finally:
                if results[i] is None and meter.ctx is not None:  # cancelled: see ToolContext
                    results[i] = meter.ctx.cancelled_result
                if gate is not None:
                    gate.done[i].set()

        try:
            async with trio.open_nursery() as nursery:
                token.attach(nursery.cancel_scope)
                for i, s in enumerate(suspended):
                    nursery.start_soon(redo, i, s)
            relayed = [i for i, r in enumerate(results) if self._relays(run, suspended[i].name, r)]
            if relayed:
                await self._relay_resumed(run, suspended, results, relayed, token)
        finally:
            for s, result in zip(suspended, results, strict=True):
                final = result or ToolResult.error("cancelled")
                record, message = _record_and_message(s.id, s.name, s.args, final)
                run.records[s.record_index] = record
                run.messages[s.message_index] = message
                if final.parts:
                    run.parts.take(s.id, final.parts, self.options)
                request = pending_of(final)
                if request is not None and (resuspend or _is_relay(run.toolkit, s.name, request)):
                    run.suspended.append(
                        SuspendedCall(s.id, s.name, s.args, request, s.message_index,
                                      s.record_index)
                    )  # fmt: skip
        if run.emit is not None:  # a streamed resume: the answered calls' results first
            for s, result in zip(suspended, results, strict=True):
                final = result or ToolResult.error("cancelled")
                await run.emit(
                    {"type": "tool_result", "id": s.id, "name": s.name,
                     "output": final.output, "is_error": final.is_error}
                )  # fmt: skip

    async def _relay_resumed(
        self,
        run: _Run,
        suspended: Sequence[SuspendedCall],
        results: list[ToolResult | None],
        relayed: list[int],
        token: CancelToken,
    ) -> None:
        """The relay calls a resume's approvals let through: one request, as in a turn."""
        calls: list[_Call] = []
        outcomes: list[_Outcome | None] = []
        for i in relayed:
            s = suspended[i]
            raw = _raw_arguments(run.messages, s.message_index, s.id)
            calls.append(_Call(s.id, s.name, s.args, raw or ""))
            outcomes.append(_Outcome(results[i] or ToolResult.error("cancelled"), s.args))
        await self._relay_turn(run, calls, outcomes, run.turns - 1, token)
        for i, outcome in zip(relayed, outcomes, strict=True):
            assert outcome is not None
            results[i] = outcome.result

    # -- metrics ------------------------------------------------------------

    def _metric(self, event: dict[str, Any]) -> None:
        # The client's own registry sees every llm/tool/run event, on_metric or not.
        if event["event"] in _REGISTRY_EVENTS:
            try:
                self._registry.observe(event)
            except Exception:
                logger.exception("toolnexus_trio: the metrics registry failed on an event")
        sink = self.options.on_metric
        if sink is None:
            return
        try:
            sink(event)
        except Exception:
            logger.exception("toolnexus_trio: on_metric raised; event dropped")

    def _metric_tool(self, name: str, result: ToolResult, source: str, started: float) -> None:
        suspended = result.metadata is not None and pending_of(result) is not None
        is_error = result.is_error and not suspended
        elapsed = (trio.current_time() - started) * 1000
        ms = 0.0 if elapsed != elapsed else elapsed  # NaN: never started (_ms, inlined)
        if self.options.on_metric is None:
            # Only the registry wants it: no event dict per call (the fan-out hot path).
            try:
                self._registry.observe_tool(name, source, is_error, suspended, ms)
            except Exception:
                logger.exception("toolnexus_trio: the metrics registry failed on an event")
            return
        event: dict[str, Any] = {
            "event": "tool", "tool": name, "source": source, "is_error": is_error,
            "ms": ms,
        }  # fmt: skip
        if suspended:
            event["pending"] = True
        self._metric(event)


def _record_and_message(
    call_id: str, name: str, args: Any, result: ToolResult
) -> tuple[ToolCallRecord, Message]:
    """A call's record and its tool message, built the same way for a turn and a resume."""
    record = ToolCallRecord(call_id, name, args, result.output, result.is_error, result.metadata)
    return record, {"role": "tool", "tool_call_id": call_id, "content": result.output}


def _still_waiting(run: _Run, s: SuspendedCall) -> ToolResult:
    """The placeholder result of suspended call *s*, as its halted turn recorded it."""
    record = run.records[s.record_index]
    return ToolResult(
        record.output, record.is_error, {**(record.metadata or {}), "pending": s.request}
    )


def _ms(started: float) -> float:
    elapsed = (trio.current_time() - started) * 1000
    return 0.0 if math.isnan(elapsed) else elapsed
