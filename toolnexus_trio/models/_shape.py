"""What the wire styles parse a model answer into, the strict readers they share, and
the pieces of the OpenAI-shaped transcript and tools they all read the same way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ..loop._results import GenerateError, InProcessResponse, InProcessToolCall, Message
from ..loop._turns import _int
from ._sse import SSEEvent

_WORDS = 200


@attrs.frozen
class Parsed:
    """One assistant answer: the message the loop consumes, usage, reason, raw payload.

    ``usage`` is normalised; ``finish_reason`` is the provider's own word (mapped by
    :func:`~toolnexus_trio.loop._turns.finish_reason_for` where the SPEC asks); ``raw`` is the
    decoded payload (for a stream: the payload a non-streamed call would have given).
    ``extra`` is provider state the wire needs back on the next call (the Responses
    API's reasoning items, Gemini's thought signatures): keys added to the assistant
    message the loop appends to the transcript.
    """

    response: InProcessResponse
    usage: dict[str, int]
    finish_reason: str | None
    raw: Any
    extra: Mapping[str, Any] | None = None


def decode_json(body: bytes, what: str) -> Any:
    """*body* as JSON, or a :class:`GenerateError` quoting its start."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        start = body[:_WORDS].decode("utf-8", "replace")
        raise GenerateError(f"{what} is not JSON ({exc}): {start!r}") from exc


def mapping(value: object, what: str) -> Mapping[str, Any]:
    """*value* when it is a JSON object, else a clear :class:`GenerateError`."""
    if not isinstance(value, Mapping):
        raise GenerateError(f"{what} is {_kind(value)}, expected an object")
    return value


def event_json(event: SSEEvent, noun: str, what: str | None = None) -> Mapping[str, Any]:
    """A stream event's data as a JSON object (*what*, default *noun*, names it when
    it is not one); ``"{noun} is not JSON"`` when it is not JSON at all."""
    try:
        return mapping(json.loads(event.data), what or noun)
    except (ValueError, RecursionError) as exc:
        raise GenerateError(f"{noun} is not JSON: {event.data[:_WORDS]!r}") from exc


def function_of(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``function`` of an OpenAI function tool, or of a ``tool_choice`` naming one
    (``{"type": "function", "function": {...}}``); ``None`` for anything else."""
    function = item.get("function") if item.get("type") == "function" else None
    return function if isinstance(function, Mapping) else None


def arguments_object(arguments: object) -> Mapping[str, Any]:
    """A transcript tool call's ``arguments`` (a JSON string, or already an object) as
    the object the Anthropic and Gemini wires want; ``{}`` for arguments that are not a
    JSON object (such a call went back to the model as an error result; the wire still
    needs an object)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return {}
    return arguments if isinstance(arguments, Mapping) else {}


def note_call_names(message: Message, names: dict[str, str]) -> None:
    """Add an assistant message's tool calls to *names* (call id: function name), for
    the tool results that answer them by id only."""
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            names[str(call.get("id"))] = str(call["function"].get("name", ""))


def json_schema_of(fmt: Mapping[str, Any], wire: str) -> Mapping[str, Any]:
    """The ``json_schema`` of OpenAI's ``response_format`` (with a ``schema`` object),
    which each wire says its own way; anything else has no equivalent on *wire*."""
    spec = fmt.get("json_schema")
    if (
        fmt.get("type") != "json_schema"
        or not isinstance(spec, Mapping)
        or not isinstance(spec.get("schema"), Mapping)
    ):
        raise GenerateError(f"{wire} has no equivalent of response_format {fmt!r:.80}")
    return spec


def string(value: object, what: str, *, optional: bool = True) -> str:
    """*value* when it is a string (``None`` gives ``""`` when optional)."""
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise GenerateError(f"{what} is {_kind(value)}, expected a string")
    return value


def provider_error(payload: Mapping[str, Any]) -> str | None:
    """The message of an ``{"error": ...}`` payload, if it is one."""
    error = payload.get("error")
    if error is None:
        return None
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("type") or dict(error))
    return str(error)


def tool_call(call_id: object, name: object, arguments: object, what: str) -> InProcessToolCall:
    """A tool call read off the wire; ``arguments`` stays a string or an object."""
    if not isinstance(arguments, str | Mapping):
        arguments = "" if arguments is None else json.dumps(arguments)
    return InProcessToolCall(
        id=string(call_id, f"{what} id"),
        name=string(name, f"{what} name", optional=False),
        arguments=dict(arguments) if isinstance(arguments, Mapping) else arguments,
    )


def text_of(content: object) -> str:
    """Message content as text: a string, or the text of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") if isinstance(p, Mapping) and isinstance(p.get("text"), str) else ""
            for p in content
        )
    return str(content)


def _kind(value: object) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def usage_counts(
    prompt: object,
    completion: object,
    *,
    total: object = None,
    cache_read: object = None,
    cache_write: object = None,
) -> dict[str, int]:
    """Normalised usage: ``prompt_tokens`` counts every input token, cached ones
    included; ``cache_read_tokens`` and ``cache_write_tokens`` (present only when not
    zero) say how many of them were read from or written to the provider's cache."""
    p = _int(prompt, "prompt_tokens")
    c = _int(completion, "completion_tokens")
    out = {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": _int(total, "total_tokens") if total is not None else p + c,
    }
    read = _int(cache_read, "cache_read_tokens")
    write = _int(cache_write, "cache_write_tokens")
    if read:
        out["cache_read_tokens"] = read
    if write:
        out["cache_write_tokens"] = write
    return out
