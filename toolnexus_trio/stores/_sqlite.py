"""``SqliteConversationStore``: the embedded persistent :class:`PendingStore`.

One SQLite file, shared by any number of processes. Every database call runs in a
Trio worker thread, never on the event loop. The store has one connection, opened
on first use and used by one worker thread at a time (a ``CapacityLimiter`` of 1
queues the calls without tying up threads, and a ``threading.Lock`` guards the
connection for any other caller), which is why ``check_same_thread`` can be off:
sqlite3 connections may move between threads as long as their use never overlaps.
Writers in other processes are waited for up to *timeout* seconds (SQLite's busy
handler), and WAL mode lets readers go on while one writes.

Every write is a single SQL statement, so each ``save`` is one transaction; the
take-once mark is the conditional ``UPDATE ... WHERE pending_status = 'pending'``,
which SQLite runs atomically whatever the number of processes racing for it.
``synchronous=FULL``: a committed take survives a power cut, not only a crash, so an
approved action cannot be replayed after one.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from ._base import (
    FirstState,
    PendingState,
    RunCheckpoint,
    RunCheckpointStatus,
    check_id,
    check_lease,
    dumps_json,
    dumps_state,
    finish_columns,
    loads_json,
    loads_state,
    pending_column,
    pending_of,
    token_column,
)

if TYPE_CHECKING:
    from ..loop._results import Message

T = TypeVar("T")

SCHEMA_VERSION = 1
"""The ``PRAGMA user_version`` of files this store writes; a newer file is refused."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS toolnexus_threads (
    id TEXT PRIMARY KEY,
    messages TEXT NOT NULL,
    pending_key TEXT,
    pending_status TEXT,
    pending_result TEXT,
    updated_at REAL NOT NULL
)
"""

# Durable runs (ClientOptions(durable=True)). Created by every store that opens the
# file, schema version unchanged: a file of an older release gains the table, and an
# older release ignores it. Times are this machine's wall clock (one file, one
# machine). The writes are conditional UPDATEs fenced by the owner's token.
_RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS toolnexus_runs (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    owner TEXT,
    lease_until REAL NOT NULL,
    updated_at REAL NOT NULL
)
"""

_START_RUN = """
INSERT INTO toolnexus_runs (id, state, status, owner, lease_until, updated_at)
VALUES (?, ?, 'running', ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    state = excluded.state, status = 'running', owner = excluded.owner,
    lease_until = excluded.lease_until, updated_at = excluded.updated_at
WHERE toolnexus_runs.status <> 'running'
"""

_CLAIM_RUN = """
UPDATE toolnexus_runs SET owner = ?, lease_until = ?, updated_at = ?
WHERE id = ? AND status = 'running' AND lease_until < ?
"""

_OWNED = "WHERE id = ? AND owner = ? AND status = 'running'"

# A plain save moves a thread on: a pending state still waiting becomes superseded.
# (The SET expressions all read the row as it was before the update.)
_SAVE = """
INSERT INTO toolnexus_threads (id, messages, updated_at) VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    messages = excluded.messages,
    updated_at = excluded.updated_at,
    pending_status = CASE WHEN pending_status = 'pending' THEN 'superseded'
                          ELSE pending_status END,
    pending_result = CASE WHEN pending_status = 'pending' THEN NULL ELSE pending_result END
"""

_SAVE_PENDING = """
INSERT INTO toolnexus_threads
    (id, messages, pending_key, pending_status, pending_result, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    messages = excluded.messages,
    pending_key = excluded.pending_key,
    pending_status = excluded.pending_status,
    pending_result = excluded.pending_result,
    updated_at = excluded.updated_at
"""

_TAKE = """
UPDATE toolnexus_threads
SET pending_status = 'taken', pending_result = ?, messages = ?, updated_at = ?
WHERE id = ? AND pending_key = ? AND pending_status = 'pending'
"""


def _transcript(db: sqlite3.Connection, id: str) -> list[Message] | None:
    found = db.execute("SELECT messages FROM toolnexus_threads WHERE id = ?", (id,)).fetchone()
    if found is None:
        return None
    messages = loads_json(found[0], f"the transcript of {id!r}")
    if not isinstance(messages, list):
        raise ValueError(f"the transcript of {id!r} in the database is not a list")
    return messages


def _start(db: sqlite3.Connection, id: str, owner: str, lease_ms: int, text: str) -> bool:
    # Not flushed (synchronous=NORMAL): lost only in a power cut, before the first
    # response's flushed write; nothing of the run had happened then.
    now = time.time()
    values = (id, text, owner, now + lease_ms / 1000, now)
    db.execute("PRAGMA synchronous=NORMAL")
    try:
        return bool(db.execute(_START_RUN, values).rowcount == 1)
    finally:
        db.execute("PRAGMA synchronous=FULL")


class SqliteConversationStore:
    """A :class:`PendingStore` in a SQLite file: threads and pending runs survive restarts.

    Any number of stores, in any number of processes, may open the same *path*; the
    take-once mark of :meth:`take_pending` is one conditional update, so only one
    :meth:`Client.answer` of a pending run ever wins. Calls run in worker threads
    (never blocking the event loop), one at a time per store; *timeout* is how long a
    call waits for another process's write before failing with
    ``sqlite3.OperationalError``. Use it as ``async with`` or call :meth:`aclose`; the
    connection is opened on first use, which creates the file and its table.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 5.0) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        self._connection: sqlite3.Connection | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._limiter = trio.CapacityLimiter(1)

    # -- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> SqliteConversationStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.move_on_after(self.timeout + 1, shield=True):
            await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; later calls raise :class:`RuntimeError`. Idempotent."""
        await trio.to_thread.run_sync(self._close, limiter=self._limiter)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # -- the worker-thread side ---------------------------------------------

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        # Not abandoned on cancel: a statement runs to its end (bounded by the busy
        # timeout), so a transaction is never left half-way in a thread nobody waits for.
        return await trio.to_thread.run_sync(self._in_thread, fn, limiter=self._limiter)

    def _in_thread(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise RuntimeError("this SqliteConversationStore is closed")
            if self._connection is None:
                self._connection = self._connect()
            return fn(self._connection)

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: autocommit; each statement below is its own transaction.
        connection = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            (version,) = connection.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} was written by a newer toolnexus_trio (schema {version}, "
                    f"this one knows up to {SCHEMA_VERSION})"
                )
            if version < SCHEMA_VERSION:
                connection.execute(_SCHEMA)
                connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            connection.execute(_RUNS_SCHEMA)
        except BaseException:
            connection.close()
            raise
        return connection

    # -- ConversationStore ----------------------------------------------------

    async def get(self, id: str) -> list[Message] | None:
        """The transcript saved under *id*, or ``None``."""
        check_id(id)

        return await self._call(lambda db: _transcript(db, id))

    async def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript of *id* (a waiting pending state becomes superseded)."""
        check_id(id)
        snapshot = list(messages)

        def write(db: sqlite3.Connection) -> None:
            text = dumps_json(snapshot, f"the transcript of {id!r}")
            db.execute(_SAVE, (id, text, time.time()))

        await self._call(write)

    # -- PendingStore ---------------------------------------------------------

    async def get_pending(self, id: str) -> PendingState | None:
        """The pending state of *id*, or ``None`` if it never had one."""
        check_id(id)

        def read(db: sqlite3.Connection) -> PendingState | None:
            row = db.execute(
                "SELECT pending_key, pending_status, pending_result FROM toolnexus_threads "
                "WHERE id = ? AND pending_key IS NOT NULL",
                (id,),
            ).fetchone()
            if row is None:
                return None
            key, status, result = row
            parsed = None if result is None else loads_json(result, f"the pending run of {id!r}")
            return PendingState.from_json(pending_of(key, status, parsed))

        return await self._call(read)

    async def save_pending(self, id: str, messages: Sequence[Message], state: PendingState) -> None:
        """Replace the transcript and the pending state of *id* in one transaction."""
        check_id(id)
        snapshot = list(messages)

        def write(db: sqlite3.Connection) -> None:
            text = dumps_json(snapshot, f"the transcript of {id!r}")
            result = pending_column(state)
            db.execute(_SAVE_PENDING, (id, text, state.key, state.status, result, time.time()))

        await self._call(write)

    async def take_pending(
        self, id: str, key: str, messages: Sequence[Message], *, token: str | None = None
    ) -> bool:
        """The take-once mark: one conditional ``UPDATE`` (see :class:`PendingStore`)."""
        check_id(id)
        snapshot = list(messages)

        def take(db: sqlite3.Connection) -> bool:
            text = dumps_json(snapshot, f"the transcript of {id!r}")
            taken = token_column(token)
            return db.execute(_TAKE, (taken, text, time.time(), id, key)).rowcount == 1

        return await self._call(take)

    # -- CheckpointStore --------------------------------------------------------

    async def start_run(self, id: str, owner: str, lease_ms: int, state: dict[str, Any]) -> bool:
        """Begin a durable run: one conditional upsert (see :class:`CheckpointStore`)."""
        check_id(id)
        check_lease(lease_ms)
        text = dumps_state(state)

        return await self._call(lambda db: _start(db, id, owner, lease_ms, text))

    async def begin_run(self, id: str, owner: str, lease_ms: int, first: FirstState) -> bool:
        """``get`` and ``start_run`` in one trip to the worker thread (see
        :func:`~toolnexus_trio.stores._base.begin_run`): *first* is called there."""
        check_id(id)
        check_lease(lease_ms)

        def begin(db: sqlite3.Connection) -> bool:
            text = dumps_state(first(_transcript(db, id)))
            return _start(db, id, owner, lease_ms, text)

        return await self._call(begin)

    async def claim_run(self, id: str, owner: str, lease_ms: int) -> bool:
        """Take over an orphaned run: one conditional ``UPDATE``, one winner."""
        check_id(id)
        check_lease(lease_ms)

        def claim(db: sqlite3.Connection) -> bool:
            now = time.time()
            values = (owner, now + lease_ms / 1000, now, id, now)
            return db.execute(_CLAIM_RUN, values).rowcount == 1

        return await self._call(claim)

    async def renew_lease(self, id: str, owner: str, lease_ms: int) -> bool:
        """Extend *owner*'s lease; ``False`` if the run is not *owner*'s any more."""
        check_id(id)
        check_lease(lease_ms)

        def renew(db: sqlite3.Connection) -> bool:
            now = time.time()
            sql = f"UPDATE toolnexus_runs SET lease_until = ?, updated_at = ? {_OWNED}"
            return db.execute(sql, (now + lease_ms / 1000, now, id, owner)).rowcount == 1

        return await self._call(renew)

    async def save_checkpoint(
        self, id: str, owner: str, state: dict[str, Any], *, durable: bool = True
    ) -> bool:
        """Replace the run's state if *owner* still holds it (``durable=False``: this
        commit is not flushed, ``synchronous=NORMAL``; the next flushed one carries it)."""
        check_id(id)
        text = dumps_state(state)

        def save(db: sqlite3.Connection) -> bool:
            sql = f"UPDATE toolnexus_runs SET state = ?, updated_at = ? {_OWNED}"
            if durable:
                return db.execute(sql, (text, time.time(), id, owner)).rowcount == 1
            db.execute("PRAGMA synchronous=NORMAL")
            try:
                return db.execute(sql, (text, time.time(), id, owner)).rowcount == 1
            finally:
                db.execute("PRAGMA synchronous=FULL")

        return await self._call(save)

    async def load_checkpoint(self, id: str) -> RunCheckpoint | None:
        """The run kept under *id*, or ``None``."""
        check_id(id)

        def load(db: sqlite3.Connection) -> RunCheckpoint | None:
            row = db.execute(
                "SELECT state, status, owner, lease_until FROM toolnexus_runs WHERE id = ?", (id,)
            ).fetchone()
            if row is None:
                return None
            state, status, owner, lease_until = row
            return RunCheckpoint(
                id, loads_state(state, id), status, owner, lease_until < time.time()
            )

        return await self._call(load)

    async def finish_run(
        self,
        id: str,
        owner: str,
        status: RunCheckpointStatus,
        messages: Sequence[Message] | None,
        pending: PendingState | None = None,
    ) -> bool:
        """End the run and save the thread in one transaction (``BEGIN IMMEDIATE``)."""
        check_id(id)
        text, result = finish_columns(id, messages, pending)

        def finish(db: sqlite3.Connection) -> bool:
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            try:
                sql = (
                    "UPDATE toolnexus_runs SET status = ?, owner = NULL, lease_until = 0, "
                    f"updated_at = ? {_OWNED}"
                )
                if db.execute(sql, (status, now, id, owner)).rowcount != 1:
                    db.execute("ROLLBACK")
                    return False
                if text is not None and pending is not None:
                    values = (id, text, pending.key, pending.status, result, now)
                    db.execute(_SAVE_PENDING, values)
                elif text is not None:
                    db.execute(_SAVE, (id, text, now))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return True

        return await self._call(finish)

    async def release_run(self, id: str, owner: str) -> None:
        """Give the lease up at once (the run stays ``"running"``, recoverable now)."""
        check_id(id)

        def release(db: sqlite3.Connection) -> None:
            sql = f"UPDATE toolnexus_runs SET lease_until = 0, updated_at = ? {_OWNED}"
            db.execute(sql, (time.time(), id, owner))

        await self._call(release)

    async def orphaned_runs(self, limit: int = 100) -> list[str]:
        """Ids of running runs whose lease expired, oldest first."""

        def read(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT id FROM toolnexus_runs WHERE status = 'running' AND lease_until < ? "
                "ORDER BY updated_at LIMIT ?",
                (time.time(), limit),
            ).fetchall()
            return [r[0] for r in rows]

        return await self._call(read)
