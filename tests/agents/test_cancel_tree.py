"""The cancellation tree: an interrupt or an outer Trio cancel ends every descendant's
model call and tool at once, leaves no task and no process.

A coordinator delegates to two children in one turn: ``worker`` runs the real ``bash``
builtin (a shell with a background child), ``thinker`` sits in a model call that never
returns. These use real processes, so the real clock (with ``fail_after`` guards).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio
from builtin_helpers import live_group_members
from helpers import TaskCensus, live_tasks

from toolnexus_trio.agents import AgentDef, open_agent_runtime
from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


def _tool_msgs(request: GenerateRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


class TreeModel:
    """The coordinator delegates twice; the worker runs bash; the thinker never answers."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file
        self.in_flight = 0
        self.cancelled = 0
        self.thinking = trio.Event()
        self.thinker_task: trio.lowlevel.Task | None = None

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        done = _tool_msgs(request)
        self.in_flight += 1
        try:
            await trio.lowlevel.checkpoint()
            if request.model == "m-coord" and not done:
                calls = (
                    InProcessToolCall("c1", "task", {"agent": "worker", "prompt": "run it"}),
                    InProcessToolCall("c2", "task", {"agent": "thinker", "prompt": "think"}),
                )
                return InProcessResponse(tool_calls=calls)
            if request.model == "m-worker" and not done:
                command = f"echo $$ > {self.pid_file}; sleep 30 & wait"
                call = InProcessToolCall("b1", "bash", {"command": command})
                return InProcessResponse(tool_calls=(call,))
            if request.model == "m-thinker":
                self.thinker_task = trio.lowlevel.current_task()
                self.thinking.set()
                await trio.sleep_forever()
            return InProcessResponse(content="finished")
        except trio.Cancelled:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1


def _registry(tmp_path: Path) -> dict[str, AgentDef]:
    bash = [t for t in builtin_tools(BuiltinsConfig(base_dir=str(tmp_path))) if t.name == "bash"]
    return {
        "coordinator": AgentDef(
            "coordinator", "delegates", "lead", "m-coord", task_targets=["thinker", "worker"]
        ),
        "thinker": AgentDef("thinker", "thinks", "think", "m-thinker"),
        "worker": AgentDef("worker", "runs commands", "work", "m-worker", tools=bash),
    }


async def _pid(path: Path) -> int:
    # The shell writes its pid when it starts; poll for it (a file has no event).
    file = trio.Path(path)
    while True:
        text = await file.read_text() if await file.exists() else ""
        if text.strip():
            return int(text)
        await trio.sleep(0.005)


def _turn_tasks() -> list[str]:
    return [t.name for t in live_tasks() if "Turns.fresh" in t.name or "Turns.resumed" in t.name]


async def test_interrupt_ends_every_descendant_model_call_and_tool(tmp_path: Path) -> None:
    model = TreeModel(tmp_path / "pid")
    results: list[Any] = []
    with TaskCensus() as census, trio.fail_after(20):
        async with open_agent_runtime(_registry(tmp_path), generate=model) as rt:
            coordinator = rt.spawn(rt.root, "coordinator")
            assert rt.wake(coordinator, "go").ok
            async with trio.open_nursery() as nursery:

                async def waiter() -> None:
                    results.append(await rt.wait(coordinator))

                nursery.start_soon(waiter)
                pgid = await _pid(tmp_path / "pid")
                await model.thinking.wait()
                assert len(live_group_members(pgid)) == 2  # the shell and its sleep
                assert model.in_flight == 1
                rt.interrupt(coordinator)
            # The waiter has its answer: by then every descendant is idle, its model
            # call cancelled and its process group gone, and no turn task is left.
            assert results[0].status == "interrupted"
            assert live_group_members(pgid) == []
            assert model.in_flight == 0 and model.cancelled == 1
            assert _turn_tasks() == []
            states = {v.id: v.state for v in rt.list(coordinator)}
            assert set(states.values()) == {"idle"}, states
            for child in coordinator.children:
                assert child.last_result is not None
                assert child.last_result.status == "interrupted"
        census.assert_no_new_tasks()


async def test_an_outer_trio_cancel_ends_the_whole_tree(tmp_path: Path) -> None:
    model = TreeModel(tmp_path / "pid")
    with TaskCensus() as census, trio.fail_after(20):
        with trio.CancelScope() as outer:
            async with open_agent_runtime(_registry(tmp_path), generate=model) as rt:
                coordinator = rt.spawn(rt.root, "coordinator")
                rt.wake(coordinator, "go")
                pgid = await _pid(tmp_path / "pid")
                await model.thinking.wait()
                outer.cancel()
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert live_group_members(pgid) == []
        assert model.in_flight == 0
        census.assert_no_new_tasks()


async def test_leaving_the_block_closes_the_tree_leaf_first_and_leaves_no_task(
    tmp_path: Path,
) -> None:
    model = TreeModel(tmp_path / "pid")
    closed: list[str] = []
    registry = {
        name: AgentDef(
            d.name,
            d.description,
            d.system_prompt,
            d.model,
            tools=d.tools,
            task_targets=d.task_targets,
            on_close=lambda h, reason: closed.append(f"{h.id}:{reason}"),
        )
        for name, d in _registry(tmp_path).items()
    }
    with TaskCensus() as census, trio.fail_after(20):
        async with open_agent_runtime(registry, generate=model, shutdown_ms=50) as rt:
            coordinator = rt.spawn(rt.root, "coordinator")
            rt.wake(coordinator, "go")
            pgid = await _pid(tmp_path / "pid")
            await model.thinking.wait()
        assert live_group_members(pgid) == []
        census.assert_no_new_tasks()
    assert closed[-1] == "root/coordinator.1:closed"
    assert sorted(closed[:2]) == [
        "root/coordinator.1/thinker.1:closed",
        "root/coordinator.1/worker.1:closed",
    ]


def _nurseries_above(task: trio.lowlevel.Task) -> list[trio.Nursery]:
    found = []
    nursery = task.parent_nursery
    while nursery is not None:
        found.append(nursery)
        parent = nursery.parent_task
        nursery = parent.parent_nursery
    return found


async def test_a_handles_subtree_is_a_nursery_under_its_parents(tmp_path: Path) -> None:
    model = TreeModel(tmp_path / "pid")
    with trio.fail_after(20):
        async with open_agent_runtime(_registry(tmp_path), generate=model, shutdown_ms=10) as rt:
            coordinator = rt.spawn(rt.root, "coordinator")
            rt.wake(coordinator, "go")
            await model.thinking.wait()
            assert model.thinker_task is not None
            thinker = rt.handle("root/coordinator.1/thinker.1")
            above = _nurseries_above(model.thinker_task)
            # thinker's model call → thinker's subtree → coordinator's → the runtime's.
            chain = [thinker.nursery, coordinator.nursery, rt.root.nursery]
            assert all(n in above for n in chain)
            assert [above.index(n) for n in chain] == sorted(above.index(n) for n in chain)
