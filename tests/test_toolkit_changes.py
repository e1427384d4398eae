"""The toolkit's change signal: ``Toolkit.version`` and ``wait_changed`` (no polling)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

from toolnexus_trio import Tool, Toolkit, define_tool


async def _ok(args: dict[str, Any], ctx: Any) -> str:
    return "ok"


def make(name: str) -> Tool:
    return define_tool(name, f"{name}.", None, _ok)


class Source:
    """A dynamic source that offers ``wait_changed`` (as the MCP source and gateway do)."""

    def __init__(self, *, waitable: bool = True) -> None:
        self.version = 0
        self.items: list[Tool] = []
        self.waiting = 0
        self._lot = trio.lowlevel.ParkingLot()
        if waitable:
            self.wait_changed = self._wait_changed

    def add(self, tool: Tool) -> None:
        self.items.append(tool)
        self.version += 1
        self._lot.unpark_all()

    def tools(self) -> Sequence[Tool]:
        return self.items

    async def read_resource(self, app_id: str, name: str) -> Any:
        raise LookupError(app_id)

    async def aclose(self) -> None:
        pass

    async def _wait_changed(self, since: int) -> int:
        self.waiting += 1
        try:
            while self.version == since:
                await self._lot.park()
        finally:
            self.waiting -= 1
        return self.version


def all_tasks() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    return count(trio.lowlevel.current_root_task())


class Steps(trio.abc.Instrument):
    """Counts the steps of *task* and of the tasks whose name starts with *prefix*."""

    def __init__(self, task: trio.lowlevel.Task, prefix: str) -> None:
        self.task, self.prefix = task, prefix
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task or task.name.startswith(self.prefix):
            self.count += 1


async def test_register_and_a_source_change_move_the_version() -> None:
    source = Source()
    toolkit = Toolkit([make("a")], [source])
    first = toolkit.version
    assert toolkit.version == first  # reading does not move it
    toolkit.register(make("b"))
    second = toolkit.version
    assert second != first
    toolkit.register(make("b"))  # a duplicate adds nothing: no change
    assert toolkit.version == second
    source.add(make("c"))
    assert toolkit.version not in (first, second)
    assert [t.name for t in toolkit.tools()] == ["a", "b", "c"]


async def test_wait_changed_wakes_on_register_and_on_a_source(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Source()
    toolkit = Toolkit([], [source])
    got: list[int] = []

    async def waiter(since: int) -> None:
        got.append(await toolkit.wait_changed(since))

    changes = (lambda: toolkit.register(make("x")), lambda: source.add(make("y")))
    for done, change in enumerate(changes):
        before = toolkit.version
        with trio.fail_after(10):  # a missed wake-up fails, not hangs
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter, before)
                await trio.testing.wait_all_tasks_blocked()
                assert len(got) == done  # still waiting
                change()
        assert got[-1] == toolkit.version != before
    # an old `since` returns at once
    assert await toolkit.wait_changed(-1) == toolkit.version


async def test_wait_changed_does_not_poll(autojump_clock: trio.testing.MockClock) -> None:
    toolkit = Toolkit([], [Source(), Source(waitable=False)])
    steps = Steps(trio.lowlevel.current_task(), "toolnexus_trio.")
    trio.lowlevel.add_instrument(steps)
    try:
        with trio.move_on_after(3600):  # an hour of virtual time, nothing changes
            await toolkit.wait_changed(toolkit.version)
    finally:
        trio.lowlevel.remove_instrument(steps)
    # The waits started, parked once each, and were woken only by the cancel: a poll
    # would step them on every period.
    assert steps.count <= 6


async def test_wait_changed_is_cancellable_and_leaves_no_task() -> None:
    source = Source()
    toolkit = Toolkit([], [source])
    before = all_tasks()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(toolkit.wait_changed, toolkit.version)
            await trio.testing.wait_all_tasks_blocked()
            assert source.waiting == 1
            assert all_tasks() > before + 1  # the waiter and its per-source waits
            scope.cancel()
    assert scope.cancelled_caught
    assert source.waiting == 0
    assert all_tasks() == before
