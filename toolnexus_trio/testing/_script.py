"""What a :class:`~toolnexus_trio.testing.FakeProvider` answers: scripted steps, and
their rendering in both wire styles (JSON body or SSE events)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

WireStyle = Literal["openai", "anthropic", "responses", "gemini"]


@attrs.frozen
class ScriptedCall:
    """A tool call the fake model makes.

    ``arguments`` is an object, or a string sent as it is (invalid JSON included);
    an empty ``id`` becomes ``call_<step>_<i>``.
    """

    name: str
    arguments: Mapping[str, Any] | str = attrs.field(factory=dict)
    id: str = ""


def _calls(value: Iterable[ScriptedCall | Mapping[str, Any]]) -> tuple[ScriptedCall, ...]:
    return tuple(c if isinstance(c, ScriptedCall) else ScriptedCall(**c) for c in value)


@attrs.frozen
class Step:
    """One scripted answer (or fault), used for exactly one request.

    The answer: ``text``, ``tool_calls``, ``usage`` (``{"prompt_tokens",
    "completion_tokens"}``, or ``None`` to send none) and ``finish_reason`` (the
    provider's word; by default ``stop``/``tool_calls`` or ``end_turn``/``tool_use``).
    A streamed answer sends the text word by word, or, with ``burst=N``, ``text`` N
    times as N deltas as fast as the socket takes them; tool-call arguments go out in
    two fragments.

    Faults: ``status`` (not 200: that status with ``body`` or a JSON error body, plus
    ``Retry-After: retry_after`` when set); ``body`` with status 200 replaces the
    answer with these raw bytes (non-JSON, wrong shape), sent as ``content_type``
    (default: ``text/event-stream`` when the request asked to stream, else
    ``application/json``); ``delay_ms`` waits before
    answering (a client that hangs up meanwhile is seen, as with ``stall``);
    ``stall`` never answers and waits for the client to hang up;
    ``stall_after=N`` streams N events then stalls; ``drop_after=N`` closes the
    connection after N events (JSON: halfway through the body) without ending it;
    ``hold_open`` sends every event of a streamed answer, its terminal one
    (``[DONE]``, ``message_stop``) included, then keeps the body open without ending
    it until the client hangs up (a JSON answer is sent whole, as usual);
    ``event_delay_ms`` waits between streamed events.

    ``reasoning`` (Responses and Gemini wires) adds a reasoning item with that summary
    (Responses; streamed as summary text deltas) or a thought signature on the first
    call (Gemini); a streamed Anthropic answer starts with a ``thinking`` block of it
    (``thinking_delta`` events). ``usage`` may also
    give ``cache_read_tokens`` and ``cache_write_tokens`` (of the prompt tokens).
    """

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = attrs.field(default=(), converter=_calls)
    usage: Mapping[str, int] | None = attrs.field(
        factory=lambda: {"prompt_tokens": 10, "completion_tokens": 5}
    )
    finish_reason: str | None = None
    burst: int = 0
    status: int = 200
    retry_after: str | None = None
    body: str | None = None
    content_type: str | None = None
    delay_ms: int = 0
    stall: bool = False
    stall_after: int | None = None
    drop_after: int | None = None
    hold_open: bool = False
    event_delay_ms: int = 0
    reasoning: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        """A step from its JSON form (the field names above; unknown keys are refused)."""
        known = {f.name for f in attrs.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown step keys: {sorted(unknown)}")
        return cls(**data)


def load_script(data: object) -> tuple[list[Step], bool]:
    """``(steps, cycle)`` from a script's JSON: a list of steps, or
    ``{"steps": [...], "cycle": bool}``."""
    cycle = False
    if isinstance(data, Mapping):
        cycle = data.get("cycle", False)
        if not isinstance(cycle, bool):
            raise ValueError("'cycle' must be true or false")
        data = data.get("steps")
    if not isinstance(data, list):
        raise ValueError("a script is a list of steps or {'steps': [...], 'cycle': bool}")
    return [Step.from_json(s) for s in data], cycle


# -- rendering ------------------------------------------------------------------


def _tokens(step: Step) -> tuple[int, int]:
    usage = step.usage or {}
    return int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))


def _ids(step: Step, serial: int) -> list[str]:
    return [c.id or f"call_{serial}_{i}" for i, c in enumerate(step.tool_calls)]


def _argument_text(call: ScriptedCall) -> str:
    if isinstance(call.arguments, str):
        return call.arguments
    return json.dumps(call.arguments, separators=(",", ":"))


def _deltas(step: Step) -> list[str]:
    if step.burst:
        return [step.text] * step.burst
    words = step.text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]] if step.text else []


def json_body(style: WireStyle, step: Step, model: str, serial: int) -> dict[str, Any]:
    """The whole answer of a non-streamed call."""
    _, completion = _tokens(step)
    text = step.text * step.burst if step.burst else step.text
    ids = _ids(step, serial)
    if style == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if step.tool_calls:
            message["tool_calls"] = [
                {"id": i, "type": "function",
                 "function": {"name": c.name, "arguments": _argument_text(c)}}
                for i, c in zip(ids, step.tool_calls, strict=True)
            ]  # fmt: skip
        reason = step.finish_reason or ("tool_calls" if step.tool_calls else "stop")
        out: dict[str, Any] = {
            "id": f"chatcmpl-fake-{serial}", "object": "chat.completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
        }  # fmt: skip
        if step.usage is not None:
            out["usage"] = _openai_usage(step)
        return out
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for i, c in zip(ids, step.tool_calls, strict=True):
        arguments: Any = c.arguments
        if isinstance(arguments, str):
            # Invalid JSON goes out as the string it is: a wrong-shape input.
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        content.append({"type": "tool_use", "id": i, "name": c.name, "input": arguments})
    reason = step.finish_reason or ("tool_use" if step.tool_calls else "end_turn")
    out = {
        "id": f"msg_fake_{serial}", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": reason, "stop_sequence": None,
    }  # fmt: skip
    if step.usage is not None:
        out["usage"] = _anthropic_usage(step, completion)
    return out


def _openai_usage(step: Step) -> dict[str, Any]:
    prompt, completion = _tokens(step)
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}  # fmt: skip
    read = int((step.usage or {}).get("cache_read_tokens", 0))
    if read:
        out["prompt_tokens_details"] = {"cached_tokens": read}
    return out


def _anthropic_usage(step: Step, output: int) -> dict[str, int]:
    """Anthropic counts cached input apart: ``input_tokens`` is the rest of the prompt."""
    prompt, _ = _tokens(step)
    usage = step.usage or {}
    read = int(usage.get("cache_read_tokens", 0))
    write = int(usage.get("cache_write_tokens", 0))
    out = {"input_tokens": prompt - read - write, "output_tokens": output}
    if read or write:
        out["cache_read_input_tokens"] = read
        out["cache_creation_input_tokens"] = write
    return out


def sse_events(
    style: WireStyle, step: Step, model: str, serial: int, *, include_usage: bool
) -> list[bytes]:
    """The answer of a streamed call, one encoded SSE event per item."""
    if style == "openai":
        return _openai_events(step, model, serial, include_usage)
    return _anthropic_events(step, model, serial)


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def _openai_events(step: Step, model: str, serial: int, include_usage: bool) -> list[bytes]:
    head = {"id": f"chatcmpl-fake-{serial}", "object": "chat.completion.chunk", "created": 0,
            "model": model}  # fmt: skip

    def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": d}) for d in _deltas(step)]
    ids = _ids(step, serial)
    # Every call opens, then the argument fragments interleave: joining is by index.
    for i, (call_id, c) in enumerate(zip(ids, step.tool_calls, strict=True)):
        function = {"name": c.name, "arguments": ""}
        opening = {"index": i, "id": call_id, "type": "function", "function": function}
        events.append(chunk({"tool_calls": [opening]}))
    halves = [_halves(_argument_text(c)) for c in step.tool_calls]
    for part in (0, 1):
        for i, pieces in enumerate(halves):
            if part < len(pieces):
                events.append(
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": pieces[part]}}]})
                )
    reason = step.finish_reason or ("tool_calls" if step.tool_calls else "stop")
    events.append(chunk({}, reason))
    if include_usage and step.usage is not None:
        body = {**head, "choices": [], "usage": _openai_usage(step)}
        events.append(b"data: " + json.dumps(body).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def _anthropic_events(step: Step, model: str, serial: int) -> list[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return (
            f"event: {name}\ndata: ".encode()
            + json.dumps({"type": name, **data}).encode()
            + b"\n\n"
        )

    _, completion = _tokens(step)
    message: dict[str, Any] = {"id": f"msg_fake_{serial}", "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": _anthropic_usage(step, 1)}  # fmt: skip
    events = [event("message_start", {"message": message}), event("ping", {})]
    index = 0
    if step.reasoning:
        thinking = {"type": "thinking", "thinking": "", "signature": ""}
        events.append(event("content_block_start", {"index": 0, "content_block": thinking}))
        for piece in _halves(step.reasoning):
            delta = {"type": "thinking_delta", "thinking": piece}
            events.append(event("content_block_delta", {"index": 0, "delta": delta}))
        signed = {"type": "signature_delta", "signature": "fake-signature"}
        events.append(event("content_block_delta", {"index": 0, "delta": signed}))
        events.append(event("content_block_stop", {"index": 0}))
        index = 1
    deltas = _deltas(step)
    if deltas:
        opening = {"index": index, "content_block": {"type": "text", "text": ""}}
        events.append(event("content_block_start", opening))
        events += [
            event(
                "content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": d}}
            )
            for d in deltas
        ]
        events.append(event("content_block_stop", {"index": index}))
        index += 1
    for call_id, c in zip(_ids(step, serial), step.tool_calls, strict=True):
        block = {"type": "tool_use", "id": call_id, "name": c.name, "input": {}}
        events.append(event("content_block_start", {"index": index, "content_block": block}))
        for piece in _halves(_argument_text(c)):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(event("content_block_delta", {"index": index, "delta": delta}))
        events.append(event("content_block_stop", {"index": index}))
        index += 1
    reason = step.finish_reason or ("tool_use" if step.tool_calls else "end_turn")
    closing: dict[str, Any] = {"delta": {"stop_reason": reason, "stop_sequence": None}}
    if step.usage is not None:
        closing["usage"] = {"output_tokens": completion}
    events.append(event("message_delta", closing))
    events.append(event("message_stop", {}))
    return events
