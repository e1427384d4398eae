"""Test helpers: a task-tree census to prove nothing outlives the scope that started it."""

from __future__ import annotations

import trio
import trio.lowlevel


def live_tasks() -> set[trio.lowlevel.Task]:
    """Every task in the run right now (walking the task tree from the root)."""
    found: set[trio.lowlevel.Task] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


class TaskCensus:
    """``with TaskCensus() as census: ...`` then ``census.assert_no_new_tasks()``."""

    def __enter__(self) -> TaskCensus:
        self.before = live_tasks()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def new_tasks(self) -> set[trio.lowlevel.Task]:
        """Tasks alive now that were not alive on entry."""
        return live_tasks() - self.before

    def assert_no_new_tasks(self) -> None:
        """Fail if any task started inside the block is still alive."""
        stray = self.new_tasks()
        assert not stray, f"tasks outlived their scope: {[t.name for t in stray]}"
