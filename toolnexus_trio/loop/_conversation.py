"""Conversation memory (SPEC §8): ``ConversationStore``, the in-memory store, ``ask``
and the stateful :class:`Conversation`.

Everything here drives a client through :class:`ConversationClient` (``run`` and
``stream``), so this module does not import the client and the client can build on it.

Rules shared by :func:`ask` and :class:`Conversation`:

- The transcript saved is ``RunResult.messages`` of a run that *returned*, whatever its
  status: ``done``, ``pending`` (a tool suspended: its placeholder tool message keeps
  the transcript balanced; continue it with :meth:`Client.answer`, or after
  :meth:`Client.resume` save ``resumed.messages`` yourself to keep the thread),
  ``incomplete`` (``max_turns``) or ``cancelled`` (the run's token).
- A run that *raised* (``RunTimeout``, ``GenerateError``, ``trio.Cancelled``, an
  exception from ``on_text``) saves nothing: the stored thread stays at its last good
  state, so retrying the same prompt does not leave the first attempt's user message
  behind it.
- Turns on one thread are serialized: two concurrent ``ask`` calls with the same store
  and id (or two concurrent :meth:`Conversation.send`) run one after the other, the
  second one seeing the first one's answer. Without that, both would start from the
  same history and the later save would silently drop the other turn.
- With a :class:`PendingStore` (both stores of the package are), a ``pending`` run is
  saved with its :class:`PendingState` in the same write, so that
  :meth:`Client.answer` can continue it later, in any process, exactly once
  (:mod:`toolnexus_trio.loop._durable`).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ..stores._base import ConversationStore, PendingState, PendingStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._toolkit import Toolkit
    from ._results import Message, Prompt, RunResult

OnText = Callable[[str], object]
"""An ``on_text`` callback: receives each assistant text delta; an awaitable it returns
(an ``async def``) is awaited, any other return value (``sys.stdout.write``) ignored."""


class ConversationClient(Protocol):
    """What :func:`ask` and :class:`Conversation` need from a client: ``run`` and ``stream``.

    Both :func:`create_client` and :func:`create_in_process_client` clients fit.
    """

    async def run(
        self,
        prompt: Prompt,
        toolkit: Toolkit | None = None,
        *,
        history: Sequence[Message] | None = None,
        output_type: Any = None,
        output_mode: Any = None,
        output_retries: int | None = None,
        output_validators: Any = None,
    ) -> RunResult:
        """Run the loop, continuing *history*; see :meth:`Client.run`."""
        ...

    def stream(
        self,
        prompt: Prompt,
        toolkit: Toolkit | None = None,
        *,
        history: Sequence[Message] | None = None,
        output_type: Any = None,
        output_mode: Any = None,
        output_retries: int | None = None,
        output_validators: Any = None,
    ) -> AbstractAsyncContextManager[AsyncIterable[dict[str, Any]]]:
        """The same run as a stream of events; see :meth:`Client.stream`."""
        ...


async def ask(
    client: ConversationClient,
    store: ConversationStore,
    prompt: Prompt,
    toolkit: Toolkit | None = None,
    *,
    id: str | None = None,
    on_text: OnText | None = None,
    output: Mapping[str, Any] | None = None,
) -> RunResult:
    """One turn of a stored thread (SPEC §8 ``ask``); returns the :class:`RunResult`.

    With *id*, the thread's transcript is loaded from *store* as ``history``, the loop
    runs, and ``result.messages`` is saved back under *id*, so the next ``ask`` with the
    same *id* continues it. Without *id*, it is a stateless ``run`` and *store* is not
    touched. With *on_text* (sync or async), the run streams and *on_text* receives each
    assistant text delta as it arrives; without it nothing streams. The rules on what
    is saved and on concurrent turns are in the module docs: a run that returned is
    saved whatever its status, one that raised saves nothing, and turns on one id run
    one at a time. *output* holds the ``output_*`` keywords of :meth:`Client.run`.
    """
    output = output or {}
    if id is None:
        return await _turn(client, prompt, toolkit, None, on_text, output)
    async with _thread_lock(store, id):
        history = await store.get(id)
        result = await _turn(client, prompt, toolkit, history, on_text, output)
        if result.status == "pending" and isinstance(store, PendingStore):
            await store.save_pending(id, result.messages, PendingState.of(result))
        else:
            await store.save(id, result.messages)
        return result


async def _turn(
    client: ConversationClient,
    prompt: Prompt,
    toolkit: Toolkit | None,
    history: Sequence[Message] | None,
    on_text: OnText | None,
    output: Mapping[str, Any] | None = None,
) -> RunResult:
    output = output or {}
    if on_text is None:
        return await client.run(prompt, toolkit, history=history, **output)
    result: RunResult | None = None
    async with client.stream(prompt, toolkit, history=history, **output) as events:
        async for event in events:
            kind = event.get("type")
            if kind == "text":
                # Awaiting whatever comes back covers async functions, partials of
                # them and sync callables that return an awaitable alike.
                outcome = on_text(event["delta"])
                if inspect.isawaitable(outcome):
                    await outcome
            elif kind == "done":
                result = event["result"]
    if result is None:
        raise RuntimeError("the stream ended without a 'done' event")
    return result


@attrs.define
class _Holder:
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    users: int = 0


# Per Trio run, so separate runs (or threads each running Trio) never share a lock.
# Entries live only while some ask holds or waits for them, so ids cannot pile up, and
# id(store) cannot be reused meanwhile because the waiting ask keeps the store alive.
_THREAD_LOCKS: trio.lowlevel.RunVar[dict[tuple[int, str], _Holder]] = trio.lowlevel.RunVar(
    "toolnexus_thread_locks"
)


@asynccontextmanager
async def _thread_lock(store: ConversationStore, thread_id: str) -> AsyncIterator[None]:
    try:
        table = _THREAD_LOCKS.get()
    except LookupError:
        table = {}
        _THREAD_LOCKS.set(table)
    key = (id(store), thread_id)
    holder = table.get(key)
    if holder is None:
        holder = table[key] = _Holder()
    holder.users += 1
    try:
        async with holder.lock:
            yield
    finally:
        holder.users -= 1
        if holder.users == 0:
            del table[key]


class Conversation:
    """A stateful thread over a client (SPEC §8 ``client.conversation()``).

    :meth:`send` runs the loop with the transcript so far as ``history`` and keeps the
    result's transcript; :attr:`messages` reads it and :meth:`reset` clears it. Sends
    are serialized (see the module docs); a send that raises leaves the transcript as
    it was.
    """

    def __init__(self, client: ConversationClient, toolkit: Toolkit | None = None) -> None:
        self.client = client
        self.toolkit = toolkit
        self._messages: list[Message] = []
        self._lock = trio.Lock()
        self._generation = 0  # bumped by reset(), so a send in flight does not undo it

    async def send(self, prompt: Prompt) -> RunResult:
        """Send *prompt* as the next user turn and return the run's :class:`RunResult`."""
        async with self._lock:
            generation = self._generation
            result = await self.client.run(prompt, self.toolkit, history=self._messages)
            if generation == self._generation:
                # Our own list: the caller may change result.messages afterwards.
                self._messages = list(result.messages)
            return result

    @property
    def messages(self) -> list[Message]:
        """A copy of the transcript (changing it does not change the conversation)."""
        return list(self._messages)

    def reset(self) -> None:
        """Forget the transcript; a send still in flight will not restore it."""
        self._messages = []
        self._generation += 1
