"""OpenTelemetry spans and metrics, on only when the application configured a provider.

The one place that talks to ``opentelemetry-api`` (the optional ``[otel]`` extra). The
loop, the agent runtime, the model clients, A2A, the gateway and the Tesseron host call
:func:`span` (a context manager), :func:`inject` and :func:`extract`; nothing else
imports OpenTelemetry.

Off costs nothing: :func:`tracer` answers ``None`` when OpenTelemetry was never imported
(an application that configured a provider has imported it) or when the global provider
is still the API's proxy or no-op one, and :func:`span` then hands back one shared no-op
object, so a call allocates nothing. ``import toolnexus_trio`` never imports
OpenTelemetry.

A span lives exactly as long as the ``with`` block of the scope that owns the work: it
is opened and ended by one task, and the current span travels to child tasks through
the context variables Trio copies into every task it starts, so parallel tool calls are
siblings under their turn. An exception leaving a span sets ``error.type``: ``cancelled``
for ``trio.Cancelled`` (a cancel token, an interrupt, or the deadline of an enclosing
scope), the exception's class name otherwise; the run's own span says ``timeout`` when
``run_timeout_ms`` fired (see :func:`fail`).

Names follow the OpenTelemetry GenAI semantic conventions (semantic-conventions 1.40,
``docs/gen-ai/``; MCP per the GenAI conventions' ``mcp.md``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, Final, Literal

import trio

from ._version import __version__

SCOPE: Final = "toolnexus_trio"
CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

Kind = Literal["internal", "client", "server"]


class _NoopSpan:
    """The span every call gets while tracing is off: one shared object, no state."""

    __slots__ = ()

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NOOP: Final = _NoopSpan()

# (provider, tracer) of the last lookup: a client resolves once per run, and a
# provider's get_tracer builds a new tracer each call.
_cached: tuple[Any, Any] | None = None
_meters: tuple[Any, Any, Any] | None = None
# The API's proxy (or no-op) provider last seen as the global one: tracing off.
_off: Any = None
# The tracer of the innermost span of ours that is open here (set only while tracing is
# on): the MCP client span of a tool call uses the run's tracer, ClientOptions' included.
_active: ContextVar[Any] = ContextVar("toolnexus_trio_tracer", default=None)
# The MCP CLIENT span open in this task, with the request it is waiting to see written
# (see mcp_request_sent).
_mcp_call: ContextVar[list[Any] | None] = ContextVar("toolnexus_trio_mcp_call", default=None)


def tracer(provider: Any = None) -> Any:
    """The tracer to use, or ``None`` when tracing is off.

    *provider* is a ``TracerProvider`` given in the options; without one, the global
    provider counts only once the application set one (the API's proxy or no-op
    provider means off).
    """
    global _cached, _off
    if provider is None:
        api = sys.modules.get("opentelemetry.trace")
        if api is None:  # never imported: nobody configured a provider
            return None
        provider = api.get_tracer_provider()
        if provider is _off:  # the API's own provider, seen before: off, at once
            return None
        if isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
            _off = provider
            return None
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    found = provider.get_tracer(SCOPE, __version__)
    _cached = (provider, found)
    return found


def capture_content(option: bool) -> bool:
    """Whether message content goes on spans: the option, or the conventions' variable."""
    return option or os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"


def span(
    tracer: Any,
    name: str,
    kind: Kind = "internal",
    attributes: Mapping[str, Any] | None = None,
    *,
    links: Sequence[Any] = (),
    context: Any = None,
) -> AbstractContextManager[Any]:
    """A span around a ``with`` block (the shared no-op one when *tracer* is ``None``).

    The span is the current one inside the block (child tasks started there inherit
    it); *context* (from :func:`extract`) parents it on a remote span instead; *links*
    are span contexts (see :func:`link_from`).
    """
    if tracer is None:
        return NOOP
    return _live(tracer, name, kind, attributes, links, context)


@contextmanager
def _live(
    tracer: Any,
    name: str,
    kind: Kind,
    attributes: Mapping[str, Any] | None,
    links: Sequence[Any],
    parent: Any,
) -> Iterator[Any]:
    from opentelemetry import context, trace

    kinds = {
        "internal": trace.SpanKind.INTERNAL,
        "client": trace.SpanKind.CLIENT,
        "server": trace.SpanKind.SERVER,
    }
    live = tracer.start_span(
        name,
        context=parent,
        kind=kinds[kind],
        attributes=dict(attributes) if attributes else None,
        links=[trace.Link(c) for c in links] or None,
    )
    token = context.attach(trace.set_span_in_context(live, parent))
    active = _active.set(tracer)
    try:
        yield live
    except trio.Cancelled:
        fail(live, "cancelled")
        raise
    except BaseExceptionGroup as group:
        # A nursery's Cancelled arrive grouped when collapsing is off.
        only_cancels = group.split(trio.Cancelled)[1] is None
        fail(live, "cancelled" if only_cancels else type(group).__qualname__)
        raise
    except BaseException as exc:
        fail(live, type(exc).__qualname__)
        raise
    finally:
        _active.reset(active)
        context.detach(token)
        live.end()


def fail(live: Any, error_type: str) -> None:
    """Mark *live* failed with ``error.type`` *error_type* (once: the first reason wins)."""
    if live is NOOP or not live.is_recording():
        return
    attributes = getattr(live, "attributes", None)
    if attributes is not None and "error.type" in attributes:
        return
    from opentelemetry.trace import Status, StatusCode

    live.set_attribute("error.type", error_type)
    live.set_status(Status(StatusCode.ERROR))


def link_from(traceparent: str | None) -> list[Any]:
    """The span context a saved ``traceparent`` names, as a list for ``links=``."""
    if not traceparent or "opentelemetry.trace" not in sys.modules:
        return []
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    found = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    ).get_span_context()
    return [found] if found.is_valid else []


def traceparent(live: Any) -> str | None:
    """The W3C ``traceparent`` of *live*, to keep in a saved state (``None`` when off)."""
    if live is NOOP:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(live))
    return carrier.get("traceparent")


def inject(carrier: MutableMapping[str, Any]) -> None:
    """Write the current trace context (``traceparent``/``tracestate``) into *carrier*.

    Nothing is written while no span is current (tracing off included), so a peer
    that knows nothing of tracing sees the same message as before.
    """
    if "opentelemetry.trace" not in sys.modules:
        return
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return
    propagate.inject(carrier)


def extract(carrier: Mapping[str, Any] | None) -> Any:
    """The remote parent a *carrier* names (for ``span(context=...)``), or ``None``."""
    if not carrier or "traceparent" not in carrier or "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import propagate, trace

    try:
        found = propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})
    except (TypeError, ValueError):
        return None
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found


# -- metrics -------------------------------------------------------------------


def _instruments(provider: Any) -> tuple[Any, Any] | None:
    global _meters
    if provider is None:
        api = sys.modules.get("opentelemetry.metrics")
        if api is None:
            return None
        provider = api.get_meter_provider()
        # The API's own providers (its proxy before one is set, its no-op one) mean off.
        if type(provider).__module__.startswith("opentelemetry.metrics"):
            return None
    cached = _meters
    if cached is not None and cached[0] is provider:
        return cached[1], cached[2]
    meter = provider.get_meter(SCOPE, __version__)
    tokens = meter.create_histogram(
        "gen_ai.client.token.usage", unit="{token}", description="Input and output tokens used."
    )
    duration = meter.create_histogram(
        "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration."
    )
    _meters = (provider, tokens, duration)
    return tokens, duration


def record_chat(
    meter_provider: Any,
    attributes: Mapping[str, Any],
    seconds: float,
    input_tokens: int | None,
    output_tokens: int | None,
) -> None:
    """The GenAI client metrics of one model call (nothing while metrics are off)."""
    found = _instruments(meter_provider)
    if found is None:
        return
    tokens, duration = found
    duration.record(seconds, attributes)
    if input_tokens is not None:
        tokens.record(input_tokens, {**attributes, "gen_ai.token.type": "input"})
    if output_tokens is not None:
        tokens.record(output_tokens, {**attributes, "gen_ai.token.type": "output"})


# -- the GenAI spans' attributes -------------------------------------------------

_IN_PROCESS: Final = {"gen_ai.provider.name": "toolnexus_trio.in_process"}


def source_attributes(source: object) -> Mapping[str, Any]:
    """A turn source's ``gen_ai.provider.name`` and ``server.address``/``server.port``
    (its ``trace_attributes``; a host's own ``generate`` has no server)."""
    found = getattr(source, "trace_attributes", None)
    return found if isinstance(found, Mapping) else _IN_PROCESS


def provider_of(source: object) -> str:
    """A turn source's ``gen_ai.provider.name``."""
    return str(source_attributes(source)["gen_ai.provider.name"])


def end_run(live: Any, result: Any) -> Any:
    """Close out a run's span: usage, status; a pending run is marked so and *result*
    comes back with the span's ``traceparent`` (for the resumed run's link)."""
    usage = result.usage
    live.set_attribute("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0))
    live.set_attribute("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0))
    live.set_attribute("toolnexus_trio.run.status", result.status)
    if result.status == "cancelled":
        fail(live, "cancelled")
    elif result.status == "pending":
        import attrs

        return attrs.evolve(result, trace_parent=traceparent(live))
    return result


def _finish_reasons(raw: Any) -> list[str]:
    if not isinstance(raw, Mapping):
        return []
    reasons: list[str] = [  # OpenAI chat completions
        c["finish_reason"]
        for c in raw.get("choices") or ()
        if isinstance(c, Mapping) and isinstance(c.get("finish_reason"), str)
    ]
    reasons.extend(  # Gemini
        c["finishReason"].lower()
        for c in raw.get("candidates") or ()
        if isinstance(c, Mapping) and isinstance(c.get("finishReason"), str)
    )
    # Anthropic; a host's own shape
    reasons.extend(raw[k] for k in ("stop_reason", "finish_reason") if isinstance(raw.get(k), str))
    if not reasons and raw.get("object") == "response" and isinstance(raw.get("status"), str):
        reasons.append(raw["status"])  # the Responses API
    return reasons


def end_chat(live: Any, turn: Any, capture: bool) -> None:
    """Set a model call's response attributes on its ``chat`` span."""
    raw = turn.raw
    model = turn.model
    if not model and isinstance(raw, Mapping):
        model = raw.get("model") or raw.get("modelVersion")
    if isinstance(model, str) and model:
        live.set_attribute("gen_ai.response.model", model)
    if isinstance(raw, Mapping):
        found = raw.get("id") or raw.get("responseId")
        if isinstance(found, str):
            live.set_attribute("gen_ai.response.id", found)
        reasons = _finish_reasons(raw)
        if reasons:
            live.set_attribute("gen_ai.response.finish_reasons", reasons)
    response = turn.response
    if not isinstance(raw, Mapping) or not _finish_reasons(raw):
        live.set_attribute(
            "gen_ai.response.finish_reasons", ["tool_calls" if response.tool_calls else "stop"]
        )
    usage = turn.usage
    live.set_attribute("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0))
    live.set_attribute("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0))
    if capture:
        message: dict[str, Any] = {"role": "assistant", "content": response.content}
        if response.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                for c in response.tool_calls
            ]
        live.set_attribute("gen_ai.output.messages", messages_json([message]))


def messages_json(messages: Sequence[Mapping[str, Any]]) -> str:
    """Chat messages in the conventions' shape (role and parts), as JSON text."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        content = m.get("content")
        if m.get("role") == "tool":
            parts.append(
                {"type": "tool_call_response", "id": m.get("tool_call_id"), "response": content}
            )
        elif content:
            parts.append({"type": "text", "content": content})
        for call in m.get("tool_calls") or ():
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        out.append({"role": m.get("role"), "parts": parts})
    return json.dumps(out, default=repr)


def metric_attributes(
    attributes: Mapping[str, Any], error: BaseException | None, model: str | None = None
) -> dict[str, Any]:
    """The low-cardinality attributes of the GenAI client metrics of one call."""
    out = {
        k: v
        for k, v in attributes.items()
        if k in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
                 "server.address", "server.port")
    }  # fmt: skip
    if model:
        out["gen_ai.response.model"] = model
    if error is not None:
        out["error.type"] = type(error).__qualname__
    return out


def with_trace(headers: Mapping[str, str]) -> Mapping[str, str]:
    """*headers* plus the current trace context (the same object when there is none)."""
    if "opentelemetry.trace" not in sys.modules:
        return headers
    carrier: dict[str, str] = {}
    inject(carrier)
    return {**headers, **carrier} if carrier else headers


def tool_span(tracer: Any, call: Any, capture: bool) -> AbstractContextManager[Any]:
    """The ``execute_tool {name}`` span of one tool call (no-op while off, no dict built)."""
    if tracer is None:
        return NOOP
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
    }
    if capture:
        attributes["gen_ai.tool.call.arguments"] = call.arguments_json
    return _live(tracer, f"execute_tool {call.name}", "internal", attributes, (), None)


def end_tool(live: Any, result: Any, capture: bool) -> None:
    """A tool call's outcome on its span: ``error.type`` ``tool_error`` for an error
    result; a suspended call is marked pending."""
    if result.is_error:
        fail(live, "tool_error")
    if result.metadata is not None and "pending" in result.metadata:
        live.set_attribute("toolnexus_trio.tool.pending", True)
    if capture:
        live.set_attribute("gen_ai.tool.call.result", result.output)


# -- the agent runtime -----------------------------------------------------------


def current() -> Any:
    """The current OpenTelemetry context (``None`` while tracing is off), to parent work
    that another task runs (a sub-agent's turns) on the span that asked for it."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import context, trace

    found = context.get_current()
    return found if trace.get_current_span(found).get_span_context().is_valid else None


def agent_span(tracer: Any, name: str, agent_id: str, parent: Any) -> AbstractContextManager[Any]:
    """The ``invoke_agent {name}`` span of one agent turn in the runtime."""
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.agent.id": agent_id,
    }
    return span(tracer, f"invoke_agent {name}", "internal", attributes, context=parent)


def end_agent(live: Any, result: Any) -> None:
    """An agent turn's outcome: ``error.type`` is the task status when it did not finish
    (``incomplete``, ``error``, ``cancelled``); ``pending`` is an attribute, not an error."""
    if result is None:
        return
    live.set_attribute("toolnexus_trio.agent.status", result.status)
    if result.limit:
        live.set_attribute("toolnexus_trio.agent.limit", result.limit)
    if result.status not in ("done", "pending"):
        fail(live, result.status)


def attached(parent: Any) -> AbstractContextManager[Any]:
    """Make *parent* (from :func:`extract`; ``None``: nothing, the shared no-op) the
    current context for the block, in this task and in the tasks started inside it."""
    if parent is None:
        return NOOP
    return _attached(parent)


@contextmanager
def _attached(parent: Any) -> Iterator[None]:
    from opentelemetry import context

    token = context.attach(parent)
    try:
        yield
    finally:
        context.detach(token)


def inject_meta(params: dict[str, Any]) -> None:
    """The current trace context into ``params["_meta"]`` (left out when there is none)."""
    if "opentelemetry.trace" not in sys.modules:
        return
    carrier: dict[str, Any] = {}
    inject(carrier)
    if carrier:
        params["_meta"] = {**(params.get("_meta") or {}), **carrier}


def mark_mcp_session(session_id: str | None) -> None:
    """``mcp.session.id`` on the current span: called by ``serve`` inside the mcp SDK's
    SERVER span of each request (the SDK does not set it; stdio has no session id)."""
    if session_id is None or "opentelemetry.trace" not in sys.modules:
        return
    from opentelemetry import trace

    # A non-recording span (no provider) drops the attribute.
    trace.get_current_span().set_attribute("mcp.session.id", session_id)


# -- the MCP client spans ----------------------------------------------------------


def mcp_span(
    method: str, target: str | None, describe: Callable[[], Mapping[str, Any]]
) -> AbstractContextManager[Any]:
    """The MCP conventions' CLIENT span ``{mcp.method.name} {target}`` of one request
    we send (the shared no-op one while tracing is off; *describe* is called only when
    on, for the session's attributes: ``mcp.session.id``, ``mcp.protocol.version``,
    ``network.transport``, ``server.address``/``server.port``).

    The tracer is the one of the span around the call (the run's), else the global one.
    The mcp SDK's own span of the request (``MCP send ...``) opens inside this one, so
    it is its child, and the ``traceparent`` the SDK writes into ``params._meta`` is
    of that child: the server's span sits under both."""
    found = _active.get()
    if found is None:
        found = tracer()
        if found is None:
            return NOOP
    return _mcp_live(found, method, target, describe)


@contextmanager
def _mcp_live(
    tracer: Any, method: str, target: str | None, describe: Callable[[], Mapping[str, Any]]
) -> Iterator[Any]:
    attributes: dict[str, Any] = {"mcp.method.name": method, **describe()}
    if method == "tools/call" and target is not None:
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = target
    name = f"{method} {target}" if target else method
    with _live(tracer, name, "client", attributes, (), None) as live:
        token = _mcp_call.set([live, method])
        try:
            yield live
        finally:
            _mcp_call.reset(token)


def mcp_request_sent(method: str, request_id: object) -> None:
    """A request was written to an MCP transport (called by the session's write tap,
    in the task that sends it): its ``jsonrpc.request.id`` goes on this task's MCP
    CLIENT span, once, when the method is the span's."""
    found = _mcp_call.get()
    if found is None or found[1] != method or request_id is None:
        return
    found[1] = None  # the first request of that method is the span's; later ones are not
    found[0].set_attribute("jsonrpc.request.id", str(request_id))


def mcp_failed(live: Any, code: int, message: str | None) -> None:
    """A JSON-RPC error answer on an MCP CLIENT span: ``error.type`` and
    ``rpc.response.status_code`` are the error code, the status description its message."""
    if live is NOOP or not live.is_recording():
        return
    from opentelemetry.trace import Status, StatusCode

    live.set_attribute("error.type", str(code))
    live.set_attribute("rpc.response.status_code", str(code))
    live.set_status(Status(StatusCode.ERROR, message or None))
