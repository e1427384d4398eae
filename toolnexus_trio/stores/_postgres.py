"""``PostgresConversationStore``: one :class:`PendingStore` shared by many machines.

The SQLite store's semantics over PostgreSQL (psycopg 3, the ``[postgres]`` extra):
the same one table, the same single-statement writes, the same take-once conditional
``UPDATE``. PostgreSQL re-checks an ``UPDATE``'s ``WHERE`` on the row it has locked,
so of any number of takes of one state, from any number of machines, one changes it.

Long because every operation of three protocols (conversations, pending approvals,
checkpoints) keeps its SQL next to the bounds it runs under; the JSON and column code
shared with SQLite is in :mod:`._base`.

psycopg's async API is asyncio-only, so the synchronous driver runs in Trio worker
threads, at most *max_connections* at a time (a ``CapacityLimiter``), each call on a
connection borrowed from a ``psycopg_pool.ConnectionPool`` (checked before use, so a
server restart costs one reconnect, not an error). Connections are in autocommit mode:
every statement is its own transaction.

**Bounds and cancellation.** Every call returns within *timeout* (plus a second), and
a cancelled call returns at once: the worker thread is abandoned, never waited for, as
a frozen or unreachable server would block it in the driver where no cancel reaches.
A call waiting for a thread (the limiter is full) is cancelled before anything ran.
A call whose statement had started follows the rule of a lost connection: a write
may or may not have been applied (read the thread to know). The statement itself runs
to its end in the server, or is rolled back by ``statement_timeout``; never half-done,
so a take either committed (the thread then shows ``"taken"`` and the interrupted
outcome) or never ran. Its thread keeps its limiter slot until the driver returns (the
statement ends, the socket's bounds fail it, the server wakes), so at most
*max_connections* threads ever wait on the server. Connections have socket-level
bounds unless the DSN sets its own: ``connect_timeout``, TCP keepalives and
``tcp_user_timeout`` derived from *timeout*, so an unreachable server fails the
connection instead of holding it.

**Encoding.** Transcripts and results are stored as ASCII JSON in ``text`` columns,
not ``jsonb``: ``jsonb`` (and ``text`` itself) refuse U+0000, and a lone surrogate
cannot be encoded to UTF-8 at all; as JSON escapes (``\\u0000``, ``\\ud800``) both are
kept exactly, as the SQLite store keeps them.

**Schema.** ``toolnexus_schema(schema_version)`` holds the version; the first call of
each store creates or checks it inside a transaction holding an advisory lock, so
processes starting together create it once; a newer version is refused.
"""

from __future__ import annotations

import math
import os
import threading
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
    import psycopg
    import psycopg_pool

    from ..loop._results import Message

T = TypeVar("T")

SCHEMA_VERSION = 1
"""The ``schema_version`` this store writes; a database with a newer one is refused."""

_DEADLINE_MARGIN_S = 1.0
"""How long past *timeout* a call waits for a server that does not answer at all: the
margin lets a live server's own ``statement_timeout`` (a clean rollback) come first."""

_LOCK_KEY = 0x746E5F7374_6F7265  # "tn_store": the advisory lock around schema creation

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS toolnexus_schema (
        schema_version integer NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS toolnexus_threads (
        id text PRIMARY KEY,
        messages text NOT NULL,
        pending_key text,
        pending_status text,
        pending_result text,
        updated_at timestamptz NOT NULL DEFAULT now()
    )
    """,
)

# Durable runs (ClientOptions(durable=True)): created by every store's first call,
# schema version unchanged (an older release ignores the table). Lease times are the
# server's clock (now()), so machines' clocks never disagree about who owns a run.
# Every write is one conditional UPDATE fenced by the owner's token; PostgreSQL
# re-checks its WHERE on the row it locked, so of racing claims one wins.
_RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS toolnexus_runs (
    id text PRIMARY KEY,
    state text NOT NULL,
    status text NOT NULL,
    owner text,
    lease_until timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""

_LEASE = "now() + %s * interval '1 millisecond'"

# A write that need not wait for the server's disk (lost only if the server itself
# crashes: see CheckpointStore.save_checkpoint's durable=False) in one statement, so
# one round trip: set_config(..., true) lasts to the end of the statement's own
# (implicit) transaction, whose commit reads it; the connection's setting is untouched.
# (A volatile CTE is evaluated when scanned, and only then: once, before the write.)
_NO_FLUSH = "WITH no_flush AS (SELECT set_config('synchronous_commit', 'off', true))"

_START_RUN = f"""{_NO_FLUSH}
INSERT INTO toolnexus_runs AS t (id, state, status, owner, lease_until)
SELECT %s, %s, 'running', %s, {_LEASE} FROM no_flush
ON CONFLICT (id) DO UPDATE SET
    state = excluded.state, status = 'running', owner = excluded.owner,
    lease_until = excluded.lease_until, updated_at = now()
WHERE t.status <> 'running'
"""

_CLAIM_RUN = f"""
UPDATE toolnexus_runs SET owner = %s, lease_until = {_LEASE}, updated_at = now()
WHERE id = %s AND status = 'running' AND lease_until < now()
"""

_OWNED = "WHERE id = %s AND owner = %s AND status = 'running'"

_SAVE_STATE = f"UPDATE toolnexus_runs SET state = %s, updated_at = now() {_OWNED}"

_SAVE_STATE_NO_FLUSH = f"""{_NO_FLUSH}
UPDATE toolnexus_runs SET state = %s, updated_at = now() FROM no_flush
{_OWNED}
"""

_END_RUN = f"""
UPDATE toolnexus_runs SET status = %s, owner = NULL, lease_until = to_timestamp(0),
    updated_at = now()
{_OWNED}
"""

# As in the SQLite store: a plain save moves a thread on, so a pending state still
# waiting becomes superseded (SET expressions read the row as it was before).
_SAVE_SET = """
ON CONFLICT (id) DO UPDATE SET
    messages = excluded.messages,
    updated_at = now(),
    pending_status = CASE WHEN t.pending_status = 'pending' THEN 'superseded'
                          ELSE t.pending_status END,
    pending_result = CASE WHEN t.pending_status = 'pending' THEN NULL
                          ELSE t.pending_result END
"""

_SAVE = "INSERT INTO toolnexus_threads AS t (id, messages) VALUES (%s, %s)" + _SAVE_SET

_SAVE_PENDING_SET = """
ON CONFLICT (id) DO UPDATE SET
    messages = excluded.messages,
    pending_key = excluded.pending_key,
    pending_status = excluded.pending_status,
    pending_result = excluded.pending_result,
    updated_at = now()
"""

_PENDING_COLUMNS = (
    "INSERT INTO toolnexus_threads AS t (id, messages, pending_key, pending_status, pending_result)"
)

_SAVE_PENDING = f"{_PENDING_COLUMNS} VALUES (%s, %s, %s, %s, %s)" + _SAVE_PENDING_SET

# finish_run in one statement (one round trip, one commit): the run's end, and the
# thread's save only if that end matched (the fence): a data-modifying CTE runs once,
# and the INSERT reads the rows it returned. Parameters: the _END_RUN ones, then the
# thread's columns.
_FINISH_SAVE = (
    f"WITH ended AS ({_END_RUN} RETURNING id) "
    "INSERT INTO toolnexus_threads AS t (id, messages) SELECT id, %s FROM ended" + _SAVE_SET
)

_FINISH_SAVE_PENDING = (
    f"WITH ended AS ({_END_RUN} RETURNING id) {_PENDING_COLUMNS} "
    "SELECT id, %s, %s, %s, %s FROM ended" + _SAVE_PENDING_SET
)

_TAKE = """
UPDATE toolnexus_threads
SET pending_status = 'taken', pending_result = %s, messages = %s, updated_at = now()
WHERE id = %s AND pending_key = %s AND pending_status = 'pending'
"""


_SECRET_KEYS = frozenset(
    {"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}
)
"""libpq's secret parameters as of PostgreSQL 18; libpq's own list is added at run time."""


def _secret_keys(driver: Any) -> frozenset[str]:
    """Every libpq parameter that holds a secret: ours, plus those libpq marks ``*``."""
    try:
        marked = {
            option.keyword.decode()
            for option in driver.pq.Conninfo.get_defaults()
            if option.dispchar == b"*"
        }
    except Exception:  # an exotic libpq: our list alone
        marked = set()
    return _SECRET_KEYS | marked


def _import_driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ImportError(
            "PostgresConversationStore needs psycopg 3 and psycopg-pool: "
            "pip install -e '.[postgres]' in the toolnexus-trio checkout"
        ) from exc
    return psycopg, psycopg_pool


def _transcript(db: psycopg.Connection[Any], id: str) -> list[Message] | None:
    found = db.execute("SELECT messages FROM toolnexus_threads WHERE id = %s", (id,)).fetchone()
    if found is None:
        return None
    messages = loads_json(found[0], f"the transcript of {id!r}")
    if not isinstance(messages, list):
        raise ValueError(f"the transcript of {id!r} in the database is not a list")
    return messages


class PostgresConversationStore:
    """A :class:`PendingStore` in PostgreSQL: threads and pending runs for many machines.

    *dsn* is a libpq connection string (``postgresql://user@host/db`` or
    ``host=... dbname=...``); without one, the standard ``PG*`` environment variables
    (``PGHOST``, ``PGDATABASE``, ``PGPASSWORD``...) say where, as for ``psql``. TLS is
    psycopg's: ``sslmode``, ``sslrootcert`` and the rest in the DSN or ``PGSSLMODE``.
    No secret of the DSN (``password``, ``sslpassword``, every parameter libpq marks
    secret) appears in the store's ``repr`` or in the errors it raises.

    At most *max_connections* calls run at a time (each in a worker thread, on its own
    connection); *timeout* bounds the wait for a connection and, as the server's
    ``statement_timeout``, each statement; a server that does not answer at all fails
    the call with :class:`ConnectionError` one second past *timeout*, and a cancel
    returns at once. Use it as ``async with`` or call
    :meth:`aclose`. The first call creates the tables (or checks their
    ``schema_version``; a newer one is refused with :class:`RuntimeError`).

    A call that loses its connection while running raises :class:`ConnectionError`
    (a write may or may not have been applied: read the thread to know); the next call
    reconnects. An id outside the stores' one id contract is refused
    with :class:`ValueError` before the database is asked. See the module notes for
    what cancellation does.
    """

    def __init__(
        self, dsn: str | None = None, *, max_connections: int = 8, timeout: float = 30.0
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        driver, pool_module = _import_driver()
        try:
            params = driver.conninfo.conninfo_to_dict(dsn or "")
        except driver.Error:
            # Not the driver's message: it may quote the string, password included.
            raise ValueError(
                "the PostgreSQL DSN could not be parsed (it is not shown: it may hold a password)"
            ) from None
        # Every secret parameter (the password, the TLS key's passphrase, ...) is left
        # out of the repr and scrubbed from any message we raise (libpq does not echo
        # them; this makes sure).
        secret_keys = _secret_keys(driver)
        self._secrets = sorted(
            {str(v) for k, v in params.items() if k in secret_keys and v}
            | {os.environ[k] for k in ("PGPASSWORD", "PGSSLPASSWORD") if os.environ.get(k)},
            key=len,
            reverse=True,
        )
        shown = {k: v for k, v in params.items() if k not in secret_keys}
        self._shown = driver.conninfo.make_conninfo(**shown) if shown else ""
        # Socket-level bounds, unless the DSN sets its own: a server that cannot be
        # reached, or stops answering, fails the connection instead of hanging on it.
        seconds = max(1, math.ceil(timeout))
        network = {
            "connect_timeout": max(2, seconds),
            "keepalives": 1,
            "keepalives_idle": seconds,
            "keepalives_interval": max(1, math.ceil(timeout / 3)),
            "keepalives_count": 3,
            "tcp_user_timeout": max(1000, math.ceil(timeout * 1000)),
        }
        network = {
            k: v
            for k, v in network.items()
            if k not in params and f"PG{k.upper()}" not in os.environ
        }
        self.max_connections = max_connections
        self.timeout = timeout
        self._psycopg = driver
        self._pool_timeout: type[Exception] = pool_module.PoolTimeout
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            pool_module.ConnectionPool(
                dsn or "",
                min_size=1,
                max_size=max_connections,
                open=False,
                timeout=timeout,
                kwargs={"autocommit": True, **network},
                configure=self._configure,
                check=pool_module.ConnectionPool.check_connection,
                name="toolnexus-store",
            )
        )
        self._lock = threading.Lock()
        self._opened = False
        self._closed = False
        self._schema_checked = False
        self._limiter = trio.CapacityLimiter(max_connections)

    def __repr__(self) -> str:
        where = repr(self._shown) if self._shown else "PG* environment"
        return f"PostgresConversationStore({where})"

    # -- lifecycle ----------------------------------------------------------

    async def __aenter__(self) -> PostgresConversationStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.move_on_after(self.timeout + 5, shield=True):
            await self.aclose()

    async def aclose(self) -> None:
        """Close the pool and its connections; later calls raise :class:`RuntimeError`."""
        await trio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            if self._opened:
                self._pool.close(timeout=self.timeout)
                self._opened = False

    # -- the worker-thread side ---------------------------------------------

    def _configure(self, connection: psycopg.Connection[Any]) -> None:
        milliseconds = max(1, int(self.timeout * 1000))
        connection.execute(
            "SELECT set_config('statement_timeout', %s, false)", (str(milliseconds),)
        )

    async def _call(self, what: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        # Abandoned on cancel and at the call's deadline (see the module notes): a frozen
        # or unreachable server blocks the worker thread in the driver, where no cancel
        # reaches it; the caller never waits for it. The thread keeps its limiter slot
        # until the driver returns (the statement ends, the socket's bounds fail it, or
        # the server wakes), so at most max_connections threads ever wait on the server.
        with trio.move_on_after(self.timeout + _DEADLINE_MARGIN_S) as bound:
            return await trio.to_thread.run_sync(
                self._in_thread, what, fn, limiter=self._limiter, abandon_on_cancel=True
            )
        assert bound.cancelled_caught
        raise ConnectionError(
            f"PostgreSQL store: {what} failed, the server did not answer within "
            f"{self.timeout:g} s (a write may or may not have been applied): the connection "
            "is given up"
        )

    def _in_thread(self, what: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._lock:
            if self._closed:
                raise RuntimeError("this PostgresConversationStore is closed")
            if not self._opened:
                self._pool.open(wait=False)
                self._opened = True
        psycopg = self._psycopg
        try:
            with self._pool.connection() as connection:
                if not self._schema_checked:
                    self._ensure_schema(connection)
                return fn(connection)
        except psycopg.errors.QueryCanceled as exc:
            # statement_timeout (or an administrator): the statement was rolled back.
            message = self._hide(str(exc).strip())
            raise TimeoutError(
                f"PostgreSQL store: {what} was cancelled by the server (nothing was "
                f"applied): {message}"
            ) from None
        except psycopg.OperationalError as exc:
            # The connection (or the server) went away, or none could be had.
            message = self._hide(self._why(exc))
            raise ConnectionError(
                f"PostgreSQL store: {what} failed, the connection was lost or could not "
                f"be made (a write may or may not have been applied): {message}"
            ) from None
        except psycopg.Error as exc:
            message = self._hide(str(exc).strip())
            raise RuntimeError(f"PostgreSQL store: {what} failed: {message}") from None

    def _why(self, exc: Exception) -> str:
        """The driver's message; for a pool timeout, why connecting fails (one try)."""
        if not isinstance(exc, self._pool_timeout):
            return str(exc).strip()
        try:
            direct = self._psycopg.connect(
                self._pool.conninfo, connect_timeout=max(2, int(self.timeout))
            )
        except self._psycopg.Error as cause:
            return f"{str(exc).strip()}: {str(cause).strip()}"
        direct.close()
        return str(exc).strip()

    def _hide(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _ensure_schema(self, connection: psycopg.Connection[Any]) -> None:
        with connection.transaction():
            # Transaction-scoped: released at commit, or when a dead session ends.
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            connection.execute(_SCHEMA[0])
            row = connection.execute("SELECT max(schema_version) FROM toolnexus_schema").fetchone()
            version = row[0] if row is not None else None
            if version is not None and version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the PostgreSQL database holds a newer toolnexus_trio schema "
                    f"(schema_version {version}, this one knows up to {SCHEMA_VERSION})"
                )
            if version is None or version < SCHEMA_VERSION:
                connection.execute(_SCHEMA[1])
                connection.execute("DELETE FROM toolnexus_schema")
                connection.execute(
                    "INSERT INTO toolnexus_schema (schema_version) VALUES (%s)", (SCHEMA_VERSION,)
                )
            connection.execute(_RUNS_SCHEMA)
        self._schema_checked = True

    # -- ConversationStore ----------------------------------------------------

    async def get(self, id: str) -> list[Message] | None:
        """The transcript saved under *id*, or ``None``."""
        check_id(id)

        return await self._call("get", lambda db: _transcript(db, id))

    async def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript of *id* (a waiting pending state becomes superseded)."""
        check_id(id)
        text = dumps_json(list(messages), f"the transcript of {id!r}")

        def write(db: psycopg.Connection[Any]) -> None:
            db.execute(_SAVE, (id, text))

        await self._call("save", write)

    # -- PendingStore ---------------------------------------------------------

    async def get_pending(self, id: str) -> PendingState | None:
        """The pending state of *id*, or ``None`` if it never had one."""
        check_id(id)

        def read(db: psycopg.Connection[Any]) -> PendingState | None:
            row = db.execute(
                "SELECT pending_key, pending_status, pending_result FROM toolnexus_threads "
                "WHERE id = %s AND pending_key IS NOT NULL",
                (id,),
            ).fetchone()
            if row is None:
                return None
            key, status, result = row
            parsed = None if result is None else loads_json(result, f"the pending run of {id!r}")
            return PendingState.from_json(pending_of(key, status, parsed))

        return await self._call("get_pending", read)

    async def save_pending(self, id: str, messages: Sequence[Message], state: PendingState) -> None:
        """Replace the transcript and the pending state of *id* in one statement."""
        check_id(id)
        text = dumps_json(list(messages), f"the transcript of {id!r}")
        result = pending_column(state)

        def write(db: psycopg.Connection[Any]) -> None:
            db.execute(_SAVE_PENDING, (id, text, state.key, state.status, result))

        await self._call("save_pending", write)

    async def take_pending(
        self, id: str, key: str, messages: Sequence[Message], *, token: str | None = None
    ) -> bool:
        """The take-once mark: one conditional ``UPDATE`` (see :class:`PendingStore`)."""
        check_id(id)
        text = dumps_json(list(messages), f"the transcript of {id!r}")

        def take(db: psycopg.Connection[Any]) -> bool:
            return db.execute(_TAKE, (token_column(token), text, id, key)).rowcount == 1

        return await self._call("take_pending", take)

    # -- CheckpointStore --------------------------------------------------------

    async def start_run(self, id: str, owner: str, lease_ms: int, state: dict[str, Any]) -> bool:
        """Begin a durable run: one conditional upsert (see :class:`CheckpointStore`)."""
        check_id(id)
        check_lease(lease_ms)
        text = dumps_state(state)

        def start(db: psycopg.Connection[Any]) -> bool:
            # Not waiting for the disk (_NO_FLUSH): lost only if the server crashes
            # before the first response's write, when nothing of the run had happened.
            return db.execute(_START_RUN, (id, text, owner, lease_ms)).rowcount == 1

        return await self._call("start_run", start)

    async def begin_run(self, id: str, owner: str, lease_ms: int, first: FirstState) -> bool:
        """``get`` and ``start_run`` in one call (one worker thread, one connection; see
        :func:`~toolnexus_trio.stores._base.begin_run`): *first* is called there."""
        check_id(id)
        check_lease(lease_ms)

        def begin(db: psycopg.Connection[Any]) -> bool:
            text = dumps_state(first(_transcript(db, id)))
            return db.execute(_START_RUN, (id, text, owner, lease_ms)).rowcount == 1

        return await self._call("begin_run", begin)

    async def claim_run(self, id: str, owner: str, lease_ms: int) -> bool:
        """Take over an orphaned run: one conditional ``UPDATE``, one winner."""
        check_id(id)
        check_lease(lease_ms)

        def claim(db: psycopg.Connection[Any]) -> bool:
            return db.execute(_CLAIM_RUN, (owner, lease_ms, id)).rowcount == 1

        return await self._call("claim_run", claim)

    async def renew_lease(self, id: str, owner: str, lease_ms: int) -> bool:
        """Extend *owner*'s lease; ``False`` if the run is not *owner*'s any more."""
        check_id(id)
        check_lease(lease_ms)

        def renew(db: psycopg.Connection[Any]) -> bool:
            sql = f"UPDATE toolnexus_runs SET lease_until = {_LEASE}, updated_at = now() {_OWNED}"
            return db.execute(sql, (lease_ms, id, owner)).rowcount == 1

        return await self._call("renew_lease", renew)

    async def save_checkpoint(
        self, id: str, owner: str, state: dict[str, Any], *, durable: bool = True
    ) -> bool:
        """Replace the run's state if *owner* still holds it (``durable=False``: the
        commit does not wait for the server's disk, ``synchronous_commit = off``)."""
        check_id(id)
        text = dumps_state(state)

        sql = _SAVE_STATE if durable else _SAVE_STATE_NO_FLUSH

        def save(db: psycopg.Connection[Any]) -> bool:
            return db.execute(sql, (text, id, owner)).rowcount == 1

        return await self._call("save_checkpoint", save)

    async def load_checkpoint(self, id: str) -> RunCheckpoint | None:
        """The run kept under *id*, or ``None``."""
        check_id(id)

        def load(db: psycopg.Connection[Any]) -> RunCheckpoint | None:
            row = db.execute(
                "SELECT state, status, owner, lease_until < now() FROM toolnexus_runs "
                "WHERE id = %s",
                (id,),
            ).fetchone()
            if row is None:
                return None
            state, status, owner, expired = row
            return RunCheckpoint(id, loads_state(state, id), status, owner, bool(expired))

        return await self._call("load_checkpoint", load)

    async def finish_run(
        self,
        id: str,
        owner: str,
        status: RunCheckpointStatus,
        messages: Sequence[Message] | None,
        pending: PendingState | None = None,
    ) -> bool:
        """End the run and save the thread in one transaction."""
        check_id(id)
        text, result = finish_columns(id, messages, pending)

        fence = (status, id, owner)

        def finish(db: psycopg.Connection[Any]) -> bool:
            # One statement each way: the end and the save commit together or not at all.
            if text is None:
                return db.execute(_END_RUN, fence).rowcount == 1
            if pending is None:
                return db.execute(_FINISH_SAVE, (*fence, text)).rowcount == 1
            values = (*fence, text, pending.key, pending.status, result)
            return db.execute(_FINISH_SAVE_PENDING, values).rowcount == 1

        return await self._call("finish_run", finish)

    async def release_run(self, id: str, owner: str) -> None:
        """Give the lease up at once (the run stays ``"running"``, recoverable now)."""
        check_id(id)

        def release(db: psycopg.Connection[Any]) -> None:
            sql = (
                "UPDATE toolnexus_runs SET lease_until = to_timestamp(0), updated_at = now() "
                + _OWNED
            )
            db.execute(sql, (id, owner))

        await self._call("release_run", release)

    async def orphaned_runs(self, limit: int = 100) -> list[str]:
        """Ids of running runs whose lease expired, oldest first."""

        def read(db: psycopg.Connection[Any]) -> list[str]:
            rows = db.execute(
                "SELECT id FROM toolnexus_runs WHERE status = 'running' AND lease_until < now() "
                "ORDER BY updated_at LIMIT %s",
                (limit,),
            ).fetchall()
            return [r[0] for r in rows]

        return await self._call("orphaned_runs", read)
