"""Options, results and errors of the agent loop (both client kinds share them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import attrs

from .._content import ContentPart
from .._toolkit import Toolkit
from .._tools import ToolResult
from .._wire import Answer, Request
from ..stores._base import ConversationStore
from ._output import OutputInvalid, OutputMode, OutputRun, OutputValidator, output_spec
from ._records import InDoubtCall, RunStatus, SuspendedCall, ToolCallRecord
from ._runjson import run_result_fields, run_result_to_json

Message = dict[str, Any]
"""An OpenAI-shaped chat message (``role``, ``content``, ``tool_calls``, ``tool_call_id``)."""


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
    ``parts`` holds the content parts tools returned this run, by tool call id: they
    are not in the transcript (it stays text and small) but sent with every request;
    live like ``messages``.
    """

    model: str
    messages: Sequence[Message]
    tools: list[dict[str, Any]] | None
    turn: int
    max_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    """Native typed output (``output_mode="native"``): OpenAI's ``{"type": "json_schema",
    "json_schema": {"name", "schema", "strict"}}``; ``None`` otherwise."""
    parts: Mapping[str, tuple[ContentPart, ...]] | None = None


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
Prompt = str | Sequence[ContentPart | str]
"""A run's prompt: a string, or a list of content parts (a str in it is a text part)."""
WaitFor = Callable[[Request], Awaitable[Answer]]
OnMetric = Callable[[dict[str, Any]], None]
InDoubtPolicy = Callable[[InDoubtCall], ToolResult | None]
"""``on_in_doubt``: a call in flight at a crash -> its result, or ``None`` to run it again."""


def timeout_alias(options: Any) -> None:
    """``timeout_ms`` (toolnexus 0.21's name) sets ``run_timeout_ms``; both, unequal, is
    an error (frozen: the one place an options class writes its own field)."""
    alias = options.timeout_ms
    if alias is None:
        return
    if isinstance(alias, bool) or not isinstance(alias, int) or alias < 0:
        raise ValueError(f"timeout_ms must be an integer >= 0, not {alias!r}")
    if options.run_timeout_ms not in (0, alias):
        raise ValueError(
            f"timeout_ms={alias} and run_timeout_ms={options.run_timeout_ms} disagree: "
            "give one (timeout_ms is toolnexus 0.21's name for run_timeout_ms)"
        )
    object.__setattr__(options, "run_timeout_ms", alias)


@attrs.frozen
class InProcessOptions:
    """Options of :func:`create_in_process_client`.

    ``generate`` is ``async (GenerateRequest) -> InProcessResponse`` (a dict with
    ``content`` / ``tool_calls`` / ``usage`` is accepted too); a plain function also
    works and runs in a worker thread. ``wait_for`` resolves §10 suspensions.
    ``system_prompt`` opens a new run's transcript, followed by a blank line and the
    toolkit's :meth:`~toolnexus_trio.Toolkit.skills_prompt` when that is not empty.
    ``tool_timeout_ms`` bounds each tool call, ``run_timeout_ms`` the whole run
    (0 = unbounded). ``on_metric`` receives ``llm``, ``tool`` and ``run`` events (and
    ``progress`` / ``log`` from Tesseron tools). ``store`` keeps the transcripts of
    :meth:`Client.ask` by id (default: a new in-memory store per client).
    ``output_type``, ``output_mode``, ``output_retries`` and ``output_validators`` are
    the defaults of :meth:`Client.run`'s keywords of the same names (see "Typed
    results" in the docs).
    ``max_part_bytes`` caps a content part's decoded bytes as for
    :class:`~toolnexus_trio.ClientOptions`.
    ``durable`` makes each :meth:`Client.ask` with an id a crash-durable run (the
    ``store`` must be a :class:`~toolnexus_trio.stores.CheckpointStore`), owned
    under a lease of ``lease_ms`` renewed while it runs; ``on_in_doubt`` decides, on
    :meth:`Client.recover`, what a call in flight at the crash becomes (see
    "Crash-durable runs" in the docs; off by default, and nothing changes then).
    ``tracer_provider``, ``meter_provider`` and ``capture_content``: OpenTelemetry
    spans and metrics (see :doc:`tracing`); the global providers by default.
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
    store: ConversationStore | None = None
    max_part_bytes: int | None = None
    timeout_ms: int | None = None
    """toolnexus 0.21's name for ``run_timeout_ms`` (either may be given)."""
    output_type: Any = None
    output_mode: OutputMode = "tool"
    output_retries: int = 1
    output_validators: Sequence[OutputValidator] = ()
    durable: bool = False
    lease_ms: int = 30_000
    on_in_doubt: InDoubtPolicy | None = None
    tracer_provider: Any = None
    meter_provider: Any = None
    capture_content: bool = False

    def __attrs_post_init__(self) -> None:
        timeout_alias(self)


@attrs.frozen
class RunResult:
    """The outcome of a run.

    ``status`` is ``"done"``, ``"pending"`` (a tool suspended and there is no
    ``wait_for``; ``pending`` is the first suspended request in call order),
    ``"incomplete"`` (``limit`` says which limit: ``"maxTurns"``, or ``"runTimeout"`` on
    :attr:`RunTimeout.result`) or ``"cancelled"``
    (the run's token was cancelled). ``messages`` is the whole transcript, balanced:
    every tool call has its tool message. ``cost`` is what the run's model calls cost
    at the HTTP client's ``prices`` (``None`` without prices, or when a call's model
    has none: never a guess); :meth:`to_json` keeps it, so a run resumed from its
    JSON goes on adding to it.
    ``model`` is the model that answered the last turn (a ``before_llm`` hook's per-turn
    override, or a fallback provider's), else the configured one. ``trace_parent``: the
    span of a pending run while tracing is on (kept by :meth:`to_json`), so that
    :meth:`Client.resume` links its span to it.

    ``output`` is the typed value of a run with an ``output_type`` (``None`` without
    one); a run that ran out of ``output_retries`` ends ``"incomplete"`` with
    ``limit="output"`` and keeps the last invalid value, as the model sent it (decoded
    JSON), in ``output``.
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
    output: Any = None
    cost: float | None = None
    _toolkit: Toolkit | None = attrs.field(default=None, repr=False, eq=False, alias="toolkit")
    # The W3C traceparent of a pending run's span (tracing on only): a resume links to it.
    trace_parent: str | None = attrs.field(default=None, repr=False, eq=False)
    # A pending typed run's output state, for Client.resume in this process.
    _output_state: OutputRun | None = attrs.field(
        default=None, repr=False, eq=False, alias="output_state"
    )

    @property
    def tool_call_count(self) -> int:
        """``len(tool_calls)``."""
        return len(self.tool_calls)

    def to_json(self) -> dict[str, Any]:
        """A versioned, JSON-safe form: ``{"version": 1, ...}``, for :meth:`from_json`.

        It holds what :meth:`Client.resume` needs (transcript, tool-call records, turns,
        usage, model, status, and each suspended call with its ``Request`` and where its
        placeholder sits), never the toolkit or another live object. Every key is
        written (``null`` when empty), except ``output`` and ``cost``, written only
        when the run has one (``output`` in its JSON form). Tool metadata values that
        are not JSON become their ``repr``; a transcript, arguments or a ``Request``
        that are not JSON raise :class:`ValueError`, and so does a result that
        :meth:`from_json` would refuse (a negative usage count, a suspended call that
        does not point at its own tool message...): what ``to_json`` writes, ``from_json`` reads.
        """
        return run_result_to_json(self)

    @classmethod
    def from_json(cls, data: Any, *, output_type: Any = None) -> RunResult:
        """Read a :meth:`to_json` document (after ``json.loads``, in any process).

        A newer version, a missing or unknown key, a value of the wrong JSON kind or
        parts that disagree (a suspended call that does not point at its own tool
        message) raise :class:`ValueError` saying which and why. The result has no
        toolkit: pass ``toolkit=`` to :meth:`Client.resume`.

        ``output`` is saved as JSON; with *output_type* (the run's), a ``done`` result's
        output is built back into that type (a value that no longer fits raises
        :class:`ValueError`); without, it stays the decoded JSON. A document written
        before typed results (no ``output`` key) reads as ``output=None``.
        """
        fields = run_result_fields(data)
        if output_type is not None and fields["output"] is not None and fields["status"] == "done":
            try:
                fields["output"] = output_spec(output_type).build(fields["output"])
            except OutputInvalid as exc:
                raise ValueError(f"RunResult.from_json: output: {exc}") from None
        return cls(**fields)


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
    """The model call failed: ``generate`` raised or returned something that is not a
    model message, or the HTTP call failed for good (after its retries), or its answer
    was not a valid response of the wire style.
    """

    status: int | None = None
    """The HTTP status of the last failed attempt, when the model answered with one."""


class ProviderError(GenerateError):
    """The model's server answered with an HTTP error, for good (after its retries).

    The typed form of toolnexus 0.21's ``ProviderError(status, body, retry_after)``:
    ``status`` is the HTTP status; ``body`` the whole error body as read (up to 64 KiB),
    secrets and account identifiers redacted and empty for 401 and 403 (see
    :func:`toolnexus_trio.models.safe_error_body`); ``retry_after`` the raw
    ``Retry-After`` header, kept verbatim even when the wait rule ignores it (an
    HTTP-date). The message quotes the body cut to ``MAX_ERROR_BODY`` characters; the
    cap is for the message only.
    """

    status: int

    def __init__(
        self, message: str, *, status: int, body: str = "", retry_after: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after = retry_after


FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


@attrs.frozen
class TranslatedToolCall:
    """One tool call read back from a provider: ``arguments`` is a JSON string."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class TranslateResult:
    """What :meth:`Client.translate` returns (SPEC §11), OpenAI-shaped.

    ``tool_calls`` are in provider order, none dropped. ``finish_reason`` is
    ``"tool_calls"`` whenever there is a tool call, else ``"length"``,
    ``"content_filter"`` or ``"stop"``. ``usage`` has ``prompt_tokens``,
    ``completion_tokens`` and ``total_tokens``; ``raw`` is the provider's decoded
    response (for the in-process client: what ``generate`` returned).
    """

    text: str
    tool_calls: tuple[TranslatedToolCall, ...]
    finish_reason: FinishReason
    usage: dict[str, int]
    model: str
    raw: Any = None
