"""The in-process client: the agent loop, with one Trio nursery per turn.

Each model message's tool calls run as tasks in the turn's nursery; the turn's
:class:`CancelToken` is bound to that nursery's cancel scope, so cancelling the token
ends every in-flight call of the turn and nothing else. Results go back to the model
in call order. The run itself sits in a cancel scope bound to the run's token and to
``run_timeout_ms``, so a cancel or a deadline also covers model calls, tools and
``wait_for``. No task outlives :meth:`Client.run`.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import trio

from ._cancel import CancelToken
from ._groups import collapse_groups
from ._runctx import RunServices, current_run
from ._toolkit import Toolkit
from ._tools import ToolContext, ToolResult, describe_exception, is_async_callable, pending_of
from ._wire import Answer, Request

logger = logging.getLogger("toolnexus_trio")

Message = dict[str, Any]
"""An OpenAI-shaped chat message (``role``, ``content``, ``tool_calls``, ``tool_call_id``)."""

RunStatus = Literal["done", "pending", "incomplete", "cancelled"]


@attrs.frozen
class InProcessToolCall:
    """One tool call of a model message; a missing id becomes ``call_<i>``.

    ``arguments`` may be a dict or a JSON string.
    """

    id: str = ""
    name: str = ""
    arguments: dict[str, Any] | str = attrs.field(factory=dict)


@attrs.frozen
class InProcessResponse:
    """One assistant message from ``generate``: text, tool calls, optional usage."""

    content: str = ""
    tool_calls: Sequence[InProcessToolCall] = ()
    usage: Mapping[str, Any] | None = None


@attrs.frozen
class GenerateRequest:
    """What ``generate`` receives.

    ``messages`` is the live transcript: read it during the call, do not mutate or keep
    it (it is not copied per call, on purpose). ``tools`` is the OpenAI tool list, or
    ``None`` when there are no tools. ``turn`` is 0-based. ``max_tokens`` caps the
    answer when the caller asked for a cap (a Tesseron host's sampling request does).
    """

    model: str
    messages: Sequence[Message]
    tools: list[dict[str, Any]] | None
    turn: int
    max_tokens: int | None = None


HookFn = Callable[[dict[str, Any]], Any]
"""A hook: sync or async, takes one event dict, may return a dict (see :class:`Hooks`)."""


@attrs.frozen
class Hooks:
    """Lifecycle hooks (SPEC §8); each is sync or async and gets one dict.

    - ``before_llm({messages, tools, model, turn})`` may return ``{messages?, tools?,
      model?}``: ``messages`` replaces the transcript for the rest of the run; ``tools``
      and ``model`` apply to that turn.
    - ``after_llm({response, model, turn})`` observes.
    - ``before_tool({name, args, id, turn, cancel})`` may return ``{result}`` to
      short-circuit the tool (``after_tool`` then does not run) or ``{args}`` to rewrite.
    - ``after_tool({name, args, result, id, turn, cancel})`` may return ``{result}``.

    ``cancel`` is the turn's :class:`CancelToken`. A raising tool hook becomes that
    call's error result; a raising LLM hook fails the run with :class:`HookError`.
    """

    before_llm: HookFn | None = None
    after_llm: HookFn | None = None
    before_tool: HookFn | None = None
    after_tool: HookFn | None = None


Generate = Callable[[GenerateRequest], Any]
WaitFor = Callable[[Request], Awaitable[Answer]]
OnMetric = Callable[[dict[str, Any]], None]


@attrs.frozen
class InProcessOptions:
    """Options of :func:`create_in_process_client`.

    ``generate`` is ``async (GenerateRequest) -> InProcessResponse`` (a dict with
    ``content`` / ``tool_calls`` / ``usage`` is accepted too); a plain function also
    works and runs in a worker thread. ``wait_for`` resolves §10 suspensions.
    ``tool_timeout_ms`` bounds each tool call, ``run_timeout_ms`` the whole run
    (0 = unbounded). ``on_metric`` receives ``llm``, ``tool`` and ``run`` events (and
    ``progress`` / ``log`` from Tesseron tools).
    """

    model: str
    generate: Generate
    wait_for: WaitFor | None = None
    system_prompt: str | None = None
    max_turns: int = 10
    hooks: Hooks | Mapping[str, HookFn] | None = None
    tool_timeout_ms: int = 0
    run_timeout_ms: int = 0
    on_metric: OnMetric | None = None


@attrs.frozen
class ToolCallRecord:
    """One executed tool call and its final result."""

    id: str
    name: str
    args: Any
    output: str
    is_error: bool
    metadata: dict[str, Any] | None = None


@attrs.frozen
class SuspendedCall:
    """A call left suspended by a run that returned ``status="pending"``."""

    id: str
    name: str
    args: dict[str, Any]
    request: Request
    message_index: int
    record_index: int


@attrs.frozen
class RunResult:
    """The outcome of a run.

    ``status`` is ``"done"``, ``"pending"`` (a tool suspended and there is no
    ``wait_for``; ``pending`` is the first suspended request in call order),
    ``"incomplete"`` (``limit`` says which limit: ``"maxTurns"``, or ``"runTimeout"`` on
    :attr:`RunTimeout.result`) or ``"cancelled"``
    (the run's token was cancelled). ``messages`` is the whole transcript, balanced:
    every tool call has its tool message.
    """

    text: str
    status: RunStatus
    messages: list[Message]
    tool_calls: list[ToolCallRecord]
    turns: int
    usage: dict[str, int]
    model: str
    pending: Request | None = None
    limit: str | None = None
    suspended: tuple[SuspendedCall, ...] = ()
    _toolkit: Toolkit | None = attrs.field(default=None, repr=False, eq=False, alias="toolkit")

    @property
    def tool_call_count(self) -> int:
        """``len(tool_calls)``."""
        return len(self.tool_calls)


class RunTimeout(TimeoutError):
    """``run_timeout_ms`` elapsed; :attr:`result` holds the balanced transcript so far.

    That result has ``status="incomplete"`` and ``limit="runTimeout"``.
    """

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


class RunError(RuntimeError):
    """A run stopped on an error; :attr:`result` keeps the balanced transcript so far.

    The original exception, if any, is ``__cause__``.
    """

    result: RunResult | None = None


class HookError(RunError):
    """An LLM hook (``before_llm`` / ``after_llm``) raised; the run stops."""


class GenerateError(RunError):
    """``generate`` raised, or returned something that is not a model message."""


# ---------------------------------------------------------------------------


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
    text: str = ""
    status: RunStatus = "done"
    limit: str | None = None
    suspended: list[SuspendedCall] = attrs.field(factory=list)
    emit: Callable[[dict[str, Any]], Awaitable[None]] | None = None


async def _call_hook(fn: HookFn, event: dict[str, Any]) -> Any:
    out = fn(event)
    if inspect.isawaitable(out):
        out = await out
    return out


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usage(raw: Mapping[str, Any] | None) -> dict[str, int]:
    if not raw:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    prompt = _int(raw.get("prompt_tokens", raw.get("promptTokens")))
    completion = _int(raw.get("completion_tokens", raw.get("completionTokens")))
    total = raw.get("total_tokens", raw.get("totalTokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": _int(total) if total is not None else prompt + completion,
    }


def _parse_call(item: object) -> InProcessToolCall:
    if isinstance(item, InProcessToolCall):
        call = item
    elif isinstance(item, Mapping):
        call = InProcessToolCall(
            id=item.get("id") or "",
            name=item.get("name") or "",
            arguments=item.get("arguments", {}),
        )
    else:
        raise GenerateError(f"generate returned a tool call of type {type(item).__name__}")
    if not isinstance(call.id, str) or not isinstance(call.name, str):
        raise GenerateError(f"generate returned a tool call with a non-string id or name: {call!r}")
    return call


def _parse_response(raw: object) -> InProcessResponse:
    if isinstance(raw, InProcessResponse):
        content, calls_raw, usage = raw.content, raw.tool_calls, raw.usage
    elif isinstance(raw, Mapping):
        content = raw.get("content") or ""
        calls_raw = raw.get("tool_calls", raw.get("toolCalls")) or ()
        usage = raw.get("usage")
    else:
        raise GenerateError(
            f"generate returned {type(raw).__name__}; expected an InProcessResponse "
            "or a dict with 'content' and/or 'tool_calls'"
        )
    if not isinstance(content, str):
        raise GenerateError(f"generate returned content of type {type(content).__name__}")
    if not isinstance(calls_raw, list | tuple):
        raise GenerateError(f"generate returned tool_calls of type {type(calls_raw).__name__}")
    if usage is not None and not isinstance(usage, Mapping):
        raise GenerateError(f"generate returned usage of type {type(usage).__name__}")
    calls = tuple(_parse_call(item) for item in calls_raw)
    if isinstance(raw, InProcessResponse) and all(
        a is b for a, b in zip(calls, calls_raw, strict=True)
    ):
        return raw
    return InProcessResponse(content=content, tool_calls=calls, usage=usage)


# json.dumps with separators builds a new encoder per call; this one is built once
# (same settings, same output and errors).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


def _to_calls(response: InProcessResponse) -> list[_Call]:
    calls = []
    for i, tc in enumerate(response.tool_calls):
        call_id = tc.id or f"call_{i}"
        arguments = tc.arguments
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                calls.append(
                    _Call(call_id, tc.name, arguments, arguments, f"Invalid JSON arguments: {exc}")
                )
                continue
            text = arguments
        else:
            args = arguments
            try:
                text = _COMPACT_JSON.encode(arguments)
            except (TypeError, ValueError) as exc:
                calls.append(_Call(call_id, tc.name, {}, "{}", f"Arguments are not JSON: {exc}"))
                continue
        if not isinstance(args, dict):
            calls.append(_Call(call_id, tc.name, args, text, "Arguments must be a JSON object"))
            continue
        calls.append(_Call(call_id, tc.name, args, text))
    return calls


class _Gate:
    """Orders calls so that a ``concurrency_safe=False`` call never overlaps another."""

    def __init__(self, exclusive: list[bool]) -> None:
        self.done = [trio.Event() for _ in exclusive]
        self.waits: list[list[int]] = []
        last_exclusive = -1
        since_exclusive: list[int] = []
        for i, excl in enumerate(exclusive):
            if excl:
                self.waits.append(
                    ([last_exclusive] if last_exclusive >= 0 else []) + since_exclusive
                )
                last_exclusive, since_exclusive = i, []
            else:
                self.waits.append([last_exclusive] if last_exclusive >= 0 else [])
                since_exclusive.append(i)

    async def wait_turn(self, index: int) -> None:
        for other in self.waits[index]:
            await self.done[other].wait()


def _gate_for(toolkit: Toolkit | None, names: Sequence[str]) -> _Gate | None:
    """A gate when any call goes to a ``concurrency_safe=False`` tool, else ``None``."""
    if toolkit is None:
        return None
    exclusive = []
    for name in names:
        found = toolkit.get(name)
        exclusive.append(found is not None and found.concurrency_safe is False)
    return _Gate(exclusive) if any(exclusive) else None


@attrs.define  # not frozen: a frozen attrs __init__ costs about 2.5x per call
class _Outcome:
    result: ToolResult
    args: Any


@attrs.define
class _Meter:
    """Per-call metric state: one ``tool`` event per execution, or one for the call."""

    started: float
    source: str = "unknown"
    metered: bool = False


# Shared by every call when ``on_metric`` is unset: nothing reads or writes it then, so
# a call allocates no meter and takes no clock reading.
_UNMETERED = _Meter(0.0)


class Client:
    """The agent loop around an in-process model. Create with :func:`create_in_process_client`."""

    def __init__(self, options: InProcessOptions) -> None:
        if not callable(options.generate):
            raise TypeError("create_in_process_client requires a callable `generate`")
        if options.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.options = options
        hooks = options.hooks
        self._hooks = Hooks(**hooks) if isinstance(hooks, Mapping) else (hooks or Hooks())
        self._generate_is_async = is_async_callable(options.generate)

    # -- public API ---------------------------------------------------------

    async def run(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        history: Sequence[Message] | None = None,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        """Run the loop until the model answers, a tool suspends, or a limit is hit.

        Cancelling *cancel* ends the run with ``status="cancelled"``; ``run_timeout_ms``
        raises :class:`RunTimeout`; cancelling an enclosing Trio scope raises
        ``trio.Cancelled`` as usual. A failing ``generate`` raises :class:`GenerateError`
        (the original exception is its ``__cause__``) and a failing LLM hook
        :class:`HookError`; both carry the balanced transcript so far in ``result``.
        """
        run = self._new_run(prompt, toolkit, history)
        return await self._drive(run, cancel, self._loop(run))

    @asynccontextmanager
    async def stream(
        self,
        prompt: str,
        toolkit: Toolkit | None = None,
        *,
        history: Sequence[Message] | None = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[trio.MemoryReceiveChannel[dict[str, Any]]]:
        """Run the loop in the background, giving a channel of events (SPEC §8 shapes).

        Events: ``text {delta}``, ``tool_call {id, name, args, cancel}``, ``pending
        {request}``, ``tool_result {id, name, output, is_error}`` (call order, after the
        turn), ``usage {usage}``, ``done {result}``; tools of a Tesseron gateway add
        ``progress {id, tool, invocation_id, percent, message, data}`` and ``log {id,
        tool, level, message, meta}``. Leaving the block early cancels the run; an
        exception from the run is raised out of the block.
        """
        # Size 0: the loop waits for the consumer, so events are never queued up.
        send, receive = trio.open_memory_channel[dict[str, Any]](0)
        run = self._new_run(prompt, toolkit, history)

        async def emit(event: dict[str, Any]) -> None:
            await send.send(event)

        run.emit = emit

        async def produce() -> None:
            # A synchronous close: an awaiting one could take a Cancelled that would
            # replace the run's own exception.
            with send:
                result = await self._drive(run, cancel, self._loop(run))
                await send.send({"type": "usage", "usage": dict(result.usage)})
                await send.send({"type": "done", "result": result})

        with collapse_groups():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce)
                try:
                    yield receive
                finally:
                    # Cancel first, then close: the loop must see Cancelled, not a
                    # BrokenResourceError from an event it was still sending.
                    nursery.cancel_scope.cancel(reason="stream closed by its consumer")
                    receive.close()

    async def resume(
        self,
        result: RunResult,
        answers: Mapping[str, Answer] | Iterable[Answer],
        *,
        toolkit: Toolkit | None = None,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        """Continue a run that returned ``status="pending"``.

        Each suspended call of the halted turn is re-run once with its answer in
        ``ctx.answer`` (concurrently); ``ok=False`` gives ``"declined/expired: <prompt>"``
        and a call with no answer ``"unresolved: <prompt>"``. Its placeholder tool message
        is replaced, and the loop goes on (no new user message). An answer whose id
        matches no suspended request raises :class:`ValueError`.
        """
        if result.status != "pending":
            raise ValueError(f"resume needs a pending result, not status={result.status!r}")
        by_id = dict(answers) if isinstance(answers, Mapping) else {a.id: a for a in answers}
        known = {s.request.id for s in result.suspended}
        for key, answer in by_id.items():
            if key not in known or answer.id != key:
                raise ValueError(f"answer {answer.id!r} matches no suspended request")
        run = _Run(
            toolkit=toolkit if toolkit is not None else result._toolkit,
            messages=list(result.messages),
            records=list(result.tool_calls),
            usage=dict(result.usage),
            turns=result.turns,
        )

        async def body() -> None:
            await self._resume_turn(run, result.suspended, by_id)
            if not run.suspended:
                await self._loop(run)

        return await self._drive(run, cancel, body())

    # -- the loop -----------------------------------------------------------

    def _new_run(
        self, prompt: str, toolkit: Toolkit | None, history: Sequence[Message] | None
    ) -> _Run:
        messages: list[Message] = list(history) if history else []
        if not messages and self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.append({"role": "user", "content": prompt})
        return _Run(toolkit=toolkit, messages=messages)

    async def _drive(
        self, run: _Run, cancel: CancelToken | None, body: Awaitable[None]
    ) -> RunResult:
        started = trio.current_time()
        cancel = cancel or CancelToken()
        timeout_ms = self.options.run_timeout_ms
        services = current_run.set(self._services(run))
        try:
            with trio.CancelScope() as run_scope, cancel.bound(run_scope):
                if timeout_ms > 0:
                    run_scope.deadline = trio.current_time() + timeout_ms / 1000
                await trio.lowlevel.checkpoint_if_cancelled()
                await body
        except RunError as exc:
            exc.result = self._result(run)
            self._metric_run(run, started, error=str(exc))
            raise
        except Exception as exc:
            self._metric_run(run, started, error=str(exc) or type(exc).__name__)
            raise
        finally:
            current_run.reset(services)
            if inspect.iscoroutine(body):
                body.close()  # never awaited when the scope was cancelled up front
        if run_scope.cancelled_caught:
            if cancel.is_cancelled:
                run.status, run.text = "cancelled", ""
            else:
                run.status, run.limit = "incomplete", "runTimeout"
                result = self._result(run)
                self._metric_run(run, started, error="timeout")
                raise RunTimeout(f"run timeout after {timeout_ms}ms", result)
        self._metric_run(run, started)
        return self._result(run)

    def _services(self, run: _Run) -> RunServices:
        async def sample(prompt: str, max_tokens: int | None) -> str:
            # One user message, no tools: what a Tesseron host's sampling/request asks.
            request = GenerateRequest(
                model=self.options.model,
                messages=[{"role": "user", "content": prompt}],
                tools=None,
                turn=0,
                max_tokens=max_tokens,
            )
            response, _ = await self._call_model(request)
            return response.content

        return RunServices(
            emit=run.emit,
            metric=self._metric if self.options.on_metric is not None else None,
            sample=sample,
        )

    def _result(self, run: _Run) -> RunResult:
        halted = run.status == "pending"
        return RunResult(
            text=run.text,
            status=run.status,
            messages=run.messages,
            tool_calls=run.records,
            turns=run.turns,
            usage=run.usage,
            model=self.options.model,
            pending=run.suspended[0].request if halted else None,
            limit=run.limit,
            suspended=tuple(run.suspended) if halted else (),
            toolkit=run.toolkit,
        )

    async def _loop(self, run: _Run) -> None:
        opts = self.options
        while True:
            if run.turns >= opts.max_turns:
                run.status, run.limit = "incomplete", "maxTurns"
                return
            turn = run.turns
            tools = run.toolkit.to_openai() if run.toolkit is not None else []
            model = opts.model
            if self._hooks.before_llm is not None:
                change = await self._llm_hook(
                    self._hooks.before_llm,
                    {"messages": run.messages, "tools": tools, "model": model, "turn": turn},
                )
                if isinstance(change, Mapping):
                    if change.get("messages") is not None:
                        run.messages = list(change["messages"])
                    if change.get("tools") is not None:
                        tools = list(change["tools"])
                    if change.get("model"):
                        model = str(change["model"])
            response, usage = await self._call_model(
                GenerateRequest(model=model, messages=run.messages, tools=tools or None, turn=turn)
            )
            run.turns += 1
            for key, value in usage.items():
                run.usage[key] += value
            if self._hooks.after_llm is not None:
                await self._llm_hook(
                    self._hooks.after_llm, {"response": response, "model": model, "turn": turn}
                )
            calls = _to_calls(response)
            assistant: Message = {"role": "assistant"}
            if response.content or not calls:
                assistant["content"] = response.content
            if calls:
                assistant["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_json},
                    }
                    for c in calls
                ]
            run.messages.append(assistant)
            run.text = response.content
            if not calls:
                if response.content and run.emit is not None:
                    await run.emit({"type": "text", "delta": response.content})
                run.status = "done"
                return
            await self._turn(run, calls, turn, response.content)
            if run.suspended:
                run.status, run.text = "pending", run.suspended[0].request.prompt
                return

    async def _call_model(
        self, request: GenerateRequest
    ) -> tuple[InProcessResponse, dict[str, int]]:
        generate = self.options.generate
        started = trio.current_time()
        try:
            if self._generate_is_async:
                raw = await generate(request)
            else:
                # A worker thread is abandoned when the run is cancelled, so it gets its
                # own copy of the transcript rather than the live list.
                snapshot = attrs.evolve(request, messages=list(request.messages))
                raw = await trio.to_thread.run_sync(generate, snapshot, abandon_on_cancel=True)
                if inspect.isawaitable(raw):
                    raw = await raw
            response = _parse_response(raw)
        except Exception as exc:
            self._metric(
                {"event": "llm", "model": request.model, "status": "error", "ms": _ms(started),
                 "prompt_tokens": 0, "completion_tokens": 0}
            )  # fmt: skip
            if isinstance(exc, GenerateError):
                raise
            raise GenerateError(f"generate raised {type(exc).__name__}: {exc}") from exc
        usage = _usage(response.usage)
        self._metric(
            {"event": "llm", "model": request.model, "status": "ok", "ms": _ms(started),
             "prompt_tokens": usage["prompt_tokens"],
             "completion_tokens": usage["completion_tokens"]}
        )  # fmt: skip
        return response, usage

    async def _llm_hook(self, fn: HookFn, event: dict[str, Any]) -> Any:
        try:
            return await _call_hook(fn, event)
        except Exception as exc:
            name = getattr(fn, "__name__", "hook")
            raise HookError(f"LLM hook {name} failed: {exc}") from exc

    # -- one turn -----------------------------------------------------------

    async def _turn(self, run: _Run, calls: list[_Call], turn: int, text: str) -> None:
        token = CancelToken()
        outcomes: list[_Outcome | None] = [None] * len(calls)
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
                for i, call in enumerate(calls):
                    nursery.start_soon(self._call_task, run, call, i, turn, token, gate, outcomes)
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
        for i, call in enumerate(calls):
            outcome = outcomes[i]
            if outcome is None:
                outcome = outcomes[i] = _Outcome(ToolResult.error("cancelled"), call.args)
            result = outcome.result
            request = pending_of(result)
            if request is not None:
                run.suspended.append(
                    SuspendedCall(call.id, call.name, dict(outcome.args), request,
                                  len(run.messages), len(run.records))
                )  # fmt: skip
            record, message = _record_and_message(call.id, call.name, outcome.args, result)
            run.records.append(record)
            run.messages.append(message)

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
        metered = self.options.on_metric is not None
        meter = _Meter(trio.current_time()) if metered else _UNMETERED
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
            if metered and not meter.metered:
                outcome = outcomes[index]
                final = outcome.result if outcome is not None else ToolResult.error("cancelled")
                self._metric_tool(call.name, final, meter)

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
            if self.options.wait_for is None:
                if run.emit is not None:
                    await run.emit({"type": "pending", "request": request})
                return _Outcome(result, args)
            result = await self._resolve(run, call, args, request, token, meter)
        if self._hooks.after_tool is not None:  # no coroutine per call without the hook
            result = await self._after_tool(call, args, result, turn, token)
        return _Outcome(result, args)

    async def _execute(
        self, run: _Run, name: str, args: dict[str, Any], ctx: ToolContext, meter: _Meter
    ) -> ToolResult:
        metered = self.options.on_metric is not None
        started = trio.current_time() if metered else 0.0
        toolkit = run.toolkit
        found = toolkit.get(name) if toolkit is not None else None
        if found is None:
            result = ToolResult.error(f"Unknown tool: {name}")
        else:
            if metered:
                meter.source = found.source.value
            result = await found._call(args, ctx, own_scope=False)
        if metered:
            meter.metered = True
            self._metric_tool(name, result, attrs.evolve(meter, started=started))
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
    ) -> ToolResult:
        if answer is None or not answer.ok:
            return ToolResult.error(f"declined/expired: {request.prompt}")
        ctx = ToolContext(
            cancel=token, call_id=call_id, timeout_ms=self.options.tool_timeout_ms, answer=answer
        )
        retried = await self._execute(run, name, args, ctx, meter)
        if pending_of(retried) is not None:
            return ToolResult.error(f"unresolved: {request.prompt}")
        return retried

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
        self, run: _Run, suspended: Sequence[SuspendedCall], answers: Mapping[str, Answer]
    ) -> None:
        token = CancelToken()
        results: list[ToolResult | None] = [None] * len(suspended)
        gate = _gate_for(run.toolkit, [s.name for s in suspended])

        async def redo(i: int, s: SuspendedCall) -> None:
            metered = self.options.on_metric is not None
            meter = _Meter(trio.current_time()) if metered else _UNMETERED
            try:
                if gate is not None:
                    await gate.wait_turn(i)
                answer = answers.get(s.request.id)
                if answer is None:
                    results[i] = ToolResult.error(f"unresolved: {s.request.prompt}")
                    return
                result = await self._answered(
                    run, s.id, s.name, s.args, s.request, answer, token, meter
                )
                call = _Call(s.id, s.name, s.args, "")
                results[i] = await self._after_tool(call, s.args, result, run.turns - 1, token)
            except* Exception as group:
                results[i] = ToolResult.error(describe_exception(group))
            finally:
                if gate is not None:
                    gate.done[i].set()

        try:
            async with trio.open_nursery() as nursery:
                token.attach(nursery.cancel_scope)
                for i, s in enumerate(suspended):
                    nursery.start_soon(redo, i, s)
        finally:
            for s, result in zip(suspended, results, strict=True):
                final = result or ToolResult.error("cancelled")
                record, message = _record_and_message(s.id, s.name, s.args, final)
                run.records[s.record_index] = record
                run.messages[s.message_index] = message

    # -- metrics ------------------------------------------------------------

    def _metric(self, event: dict[str, Any]) -> None:
        sink = self.options.on_metric
        if sink is None:
            return
        try:
            sink(event)
        except Exception:
            logger.exception("toolnexus_trio: on_metric raised; event dropped")

    def _metric_tool(self, name: str, result: ToolResult, meter: _Meter) -> None:
        if self.options.on_metric is None:
            return
        suspended = pending_of(result) is not None
        event: dict[str, Any] = {
            "event": "tool", "tool": name, "source": meter.source,
            "is_error": result.is_error and not suspended, "ms": _ms(meter.started),
        }  # fmt: skip
        if suspended:
            event["pending"] = True
        self._metric(event)

    def _metric_run(self, run: _Run, started: float, error: str | None = None) -> None:
        if self.options.on_metric is None:
            return
        event: dict[str, Any] = {
            "event": "run",
            "model": self.options.model,
            "turns": run.turns,
            "tool_calls": len(run.records),
            "total_tokens": run.usage["total_tokens"],
            "ms": _ms(started),
            "status": run.status,
        }
        if error is not None:
            event["error"] = error
        self._metric(event)


def _record_and_message(
    call_id: str, name: str, args: Any, result: ToolResult
) -> tuple[ToolCallRecord, Message]:
    """A call's record and its tool message, built the same way for a turn and a resume."""
    record = ToolCallRecord(call_id, name, args, result.output, result.is_error, result.metadata)
    return record, {"role": "tool", "tool_call_id": call_id, "content": result.output}


def _ms(started: float) -> float:
    elapsed = (trio.current_time() - started) * 1000
    return 0.0 if math.isnan(elapsed) else elapsed


def create_in_process_client(options: InProcessOptions) -> Client:
    """A :class:`Client` around a host-supplied ``generate`` (no wire, no key, no retries)."""
    return Client(options)
