"""How one model turn is produced: the seam between the one loop and its models.

The loop (:mod:`toolnexus_trio.loop._client`) asks a :class:`TurnSource` for each assistant
message. :class:`InProcessTurns` calls a host's ``generate``; the HTTP source in
:mod:`toolnexus_trio.models` speaks a provider's wire. Everything else (hooks, tools,
suspension, metrics, the transcript) is the loop's and is the same for both.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import trio

from .._toolkit import Toolkit
from .._tools import is_async_callable
from ._results import (
    GenerateError,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Message,
    TranslatedToolCall,
    TranslateResult,
)

Emit = Callable[[dict[str, Any]], Awaitable[None]]
"""Send one stream event to the consumer (waits for it: the channel has no buffer)."""

REASONING_DELTA = "reasoning_delta"
"""The kind of an internal stream event, ``{type, delta}``: a piece of the model's
reasoning as the provider streams it (Anthropic ``thinking_delta``, Responses reasoning
summary deltas), like the tool-argument fragments of :mod:`._output`. Not part of the
SPEC §8 stream: :meth:`Client.stream` drops it; the typed events send it as
``ReasoningDelta``."""


def reasoning_delta(delta: str) -> dict[str, Any]:
    """The :data:`REASONING_DELTA` event for one piece of reasoning."""
    return {"type": REASONING_DELTA, "delta": delta}


@attrs.frozen
class Turn:
    """One produced assistant message.

    ``usage`` is already normalised (``prompt_tokens`` / ``completion_tokens`` /
    ``total_tokens``); ``raw`` is what ``after_llm`` receives as ``response``;
    ``streamed`` says the text already went out as ``text`` events. ``extra`` holds
    keys the assistant message keeps for the wire's next call (provider state such as
    reasoning items); ``model`` is the model that answered, when a fallback provider
    did (``None``: the request's).
    """

    response: InProcessResponse
    usage: dict[str, int]
    raw: Any
    streamed: bool = False
    extra: Mapping[str, Any] | None = None
    model: str | None = None


@attrs.frozen
class TranslateCall:
    """One §11 translation request as the source receives it (hooks already applied).

    ``messages`` and ``tools`` are OpenAI-shaped, verbatim from the caller.
    """

    model: str
    messages: Sequence[Message]
    tools: list[dict[str, Any]]
    tool_choice: Any = None
    system: str | None = None
    max_tokens: int = 0


_MESSAGE = 'a message object ({"role": "...", "content": ...})'
_PART = 'a content part object ({"type": "text", "text": "..."})'
_CALL = 'a tool call object ({"id": "...", "function": {"name": "...", "arguments": "..."}})'
_TOOL = 'a tool object ({"type": "function", "function": {"name": "...", ...}})'


def _kind(value: object) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _refuse(where: str, value: object, expected: str) -> ValueError:
    return ValueError(f"{where} is {_kind(value)}, expected {expected}")


def check_translate_input(messages: object, tools: object, *, source: str = "translate") -> None:
    """Refuse §11 input that is not OpenAI-shaped, before any of it is used.

    ``translate`` is the entry point of proxies, so its input comes from remote callers:
    a string or ``null`` where a message, tool, content part or tool call belongs is a
    :class:`ValueError` naming where it is and the shape expected there (never an
    ``AttributeError`` from deep inside a wire style). *source* names who gave the
    input (``translate`` or its ``before_llm`` hook).
    """
    if not isinstance(messages, list | tuple):
        raise _refuse(f"{source}: messages", messages, "a list of messages")
    for i, message in enumerate(messages):
        _check_message(message, f"{source}: messages[{i}]")
    if tools is None:
        return
    if not isinstance(tools, list | tuple):
        raise _refuse(f"{source}: tools", tools, "a list of tools")
    for i, declared in enumerate(tools):
        where = f"{source}: tools[{i}]"
        if not isinstance(declared, Mapping):
            raise _refuse(where, declared, _TOOL)
        if declared.get("type") == "function" or "function" in declared:
            _check_function(declared.get("function"), f"{where}.function")


def _check_message(message: object, where: str) -> None:
    if not isinstance(message, Mapping):
        raise _refuse(where, message, _MESSAGE)
    if not isinstance(message.get("role"), str):
        raise _refuse(f"{where}.role", message.get("role"), "a string")
    content = message.get("content")
    if isinstance(content, list | tuple):
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise _refuse(f"{where}.content[{j}]", part, _PART)
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _refuse(f"{where}.content[{j}].text", part.get("text"), "a string")
    elif content is not None and not isinstance(content, str):
        raise _refuse(f"{where}.content", content, "a string, null or a list of content parts")
    calls = message.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list | tuple):
            raise _refuse(f"{where}.tool_calls", calls, "a list of tool calls")
        for j, call in enumerate(calls):
            if not isinstance(call, Mapping):
                raise _refuse(f"{where}.tool_calls[{j}]", call, _CALL)
            if call.get("id") is not None and not isinstance(call["id"], str):
                raise _refuse(f"{where}.tool_calls[{j}].id", call["id"], "a string")
            _check_function(call.get("function"), f"{where}.tool_calls[{j}].function")
            arguments = call["function"].get("arguments")
            if arguments is not None and not isinstance(arguments, str | Mapping):
                raise _refuse(
                    f"{where}.tool_calls[{j}].function.arguments",
                    arguments,
                    "a JSON string or an object",
                )
    call_id = message.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise _refuse(f"{where}.tool_call_id", call_id, "a string")


def _check_function(function: object, where: str) -> None:
    if not isinstance(function, Mapping):
        raise _refuse(where, function, 'an object ({"name": "...", ...})')
    if not isinstance(function.get("name"), str):
        raise _refuse(f"{where}.name", function.get("name"), "a string")


class TurnSource(Protocol):
    """Produces model turns for the loop (in-process or over HTTP)."""

    def tools_for(self, toolkit: Toolkit | None) -> list[dict[str, Any]]:
        """The toolkit's tool declarations in this source's shape."""
        ...

    async def turn(self, request: GenerateRequest, emit: Emit | None) -> Turn:
        """One assistant message for *request*; streams ``text`` events when *emit* is set.

        Raises :class:`GenerateError` when no valid message can be had.
        """
        ...

    async def translate(self, call: TranslateCall) -> TranslateResult:
        """One provider call for §11 ``translate`` (``raw`` is the decoded response)."""
        ...

    async def aclose(self) -> None:
        """Release what the source holds (an owned HTTP connection pool)."""
        ...


def _int(value: Any, key: str = "usage") -> int:
    """A token count: ``None`` (absent) is 0; anything but a non-negative integer is a
    :class:`GenerateError` (a negative count would make the run's usage and the token
    counter go down, and a saved run with it would not load back)."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)  # JSON has one number type: 12.0 is the integer 12
    elif isinstance(value, float) and not math.isfinite(value):
        raise GenerateError(f"the model's answer has a non-finite usage number: {key}={value}")
    else:
        raise GenerateError(
            f"the model's answer has usage {key}={value!r:.40}, not a non-negative integer"
        )
    if number < 0:
        raise GenerateError(
            f"the model's answer has usage {key}={number}, not a non-negative integer"
        )
    return number


def _usage(raw: Mapping[str, Any] | None) -> dict[str, int]:
    if not raw:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    prompt = _int(raw.get("prompt_tokens", raw.get("promptTokens")), "prompt_tokens")
    completion = _int(
        raw.get("completion_tokens", raw.get("completionTokens")), "completion_tokens"
    )
    total = raw.get("total_tokens", raw.get("totalTokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": _int(total, "total_tokens") if total is not None else prompt + completion,
    }


def _parse_call(item: object) -> InProcessToolCall:
    if isinstance(item, InProcessToolCall):
        call = item
    elif isinstance(item, Mapping):
        call = InProcessToolCall(
            id=item.get("id") or "",
            name=item.get("name") or "",
            arguments=item.get("arguments", {}),
        )
    else:
        raise GenerateError(f"generate returned a tool call of type {type(item).__name__}")
    if not isinstance(call.id, str) or not isinstance(call.name, str):
        raise GenerateError(f"generate returned a tool call with a non-string id or name: {call!r}")
    return call


def _parse_response(raw: object) -> InProcessResponse:
    if isinstance(raw, InProcessResponse):
        content, calls_raw, usage = raw.content, raw.tool_calls, raw.usage
    elif isinstance(raw, Mapping):
        content = raw.get("content") or ""
        calls_raw = raw.get("tool_calls", raw.get("toolCalls")) or ()
        usage = raw.get("usage")
    else:
        raise GenerateError(
            f"generate returned {type(raw).__name__}; expected an InProcessResponse "
            "or a dict with 'content' and/or 'tool_calls'"
        )
    if not isinstance(content, str):
        raise GenerateError(f"generate returned content of type {type(content).__name__}")
    if not isinstance(calls_raw, list | tuple):
        raise GenerateError(f"generate returned tool_calls of type {type(calls_raw).__name__}")
    if usage is not None and type(usage) is not dict and not isinstance(usage, Mapping):
        raise GenerateError(f"generate returned usage of type {type(usage).__name__}")
    if not calls_raw and type(raw) is InProcessResponse:
        return raw  # an answer without calls (a fan-out child's): nothing to convert
    calls = tuple(_parse_call(item) for item in calls_raw)
    if isinstance(raw, InProcessResponse) and all(
        a is b for a, b in zip(calls, calls_raw, strict=True)
    ):
        return raw
    return InProcessResponse(content=content, tool_calls=calls, usage=usage)


def encode_arguments(arguments: Any) -> str:
    """Tool-call arguments as the JSON string of the OpenAI wire (kept when already one)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"))


def finish_reason_for(has_calls: bool, provider_reason: object) -> Any:
    """SPEC §11: any tool call ⇒ ``tool_calls``; max-tokens ⇒ ``length``; a refusal or
    filter ⇒ ``content_filter``; everything else ⇒ ``stop``."""
    if has_calls:
        return "tool_calls"
    if provider_reason in ("length", "max_tokens"):
        return "length"
    if provider_reason in ("content_filter", "refusal"):
        return "content_filter"
    return "stop"


class InProcessTurns:
    """A :class:`TurnSource` around a host-supplied ``generate`` (no wire, no retries)."""

    def __init__(self, options: InProcessOptions) -> None:
        if not callable(options.generate):
            raise TypeError("create_in_process_client requires a callable `generate`")
        self.generate = options.generate
        self._generate_is_async = is_async_callable(options.generate)

    def tools_for(self, toolkit: Toolkit | None) -> list[dict[str, Any]]:
        """OpenAI-shaped, as ``generate`` has always received them."""
        return toolkit.to_openai() if toolkit is not None else []

    async def turn(self, request: GenerateRequest, emit: Emit | None) -> Turn:
        """Call ``generate`` once; the loop emits its text as one delta."""
        response = await self._generate(request)
        return Turn(response, _usage(response.usage), response)

    async def _generate(self, request: GenerateRequest) -> InProcessResponse:
        generate = self.generate
        try:
            if self._generate_is_async:
                raw = await generate(request)
            else:
                # A worker thread is abandoned when the run is cancelled, so it gets its
                # own copy of the transcript rather than the live list.
                snapshot = attrs.evolve(request, messages=list(request.messages))
                raw = await trio.to_thread.run_sync(generate, snapshot, abandon_on_cancel=True)
                if inspect.isawaitable(raw):
                    raw = await raw
            return _parse_response(raw)
        except GenerateError:
            raise
        except Exception as exc:
            raise GenerateError(f"generate raised {type(exc).__name__}: {exc}") from exc

    async def translate(self, call: TranslateCall) -> TranslateResult:
        """``generate`` once with the caller's messages (a ``system`` goes first)."""
        messages: list[Message] = list(call.messages)
        if call.system is not None:
            messages = [m for m in messages if m.get("role") not in ("system", "developer")]
            messages.insert(0, {"role": "system", "content": call.system})
        request = GenerateRequest(
            model=call.model,
            messages=messages,
            tools=call.tools or None,
            turn=0,
            max_tokens=call.max_tokens or None,
        )
        response = await self._generate(request)
        try:
            calls = tuple(
                TranslatedToolCall(tc.id or f"call_{i}", tc.name, encode_arguments(tc.arguments))
                for i, tc in enumerate(response.tool_calls)
            )
        except (TypeError, ValueError) as exc:
            raise GenerateError(f"generate returned arguments that are not JSON: {exc}") from exc
        result = TranslateResult(
            text=response.content,
            tool_calls=calls,
            finish_reason=finish_reason_for(bool(calls), None),
            usage=_usage(response.usage),
            model=call.model,
            raw=response,
        )
        return result

    async def aclose(self) -> None:
        """Nothing to release."""
