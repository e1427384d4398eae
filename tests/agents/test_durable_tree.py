"""A sub-agent tree kept in the runtime's store (in one process, on the virtual clock):
a runtime opened later on the same store resumes it; the answer is taken once; the
stored table is read strictly; without a store nothing is written.

The two-process version of the same story is test_durable_tree_processes.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from durable_app import open_store
from durable_tree_child import generate, registry
from helpers import TaskCensus

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    GenerateRequest,
    InMemoryConversationStore,
    InProcessResponse,
    InProcessToolCall,
    SqliteConversationStore,
)
from toolnexus_trio.agents import open_agent_runtime
from toolnexus_trio.agents._durable import TABLE_ID, pending_id, read_table, table_message
from toolnexus_trio.agents._snapshot_check import DurableFormatError
from toolnexus_trio.stores import PendingStore

LEAD, DEPUTY = "root/lead.1", "root/lead.1/deputy.1"
LEAF = "root/lead.1/deputy.1/deployer.1"


def ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def suspend(store: PendingStore, book: Path) -> str:
    async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
        result = await rt.run("lead", "ship it")
        assert result.status == "pending"
        assert result.pending is not None
        assert result.pending.data is not None
        assert result.pending.data["path"] == ["root", "lead.1"]
        return result.pending.id


async def test_a_runtime_opened_later_on_the_store_resumes_the_tree(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    store = InMemoryConversationStore()
    with TaskCensus() as census:
        request = await suspend(store, book)
    census.assert_no_new_tasks()  # the first runtime left nothing behind, though pending
    # The first runtime is gone (its block closed the tree in memory, not in the store).
    async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
        assert {v.id: v.state for v in rt.list()} == {
            "root": "idle",
            LEAD: "suspended",
            DEPUTY: "suspended",
            LEAF: "suspended",
        }
        done = await rt.resume(Answer(request, True))
        assert done.status == "done"
        assert done.text == "m-lead: m-deputy: m-deployer: v1 is live"
        assert ledger(book) == ["asked", "deployed"]  # the leaf ran once for the approval
        assert sorted(v.id for v in rt.list()) == ["root", LEAD, DEPUTY, LEAF]  # no duplicate
        lead = rt.inspect(rt.handle(LEAD))
        assert lead.state == "idle"
        assert list(lead.transitions)[-2:] == ["idle→running", "running→idle"]
        with pytest.raises(AlreadyAnswered) as replay:
            await rt.resume(Answer(request, True))
        assert replay.value.status == "answered"
        # The leaf's usage grew across the processes instead of starting again.
        assert rt.handle(LEAF).turns == 2
    state = await store.get_pending(pending_id(request))
    assert state is not None
    assert state.status == "answered"
    # The table keeps what a resume needs: the closed deputy and leaf (no run can
    # reattach to them any more) are no longer in it.
    table = read_table(await store.get(TABLE_ID))
    assert table is not None
    assert [h["id"] for h in table.snapshot["handles"]] == [LEAD]


async def test_a_replay_in_a_third_runtime_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    async with SqliteConversationStore(tmp_path / "t.db") as store:
        request = await suspend(store, book)
        for expected in ("done", "answered"):
            async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
                if expected == "done":
                    assert (await rt.resume(Answer(request, True))).status == "done"
                else:
                    with pytest.raises(AlreadyAnswered) as replay:
                        await rt.resume(Answer(request, True))
                    assert replay.value.status == expected
    assert ledger(book) == ["asked", "deployed"]


async def test_two_resumes_racing_in_one_process_take_the_answer_once(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    store = InMemoryConversationStore()
    request = await suspend(store, book)
    outcomes: list[str] = []
    async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:

        async def answer() -> None:
            try:
                outcomes.append((await rt.resume(Answer(request, True))).status)
            except AlreadyAnswered as exc:
                outcomes.append(exc.status)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            nursery.start_soon(answer)
    assert sorted(outcomes) == ["done", "taken"]
    assert ledger(book) == ["asked", "deployed"]


async def test_an_interrupt_alone_supersedes_the_stored_approval(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    store = InMemoryConversationStore()
    request = await suspend(store, book)
    async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
        rt.interrupt(rt.handle(LEAD))
        await trio.testing.wait_all_tasks_blocked()
        state = await store.get_pending(pending_id(request))
        assert state is not None
        assert state.status == "superseded"
        # Another runtime on the store would refuse the answer now.
        with pytest.raises(AlreadyAnswered) as late:
            await rt.resume(Answer(request, True))
        assert late.value.status == "superseded"
    assert ledger(book) == ["asked"]


async def test_an_interrupted_approval_is_superseded(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    store = InMemoryConversationStore()
    request = await suspend(store, book)
    async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
        rt.interrupt(rt.handle(LEAD))
        await rt.close(rt.handle(LEAD))  # a settle after the interrupt saves the table
    state = await store.get_pending(pending_id(request))
    assert state is not None
    assert state.status == "superseded"
    async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
        # A closed root child is not kept in the table: nothing can resume it.
        assert [v.id for v in rt.list()] == ["root"]
        with pytest.raises(AlreadyAnswered) as late:
            await rt.resume(Answer(request, True))
        assert late.value.status == "superseded"
    assert ledger(book) == ["asked"]


async def test_without_a_store_the_runtime_writes_no_table(tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    async with open_agent_runtime(registry(book), generate=generate) as rt:
        assert (await rt.run("lead", "ship it")).status == "pending"
        assert await rt.conversation_store.get(TABLE_ID) is None


def _damage(table: dict[str, Any], change: str) -> dict[str, Any]:
    handles = table["handles"]
    leaf = next(h for h in handles if h["id"] == LEAF)
    if change == "unknown agent":
        leaf["def"] = "intruder"
        leaf["id"] = f"{DEPUTY}/intruder.1"
    elif change == "orphan":
        handles.remove(next(h for h in handles if h["id"] == DEPUTY))
    elif change == "suspended without a run":
        leaf["pending_run"] = None
    elif change == "bad run":
        leaf["pending_run"]["status"] = "maybe"
    elif change == "extra key":
        leaf["shadow"] = True
    elif change == "string for int":
        leaf["turns"] = "1"
    elif change == "newer":
        table["version"] = 99
    elif change == "task child elsewhere":
        deputy = next(h for h in handles if h["id"] == DEPUTY)
        deputy["task_children"][0][2] = f"{LEAD}/deployer.1"
    elif change == "negative age":
        leaf["age_ms"] = -5.0
    return table


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("unknown agent", "not in this registry"),
        ("orphan", "does not fit the tree"),
        ("suspended without a run", "without its request and run"),
        ("bad run", "halted run"),
        ("extra key", "damaged"),
        ("string for int", "damaged"),
        ("newer", "newer toolnexus_trio"),
        ("task child elsewhere", "task child elsewhere"),
        ("negative age", "negative or infinite"),
    ],
)
async def test_a_damaged_stored_table_is_refused_when_the_runtime_opens(
    tmp_path: Path, change: str, why: str
) -> None:
    book = tmp_path / "ledger"
    store = InMemoryConversationStore()
    await suspend(store, book)
    doc = read_table(await store.get(TABLE_ID))
    assert doc is not None
    damaged = _damage(json.loads(json.dumps(doc.snapshot)), change)
    await store.save(TABLE_ID, [table_message(damaged, doc.pending)])
    with pytest.raises(DurableFormatError, match=why):
        async with open_agent_runtime(registry(book), generate=generate, store=store):
            pass


async def test_a_tree_that_asks_again_after_the_answer_gets_a_new_record(tmp_path: Path) -> None:
    """The leaf deploys twice, each deploy approved on its own: the first answer's record
    ends answered, the second request gets its own record, answered by a third runtime."""
    book = tmp_path / "ledger"
    base = registry(book)

    async def twice(req: GenerateRequest) -> InProcessResponse:
        if req.model != "m-deployer":
            return await generate(req)
        done = [m for m in req.messages if m["role"] == "tool"]
        if len(done) < 2:
            call = InProcessToolCall(id=f"t-deploy-{len(done)}", name="deploy", arguments={})
            return InProcessResponse(tool_calls=[call])
        return InProcessResponse(content=f"m-deployer: {done[-1]['content']}")

    store = InMemoryConversationStore()
    async with open_agent_runtime(base, generate=twice, store=store) as rt:
        first = await rt.run("lead", "ship it")
    assert first.pending is not None
    async with open_agent_runtime(base, generate=twice, store=store) as rt:
        second = await rt.resume(Answer(first.pending.id, True))
    assert second.status == "pending", (second, ledger(book))
    assert second.pending is not None
    assert second.pending.id != first.pending.id
    async with open_agent_runtime(base, generate=twice, store=store) as rt:
        done = await rt.resume(Answer(second.pending.id, True))
    assert done.status == "done"
    assert ledger(book) == ["asked", "deployed", "asked", "deployed"]
    for request, status in ((first.pending.id, "answered"), (second.pending.id, "answered")):
        state = await store.get_pending(pending_id(request))
        assert state is not None
        assert state.status == status


async def test_every_store_we_ship_keeps_the_tree(tmp_path: Path, store_place: str) -> None:
    """The same story on the in-memory, SQLite and PostgreSQL stores, through the store
    protocols only: suspend, a fresh runtime resumes once, a replay is refused."""
    book = tmp_path / "ledger"
    async with open_store(store_place) as store:
        request = await suspend(store, book)
        async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
            assert (await rt.resume(Answer(request, True))).status == "done"
        async with open_agent_runtime(registry(book), generate=generate, store=store) as rt:
            with pytest.raises(AlreadyAnswered) as replay:
                await rt.resume(Answer(request, True))
            assert replay.value.status == "answered"
    assert ledger(book) == ["asked", "deployed"]


class _SlowStore(InMemoryConversationStore):
    """The in-memory store, with each take-once record's write held until ``go`` is set
    (a slow disk): the test sees who is told what while the write is under way."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = trio.Event()
        self.go = trio.Event()

    async def save_pending(self, id: str, messages: Any, state: Any) -> None:
        self.writing.set()
        await self.go.wait()
        await super().save_pending(id, messages, state)


async def test_waiters_hear_of_a_pending_tree_only_once_it_is_stored(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Issue 30, item 4, in one process: run() and a waiter that comes during the write
    # both get the pending result after the approval's record is stored, not before.
    store = _SlowStore()
    told: list[str] = []
    with trio.fail_after(10):
        async with open_agent_runtime(
            registry(tmp_path / "ledger"), generate=generate, store=store
        ) as rt:

            async def host() -> None:
                result = await rt.run("lead", "ship it")
                assert result.pending is not None
                stored = await store.get_pending(pending_id(result.pending.id))
                told.append(f"run {result.status} stored={stored is not None}")

            async def late_waiter() -> None:
                await store.writing.wait()
                result = await rt.wait(rt.handle(LEAD))
                told.append(f"wait {result.status}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(host)
                nursery.start_soon(late_waiter)
                await store.writing.wait()
                await trio.sleep(1)  # nobody is told while the record is being written
                assert told == []
                store.go.set()
    assert sorted(told) == ["run pending stored=True", "wait pending"]
