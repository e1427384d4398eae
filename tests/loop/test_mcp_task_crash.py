"""MCP Tasks in a durable run across a crash: the run's process is SIGKILLed while its
tool call, an MCP task of a real peer (the official SDK's MCPServer, a streamable HTTP
subprocess that outlives the run's process), is running; a second process recovers the
run and polls the *same* task. The peer's ledger, outside every process, shows the tool
started exactly once and its result reached the recovered run; on SQLite and on
PostgreSQL (tests/task_crash_child.py; the process handling follows
tests/loop/test_crash_processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import trio
from mcp_helpers import SERVERS
from test_crash_processes import where
from test_durable_processes import LIMIT_S, spawn

CHILD = Path(__file__).resolve().parents[1] / "task_crash_child.py"
PEER = SERVERS / "tasks_peer.py"


@asynccontextmanager
async def http_peer(ledger: Path) -> AsyncIterator[str]:
    """The peer as its own process group over streamable HTTP; yields its URL."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(PEER), str(ledger), "http"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        first = b""
        while not first.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, "the peer exited before printing its URL"
            first += chunk
        word, url = first.decode().split()
        assert word == "url"
        yield url
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with trio.move_on_after(10, shield=True):
            await process.wait()
        assert process.stdout is not None
        await process.stdout.aclose()
        with pytest.raises(ProcessLookupError):  # nothing of the group is left
            os.killpg(process.pid, 0)


def lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_run_killed_during_an_mcp_task_polls_the_same_task_after_recovery(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db, ledger = where(backend, tmp_path, request), tmp_path / "ledger"
    with trio.fail_after(LIMIT_S):
        async with http_peer(ledger) as url:
            async with spawn(tmp_path, db, url, "ask", "t", "--pause", "resume", child=CHILD) as a:
                assert await a.line() == "paused resume"  # the task id is in the checkpoint
                a.signal(signal.SIGKILL)
                assert await a.process.wait() == -signal.SIGKILL
            (tmp_path / "ledger.release").touch()  # the task may finish now
            async with spawn(tmp_path, db, url, "recover", "t", child=CHILD) as b:
                code, summary = await b.summary()
    assert code == 0
    assert summary == {"status": "done", "text": "finished: slow done: L"}
    seen = lines(ledger)
    created = [line for line in seen if line.startswith("created ")]
    # Started exactly once, never cancelled, and its result reached the recovered run.
    assert len(created) == 1 and seen.count("start L") == 1 and seen.count("done L") == 1
    assert not [line for line in seen if line.startswith("cancel ")]
