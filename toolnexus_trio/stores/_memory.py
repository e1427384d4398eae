"""``InMemoryConversationStore``: the default store, a bounded dict in this process."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._base import (
    PendingState,
    RunCheckpoint,
    RunCheckpointStatus,
    check_id,
    check_lease,
    dumps_state,
    loads_state,
)

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
        self._runs: dict[str, _RunRow] = {}

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

    # -- CheckpointStore (runs live as long as this process: a crash loses them) --

    async def start_run(self, id: str, owner: str, lease_ms: int, state: dict[str, Any]) -> bool:
        """Begin a durable run (see :meth:`CheckpointStore.start_run`)."""
        check_id(id)
        check_lease(lease_ms)
        text = dumps_state(state)
        await trio.lowlevel.checkpoint()
        row = self._runs.get(id)
        if row is not None and row.status == "running":
            return False
        self._runs[id] = _RunRow(text, "running", owner, trio.current_time() + lease_ms / 1000)
        return True

    async def claim_run(self, id: str, owner: str, lease_ms: int) -> bool:
        """Take over an orphaned run (see :meth:`CheckpointStore.claim_run`)."""
        check_id(id)
        check_lease(lease_ms)
        await trio.lowlevel.checkpoint()
        row = self._runs.get(id)
        now = trio.current_time()
        if row is None or row.status != "running" or row.lease_until >= now:
            return False
        row.owner, row.lease_until = owner, now + lease_ms / 1000
        return True

    async def renew_lease(self, id: str, owner: str, lease_ms: int) -> bool:
        """Extend *owner*'s lease (see :meth:`CheckpointStore.renew_lease`)."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        row = self._owned(id, owner)
        if row is None:
            return False
        row.lease_until = trio.current_time() + lease_ms / 1000
        return True

    async def save_checkpoint(
        self, id: str, owner: str, state: dict[str, Any], *, durable: bool = True
    ) -> bool:
        """Replace the run's state if *owner* holds it."""
        check_id(id)
        text = dumps_state(state)
        await trio.lowlevel.checkpoint()
        row = self._owned(id, owner)
        if row is None:
            return False
        row.state = text
        return True

    async def load_checkpoint(self, id: str) -> RunCheckpoint | None:
        """The run kept under *id*, or ``None``."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        row = self._runs.get(id)
        if row is None:
            return None
        expired = row.lease_until < trio.current_time()
        return RunCheckpoint(id, loads_state(row.state, id), row.status, row.owner, expired)

    async def finish_run(
        self,
        id: str,
        owner: str,
        status: RunCheckpointStatus,
        messages: Sequence[Message] | None,
        pending: PendingState | None = None,
    ) -> bool:
        """End the run and save the thread together (see :class:`CheckpointStore`)."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        row = self._owned(id, owner)
        if row is None:
            return False
        row.status, row.owner, row.lease_until = status, None, 0.0
        if messages is not None:
            if pending is not None:
                self._pending[id] = pending
            else:
                state = self._pending.get(id)
                if state is not None and state.status == "pending":
                    self._pending[id] = PendingState(state.key, "superseded")
            self._keep(id, messages)
        return True

    async def release_run(self, id: str, owner: str) -> None:
        """Give the lease up at once (the run stays ``"running"``, recoverable now)."""
        check_id(id)
        await trio.lowlevel.checkpoint()
        row = self._owned(id, owner)
        if row is not None:
            row.lease_until = -math.inf

    async def orphaned_runs(self, limit: int = 100) -> list[str]:
        """Ids of running runs whose lease expired."""
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        return [i for i, r in self._runs.items() if r.status == "running" and r.lease_until < now][
            :limit
        ]

    def _owned(self, id: str, owner: str) -> _RunRow | None:
        row = self._runs.get(id)
        if row is None or row.status != "running" or row.owner != owner:
            return None
        return row

    def _keep(self, id: str, messages: Sequence[Message]) -> None:
        self._threads[id] = list(messages)
        self._threads.move_to_end(id)
        if self.max_conversations is not None and len(self._threads) > self.max_conversations:
            forgotten, _ = self._threads.popitem(last=False)
            self._pending.pop(forgotten, None)
            self._runs.pop(forgotten, None)

    def __len__(self) -> int:
        """How many threads are stored."""
        return len(self._threads)


@attrs.define
class _RunRow:
    state: str  # JSON text: a copy, so the loop's later changes never reach it
    status: RunCheckpointStatus
    owner: str | None
    lease_until: float
