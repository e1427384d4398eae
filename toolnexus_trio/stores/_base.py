"""The store protocols (SPEC §8 "Conversation memory"): :class:`ConversationStore`,
:class:`PendingStore` and the :class:`PendingState` a pending run is kept as.

The loop (:mod:`toolnexus_trio.loop`) saves and reads threads through these; the
stores of this package implement them, and so can a user's own (a file, a database).
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from .._converter import payloads, structure_strictly

if TYPE_CHECKING:
    from ..loop._results import Message, RunResult


MAX_ID_BYTES = 2048
"""The longest thread id a store accepts, in UTF-8 bytes (2 048 ASCII characters).

PostgreSQL cannot index much more (an index row holds at most about 2 700 bytes)."""


def check_id(id: object) -> str:
    """*id* if it is a thread id every store keeps, else :class:`ValueError` saying why.

    The one id contract of every store (memory, SQLite, PostgreSQL), checked before any
    database is asked, so a refusal is permanent and says so (never a lost connection
    to retry): a :class:`str` of at most :data:`MAX_ID_BYTES` bytes in UTF-8, without
    control characters (U+0000 to U+001F, U+007F) or lone surrogates. Ids can come from
    outside (an A2A ``contextId``, a user's name).
    """
    if not isinstance(id, str):
        raise TypeError(f"a thread id is a str, not {type(id).__name__}")
    try:
        size = len(id.encode())
    except UnicodeEncodeError:
        raise ValueError("a thread id must not hold a lone surrogate (it is not UTF-8)") from None
    if size > MAX_ID_BYTES:
        raise ValueError(
            f"a thread id is at most {MAX_ID_BYTES} bytes in UTF-8; this one is {size} "
            f"(starting {id[:40]!r})"
        )
    bad = next((c for c in id if c < " " or c == "\x7f"), None)
    if bad is not None:
        raise ValueError(f"a thread id must not hold control characters ({bad!r} in {id[:80]!r})")
    return id


@runtime_checkable
class ConversationStore(Protocol):
    """Where :func:`ask` keeps each thread's transcript (SPEC §8 "Conversation memory").

    Implement these two methods over a file, a database or Redis to keep threads
    across processes; :class:`InMemoryConversationStore` is the default. Messages are
    OpenAI-shaped dicts, treated as immutable values: the library never changes a
    message in place. :class:`PendingStore` adds what :meth:`Client.answer` needs.
    """

    async def get(self, id: str) -> list[Message] | None:
        """The transcript saved under *id*, or ``None`` for a new thread."""
        ...

    async def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript of *id* with *messages*."""
        ...


PendingStatus = Literal["pending", "taken", "answered", "superseded"]


@attrs.frozen
class PendingState:
    """The pending run of a thread, as a :class:`PendingStore` keeps it.

    ``key`` is unique per suspension (a new one each time a run of the thread halts);
    ``status`` is ``"pending"`` (answerable), ``"taken"`` (an answer took it and is
    running, or its process died: the transcript then holds the interrupted outcome),
    ``"answered"`` (the outcome is saved) or ``"superseded"`` (a later ``save`` of the
    thread moved on without answering). ``result`` is the halted run's
    :meth:`RunResult.to_json` while the status is ``"pending"``, else ``None``.
    ``taken_by`` is, while the status is ``"taken"``, the token the take was given
    (:meth:`PendingStore.take_pending`), so that a retry of an answer whose take
    committed as its connection broke recognises its own attempt; else ``None``.
    A store keeps it as three values (the token goes where ``result`` was);
    :meth:`to_json` and :meth:`from_json` give one.
    """

    key: str
    status: PendingStatus
    result: dict[str, Any] | None = None
    taken_by: str | None = None

    @classmethod
    def of(cls, result: RunResult) -> PendingState:
        """A fresh ``"pending"`` state (new key) for a run that returned ``pending``."""
        return cls(uuid.uuid4().hex, "pending", result.to_json())

    def to_json(self) -> dict[str, Any]:
        """``{"key", "status", "result"}``, and ``"taken_by"`` when set."""
        out: dict[str, Any] = {"key": self.key, "status": self.status, "result": self.result}
        if self.taken_by is not None:
            out["taken_by"] = self.taken_by
        return out

    @classmethod
    def from_json(cls, data: Any) -> PendingState:
        """Read :meth:`to_json`'s form strictly (:class:`ValueError` saying why)."""
        return structure_strictly(payloads, data, cls)


@runtime_checkable
class PendingStore(ConversationStore, Protocol):
    """A :class:`ConversationStore` that also keeps each thread's :class:`PendingState`.

    :meth:`Client.answer` needs it. Three methods beyond ``get``/``save``, each one
    atomic write or read; ``save`` must also turn a ``"pending"`` state into
    ``"superseded"`` (with ``result`` dropped) in the same write, so that an old answer
    cannot resume a thread that has moved on. :class:`PostgresConversationStore` is one
    over PostgreSQL; see the "Durable approvals" docs to write another.
    """

    async def get_pending(self, id: str) -> PendingState | None:
        """The pending state of *id* (any status), or ``None`` if it never had one."""
        ...

    async def save_pending(self, id: str, messages: Sequence[Message], state: PendingState) -> None:
        """Replace the transcript *and* the pending state of *id*, in one transaction."""
        ...

    async def take_pending(
        self, id: str, key: str, messages: Sequence[Message], *, token: str | None = None
    ) -> bool:
        """The take-once mark, one conditional update: if *id*'s state has *key* and
        status ``"pending"``, set status ``"taken"`` (with ``taken_by`` *token*), drop
        its ``result`` and replace the transcript with *messages*, then return ``True``;
        otherwise change nothing and return ``False``. Two takes of one state, from any
        processes, never both win. (*token* is optional for a store written before it
        existed: :meth:`Client.answer` then only cannot tell its own earlier attempt.)"""
        ...


def pending_of(key: str, status: str, result: Any) -> dict[str, Any]:
    """:meth:`PendingState.from_json`'s form from a row's three columns (*result*
    already parsed): a ``"taken"`` row keeps its token where the result was,
    ``{"taken_by": token}``, so the schema (and older processes reading it) stay as
    they were."""
    if status == "taken" and isinstance(result, dict) and set(result) == {"taken_by"}:
        return {"key": key, "status": status, "result": None, "taken_by": result["taken_by"]}
    return {"key": key, "status": status, "result": result}


def token_column(token: str | None) -> str | None:
    """What a take writes where the result was: ``{"taken_by": token}`` as JSON."""
    return None if token is None else json.dumps({"taken_by": token})


async def take_with_token(
    store: PendingStore, id: str, key: str, messages: Sequence[Message], token: str
) -> bool:
    """``store.take_pending(..., token=token)``, or without *token* for a store whose
    ``take_pending`` predates it (three parameters, no ``**kwargs``)."""
    try:
        parameters = list(inspect.signature(store.take_pending).parameters.values())
    except (TypeError, ValueError):  # no signature to read: assume the current protocol
        return await store.take_pending(id, key, messages, token=token)
    if any(p.name == "token" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return await store.take_pending(id, key, messages, token=token)
    return await store.take_pending(id, key, messages)
