"""The Anthropic messages wire (``style="anthropic"``), SPEC §8 and §11.

``POST {base_url}/messages`` (``/v1`` added when the URL does not end in it) with
``x-api-key`` and ``anthropic-version: 2023-06-01``. The loop's transcript is
OpenAI-shaped; it is translated at send time by the §11 inbound rules: assistant
``tool_calls`` become ``tool_use`` blocks (arguments parsed back into objects), tool
messages become ``tool_result`` blocks with consecutive ones merged into one user
turn, system messages are hoisted into ``system``. A message whose content is already
a list of Anthropic blocks (``tool_use``, ``tool_result``, ``image``, ...) passes
through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._toolkit import Toolkit
from ..loop._results import GenerateError, InProcessResponse, InProcessToolCall, Message
from ..loop._turns import TranslateCall, _usage
from ._parts import ToolParts, has_parts, tool_blocks, user_blocks
from ._shape import (
    Parsed,
    arguments_object,
    event_json,
    function_of,
    json_schema_of,
    mapping,
    provider_error,
    string,
    text_of,
    tool_call,
    usage_counts,
)
from ._sse import SSEEvent

VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_NATIVE_BLOCKS = frozenset(
    {"tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"}
)


def endpoint(base_url: str) -> str:
    """``{base_url}/messages``, with ``/v1`` appended to a base URL lacking it."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/messages"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``x-api-key`` (when there is a key) and ``anthropic-version``."""
    headers = {"anthropic-version": VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def tools_for(toolkit: Toolkit | None) -> list[dict[str, Any]]:
    """``toolkit.to_anthropic()``."""
    return toolkit.to_anthropic() if toolkit is not None else []


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """OpenAI ``{"type": "function", ...}`` tools to Anthropic ones; others kept as they are."""
    out: list[Mapping[str, Any]] = []
    for t in tools:
        function = function_of(t)
        if function is not None:
            out.append(
                {
                    "name": function.get("name", ""),
                    "description": function.get("description", ""),
                    "input_schema": function.get("parameters") or {"type": "object"},
                }
            )
        else:
            out.append(t)
    return out


def convert_tool_choice(choice: Any) -> Any:
    """OpenAI ``tool_choice`` to Anthropic's (``required`` → ``any``, a function → ``tool``)."""
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice in ("required", "any"):
        return {"type": "any"}
    function = function_of(choice) if isinstance(choice, Mapping) else None
    if function is not None:
        return {"type": "tool", "name": function.get("name", "")}
    return choice


def convert_messages(
    messages: Sequence[Message],
    system: str | None = None,
    tool_parts: ToolParts | None = None,
    on_unsupported_part: str = "text",
    max_part_bytes: int | None = None,
) -> tuple[str | None, list[dict[str, Any]]]:
    """OpenAI-shaped messages to ``(system, messages)`` of the Anthropic wire (§11).

    Content parts become Anthropic blocks (:mod:`._parts`); a tool's parts go inside
    its ``tool_result`` after the text."""
    systems: list[str] = []
    out: list[dict[str, Any]] = []
    merging = False  # the last message out is a user turn made of tool results
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if role in ("system", "developer"):
            systems.append(text_of(content))
            continue
        if role == "tool":
            call_id = m.get("tool_call_id") or ""
            parts = tool_parts.get(call_id) if tool_parts else None
            result: Any = text_of(content)
            if parts:
                result = [
                    {"type": "text", "text": result},
                    *tool_blocks(parts, "anthropic", on_unsupported_part, max_part_bytes),
                ]
            block = {"type": "tool_result", "tool_use_id": call_id, "content": result}
            if merging:
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
                merging = True
            continue
        merging = False
        if has_parts(content):
            assert isinstance(content, list)
            blocks = user_blocks(content, "anthropic", max_part_bytes)
            out.append({"role": role, "content": blocks})
        elif _native(content):
            out.append({"role": role, "content": content})
        elif role == "assistant":
            out.append({"role": "assistant", "content": _assistant_blocks(m)})
        else:
            out.append({"role": "user", "content": text_of(content)})
    hoisted = "\n\n".join(s for s in systems if s) or None
    return (system if system is not None else hoisted), out


def body(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None,
    stream: bool,
    system: str | None = None,
    tool_choice: Any = None,
    tool_parts: ToolParts | None = None,
    on_unsupported_part: str = "text",
    max_part_bytes: int | None = None,
    prompt_cache: bool = False,
) -> dict[str, Any]:
    """The request body; ``tools`` is left out when there are none.

    With *prompt_cache*, ``cache_control`` breakpoints go on the system prompt, the
    last tool (covering them all) and the conversation: its last message (written for
    the next call) and the last one before the newest assistant turn (what the
    previous call wrote, read now). Four at most, as the API allows.
    """
    hoisted, converted = convert_messages(
        messages, system, tool_parts, on_unsupported_part, max_part_bytes
    )
    out: dict[str, Any] = {"model": model, "max_tokens": max_tokens or DEFAULT_MAX_TOKENS}
    if hoisted:
        out["system"] = [_cached_text(hoisted)] if prompt_cache else hoisted
    out["messages"] = converted
    if tools:
        out["tools"] = convert_tools(tools)
        if prompt_cache:
            out["tools"][-1] = {**out["tools"][-1], "cache_control": _EPHEMERAL}
        if tool_choice is not None:
            out["tool_choice"] = convert_tool_choice(tool_choice)
    if prompt_cache and converted:
        _mark_prefix(converted)
    if stream:
        out["stream"] = True
    return out


def response_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    """Native typed output: OpenAI's ``response_format`` as Anthropic's
    ``output_config.format`` (``{"type": "json_schema", "schema": ...}``; the Messages
    API has no ``name`` or ``strict`` there: its JSON outputs are always constrained)."""
    schema = json_schema_of(fmt, "the Anthropic Messages API")["schema"]
    return {"output_config": {"format": {"type": "json_schema", "schema": dict(schema)}}}


_EPHEMERAL = {"type": "ephemeral"}


def _cached_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": _EPHEMERAL}


def _mark_prefix(messages: list[dict[str, Any]]) -> None:
    """Breakpoints on the last message and the last one before the newest assistant
    turn. Each marked message is a copy (the transcript is never changed)."""
    marks = {len(messages) - 1}
    for i in range(len(messages) - 1, 0, -1):
        if messages[i].get("role") == "assistant":
            marks.add(i - 1)
            break
    for i in marks:
        content = messages[i].get("content")
        if isinstance(content, str):
            if content:
                messages[i] = {**messages[i], "content": [_cached_text(content)]}
        elif isinstance(content, list) and content and isinstance(content[-1], Mapping):
            blocks = list(content)
            blocks[-1] = {**blocks[-1], "cache_control": _EPHEMERAL}
            messages[i] = {**messages[i], "content": blocks}


def translate_body(call: TranslateCall) -> dict[str, Any]:
    """§11: the caller's OpenAI messages and tools, translated."""
    return body(
        call.model,
        call.messages,
        call.tools,
        max_tokens=call.max_tokens or None,
        stream=False,
        system=call.system,
        tool_choice=call.tool_choice,
    )


def parse(payload: object) -> Parsed:
    """A ``message`` payload."""
    data = mapping(payload, "the message")
    error = provider_error(data)
    if error is not None or data.get("type") == "error":
        raise GenerateError(f"the provider answered with an error: {error}")
    content = data.get("content")
    if not isinstance(content, list):
        raise GenerateError("the message's content is not a list of blocks")
    text: list[str] = []
    calls: list[InProcessToolCall] = []
    for i, item in enumerate(content):
        block = mapping(item, f"content[{i}]")
        kind = block.get("type")
        if kind == "text":
            text.append(string(block.get("text"), f"content[{i}].text"))
        elif kind == "tool_use":
            calls.append(
                tool_call(block.get("id"), block.get("name"), block.get("input"), f"content[{i}]")
            )
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, Mapping):
        raise GenerateError("the message's usage is not an object")
    mapped = _mapped_usage(usage)
    response = InProcessResponse("".join(text), tuple(calls), mapped)
    reason = data.get("stop_reason")
    return Parsed(response, _counts(mapped), reason if isinstance(reason, str) else None, data)


class StreamAssembler:
    """Builds one answer from ``message_*`` / ``content_block_*`` events."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.done = False
        self._blocks: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] = {}
        self._reason: str | None = None
        # (index, call id, tool name, piece) of the tool-call arguments, and the
        # reasoning pieces, fed since the reader last took them (the typed events and
        # streamed typed output read them as they come).
        self.fragments: list[tuple[int, str, str, str]] = []
        self.thoughts: list[str] = []

    def feed(self, event: SSEEvent) -> str:
        """Take one event; return its text delta (``""`` when none)."""
        if self.done:
            return ""
        data = event_json(event, "a stream event", f"a {event.event} event")
        kind = data.get("type", event.event)
        if kind == "error":
            raise GenerateError(f"the provider sent an error mid-stream: {provider_error(data)}")
        if kind == "message_start":
            message = mapping(data.get("message") or {}, "message_start.message")
            self._take_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = mapping(data.get("content_block"), "content_block_start.content_block")
            slot: dict[str, Any] = {
                "type": block.get("type"),
                "id": block.get("id"),
                "name": block.get("name"),
                "parts": [],
            }
            self._blocks[self._index(data)] = slot
            if block.get("type") == "text" and block.get("text"):
                return self._add(slot, string(block["text"], "a text block"))
        elif kind == "content_block_delta":
            found = self._blocks.get(self._index(data))
            if found is None:
                raise GenerateError("a content_block_delta for a block that never started")
            delta = mapping(data.get("delta"), "content_block_delta.delta")
            if delta.get("type") == "text_delta":
                return self._add(found, string(delta.get("text"), "a text_delta"))
            if delta.get("type") == "thinking_delta":
                thought = string(delta.get("thinking"), "a thinking_delta")
                if thought:
                    self.thoughts.append(thought)
            if delta.get("type") == "input_json_delta":
                piece = string(delta.get("partial_json"), "an input_json_delta")
                found["parts"].append(piece)
                call_id = found.get("id")
                self.fragments.append(
                    (
                        self._index(data),
                        call_id if isinstance(call_id, str) else "",
                        str(found.get("name") or ""),
                        piece,
                    )
                )
        elif kind == "message_delta":
            delta = mapping(data.get("delta") or {}, "message_delta.delta")
            if isinstance(delta.get("stop_reason"), str):
                self._reason = delta["stop_reason"]
            self._take_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        return ""

    def _add(self, slot: dict[str, Any], text: str) -> str:
        slot["parts"].append(text)
        return text

    def _index(self, data: Mapping[str, Any]) -> int:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise GenerateError(f"a content block event has index {index!r}")
        return index

    def _take_usage(self, usage: object) -> None:
        if isinstance(usage, Mapping):
            self._usage.update(usage)

    def result(self) -> Parsed:
        """The assembled answer; a stream that ended before ``message_stop`` is an error."""
        if not self.done:
            raise GenerateError("the model's stream ended before message_stop (truncated)")
        text: list[str] = []
        calls: list[InProcessToolCall] = []
        content: list[dict[str, Any]] = []
        for i, slot in sorted(self._blocks.items()):
            joined = "".join(slot["parts"])
            if slot["type"] == "text":
                text.append(joined)
                content.append({"type": "text", "text": joined})
            elif slot["type"] == "tool_use":
                call = tool_call(slot["id"], slot["name"], joined or "{}", f"content[{i}]")
                calls.append(call)
                content.append({"type": "tool_use", "id": call.id, "name": call.name,
                                "input": _loads_or_raw(joined)})  # fmt: skip
        mapped = _mapped_usage(self._usage)
        raw = {"type": "message", "role": "assistant", "model": self.model, "content": content,
               "stop_reason": self._reason, "usage": dict(self._usage)}  # fmt: skip
        response = InProcessResponse("".join(text), tuple(calls), mapped)
        return Parsed(response, _counts(mapped), self._reason, raw)


def _mapped_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Anthropic usage as prompt / completion tokens: ``input_tokens`` counts only the
    uncached part of the prompt, so the cache reads and writes are added back in (and
    kept as ``cache_read_tokens`` / ``cache_write_tokens``)."""
    if not usage:
        return None
    read = usage.get("cache_read_input_tokens")
    write = usage.get("cache_creation_input_tokens")
    if not read and not write:
        return {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
        }
    counts = usage_counts(usage.get("input_tokens"), usage.get("output_tokens"),
                          cache_read=read, cache_write=write)  # fmt: skip
    extra = counts.get("cache_read_tokens", 0) + counts.get("cache_write_tokens", 0)
    counts["prompt_tokens"] += extra
    counts["total_tokens"] += extra
    return counts


def _counts(mapped: dict[str, Any] | None) -> dict[str, int]:
    counts = _usage(mapped)
    if mapped is not None and len(mapped) > 2:  # the cache counts, checked already
        counts.update({k: v for k, v in mapped.items() if k.startswith("cache_")})
    return counts


def _native(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") in _NATIVE_BLOCKS for b in content
    )


def _assistant_blocks(message: Message) -> list[dict[str, Any]] | str:
    text = text_of(message.get("content"))
    calls = message.get("tool_calls") or []
    if not calls:
        return text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for c in calls:
        function = c.get("function") or {} if isinstance(c, Mapping) else {}
        blocks.append(
            {
                "type": "tool_use",
                "id": c.get("id", "") if isinstance(c, Mapping) else "",
                "name": function.get("name", ""),
                "input": arguments_object(function.get("arguments")),
            }
        )
    return blocks


def _loads_or_raw(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):
        return text
