"""A ``gateway --mcp`` call on the 2026-07-28 MCP revision, across its input rounds.

That revision forbids server-to-client requests: a host's ``sampling/request`` or
``elicitation/request`` cannot become ``sampling/createMessage`` or
``elicitation/create``. Instead the ``tools/call`` is answered with an
``InputRequiredResult`` carrying the question, and the client asks its model or its
user and calls again with the answers (``input_responses``) and our ``request_state``.

So such a call's invocation runs in a task of its own (the front's nursery), not in the
handler: a :class:`Park` holds it between rounds. Each round (the first call, then each
retry) waits until the invocation ends (its result is the answer) or asks something
(the questions go out in an ``InputRequiredResult``); the retry's answers wake the
waiting host requests. ``request_state`` is the park's random id, checked against the
tool name and arguments of the call that made it.

Bounds: a question not answered within :data:`ANSWER_SECONDS` fails (the host's request
gets a refusal, its action goes on or ends); a result no round collects is dropped
after :data:`KEEP_SECONDS`; at most :data:`MAX_PARKS` calls are parked at once. A round
that ends abnormally (the client cancelled that request, the front closes) cancels the
invocation, which sends ``actions/cancel`` to the host.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any, Final

import attrs
import mcp_types as types
import trio

MAX_PARKS: Final = 1024
"""Calls of 2026-07-28 clients in flight at once (more get a tool error)."""
ANSWER_SECONDS: Final = 600.0
"""How long a handed-out question waits for the client's retry with its answer."""
KEEP_SECONDS: Final = 60.0
"""How long a finished call's result waits for a retry to collect it."""


def args_digest(args: dict[str, Any] | None) -> str:
    """What binds a ``request_state`` to the arguments of the call that got it."""
    text = json.dumps(args or {}, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@attrs.define(eq=False)
class Question:
    """One host request waiting for the client's answer."""

    key: str
    request: types.CreateMessageRequest | types.ElicitRequest
    answered: trio.Event = attrs.field(factory=trio.Event)
    reply: types.InputResponse | None = None  # None with answered set: no answer given


@attrs.define(eq=False)
class Park:
    """One parked ``tools/call`` (see the module docs)."""

    tool: str
    digest: str
    id: str = attrs.field(factory=lambda: secrets.token_urlsafe(18))
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    outcome: types.CallToolResult | None = None
    collected: trio.Event = attrs.field(factory=trio.Event)
    round_open: bool = False  # a round (an MCP request) is waiting on this park
    _queued: list[Question] = attrs.field(factory=list)
    _handed: list[Question] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _count: int = 0

    def ask(self, request: types.CreateMessageRequest | types.ElicitRequest) -> Question:
        """Queue a question for the next round to hand out."""
        self._count += 1
        question = Question(f"q{self._count}", request)
        self._queued.append(question)
        self._changed.set()
        return question

    def withdraw(self, question: Question) -> None:
        """The host request behind *question* is over: forget it."""
        for pending in (self._queued, self._handed):
            if question in pending:
                pending.remove(question)

    def finish(self, outcome: types.CallToolResult) -> None:
        """The invocation ended with *outcome*."""
        self.outcome = outcome
        self._changed.set()

    def answer(self, responses: types.InputResponses) -> None:
        """A retry's answers: each handed-out question gets its reply (or none)."""
        handed, self._handed = self._handed, []
        for question in handed:
            question.reply = responses.get(question.key)
            question.answered.set()

    async def next_step(self) -> types.CallToolResult | dict[str, types.InputRequest]:
        """Wait until the invocation ends (its result) or asks (the questions to send)."""
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
