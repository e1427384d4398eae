"""What a running agent loop offers the tools it runs: events, metrics and its model.

The client sets :data:`current_run` for the duration of a run; tool tasks inherit it
(Trio copies the context into tasks spawned from the run's task). A tool source such
as the Tesseron gateway reads it to forward progress and logs as stream events and
to answer a host's sampling request with the loop's own model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import attrs

from ._sampling import SamplingRequest, SamplingResult
from ._wire import Answer, Request


@attrs.frozen
class RunServices:
    """The running loop's services (each ``None`` when the loop has none)."""

    emit: Callable[[dict[str, Any]], Awaitable[None]] | None
    """Send one stream event (``None`` outside ``Client.stream``)."""
    metric: Callable[[dict[str, Any]], None] | None
    """Report one ``on_metric`` event."""
    sample: Callable[[str, int | None], Awaitable[str]] | None
    """Ask the loop's model: one user message, an optional token cap; returns the text."""
    elicit: Callable[[Request], Awaitable[Answer]] | None = None
    """Ask the user of the client that made the call (``serve`` sets it for an MCP client
    that supports elicitation): an inner server's elicitation is relayed there."""
    relay_sample: Callable[[SamplingRequest], Awaitable[SamplingResult]] | None = None
    """Have the client that made the call sample (``serve`` sets it for an MCP client
    that supports sampling): an inner server's sampling request is relayed there."""
    observe: Callable[[dict[str, Any]], None] | None = None
    """Count one event in the run's ``metrics()`` (set by the loop, ``on_metric`` or not)."""


current_run: ContextVar[RunServices | None] = ContextVar("toolnexus_trio_run", default=None)
"""The services of the run whose task is asking (``None`` outside a run)."""


@attrs.frozen
class ResumePoint:
    """A durable run's place for one tool call to keep what it needs to resume.

    Set (in :data:`current_resume`) while a durable run's tool call runs. A tool that
    starts work that outlives it on another side (an MCP task) calls :attr:`save`
    with a small JSON object (the task id) before it waits; the checkpoint store has
    it, flushed, when ``save`` returns. When the run's process dies and
    :meth:`Client.recover <toolnexus_trio.Client.recover>` runs the call again,
    :attr:`token` is that object, and the tool picks its work up instead of starting
    it again (a call with a saved token is not in doubt: the other side holds its
    state). ``token`` is ``None`` on a first run.
    """

    token: dict[str, Any] | None
    save: Callable[[dict[str, Any]], Awaitable[None]]


current_resume: ContextVar[ResumePoint | None] = ContextVar("toolnexus_trio_resume", default=None)
"""The resume point of the durable tool call whose task is asking (``None`` when the
call is not part of a durable run)."""
