"""Crash-durable runs across real processes sharing one SQLite file or one PostgreSQL
database (crash_child.py): a child is killed with SIGKILL at each step boundary and
inside a tool, a second child recovers the run once the first one's lease expired.

The ledger file, outside every process, counts real tool executions: the
non-idempotent ``charge`` runs at most once per call, the idempotent ``lookup`` at
least once. Children run in their own process group with stdin from /dev/null and
are killed with their group when the test ends (test_durable_processes.spawn).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio
from crash_app import ledger_lines
from durable_app import open_store
from test_durable_processes import LIMIT_S, spawn

from toolnexus_trio.stores import CheckpointStore

CHILD = Path(__file__).resolve().parents[1] / "crash_child.py"
FINISHED = "finished: charged a; found b; charged c"

KILL_POINTS = [
    "start#1",
    "responded#1",
    "started#1",
    "tool:charge a",
    "tool:lookup b",
    "result#1",
    "result#2",
    "step#1",
    "responded#2",
    "started#3",
    "tool:charge c",
    "result#3",
    "step#2",
    "responded#3",
]


def where(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return dsn
    return str(tmp_path / "runs.db")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("point", KILL_POINTS)
async def test_a_run_killed_at_each_step_is_recovered_by_another_process(
    point: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db, ledger = where(backend, tmp_path, request), str(tmp_path / "ledger")
    with trio.fail_after(LIMIT_S):
        async with spawn(
            tmp_path, db, ledger, "ask", "t", "job", "--pause", point, child=CHILD
        ) as a:
            assert await a.line() == f"paused {point}"
            a.signal(signal.SIGKILL)
            assert await a.process.wait() == -signal.SIGKILL
        before = ledger_lines(Path(ledger))
        async with spawn(tmp_path, db, ledger, "recover", "t", child=CHILD) as b:
            code, summary = await b.summary()
    assert code == 0 and summary["status"] == "done"
    after = ledger_lines(Path(ledger))
    # Not idempotent: at most once, whatever the point; idempotent: at least once.
    assert after.count("charge a") <= 1 and after.count("charge c") <= 1
    assert after.count("lookup b") >= 1
    for line in before:  # what ran before the kill never ran again, unless idempotent
        if line.startswith("charge"):
            assert after.count(line) == 1
    if "in doubt" not in summary["text"]:
        assert summary["text"] == FINISHED
        assert after.count("charge a") == after.count("charge c") == 1
    async with open_store(db) as store:
        assert isinstance(store, CheckpointStore)
        found = await store.load_checkpoint("t")
        assert found is not None and found.status == "done"
        saved = await store.get("t")
        assert saved is not None and saved[-1]["content"] == summary["text"]
        assert await store.orphaned_runs() == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_two_recoverers_racing_one_wins(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db, ledger = where(backend, tmp_path, request), str(tmp_path / "ledger")
    with trio.fail_after(LIMIT_S):
        async with spawn(
            tmp_path, db, ledger, "ask", "t", "job", "--pause", "step#1", child=CHILD
        ) as a:
            assert await a.line() == "paused step#1"
            a.signal(signal.SIGKILL)
            await a.process.wait()
        args = (db, ledger, "recover", "t", "--ready")
        async with (
            spawn(tmp_path, *args, child=CHILD) as b,
            spawn(tmp_path, *args, child=CHILD) as c,
        ):
            assert await b.line() == "ready"
            assert await c.line() == "ready"
            b.signal(signal.SIGUSR1)
            c.signal(signal.SIGUSR1)
            outcomes = sorted([await b.summary(), await c.summary()], key=lambda o: o[0])
    # The loser's claim meets the winner's live lease ("running"), or, when the loser is
    # slow to get there (a loaded machine), the run the winner has already finished.
    loser = outcomes[1]
    assert loser[1].get("status") in ("running", "done")
    assert outcomes == [
        (0, {"status": "done", "text": FINISHED}),
        (3, {"error": "RunNotRecoverable", "status": loser[1]["status"]}),
    ]
    assert sorted(ledger_lines(Path(ledger))) == ["charge a", "charge c", "lookup b"]
