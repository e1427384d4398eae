"""Sampling: an MCP server asking our model for a completion (``sampling/createMessage``).

The data shapes a sampler sees and returns, its limits, and the nesting depth that
travels with a sampling request (in-process as a context variable, across an MCP hop
in the request's ``_meta``). The MCP source (:mod:`toolnexus_trio.mcp`) turns a
server's request into a :class:`SamplingRequest`; helpers in
:mod:`toolnexus_trio.loop` build a :data:`Sampler` from a client or a ``generate``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final

import attrs

DEPTH_META: Final = "io.toolnexus/samplingDepth"
"""The ``_meta`` key carrying the sampling depth across an MCP hop (``tools/call`` and
``sampling/createMessage``)."""

sampling_depth: ContextVar[int] = ContextVar("toolnexus_trio_sampling_depth", default=0)
"""How many sampling requests the current task is nested in (0 outside any)."""


def depth_from_meta(meta: Mapping[str, Any] | None) -> int:
    """The sampling depth an MCP request's ``_meta`` carries (0 when absent or bad)."""
    raw = meta.get(DEPTH_META) if isinstance(meta, Mapping) else None
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 1000 else 0


def _positive(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"SamplingLimits.{attribute.name} must be a positive int, not {value!r}")


@attrs.frozen
class SamplingLimits:
    """Bounds on the sampling requests a toolkit's MCP servers make.

    - ``max_tokens``: the cap on one answer; a request's own ``maxTokens`` is honoured
      up to it.
    - ``max_depth``: nested sampling (a sampler whose tools reach a server that samples
      again, also across ``serve`` hops) beyond this depth is refused.
    - ``per_minute``: requests one server may make in any 60 seconds; more are refused.
    """

    max_tokens: int = attrs.field(default=4096, validator=_positive)
    max_depth: int = attrs.field(default=3, validator=_positive)
    per_minute: int = attrs.field(default=30, validator=_positive)


@attrs.frozen
class SamplingMessage:
    """One message of a sampling request: ``role`` is ``"user"`` or ``"assistant"``."""

    role: str
    text: str


@attrs.frozen
class SamplingRequest:
    """What an MCP server asked the model (its ``sampling/createMessage``).

    ``max_tokens`` is already capped by :attr:`SamplingLimits.max_tokens`.
    ``model_hints`` are the server's model name hints, in its order;
    ``model_preferences`` the rest of its preferences as sent (advisory). ``server``
    names the configured server that asked, ``depth`` is this request's nesting
    depth (1 for a request made by a tool the loop called directly). ``params`` is
    the request's wire params (with the capped ``maxTokens``), for relaying it on.
    """

    messages: tuple[SamplingMessage, ...]
    max_tokens: int
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()
    model_hints: tuple[str, ...] = ()
    model_preferences: Mapping[str, Any] | None = None
    server: str = ""
    depth: int = 1
    params: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class SamplingResult:
    """A sampler's answer: the text, and when known the model, tokens and stop reason."""

    text: str
    model: str | None = None
    tokens: int | None = None
    """Tokens the answer used (the model's completion tokens), when known."""
    stop_reason: str | None = None


Sampler = Callable[[SamplingRequest], Awaitable[str | SamplingResult]]
"""``async (SamplingRequest) -> str | SamplingResult``: answers a server's sampling request."""
