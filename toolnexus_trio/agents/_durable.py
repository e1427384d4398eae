"""Durable agent trees: the handle table and the tree's pending approvals in the store.

A runtime opened on a :class:`~toolnexus_trio.stores.PendingStore` (SQLite, PostgreSQL,
the in-memory one) keeps, next to the transcripts the runtime saves under each handle
id, two kinds of record, through the store's existing methods only:

``"root#table"`` (:data:`TABLE_ID`)
    The handle table: a transcript of one ``system`` message whose content is the
    versioned JSON of :class:`TableDoc` (the runtime's snapshot, plus which root-level
    approvals are outstanding). Rewritten with a plain ``save`` after every change, and
    saved *before* the change is told to anyone (a ``pending`` result is durable when
    ``run`` returns it). It holds what a resume needs, not history: the open handles and
    the closed children a halted run may reattach to, idle handles' last results cut
    (see :func:`~toolnexus_trio.agents._snapshot.snapshot`), so it stays far below
    :data:`MAX_RECORD_CHARS` (a write that would pass it is refused, never stored).

``"root#pending/<request id>"`` (:func:`pending_id`)
    One per approval the tree returned to the host (a root child that came back
    ``pending``): an empty transcript with a :class:`~toolnexus_trio.stores.PendingState`
    whose ``result`` is :class:`PendingDoc`. It is the take-once mark: ``resume(answer)``
    takes it with ``take_pending`` (one conditional write) *before* any tool runs, so of
    two answers, in one process or two, exactly one wins and the other raises
    :class:`~toolnexus_trio.AlreadyAnswered`; a finished resume marks it ``"answered"``,
    an interrupt of the suspended handle ``"superseded"`` (a plain ``save``).

Handle ids all start with ``root/`` and these records with ``root#``, so no record can
clash with a transcript. A store is outside input: every record is read strictly (size and
depth bounded before parsing, unknown keys refused, a newer version refused with a
message that says so) and anything else is a :class:`DurableFormatError`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import trio
from cattrs.preconf.json import make_converter

from .._converter import make_strict, structure_strictly
from .._schema import MAX_JSON_DEPTH, nested_too_deeply
from .._wire import Answer, Request
from ..loop._durable import AlreadyAnswered
from ..stores._base import ConversationStore, PendingState, PendingStore
from ._snapshot_check import DurableFormatError, check_snapshot

if TYPE_CHECKING:
    from ._runtime import AgentRuntime
    from ._types import Handle

FORMAT_VERSION: Final = 1
"""The version of the records this module writes, and the newest it reads."""

TABLE_ID: Final = "root#table"
"""The conversation id the handle table is saved under."""

TABLE_FORMAT: Final = "toolnexus-trio/agent-table"
PENDING_FORMAT: Final = "toolnexus-trio/agent-pending"

MAX_RECORD_CHARS: Final = 16 * 1024 * 1024
"""The longest table record read back (a table holds no transcripts: far below this)."""

# A snapshot holds transcripts' tool arguments a few levels down.
_DEPTH: Final = MAX_JSON_DEPTH + 16


def pending_id(request_id: str) -> str:
    """The conversation id of the take-once record of the root-level request *request_id*."""
    return f"root#pending/{request_id}"


@attrs.frozen
class PendingEntry:
    """One approval the tree returned to the host: its request id, the root child that
    carries it, and the key of its take-once record."""

    request_id: str
    handle: str
    key: str


@attrs.frozen
class TableDoc:
    """The table record: the runtime's snapshot and the outstanding root-level approvals."""

    format: Literal["toolnexus-trio/agent-table"]
    version: int
    snapshot: dict[str, Any]
    pending: list[PendingEntry]


@attrs.frozen
class PendingDoc:
    """The ``result`` of a take-once record: which handle and which request (wire form)."""

    format: Literal["toolnexus-trio/agent-pending"]
    version: int
    handle: str
    request: dict[str, Any]


# Attribute names as keys, unknown keys refused, value kinds strict.
_docs = make_strict(make_converter(forbid_extra_keys=True))


def _check_version(data: Any, what: str) -> None:
    if not isinstance(data, dict):
        raise DurableFormatError(f"the {what} record is not a JSON object")
    version = data.get("version")
    if type(version) is not int:
        raise DurableFormatError(f"the {what} record has no integer version")
    if version > FORMAT_VERSION:
        raise DurableFormatError(
            f"the {what} record was written by a newer toolnexus_trio (version {version}, "
            f"this one reads up to {FORMAT_VERSION})"
        )
    if version < 1:
        raise DurableFormatError(f"the {what} record has an invalid version {version}")


def _strict(data: Any, cls: type[Any], what: str) -> Any:
    _check_version(data, what)
    try:
        return structure_strictly(_docs, data, cls)
    except ValueError as exc:
        raise DurableFormatError(f"the {what} record is damaged: {exc}") from None


# -- the table record --------------------------------------------------------------


def table_message(snapshot: Mapping[str, Any], pending: Iterable[PendingEntry]) -> dict[str, Any]:
    """The one message the table record's transcript holds."""
    doc = {
        "format": TABLE_FORMAT,
        "version": FORMAT_VERSION,
        "snapshot": dict(snapshot),
        "pending": [attrs.asdict(p) for p in pending],
    }
    try:
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the runtime's snapshot is not JSON: {exc}") from None
    if len(text) > MAX_RECORD_CHARS:
        # Refused before anything is written: the stored table stays readable.
        raise ValueError(
            f"the handle table would be {len(text)} characters (at most {MAX_RECORD_CHARS})"
        )
    return {"role": "system", "name": "toolnexus-trio-agents", "content": text}


def read_table(messages: Sequence[Any] | None) -> TableDoc | None:
    """Parse the table record's transcript strictly; ``None`` if there is none."""
    if messages is None:
        return None
    if not isinstance(messages, list | tuple) or len(messages) != 1:
        raise DurableFormatError(f"the table record {TABLE_ID!r} is not one message")
    (message,) = messages
    if (
        not isinstance(message, dict)
        or set(message) != {"role", "name", "content"}
        or message["role"] != "system"
        or message["name"] != "toolnexus-trio-agents"
        or not isinstance(message["content"], str)
    ):
        raise DurableFormatError(f"the table record {TABLE_ID!r} is not a table message")
    text: str = message["content"]
    if len(text) > MAX_RECORD_CHARS:
        raise DurableFormatError(
            f"the table record is {len(text)} characters (at most {MAX_RECORD_CHARS})"
        )
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DurableFormatError(f"the table record is not JSON: {exc}") from None
    if nested_too_deeply(data, _DEPTH, text):
        raise DurableFormatError(f"the table record nests more than {_DEPTH} levels")
    doc: TableDoc = _strict(data, TableDoc, "table")
    ids = [p.request_id for p in doc.pending]
    if len(set(ids)) != len(ids):
        raise DurableFormatError("the table record lists one pending request twice")
    return doc


# -- the take-once records ------------------------------------------------------------


def pending_state(handle: str, request: Request) -> PendingState:
    """A fresh ``"pending"`` take-once state (new key) for *request* carried by *handle*."""
    doc = {
        "format": PENDING_FORMAT,
        "version": FORMAT_VERSION,
        "handle": handle,
        "request": request.to_json(),
    }
    return PendingState(uuid.uuid4().hex, "pending", doc)


def read_pending(state: PendingState) -> tuple[str, Request]:
    """The handle and request of a ``"pending"`` take-once state, read strictly."""
    if state.result is None:
        raise DurableFormatError("the pending record has no result: the store is damaged")
    if nested_too_deeply(state.result, _DEPTH):
        raise DurableFormatError(f"the pending record nests more than {_DEPTH} levels")
    doc: PendingDoc = _strict(state.result, PendingDoc, "pending")
    try:
        request = Request.from_json(doc.request)
    except ValueError as exc:
        raise DurableFormatError(f"the pending record's request is damaged: {exc}") from None
    return doc.handle, request


# -- keeping one runtime's tree --------------------------------------------------------

_SAVE_GRACE_S: Final = 30.0
"""How long a durable write may take once its caller is cancelled (it then still ends)."""


class DurableTree:
    """Keeps one runtime's tree in a :class:`~toolnexus_trio.stores.PendingStore`.

    :meth:`load` reads the table back (for :meth:`AgentRuntime.restore`); :meth:`persist`
    writes it after each change of the tree, with a take-once record for every new
    root-level approval; :meth:`take` is the take-once step of a resume. Writes are
    serialised (one table write at a time, in the order of the changes) and shielded
    for a bounded time, so a cancelled caller never leaves half of a change written.
    """

    def __init__(self, store: PendingStore) -> None:
        self.store = store
        self._outstanding: dict[str, PendingEntry] = {}  # request id -> its record
        self._taken: dict[str, PendingEntry] = {}  # taken here; the resume is running
        self._lock = trio.Lock()

    async def load(self) -> dict[str, Any] | None:
        """The snapshot saved in the store, or ``None`` if it holds no tree."""
        doc = read_table(await self.store.get(TABLE_ID))
        if doc is None:
            return None
        self._outstanding = {p.request_id: p for p in doc.pending}
        return doc.snapshot

    async def persist(
        self, snapshot: Mapping[str, Any], root_pending: Iterable[tuple[str, Request]]
    ) -> None:
        """Save *snapshot* and the take-once records of *root_pending* (the approvals the
        tree is waiting for, as ``(root child id, request)``).

        A new approval gets its record before the table names it; one no longer waited
        for is marked ``"answered"`` if this process took it, else ``"superseded"`` (an
        interrupt cancelled it).
        """
        now = {request.id: (handle, request) for handle, request in root_pending}
        message = table_message(snapshot, [])  # fails before anything is written
        with trio.move_on_after(_SAVE_GRACE_S, shield=True):
            async with self._lock:
                for rid, (handle, request) in now.items():
                    if rid not in self._outstanding and rid not in self._taken:
                        state = pending_state(handle, request)
                        await self.store.save_pending(pending_id(rid), [], state)
                        self._outstanding[rid] = PendingEntry(rid, handle, state.key)
                for rid in [r for r in self._outstanding if r not in now]:
                    del self._outstanding[rid]
                    await self.store.save(pending_id(rid), [])  # pending -> superseded
                for rid in [r for r in self._taken if r not in now]:
                    entry = self._taken.pop(rid)
                    answered = PendingState(entry.key, "answered")
                    await self.store.save_pending(pending_id(rid), [], answered)
                if self._outstanding:
                    message = table_message(snapshot, self._outstanding.values())
                await self.store.save(TABLE_ID, [message])

    async def take_stored(self, request_id: str) -> None:
        """:meth:`take` *request_id* if the store has a record of it (a request the tree
        never returned to its host has none: the runtime then says it does not know it)."""
        if await self.store.get_pending(pending_id(request_id)) is not None:
            await self.take(request_id)

    async def take(self, request_id: str) -> tuple[str, Request]:
        """Take the approval *request_id* once, before anything of the resume runs.

        Returns the root child and the request it was recorded with. Raises
        :class:`~toolnexus_trio.AlreadyAnswered` if it was answered, is being answered
        (here or in another process) or was cancelled, and :class:`LookupError` if the
        store never had it.
        """
        record = pending_id(request_id)
        async with self._lock:
            state = await self.store.get_pending(record)
            if state is None:
                raise LookupError(f"no pending approval {request_id!r} is stored")
            if state.status != "pending":
                raise AlreadyAnswered(record, state.status)
            handle, request = read_pending(state)
            if request.id != request_id:
                raise DurableFormatError(f"the record {record!r} holds request {request.id!r}")
            if not await self.store.take_pending(record, state.key, []):
                raise AlreadyAnswered(record, "taken")
            self._outstanding.pop(request_id, None)
            self._taken[request_id] = PendingEntry(request_id, handle, state.key)
        return handle, request


# -- the runtime's side -------------------------------------------------------------------


def _root_pending(rt: AgentRuntime) -> list[tuple[str, Request]]:
    """The approvals the tree returned to its host: its suspended root children's."""
    return [
        (c.id, c.pending)
        for c in rt.root.children
        if c.state == "suspended" and c.pending is not None
    ]


@asynccontextmanager
async def keep_durable(rt: AgentRuntime, store: ConversationStore | None) -> AsyncIterator[None]:
    """Keep *rt*'s tree in *store* for the block, if *store* is a :class:`PendingStore`.

    On entry the tree saved in the store (if any) is restored into *rt*; in the block,
    every settle, suspension and close is saved, and a resume first takes its approval
    once. On exit nothing more is saved, so the runtime's own shutdown (which closes
    the tree in memory) leaves the stored tree as it was: another process resumes it.
    """
    if not isinstance(store, PendingStore):
        yield
        return
    tree = DurableTree(store)
    saved = await tree.load()
    if saved is not None:
        check_snapshot(saved, rt.registry)  # outside input: nothing is built unless it is sound
        rt.restore(saved)

    async def on_change(runtime: AgentRuntime, event: str, h: Handle) -> None:
        # A resume's own changes are saved as its levels settle; the shutdown's closes are
        # this process letting go of the tree, not the tree's end.
        if event != "resumed" and not runtime.shutting_down:
            await tree.persist(runtime.snapshot(), _root_pending(runtime))

    async def before_resume(answer: Answer) -> None:
        # Before the runtime looks for the suspended handle: a replay is refused with
        # AlreadyAnswered even once the tree has moved on, and nothing runs for it.
        await tree.take_stored(answer.id)

    rt.on_change = on_change
    rt.before_resume = before_resume
    try:
        yield
    finally:
        rt.on_change = None
        rt.before_resume = None
