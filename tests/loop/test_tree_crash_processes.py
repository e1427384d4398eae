"""Crash-durable agent trees across real processes (tree_crash_child.py): a process
running a tree (``boss`` delegating to ``worker``, whose tools write a ledger) is
killed with SIGKILL at each step of the root and of the sub-agent, inside the
sub-agent's tools too; a second process recovers the whole tree with
``AgentRuntime.recover`` once the leases expired.

The ledger file, outside every process, counts real tool executions: the
non-idempotent ``charge`` runs at most once, the idempotent ``lookup`` at least once,
and nothing that finished before the kill runs again unless it is idempotent; a
sub-agent that finished is never run again. Children run in their own process group
with stdin from /dev/null and are killed with their group when the test ends
(test_durable_processes.spawn checks none is left).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio
from crash_app import ledger_lines
from test_crash_processes import where
from test_durable_processes import LIMIT_S, spawn

CHILD = Path(__file__).resolve().parents[1] / "tree_crash_child.py"
FINISHED = "boss: worker: found b; charged a"

# The checkpoint writes of the process, counted over both agents (see the child).
KILL_POINTS = [
    "responded#1",  # the boss's task call is in flight; its child not recorded yet
    "start#2",  # the worker recorded and started, nothing run
    "tool:lookup b",
    "result#1",
    "tool:charge a",
    "result#2",
    "responded#4",  # the worker's answer, not saved yet
    "finished#1",  # the worker finished; the boss did not record its result
    "result#3",  # the boss recorded the task's result
    "responded#5",  # the boss's answer, not saved yet
]
WORKER_DONE = {"finished#1", "result#3", "responded#5"}
PG_POINTS = ["tool:lookup b", "tool:charge a", "finished#1"]


async def kill_at(tmp_path: Path, db: str, ledger: str, point: str) -> list[str]:
    async with spawn(tmp_path, db, ledger, "run", "t", "--pause", point, child=CHILD) as a:
        assert await a.line() == f"paused {point}"
        a.signal(signal.SIGKILL)
        assert await a.process.wait() == -signal.SIGKILL
    return ledger_lines(Path(ledger))


@pytest.mark.parametrize(
    ("backend", "point"),
    [("sqlite", p) for p in KILL_POINTS] + [("postgres", p) for p in PG_POINTS],
)
async def test_a_tree_killed_mid_turn_is_recovered_by_another_process(
    point: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db, ledger = where(backend, tmp_path, request), str(tmp_path / "ledger")
    with trio.fail_after(LIMIT_S):
        before = await kill_at(tmp_path, db, ledger, point)
        async with spawn(tmp_path, db, ledger, "recover", "t", child=CHILD) as b:
            code, summary = await b.summary()
    assert code == 0, summary
    assert summary["status"] == "done"
    after = ledger_lines(Path(ledger))
    # Not idempotent: at most once, whatever the point; idempotent: at least once.
    assert after.count("charge a") <= 1
    assert after.count("lookup b") >= 1
    if "charge a" in before:  # it ran before the kill: never again
        assert after.count("charge a") == 1
    if "lookup b" in before and point != "tool:lookup b":  # finished: not run again
        assert after.count("lookup b") == 1
    if point in WORKER_DONE:  # a finished sub-agent is not run again
        assert after == before
    if point == "tool:charge a":  # in flight at the kill: in doubt, reported
        assert "in doubt" in summary["text"]
    if "in doubt" not in summary["text"]:
        assert summary["text"] == FINISHED
        assert after.count("charge a") == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_two_recoverers_racing_for_one_tree_one_wins(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db, ledger = where(backend, tmp_path, request), str(tmp_path / "ledger")
    with trio.fail_after(LIMIT_S):
        await kill_at(tmp_path, db, ledger, "tool:lookup b")
        async with (
            spawn(tmp_path, db, ledger, "recover", "t", "--ready", child=CHILD) as b,
            spawn(tmp_path, db, ledger, "recover", "t", "--ready", child=CHILD) as c,
        ):
            assert await b.line() == "ready"
            assert await c.line() == "ready"
            b.signal(signal.SIGUSR1)
            c.signal(signal.SIGUSR1)
            outcomes = sorted([await b.summary(), await c.summary()], key=lambda o: o[0])
    assert outcomes[0] == (0, {"status": "done", "text": FINISHED})
    assert outcomes[1] == (3, {"error": "RunNotRecoverable", "status": "running"})
    after = ledger_lines(Path(ledger))
    assert after.count("charge a") == 1  # the winner ran it, the loser nothing
