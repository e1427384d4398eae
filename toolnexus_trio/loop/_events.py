"""Typed run events: one frozen attrs class per thing that happens in a run of an agent
tree, beside the SPEC §8 dict events of :meth:`Client.stream` (which stay as they are).

Every event names the ``agent`` it belongs to (``"root"`` for the top agent, else the
runtime's handle id, ``root/helper.1``), so one stream carries a whole tree. A stream is
a size-0 channel: the run waits for its consumer at every event (a consumer that stops
reading slows the run, nothing is queued), and the consumer that leaves cancels the run
(whoever owns the channel cancels the run's scope, as :mod:`toolnexus_trio.ui` does).

:func:`stream_events` runs one agent's loop and sends its typed events, translated from
the §8 stream: run started / finished / failed, turn started / finished, text deltas,
tool call arguments as the provider streams them, tool call started (with its whole
arguments) and finished (result, error or cancelled), usage. :func:`answer_events` does
the same for the continuation of a stored pending run (:meth:`Client.answer`). The
sub-agent, approval and reasoning events are sent by whoever runs those (the AG-UI
endpoint in :mod:`toolnexus_trio.ui`). :class:`ReasoningDelta` comes where the provider
streams its reasoning (Anthropic thinking, Responses reasoning summaries).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from .._cancel import CancelToken
from .._toolkit import Toolkit
from .._wire import Answer, Request
from ..stores._base import PendingStore
from ._client import Client
from ._durable import answer
from ._output import TOOL_ARGS_DELTA
from ._results import Message, RunResult
from ._turns import REASONING_DELTA


@attrs.frozen
class RunStarted:
    """A run of *agent* began on *prompt*."""

    agent: str
    prompt: str


@attrs.frozen
class RunFinished:
    """A run ended with *status* (``done``, ``pending``, ``incomplete``, ``cancelled``)
    and its final *text*; *result* is the loop's :class:`RunResult`."""

    agent: str
    status: str
    text: str
    result: RunResult | None = None


@attrs.frozen
class RunFailed:
    """A run raised: *message* says what (the exception's text)."""

    agent: str
    message: str


@attrs.frozen
class TurnStarted:
    """Model turn number *turn* (0-based) of *agent* began."""

    agent: str
    turn: int


@attrs.frozen
class TurnFinished:
    """Model turn *turn* of *agent* is over (its tool calls, if any, have finished)."""

    agent: str
    turn: int


@attrs.frozen
class TextDelta:
    """A piece of the answer's text, as the provider streamed it."""

    agent: str
    delta: str


@attrs.frozen
class ReasoningDelta:
    """A piece of the model's reasoning, where the provider streams it (Anthropic
    ``thinking_delta``, the Responses API's reasoning summary text deltas)."""

    agent: str
    delta: str


@attrs.frozen
class ToolCallStarted:
    """A tool call began (it is about to run); *arguments* is its whole JSON text. When
    the provider streamed the arguments, its :class:`ToolCallArgs` came before."""

    agent: str
    id: str
    name: str
    arguments: str


@attrs.frozen
class ToolCallArgs:
    """A piece of a tool call's JSON arguments, as the provider streams them (the HTTP
    wire styles that stream fragments: OpenAI chat, Anthropic, Responses). The pieces of
    one call, joined, are the provider's argument text; they come before the call's
    :class:`ToolCallStarted`. *name* is the tool's."""

    agent: str
    id: str
    delta: str
    name: str = ""


@attrs.frozen
class ToolCallFinished:
    """A tool call ended: *outcome* is ``result``, ``error`` or ``cancelled``."""

    agent: str
    id: str
    name: str
    output: str
    outcome: str


@attrs.frozen
class ApprovalRequested:
    """A tool of *agent* asks a person (our §10 :class:`Request`)."""

    agent: str
    request: Request
    tool_call_id: str | None = None


@attrs.frozen
class ApprovalAnswered:
    """The person answered (our §10 :class:`Answer`)."""

    agent: str
    answer: Answer


@attrs.frozen
class AgentSpawned:
    """A sub-agent *agent* (a handle id) was spawned under *parent* with *budget*
    (the runtime's :class:`~toolnexus_trio.agents.Budget` as a dict, ``None`` fields
    left out)."""

    agent: str
    parent: str
    name: str
    budget: Mapping[str, Any]


@attrs.frozen
class AgentStateChanged:
    """A sub-agent's state is now *state*; *tokens* and *turns* are what it has used."""

    agent: str
    state: str
    tokens: int = 0
    turns: int = 0


@attrs.frozen
class AgentFinished:
    """A sub-agent's task ended with *status* and *text*."""

    agent: str
    status: str
    text: str
    tokens: int = 0
    turns: int = 0


@attrs.frozen
class Usage:
    """Token counts of *agent*'s run (prompt, completion, total, cache counts)."""

    agent: str
    usage: Mapping[str, int]


RunEvent = (
    RunStarted
    | RunFinished
    | RunFailed
    | TurnStarted
    | TurnFinished
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallArgs
    | ToolCallFinished
    | ApprovalRequested
    | ApprovalAnswered
    | AgentSpawned
    | AgentStateChanged
    | AgentFinished
    | Usage
)
"""Any typed run event."""

SendEvent = Callable[[RunEvent], Awaitable[None]]
"""Where events go: the send side of a size-0 channel (``channel.send``)."""


class _Typed:
    """The §8 events of one agent's run as typed events, sent in the run's own task."""

    def __init__(self, agent: str, send: SendEvent, turn: int = 0) -> None:
        self.agent = agent
        self.send = send
        self.turn = turn
        self.in_turn = False

    async def emit(self, event: dict[str, Any]) -> None:
        agent, send = self.agent, self.send
        kind = event["type"]
        if kind in ("text", "tool_call", TOOL_ARGS_DELTA, REASONING_DELTA) and not self.in_turn:
            self.in_turn = True
            await send(TurnStarted(agent, self.turn))
        if kind == "text":
            await send(TextDelta(agent, event["delta"]))
        elif kind == REASONING_DELTA:
            await send(ReasoningDelta(agent, event["delta"]))
        elif kind == TOOL_ARGS_DELTA:
            if event.get("id"):  # a call whose id came first (else it comes whole, started)
                await send(ToolCallArgs(agent, event["id"], event["delta"], event["name"]))
        elif kind == "tool_call":
            arguments = json.dumps(event["args"], separators=(",", ":"))
            await send(ToolCallStarted(agent, event["id"], event["name"], arguments))
        elif kind == "tool_result":
            if self.in_turn:  # results come after the turn's calls have all ended
                self.in_turn = False
                await send(TurnFinished(agent, self.turn))
                self.turn += 1
            output = event["output"]
            outcome = "error" if event["is_error"] else "result"
            if outcome == "error" and output.startswith("cancelled"):
                outcome = "cancelled"
            await send(ToolCallFinished(agent, event["id"], event["name"], output, outcome))

    async def failed(self, exc: Exception) -> None:
        # Told under a bounded shield; a consumer already gone is not told.
        with (
            trio.move_on_after(1, shield=True),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await self.send(RunFailed(self.agent, str(exc) or type(exc).__name__))

    async def finished(self, result: RunResult) -> None:
        if self.in_turn:
            await self.send(TurnFinished(self.agent, self.turn))
        await self.send(Usage(self.agent, dict(result.usage)))
        await self.send(RunFinished(self.agent, result.status, result.text, result))


async def stream_events(
    client: Client,
    prompt: str,
    send: SendEvent,
    toolkit: Toolkit | None = None,
    *,
    agent: str = "root",
    history: Sequence[Message] | None = None,
    cancel: CancelToken | None = None,
) -> RunResult:
    """Run *client* on *prompt* and send its typed events to *send* as they happen.

    The run is :meth:`Client.run` with the §8 events of :meth:`Client.stream`, each
    translated and sent from the run's own task: *send* is awaited where the loop
    emits (a slow consumer slows the run), so a tool call's :class:`ToolCallStarted`
    has been taken before the tool runs and whatever the tool sends comes after it. An
    exception from *send* (a consumer that left) ends the run. A failing run sends
    :class:`RunFailed` and raises; otherwise the result is returned after
    :class:`RunFinished`.
    """
    await send(RunStarted(agent, prompt))
    typed = _Typed(agent, send)
    # The loop's own run, with this emit: the family's seam that Client.stream uses too.
    run = client._new_run(prompt, toolkit, history)
    run.emit = typed.emit
    try:
        result = await client._drive(run, cancel, client._loop(run))
    except Exception as exc:
        await typed.failed(exc)
        raise
    await typed.finished(result)
    return result


async def answer_events(
    client: Client,
    id: str,
    answers: Mapping[str, Answer] | Iterable[Answer],
    send: SendEvent,
    toolkit: Toolkit,
    *,
    agent: str = "root",
    cancel: CancelToken | None = None,
) -> RunResult:
    """Answer the pending run stored under *id* (:meth:`Client.answer`: taken once,
    from any process) and send the continuation's typed events to *send* as they
    happen, as :func:`stream_events` sends a live run's.

    After :class:`RunStarted` (an empty prompt: the run goes on), the answered calls'
    :class:`ToolCallFinished` come first, then the turns that follow, streamed as the
    provider sends them (text deltas, tool-argument fragments), their turn numbers going
    on from the halted run's. The same errors as :meth:`Client.answer` (an answer
    already taken: :class:`AlreadyAnswered`, nothing ran), each sent as
    :class:`RunFailed` first.
    """
    await send(RunStarted(agent, ""))
    store = client.store
    state = await store.get_pending(id) if isinstance(store, PendingStore) else None
    halted = state.result if state is not None and state.result is not None else {}
    turns = halted.get("turns", 0)
    typed = _Typed(agent, send, turns if type(turns) is int else 0)
    try:
        result = await answer(
            client, store, id, answers, toolkit=toolkit, cancel=cancel, emit=typed.emit
        )
    except Exception as exc:
        await typed.failed(exc)
        raise
    await typed.finished(result)
    return result
