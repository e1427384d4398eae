"""The FakeProvider's answers on the OpenAI Responses and Gemini wires (issue 38).

Shapes follow the public API references; the tests have the vendors' own SDKs
(``openai``, ``google-genai``) parse every answer and stream rendered here.
"""

from __future__ import annotations

import json
from typing import Any

from ._script import Step, _argument_text, _deltas, _halves, _ids, _tokens


def _sse(name: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


def _cache(step: Step) -> tuple[int, int]:
    usage = step.usage or {}
    return int(usage.get("cache_read_tokens", 0)), int(usage.get("cache_write_tokens", 0))


# -- the Responses API ------------------------------------------------------------


def _responses_usage(step: Step) -> dict[str, Any] | None:
    if step.usage is None:
        return None
    prompt, completion = _tokens(step)
    read, write = _cache(step)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _responses_items(step: Step, serial: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if step.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_fake_{serial}",
                "summary": [{"type": "summary_text", "text": step.reasoning}],
                "encrypted_content": f"enc-{serial}",
            }
        )
    text = step.text * step.burst if step.burst else step.text
    if text:
        items.append(
            {
                "type": "message",
                "id": f"msg_fake_{serial}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for i, (call_id, c) in enumerate(zip(_ids(step, serial), step.tool_calls, strict=True)):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_fake_{serial}_{i}",
                "call_id": call_id,
                "name": c.name,
                "arguments": _argument_text(c),
                "status": "completed",
            }
        )
    return items


def responses_body(
    step: Step, model: str, serial: int, status: str = "completed"
) -> dict[str, Any]:
    """A whole ``response`` object."""
    incomplete = None
    if step.finish_reason in ("max_output_tokens", "content_filter"):
        status = "incomplete"
        incomplete = {"reason": step.finish_reason}
    return {
        "id": f"resp_fake_{serial}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": None,
        "model": model,
        "output": _responses_items(step, serial) if status != "in_progress" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _responses_usage(step) if status != "in_progress" else None,
    }


def responses_events(step: Step, model: str, serial: int) -> list[bytes]:
    """A streamed answer: created, the items (text word by word, arguments in two
    fragments), then ``response.completed`` (or ``response.incomplete``)."""
    seq = 0

    def event(name: str, data: dict[str, Any]) -> bytes:
        nonlocal seq
        out = _sse(name, {"type": name, "sequence_number": seq, **data})
        seq += 1
        return out

    start = responses_body(step, model, serial, status="in_progress")
    events = [event("response.created", {"response": start})]
    events.append(event("response.in_progress", {"response": start}))
    final = responses_body(step, model, serial)
    for index, item in enumerate(final["output"]):
        kind = item["type"]
        if kind == "message":
            opened = {**item, "status": "in_progress", "content": []}
            events.append(
                event("response.output_item.added", {"output_index": index, "item": opened})
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(event("response.content_part.added", {**where, "part": part}))
            events += [
                event("response.output_text.delta", {**where, "delta": d, "logprobs": []})
                for d in _deltas(step)
            ]
            text = item["content"][0]["text"]
            events.append(
                event("response.output_text.done", {**where, "text": text, "logprobs": []})
            )
            events.append(
                event("response.content_part.done", {**where, "part": item["content"][0]})
            )
        elif kind == "function_call":
            opened = {**item, "status": "in_progress", "arguments": ""}
            events.append(
                event("response.output_item.added", {"output_index": index, "item": opened})
            )
            at = {"item_id": item["id"], "output_index": index}
            events += [
                event("response.function_call_arguments.delta", {**at, "delta": piece})
                for piece in _halves(item["arguments"])
            ]
            events.append(
                event(
                    "response.function_call_arguments.done",
                    {
                        "item_id": item["id"],
                        "output_index": index,
                        "name": item["name"],
                        "arguments": item["arguments"],
                    },
                )
            )
        elif kind == "reasoning":
            # The summary streamed in two halves, as the API streams its text.
            opened = {**item, "summary": []}
            events.append(
                event("response.output_item.added", {"output_index": index, "item": opened})
            )
            where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
            summary = item["summary"][0]["text"]
            events += [
                event("response.reasoning_summary_text.delta", {**where, "delta": piece})
                for piece in _halves(summary)
            ]
            events.append(event("response.reasoning_summary_text.done", {**where, "text": summary}))
        else:
            events.append(
                event("response.output_item.added", {"output_index": index, "item": item})
            )
        events.append(event("response.output_item.done", {"output_index": index, "item": item}))
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    events.append(event(terminal, {"response": final}))
    return events


# -- Gemini ---------------------------------------------------------------------


def _gemini_usage(step: Step) -> dict[str, Any] | None:
    if step.usage is None:
        return None
    prompt, completion = _tokens(step)
    out = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }
    read, _ = _cache(step)
    if read:
        out["cachedContentTokenCount"] = read
    return out


def _gemini_reason(step: Step) -> str:
    return step.finish_reason or "STOP"


def _gemini_call_parts(step: Step) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for i, c in enumerate(step.tool_calls):
        arguments: Any = c.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {"raw": arguments}
        call: dict[str, Any] = {"name": c.name, "args": arguments}
        if c.id:
            call["id"] = c.id
        part: dict[str, Any] = {"functionCall": call}
        if step.reasoning and i == 0:
            part["thoughtSignature"] = "c2lnbmF0dXJl"  # base64, as the API sends it
        parts.append(part)
    return parts


def gemini_body(step: Step, model: str, serial: int) -> dict[str, Any]:
    """A whole ``GenerateContentResponse``."""
    text = step.text * step.burst if step.burst else step.text
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += _gemini_call_parts(step)
    out: dict[str, Any] = {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": _gemini_reason(step),
                "index": 0,
            }
        ],
        "modelVersion": model,
        "responseId": f"fake-{serial}",
    }
    usage = _gemini_usage(step)
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def gemini_events(step: Step, model: str, serial: int) -> list[bytes]:
    """A streamed answer: one chunk per text delta, then the calls, finishReason and usage."""

    def chunk(parts: list[dict[str, Any]], last: bool) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        body: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": model,
            "responseId": f"fake-{serial}",
        }
        if last:
            candidate["finishReason"] = _gemini_reason(step)
            usage = _gemini_usage(step)
            if usage is not None:
                body["usageMetadata"] = usage
        return _sse(None, body)

    deltas = _deltas(step)
    calls = _gemini_call_parts(step)
    events = [chunk([{"text": d}], False) for d in deltas]
    events.append(chunk(calls, True))
    return events
