"""The pure builtins of SPEC §4A: ``question`` (a §10 suspension) and ``todowrite``.

The other eight builtins (shell, files, web) come later; :class:`BuiltinsConfig`
already has the SPEC's toggle semantics for all ten names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._tools import Tool, ToolContext, ToolResult, ToolSource, output_text, pending
from ._wire import Request

BUILTIN_ORDER = (
    "bash",
    "read",
    "write",
    "edit",
    "grep",
    "glob",
    "webfetch",
    "question",
    "apply_patch",
    "todowrite",
)
"""The SPEC's fixed builtin order (only ``question`` and ``todowrite`` ship today)."""


@attrs.frozen
class BuiltinsConfig:
    """Which builtins are on (SPEC §4A).

    ``BuiltinsConfig()`` turns every builtin on; ``BuiltinsConfig.off()`` turns the
    whole source off; ``BuiltinsConfig(tools={"question": False})`` drops one tool on the
    all-on baseline (``True`` keeps a tool on; it never makes an allow-list; unknown
    names are ignored). A whole-source off short-circuits the map.
    """

    enabled: bool = True
    tools: Mapping[str, bool] = attrs.field(factory=dict)

    @classmethod
    def off(cls) -> BuiltinsConfig:
        """No builtins at all."""
        return cls(enabled=False)

    def is_on(self, name: str) -> bool:
        """Whether builtin *name* is enabled."""
        return self.enabled and self.tools.get(name, True) is not False


# Both input schemas are byte-identical to the SPEC's reference, which every released
# port shares (key order included); tests/fixtures/builtin_schemas.json pins them.
_question_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "description": "Questions to ask",
            "items": {
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "header": {"type": "string"},
                    "options": {"type": "array", "items": {"type": "string"}},
                    "multiple": {"type": "boolean"},
                },
                "required": ["question"],
            },
        }
    },
    "required": ["questions"],
    "additionalProperties": False,
}

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


def render_questions(questions: list[dict[str, Any]]) -> str:
    """Each question's text, with ``" (options: a, b)"`` when it has options, one per line."""
    lines = []
    for q in questions:
        text = str(q.get("question", ""))
        options = q.get("options") or []
        if options:
            text += " (options: " + ", ".join(str(o) for o in options) + ")"
        lines.append(text)
    return "\n".join(lines)


async def _question(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.answer is not None:
        return ToolResult.ok(output_text(ctx.answer.data or {}))
    questions = list(args["questions"])
    return pending(
        Request(kind="question", prompt=render_questions(questions), data={"questions": questions})
    )


async def _todowrite(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    todos = list(args["todos"])
    lines = [f"[{'x' if t['completed'] else ' '}] {t['text']}" for t in todos]
    return ToolResult.ok("\n".join(lines) if lines else "(no todos)", {"todos": todos})


_question_tool = Tool(
    name="question",
    description=(
        "Ask the user one or more questions and wait for the answers. Use it when you "
        "need a decision or information only the user has."
    ),
    input_schema=_question_schema,
    source=ToolSource.BUILTIN,
    execute=_question,
)

_todowrite_tool = Tool(
    name="todowrite",
    description="Replace the session's todo list with the given todos and show it.",
    input_schema=_todowrite_schema,
    source=ToolSource.BUILTIN,
    execute=_todowrite,
)

_AVAILABLE = {"question": _question_tool, "todowrite": _todowrite_tool}


def builtin_tools(config: BuiltinsConfig) -> list[Tool]:
    """The enabled builtins, in the SPEC's order."""
    if not config.enabled:
        return []
    return [_AVAILABLE[n] for n in BUILTIN_ORDER if n in _AVAILABLE and config.is_on(n)]
