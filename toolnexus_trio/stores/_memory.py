"""``InMemoryConversationStore``: the default store, a bounded dict in this process."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ._base import PendingState, check_id

if TYPE_CHECKING:
    from ..loop._results import Message

DEFAULT_MAX_CONVERSATIONS = 10_000
"""How many threads :class:`InMemoryConversationStore` keeps by default (LRU beyond)."""


class InMemoryConversationStore:
    """The default :class:`ConversationStore`: a dict in this process, one per client.

    ``save`` keeps its own copy of the list and ``get`` returns a fresh one, so a caller
    appending to or clearing a list it got or gave cannot change a stored thread (the
    message dicts are shared, not copied; see :class:`ConversationStore`).

    At most *max_conversations* threads are kept (``None`` = no limit): ids can come
    from outside (an A2A ``contextId``), so the default is bounded, and past the bound
    the least recently used thread is forgotten, with its pending state.

    It is a :class:`PendingStore` too: pending runs can be answered with
    :meth:`Client.answer` for as long as this process (and the thread) lives.
    """

    def __init__(self, *, max_conversations: int | None = DEFAULT_MAX_CONVERSATIONS) -> None:
        if max_conversations is not None and max_conversations < 1:
            raise ValueError("max_conversations must be at least 1 (or None for no limit)")
        self.max_conversations = max_conversations
        self._threads: OrderedDict[str, list[Message]] = OrderedDict()
        self._pending: dict[str, PendingState] = {}

    async def get(self, id: str) -> list[Message] | None:
        """A copy of the transcript saved under *id*, or ``None``."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        messages = self._threads.get(id)
        if messages is None:
            return None
        self._threads.move_to_end(id)
        return list(messages)

    async def save(self, id: str, messages: Sequence[Message]) -> None:
        """Keep a copy of *messages* under *id* (forgetting the oldest thread if full).

        A ``"pending"`` state of *id* becomes ``"superseded"``.
        """
        check_id(id)
        await trio.lowlevel.checkpoint()
        state = self._pending.get(id)
        if state is not None and state.status == "pending":
            self._pending[id] = PendingState(state.key, "superseded")
        self._keep(id, messages)

    async def get_pending(self, id: str) -> PendingState | None:
        """The pending state of *id*, or ``None``."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        return self._pending.get(id)

    async def save_pending(self, id: str, messages: Sequence[Message], state: PendingState) -> None:
        """Keep *messages* and *state* under *id* together."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        self._pending[id] = state
        self._keep(id, messages)

    async def take_pending(
        self, id: str, key: str, messages: Sequence[Message], *, token: str | None = None
    ) -> bool:
        """The take-once mark (see :meth:`PendingStore.take_pending`)."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        # No await between the check and the change: atomic within the Trio run.
        state = self._pending.get(id)
        if state is None or state.key != key or state.status != "pending":
            return False
        self._pending[id] = PendingState(key, "taken", taken_by=token)
        self._keep(id, messages)
        return True

    def _keep(self, id: str, messages: Sequence[Message]) -> None:
        self._threads[id] = list(messages)
        self._threads.move_to_end(id)
        if self.max_conversations is not None and len(self._threads) > self.max_conversations:
            forgotten, _ = self._threads.popitem(last=False)
            self._pending.pop(forgotten, None)

    def __len__(self) -> int:
        """How many threads are stored."""
        return len(self._threads)
