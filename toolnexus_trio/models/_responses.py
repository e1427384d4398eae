"""The OpenAI Responses wire (``style="responses"``), issue 38.

``POST {base_url}/responses`` with ``Authorization: Bearer <key>``. The loop's transcript
is OpenAI chat-shaped; it is translated at send time: user, system and developer
messages become input messages, an assistant's text an assistant message and its
``tool_calls`` ``function_call`` items, tool messages ``function_call_output`` items.

Reasoning items: an answer's output items are kept on the assistant message (key
``responses_output``) and, while its tool calls are still the ones the model made,
sent back verbatim on the next call (reasoning items with their ids and
``encrypted_content``, each before the ``function_call`` it led to), as the API
requires for a reasoning model's tool use.

A stream is read from its ``response.output_text.delta`` events and is whole at
``response.completed`` (or ``response.incomplete``), whose ``response`` is parsed as a
non-streamed answer; ``response.failed`` and ``error`` are errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._toolkit import Toolkit
from ..loop._results import GenerateError, InProcessResponse, InProcessToolCall, Message
from ..loop._turns import TranslateCall, encode_arguments
from ._openai import auth_headers as auth_headers
from ._parts import ToolParts, has_parts, tool_blocks, tool_heading, user_blocks
from ._shape import (
    Parsed,
    event_json,
    function_of,
    json_schema_of,
    mapping,
    note_call_names,
    provider_error,
    string,
    text_of,
    tool_call,
    usage_counts,
)
from ._sse import SSEEvent

TRANSCRIPT_KEY = "input"
KEPT = "responses_output"
"""The assistant-message key that keeps an answer's output items for the next call."""
_TERMINAL = frozenset({"response.completed", "response.incomplete"})


def endpoint(base_url: str) -> str:
    """``{base_url}/responses``."""
    return base_url.rstrip("/") + "/responses"


def tools_for(toolkit: Toolkit | None) -> list[dict[str, Any]]:
    """The toolkit's tools as Responses function tools."""
    return convert_tools(toolkit.to_openai()) if toolkit is not None else []


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat tools (``{"type": "function", "function": {...}}``) to Responses
    function tools (flat; ``strict`` false unless the tool asked for it); others kept."""
    out: list[dict[str, Any]] = []
    for t in tools:
        function = function_of(t)
        if function is not None:
            out.append(
                {
                    "type": "function",
                    "name": function.get("name", ""),
                    "description": function.get("description", ""),
                    "parameters": function.get("parameters") or {"type": "object"},
                    # The API's default is strict, which refuses most ordinary schemas.
                    "strict": bool(function.get("strict", False)),
                }
            )
        else:
            out.append(dict(t))
    return out


def convert_tool_choice(choice: Any) -> Any:
    """OpenAI chat ``tool_choice`` to the Responses one (a function: flat ``name``)."""
    function = function_of(choice) if isinstance(choice, Mapping) else None
    if function is not None:
        return {"type": "function", "name": function.get("name", "")}
    return choice


def convert_messages(
    messages: Sequence[Message],
    tool_parts: ToolParts | None = None,
    on_unsupported_part: str = "text",
    max_part_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """OpenAI chat messages to Responses input items.

    Content parts become input parts (:mod:`._parts`); a tool's parts go, as on the
    OpenAI wire, in one user message after the run of function outputs."""
    items: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    pending: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role != "tool" and pending:
            items.append({"role": "user", "content": pending})
            pending = []
        if role == "tool":
            call_id = m.get("tool_call_id") or ""
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": text_of(m.get("content")),
                }
            )
            parts = tool_parts.get(call_id) if tool_parts else None
            if parts:
                pending.append(tool_heading(names.get(call_id, ""), call_id, "responses"))
                pending += tool_blocks(parts, "responses", on_unsupported_part, max_part_bytes)
        elif role == "assistant":
            note_call_names(m, names)
            items += _assistant_items(m)
        else:
            content = m.get("content")
            if has_parts(content):
                assert isinstance(content, list)
                content = user_blocks(content, "responses", max_part_bytes)
            items.append({"role": role, "content": _content(content)})
    if pending:
        items.append({"role": "user", "content": pending})
    return items


def body(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None,
    stream: bool,
    instructions: str | None = None,
    tool_choice: Any = None,
    tool_parts: ToolParts | None = None,
    on_unsupported_part: str = "text",
    max_part_bytes: int | None = None,
) -> dict[str, Any]:
    """The request body; ``tools`` is left out when there are none."""
    items = convert_messages(messages, tool_parts, on_unsupported_part, max_part_bytes)
    out: dict[str, Any] = {"model": model, "input": items}
    if instructions is not None:
        out["instructions"] = instructions
    if tools:
        out["tools"] = convert_tools(tools)
        if tool_choice is not None:
            out["tool_choice"] = convert_tool_choice(tool_choice)
    if max_tokens:
        out["max_output_tokens"] = max_tokens
    if stream:
        out["stream"] = True
    return out


def response_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    """Native typed output: OpenAI's chat ``response_format`` as the Responses API's
    ``text.format`` (``{"type": "json_schema", "name", "schema", "strict"}``, flattened:
    the Responses API has no ``json_schema`` wrapper)."""
    spec = json_schema_of(fmt, "the style 'responses' (OpenAI Responses API)")
    out: dict[str, Any] = {
        "type": "json_schema",
        "name": spec.get("name"),
        "schema": dict(spec["schema"]),
    }
    if spec.get("strict") is not None:
        out["strict"] = bool(spec["strict"])
    return {"text": {"format": out}}


def translate_body(call: TranslateCall) -> dict[str, Any]:
    """§11: the caller's messages; ``system`` becomes ``instructions``, replacing theirs."""
    messages: Sequence[Message] = call.messages
    if call.system is not None:
        messages = [m for m in messages if m.get("role") not in ("system", "developer")]
    return body(
        call.model,
        messages,
        call.tools,
        max_tokens=call.max_tokens or None,
        stream=False,
        instructions=call.system,
        tool_choice=call.tool_choice,
    )


def parse(payload: object) -> Parsed:
    """A ``response`` object."""
    data = mapping(payload, "the response")
    status = data.get("status")
    error = provider_error(data) if data.get("error") is not None else None
    if error is not None or status == "failed":
        raise GenerateError(f"the provider answered with an error: {error or status}")
    output = data.get("output")
    if not isinstance(output, list):
        raise GenerateError("the response's output is not a list of items")
    text: list[str] = []
    calls: list[InProcessToolCall] = []
    kept: list[dict[str, Any]] = []
    for i, raw in enumerate(output):
        item = mapping(raw, f"output[{i}]")
        kind = item.get("type")
        if kind == "message":
            for j, part in enumerate(item.get("content") or ()):
                block = mapping(part, f"output[{i}].content[{j}]")
                if block.get("type") == "output_text":
                    text.append(string(block.get("text"), f"output[{i}].content[{j}].text"))
                elif block.get("type") == "refusal":
                    text.append(string(block.get("refusal"), f"output[{i}].content[{j}]"))
        elif kind == "function_call":
            calls.append(
                tool_call(item.get("call_id"), item.get("name"), item.get("arguments"), f"out[{i}]")
            )
        if kind in ("reasoning", "function_call", "message"):
            kept.append(dict(item))
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, Mapping):
        raise GenerateError("the response's usage is not an object")
    counts = _usage(usage)
    response = InProcessResponse("".join(text), tuple(calls), counts)
    has_reasoning = any(k.get("type") == "reasoning" for k in kept)
    extra = {KEPT: kept} if has_reasoning else None
    return Parsed(response, counts, _reason(data), data, extra)


class StreamAssembler:
    """Builds one answer from Responses stream events; ``feed`` gives text deltas."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.done = False
        self._final: Mapping[str, Any] | None = None
        self._calls: dict[str, tuple[int, str, str]] = {}  # item id: (index, call id, name)
        # (index, call id, tool name, piece) of the tool-call arguments, and the
        # reasoning summary pieces, fed since the reader last took them.
        self.fragments: list[tuple[int, str, str, str]] = []
        self.thoughts: list[str] = []

    def feed(self, event: SSEEvent) -> str:
        """Take one event; return its text delta (``""`` when none)."""
        if self.done:
            return ""
        data = event_json(event, "a stream event", f"a {event.event} event")
        kind = data.get("type", event.event)
        if kind == "response.output_text.delta":
            return string(data.get("delta"), "an output_text delta")
        if kind == "response.output_item.added":
            item = data.get("item")
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                ids = (item.get("id"), item.get("call_id"), item.get("name"))
                if all(isinstance(x, str) and x for x in ids):
                    self._calls[str(ids[0])] = (len(self._calls), str(ids[1]), str(ids[2]))
        elif kind == "response.reasoning_summary_text.delta":
            thought = data.get("delta")
            if isinstance(thought, str) and thought:
                self.thoughts.append(thought)
        elif kind == "response.function_call_arguments.delta":
            known = self._calls.get(str(data.get("item_id")))
            piece = data.get("delta")
            if known is not None and isinstance(piece, str) and piece:
                self.fragments.append((*known, piece))
        if kind in _TERMINAL:
            self._final = mapping(data.get("response"), f"{kind}.response")
            self.done = True
        elif kind == "response.failed":
            response = data.get("response")
            detail = provider_error(response) if isinstance(response, Mapping) else None
            raise GenerateError(f"the provider sent an error mid-stream: {detail or kind}")
        elif kind == "error":
            detail = data.get("message") or provider_error(data) or "error"
            raise GenerateError(f"the provider sent an error mid-stream: {detail}")
        return ""

    def result(self) -> Parsed:
        """The answer of the terminal event; a stream that ended before it is an error."""
        if not self.done or self._final is None:
            raise GenerateError("the model's stream ended before response.completed (truncated)")
        return parse(self._final)


def _usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    if not usage:
        return usage_counts(0, 0)
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    return usage_counts(
        usage.get("input_tokens"),
        usage.get("output_tokens"),
        total=usage.get("total_tokens"),
        cache_read=details.get("cached_tokens"),
        cache_write=details.get("cache_write_tokens"),
    )


def _reason(data: Mapping[str, Any]) -> str | None:
    if data.get("status") != "incomplete":
        return None
    details = data.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    if reason == "max_output_tokens":
        return "max_tokens"
    return reason if isinstance(reason, str) else None


def _content(content: object) -> Any:
    """A message's content: a string, or its parts as input parts."""
    if isinstance(content, list):
        parts: list[Any] = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append({"type": "input_text", "text": part.get("text", "")})
            elif isinstance(part, Mapping) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, Mapping) else image
                parts.append({"type": "input_image", "image_url": url})
            else:
                parts.append(part)
        return parts
    return text_of(content)


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
    kept = message.get(KEPT)
    items: list[dict[str, Any]] = []
    text = text_of(message.get("content"))
    if isinstance(kept, list) and [
        k.get("call_id")
        for k in kept
        if isinstance(k, Mapping) and k.get("type") == "function_call"
    ] == [c.get("id") for c in calls]:
        # The calls are still the model's own: its items go back as they came, in order
        # (each reasoning item before the item it led to).
        items = [dict(k) for k in kept if isinstance(k, Mapping)]
        if text and not any(k.get("type") == "message" for k in items):
            items.insert(0, {"role": "assistant", "content": text})
        return items
    if text:
        items.append({"role": "assistant", "content": text})
    for c in calls:
        function = c.get("function")
        function = function if isinstance(function, Mapping) else {}
        items.append(
            {
                "type": "function_call",
                "call_id": c.get("id") or "",
                "name": function.get("name", ""),
                "arguments": encode_arguments(function.get("arguments") or {}),
            }
        )
    return items
