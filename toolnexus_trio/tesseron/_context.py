"""``ActionContext``: what a handler gets besides its input.

Design (see also :mod:`._connection` and :mod:`._invocations`):

- One :class:`_Invocation` per ``actions/invoke`` holds the shared state: ids, the
  invocation's cancel scope, the "cancel requested" flag and the progress ceiling
  (the highest percent sent).
  :meth:`ActionContext.clone` makes a new context over the *same* state, so clones
  share the ceiling, the connection and the cancellation.
- Progress and log are notifications written straight to the connection's writer;
  after a transport drop they are silent no-ops.
- ``sample`` / ``confirm`` / ``elicit`` send a frozen :class:`_OutboundRequest`, carrying
  a one-shot reply channel, over the connection's size-0 request channel. The
  connection's servicing task assigns the outbound id and sends the frame; the read
  loop routes the response back. On a drop every pending request is failed with
  ``TRANSPORT_CLOSED`` (-32010) synchronously, and later requests fail at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs
import trio

from .._converter import describe_structure_error
from .._schema import SchemaError, compile_schema, schema_for_type
from ._errors import ActionError, TesseronErrorCode, transport_closed
from ._wire import (
    PERCENT_TAILS,
    Agent,
    Capabilities,
    ElicitationParams,
    LogLevel,
    LogParams,
    SamplingParams,
    clamp_percent,
    notification_frame,
    payloads,
    progress_frame,
    progress_head,
    unstructure,
)

if TYPE_CHECKING:
    from .._schema import Validator

__all__ = ["ActionContext", "ElicitRequest", "LogEntry", "SampleRequest"]

T = TypeVar("T")

CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
"""The schema ``confirm`` sends: no fields, so clients render a plain accept/decline."""

DEFAULT_ELICIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"response": {"type": "string", "description": "Your response"}},
    "required": ["response"],
}
"""The permissive single-text-field schema used when an elicit request has none."""

_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})


# ---------------------------------------------------------------------------
# Request values
# ---------------------------------------------------------------------------


@attrs.frozen
class SampleRequest:
    """A request for the agent's model: :meth:`ActionContext.sample`."""

    prompt: str
    """The prompt."""
    max_tokens: int | None = None
    """Cap on the answer's length (the gateway defaults it)."""
    schema: dict[str, Any] | None = None
    """JSON Schema of a structured answer; the answer is decoded and validated against it."""

    @classmethod
    def for_type(cls, tp: type[Any], prompt: str, max_tokens: int | None = None) -> SampleRequest:
        """A request whose schema is derived from *tp* (typically an attrs class)."""
        return cls(prompt=prompt, max_tokens=max_tokens, schema=schema_for_type(tp))


@attrs.frozen
class ElicitRequest:
    """A question for the user: :meth:`ActionContext.elicit`."""

    question: str
    """The question shown to the user."""
    schema: dict[str, Any] | None = None
    """A flat object schema of primitive properties; ``None`` asks for one text answer."""

    @classmethod
    def for_type(cls, tp: type[Any], question: str) -> ElicitRequest:
        """A request whose form schema is derived from the attrs class *tp*."""
        return cls(question=question, schema=schema_for_type(tp))


@attrs.frozen
class LogEntry:
    """A log entry for :meth:`ActionContext.log`; build with :meth:`info` and friends."""

    level: LogLevel
    """``debug``, ``info``, ``warn`` or ``error``."""
    message: str
    """The message."""
    metadata: dict[str, Any] | None = None
    """Structured metadata (sent as ``meta``); set it with :meth:`meta`."""

    @classmethod
    def debug(cls, message: str) -> LogEntry:
        """A ``debug`` entry."""
        return cls("debug", message)

    @classmethod
    def info(cls, message: str) -> LogEntry:
        """An ``info`` entry."""
        return cls("info", message)

    @classmethod
    def warn(cls, message: str) -> LogEntry:
        """A ``warn`` entry."""
        return cls("warn", message)

    @classmethod
    def error(cls, message: str) -> LogEntry:
        """An ``error`` entry."""
        return cls("error", message)

    def meta(self, meta: Mapping[str, Any]) -> LogEntry:
        """A copy with *meta* merged into the metadata."""
        return attrs.evolve(self, metadata={**(self.metadata or {}), **meta})


# ---------------------------------------------------------------------------
# Plumbing shared with the connection
# ---------------------------------------------------------------------------


@attrs.frozen
class _Reply:
    result: Any = None
    error: ActionError | None = None


@attrs.define(eq=False)
class _OutboundRequest:
    """A host-to-gateway request travelling to the connection's servicing task."""

    method: str
    params: Any
    reply: trio.MemorySendChannel[_Reply]
    id: int | None = None
    """The outbound JSON-RPC id, once the servicing task has sent the request."""


class _Session(Protocol):
    """What a context needs from its connection (implemented by ``_Connection``)."""

    @property
    def closed(self) -> bool: ...
    @property
    def capabilities(self) -> Capabilities: ...
    @property
    def agent(self) -> Agent: ...
    @property
    def requests(self) -> trio.MemorySendChannel[_OutboundRequest]: ...
    async def notify_room(self) -> bool: ...
    def notify_nowait(self, frame: str) -> None: ...
    def abandon(self, request: _OutboundRequest) -> None: ...


class _Invocation:
    """State of one running invocation, shared by all clones of its context."""

    __slots__ = (
        "_event",
        "_progress_head",
        "action_name",
        "answered",
        "cancel_requested",
        "deadline",
        "highest",
        "invocation_id",
        "origin",
        "request_id",
        "route",
        "scope",
    )

    def __init__(
        self,
        request_id: Any,
        invocation_id: str,
        action_name: str,
        origin: str,
        route: str | None,
        deadline: float,
    ) -> None:
        self.request_id = request_id
        self.invocation_id = invocation_id
        self.action_name = action_name
        self.origin = origin
        self.route = route
        self.deadline = deadline
        self.scope = trio.CancelScope()
        self.answered = False
        self.cancel_requested = False
        # The highest percent sent, shared by every clone of the context (see
        # ActionContext.progress for why no lock guards it).
        self.highest = 0
        # Created on first use: most invocations never wait for cancellation, and
        # 10,000 concurrent invocations should stay small.
        self._event: trio.Event | None = None
        self._progress_head: str | None = None

    def percent_frame(self, percent: int) -> str:
        """The ``actions/progress`` frame of a bare percent (0..100) for this invocation.

        The envelope up to the invocation id is encoded once (0.04 us a frame
        instead of 0.15 us; the slot fits the object's existing 128-byte size).
        """
        head = self._progress_head
        if head is None:
            head = self._progress_head = progress_head(self.invocation_id)
        return head + PERCENT_TAILS[percent]

    def event(self) -> trio.Event:
        if self._event is None:
            self._event = trio.Event()
            if self.cancel_requested:
                self._event.set()
        return self._event

    def cancel(self) -> None:
        """Flag cancellation and cancel the handler's scope (its answer went out already)."""
        self.cancel_requested = True
        if self._event is not None:
            self._event.set()
        self.scope.cancel()


# ---------------------------------------------------------------------------
# ActionContext
# ---------------------------------------------------------------------------


class ActionContext:
    """Per-invocation handle passed to every action handler.

    It identifies the action and invocation, exposes the negotiated capabilities and
    carries the connection used for progress, logs, sampling and elicitation. It is
    cheap to :meth:`clone`; clones share the progress ceiling, the connection and the
    cancellation.

    Cancellation: an ``actions/cancel`` or a timeout is answered (``-32001`` /
    ``-32002``) *first*, and then the handler's cancel scope is cancelled. A handler
    that shields itself or ignores cancellation keeps running inside the connection's
    nursery after its answer went out; its late result is dropped.

    After a transport drop, :meth:`progress` and :meth:`log` are silent no-ops and the
    request methods raise :class:`ActionError` with ``TRANSPORT_CLOSED`` (-32010).
    """

    __slots__ = ("_inv", "_session")

    def __init__(self, invocation: _Invocation, session: _Session) -> None:
        self._inv = invocation
        self._session = session

    def clone(self) -> ActionContext:
        """A context for the same invocation (shared ceiling, connection and cancellation)."""
        return ActionContext(self._inv, self._session)

    # -- identity -----------------------------------------------------------

    @property
    def action_name(self) -> str:
        """The name of the invoked action."""
        return self._inv.action_name

    @property
    def invocation_id(self) -> str:
        """The gateway's ``invocationId``."""
        return self._inv.invocation_id

    @property
    def origin(self) -> str:
        """The origin of the invocation (the app's declared origin unless the client gave one)."""
        return self._inv.origin

    @property
    def route(self) -> str | None:
        """The client's route, when the gateway sent one (the reference gateway does not)."""
        return self._inv.route

    @property
    def agent(self) -> Agent:
        """The calling agent (updated by ``tesseron/claimed``)."""
        return self._session.agent

    @property
    def agent_capabilities(self) -> Capabilities:
        """The negotiated capabilities (updated by ``tesseron/claimed``)."""
        return self._session.capabilities

    # -- cancellation -------------------------------------------------------

    def is_cancelled(self) -> bool:
        """Whether cancellation (``actions/cancel``, timeout or a drop) was requested."""
        return self._inv.cancel_requested

    async def cancelled(self) -> None:
        """Wait until cancellation is requested; returns at once if it already was.

        Useful beside a long operation that should not itself be cancelled, e.g.
        inside a shielded scope.
        """
        inv = self._inv
        if inv.cancel_requested:
            await trio.lowlevel.checkpoint()
            return
        await inv.event().wait()

    # -- notifications --------------------------------------------------------

    async def progress(
        self, percent: float | None = None, message: str | None = None, data: Any = None
    ) -> None:
        """Send an ``actions/progress`` update; fire-and-forget, it never raises ActionError.

        *percent* becomes an integer clamped to 0..100; a value below the highest one
        already sent by this invocation (by any clone) is raised to that value. The
        message and data still go out. After a transport drop this does nothing.
        It is a cancellation point; it yields to other tasks only when the writer is
        above its high-water mark (backpressure for progress storms).
        """
        session = self._session
        if session.closed:
            await trio.lowlevel.checkpoint()
            return
        # Room first, then compare, build and queue the frame without awaiting: no
        # other clone can put a frame in between, so the ceiling needs no lock (a
        # trio.Lock per invocation cost 0.5 us per update and 420 bytes).
        if not await session.notify_room():
            return
        inv = self._inv
        # An in-range int needs no clamping (the common case in a progress storm).
        raw: object = percent
        value = raw if type(raw) is int and 0 <= raw <= 100 else clamp_percent(raw, 0)
        if value is None:
            # No usable percent (absent, NaN, or not a number): the rest still goes out.
            session.notify_nowait(progress_frame(inv.invocation_id, None, message, data))
            return
        if value < inv.highest:
            value = inv.highest
        inv.highest = value
        if message is None and data is None:
            session.notify_nowait(inv.percent_frame(value))
        else:
            session.notify_nowait(progress_frame(inv.invocation_id, value, message, data))

    async def log(self, entry: LogEntry) -> None:
        """Send a ``log`` notification for this invocation; a no-op after a drop."""
        session = self._session
        if session.closed:
            await trio.lowlevel.checkpoint()
            return
        if not await session.notify_room():  # room first, then build the frame
            return
        params = LogParams(
            level=entry.level,
            message=entry.message,
            invocation_id=self._inv.invocation_id,
            meta=entry.metadata,
        )
        session.notify_nowait(notification_frame("log", unstructure(params)))

    # -- requests -------------------------------------------------------------

    async def _request(self, method: str, params: Any) -> Any:
        session = self._session
        if session.closed:
            raise transport_closed()
        # One-shot reply: size 1 so the routing side's send_nowait never blocks.
        reply_send, reply_recv = trio.open_memory_channel[_Reply](1)
        request = _OutboundRequest(method, params, reply_send)
        with reply_recv:
            try:
                await session.requests.send(request)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise transport_closed() from None
            try:
                # A drop right after the handoff has already filled the reply with
                # TRANSPORT_CLOSED: take it before a cancellation can hide it.
                reply = reply_recv.receive_nowait()
            except trio.WouldBlock:
                try:
                    reply = await reply_recv.receive()
                except trio.EndOfChannel:
                    raise transport_closed() from None
                finally:
                    # Abandoned (cancelled): forget the entry, the gateway may never answer.
                    session.abandon(request)
            except trio.EndOfChannel:
                raise transport_closed() from None
        if reply.error is not None:
            raise reply.error
        return reply.result

    def _check_open(self) -> None:
        if self._session.closed:
            raise transport_closed()

    async def sample(self, request: SampleRequest) -> Any:
        """Ask the agent's model; returns the answer as JSON data.

        With a ``schema`` the answer is decoded (a JSON string is parsed) and validated;
        a mismatch raises ``HANDLER_ERROR`` (-32005). Without sampling negotiated this
        raises ``SAMPLING_NOT_AVAILABLE`` (-32006) and sends nothing. Gateway errors
        (e.g. ``-32008 {depth, max}``) are raised with their data.
        """
        self._check_open()
        if not self._session.capabilities.sampling:
            raise ActionError(TesseronErrorCode.SAMPLING_NOT_AVAILABLE, "Sampling is not available")
        validator = _compile_or_invalid(request.schema) if request.schema is not None else None
        params = SamplingParams(
            invocation_id=self._inv.invocation_id,
            prompt=request.prompt,
            schema=request.schema,
            max_tokens=request.max_tokens,
        )
        result = await self._request("sampling/request", unstructure(params))
        content = result.get("content") if isinstance(result, dict) else result
        if validator is None:
            return content
        return _decode_sample(content, validator)

    async def sample_as(self, cls: type[T], request: SampleRequest) -> T:
        """Like :meth:`sample`, then structure the answer into *cls* (-32005 on mismatch).

        When *request* has no schema, it is derived from *cls*.
        """
        if request.schema is None:
            request = attrs.evolve(request, schema=schema_for_type(cls))
        value = await self.sample(request)
        return _structure(value, cls, "Sampling result")

    async def confirm(self, question: str) -> bool:
        """Ask a yes/no question; ``True`` only for an explicit accept.

        Without elicitation negotiated this returns ``False`` and sends nothing.
        Decline and cancel give ``False``; a gateway error is raised.
        """
        self._check_open()
        if not self._session.capabilities.elicitation:
            await trio.lowlevel.checkpoint()
            return False
        params = ElicitationParams(
            invocation_id=self._inv.invocation_id, question=question, schema=CONFIRM_SCHEMA
        )
        result = await self._request("elicitation/request", unstructure(params))
        return isinstance(result, dict) and result.get("action") == "accept"

    async def elicit(self, request: ElicitRequest) -> Any:
        """Ask the user; returns the accepted value, or ``None`` on decline or cancel.

        Without elicitation negotiated this raises ``ELICITATION_NOT_AVAILABLE`` (-32007)
        and sends nothing. A schema that is not a flat object of primitive properties
        raises ``INVALID_PARAMS`` (-32602) before anything is sent.
        """
        self._check_open()
        if not self._session.capabilities.elicitation:
            raise ActionError(
                TesseronErrorCode.ELICITATION_NOT_AVAILABLE, "Elicitation is not available"
            )
        schema = DEFAULT_ELICIT_SCHEMA if request.schema is None else request.schema
        check_elicit_schema(schema)
        params = ElicitationParams(
            invocation_id=self._inv.invocation_id, question=request.question, schema=schema
        )
        result = await self._request("elicitation/request", unstructure(params))
        if isinstance(result, dict) and result.get("action") == "accept":
            return result.get("value")
        return None

    async def elicit_as(self, cls: type[T], request: ElicitRequest) -> T | None:
        """Like :meth:`elicit`, then validate and structure the answer into *cls*.

        When *request* has no schema, it is derived from *cls*. A mismatch raises
        ``HANDLER_ERROR`` (-32005); decline and cancel give ``None``.
        """
        self._check_open()
        if not self._session.capabilities.elicitation:
            raise ActionError(
                TesseronErrorCode.ELICITATION_NOT_AVAILABLE, "Elicitation is not available"
            )
        if request.schema is None:
            request = attrs.evolve(request, schema=schema_for_type(cls))
        assert request.schema is not None
        validator = _compile_or_invalid(request.schema)
        value = await self.elicit(request)
        if value is None:
            return None
        issues = validator.issues(value)
        if issues:
            raise ActionError.handler(
                "Elicitation result does not match the schema",
                {"issues": [i.to_json() for i in issues]},
            )
        return _structure(value, cls, "Elicitation result")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _compile_or_invalid(schema: Mapping[str, Any]) -> Validator:
    try:
        return compile_schema(schema)
    except SchemaError as exc:
        raise ActionError(TesseronErrorCode.INVALID_PARAMS, f"Invalid schema: {exc}") from exc


def _decode_sample(content: Any, validator: Validator) -> Any:
    value = content
    if isinstance(content, str):
        try:
            value = json.loads(content)
        except ValueError as exc:
            # A plain string may itself be what the schema asks for.
            if not validator.issues(content):
                return content
            raise ActionError.handler(
                "Sampling result is not valid JSON", {"raw": content, "parseError": str(exc)}
            ) from None
    issues = validator.issues(value)
    if issues:
        raise ActionError.handler(
            "Sampling result does not match the schema", {"issues": [i.to_json() for i in issues]}
        )
    return value


def _structure(value: Any, cls: type[T], what: str) -> T:
    try:
        return payloads.structure(value, cls)
    except Exception as exc:
        raise ActionError.handler(
            f"{what} does not match {cls.__name__}", {"error": describe_structure_error(exc)}
        ) from exc


def check_elicit_schema(schema: Any) -> None:
    """Refuse what MCP elicitation cannot render, with ``INVALID_PARAMS`` (-32602).

    The schema must be an object with ``type: "object"``, no truthy top-level
    ``oneOf`` / ``anyOf`` / ``allOf`` / ``not``, and every typed property must be
    ``string``, ``number``, ``integer`` or ``boolean`` (for a list of types, the first
    one counts). Properties without a ``type`` are allowed.
    """

    def invalid(why: str) -> ActionError:
        return ActionError(TesseronErrorCode.INVALID_PARAMS, f"Invalid elicitation schema: {why}")

    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise invalid('the top level must be {"type": "object"}')
    for keyword in ("oneOf", "anyOf", "allOf", "not"):
        if schema.get(keyword):
            raise invalid(f"top-level {keyword} is not supported")
    properties = schema.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise invalid("properties must be an object")
    for name, prop in properties.items():
        if not isinstance(prop, Mapping):
            continue
        kind = prop.get("type")
        if isinstance(kind, list):
            kind = kind[0] if kind else None
        if kind and kind not in _PRIMITIVE_TYPES:
            raise invalid(f"property {name!r} has type {kind!r}; only primitive types are allowed")
