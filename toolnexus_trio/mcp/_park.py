"""A served ``tools/call`` of a 2026-07-28 client, parked across its input rounds.

That revision forbids server-to-client requests: while ``serve`` runs a tool for such a
client, an inner server's ``elicitation/create`` or ``sampling/createMessage`` cannot be
sent on. Instead the ``tools/call`` is answered with an ``InputRequiredResult`` carrying
the question, and the client asks its user or its model and calls again with the answers
(``input_responses``) and our ``request_state``.

So the tool runs in a task of its own (``serve``'s nursery), not in the handler: a
:class:`Park` holds it between rounds. Each round (the first call, then each retry)
waits until the tool ends (its result is the answer) or asks something (the questions
go out); the retry's answers wake the waiting relay. ``request_state`` is the park's
random id, checked against the tool name and arguments of the call that made it.

Bounds (``MCPServeConfig``): a question not answered within ``answer_seconds`` means the
client abandoned the call, and the tool is cancelled (the inner server sees the cancel);
a result no round collects is dropped after ``keep_seconds``; at most ``max_parked``
calls are parked at once. A round that ends abnormally (the client cancelled that
request, serving stops) cancels the tool.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import attrs
import mcp_types as types
import trio

if TYPE_CHECKING:
    from .._tools import ToolResult
    from .._wire import Answer, Request


@attrs.define(eq=False)
class Question:
    """One relayed request waiting for the client's answer."""

    key: str
    request: types.CreateMessageRequest | types.ElicitRequest
    answered: trio.Event = attrs.field(factory=trio.Event)
    reply: types.InputResponse | None = None  # None with answered set: no answer given


@attrs.define(eq=False)
class Park:
    """One parked ``tools/call`` (see the module docs).

    ``asked``/``answer`` are set when this run is the re-run of a suspended tool (the
    toolkit's own ``wait_for`` suspension, answered by a sealed ``request_state``)."""

    tool: str
    digest: str
    answer_seconds: float
    asked: Request | None = None
    answer: Answer | None = None
    id: str = attrs.field(factory=lambda: secrets.token_urlsafe(18))
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    outcome: ToolResult | None = None
    collected: trio.Event = attrs.field(factory=trio.Event)
    round_open: bool = False  # a round (an MCP request) is waiting on this park
    ctx: Any = None  # the request of the current round (progress rides on it)
    _queued: list[Question] = attrs.field(factory=list)
    _handed: list[Question] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _count: int = 0

    async def ask(
        self, request: types.CreateMessageRequest | types.ElicitRequest
    ) -> types.InputResponse | None:
        """Hand *request* to the next round and wait for the retry's answer (``None``:
        the retry gave none). Unanswered within ``answer_seconds``, the client has
        abandoned the call: the tool is cancelled."""
        self._count += 1
        question = Question(f"q{self._count}", request)
        self._queued.append(question)
        self._changed.set()
        try:
            with trio.move_on_after(self.answer_seconds) as timer:
                await question.answered.wait()
        finally:
            for pending in (self._queued, self._handed):
                if question in pending:
                    pending.remove(question)
        if timer.cancelled_caught:
            self.scope.cancel(reason="the MCP client did not answer the input round")
            await trio.lowlevel.checkpoint()  # raises Cancelled: the scope is cancelled
        return question.reply

    def finish(self, outcome: ToolResult) -> None:
        """The tool ended with *outcome*."""
        self.outcome = outcome
        self._changed.set()

    def answer_round(self, responses: types.InputResponses) -> None:
        """A retry's answers: each handed-out question gets its reply (or none)."""
        handed, self._handed = self._handed, []
        for question in handed:
            question.reply = responses.get(question.key)
            question.answered.set()

    async def next_step(self) -> ToolResult | dict[str, types.InputRequest]:
        """Wait until the tool ends (its result) or asks (the questions to send)."""
        while True:
            if self.outcome is not None:
                self.collected.set()
                return self.outcome
            if self._queued:
                out: dict[str, types.InputRequest] = {q.key: q.request for q in self._queued}
                self._handed.extend(self._queued)
                self._queued.clear()
                return out
            self._changed = trio.Event()
            await self._changed.wait()
