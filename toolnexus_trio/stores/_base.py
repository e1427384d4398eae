"""The store protocols (SPEC §8 "Conversation memory"): :class:`ConversationStore`,
:class:`PendingStore` and the :class:`PendingState` a pending run is kept as.

The loop (:mod:`toolnexus_trio.loop`) saves and reads threads through these; the
stores of this package implement them, and so can a user's own (a file, a database).
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable, Sequence
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


def dumps_json(value: Any, what: str) -> str:
    """*value* as the compact ASCII JSON the database stores (:class:`ValueError` naming
    *what* if it is not JSON). ASCII: U+0000 and lone surrogates survive as escapes,
    which neither a UTF-8 file nor PostgreSQL's ``text`` could hold."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None


def loads_json(text: str, what: str) -> Any:
    """:func:`dumps_json` read back (:class:`ValueError` naming *what* if damaged)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} in the database is damaged: {exc}") from None


def pending_column(state: PendingState) -> str | None:
    """What a row keeps of *state* beside its key and status: its result as JSON, or
    for a ``"taken"`` state its token (:func:`token_column`)."""
    if state.result is None:
        return token_column(state.taken_by)
    return dumps_json(state.result, "the pending run")


def finish_columns(
    id: str, messages: Sequence[Message] | None, pending: PendingState | None
) -> tuple[str | None, str | None]:
    """The thread columns :meth:`CheckpointStore.finish_run` writes, as the SQL stores
    keep them: the transcript's JSON (``None``: the thread is left as it was) and
    :func:`pending_column` of *pending* (``None`` without one)."""
    text = None if messages is None else dumps_json(list(messages), f"the transcript of {id!r}")
    return text, None if pending is None else pending_column(pending)


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


RunCheckpointStatus = Literal["running", "done", "failed"]


@attrs.frozen
class RunCheckpoint:
    """The last checkpoint of a durable run, as a :class:`CheckpointStore` keeps it.

    ``state`` is the loop's own JSON document (see "Crash-durable runs" in the docs);
    ``status`` is ``"running"`` (an owner works on it, or its owner died: see
    ``expired``), ``"done"`` (finished, its outcome saved in the thread) or
    ``"failed"`` (it raised; the thread was left as it was). ``owner`` is the opaque
    token of the process holding the lease (``None`` once finished); ``expired`` is
    whether that lease has run out (a ``"running"`` run with an expired lease is
    orphaned: :meth:`CheckpointStore.claim_run` can take it over).
    """

    id: str
    state: dict[str, Any]
    status: RunCheckpointStatus
    owner: str | None
    expired: bool


@runtime_checkable
class CheckpointStore(PendingStore, Protocol):
    """A :class:`PendingStore` that also keeps durable runs: checkpoints and leases.

    ``ClientOptions(durable=True)`` needs it (all three stores of the package are).
    Every method is one atomic step on the store; each write of a run is *fenced* by
    its ``owner`` token, so a process whose lease was taken over can no longer write:
    its next write returns ``False`` and the loop stops. Lease times are the store's
    own clock (the process's wall clock for SQLite, the server's ``now()`` for
    PostgreSQL, Trio's clock for the in-memory store).
    """

    async def start_run(self, id: str, owner: str, lease_ms: int, state: dict[str, Any]) -> bool:
        """Begin a durable run under *id* owned by *owner* with *state*, unless a run of
        *id* is still ``"running"`` (alive, or orphaned and not yet recovered): then
        change nothing and return ``False``."""
        ...

    async def claim_run(self, id: str, owner: str, lease_ms: int) -> bool:
        """Take over the orphaned run *id* (status ``"running"``, lease expired): one
        conditional update, so of any number of claims one returns ``True``."""
        ...

    async def renew_lease(self, id: str, owner: str, lease_ms: int) -> bool:
        """Extend *owner*'s lease of *id* to *lease_ms* from now; ``False`` if it is not
        *owner*'s any more."""
        ...

    async def save_checkpoint(
        self, id: str, owner: str, state: dict[str, Any], *, durable: bool = True
    ) -> bool:
        """Replace the state of *id* if *owner* still holds it; else ``False``.

        ``durable=False``: the write may be lost in a power cut or an OS crash (never
        in a process crash), which the loop asks for only where losing it is safe (a
        tool result: the call is then in doubt, never run twice). A store may ignore
        it and always flush."""
        ...

    async def load_checkpoint(self, id: str) -> RunCheckpoint | None:
        """The run kept under *id*, or ``None``."""
        ...

    async def finish_run(
        self,
        id: str,
        owner: str,
        status: RunCheckpointStatus,
        messages: Sequence[Message] | None,
        pending: PendingState | None = None,
    ) -> bool:
        """End *owner*'s run of *id* with *status* and, in the same transaction, save
        the thread's transcript *messages* (with *pending*, as ``save_pending`` does;
        ``None`` messages: the thread is left as it was). ``False`` (and nothing
        written) if the run is not *owner*'s any more."""
        ...

    async def release_run(self, id: str, owner: str) -> None:
        """Give up *owner*'s lease of *id* at once, leaving it ``"running"``: another
        worker may recover it now (a graceful shutdown)."""
        ...

    async def orphaned_runs(self, limit: int = 100) -> list[str]:
        """Up to *limit* ids of ``"running"`` runs whose lease has expired, oldest first."""
        ...


FirstState = Callable[[list["Message"] | None], dict[str, Any]]
"""What :func:`begin_run` asks for a run's first state: a function of the thread's
transcript (``None`` for a new thread). A store may call it in its worker thread, so it
reads nothing that the event loop may change meanwhile."""


async def begin_run(
    store: CheckpointStore, id: str, owner: str, lease_ms: int, first: FirstState
) -> bool:
    """A durable run's beginning: ``store.get(id)``, then ``store.start_run`` with the
    state ``first(transcript)``.

    A store may do both in one step with a method of its own, ``begin_run(id, owner,
    lease_ms, first)`` of the same meaning (the SQLite and PostgreSQL stores do: one
    trip to their worker thread instead of two); an optional addition, so a
    :class:`CheckpointStore` written without it keeps working."""
    own = getattr(store, "begin_run", None)
    if own is not None:
        started: bool = await own(id, owner, lease_ms, first)
        return started
    return await store.start_run(id, owner, lease_ms, first(await store.get(id)))


def dumps_state(state: dict[str, Any]) -> str:
    """A run's checkpoint state as compact ASCII JSON (:class:`ValueError` if not JSON)."""
    return dumps_json(state, "the checkpoint of a run")


def loads_state(text: str, id: str) -> dict[str, Any]:
    """:func:`dumps_state` read back (:class:`ValueError` if damaged)."""
    state = loads_json(text, f"the checkpoint of {id!r}")
    if not isinstance(state, dict):
        raise ValueError(f"the checkpoint of {id!r} in the database is not an object")
    return state


def check_lease(lease_ms: int) -> int:
    """*lease_ms* if it is a positive int, else :class:`ValueError`."""
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms < 1:
        raise ValueError(f"lease_ms must be a positive integer, not {lease_ms!r}")
    return lease_ms
