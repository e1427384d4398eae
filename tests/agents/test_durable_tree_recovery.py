"""Crash-durable agent trees in one process (the in-memory store, Trio's clock): what
each agent's checkpoint records of the tree, ``AgentRuntime.recover`` of a tree whose
runtime stopped mid-tool, ``orphaned_trees`` and the errors. The SIGKILL matrix across
processes is tests/loop/test_tree_crash_processes.py."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from crash_app import ledger_lines
from tree_crash_child import generate, registry

from toolnexus_trio import (
    GenerateRequest,
    InMemoryConversationStore,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Toolkit,
    ToolResult,
    create_in_process_client,
)
from toolnexus_trio.agents import AgentRuntime, open_agent_runtime
from toolnexus_trio.loop import InDoubtCall, RunNotRecoverable

FINISHED = "boss: worker: found b; charged a"


async def _no_pause(point: str) -> None:
    pass


def runtime(
    store: InMemoryConversationStore, ledger: Path, **kw: Any
) -> AbstractAsyncContextManager[AgentRuntime]:
    return open_agent_runtime(
        registry(ledger, _no_pause), generate=generate, store=store, durable=True, **kw
    )


async def test_each_agent_checkpoints_the_tree_it_belongs_to(tmp_path: Path) -> None:
    store = InMemoryConversationStore()
    async with runtime(store, tmp_path / "ledger") as rt:
        result = await rt.run("boss", "job", id="t")
    assert (result.status, result.text) == ("done", FINISHED)
    root = await store.load_checkpoint("t")
    assert root is not None and root.status == "done"
    tree = root.state["tree"]
    assert (tree["agent"], tree["parent"]) == ("boss", None)
    [(key, child)] = tree["children"].items()
    assert key.endswith(":t1") and child["agent"] == "worker"
    assert child["id"].startswith("t/worker.")
    worker = await store.load_checkpoint(child["id"])
    assert worker is not None and worker.status == "done"
    assert (worker.state["tree"]["agent"], worker.state["tree"]["parent"]) == ("worker", "t")
    assert ledger_lines(tmp_path / "ledger") == ["lookup b", "charge a"]


async def test_a_tree_without_an_id_is_not_durable(tmp_path: Path) -> None:
    store = InMemoryConversationStore()
    async with runtime(store, tmp_path / "ledger") as rt:
        result = await rt.run("boss", "job")
    assert result.text == FINISHED
    assert await store.orphaned_runs() == []
    assert await store.load_checkpoint("t") is None  # nothing was checkpointed


async def test_a_tree_stopped_inside_the_sub_agents_tool_is_recovered(tmp_path: Path) -> None:
    store, ledger = InMemoryConversationStore(), tmp_path / "ledger"
    with trio.CancelScope() as stop:

        async def pause(point: str) -> None:
            if point == "tool:charge a":
                stop.cancel()  # the process stops here (a shutdown: leases given up)
                await trio.sleep_forever()

        async with open_agent_runtime(
            registry(ledger, pause), generate=generate, store=store, durable=True
        ) as rt:
            await rt.run("boss", "job", id="t")
    assert ledger_lines(ledger) == ["lookup b", "charge a"]
    plain = create_in_process_client(
        InProcessOptions(model="m", generate=generate, store=store, durable=True)
    )
    orphans = await plain.orphaned_runs()
    assert sorted(orphans)[0] == "t" and len(orphans) == 2  # the root and its worker
    for id in orphans:  # a plain worker cannot take a tree's runs
        with pytest.raises(RunNotRecoverable) as tree:
            await plain.recover(id, Toolkit([]))
        assert tree.value.status == "tree"
    async with runtime(store, ledger) as rt:
        assert await rt.orphaned_trees() == ["t"]  # the worker's run is left out
        result = await rt.recover("t")
        # The tree is the winner's: a second recovery is refused.
        with pytest.raises(RunNotRecoverable) as refused:
            await rt.recover("t")
    assert refused.value.status == "done"
    assert result.status == "done"
    assert result.text.startswith("boss: worker: found b; in doubt: the call of 'charge'")
    assert ledger_lines(ledger) == ["lookup b", "charge a"]  # nothing ran again
    async with runtime(store, ledger) as rt:
        assert await rt.orphaned_trees() == []


async def test_recover_refuses_what_is_not_an_orphaned_tree(tmp_path: Path) -> None:
    store = InMemoryConversationStore()
    options = InProcessOptions(model="m", generate=generate, store=store, durable=True)
    plain = create_in_process_client(options)
    await plain.ask("hi", None, id="plain")
    async with runtime(store, tmp_path / "ledger") as rt:
        with pytest.raises(LookupError):
            await rt.recover("nothing")
        with pytest.raises(ValueError, match="not the root run of a durable agent tree"):
            await rt.recover("plain")


async def test_run_with_an_id_needs_a_durable_runtime(tmp_path: Path) -> None:
    async with open_agent_runtime(registry(tmp_path / "l", _no_pause), generate=generate) as rt:
        with pytest.raises(ValueError, match="durable=True"):
            await rt.run("boss", "job", id="t")
        with pytest.raises(TypeError, match="durable=True"):
            await rt.recover("t")


async def test_lease_ms_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lease_ms"):
        async with runtime(InMemoryConversationStore(), tmp_path / "l", lease_ms=0):
            pass


async def pair(req: GenerateRequest) -> InProcessResponse:
    """``boss`` delegates ``pay a`` and ``pay c`` in one turn (two children at once)."""
    users = [str(m["content"]) for m in req.messages if m["role"] == "user"]
    outputs = [str(m["content"]) for m in req.messages if m["role"] == "tool"]
    if users and users[0].startswith("pay "):
        v = users[0].split()[1]
        if not outputs:
            return InProcessResponse(tool_calls=[InProcessToolCall(f"w{v}", "charge", {"v": v})])
        return InProcessResponse(content=f"worker {v}: {outputs[0]}")
    if not outputs:
        calls = [
            InProcessToolCall(f"t{v}", "task", {"agent": "worker", "prompt": f"pay {v}"})
            for v in "ac"
        ]
        return InProcessResponse(tool_calls=calls)
    return InProcessResponse(content="boss: " + " | ".join(outputs))


async def test_a_tree_with_two_children_in_flight_is_recovered(tmp_path: Path) -> None:
    store, ledger = InMemoryConversationStore(), tmp_path / "ledger"
    with trio.CancelScope() as stop:

        async def pause(point: str) -> None:
            if point == "tool:charge c":
                stop.cancel()
                await trio.sleep_forever()

        async with open_agent_runtime(
            registry(ledger, pause), generate=pair, store=store, durable=True
        ) as rt:
            await rt.run("boss", "job", id="t")
    root = await store.load_checkpoint("t")
    assert root is not None
    keys = sorted(k.split(":")[1] for k in root.state["tree"]["children"])
    assert keys == ["ta", "tc"]  # both recorded before they started
    async with open_agent_runtime(
        registry(ledger, _no_pause), generate=pair, store=store, durable=True
    ) as rt:
        result = await rt.recover("t")
    assert result.status == "done"
    worker_a, worker_c = result.text.removeprefix("boss: ").split(" | ")
    assert worker_a.startswith("worker a: ")
    assert worker_c.startswith("worker c: in doubt")  # in flight at the stop
    after = ledger_lines(ledger)
    # Worker a may have been stopped before, inside or after its charge (the two
    # children run at once): whatever it was, it ran at most once.
    assert after.count("charge a") <= 1
    assert after.count("charge c") == 1


async def again(req: GenerateRequest) -> InProcessResponse:
    """As the child's model, but ``boss`` delegates ``pay`` then ``pay again``, one turn
    after the other, under the same call id (models that number their calls per turn
    do)."""
    users = [str(m["content"]) for m in req.messages if m["role"] == "user"]
    outputs = [str(m["content"]) for m in req.messages if m["role"] == "tool"]
    if users[0].startswith("pay") or len(outputs) >= 2:
        return await generate(req)
    args = {"agent": "worker", "prompt": "pay" if not outputs else "pay again"}
    return InProcessResponse(tool_calls=[InProcessToolCall("t1", "task", args)])


async def test_a_call_id_reused_in_a_later_turn_makes_a_new_child(tmp_path: Path) -> None:
    store, ledger = InMemoryConversationStore(), tmp_path / "ledger"
    async with open_agent_runtime(
        registry(ledger, _no_pause), generate=again, store=store, durable=True
    ) as rt:
        result = await rt.run("boss", "job", id="t")
    assert result.text == "boss: worker: found b; charged a; worker: found b; charged a"
    assert ledger_lines(ledger) == ["lookup b", "charge a"] * 2  # the second ran too


async def test_an_in_doubt_policy_of_errors_still_recovers_the_children(tmp_path: Path) -> None:
    store, ledger = InMemoryConversationStore(), tmp_path / "ledger"
    with trio.CancelScope() as stop:

        async def pause(point: str) -> None:
            if point == "tool:lookup b":
                stop.cancel()
                await trio.sleep_forever()

        async with open_agent_runtime(
            registry(ledger, pause), generate=generate, store=store, durable=True
        ) as rt:
            await rt.run("boss", "job", id="t")

    def never(call: InDoubtCall) -> ToolResult:
        return ToolResult.error(f"{call.name} in doubt")

    async with runtime(store, ledger, on_in_doubt=never) as rt:
        result = await rt.recover("t")
    # The boss's task call was in doubt too: it ran again and found the worker, whose
    # lookup the policy reported (not run again).
    assert result.text == "boss: worker: lookup in doubt; charged a"
    assert ledger_lines(ledger) == ["lookup b", "charge a"]
