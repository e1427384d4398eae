"""Escalation across handles (SPEC §7D, §10 "Agent escalation addendum").

A suspending child presents to its parent exactly as a suspending tool: the request is
relayed unchanged except for ``data.path``, which each relaying level stamps with its
own id segments, so the value at any level names the suspended subtree. An answer is
routed to the deepest handle suspended on its request id.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import attrs

from .._wire import Answer, Request
from ._types import Handle


def stamp(request: Request, h: Handle) -> Request:
    """*request* relayed by *h*: ``data.path`` is *h*'s id segments (same id)."""
    data = dict(request.data or {})
    data["path"] = h.id.split("/")
    return attrs.evolve(request, data=data)


def _suspended_on(h: Handle, request_id: str) -> bool:
    return h.state == "suspended" and h.pending is not None and h.pending.id == request_id


def suspended_path(root: Handle, request_id: str) -> list[Handle]:
    """The handles suspended on *request_id*, from the root's child down to the deepest
    (empty when none is)."""
    path: list[Handle] = []
    level = root.children
    while True:
        below = next((c for c in level if _suspended_on(c, request_id)), None)
        if below is None:
            return path
        path.append(below)
        level = below.children


async def ask(wait_for: Any, request: Request) -> Answer | None:
    """A def's ``wait_for``, plain or ``async``; an answer may also be its JSON form."""
    answer = wait_for(request)
    if inspect.isawaitable(answer):
        answer = await answer
    if isinstance(answer, Mapping):
        answer = Answer.from_json({"id": request.id, **answer})
    return answer  # type: ignore[no-any-return]
