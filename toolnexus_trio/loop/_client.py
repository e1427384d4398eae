"""The agent loop, with one Trio nursery per turn; both client kinds run it.
This module is long because :class:`Client` is the loop's one public class (run, resume,
answer, ask, stream, translate, metrics) with the drive they share, each public method
carrying its whole documentation; what can stand alone already lives beside it (a
turn's tool calls, turn sources, conversations, durable answers, cost, typed output).

:func:`create_in_process_client` and :func:`create_client` build the same
:class:`Client`; they differ only in the :class:`~toolnexus_trio.loop._turns.TurnSource` that
produces each model turn (a host's ``generate``, or an HTTP wire style).

Each model message's tool calls run as tasks in the turn's nursery
(:mod:`toolnexus_trio.loop._toolcalls`); the turn's :class:`CancelToken` is bound to that
nursery's cancel scope, so cancelling the token ends every in-flight call of the turn
and nothing else. Results go back to the model
in call order. The run itself sits in a cancel scope bound to the run's token and to
``run_timeout_ms``, so a cancel or a deadline also covers model calls, tools and
``wait_for``. No task outlives :meth:`Client.run`.

Long because it is the one loop and the public :class:`Client` around it (run, stream,
resume, translate, metrics); the tool calls, conversations, durable answers and costs
live in their own modules.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import trio

from .. import _tracing
from .._cancel import CancelToken
from .._groups import reraise_single
from .._runctx import RunServices, current_run
from .._schema import MAX_JSON_DEPTH, nested_too_deeply
from .._toolkit import Toolkit
from .._wire import Answer
from ..stores._base import ConversationStore
from ..stores._memory import InMemoryConversationStore
from ._checkpoint import durable_ask as _durable_ask
from ._checkpoint import orphaned_runs as _orphaned_runs
from ._checkpoint import recover as _recover
from ._conversation import Conversation
from ._conversation import ask as _ask
from ._cost import Prices, check_prices, cost_of
from ._durable import answer as _answer
from ._final import Typed, output_for, output_value, settles, typed_turn
from ._metrics import PrometheusRegistry
from ._output import TOOL_ARGS_DELTA, OutputMode, OutputValidator, partial_emitter
from ._parts import PartLedger, prompt_content
from ._results import (
    GenerateError,
    GenerateRequest,
    HookError,
    HookFn,
    Hooks,
    InProcessOptions,
    InProcessResponse,
    Message,
    Prompt,
    RunError,
    RunResult,
    RunTimeout,
    TranslateResult,
)
from ._toolcalls import ToolCalls, _Call, _call_hook, _ms, _Run
from ._traced import traced_call, traced_run
from ._turns import (
    REASONING_DELTA,
    Emit,
    InProcessTurns,
    TranslateCall,
    Turn,
    TurnSource,
    check_translate_input,
)

if TYPE_CHECKING:
    # The HTTP client's options: the models family sits above the loop.
    from ..models import ClientOptions

logger = logging.getLogger("toolnexus_trio")


# ---------------------------------------------------------------------------


_TOO_DEEP = f"Invalid JSON arguments: nested too deeply (more than {MAX_JSON_DEPTH} levels)"


# json.dumps with separators builds a new encoder per call; this one is built once
# (same settings, same output and errors).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))

_UNTYPED = Typed()  # a run given no output keyword (frozen: shared by every such run)


def _to_calls(response: InProcessResponse) -> list[_Call]:
    calls = []
    for i, tc in enumerate(response.tool_calls):
        call_id = tc.id or f"call_{i}"
        arguments = tc.arguments
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
                deep = nested_too_deeply(args, text=arguments)
            except ValueError as exc:
                calls.append(
                    _Call(call_id, tc.name, arguments, arguments, f"Invalid JSON arguments: {exc}")
                )
                continue
            except RecursionError:  # json recurses per level: ~1,000 deep is past its stack
                deep = True
            if deep:
                calls.append(_Call(call_id, tc.name, arguments, arguments, _TOO_DEEP))
                continue
            text = arguments
        elif type(arguments) is dict and not arguments:
            # No arguments (a fan-out's common case): nothing to encode or to check.
            args, text = arguments, "{}"
        else:
            args = arguments
            try:
                text = _COMPACT_JSON.encode(arguments)
                deep = nested_too_deeply(args, text=text)
            except (TypeError, ValueError) as exc:
                calls.append(_Call(call_id, tc.name, {}, "{}", f"Arguments are not JSON: {exc}"))
                continue
            except RecursionError:
                deep = True
            if deep:
                calls.append(_Call(call_id, tc.name, {}, "{}", _TOO_DEEP))
                continue
        if not isinstance(args, dict):
            calls.append(_Call(call_id, tc.name, args, text, "Arguments must be a JSON object"))
            continue
        calls.append(_Call(call_id, tc.name, args, text))
    return calls


class Client(ToolCalls):
    """The agent loop around a model.

    Create with :func:`create_in_process_client` (a host's ``generate``) or
    :func:`create_client` (an HTTP endpoint). An HTTP client holds a connection pool:
    use it as ``async with create_client(...) as client:`` or call :meth:`aclose`.
    """

    options: InProcessOptions | ClientOptions

    def __init__(
        self, options: InProcessOptions | ClientOptions, source: TurnSource | None = None
    ) -> None:
        if source is None:
            if not isinstance(options, InProcessOptions):
                raise TypeError("an HTTP client is made with create_client")
            source = InProcessTurns(options)
        if options.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.options = options
        hooks = options.hooks
        self._hooks = Hooks(**hooks) if isinstance(hooks, Mapping) else (hooks or Hooks())
        self._source = source
        self._store: ConversationStore = (
            options.store if options.store is not None else InMemoryConversationStore()
        )
        self._registry = PrometheusRegistry()
        prices = getattr(options, "prices", None)  # the HTTP client's (issue 38)
        check_prices(prices)
        self._prices: Prices | None = prices
        self._plain_services: RunServices | None = None  # see _services

    # -- lifecycle ----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP connection pool the client made (not one passed in). Idempotent."""
        await self._source.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.move_on_after(1, shield=True):
            await self.aclose()

    if not TYPE_CHECKING:  # hidden from type checkers, which should flag the `await`

        def __await__(self) -> NoReturn:
            # Python would say "object Client can't be used in 'await' expression".
            raise TypeError(
                "a Client is not awaited: write `async with create_client(options) as "
                "client:` (or create_in_process_client), without `await`"
            )

    # -- public API ---------------------------------------------------------

    async def run(
        self,
        prompt: Prompt,
        toolkit: Toolkit | None = None,
        *,
        history: Sequence[Message] | None = None,
        cancel: CancelToken | None = None,
        output_type: Any = None,
        output_mode: OutputMode | None = None,
        output_retries: int | None = None,
        output_validators: Sequence[OutputValidator] | None = None,
    ) -> RunResult:
        """Run the loop until the model answers, a tool suspends, or a limit is hit.

        With *output_type* (a class, ``list[...]``, a ``Literal``, a union of classes,
        a raw JSON Schema ``dict``...), the run ends with the typed value in
        :attr:`RunResult.output`, handed over as *output_mode* says (``"tool"``,
        ``"native"`` or ``"prompted"``); an invalid value goes back to the model at most
        *output_retries* times, *output_validators* may send a valid one back with
        :class:`RetryOutput`. Each defaults to the options' field of the same name; see
        "Typed results" in the docs.

        *prompt* is a string or a list of content parts (:func:`~toolnexus_trio.image`,
        :func:`~toolnexus_trio.text`...; a str in the list is a text part), kept in order;
        a part over ``max_part_bytes`` or one the model style cannot take fails the run
        before any request (:class:`~toolnexus_trio.ContentPartError`,
        :class:`~toolnexus_trio.UnsupportedPartError`).

        Cancelling *cancel* ends the run with ``status="cancelled"``; ``run_timeout_ms``
        raises :class:`RunTimeout`; cancelling an enclosing Trio scope raises
        ``trio.Cancelled`` as usual; each aborts an in-flight HTTP request at once and is
        never retried. A failing model call (``generate``, or the HTTP call once its
        retries are spent) raises :class:`GenerateError` (the original exception is its
        ``__cause__``) and a failing LLM hook :class:`HookError`; both carry the balanced
        transcript so far in ``result``.
        """
        if (
            output_type is None
            and output_mode is None
            and output_retries is None
            and output_validators is None
        ):
            typed = _UNTYPED  # the common call: no Typed built per run
        else:
            typed = Typed(output_type, output_mode, output_retries, output_validators)
        run = self._new_run(prompt, toolkit, history, typed)
        return await self._drive(run, cancel, self._loop(run))

    def stream(
        self,
        prompt: Prompt,
        toolkit: Toolkit | None = None,
        *,
        history: Sequence[Message] | None = None,
        cancel: CancelToken | None = None,
        output_type: Any = None,
        output_mode: OutputMode | None = None,
        output_retries: int | None = None,
        output_validators: Sequence[OutputValidator] | None = None,
    ) -> AbstractAsyncContextManager[trio.MemoryReceiveChannel[dict[str, Any]]]:
        """Run the loop in the background, giving a channel of events (SPEC §8 shapes).

        Events: ``text {delta}``, ``tool_call {id, name, args, cancel}``, ``pending
        {request}``, ``tool_result {id, name, output, is_error}`` (call order, after the
        turn), ``usage {usage}``, ``done {result}``; tools of a Tesseron gateway add
        ``progress {id, tool, invocation_id, percent, message, data}`` and ``log {id,
        tool, level, message, meta}``. Leaving the block early cancels the run; an
        exception from the run is raised out of the block.

        An HTTP client streams the model call (SSE) and sends each text delta as it
        arrives, read in the run's own task: a slow consumer slows the socket, nothing
        is queued. The in-process client sends a turn's text as one delta.

        With *output_type* (the keywords are :meth:`run`'s), ``output_partial
        {partial}`` events carry the typed answer as far as it has arrived (decoded
        JSON, unvalidated: the final tool's arguments or the text, parsed as they
        stream), ``output_invalid {reason, retrying}`` each answer sent back (or the
        last one, ``retrying`` false), and ``output {output}`` the accepted typed value.
        """
        typed = Typed(output_type, output_mode, output_retries, output_validators)
        return _EventStream(self, prompt, toolkit, history, cancel, typed)

    async def resume(
        self,
        result: RunResult,
        answers: Mapping[str, Answer] | Iterable[Answer],
        *,
        toolkit: Toolkit | None = None,
        cancel: CancelToken | None = None,
        resuspend: bool = False,
    ) -> RunResult:
        """Continue a run that returned ``status="pending"``.

        Each suspended call of the halted turn is re-run once with its answer in
        ``ctx.answer`` (concurrently); ``ok=False`` gives ``"declined/expired: <prompt>"``
        and a call with no answer ``"unresolved: <prompt>"``. Its placeholder tool message
        is replaced, and the loop goes on (no new user message). An answer whose id
        matches no suspended request raises :class:`ValueError`. Relay calls (see
        :func:`~toolnexus_trio.relay_tool`) take their results from their request's
        answer; a relay call a guard's approval let through relays now, so the result
        may be pending again.

        With *resuspend* (the agent runtime's escalation), a call still waiting keeps the
        run pending instead: a call with no answer yet (its placeholder stays, nothing
        re-runs) and a call whose retry asked a *new* request; the result is then
        ``pending`` on the first of them in call order (SPEC §10 first-in-order), and
        each is answered by a later resume. The same request asked again stays
        ``"unresolved"``.

        *result* may come from :meth:`RunResult.from_json` in another process; it then
        has no toolkit, and *toolkit* is required. A typed run stays typed: paused in
        this process, with its own ``output_*`` settings; read back from JSON, with the
        options' ``output_type`` and friends. For answers that must not be
        replayed, see :meth:`answer`.
        """
        return await self._resume(
            result, answers, toolkit=toolkit, cancel=cancel, resuspend=resuspend
        )

    async def _resume(
        self,
        result: RunResult,
        answers: Mapping[str, Answer] | Iterable[Answer],
        *,
        toolkit: Toolkit | None = None,
        cancel: CancelToken | None = None,
        resuspend: bool = False,
        emit: Emit | None = None,
    ) -> RunResult:
        """:meth:`resume`, its run sending §8 events to *emit* as :meth:`stream`'s do
        (the answered calls' ``tool_result`` first): the seam of the typed events of a
        durable continuation (:func:`~toolnexus_trio.loop.answer_events`)."""
        if result.status != "pending":
            raise ValueError(f"resume needs a pending result, not status={result.status!r}")
        if toolkit is None and result._toolkit is None:
            raise ValueError(
                "resume needs toolkit=...: this result carries no toolkit "
                "(RunResult.from_json never restores one)"
            )
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
            # A typed run resumed in the process that paused it stays typed; one read
            # back from JSON takes the options' output_type (fresh retries).
            output=attrs.evolve(result._output_state)
            if result._output_state
            else output_for(self.options, Typed(), toolkit or result._toolkit),
            cost=result.cost if result.cost is not None else (0.0 if result.turns == 0 else None),
            model=result.model,
        )
        run.emit = emit

        async def body() -> None:
            await self._resume_turn(run, result.suspended, by_id, resuspend)
            if run.suspended:  # a call still waits (an approved relay call: for its host)
                run.status, run.text = "pending", run.suspended[0].request.prompt
                return
            await self._loop(run)

        return await self._drive(run, cancel, body(), link=result.trace_parent)

    async def answer(
        self,
        id: str,
        answers: Mapping[str, Answer] | Iterable[Answer],
        *,
        toolkit: Toolkit,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        """Answer the pending run that :meth:`ask` saved under *id*, exactly once.

        Loads the pending state from :attr:`store` (a :class:`PendingStore`, possibly
        written by another process), takes it atomically *before* any tool re-runs,
        resumes as :meth:`resume` does (same rules for declines and missing answers)
        and saves the outcome under *id*. A second answer for the same pending state,
        concurrent or later, from any process, raises :class:`AlreadyAnswered` and runs
        nothing. An answer id that matches no suspended request raises
        :class:`ValueError` and consumes nothing; *id* with no pending run raises
        :class:`LookupError`. Answers to requests past their ``expires_at`` are refused:
        those calls get ``"declined/expired: <prompt>"``, the run goes on and is saved,
        then :class:`PendingExpired` is raised with the result. See "Durable approvals"
        in the docs for the whole lifecycle and what a crash leaves behind.
        """
        return await _answer(self, self._store, id, answers, toolkit=toolkit, cancel=cancel)

    @property
    def store(self) -> ConversationStore:
        """The :class:`ConversationStore` of :meth:`ask` (the one passed in, else the
        client's own in-memory store)."""
        return self._store

    async def ask(
        self,
        prompt: Prompt,
        toolkit: Toolkit | None = None,
        *,
        id: str | None = None,
        on_text: Callable[[str], Any] | None = None,
        output_type: Any = None,
        output_mode: OutputMode | None = None,
        output_retries: int | None = None,
        output_validators: Sequence[OutputValidator] | None = None,
    ) -> RunResult:
        """:meth:`run` with conversation memory (SPEC §8).

        With *id*, the transcript saved under it in :attr:`store` is the history and the
        new transcript is saved back; without, the store is untouched. *on_text* (sync
        or async) gets each text delta, and makes the model call stream. The
        ``output_*`` keywords are :meth:`run`'s.
        """
        output = {
            "output_type": output_type,
            "output_mode": output_mode,
            "output_retries": output_retries,
            "output_validators": output_validators,
        }
        if id is not None and self.options.durable:
            if output_type is not None or self.options.output_type is not None:
                raise ValueError(
                    "ask: a crash-durable run (durable=True) has no typed result yet; "
                    "give no output_type"
                )
            return await _durable_ask(self, self._store, prompt, toolkit, id=id, on_text=on_text)
        return await _ask(self, self._store, prompt, toolkit, id=id, on_text=on_text, output=output)

    async def recover(self, id: str, toolkit: Toolkit) -> RunResult:
        """Continue the durable run *id* whose owner died, from its last checkpoint.

        Needs ``durable=True`` runs (a :class:`~toolnexus_trio.stores.CheckpointStore`).
        The run is claimed first (one conditional update: of several workers
        recovering it, one wins; the others get :class:`RunNotRecoverable`, as does a
        run whose owner's lease has not expired or that is finished; no run at all is
        a :class:`LookupError`). Then: finished tool calls are not run again; a model
        call in flight is issued again; a tool call in flight is *in doubt* and
        ``on_in_doubt`` decides (by default it runs again only if its tool is
        :attr:`~toolnexus_trio.ToolHints.idempotent`, else the model is told it may or
        may not have run). The outcome is saved under *id* as :meth:`ask` saves it.
        """
        return await _recover(self, self._store, id, toolkit)

    async def orphaned_runs(self, limit: int = 100) -> list[str]:
        """Ids of durable runs whose owner's lease expired (oldest first, at most
        *limit*): what a worker passes to :meth:`recover`."""
        return await _orphaned_runs(self._store, limit)

    def conversation(self, toolkit: Toolkit | None = None) -> Conversation:
        """A :class:`Conversation` (``send``, ``messages``, ``reset``) over this client."""
        return Conversation(self, toolkit)

    def observe_metric(self, event: dict[str, Any]) -> None:
        """Record one metric event as the loop does (the registry, then ``on_metric``):
        how a model source reports what only it sees (a fallback's attempts)."""
        self._metric(event)

    def metrics(self) -> str:
        """The Prometheus text (SPEC §8 "Observability") of this client's activity."""
        return self._registry.render()

    async def translate(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        toolkit: Toolkit | None = None,
        tool_choice: Any = None,
        system: str | None = None,
        max_tokens: int = 0,
        cancel: CancelToken | None = None,
    ) -> TranslateResult:
        """One model call on OpenAI-shaped input, nothing executed (SPEC §11).

        *messages*, *tools* and *tool_choice* are OpenAI's, verbatim; *toolkit* is only
        declared (its tools first). ``before_llm`` and ``after_llm`` run once, tool
        hooks never; retries and the ``llm`` metric are the loop's. A cancelled *cancel*
        or ``run_timeout_ms`` raises :class:`GenerateError`. Input that is not of those
        shapes (a string or ``null`` where a message, a content part, a tool call or a
        tool belongs; a ``system`` that is not a string) raises :class:`ValueError`
        naming where it is and what belongs there, before any call.
        """
        check_translate_input(messages, tools)
        if system is not None and not isinstance(system, str):
            raise ValueError(f"translate: system is a {type(system).__name__}, expected a string")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"translate: max_tokens is {max_tokens!r}, expected an integer >= 0")
        declared = (toolkit.to_openai() if toolkit is not None else []) + [
            dict(t) for t in tools or ()
        ]
        model = self.options.model
        msgs: Sequence[Message] = messages
        cancel = cancel or CancelToken()
        timeout_ms = self.options.run_timeout_ms
        with trio.CancelScope() as scope, cancel.bound(scope):
            if timeout_ms > 0:
                scope.deadline = trio.current_time() + timeout_ms / 1000
            if self._hooks.before_llm is not None:
                change = await self._llm_hook(
                    self._hooks.before_llm,
                    {"messages": msgs, "tools": declared, "model": model, "turn": 0},
                )
                if isinstance(change, Mapping):
                    changed = change.get("messages")
                    check_translate_input(
                        [] if changed is None else changed, change.get("tools"), source="before_llm"
                    )
                    if change.get("messages") is not None:
                        msgs = list(change["messages"])
                    if change.get("tools") is not None:
                        declared = list(change["tools"])
                    if change.get("model"):
                        model = str(change["model"])
            call = TranslateCall(model, msgs, declared, tool_choice, system, max_tokens)
            started = trio.current_time()
            try:
                result = await self._source.translate(call)
            except Exception:
                self._metric(
                    {"event": "llm", "model": model, "status": "error", "ms": _ms(started),
                     "prompt_tokens": 0, "completion_tokens": 0}
                )  # fmt: skip
                raise
            self._metric(
                {"event": "llm", "model": model, "status": "ok", "ms": _ms(started),
                 "prompt_tokens": result.usage["prompt_tokens"],
                 "completion_tokens": result.usage["completion_tokens"]}
            )  # fmt: skip
            if self._hooks.after_llm is not None:
                await self._llm_hook(
                    self._hooks.after_llm, {"response": result.raw, "model": model, "turn": 0}
                )
            return result
        what = "cancelled" if cancel.is_cancelled else f"timed out after {timeout_ms}ms"
        raise GenerateError(f"translate {what}")

    # -- the loop -----------------------------------------------------------

    def _new_run(
        self,
        prompt: Prompt,
        toolkit: Toolkit | None,
        history: Sequence[Message] | None,
        typed: Typed | None = None,
    ) -> _Run:
        output = output_for(self.options, typed, toolkit) if typed is not None else None
        content, summaries = prompt_content(prompt, self.options.max_part_bytes)
        messages: list[Message] = list(history) if history else []
        if not messages:
            # SPEC §8 step 1: system_prompt + "\n\n" + skills_prompt(), either part
            # left out when empty (no system message at all when both are).
            catalog = toolkit.skills_prompt() if toolkit is not None else ""
            system = "\n\n".join(p for p in (self.options.system_prompt, catalog) if p)
            if output is not None and output.mode == "prompted":
                system = "\n\n".join(p for p in (system, output.instructions()) if p)
            if system:
                messages.append({"role": "system", "content": system})
        elif output is not None and output.mode == "prompted":
            messages.append({"role": "system", "content": output.instructions()})
        messages.append({"role": "user", "content": content})
        parts = PartLedger(summaries=summaries)
        return _Run(toolkit=toolkit, messages=messages, output=output, parts=parts)

    def _drive(
        self,
        run: _Run,
        cancel: CancelToken | None,
        body: Awaitable[None],
        link: str | None = None,
    ) -> Awaitable[RunResult]:
        # The run's span (invoke_agent), around the run's scope (loop/_traced.py). Not a
        # coroutine itself: the awaitable it returns is awaited by the caller, so a run
        # in flight holds one frame less (memory per conversation).
        run.tracer = tracer = _tracing.tracer(self.options.tracer_provider)
        if tracer is None:
            return self._drive_run(run, cancel, body)
        drive = self._drive_run(run, cancel, body)
        return traced_run(tracer, self.options, self._source, run, drive, link)

    async def _drive_run(
        self, run: _Run, cancel: CancelToken | None, body: Awaitable[None]
    ) -> RunResult:
        started = trio.current_time()
        timeout_ms = self.options.run_timeout_ms
        services = current_run.set(self._services(run))
        try:
            with trio.CancelScope() as run_scope:
                # What cancel.bound() does, without a generator context manager per run
                # (a sub-agent fan-out's per-child cost); no token given, none is made:
                # only the deadline can cancel this scope then.
                if cancel is not None:
                    cancel.attach(run_scope)
                try:
                    if timeout_ms > 0:
                        run_scope.deadline = started + timeout_ms / 1000
                    await trio.lowlevel.checkpoint_if_cancelled()
                    await body
                finally:
                    if cancel is not None:
                        cancel.detach(run_scope)
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
            if cancel is not None and cancel.is_cancelled:
                run.status, run.text = "cancelled", ""
            else:
                run.status, run.limit = "incomplete", "runTimeout"
                result = self._result(run)
                self._metric_run(run, started, error="timeout")
                raise RunTimeout(
                    f"run timeout after {timeout_ms}ms (client run_timeout_ms budget)", result
                )
        self._metric_run(run, started)
        return self._result(run)

    def _services(self, run: _Run) -> RunServices:
        if run.emit is None:
            # Nothing in it depends on the run then: built once per client.
            shared = self._plain_services
            if shared is None:
                shared = self._plain_services = self._new_services(None)
            return shared
        return self._new_services(run.emit)

    def _new_services(
        self, emit: Callable[[dict[str, Any]], Awaitable[None]] | None
    ) -> RunServices:
        return RunServices(
            emit=emit,
            metric=self._metric if self.options.on_metric is not None else None,
            sample=self._sample,  # a method, not a closure per run
            observe=self._metric,  # an MCP server's sample event reaches metrics()
        )

    async def _sample(self, prompt: str, max_tokens: int | None) -> str:
        # One user message, no tools: what a Tesseron host's sampling/request asks.
        request = GenerateRequest(
            model=self.options.model,
            messages=[{"role": "user", "content": prompt}],
            tools=None,
            turn=0,
            max_tokens=max_tokens,
        )
        return (await self._call_model(request)).response.content

    def _result(self, run: _Run) -> RunResult:
        halted = run.status == "pending"
        return RunResult(
            text=run.text,
            status=run.status,
            messages=run.messages,
            tool_calls=run.records,
            turns=run.turns,
            usage=run.usage,
            model=run.model or self.options.model,
            pending=run.suspended[0].request if halted else None,
            limit=run.limit,
            suspended=tuple(run.suspended) if halted else (),
            output=output_value(run),
            cost=run.cost if self._prices else None,
            toolkit=run.toolkit,
            output_state=run.output if halted else None,
        )

    async def _loop(self, run: _Run) -> None:
        # One call per turn: a turn's locals (the model's answer and its raw form)
        # are gone before the next model call (memory per conversation in flight).
        while not await self._step(run):
            pass

    async def _step(self, run: _Run) -> bool:
        """One turn of the loop; ``True`` once the run has ended."""
        opts = self.options
        if run.turns >= opts.max_turns:
            run.status, run.limit = "incomplete", "maxTurns"
            return True
        turn = run.turns
        tools = self._source.tools_for(run.toolkit)
        out = run.output
        if out is not None and out.mode == "tool":
            tools = [*tools, out.declaration()]
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
        native = out.response_format() if out is not None and out.mode == "native" else None
        if run.parts.error is not None:
            raise run.parts.error
        run.model = model
        produced = await self._call_model(
            GenerateRequest(
                model=model,
                messages=run.messages,
                tools=tools or None,
                turn=turn,
                response_format=native,
                parts=run.parts.by_call or None,
            ),
            run.emit,
            run.parts.summaries,
            run.tracer,
        )
        response, usage = produced.response, produced.usage
        run.model = produced.model or model  # a fallback provider's, when it answered
        run.turns += 1
        for key, value in usage.items():
            # cache_read_tokens / cache_write_tokens appear only when a provider says.
            run.usage[key] = run.usage.get(key, 0) + value
        if run.cost is not None:
            cost = cost_of(self._prices, produced.model or model, produced.usage)
            run.cost = None if cost is None else run.cost + cost
        if self._hooks.after_llm is not None:
            await self._llm_hook(
                self._hooks.after_llm, {"response": produced.raw, "model": model, "turn": turn}
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
        if produced.extra:
            assistant.update(produced.extra)  # provider state the wire needs back
        run.messages.append(assistant)
        run.text = response.content
        if run.checkpoint is not None:  # a durable run: the response, before any call
            await run.checkpoint.responded(run, calls)
        # A streamed turn already sent its text as deltas.
        text = "" if produced.streamed else response.content
        if out is not None and settles(out, calls):
            if text and run.emit is not None:
                await run.emit({"type": "text", "delta": text})
            await typed_turn(run, out, calls, response.content)
            return out.settled
        if not calls:
            if text and run.emit is not None:
                await run.emit({"type": "text", "delta": text})
            run.status = "done"
            return True
        await self._turn(run, calls, turn, text)
        if run.suspended:
            run.status, run.text = "pending", run.suspended[0].request.prompt
            return True
        if run.checkpoint is not None:  # the turn's nursery closed: a consistent cut
            await run.checkpoint.step(run)
        return False

    def _call_model(
        self,
        request: GenerateRequest,
        emit: Emit | None = None,
        parts: list[dict[str, Any]] | None = None,
        tracer: Any = _tracing.NOOP,
    ) -> Awaitable[Turn]:
        # Not a coroutine itself (see _drive): the caller awaits the call it returns.
        if tracer is _tracing.NOOP:  # not a run's call (which resolved it once per run)
            tracer = _tracing.tracer(self.options.tracer_provider)
        if tracer is not None:
            call = self._untraced_call(request, emit, parts)
            return traced_call(tracer, self.options, self._source, request, call)
        return self._untraced_call(request, emit, parts)

    async def _untraced_call(
        self,
        request: GenerateRequest,
        emit: Emit | None = None,
        parts: list[dict[str, Any]] | None = None,
    ) -> Turn:
        started = trio.current_time()
        # What the request carried, {"type", "mimeType", "bytes"} each: never base64.
        extra = {"parts": list(parts)} if parts else {}
        try:
            produced = await self._source.turn(request, emit)
        except Exception:
            self._metric(
                {"event": "llm", "model": request.model, "status": "error", "ms": _ms(started),
                 "prompt_tokens": 0, "completion_tokens": 0, **extra}
            )  # fmt: skip
            raise
        usage = produced.usage
        if self.options.on_metric is None and not parts and len(usage) == 3 and not self._prices:
            # Only the registry wants it: no event dict per model call (what
            # _metric_tool does for tools; the fan-out and many-conversations path).
            try:
                self._registry.observe_llm_ok(
                    produced.model or request.model,
                    _ms(started),
                    usage["prompt_tokens"],
                    usage["completion_tokens"],
                )
            except Exception:
                logger.exception("toolnexus_trio: the metrics registry failed on an event")
            return produced
        event: dict[str, Any] = {
            "event": "llm",
            "model": produced.model or request.model,
            "status": "ok",
            "ms": _ms(started),
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            **extra,
        }
        if len(usage) > 3:  # the cache counts, when the provider gave them
            for key in ("cache_read_tokens", "cache_write_tokens"):
                if key in usage:
                    event[key] = usage[key]
        if self._prices:
            event["cost"] = cost_of(self._prices, produced.model or request.model, usage)
        self._metric(event)
        return produced

    async def _llm_hook(self, fn: HookFn, event: dict[str, Any]) -> Any:
        try:
            return await _call_hook(fn, event)
        except Exception as exc:
            name = getattr(fn, "__name__", "hook")
            raise HookError(f"LLM hook {name} failed: {exc}") from exc

    def _metric_run(self, run: _Run, started: float, error: str | None = None) -> None:
        if error is None and self.options.on_metric is None:
            return  # the registry counts only failed runs, and nobody else listens
        event: dict[str, Any] = {
            "event": "run",
            "model": run.model or self.options.model,
            "turns": run.turns,
            "tool_calls": len(run.records),
            "total_tokens": run.usage["total_tokens"],
            "ms": _ms(started),
            "status": run.status,
        }
        if self._prices:
            event["cost"] = run.cost
        if error is not None:
            event["error"] = error
        self._metric(event)


class _EventStream:
    """What :meth:`Client.stream` returns: the run in a background task of its own
    nursery while the block runs. A class rather than an ``@asynccontextmanager``: a
    generator's frame and wrapper would be held per conversation in flight."""

    __slots__ = ("_args", "_manager", "_nursery", "_receive", "_send")

    def __init__(
        self,
        client: Client,
        prompt: Prompt,
        toolkit: Toolkit | None,
        history: Sequence[Message] | None,
        cancel: CancelToken | None,
        typed: Typed,
    ) -> None:
        self._args = (client, prompt, toolkit, history, cancel, typed)
        self._manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None
        self._receive: trio.MemoryReceiveChannel[dict[str, Any]] | None = None
        self._send: trio.MemorySendChannel[dict[str, Any]] | None = None

    async def __aenter__(self) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        client, prompt, toolkit, history, cancel, typed = self._args
        # Size 0: the loop waits for the consumer, so events are never queued up.
        send, receive = trio.open_memory_channel[dict[str, Any]](0)
        run = client._new_run(prompt, toolkit, history, typed)
        # Methods, not closures: nothing more per conversation than this object.
        run.emit = self._emit if run.output is None else partial_emitter(run.output, self._emit)
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._manager, self._nursery, self._receive, self._send = manager, nursery, receive, send
        nursery.start_soon(self._produce, client, run, cancel, send)
        return receive

    async def _emit(self, event: dict[str, Any]) -> None:
        if event["type"] not in (TOOL_ARGS_DELTA, REASONING_DELTA):  # never sent on
            send = self._send
            assert send is not None
            await send.send(event)

    @staticmethod
    async def _produce(
        client: Client,
        run: _Run,
        cancel: CancelToken | None,
        send: trio.MemorySendChannel[dict[str, Any]],
    ) -> None:
        # A synchronous close: an awaiting one could take a Cancelled that would
        # replace the run's own exception.
        with send:
            result = await client._drive(run, cancel, client._loop(run))
            await send.send({"type": "usage", "usage": dict(result.usage)})
            await send.send({"type": "done", "result": result})

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        manager, nursery, receive = self._manager, self._nursery, self._receive
        assert manager is not None
        assert nursery is not None
        assert receive is not None
        self._manager = self._nursery = self._receive = None
        # Cancel first, then close: the loop must see Cancelled, not a
        # BrokenResourceError from an event it was still sending.
        nursery.cancel_scope.cancel(reason="stream closed by its consumer")
        receive.close()
        try:  # collapse_groups() around the nursery, as the block's caller expects
            return bool(await manager.__aexit__(exc_type, exc, tb))
        except BaseExceptionGroup as group:
            reraise_single(group)
            raise  # not reached: reraise_single always raises


def create_in_process_client(options: InProcessOptions) -> Client:
    """A :class:`Client` around a host-supplied ``generate`` (no wire, no key, no retries)."""
    return Client(options)
