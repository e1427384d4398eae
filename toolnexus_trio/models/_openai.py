"""The OpenAI chat-completions wire (``style="openai"``), SPEC §8.

``POST {base_url}/chat/completions`` with ``Authorization: Bearer <key>``; the transcript
is already OpenAI-shaped, so it goes out as it is. Streaming asks for
``stream_options.include_usage`` and joins tool-call fragments by their ``index``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._toolkit import Toolkit
from ..loop._results import GenerateError, InProcessResponse, Message
from ..loop._turns import TranslateCall, _usage, encode_arguments
from ._parts import ToolParts, openai_messages
from ._shape import (
    Parsed,
    event_json,
    mapping,
    provider_error,
    string,
    text_of,
    tool_call,
    usage_counts,
)
from ._sse import SSEEvent


def endpoint(base_url: str) -> str:
    """``{base_url}/chat/completions``."""
    return base_url.rstrip("/") + "/chat/completions"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` (nothing without a key)."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def tools_for(toolkit: Toolkit | None) -> list[dict[str, Any]]:
    """``toolkit.to_openai()``."""
    return toolkit.to_openai() if toolkit is not None else []


def body(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None,
    stream: bool,
    tool_choice: Any = "auto",
    tool_parts: ToolParts | None = None,
    on_unsupported_part: str = "text",
    max_part_bytes: int | None = None,
) -> dict[str, Any]:
    """The request body; ``tools`` and ``tool_choice`` are left out when there are no tools.

    Content parts become OpenAI blocks (:mod:`._parts`); tool-derived ones go in one
    synthetic user message after the tool messages, on the wire only."""
    messages = openai_messages(
        _plain(messages),
        tool_parts,
        on_unsupported=on_unsupported_part,
        max_part_bytes=max_part_bytes,
    )
    out: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        out["tools"] = tools
        if tool_choice is not None:
            out["tool_choice"] = tool_choice
    if max_tokens:
        out["max_tokens"] = max_tokens
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def response_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    """Native typed output: OpenAI's ``response_format`` (already in its shape)."""
    return {"response_format": dict(fmt)}


def translate_body(call: TranslateCall) -> dict[str, Any]:
    """§11: the caller's messages, with ``system`` overriding theirs and object
    ``arguments`` re-encoded as the JSON string the wire wants."""
    messages = [_string_arguments(m) for m in call.messages]
    if call.system is not None:
        messages = [m for m in messages if m.get("role") not in ("system", "developer")]
        messages.insert(0, {"role": "system", "content": call.system})
    return body(
        call.model,
        messages,
        call.tools,
        max_tokens=call.max_tokens or None,
        stream=False,
        tool_choice=call.tool_choice,
    )


def parse(payload: object) -> Parsed:
    """A ``chat.completion`` payload."""
    data = mapping(payload, "the chat completion")
    error = provider_error(data)
    if error is not None and "choices" not in data:
        raise GenerateError(f"the provider answered with an error: {error}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise GenerateError("the chat completion has no choices")
    choice = mapping(choices[0], "choices[0]")
    message = mapping(choice.get("message"), "choices[0].message")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise GenerateError("choices[0].message.tool_calls is not a list")
    calls = []
    for i, item in enumerate(raw_calls):
        tc = mapping(item, f"tool_calls[{i}]")
        function = mapping(tc.get("function"), f"tool_calls[{i}].function")
        calls.append(
            tool_call(tc.get("id"), function.get("name"), function.get("arguments"), f"tc[{i}]")
        )
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, Mapping):
        raise GenerateError("the chat completion's usage is not an object")
    response = InProcessResponse(text_of(message.get("content")), tuple(calls), usage)
    reason = choice.get("finish_reason")
    return Parsed(response, _counts(usage), reason if isinstance(reason, str) else None, data)


class StreamAssembler:
    """Builds one answer from ``chat.completion.chunk`` events; ``feed`` gives text deltas."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.done = False
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage: Mapping[str, Any] | None = None
        self._reason: str | None = None
        # (index, call id, tool name, piece) of the tool-call arguments fed since the
        # reader last took them (the typed events and streamed typed output read them).
        self.fragments: list[tuple[int, str, str, str]] = []

    def feed(self, event: SSEEvent) -> str:
        """Take one event; return its text delta (``""`` when none)."""
        if self.done:
            return ""
        if event.data == "[DONE]":
            self.done = True
            return ""
        chunk = event_json(event, "a stream chunk")
        error = provider_error(chunk)
        if error is not None:
            raise GenerateError(f"the provider sent an error mid-stream: {error}")
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self._usage = usage
        delta_text = ""
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise GenerateError("a stream chunk's choices is not a list")
        for raw_choice in choices:
            choice = mapping(raw_choice, "a stream choice")
            if choice.get("index", 0) != 0:
                continue
            delta = mapping(choice.get("delta") or {}, "a stream delta")
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                delta_text += content
            for fragment in delta.get("tool_calls") or []:
                self._fragment(mapping(fragment, "a tool-call fragment"))
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self._reason = reason
        return delta_text

    def _fragment(self, fragment: Mapping[str, Any]) -> None:
        index = fragment.get("index", len(self._calls))
        if not isinstance(index, int) or isinstance(index, bool):
            raise GenerateError(f"a tool-call fragment has index {index!r}")
        slot = self._calls.setdefault(
            index, {"id": "", "name": "", "arguments": [], "streamed": None}
        )
        if fragment.get("id"):
            slot["id"] = string(fragment["id"], "a tool-call fragment id")
        function = mapping(fragment.get("function") or {}, "a tool-call fragment function")
        name = function.get("name")
        if name:
            slot["name"] += string(name, "a tool-call fragment name")
        arguments = function.get("arguments")
        if arguments:
            piece = string(arguments, "a tool-call fragment's arguments")
            slot["arguments"].append(piece)
            if slot["streamed"] is None:  # decided once: a call's id names all or none
                slot["streamed"] = bool(slot["id"] and slot["name"])
            self.fragments.append(
                (index, slot["id"] if slot["streamed"] else "", slot["name"], piece)
            )

    def result(self) -> Parsed:
        """The assembled answer; a stream that ended before ``[DONE]`` is an error."""
        if not self.done:
            raise GenerateError("the model's stream ended before [DONE] (truncated)")
        text = "".join(self._text)
        calls = [
            tool_call(slot["id"], slot["name"], "".join(slot["arguments"]), f"tool call {i}")
            for i, slot in sorted(self._calls.items())
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ]  # fmt: skip
        raw = {
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._reason}],
            "usage": dict(self._usage) if self._usage is not None else None,
        }
        response = InProcessResponse(text, tuple(calls), self._usage)
        return Parsed(response, _counts(self._usage), self._reason, raw)


_PROVIDER_STATE = ("responses_output", "gemini_parts")
"""Keys another wire keeps on an assistant message (a fallback's answer, an earlier
transcript): never sent on this one."""


def _plain(messages: Sequence[Message]) -> Sequence[Message]:
    """*messages*, without other wires' provider state (the same list when none has it)."""
    if not any(k in m for m in messages for k in _PROVIDER_STATE):
        return messages
    return [
        {k: v for k, v in m.items() if k not in _PROVIDER_STATE}
        if any(k in m for k in _PROVIDER_STATE)
        else m
        for m in messages
    ]


def _counts(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """Normalised usage, with ``prompt_tokens_details.cached_tokens`` as cache reads."""
    counts = _usage(usage)
    details = usage.get("prompt_tokens_details") if usage else None
    if isinstance(details, Mapping) and details.get("cached_tokens"):
        cached = usage_counts(0, 0, cache_read=details["cached_tokens"])
        counts.update(cached)
        counts.update(_usage(usage))
    return counts


def _string_arguments(message: Message) -> Message:
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or all(
        isinstance(c, Mapping)
        and isinstance(c.get("function"), Mapping)
        and isinstance(c["function"].get("arguments"), str)
        for c in calls
    ):
        return message
    fixed = []
    for c in calls:
        if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping):
            function = dict(c["function"])
            if not isinstance(function.get("arguments"), str):
                function["arguments"] = encode_arguments(function.get("arguments") or {})
            c = {**c, "function": function}
        fixed.append(c)
    return {**message, "tool_calls": fixed}
