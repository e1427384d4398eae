"""Relay tools (SPEC §10 addendum): a schema with no behaviour here; the host runs the call.

A relay tool is declared to the model like any tool. When the model calls it, the call
suspends with a :class:`Request` of ``kind="tool_call"`` whose ``data.calls`` lists the
calls (``id``, ``name``, ``input``, ``arguments``); the host executes them and answers
with ``Answer.data.results = [{id, output, isError}]`` (or, for a single call, the
shorthand ``Answer.data.output`` / ``Answer.data.isError``). Relay is a use of the §10
suspension primitive, not a second mechanism: the loop gathers every relay call of one
assistant turn into one request (:func:`relay_request`) and turns the answer into each
call's tool result (:func:`relay_result`).

Everything read from an :class:`Answer` is checked: a result that is not of the pinned
shape becomes an error tool result saying what was wrong (the run goes on; the model
sees the error), never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from ._schema import JSONSchema
from ._tools import Tool, ToolContext, ToolResult, ToolSource, pending
from ._wire import Answer, Request

RELAY_KIND: Final = "tool_call"
"""The :attr:`Request.kind` of a relayed call."""

_PROMPT_ARGS: Final = 200
"""How much of a call's arguments the human-readable prompt shows (the data has all)."""

_COMPACT = json.JSONEncoder(separators=(",", ":"))


def relay_call(
    call_id: str, name: str, args: dict[str, Any], arguments: str | None
) -> dict[str, Any]:
    """One ``data.calls`` entry: the call's id, the tool's name, the parsed arguments and
    their raw JSON (*arguments*, or the compact JSON of *args* when there is no raw text)."""
    raw = _COMPACT.encode(args) if arguments is None else arguments
    return {"id": call_id, "name": name, "input": args, "arguments": raw}


def relay_request(calls: Sequence[dict[str, Any]]) -> Request:
    """The one :class:`Request` that relays *calls* (in call order) to the host."""
    shown = ", ".join(f"{c['name']}({_clip(c['arguments'])})" for c in calls)
    return Request(
        kind=RELAY_KIND, prompt=f"Relayed to the caller: {shown}", data={"calls": list(calls)}
    )


def _clip(text: str) -> str:
    return text if len(text) <= _PROMPT_ARGS else text[:_PROMPT_ARGS] + "..."


def relay_calls(request: Request) -> list[dict[str, Any]]:
    """The ``data.calls`` of a relay *request* (entries that are not objects left out)."""
    calls = (request.data or {}).get("calls")
    if not isinstance(calls, list):
        return []
    return [c for c in calls if isinstance(c, dict)]


def relay_result(request: Request, answer: Answer | None, call_id: str) -> ToolResult:
    """The tool result of the relayed call *call_id*, from the host's *answer* to *request*.

    - ``answer.ok`` false (or no answer): an error result, the call was not run;
    - ``answer.data.results``: the entry whose ``id`` is *call_id*; none is an error
      result (an unanswered call must still get its tool result);
    - otherwise the single-call shorthand ``answer.data.output`` / ``isError``, accepted
      only when *request* relays exactly one call.

    ``output`` must be a string and ``isError`` a boolean (absent means ``false``).
    """
    names = {c.get("id"): c.get("name") for c in relay_calls(request)}
    name = names.get(call_id) or "the tool"
    if answer is None or not answer.ok:
        why = f" ({answer.reason})" if answer is not None and answer.reason else ""
        return ToolResult.error(f"relay declined{why}: the caller did not run {name}")
    data = answer.data or {}
    if "results" in data:
        results = data["results"]
        if not isinstance(results, list):
            kind = type(results).__name__
            return ToolResult.error(f"relay: Answer.data.results must be a list, not {kind}")
        for i, entry in enumerate(results):
            if not isinstance(entry, dict):
                kind = type(entry).__name__
                return ToolResult.error(
                    f"relay: Answer.data.results[{i}] is a {kind}, not an object"
                )
            if entry.get("id") == call_id:
                return _checked(entry, f"Answer.data.results[{i}]")
        return ToolResult.error(f"relay: the caller gave no result for call {call_id!r} ({name})")
    if len(names) != 1:
        return ToolResult.error(
            f"relay: this request relayed {len(names)} calls; answer them with "
            "Answer.data.results (the output shorthand is for a single call)"
        )
    if "output" not in data:
        return ToolResult.error(f"relay: the caller gave no result for call {call_id!r} ({name})")
    return _checked(data, "Answer.data")


def _checked(entry: dict[str, Any], where: str) -> ToolResult:
    output, is_error = entry.get("output"), entry.get("isError", False)
    if not isinstance(output, str):
        return ToolResult.error(
            f"relay: {where}.output must be a string, not {type(output).__name__}"
        )
    if is_error is not True and is_error is not False:
        kind = type(is_error).__name__
        return ToolResult.error(f"relay: {where}.isError must be true or false, not {kind}")
    return ToolResult(output, is_error)


def relay_tool(name: str, description: str, schema: JSONSchema) -> Tool:
    """A tool the model can call but the *host* runs (SPEC §10 relay addendum).

    It is declared by the adapters like any tool (``source=ToolSource.RELAY``). Called,
    it suspends with ``Request(kind="tool_call", data={"calls": [{id, name, input,
    arguments}]})``; in the loop, every relay call of one assistant turn rides one
    request, in call order, and the host's ``Answer.data.results`` (or the single-call
    ``output``/``isError`` shorthand) becomes each call's tool result. Nothing runs in
    toolnexus_trio. The toolkit refuses a relay tool named like a builtin, even with the
    builtins off.
    """

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        # Outside the loop (Tool.call, a served MCP call) the tool is its own one-call
        # relay; in the loop, the loop rebuilds the turn's request from the raw calls.
        request = relay_request([relay_call(ctx.call_id or "", name, args, None)])
        if ctx.answer is None:
            return pending(request)
        return relay_result(request, ctx.answer, ctx.call_id or "")

    return Tool(
        name=name,
        description=description,
        input_schema=schema,
        source=ToolSource.RELAY,
        execute=execute,
    )
