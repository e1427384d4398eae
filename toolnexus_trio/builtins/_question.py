"""The ``question`` builtin (SPEC §4A): asking the human is a §10 suspension."""

from __future__ import annotations

import functools
from typing import Any

from .._tools import Tool, ToolContext, ToolResult, ToolSource, output_text, pending
from .._wire import Request

# The input schema is byte-identical to the SPEC's reference, which every released
# port shares (key order included); tests/fixtures/builtin_schemas.json pins it.
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


@functools.cache
def question_tool() -> Tool:
    """The one ``question`` tool of the process, made (its schema compiled) on first use,
    not when the package is imported."""
    return Tool(
        name="question",
        description=(
            "Ask the user one or more questions and wait for the answers. Use it when you "
            "need a decision or information only the user has."
        ),
        input_schema=_question_schema,
        source=ToolSource.BUILTIN,
        execute=_question,
    )
