"""PLACEHOLDER (the lead replaces this module with the real one at merge).

Conversation memory (SPEC §8): a :class:`ConversationStore` keeps transcripts by id;
:func:`ask` loads, runs and saves; :class:`Conversation` keeps one transcript in memory.
Only ``client.run`` / ``client.stream`` are used, so both client kinds work alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._results import Message, RunResult

if TYPE_CHECKING:
    from ._client import Client
    from ._toolkit import Toolkit


class ConversationStore(Protocol):
    """Where :meth:`Client.ask` keeps transcripts by id."""

    async def get(self, id: str) -> list[Message] | None:
        """The transcript saved under *id*, or ``None``."""
        ...

    async def save(self, id: str, messages: list[Message]) -> None:
        """Keep *messages* under *id*."""
        ...


class InMemoryConversationStore:
    """The default store: a dict, for the life of the process."""

    def __init__(self) -> None:
        self._threads: dict[str, list[Message]] = {}

    async def get(self, id: str) -> list[Message] | None:
        """The transcript saved under *id*, or ``None``."""
        found = self._threads.get(id)
        return list(found) if found is not None else None

    async def save(self, id: str, messages: list[Message]) -> None:
        """Keep a copy of *messages* under *id*."""
        self._threads[id] = list(messages)


async def ask(
    client: Client,
    store: ConversationStore,
    prompt: str,
    toolkit: Toolkit | None = None,
    *,
    id: str | None = None,
    on_text: Callable[[str], Any] | None = None,
) -> RunResult:
    """One run with *id*'s transcript as history, saved back; ``on_text`` streams text."""
    history = await store.get(id) if id is not None else None
    if on_text is None:
        result = await client.run(prompt, toolkit, history=history)
    else:
        final: RunResult | None = None
        async with client.stream(prompt, toolkit, history=history) as events:
            async for event in events:
                if event["type"] == "text":
                    out = on_text(event["delta"])
                    if inspect.isawaitable(out):
                        await out
                elif event["type"] == "done":
                    final = event["result"]
        assert final is not None
        result = final
    if id is not None:
        await store.save(id, result.messages)
    return result


class Conversation:
    """A transcript kept across :meth:`send` calls."""

    def __init__(self, client: Client, toolkit: Toolkit | None = None) -> None:
        self._client = client
        self._toolkit = toolkit
        self._messages: list[Message] = []

    @property
    def messages(self) -> list[Message]:
        """The transcript so far."""
        return self._messages

    async def send(self, prompt: str) -> RunResult:
        """Run *prompt* with the transcript as history and keep the new transcript."""
        result = await self._client.run(prompt, self._toolkit, history=self._messages)
        self._messages = list(result.messages)
        return result

    def reset(self) -> None:
        """Forget the transcript."""
        self._messages = []
