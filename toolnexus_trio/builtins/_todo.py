"""The ``todowrite`` builtin (SPEC §4A): echoes the session's todo list back."""

from __future__ import annotations

import functools
from typing import Any

from .._tools import Tool, ToolContext, ToolResult, ToolSource

# The input schema is byte-identical to the SPEC's reference, which every released
# port shares (key order included); tests/fixtures/builtin_schemas.json pins it.
_todowrite_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The full todo list to store",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "text": {"type": "string"},
                    "completed": {"type": "boolean"},
                },
                "required": ["id", "text", "completed"],
            },
        }
    },
    "required": ["todos"],
    "additionalProperties": False,
}


async def _todowrite(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    todos = list(args["todos"])
    lines = [f"[{'x' if t['completed'] else ' '}] {t['text']}" for t in todos]
    return ToolResult.ok("\n".join(lines) if lines else "(no todos)", {"todos": todos})


@functools.cache
def todowrite_tool() -> Tool:
    """The one ``todowrite`` tool of the process, made (its schema compiled) on first
    use, not when the package is imported."""
    return Tool(
        name="todowrite",
        description="Replace the session's todo list with the given todos and show it.",
        input_schema=_todowrite_schema,
        source=ToolSource.BUILTIN,
        execute=_todowrite,
    )
