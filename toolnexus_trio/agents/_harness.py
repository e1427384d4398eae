"""The harness (toolnexus 0.15): guardrails, the completion gate and :class:`Loop`.

- :func:`guarded_hooks` compiles guardrails into one ``before_tool``, placed before an
  existing one: the first guardrail that does not allow the call denies it with a
  ``denied: <reason>`` error result, so the tool is never entered.
- :func:`run_gated` wraps runs in the completion gate (:class:`Completion`); the agent
  runtime uses it for a def that carries one (:func:`gated_turn`), so the gate reaches
  a delegated child through the registry, as the guardrails do through ``hooks``.
- :class:`Loop` is a §8 client per run over a toolkit, with the agent's soul, model and
  turn budget as defaults and the history of its earlier runs.

A verifier runs inside the run's own deadline and cancel token: one that hangs ends
with the run (``RunTimeout`` or ``status="cancelled"``), never after it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._cancel import CancelToken
from .._toolkit import Toolkit
from .._tools import ToolResult
from ..loop._client import create_in_process_client
from ..loop._results import Hooks, InProcessOptions, Message, RunResult, RunTimeout
from ..models._create import create_client
from ..models._options import ClientOptions
from ._completion import LIMIT_COMPLETION, RETRY_PROMPT, Completion, Verdict
from ._types import LIMIT_MAX_TURNS, Handle

if TYPE_CHECKING:
    from ._level1 import Agent
    from ._turn import Turns

Guardrail = Callable[[dict[str, Any]], "str | None"]
"""A guardrail: a sync function of the ``before_tool`` event answering ``"allow"``,
``None`` (allow too) or the reason to deny the call."""

Attempt = Callable[[str, "Sequence[Message] | None"], Awaitable["RunResult | None"]]


def harness(**spec: Any) -> dict[str, Any]:
    """The harness spec, returned unchanged: a name for the dict of :func:`agent`
    keyword arguments (``agent(**harness(does=..., guardrails=[...]))``)."""
    return spec


# -- guardrails -------------------------------------------------------------------------


def _label(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def guarded_hooks(
    guardrails: Sequence[Guardrail], hooks: Hooks | Mapping[str, Any] | None = None
) -> Hooks:
    """*hooks* with *guardrails* compiled into one ``before_tool`` that runs first.

    Each guardrail is called in order with the ``before_tool`` event; the first one
    that answers neither ``"allow"`` nor ``None`` denies the call: the hook returns
    ``{"result": ToolResult(output="denied: <reason>", is_error=True)}`` and neither the
    later guardrails, the prior ``before_tool`` nor the tool run. When all allow, the
    prior ``before_tool`` (if any) decides as before. Guardrails are sync: one that
    returns a coroutine or anything but a string raises :class:`TypeError` (the loop
    then records the call as failed, the tool not run) instead of silently denying
    or allowing. No guardrail: *hooks* unchanged.
    """
    base = Hooks(**hooks) if isinstance(hooks, Mapping) else (hooks or Hooks())
    rails: tuple[Any, ...] = tuple(guardrails)  # Any: checked here, whatever was passed
    for rail in rails:
        if not callable(rail):
            raise TypeError(f"a guardrail must be callable, not {type(rail).__name__}")
    if not rails:
        return base
    prior = base.before_tool

    def before_tool(event: dict[str, Any]) -> Any:
        for rail in rails:
            verdict = rail(event)
            if inspect.iscoroutine(verdict):
                verdict.close()  # never awaited, and no warning about it either
                raise TypeError(
                    f"guardrail {_label(rail)} returned a coroutine: guardrails are sync "
                    "(put an async check in before_tool)"
                )
            if verdict is None or verdict == "allow":
                continue
            if not isinstance(verdict, str):
                raise TypeError(
                    f"guardrail {_label(rail)} returned {type(verdict).__name__}, not "
                    "'allow', None or a reason (use before_tool for anything else)"
                )
            return {"result": ToolResult.error(f"denied: {verdict}")}
        return prior(event) if prior is not None else None

    return attrs.evolve(base, before_tool=before_tool)


# -- the completion gate ------------------------------------------------------------------


@attrs.frozen
class Gated:
    """What :func:`run_gated` gives: the final result (its ``tool_calls`` and ``turns``
    accumulated over the attempts), how many runs it took, and why it stopped."""

    result: RunResult
    attempts: int
    stopped_by: str = ""


def _verdict(out: Any) -> Verdict:
    if isinstance(out, Verdict):
        return out
    if isinstance(out, bool):
        return Verdict(out)
    raise TypeError(f"completion.verify returned {type(out).__name__}, not a Verdict")


async def _verify(
    completion: Completion, seen: RunResult, cancel: CancelToken, deadline: float
) -> Verdict | None:
    """The verdict, or ``None`` when the run's token or deadline ended the verifier."""
    with trio.CancelScope(deadline=deadline) as scope, cancel.bound(scope):
        await trio.lowlevel.checkpoint_if_cancelled()
        out = completion.verify(seen)
        if inspect.isawaitable(out):
            out = await out
        return _verdict(out)
    return None  # reached only when the scope caught its own cancel


async def run_gated(
    completion: Completion | None,
    attempt: Attempt,
    prompt: str,
    history: Sequence[Message] | None,
    cancel: CancelToken,
    *,
    deadline: float = math.inf,
    timeout_ms: int = 0,
) -> Gated | None:
    """Run *attempt* on *prompt* under the completion gate (see :class:`Completion`).

    A run that does not end ``done`` returns as it is (pending, a budget stop, a
    cancel); when a retry was under way, a non-pending one gets
    `` [while verifying: attempt <k> last failed: <reason>]`` appended. The verifier
    runs inside *deadline* (``RunTimeout`` naming *timeout_ms* when it passes) and
    *cancel* (``status="cancelled"``). ``None`` when *attempt* ran nothing.
    """
    result = await attempt(prompt, history)
    if result is None or completion is None:
        return None if result is None else Gated(result, 1)
    calls = list(result.tool_calls)
    turns = result.turns
    k, reason = 1, ""
    while True:
        seen = attrs.evolve(result, tool_calls=list(calls), turns=turns)
        if result.status != "done":
            if k > 1 and result.status != "pending":
                text = f"{result.text} [while verifying: attempt {k} last failed: {reason}]"
                seen = attrs.evolve(seen, text=text)
            return Gated(seen, k)
        verdict = await _verify(completion, seen, cancel, deadline)
        if verdict is None:
            if cancel.is_cancelled:
                return Gated(attrs.evolve(seen, status="cancelled", text=""), k)
            late = attrs.evolve(seen, status="incomplete", limit="runTimeout")
            raise RunTimeout(f"run timeout after {timeout_ms}ms", late)
        if verdict.ok:
            return Gated(seen, k)
        reason = verdict.reason
        if k >= completion.max_attempts:
            text = f"completion.verify failed {k}x: {reason}"
            final = attrs.evolve(seen, status="incomplete", limit=LIMIT_COMPLETION, text=text)
            return Gated(final, k, text)
        k += 1
        again = await attempt(RETRY_PROMPT.format(reason=reason), result.messages)
        if again is None:
            return None
        result = again
        calls.extend(result.tool_calls)
        turns += result.turns


async def gated_turn(
    turns: Turns,
    h: Handle,
    text: str,
    history: Sequence[Message] | None,
    token: CancelToken,
    first: Callable[[], Awaitable[RunResult]] | None = None,
) -> RunResult | None:
    """A wake's run of a runtime handle whose def carries a :class:`Completion`: each
    attempt gets what is left of the handle's turn budget; one that finds it spent
    stops the handle on ``maxTurns`` (the caller's ``None``). *first*, when given, is
    the first attempt: the resume of a run halted on a §10 request, so an approval
    never lets a run past the gate (its attempts count afresh from there)."""
    assert h.defn is not None
    toolkit = turns.toolkit(h)
    resume = [first] if first is not None else []

    async def attempt(prompt: str, past: Sequence[Message] | None) -> RunResult | None:
        if resume:
            return await resume.pop()()
        allowance = turns._max_turns(h)
        if allowance <= 0:
            h.stop_reason, h.stop_limit = "limit", LIMIT_MAX_TURNS
            return None
        client = turns.client(h, allowance)
        return await client.run(prompt, toolkit, history=past, cancel=token)

    gated = await run_gated(h.defn.completion, attempt, text, history, token)
    return None if gated is None else gated.result


# -- Loop -----------------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """What :meth:`Loop.run` gives: the final ``text`` and ``status``, ``stopped_by``
    (``""``, or the gate's ``completion.verify failed <n>x: <reason>``), ``attempts``
    (runs made), ``turns`` (model round trips of this call) and the last
    :class:`~toolnexus_trio.RunResult` (its ``tool_calls`` accumulated over attempts)."""

    text: str
    status: str
    stopped_by: str
    attempts: int
    turns: int
    result: RunResult


Options = InProcessOptions | ClientOptions


def _options(agent: Agent, given: Options | Mapping[str, Any]) -> Options:
    """The client options of a Loop: the caller's, with the agent's as defaults.

    A mapping is the peer's shape (keys of the options classes; ``generate`` makes it
    in-process); a key it leaves out is absent. For an options instance a field left at
    its default is absent. ``model`` ``"inherit"`` (or ``""``) is absent too.
    """
    if isinstance(given, Mapping):
        fields = dict(given)
        kind: type[Options] = InProcessOptions if "generate" in fields else ClientOptions
    elif isinstance(given, InProcessOptions | ClientOptions):
        kind = type(given)
        fields = {
            a.alias: getattr(given, a.name)
            for a in attrs.fields(kind)
            if a.init and (_required(a) or getattr(given, a.name) != _default(a))
        }
    else:
        raise TypeError(
            f"client_options must be a dict, InProcessOptions or ClientOptions, "
            f"not {type(given).__name__}"
        )
    defn = agent.definition
    if fields.get("system_prompt") is None and defn.system_prompt:
        fields["system_prompt"] = defn.system_prompt
    if fields.get("model") in (None, "", "inherit"):
        fields["model"] = "" if defn.model in ("", "inherit") else defn.model
    if "max_turns" not in fields and defn.budget is not None and defn.budget.max_turns:
        fields["max_turns"] = defn.budget.max_turns
    if agent.guardrails and "hooks" in fields:
        # The caller's hooks replace the agent's, but the guardrails always run first.
        fields["hooks"] = guarded_hooks(agent.guardrails, fields["hooks"])
    elif defn.hooks is not None and "hooks" not in fields:
        fields["hooks"] = defn.hooks
    return kind(**fields)


_PRESENT = object()  # compares unequal to any value: the field counts as given


def _default(a: Any) -> Any:
    default = a.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return _PRESENT if default.takes_self else default.factory()
    return default


def _required(a: Any) -> bool:
    return bool(a.init and a.default is attrs.NOTHING)


class Loop:
    """An agent run as a plain §8 loop (``agent.loop(client_options, toolkit)``).

    Each :meth:`run` builds a client from the options, runs over *toolkit* with the
    transcript of the earlier runs, under the agent's completion gate and guardrails.
    The caller's ``system_prompt`` wins over the soul (the soul is the default); the
    agent's ``model`` and ``budget.max_turns`` are defaults. ``status`` is ``"idle"``,
    ``"running"``, ``"error"`` (the last run raised) or the last run's status when it
    was not ``done``; ``turns`` counts model round trips across runs. One run at a
    time: a second concurrent :meth:`run` raises :class:`RuntimeError`.
    """

    def __init__(
        self, agent: Agent, client_options: Options | Mapping[str, Any], toolkit: Toolkit | None
    ) -> None:
        self._agent = agent
        self._options = _options(agent, client_options)
        self._toolkit = toolkit
        self._history: list[Message] | None = None
        self.status = "idle"
        self.turns = 0

    async def run(
        self, prompt: str, model: str = "", *, cancel: CancelToken | None = None
    ) -> Outcome:
        """Run *prompt* (with *model* for this call only, when given) to an
        :class:`Outcome`. ``run_timeout_ms`` bounds the whole call, every attempt and
        verifier included; *cancel* ends it with ``status="cancelled"``."""
        if self.status == "running":
            raise RuntimeError("a Loop runs one prompt at a time")
        options = self._options
        if model and model != "inherit":
            options = attrs.evolve(options, model=model)
        token = cancel or CancelToken()
        timeout_ms = options.run_timeout_ms
        deadline = trio.current_time() + timeout_ms / 1000 if timeout_ms > 0 else math.inf

        async def attempt(text: str, past: Sequence[Message] | None) -> RunResult:
            step = options
            if deadline < math.inf:
                left = math.ceil((deadline - trio.current_time()) * 1000)
                step = attrs.evolve(options, run_timeout_ms=max(1, left))
            factory: Any = (
                create_in_process_client if isinstance(step, InProcessOptions) else create_client
            )
            async with factory(step) as client:
                try:
                    result: RunResult = await client.run(
                        text, self._toolkit, history=past, cancel=token
                    )
                except RunTimeout as exc:
                    # One budget for the whole call: name it, not what was left of it.
                    raise RunTimeout(f"run timeout after {timeout_ms}ms", exc.result) from None
            self.turns += result.turns
            return result

        self.status = "running"
        try:
            gated = await run_gated(
                self._agent.definition.completion,
                attempt,
                prompt,
                self._history,
                token,
                deadline=deadline,
                timeout_ms=timeout_ms,
            )
        except Exception:
            self.status = "error"
            raise
        finally:
            if self.status == "running":  # an enclosing scope's cancel: nothing settled
                self.status = "idle"
        assert gated is not None  # a Loop's attempt always runs
        result = gated.result
        self._history = list(result.messages)
        self.status = "idle" if result.status == "done" else result.status
        return Outcome(
            result.text, result.status, gated.stopped_by, gated.attempts, result.turns, result
        )


def loop_unsupported(agent: Agent) -> list[str]:
    """The canonical names of the agent's settings a :class:`Loop` cannot honour, in
    this order: ``tools`` (its ``uses``), ``team``, ``waitFor``, ``onMetric``; ``[]``
    when none is set."""
    defn = agent.definition
    found = [
        ("tools", bool(defn.tools)),
        ("team", bool(defn.task_targets)),
        ("waitFor", defn.wait_for is not None),
        ("onMetric", defn.on_metric is not None),
    ]
    return [name for name, present in found if present]
