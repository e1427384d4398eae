"""The Gemini wire (``style="gemini"``), issue 38.

``POST {base_url}/models/{model}:generateContent``, or
``:streamGenerateContent?alt=sse`` to stream, with ``x-goog-api-key``. The model is
part of the URL, so it is not in the body. The loop's OpenAI-shaped transcript is
translated at send time: system messages into ``systemInstruction``, user turns into
``user`` contents, an assistant's text and ``tool_calls`` into a ``model`` content of
``text`` and ``functionCall`` parts, tool messages into ``functionResponse`` parts
(consecutive ones in one ``user`` content; the function's name is found from its call).
Tool parameters go as ``parametersJsonSchema`` (full JSON Schema).

The model's own parts (thought signatures included) are kept on the assistant
message (key ``gemini_parts``) and sent back verbatim while its tool calls are still
the model's, as thinking models require. A stream is a series of
``GenerateContentResponse`` chunks; it is whole at the chunk with a ``finishReason``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from .._toolkit import Toolkit
from ..loop._results import GenerateError, InProcessResponse, InProcessToolCall, Message
from ..loop._turns import TranslateCall
from ._parts import ToolParts, has_parts, tool_blocks, tool_heading, user_blocks
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

TRANSCRIPT_KEY = "contents"
KEPT = "gemini_parts"
"""The assistant-message key that keeps the model's own parts for the next call."""
_FILTERED = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)


def endpoint(base_url: str, model: str, stream: bool) -> str:
    """``{base_url}/models/{model}:generateContent`` (``:streamGenerateContent?alt=sse``)."""
    name = model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"
    url = base_url.rstrip("/") + "/" + quote(name, safe="/-_.")
    return url + (":streamGenerateContent?alt=sse" if stream else ":generateContent")


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``x-goog-api-key`` (nothing without a key)."""
    return {"x-goog-api-key": api_key} if api_key else {}


def tools_for(toolkit: Toolkit | None) -> list[dict[str, Any]]:
    """The toolkit's tools, OpenAI-shaped: :func:`body` declares them Gemini's way."""
    return toolkit.to_openai() if toolkit is not None else []


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tools to one Gemini ``functionDeclarations`` tool; other tools kept as they are."""
    declarations: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for t in tools:
        function = function_of(t)
        if function is not None:
            declaration: dict[str, Any] = {
                "name": function.get("name", ""),
                "description": function.get("description", ""),
            }
            parameters = function.get("parameters")
            if parameters:
                declaration["parametersJsonSchema"] = parameters
            declarations.append(declaration)
        else:
            others.append(dict(t))
    return ([{"functionDeclarations": declarations}] if declarations else []) + others


def convert_tool_choice(choice: Any) -> dict[str, Any] | None:
    """OpenAI ``tool_choice`` to Gemini's ``toolConfig``."""
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY", "any": "ANY"}
    if isinstance(choice, str) and choice in modes:
        return {"functionCallingConfig": {"mode": modes[choice]}}
    function = function_of(choice) if isinstance(choice, Mapping) else None
    if function is not None:
        config = {"mode": "ANY", "allowedFunctionNames": [function.get("name", "")]}
        return {"functionCallingConfig": config}
    return None


def convert_messages(
    messages: Sequence[Message],
    system: str | None = None,
    tool_parts: ToolParts | None = None,
    on_unsupported_part: str = "text",
    max_part_bytes: int | None = None,
) -> tuple[str | None, list[dict[str, Any]]]:
    """OpenAI-shaped messages to ``(system, contents)`` of the Gemini wire.

    Content parts become ``inlineData`` / ``fileData`` parts (:mod:`._parts`); a
    tool's parts follow its ``functionResponse`` in the same user turn."""
    systems: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> function name, for the functionResponse
    own_ids: set[str] = set()  # call ids the model gave itself: its responses name them
    merging = False
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            systems.append(text_of(m.get("content")))
            continue
        if role == "tool":
            call_id = m.get("tool_call_id") or ""
            answer: dict[str, Any] = {
                "name": names.get(call_id, ""),
                "response": {"result": text_of(m.get("content"))},
            }
            if call_id in own_ids:
                answer["id"] = call_id
            part = {"functionResponse": answer}
            if not merging:
                contents.append({"role": "user", "parts": []})
                merging = True
            contents[-1]["parts"].append(part)
            media = tool_parts.get(call_id) if tool_parts else None
            if media:
                contents[-1]["parts"] += [
                    tool_heading(names.get(call_id, ""), call_id, "gemini"),
                    *tool_blocks(media, "gemini", on_unsupported_part, max_part_bytes),
                ]
            continue
        merging = False
        if role == "assistant":
            parts = _assistant_parts(m, names)
            own_ids.update(
                p["functionCall"]["id"]
                for p in parts
                if isinstance(p.get("functionCall"), Mapping)
                and isinstance(p["functionCall"].get("id"), str)
            )
            if parts:
                contents.append({"role": "model", "parts": parts})
        elif has_parts(m.get("content")):
            content = m["content"]
            assert isinstance(content, list)
            blocks = user_blocks(content, "gemini", max_part_bytes)
            contents.append({"role": "user", "parts": [_user_part(b) for b in blocks]})
        else:
            contents.append({"role": "user", "parts": [{"text": text_of(m.get("content"))}]})
    hoisted = "\n\n".join(s for s in systems if s) or None
    return (system if system is not None else hoisted), contents


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
) -> dict[str, Any]:
    """The request body (the model and streaming are in the URL)."""
    hoisted, contents = convert_messages(
        messages, system, tool_parts, on_unsupported_part, max_part_bytes
    )
    out: dict[str, Any] = {"contents": contents}
    if hoisted:
        out["systemInstruction"] = {"parts": [{"text": hoisted}]}
    if tools:
        out["tools"] = convert_tools(tools)
        config = convert_tool_choice(tool_choice)
        if config is not None:
            out["toolConfig"] = config
    if max_tokens:
        out["generationConfig"] = {"maxOutputTokens": max_tokens}
    return out


def response_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    """Native typed output: OpenAI's ``response_format`` as Gemini's
    ``generationConfig`` ``responseMimeType: "application/json"`` with the schema as
    ``responseJsonSchema`` (full JSON Schema, as the tools' ``parametersJsonSchema``;
    ``responseSchema`` takes only an OpenAPI subset, no ``$ref`` or
    ``additionalProperties``). Gemini has no ``name`` or ``strict`` there."""
    schema = json_schema_of(fmt, "the style 'gemini'")["schema"]
    return {
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": dict(schema),
        }
    }


def _user_part(block: object) -> dict[str, Any]:
    """A block of a user's content list as a Gemini part (its parts already mapped)."""
    if isinstance(block, Mapping) and "type" not in block:
        return dict(block)  # already a Gemini part (inlineData, fileData, text)
    return {"text": text_of([block])}


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
    """A ``GenerateContentResponse``."""
    data = mapping(payload, "the answer")
    if data.get("error") is not None:
        raise GenerateError(f"the provider answered with an error: {provider_error(data)}")
    candidates = data.get("candidates")
    if candidates is None:
        feedback = data.get("promptFeedback")
        if isinstance(feedback, Mapping) and feedback.get("blockReason"):
            counts = _usage(data.get("usageMetadata"))
            return Parsed(InProcessResponse("", (), counts), counts, "content_filter", data)
        raise GenerateError("the answer has no candidates")
    if not isinstance(candidates, list) or not candidates:
        raise GenerateError("the answer's candidates is not a non-empty list")
    candidate = mapping(candidates[0], "candidates[0]")
    content = mapping(candidate.get("content") or {}, "candidates[0].content")
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise GenerateError("candidates[0].content.parts is not a list")
    text, calls = _read_parts(parts)
    counts = _usage(data.get("usageMetadata"))
    response = InProcessResponse("".join(text), tuple(calls), counts)
    extra = {KEPT: [dict(p) for p in parts]} if calls or _signed(parts) else None
    return Parsed(response, counts, _reason(candidate.get("finishReason")), data, extra)


class StreamAssembler:
    """Builds one answer from ``GenerateContentResponse`` chunks; ``feed`` gives text deltas."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.done = False
        self._parts: list[dict[str, Any]] = []
        self._usage: Mapping[str, Any] | None = None
        self._reason: str | None = None
        self._last: Mapping[str, Any] = {}

    def feed(self, event: SSEEvent) -> str:
        """Take one chunk; return its text delta (``""`` when none)."""
        if self.done:
            return ""
        chunk = event_json(event, "a stream chunk")
        if chunk.get("error") is not None:
            raise GenerateError(f"the provider sent an error mid-stream: {provider_error(chunk)}")
        self._last = chunk
        usage = chunk.get("usageMetadata")
        if isinstance(usage, Mapping):
            self._usage = usage
        candidates = chunk.get("candidates") or []
        if not isinstance(candidates, list):
            raise GenerateError("a stream chunk's candidates is not a list")
        delta: list[str] = []
        for raw in candidates[:1]:
            candidate = mapping(raw, "a stream candidate")
            content = mapping(candidate.get("content") or {}, "a stream candidate's content")
            for i, part in enumerate(content.get("parts") or ()):
                piece = mapping(part, f"a stream part {i}")
                text = piece.get("text")
                plain = isinstance(text, str) and piece.keys() == {"text"}
                if plain and self._parts and self._parts[-1].keys() == {"text"}:
                    # One text part per chunk would make one part per delta: joined.
                    self._parts[-1]["text"] += text
                else:
                    self._parts.append(dict(piece))
                if isinstance(text, str) and not piece.get("thought"):
                    delta.append(text)
            if isinstance(candidate.get("finishReason"), str):
                self._reason = candidate["finishReason"]
                self.done = True
        return "".join(delta)

    def result(self) -> Parsed:
        """The assembled answer, as a non-streamed call would have had it."""
        if not self.done:
            raise GenerateError("the model's stream ended before a finishReason (truncated)")
        candidate = {"content": {"role": "model", "parts": self._parts}, "index": 0,
                     "finishReason": self._reason}  # fmt: skip
        raw: dict[str, Any] = {"candidates": [candidate], "modelVersion": self.model}
        if self._usage is not None:
            raw["usageMetadata"] = dict(self._usage)
        for key in ("responseId", "modelVersion"):
            if key in self._last:
                raw[key] = self._last[key]
        return parse(raw)


def _read_parts(parts: list[Any]) -> tuple[list[str], list[InProcessToolCall]]:
    text: list[str] = []
    calls: list[InProcessToolCall] = []
    for i, raw in enumerate(parts):
        part = mapping(raw, f"parts[{i}]")
        if "text" in part and not part.get("thought"):
            text.append(string(part.get("text"), f"parts[{i}].text"))
        call = part.get("functionCall")
        if call is not None:
            call = mapping(call, f"parts[{i}].functionCall")
            args = call.get("args")
            calls.append(
                tool_call(
                    call.get("id"),
                    call.get("name"),
                    args if args is not None else {},
                    f"parts[{i}].functionCall",
                )
            )
    return text, calls


def _signed(parts: list[Any]) -> bool:
    return any(isinstance(p, Mapping) and "thoughtSignature" in p for p in parts)


def _usage(usage: object) -> dict[str, int]:
    if not isinstance(usage, Mapping):
        return usage_counts(0, 0)
    candidates = usage.get("candidatesTokenCount")
    thoughts = usage.get("thoughtsTokenCount")
    completion = None
    if candidates is not None or thoughts is not None:
        # Thinking tokens are billed as output: they count as completion tokens.
        completion = (candidates if isinstance(candidates, int) else 0) + (
            thoughts if isinstance(thoughts, int) else 0
        )
    return usage_counts(
        usage.get("promptTokenCount"),
        completion,
        total=usage.get("totalTokenCount"),
        cache_read=usage.get("cachedContentTokenCount"),
    )


def _reason(reason: object) -> str | None:
    if reason == "MAX_TOKENS":
        return "max_tokens"
    if reason in _FILTERED:
        return "content_filter"
    return reason.lower() if isinstance(reason, str) else None


def _assistant_parts(message: Message, names: dict[str, str]) -> list[dict[str, Any]]:
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
    for c in calls:
        function = c.get("function")
        if isinstance(function, Mapping):
            names[c.get("id") or ""] = str(function.get("name", ""))
    kept = message.get(KEPT)
    if isinstance(kept, list):
        kept_names = [
            p["functionCall"].get("name")
            for p in kept
            if isinstance(p, Mapping) and isinstance(p.get("functionCall"), Mapping)
        ]
        if kept_names == [names.get(c.get("id") or "") for c in calls]:
            return [dict(p) for p in kept if isinstance(p, Mapping)]
    parts: list[dict[str, Any]] = []
    text = text_of(message.get("content"))
    if text:
        parts.append({"text": text})
    for c in calls:
        function = c.get("function")
        function = function if isinstance(function, Mapping) else {}
        parts.append(
            {
                "functionCall": {
                    "name": function.get("name", ""),
                    "args": arguments_object(function.get("arguments")),
                }
            }
        )
    return parts
