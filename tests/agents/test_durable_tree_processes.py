"""A sub-agent tree suspended in one process is answered in another (durable_tree_child.py).

Two real processes share one SQLite file and nothing else: the first runs a three-level
tree until its leaf asks for approval and exits; the second opens a brand-new runtime on
the file and resumes the tree. The answer is taken once (a replay, sequential or racing,
gets AlreadyAnswered) and the leaf's approved action runs once.

Each child runs in its own process group with stdin from /dev/null and is killed with
its group when the test ends; a child that must stop at a point prints ``paused POINT``
and waits for SIGUSR1, so the test releases it exactly there, without sleeping.
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
from typing import Any

import pytest
import trio
from agent_rig import load

from toolnexus_trio import SqliteConversationStore
from toolnexus_trio.agents._durable import TABLE_ID, pending_id, read_table

CHILD = Path(__file__).resolve().parent / "durable_tree_child.py"
LIMIT_S = 60  # a safety net against a hung child, not a timing assertion
LEAF = "root/lead.1/deputy.1/deployer.1"


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
        last = await self.line()
        code = await self.process.wait()
        assert code in (0, 3), self.log.read_text()
        return code, json.loads(last)

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)


@asynccontextmanager
async def spawn(tmp_path: Path, *args: str) -> AsyncIterator[Child]:
    log = tmp_path / f"child-{os.urandom(4).hex()}.log"
    with log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(CHILD), *args],
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
            with pytest.raises(ProcessLookupError):  # nothing of the group is left
                os.killpg(process.pid, 0)


def ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def suspend(tmp_path: Path) -> tuple[str, str, str]:
    db, book = str(tmp_path / "tree.db"), str(tmp_path / "ledger")
    async with spawn(tmp_path, db, book, "suspend") as a:
        code, out = await a.summary()
    assert code == 0 and out["status"] == "pending", out
    return db, book, out["request"]


async def test_a_tree_suspended_in_one_process_is_answered_in_another(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        db, book, request = await suspend(tmp_path)
        assert ledger(Path(book)) == ["asked"]
        async with spawn(tmp_path, db, book, "list") as c:
            _, listed = await c.summary()
        # The fresh runtime sees the whole suspended tree, from the store alone.
        assert listed["handles"] == {
            "root/lead.1": "suspended",
            "root/lead.1/deputy.1": "suspended",
            LEAF: "suspended",
        }
        async with spawn(tmp_path, db, book, "answer", request) as b:
            code, out = await b.summary()
    assert code == 0 and out["status"] == "done", out
    assert out["text"] == "m-lead: m-deputy: m-deployer: v1 is live"
    assert ledger(Path(book)) == ["asked", "deployed"]  # the approved action ran once
    handles = out["handles"]
    assert sorted(handles) == ["root/lead.1", "root/lead.1/deputy.1", LEAF]  # no duplicate
    assert handles["root/lead.1"][0] == "idle"
    async with SqliteConversationStore(db) as store:
        state = await store.get_pending(pending_id(request))
        table = read_table(await store.get(TABLE_ID))
    assert state is not None and state.status == "answered"
    assert table is not None and table.pending == []


async def test_a_pending_result_is_stored_before_run_returns_it(tmp_path: Path) -> None:
    # Issue 30, item 4: the process ends (os._exit) the moment run() returned pending;
    # the approval and the table were saved before, so another process answers it.
    with trio.fail_after(LIMIT_S):
        db, book = str(tmp_path / "tree.db"), str(tmp_path / "ledger")
        async with spawn(tmp_path, db, book, "suspend", "--exit-now") as a:
            code, out = await a.summary()
        assert code == 0 and out["status"] == "pending", out
        request = out["request"]
        async with SqliteConversationStore(db) as store:
            state = await store.get_pending(pending_id(request))
            table = read_table(await store.get(TABLE_ID))
        assert state is not None and state.status == "pending"
        assert table is not None and [p.request_id for p in table.pending] == [request]
        async with spawn(tmp_path, db, book, "answer", request) as b:
            code, out = await b.summary()
    assert code == 0 and out["status"] == "done", out
    assert ledger(Path(book)) == ["asked", "deployed"]


async def test_a_replayed_answer_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        db, book, request = await suspend(tmp_path)
        outcomes = []
        for _ in range(2):
            async with spawn(tmp_path, db, book, "answer", request) as b:
                outcomes.append(await b.summary())
    assert outcomes[0][0] == 0 and outcomes[0][1]["status"] == "done"
    assert outcomes[1] == (3, {"error": "AlreadyAnswered", "status": "answered"})
    assert ledger(Path(book)) == ["asked", "deployed"]


async def test_two_processes_answering_at_once_run_the_leaf_once(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        db, book, request = await suspend(tmp_path)
        args = (db, book, "answer", request, "--pause", "taken")
        async with spawn(tmp_path, *args) as b, spawn(tmp_path, *args) as c:
            # Exactly one of them takes the answer; the other is refused at once.
            first = await trio_first_line(b, c)
            winner, loser = (b, c) if first is b else (c, b)
            assert await loser.summary() == (3, {"error": "AlreadyAnswered", "status": "taken"})
            assert await winner.line() == "paused taken"
            winner.signal(signal.SIGUSR1)
            code, out = await winner.summary()
    assert code == 0 and out["status"] == "done"
    assert ledger(Path(book)) == ["asked", "deployed"]


async def trio_first_line(b: Child, c: Child) -> Child:
    """The child that is paused holding the taken answer (the other one exits 3)."""
    winner: list[Child] = []
    async with trio.open_nursery() as nursery:

        async def watch(child: Child) -> None:
            code = await child.process.wait()
            assert code == 3, child.log.read_text()
            if code == 3:
                winner.append(c if child is b else b)
                nursery.cancel_scope.cancel()

        nursery.start_soon(watch, b)
        nursery.start_soon(watch, c)
    return winner[0]


# The subagent-durable-resume fixture, its two phases in two processes ----------------

FIXTURE_CHILD = Path(__file__).resolve().parent / "durable_fixture_child.py"


async def fixture_phase(tmp_path: Path, *args: str) -> dict[str, Any]:
    done = await trio.run_process(
        [sys.executable, str(FIXTURE_CHILD), str(tmp_path / "fixture.db"), *args],
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    summary: dict[str, Any] = json.loads(done.stdout.decode().splitlines()[-1])
    return summary


async def test_the_durable_resume_fixture_across_a_process_change(tmp_path: Path) -> None:
    fixture = load("subagent-durable-resume")
    first, second = fixture["phase1_expect"], fixture["phase2_expect"]
    with trio.fail_after(LIMIT_S):
        one = await fixture_phase(tmp_path, "phase1")
        assert one["status"] == first["status"]
        assert one["request"]["kind"] == first["pendingKind"]
        path = "/".join(one["request"]["data"]["path"])
        assert path.endswith(first["pendingDataPathEndsWithin"])
        assert {h["state"] for h in one["handles"].values()} == {first["allHandles"]}
        two = await fixture_phase(tmp_path, "phase2", one["request"]["id"])
    parent, leaf = sorted(second["transitions"])
    assert two["handles"][parent]["state"] == second["finalParentState"]
    for handle, expected in second["transitions"].items():
        assert two["handles"][handle]["transitions"] == expected, handle
    assert sorted(two["handles"]) == sorted(one["handles"])  # no duplicate child
    assert any(want in line for want in second["traceContains"] for line in two["trace"])
    # The leaf resumed at its checkpoint: its usage grew, and its tool ran once per phase.
    assert two["handles"][leaf]["tokens"] > one["handles"][leaf]["tokens"]
    assert one["runs"] == {"check_secret": 1}
    assert two["runs"] == {"check_secret": 1}


async def test_a_process_killed_after_taking_the_answer_never_runs_the_leaf_twice(
    tmp_path: Path,
) -> None:
    """SIGKILL right after the take: the approval stays taken (a new answer is refused)
    and the approved action has not run; it never runs twice, here it never runs."""
    with trio.fail_after(LIMIT_S):
        db, book, request = await suspend(tmp_path)
        async with spawn(tmp_path, db, book, "answer", request, "--pause", "taken") as b:
            assert await b.line() == "paused taken"
            b.signal(signal.SIGKILL)
            await b.process.wait()
        async with spawn(tmp_path, db, book, "answer", request) as c:
            assert await c.summary() == (3, {"error": "AlreadyAnswered", "status": "taken"})
    assert ledger(Path(book)) == ["asked"]


# More than one approval in a row, each answered by another process --------------------


@pytest.mark.parametrize(
    ("model", "book_after"),
    [
        # The leaf deploys twice and asks each time.
        ("twice", ["asked", "deployed", "asked", "deployed"]),
        # The deputy delegates two deploys in one turn: two suspensions, one at a time.
        ("pair", ["asked", "asked", "deployed", "deployed"]),
    ],
)
async def test_each_request_of_a_tree_is_answered_by_another_process(
    tmp_path: Path, model: str, book_after: list[str]
) -> None:
    db, book = str(tmp_path / "tree.db"), str(tmp_path / "ledger")
    with trio.fail_after(LIMIT_S):
        async with spawn(tmp_path, db, book, "suspend", "--model", model) as a:
            code, one = await a.summary()
        assert code == 0 and one["status"] == "pending", one
        async with spawn(tmp_path, db, book, "answer", one["request"], "--model", model) as b:
            code, two = await b.summary()
        # The second request is escalated to the host as the first one was.
        assert code == 0 and two["status"] == "pending", two
        assert two["request"] != one["request"]
        assert two["path"] == one["path"] == ["root", "lead.1"]
        async with spawn(tmp_path, db, book, "answer", two["request"], "--model", model) as c:
            code, three = await c.summary()
        assert code == 0 and three["status"] == "done", three
        assert three["text"] == "m-lead: m-deputy: m-deployer: v1 is live"
        for request in (one["request"], two["request"]):  # each answered once
            async with spawn(tmp_path, db, book, "answer", request, "--model", model) as d:
                assert await d.summary() == (3, {"error": "AlreadyAnswered", "status": "answered"})
    assert ledger(Path(book)) == book_after
