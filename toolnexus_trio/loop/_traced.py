"""The spans of a run and of a model call (``invoke_agent``, ``chat {model}``) and the
GenAI client metrics, entered by :class:`~toolnexus_trio.Client` only while tracing is
on (see :mod:`toolnexus_trio._tracing`); the tool calls' spans are in ``_toolcalls``."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import trio

from .. import _tracing
from ._results import GenerateRequest, RunResult, RunTimeout
from ._toolcalls import _Run
from ._turns import Turn, TurnSource


async def traced_run(
    tracer: Any,
    options: Any,
    source: TurnSource,
    run: _Run,
    drive: Awaitable[RunResult],
    link: str | None,
) -> RunResult:
    """*drive* (the run) inside its ``invoke_agent`` span; a resumed run links to the
    span of the run that suspended (*link*, its saved ``traceparent``)."""
    run.capture = _tracing.capture_content(options.capture_content)
    with _tracing.span(
        tracer,
        "invoke_agent",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": _tracing.provider_of(source),
            "gen_ai.request.model": options.model,
        },
        links=_tracing.link_from(link),
    ) as live:
        try:
            result = await drive
        except RunTimeout:
            _tracing.fail(live, "timeout")
            raise
        ended: RunResult = _tracing.end_run(live, result)
        return ended


async def traced_call(
    tracer: Any,
    options: Any,
    source: TurnSource,
    request: GenerateRequest,
    call: Awaitable[Turn],
) -> Turn:
    """One model call (*call*) inside its ``chat {model}`` span, then its metrics."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": request.model,
        **_tracing.source_attributes(source),
    }
    capture = _tracing.capture_content(options.capture_content)
    if capture:
        attributes["gen_ai.input.messages"] = _tracing.messages_json(request.messages)
    started = trio.current_time()
    with _tracing.span(tracer, f"chat {request.model}", "client", attributes) as live:
        try:
            produced = await call
        except Exception as exc:
            _tracing.record_chat(
                options.meter_provider,
                _tracing.metric_attributes(attributes, exc),
                trio.current_time() - started,
                None,
                None,
            )
            raise
        _tracing.end_chat(live, produced, capture)
    _tracing.record_chat(
        options.meter_provider,
        _tracing.metric_attributes(attributes, None, produced.model),
        trio.current_time() - started,
        produced.usage.get("prompt_tokens"),
        produced.usage.get("completion_tokens"),
    )
    return produced
