"""One AG-UI thread's agent tree in the endpoint's store: a view of the store under ids
of the thread's own.

An agent runtime keeps its tree in its store under fixed ids (the handle table
``root#table``, a take-once record per approval, a transcript per handle id; see
:mod:`toolnexus_trio.agents._durable`): one tree per store. The endpoint keeps one tree
per thread in one store shared with the threads' transcripts, so each thread's runtime
gets this view, whose ids are ``agui-tree:<length of the thread id>:<thread id>:<id>``:
distinct per thread (the length says where the thread id ends) and never a thread's own
id (thread ids starting with :data:`PREFIX` are refused, :func:`check_thread`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..loop._results import Message
from ..stores._base import PendingState, PendingStore, check_id, take_with_token

PREFIX: Final = "agui-tree:"
"""Where the ids of the threads' trees begin (no thread id may)."""

_LONGEST_RECORD: Final = "root#pending/" + "f" * 64
"""A long record id of a tree (our own request ids are about 20 characters): a thread id that
leaves no room for it is refused before anything runs. (A tool's own, longer request
id could still not be stored: that save fails with the store's message.)"""


def scoped(thread_id: str, id: str) -> str:
    """The id under which the tree of *thread_id* keeps its record *id*."""
    return f"{PREFIX}{len(thread_id)}:{thread_id}:{id}"


def check_thread(thread_id: str) -> str | None:
    """Why *thread_id* cannot keep a durable tree (``None``: it can)."""
    if thread_id.startswith(PREFIX):
        return f"thread ids starting with {PREFIX!r} are reserved"
    try:
        check_id(thread_id)
        check_id(scoped(thread_id, _LONGEST_RECORD))
    except ValueError as exc:
        return f"the thread id cannot be stored: {exc}"
    return None


class TreeStore:
    """*store* seen by the agent tree of thread *thread_id* (a
    :class:`~toolnexus_trio.stores.PendingStore`: each method is the store's own, on
    :func:`scoped` ids)."""

    def __init__(self, store: PendingStore, thread_id: str) -> None:
        self.store = store
        self.thread_id = thread_id

    def _id(self, id: str) -> str:
        return scoped(self.thread_id, id)

    async def get(self, id: str) -> list[Message] | None:
        """The record *id* of the thread's tree."""
        return await self.store.get(self._id(id))

    async def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the record *id* of the thread's tree."""
        await self.store.save(self._id(id), messages)

    async def get_pending(self, id: str) -> PendingState | None:
        """The pending state of the tree's record *id*."""
        return await self.store.get_pending(self._id(id))

    async def save_pending(self, id: str, messages: Sequence[Message], state: PendingState) -> None:
        """Replace the tree's record *id* and its pending state (one transaction)."""
        await self.store.save_pending(self._id(id), messages, state)

    async def take_pending(
        self, id: str, key: str, messages: Sequence[Message], *, token: str | None = None
    ) -> bool:
        """The store's take-once mark, on the tree's record *id*."""
        if token is None:
            return await self.store.take_pending(self._id(id), key, messages)
        return await take_with_token(self.store, self._id(id), key, messages, token)
