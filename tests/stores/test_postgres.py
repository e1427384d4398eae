"""``PostgresConversationStore`` specifics, against a real server (tests/pg_server.py).

The store contract itself runs on every store in test_store_contract.py and
tests/loop/test_durable.py; processes (SIGKILL mid-answer, 4 x 25 takers) are in
tests/loop/test_durable_processes.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import traceback
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import trio
import trio.testing
from durable_app import client, ledger_lines, toolkit
from pg_server import PASSWORD, PgServer

import toolnexus_trio.loop._durable as durable
from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    PendingState,
    PostgresConversationStore,
)
from toolnexus_trio.stores import _postgres

LIMIT_S = 60  # a safety net against a hang, not a timing assertion


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresConversationStore]:
    async with PostgresConversationStore(pg_dsn) as opened:
        yield opened


@contextmanager
def raw(dsn: str, *, autocommit: bool = True) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=autocommit) as connection:
        yield connection


async def wait_for_a_blocked_statement(dsn: str) -> None:
    """Until a session of the database waits for a lock (a statement is in the server)."""
    with raw(dsn) as watcher, trio.fail_after(LIMIT_S):
        while True:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            await trio.sleep(0.01)  # polling the server's lock table, not a timing guess


# Schema -----------------------------------------------------------------------------


async def test_many_stores_starting_at_once_create_the_schema_once(pg_dsn: str) -> None:
    stores = [PostgresConversationStore(pg_dsn) for _ in range(6)]
    try:
        async with trio.open_nursery() as nursery:
            for i, one in enumerate(stores):
                nursery.start_soon(one.save, f"t{i}", [{"role": "user", "content": str(i)}])
    finally:
        for one in stores:
            await one.aclose()
    with raw(pg_dsn) as db:
        assert db.execute("SELECT schema_version FROM toolnexus_schema").fetchall() == [(1,)]
        assert db.execute("SELECT count(*) FROM toolnexus_threads").fetchone() == (6,)


async def test_a_schema_from_the_future_is_refused(pg_dsn: str) -> None:
    with raw(pg_dsn) as db:
        db.execute("CREATE TABLE toolnexus_schema (schema_version integer NOT NULL)")
        db.execute("INSERT INTO toolnexus_schema VALUES (%s)", (_postgres.SCHEMA_VERSION + 1,))
    async with PostgresConversationStore(pg_dsn) as store:
        with pytest.raises(RuntimeError, match="newer toolnexus_trio schema \\(schema_version 2"):
            await store.get("t")
        with pytest.raises(RuntimeError, match="newer"):
            await store.save("t", [])
    with raw(pg_dsn) as db:  # nothing was created or changed
        assert db.execute("SELECT to_regclass('toolnexus_threads')").fetchone() == (None,)
        assert db.execute("SELECT schema_version FROM toolnexus_schema").fetchall() == [(2,)]


async def test_messages_are_ascii_json_text_so_nul_and_surrogates_survive(
    store: PostgresConversationStore, pg_dsn: str
) -> None:
    messages = [{"role": "user", "content": "a\x00b \ud800 \U0001f600"}]
    await store.save("t", messages)
    with raw(pg_dsn) as db:
        row = db.execute("SELECT messages FROM toolnexus_threads WHERE id = 't'").fetchone()
        kind = db.execute(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_name = 'toolnexus_threads' AND column_name = 'messages'"
        ).fetchone()
    assert kind == ("text",)  # not jsonb, which refuses U+0000
    assert row is not None and row[0].isascii()
    assert "\\u0000" in row[0] and "\\ud800" in row[0]
    assert await store.get("t") == messages


async def test_damaged_rows_and_a_closed_store_fail_clearly(
    store: PostgresConversationStore, pg_dsn: str
) -> None:
    await store.save_pending("t", [], PendingState("k", "pending", {"version": 1}))
    with raw(pg_dsn) as db:
        db.execute("UPDATE toolnexus_threads SET messages = '{broken', pending_status = 'maybe'")
    with pytest.raises(ValueError, match="the transcript of 't' in the database is damaged"):
        await store.get("t")
    with pytest.raises(ValueError, match="invalid PendingState"):
        await store.get_pending("t")
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await store.get("t")


# Connecting: DSN or PG* variables, and the password kept out of sight -----------------


async def test_without_a_dsn_the_pg_environment_variables_are_used(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    for name, key in [("PGHOST", "host"), ("PGPORT", "port"), ("PGUSER", "user"),
                      ("PGPASSWORD", "password"), ("PGDATABASE", "dbname")]:  # fmt: skip
        monkeypatch.setenv(name, str(params[key]))
    async with PostgresConversationStore() as store:
        assert repr(store) == "PostgresConversationStore(PG* environment)"
        await store.save("t", [{"role": "user", "content": "from the environment"}])
    async with PostgresConversationStore(pg_dsn) as store:
        assert await store.get("t") == [{"role": "user", "content": "from the environment"}]


async def test_the_password_is_in_no_repr_error_or_log(
    pg_server: PgServer, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = PostgresConversationStore(pg_dsn)
    assert PASSWORD not in repr(store) and PASSWORD not in str(vars(store).get("_shown"))
    assert "127.0.0.1" in repr(store)
    await store.aclose()
    wrong = "wrong-" + uuid.uuid4().hex
    seen: list[str] = []
    for dsn, secret in [
        (pg_dsn.replace(PASSWORD, wrong), wrong),  # refused by the server
        (pg_server.dsn("no_such_database"), PASSWORD),  # accepted, then no database
        (f"postgresql://u:{wrong}@127.0.0.1:1/db", wrong),  # nobody listening
    ]:
        async with PostgresConversationStore(dsn, timeout=1) as failing:
            assert secret not in repr(failing)
            with pytest.raises(ConnectionError) as caught:
                await failing.get("t")
            seen.append(str(caught.value))
            assert secret not in str(caught.value)
            assert caught.value.__suppress_context__  # the driver's errors are not chained
            assert secret not in "".join(traceback.format_exception(caught.value))
    assert "password authentication failed" in seen[0]
    assert 'database "no_such_database" does not exist' in seen[1]
    assert "Connection refused" in seen[2] or "connection failed" in seen[2]
    for record in caplog.records:
        assert PASSWORD not in record.getMessage() and wrong not in record.getMessage()
    with pytest.raises(ValueError, match="could not be parsed \\(it is not shown") as bad:
        PostgresConversationStore(f"postgresql://u:{wrong}@h/db?bogus=1")
    assert wrong not in str(bad.value)


# Cancellation: a cancel returns at once; a take is committed or never ran -----------


async def test_a_cancelled_take_in_the_server_returns_at_once_and_runs_to_its_end(
    store: PostgresConversationStore, pg_dsn: str
) -> None:
    await store.save_pending("t", [], PendingState("k", "pending", {}))
    got: list[bool] = []
    scope = trio.CancelScope()

    async def take() -> None:
        with scope:
            got.append(await store.take_pending("t", "k", [{"role": "user", "content": "x"}]))

    with raw(pg_dsn, autocommit=False) as blocker:
        blocker.execute("SELECT 1 FROM toolnexus_threads WHERE id = 't' FOR UPDATE")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(take)
            await wait_for_a_blocked_statement(pg_dsn)
            scope.cancel()
        # The caller is gone at once, while the statement still waits in the server.
        assert scope.cancelled_caught and got == []
        blocker.commit()  # let it go: it runs to its end (never half-done)
    with trio.fail_after(LIMIT_S):
        while True:  # polling the database for the abandoned statement's commit
            if await store.get_pending("t") == PendingState("k", "taken"):
                break
            await trio.sleep(0.01)
    assert await store.get("t") == [{"role": "user", "content": "x"}]


async def test_a_cancelled_take_waiting_for_a_connection_never_runs(pg_dsn: str) -> None:
    async with PostgresConversationStore(pg_dsn, max_connections=1) as store:
        await store.save_pending("t", [], PendingState("k", "pending", {}))
        await store.save_pending("u", [], PendingState("k", "pending", {}))
        queued = trio.CancelScope()

        async def take_u() -> None:
            with queued:
                await store.take_pending("u", "k", [])

        with raw(pg_dsn, autocommit=False) as blocker:
            blocker.execute("SELECT 1 FROM toolnexus_threads WHERE id = 't' FOR UPDATE")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.take_pending, "t", "k", [])  # holds the one slot
                await wait_for_a_blocked_statement(pg_dsn)
                nursery.start_soon(take_u)  # queues for the slot
                await trio.testing.wait_all_tasks_blocked()
                queued.cancel()
                await trio.testing.wait_all_tasks_blocked()
                assert queued.cancelled_caught  # gone at once, while "t" still waits
                blocker.commit()
        assert await store.get_pending("t") == PendingState("k", "taken")
        assert await store.get_pending("u") == PendingState("k", "pending", {})


# A server restart -------------------------------------------------------------------


async def test_a_server_restart_fails_the_call_in_flight_and_the_next_reconnects(
    pg_server: PgServer, store: PostgresConversationStore, pg_dsn: str
) -> None:
    await store.save_pending("t", [], PendingState("k", "pending", {}))
    await trio.to_thread.run_sync(pg_server.restart)
    # between two calls: the pool's connections died with the server; one is replaced
    assert await store.get_pending("t") == PendingState("k", "pending", {})

    outcome: list[BaseException] = []
    blocker = psycopg.connect(pg_dsn)
    try:
        blocker.execute("SELECT 1 FROM toolnexus_threads WHERE id = 't' FOR UPDATE")

        async def take() -> None:
            try:
                await store.take_pending("t", "k", [])
            except ConnectionError as exc:
                outcome.append(exc)

        with trio.fail_after(LIMIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(take)
                await wait_for_a_blocked_statement(pg_dsn)
                # immediate, not fast: a fast stop ends the sessions one by one, so the
                # blocker's lock could be released (and the take commit) before the take's
                # own session is ended, which made this test flaky under load.
                await trio.to_thread.run_sync(pg_server.restart, "immediate")
    finally:
        blocker.close()
    [error] = outcome
    assert "take_pending failed, the connection was lost" in str(error)
    assert "may or may not have been applied" in str(error)
    # It had not committed (the row was locked): the state is still answerable.
    assert await store.get_pending("t") == PendingState("k", "pending", {})
    assert await store.take_pending("t", "k", [])


async def test_tls_settings_reach_the_driver(pg_dsn: str) -> None:
    # The test server has no TLS: a DSN that requires it is refused by psycopg/libpq.
    async with PostgresConversationStore(pg_dsn + "?sslmode=require", timeout=1) as store:
        assert "sslmode=require" in repr(store)
        with pytest.raises(ConnectionError, match="server does not support SSL"):
            await store.get("t")


# Round 3 (issue 30): a frozen server, secrets in the DSN ----------------------------


@contextmanager
def frozen(server: PgServer) -> Iterator[None]:
    """Every process of *server* stopped (SIGSTOP) inside, always continued after."""
    pids = server.pids()
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def test_a_frozen_server_bounds_every_call_and_a_cancel_returns_at_once(
    pg_server: PgServer, pg_dsn: str
) -> None:
    # Was: with timeout=2 the call waited until the server was thawed (25 s), and no
    # cancel got through (the worker thread was waited for).
    async with PostgresConversationStore(pg_dsn, timeout=2) as store:
        await store.save("t", [{"role": "user", "content": "x"}])
        returned_frozen: list[str] = []
        with frozen(pg_server):
            thawed = trio.Event()

            async def thaw_late() -> None:
                # Only the old code gets here: it lets its hung call end (and fail).
                await trio.sleep(LIMIT_S / 2)
                for pid in pg_server.pids():
                    os.kill(pid, signal.SIGCONT)
                thawed.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(thaw_late)
                with pytest.raises(ConnectionError, match="did not answer within 2 s"):
                    await store.get("t")
                returned_frozen.append("timeout" if not thawed.is_set() else "thawed")
                with trio.CancelScope() as scope:
                    nursery.start_soon(_cancel_soon, scope)
                    await store.take_pending("t", "k", [])
                assert scope.cancelled_caught
                returned_frozen.append("cancel" if not thawed.is_set() else "thawed")
                nursery.cancel_scope.cancel()
        assert returned_frozen == ["timeout", "cancel"]
        # Thawed: the store goes on (the abandoned calls ended in their threads).
        with trio.fail_after(LIMIT_S):
            assert await store.get("t") == [{"role": "user", "content": "x"}]


async def _cancel_soon(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()  # the call waits for its worker thread
    scope.cancel()


async def test_every_secret_of_the_dsn_is_left_out_of_the_repr_and_errors(pg_dsn: str) -> None:
    # Was: sslpassword (the client key's passphrase) was shown by repr.
    passphrase = "key-pass-" + uuid.uuid4().hex
    dsn = f"{pg_dsn}?sslpassword={passphrase}&sslmode=require"
    async with PostgresConversationStore(dsn, timeout=1) as store:
        assert passphrase not in repr(store) and PASSWORD not in repr(store)
        assert "sslmode=require" in repr(store)
        with pytest.raises(ConnectionError) as caught:
            await store.get("t")
        assert passphrase not in str(caught.value) and PASSWORD not in str(caught.value)


async def test_a_take_that_committed_as_its_connection_broke_is_recognised_by_its_retry(
    pg_server: PgServer, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was: the retry got AlreadyAnswered("taken") saying "another answer took it first",
    # though the only answer was its own earlier attempt.
    ledger = tmp_path / "ledger"
    tk = await toolkit(ledger)
    approve = [Answer("req-v1-call-v1", True)]
    async with PostgresConversationStore(pg_dsn, timeout=2) as store:
        c = client(store)
        assert (await c.ask("deploy v1", tk, id="t")).status == "pending"
        with contextlib.ExitStack() as stack:

            async def freeze_before_the_take(point: str) -> None:
                await trio.lowlevel.checkpoint()
                if point == "loaded":
                    stack.enter_context(frozen(pg_server))

            monkeypatch.setattr(durable, "_pause_hook", freeze_before_the_take)
            with pytest.raises(ConnectionError, match="did not answer"):
                await c.answer("t", approve, toolkit=tk)
            monkeypatch.setattr(durable, "_pause_hook", None)
        # Thawed: the take the caller gave up on reaches the server and commits.
        with trio.fail_after(LIMIT_S):
            while True:  # polling the database for the abandoned take's commit
                state = await store.get_pending("t")
                if state is not None and state.status == "taken":
                    break
                await trio.sleep(0.01)
        with pytest.raises(AlreadyAnswered, match="outcome was unknown") as retry:
            await c.answer("t", approve, toolkit=tk)
        assert retry.value.in_doubt and retry.value.status == "taken"
        assert "another answer" not in str(retry.value)
        with pytest.raises(AlreadyAnswered, match="another answer took it first") as rival:
            await c.answer("t", [Answer("req-v1-call-v1", False)], toolkit=tk)
        assert not rival.value.in_doubt
    assert ledger_lines(ledger) == []  # at most once: the approved tool never ran


async def test_connections_have_socket_level_bounds_unless_the_dsn_sets_its_own(
    pg_dsn: str,
) -> None:
    def parameters(db: psycopg.Connection) -> dict[str, str]:
        return db.info.get_parameters()

    async with PostgresConversationStore(pg_dsn, timeout=4) as store:
        got = await store._call("probe", parameters)
    assert (got["connect_timeout"], got["keepalives"], got["tcp_user_timeout"]) == (
        "4",
        "1",
        "4000",
    )
    assert (got["keepalives_idle"], got["keepalives_interval"]) == ("4", "2")
    async with PostgresConversationStore(pg_dsn + "?tcp_user_timeout=777", timeout=4) as store:
        assert (await store._call("probe", parameters))["tcp_user_timeout"] == "777"


async def test_run_writes_that_skip_the_flush_leave_the_connection_flushing(pg_dsn: str) -> None:
    # start_run and save_checkpoint(durable=False) turn synchronous_commit off inside
    # their own one statement (one round trip); the one connection's next
    # transactions (a flushed checkpoint, a finish) must flush as ever.
    def setting(db: psycopg.Connection) -> str:
        row = db.execute("SHOW synchronous_commit").fetchone()
        assert row is not None
        return str(row[0])

    def flushing(db: psycopg.Connection) -> None:  # as a production server is
        db.execute("SET synchronous_commit = on")

    async with PostgresConversationStore(pg_dsn, max_connections=1) as store:
        await store._call("probe", flushing)  # the session's own setting, on its one connection
        assert await store._call("probe", setting) == "on"
        assert await store.start_run("r", "A", 60_000, {"step": 0})
        assert await store._call("probe", setting) == "on"
        assert await store.save_checkpoint("r", "A", {"step": 1}, durable=False)
        assert await store._call("probe", setting) == "on"
        assert not await store.save_checkpoint("r", "B", {"step": 2}, durable=False)
        assert await store._call("probe", setting) == "on"
        found = await store.load_checkpoint("r")
        assert found is not None and found.state == {"step": 1}
        messages = [{"role": "user", "content": "x"}]
        assert await store.finish_run("r", "A", "done", messages, PendingState("k", "answered"))
        assert await store.get("r") == messages
        assert await store.get_pending("r") == PendingState("k", "answered")
