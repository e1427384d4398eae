"""A todo app exposed to AI agents as a Tesseron host.

Run it, then point a Tesseron gateway at the printed URL (or run it with
``--publish`` so gateways discover it in ``~/.tesseron/instances``)::

    python tesseron_todo_host.py            # prints url=ws://127.0.0.1:<port>/
    python tesseron_todo_host.py --publish  # also writes the instance manifest

It serves until its standard input is closed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import attrs
import trio

from toolnexus_trio.tesseron import (
    DEFAULT_MANIFEST_DIR,
    ActionContext,
    ActionError,
    ElicitRequest,
    LogEntry,
    TesseronApp,
)

EXAMPLE_SERVES = True  # it waits for a gateway: tests/tesseron/test_example_todo_host.py drives it

app = TesseronApp("todo", "Todo list", description="A small todo list")


@attrs.frozen
class Todo:
    id: int
    text: str
    done: bool = False


todos: dict[int, Todo] = {}
_ids = itertools.count(1)


def snapshot() -> list[Todo]:
    return list(todos.values())


def say(line: str) -> None:
    """What the app did, for whoever watches its terminal (the agent sees the results)."""
    print(line, flush=True)


todo_resource = app.resource("todos", snapshot, "Every todo", subscribable=True)


@attrs.frozen
class AddTodos:
    items: list[str]


@app.action("add", "Add one or more todos", timeout_ms=10_000)
async def add(input: AddTodos, ctx: ActionContext) -> list[Todo]:
    added = []
    for index, text in enumerate(input.items):
        if ctx.is_cancelled():
            break
        todo = Todo(next(_ids), text)
        todos[todo.id] = todo
        added.append(todo)
        say(f"added #{todo.id} {todo.text}")
        # Percent is clamped to 0..100 and never goes backwards.
        await ctx.progress(
            percent=(index + 1) * 100 // len(input.items),
            message=f"{index + 1}/{len(input.items)} added",
        )
    await todo_resource.publish(snapshot())
    return added


@attrs.frozen
class TodoId:
    id: int


@app.action("delete", "Delete a todo after asking the user", annotations={"destructive": True})
async def delete(input: TodoId, ctx: ActionContext) -> dict[str, bool]:
    todo = todos.get(input.id)
    if todo is None:
        raise ActionError.handler(f"No todo {input.id}", {"id": input.id})
    # False when the user declines, or when the agent cannot ask at all.
    if not await ctx.confirm(f'Delete "{todo.text}"? This cannot be undone.'):
        say(f"kept #{todo.id} {todo.text} (the user said no)")
        return {"deleted": False}
    del todos[input.id]
    say(f"deleted #{todo.id} {todo.text}")
    await ctx.log(LogEntry.info("deleted").meta({"id": input.id}))
    await todo_resource.publish(snapshot())
    return {"deleted": True}


@attrs.frozen
class RenameAnswer:
    text: str


@app.action("rename", "Rename a todo; the user types the new text")
async def rename(input: TodoId, ctx: ActionContext) -> Todo | None:
    todo = todos.get(input.id)
    if todo is None:
        raise ActionError.handler(f"No todo {input.id}", {"id": input.id})
    answer = await ctx.elicit_as(
        RenameAnswer, ElicitRequest.for_type(RenameAnswer, f'Rename "{todo.text}" to?')
    )
    if answer is None:  # declined or cancelled
        say(f"kept #{todo.id} {todo.text} (no new name)")
        return None
    todos[todo.id] = renamed = attrs.evolve(todo, text=answer.text)
    say(f"renamed #{todo.id} {todo.text} to {renamed.text}")
    await todo_resource.publish(snapshot())
    return renamed


async def wait_for_stdin_eof() -> None:
    async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stdin:
        while await stdin.receive_some():
            pass


async def main(publish: bool) -> None:
    async with app.listen(manifest_dir=DEFAULT_MANIFEST_DIR if publish else None) as host:
        print(f"url={host.url}", flush=True)
        await wait_for_stdin_eof()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publish", action="store_true", help="write the instance manifest")
    trio.run(main, parser.parse_args().publish)
