"""The todo host used by ``python -m toolnexus_trio demo`` and ``... host``.

Its actions show each part of an ``ActionContext``: progress (``add``, and the slow
``import_todos`` that an agent may cancel part-way), ``confirm`` (``delete``) and
``elicit`` (``rename``); the ``todos`` resource holds the list.
"""

from __future__ import annotations

import itertools

import attrs
import trio

from ..tesseron import ActionContext, ActionError, ElicitRequest, LogEntry, TesseronApp


@attrs.frozen
class Todo:
    """One todo."""

    id: int
    text: str
    done: bool = False


@attrs.frozen
class AddTodos:
    """Input of ``add``."""

    items: list[str]


@attrs.frozen
class ImportTodos:
    """Input of ``import_todos``: how many items the (simulated) import brings."""

    count: int
    seconds_per_item: float = 0.05


@attrs.frozen
class TodoId:
    """Input of ``delete`` and ``rename``."""

    id: int


@attrs.frozen
class RenameAnswer:
    """What ``rename`` asks the user for."""

    text: str


def build_todo_app() -> TesseronApp:
    """A fresh todo app with its own, empty list."""
    app = TesseronApp("todo", "Todo list", description="A small todo list")
    todos: dict[int, Todo] = {}
    ids = itertools.count(1)

    def snapshot() -> list[Todo]:
        return list(todos.values())

    resource = app.resource("todos", snapshot, "Every todo", subscribable=True)

    @app.action("add", "Add one or more todos", timeout_ms=10_000)
    async def add(input: AddTodos, ctx: ActionContext) -> list[Todo]:
        added = []
        for index, text in enumerate(input.items):
            todo = Todo(next(ids), text)
            todos[todo.id] = todo
            added.append(todo)
            await ctx.progress(
                percent=(index + 1) * 100 // len(input.items),
                message=f"{index + 1}/{len(input.items)} added",
            )
        await resource.publish(snapshot())
        return added

    @app.action("import_todos", "Import todos from the old tracker (slow)", timeout_ms=60_000)
    async def import_todos(input: ImportTodos, ctx: ActionContext) -> dict[str, int]:
        await ctx.log(LogEntry.info("import started").meta({"count": input.count}))
        for index in range(input.count):
            await trio.sleep(input.seconds_per_item)  # the slow part: cancellable
            todo = Todo(next(ids), f"imported item {index + 1}")
            todos[todo.id] = todo
            await ctx.progress(
                percent=(index + 1) * 100 // input.count,
                message=f"{index + 1}/{input.count} imported",
            )
        await resource.publish(snapshot())
        return {"imported": input.count}

    @app.action("delete", "Delete a todo after asking the user", annotations={"destructive": True})
    async def delete(input: TodoId, ctx: ActionContext) -> dict[str, bool]:
        todo = todos.get(input.id)
        if todo is None:
            raise ActionError.handler(f"No todo {input.id}", {"id": input.id})
        if not await ctx.confirm(f'Delete "{todo.text}"? This cannot be undone.'):
            return {"deleted": False}
        del todos[input.id]
        await ctx.log(LogEntry.info("deleted").meta({"id": input.id}))
        await resource.publish(snapshot())
        return {"deleted": True}

    @app.action("rename", "Rename a todo; the user types the new text")
    async def rename(input: TodoId, ctx: ActionContext) -> Todo | None:
        todo = todos.get(input.id)
        if todo is None:
            raise ActionError.handler(f"No todo {input.id}", {"id": input.id})
        answer = await ctx.elicit_as(
            RenameAnswer, ElicitRequest.for_type(RenameAnswer, f'Rename "{todo.text}" to?')
        )
        if answer is None:
            return None
        todos[todo.id] = renamed = attrs.evolve(todo, text=answer.text)
        await resource.publish(snapshot())
        return renamed

    return app
