"""Durable approvals across real processes sharing one SQLite file or one PostgreSQL
database (durable_child.py).

Each child runs in its own process group with stdin from /dev/null and is killed with
its group when the test ends; a child stopped at a named point says ``paused POINT``
on stdout and waits for SIGUSR1, so a test kills it (SIGKILL) or releases it exactly
there, without sleeping.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import IO, Any

import pytest
import trio
from durable_app import client, ledger_lines, open_store, toolkit

from toolnexus_trio import AlreadyAnswered, Answer, PendingState, SqliteConversationStore

CHILD = Path(__file__).resolve().parents[1] / "durable_child.py"
LIMIT_S = 60  # a safety net against a hung child, not a timing assertion


class Child:
    def __init__(self, process: trio.Process, log: Path) -> None:
        self.process = process
        self.log = log
        self._buffer = b""

    async def line(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive_some()
            if not chunk:
                raise AssertionError(f"child ended early: {self.log.read_text()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    async def summary(self) -> tuple[int, dict[str, Any]]:
        """Wait for the child to exit: its exit code and last JSON line."""
        last = await self.line()
        code = await self.process.wait()
        assert code in (0, 3), self.log.read_text()
        return code, json.loads(last)

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)


def _log_file(path: Path) -> IO[bytes]:
    return path.open("wb")


@asynccontextmanager
async def spawn(tmp_path: Path, *args: str, child: Path = CHILD) -> AsyncIterator[Child]:
    log = tmp_path / f"child-{os.urandom(4).hex()}.log"
    stderr = _log_file(log)
    process = await trio.lowlevel.open_process(
        [sys.executable, str(child), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        yield Child(process, log)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with trio.move_on_after(10, shield=True):
            await process.wait()
        assert process.stdout is not None
        await process.stdout.aclose()
        stderr.close()
        with pytest.raises(ProcessLookupError):  # nothing of the group is left
            os.killpg(process.pid, 0)


def sqlite_args(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "threads.db"), str(tmp_path / "ledger")


# 1. Halt in process A, answer in process B -------------------------------------------


async def test_a_run_halted_in_one_process_is_answered_in_another(tmp_path: Path) -> None:
    db, ledger = sqlite_args(tmp_path)
    with trio.fail_after(LIMIT_S):
        async with spawn(tmp_path, db, ledger, "halt", "t", "deploy v1") as a:
            assert await a.summary() == (0, {"status": "pending", "pending": ["req-v1-call-v1"]})
        assert ledger_lines(Path(ledger)) == []
        async with spawn(tmp_path, db, ledger, "answer", "t", "req-v1-call-v1") as b:
            assert await b.summary() == (0, {"status": "done", "text": "finished: deployed v1"})
    assert ledger_lines(Path(ledger)) == ["v1"]
    async with SqliteConversationStore(db) as store:
        saved = await store.get("t")
        state = await store.get_pending("t")
    assert saved is not None and [m.get("content") for m in saved if m["role"] == "tool"] == [
        "deployed v1"
    ]
    assert state is not None and state.status == "answered"


# 2. Replays, sequential and concurrent, in two processes ------------------------------


async def test_a_second_answer_process_gets_already_answered(tmp_path: Path) -> None:
    db, ledger = sqlite_args(tmp_path)
    with trio.fail_after(LIMIT_S):
        async with spawn(tmp_path, db, ledger, "halt", "t", "deploy v1") as a:
            await a.summary()
        for expected in [(0, {"status": "done", "text": "finished: deployed v1"}), (3, {"error": "AlreadyAnswered", "status": "answered"})]:  # fmt: skip
            async with spawn(tmp_path, db, ledger, "answer", "t", "req-v1-call-v1") as b:
                assert await b.summary() == expected
    assert ledger_lines(Path(ledger)) == ["v1"]


async def test_two_processes_answering_at_once_run_the_tool_once(tmp_path: Path) -> None:
    db, ledger = sqlite_args(tmp_path)
    async with SqliteConversationStore(db) as store:
        await client(store).ask("deploy v1", await toolkit(Path(ledger)), id="t")
    with trio.fail_after(LIMIT_S):
        args = (db, ledger, "answer", "t", "req-v1-call-v1", "--pause", "loaded")
        async with spawn(tmp_path, *args) as b, spawn(tmp_path, *args) as c:
            # Both have loaded the pending state: each would answer it if it could.
            assert await b.line() == "paused loaded"
            assert await c.line() == "paused loaded"
            b.signal(signal.SIGUSR1)
            c.signal(signal.SIGUSR1)
            outcomes = sorted([await b.summary(), await c.summary()], key=lambda o: o[0])
    assert outcomes == [
        (0, {"status": "done", "text": "finished: deployed v1"}),
        (3, {"error": "AlreadyAnswered", "status": "taken"}),
    ]
    assert ledger_lines(Path(ledger)) == ["v1"]


# 3. SIGKILL in the middle of answer: answerable XOR outcome saved -----------------------

# point -> (still answerable, what the call's tool message says, ledger after the kill)
KILL_POINTS = {
    "loaded": (True, "Deploy v1?", []),
    "taken": (False, "interrupted: Deploy v1?", []),
    "tool": (False, "interrupted: Deploy v1?", ["v1"]),
    "resumed": (False, "interrupted: Deploy v1?", ["v1"]),
    "saved": (False, "deployed v1", ["v1"]),
}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("point", list(KILL_POINTS))
async def test_a_process_killed_in_the_middle_of_answer_leaves_the_store_consistent(
    point: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db, ledger = sqlite_args(tmp_path)
    if backend == "postgres":
        db = request.getfixturevalue("pg_dsn")
    tk = await toolkit(Path(ledger))
    async with open_store(db) as store:
        await client(store).ask("deploy v1", tk, id="t")
    with trio.fail_after(LIMIT_S):
        async with spawn(
            tmp_path, db, ledger, "answer", "t", "req-v1-call-v1", "--pause", point
        ) as b:
            assert await b.line() == f"paused {point}"
            b.signal(signal.SIGKILL)
            assert await b.process.wait() == -signal.SIGKILL

    answerable, message, ran = KILL_POINTS[point]
    async with open_store(db) as store:
        state = await store.get_pending("t")
        saved = await store.get("t")
        assert state is not None and saved is not None
        [tool_message] = [m["content"] for m in saved if m["role"] == "tool"]
        still_answerable = state.status == "pending"
        outcome_saved = tool_message != "Deploy v1?"  # the placeholder was replaced
        assert still_answerable != outcome_saved  # never both, never neither
        assert still_answerable is answerable
        assert tool_message.startswith(message)
        assert ledger_lines(Path(ledger)) == ran

        later = client(store).answer("t", [Answer("req-v1-call-v1", True)], toolkit=tk)
        if answerable:
            assert (await later).text == "finished: deployed v1"
        else:
            with pytest.raises(AlreadyAnswered):
                await later
    # At most once overall: a take that died before the tool ran never runs it.
    assert ledger_lines(Path(ledger)) == (["v1"] if answerable else ran)


# 6. Concurrent ask and answer for different ids: many tasks, two processes -----------


async def test_two_processes_and_many_tasks_lose_nothing(tmp_path: Path) -> None:
    db, ledger = sqlite_args(tmp_path)
    per_process = 15
    with trio.fail_after(LIMIT_S):
        async with (
            spawn(tmp_path, db, ledger, "load", "pa", str(per_process)) as a,
            spawn(tmp_path, db, ledger, "load", "pb", str(per_process)) as b,
        ):
            assert await a.line() == "ready"
            assert await b.line() == "ready"
            a.signal(signal.SIGUSR1)
            b.signal(signal.SIGUSR1)
            # and this process works on the same file meanwhile
            tk = await toolkit(Path(ledger))
            async with SqliteConversationStore(db) as store, trio.open_nursery() as nursery:
                agent = client(store)

                async def one(thread: str) -> None:
                    await agent.ask(f"deploy {thread}", tk, id=thread)
                    await agent.answer(
                        thread, [Answer(f"req-{thread}-call-{thread}", True)], toolkit=tk
                    )

                for i in range(per_process):
                    nursery.start_soon(one, f"pc-{i}")
            assert await a.summary() == (0, {"done": per_process})
            assert await b.summary() == (0, {"done": per_process})

    ids = [f"{prefix}-{i}" for prefix in ("pa", "pb", "pc") for i in range(per_process)]
    assert sorted(ledger_lines(Path(ledger))) == sorted(ids)
    async with SqliteConversationStore(db) as store:
        for thread in ids:
            saved = await store.get(thread)
            state = await store.get_pending(thread)
            assert saved is not None and saved[-1]["content"] == f"finished: deployed {thread}"
            assert state is not None and state.status == "answered"


# Take-once under contention: 4 processes x 25 tasks on one PostgreSQL database ---------


async def test_four_processes_of_25_tasks_take_every_pending_state_exactly_once(
    pg_dsn: str, tmp_path: Path
) -> None:
    count = 100  # 4 processes x 25 tasks, each task taking 4 ids: every id raced 4 ways
    async with open_store(pg_dsn) as store:
        for i in range(count):
            await store.save_pending(f"id-{i}", [], PendingState(f"key-{i}", "pending", {}))
    ledger = str(tmp_path / "ledger")
    with trio.fail_after(LIMIT_S):
        async with (
            spawn(tmp_path, pg_dsn, ledger, "take", "0", str(count)) as a,
            spawn(tmp_path, pg_dsn, ledger, "take", "1", str(count)) as b,
            spawn(tmp_path, pg_dsn, ledger, "take", "2", str(count)) as c,
            spawn(tmp_path, pg_dsn, ledger, "take", "3", str(count)) as d,
        ):
            children = [a, b, c, d]
            for child in children:
                assert await child.line() == "ready"
            for child in children:
                child.signal(signal.SIGUSR1)
            won = [(await child.summary())[1]["won"] for child in children]
    every = [thread for ids in won for thread in ids]
    assert len(every) == len(set(every))  # nothing taken twice
    assert sorted(every) == sorted(f"id-{i}" for i in range(count))  # nothing lost
    async with open_store(pg_dsn) as store:
        for worker, ids in enumerate(won):
            for thread in ids:
                assert await store.get_pending(thread) == PendingState(
                    f"key-{thread.removeprefix('id-')}", "taken"
                )
                [message] = await store.get(thread) or []
                assert message["content"].startswith(f"taken by {worker}-")


# The demo command -------------------------------------------------------------------


async def test_the_durable_demo_approves_once_after_a_restart_and_refuses_a_replay() -> None:
    with trio.fail_after(LIMIT_S):
        done = await trio.run_process(
            [sys.executable, "-m", "toolnexus_trio", "demo", "--durable"],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            start_new_session=True,
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    lines = out.splitlines()
    halted = lines.index("    the run halts: Deploy v2 to production? (status=pending)")
    restart = next(i for i, line in enumerate(lines) if line.startswith("[restart]"))
    found = lines.index("[after the restart] pending run found: status=pending")
    ran = lines.index("    deploy(v2) runs: deployment #1")
    assert halted < restart < found < ran
    assert "    assistant: Done: v2 is live. (status=done)" in lines
    assert any(
        line.startswith("    refused: the pending run of 'release-42' was already answered")
        for line in lines
    )
    assert lines[-1] == "deploy ran 1 time(s)"
