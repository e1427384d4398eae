"""Shared test configuration (helpers live in helpers.py)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio.testing
from pg_server import PgServer, running_server


@pytest.fixture
def socket_autojump_clock() -> trio.testing.MockClock:
    """Virtual time for tests that also move bytes over real loopback sockets.

    ``autojump_clock`` jumps as soon as every task is blocked, which on a loaded machine
    can be while a loopback packet is still in the kernel; waiting 50 ms of real idle
    time first means only a truly idle run is fast-forwarded.
    """
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.fixture(autouse=True, scope="session")
def _http_pool_warm() -> None:
    """Load the HTTP clients' CA bundle before any test: the first client loads it in a
    worker thread, which under a virtual clock could let time jump in mid-test."""
    from toolnexus_trio import _http_client

    _http_client._load_ssl_context()


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A real PostgreSQL server for the session (tests/pg_server.py says from where).

    Without the ``postgres`` extra or any server binaries the PostgreSQL tests skip,
    except in CI (``CI`` set), where they must run: there it is an error.
    """
    missing = None
    if importlib.util.find_spec("psycopg") is None:
        missing = "psycopg is not installed (the postgres extra)"
    with running_server() as server:
        if server is None:
            missing = missing or "no PostgreSQL binaries (pgserver, TOOLNEXUS_PG_BIN, Debian)"
        if missing is not None:
            if _in_ci():
                pytest.fail(f"CI must run the PostgreSQL tests: {missing}")
            pytest.skip(missing)
        assert server is not None
        yield server


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """The DSN of a fresh database on the session's server (dropped after the test)."""
    with pg_server.database() as dsn:
        yield dsn


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_place(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store contract suite's ``store`` lives: ``"memory"``, a SQLite file
    or a PostgreSQL DSN (see ``durable_app.open_store``)."""
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return str(tmp_path / "threads.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn
