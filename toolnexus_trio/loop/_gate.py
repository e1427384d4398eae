"""What a turn needs to know about its calls before running them: the ``concurrency_safe``
gate that orders them, and which of them are relay tools' (SPEC §10 relay addendum).

Split from :mod:`toolnexus_trio.loop._toolcalls`, which runs the calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from .._relay import RELAY_KIND
from .._toolkit import Toolkit
from .._tools import ToolSource
from .._wire import Request
from ._results import Message


class _Gate:
    """Orders calls so that a ``concurrency_safe=False`` call never overlaps another."""

    def __init__(self, exclusive: list[bool]) -> None:
        self.done = [trio.Event() for _ in exclusive]
        self.waits: list[list[int]] = []
        last_exclusive = -1
        since_exclusive: list[int] = []
        for i, excl in enumerate(exclusive):
            if excl:
                self.waits.append(
                    ([last_exclusive] if last_exclusive >= 0 else []) + since_exclusive
                )
                last_exclusive, since_exclusive = i, []
            else:
                self.waits.append([last_exclusive] if last_exclusive >= 0 else [])
                since_exclusive.append(i)

    async def wait_turn(self, index: int) -> None:
        for other in self.waits[index]:
            await self.done[other].wait()


def _relay_source(toolkit: Toolkit | None, name: str) -> bool:
    """Whether the tool called *name* is a relay tool."""
    found = toolkit.get(name) if toolkit is not None else None
    return found is not None and found.source is ToolSource.RELAY


def _is_relay(toolkit: Toolkit | None, name: str, request: Request) -> bool:
    """Whether *request* is a relay tool's own suspension (not, say, a guard's approval)."""
    return request.kind == RELAY_KIND and _relay_source(toolkit, name)


def _raw_arguments(messages: Sequence[Message], index: int, call_id: str) -> str | None:
    """The model's raw arguments text for *call_id*, from the assistant message before
    the tool message at *index* (``None`` if it is not there)."""
    for message in reversed(messages[:index]):
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if call.get("id") == call_id and isinstance(function, dict):
                raw = function.get("arguments")
                return raw if isinstance(raw, str) else None
        return None
    return None


def _gate_for(toolkit: Toolkit | None, names: Sequence[str]) -> _Gate | None:
    """A gate when any call goes to a ``concurrency_safe=False`` tool, else ``None``."""
    if toolkit is None:
        return None
    exclusive = []
    for name in names:
        found = toolkit.get(name)
        exclusive.append(found is not None and found.concurrency_safe is False)
    return _Gate(exclusive) if any(exclusive) else None
