"""Typed results: ``output_type``, its three modes, validation and bounded retries.

A run with an ``output_type`` ends with a value of that type in
:attr:`~toolnexus_trio.RunResult.output`. The type is described once
(:func:`output_spec`, a cache keyed by the type; a raw JSON Schema is keyed by its
canonical text) with the project's schema deriver, and values are built with the
project's converter (:data:`~toolnexus_trio._converter.payloads`): the same rules as a
tool's typed parameters.

The three modes differ only in how the model hands the value over:

- ``"tool"``: a final-result tool declared beside the toolkit's (never part of
  :attr:`Toolkit.tools`), named so that it cannot collide with a user's tool;
- ``"native"``: the provider's own JSON-schema answer format (OpenAI
  ``response_format``, Anthropic ``output_config.format``);
- ``"prompted"``: the schema in the instructions, the JSON read back from the text.

A value that is not JSON, fails the schema, the converter or an output validator goes
back to the model (a tool error in ``tool`` mode, a user message otherwise) naming the
field and the rule; ``output_retries`` bounds how often.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal, Union

import attrs
import cattrs

from .._converter import describe_structure_error, payloads
from .._schema import JSONSchema, SchemaError, Validator, compile_schema, schema_for_type
from .._toolkit import Toolkit
from .._tools import ToolResult

OutputMode = Literal["tool", "native", "prompted"]
"""How the model hands over a typed result (see :mod:`toolnexus_trio.loop._output`)."""

OutputValidator = Callable[[Any], Any]
"""A user check of the typed value: sync or async; raising :class:`RetryOutput` sends
the value back to the model."""

FINAL_TOOL: Final = "final_result"
"""The final-result tool's name (``final_result_2``, ... when a user's tool has it)."""

_MODES: Final = ("tool", "native", "prompted")


class RetryOutput(Exception):
    """Raised by an output validator: the value goes back to the model with this reason.

    Counts against ``output_retries`` like a value that fails the schema.
    """


class OutputInvalid(ValueError):
    """A value the model gave that is not the output type; ``raw`` is what it sent."""

    def __init__(self, message: str, raw: Any) -> None:
        super().__init__(message)
        self.raw = raw


@attrs.frozen(eq=False)
class OutputSpec:
    """What a type asks of a model's answer, derived once per type.

    ``schema`` describes the value; ``object_schema`` is what the model fills in (the
    tool's parameters, the native format): ``schema`` itself when that is an object,
    else ``{"result": schema}`` (``wrapped``), since tool parameters and OpenAI's
    response formats must be objects.
    """

    target: Any
    """The type, or ``None`` for a raw JSON Schema (the value is the decoded JSON)."""
    schema: JSONSchema
    object_schema: JSONSchema
    wrapped: bool
    validator: Validator
    members: tuple[OutputSpec, ...] = ()
    """For a union of classes: each member's spec, tried in order."""

    @property
    def strict(self) -> bool:
        """Whether the object schema meets OpenAI's strict mode rules (every object
        closed, every property required)."""
        return _strict_ok(self.object_schema)

    def unwrap(self, data: Any) -> Any:
        """The value inside what the model filled in (``data["result"]`` when wrapped)."""
        if self.wrapped:
            if not isinstance(data, dict) or "result" not in data:
                raise OutputInvalid("$.result: required property missing (rule: required)", data)
            return data["result"]
        return data

    def build(self, value: Any) -> Any:
        """Check *value* against the schema, then structure it: the typed value.

        Raises :class:`OutputInvalid` naming each failing field and its rule.
        """
        issues = self.validator.issues(value)
        if issues:
            why = "; ".join(f"{i.message} (rule: {i.rule})" for i in issues[:5])
            raise OutputInvalid(why, value)
        if self.target is None:
            return value
        if self.members:
            errors = []
            for member in self.members:
                try:
                    return member.build(value)
                except OutputInvalid as exc:
                    errors.append(str(exc))
            raise OutputInvalid("matches no member of the union: " + " | ".join(errors), value)
        try:
            return payloads.structure(value, self.target)
        except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
            raise OutputInvalid(describe_structure_error(exc, root="$"), value) from None

    def dump(self, value: Any) -> Any:
        """The JSON form of a typed value (what :meth:`build` reads back)."""
        return value if self.target is None else payloads.unstructure(value)


def _strict_ok(schema: Any) -> bool:
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            props = schema.get("properties", {})
            if schema.get("additionalProperties") is not False:
                return False
            if set(schema.get("required", ())) != set(props):
                return False
        return all(_strict_ok(v) for k, v in schema.items() if k != "enum")
    if isinstance(schema, list):
        return all(_strict_ok(v) for v in schema)
    return True


def _is_object(schema: JSONSchema) -> bool:
    return schema.get("type") == "object" and "anyOf" not in schema and "oneOf" not in schema


def _make(target: Any, schema: JSONSchema) -> OutputSpec:
    try:
        validator = compile_schema(schema)
    except SchemaError as exc:
        raise TypeError(f"output_type: {exc}") from None
    wrapped = not _is_object(schema)
    defs = schema.get("$defs") if wrapped else None
    inner = {k: v for k, v in schema.items() if k != "$defs"} if defs else schema
    object_schema: JSONSchema = (
        {
            "type": "object",
            "properties": {"result": inner},
            "required": ["result"],
            "additionalProperties": False,
            **({"$defs": defs} if defs else {}),
        }
        if wrapped
        else schema
    )
    members: tuple[OutputSpec, ...] = ()
    if target is not None and typing.get_origin(target) in (Union, types.UnionType):
        args = typing.get_args(target)
        if all(isinstance(a, type) and a is not type(None) for a in args):
            members = tuple(output_spec(a) for a in args)
    return OutputSpec(target, schema, object_schema, wrapped, validator, members)


@functools.lru_cache(maxsize=256)
def _spec_of_type(target: Any) -> OutputSpec:
    return _make(target, schema_for_type(target))


@functools.lru_cache(maxsize=256)
def _spec_of_schema(text: str) -> OutputSpec:
    return _make(None, json.loads(text))


def output_spec(output_type: Any) -> OutputSpec:
    """The spec of *output_type* (a type, or a raw JSON Schema ``dict``), derived once.

    A type that cannot be described raises :class:`TypeError` saying which.
    """
    if isinstance(output_type, dict):
        try:
            text = json.dumps(output_type, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"output_type: a JSON Schema must be JSON data: {exc}") from None
        return _spec_of_schema(text)
    try:
        return _spec_of_type(output_type)
    except TypeError as exc:
        if "unhashable" in str(exc):
            return _make(output_type, schema_for_type(output_type))
        raise


def check_mode(mode: object, retries: object) -> None:
    """Refuse an unknown mode or a negative retry count, before any call."""
    if mode not in _MODES:
        raise ValueError(f"output_mode must be one of {', '.join(_MODES)}, not {mode!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"output_retries must be an integer >= 0, not {retries!r}")


_UNSET: Any = object()


@attrs.define
class OutputRun:
    """One run's typed-output state: the spec, the mode, what is left of the retries."""

    spec: OutputSpec
    mode: OutputMode
    retries_left: int
    validators: tuple[OutputValidator, ...]
    tool_name: str = FINAL_TOOL
    value: Any = None
    settled: bool = False
    last_invalid: Any = _UNSET

    @property
    def invalid(self) -> Any:
        """The last invalid value the model gave (``None`` when none)."""
        return None if self.last_invalid is _UNSET else self.last_invalid

    def declaration(self) -> dict[str, Any]:
        """The final-result tool, OpenAI-shaped (the Anthropic style converts it)."""
        return {
            "type": "function",
            "function": {
                "name": self.tool_name,
                "description": (
                    "Give the final result of the task. Call this exactly once, when "
                    "done, with the answer as its arguments; it ends the run."
                ),
                "parameters": self.spec.object_schema,
            },
        }

    def response_format(self) -> dict[str, Any]:
        """The OpenAI ``response_format`` of native mode (the Anthropic style maps it)."""
        return {
            "type": "json_schema",
            "json_schema": {
                "name": self.tool_name,
                "schema": self.spec.object_schema,
                "strict": self.spec.strict,
            },
        }

    def instructions(self) -> str:
        """The prompted mode's instructions (appended to the system prompt)."""
        schema = json.dumps(self.spec.object_schema, separators=(",", ":"))
        return (
            "When you give your final answer, answer with one JSON value and nothing "
            f"else, matching this JSON Schema: {schema}"
        )

    async def accept(self, data: Any) -> Any:
        """The typed value of *data* (what the model filled in), validators included.

        Raises :class:`OutputInvalid` with what to tell the model.
        """
        value = self.spec.build(self.spec.unwrap(data))
        for check in self.validators:
            try:
                out = check(value)
                if inspect.isawaitable(out):
                    await out
            except RetryOutput as exc:
                raise OutputInvalid(str(exc) or "the output validator asked again", data) from None
        return value

    def retry_or_stop(self, raw: Any) -> bool:
        """Record an invalid answer; ``True`` when a retry is left (and spent)."""
        self.last_invalid = raw
        if self.retries_left > 0:
            self.retries_left -= 1
            return True
        self.settled = True
        return False


def start_output(
    output_type: Any,
    mode: object,
    retries: object,
    validators: Sequence[OutputValidator] | None,
    tool_names: Sequence[str],
) -> OutputRun:
    """The state of one run with *output_type*; the final tool avoids *tool_names*."""
    check_mode(mode, retries)
    spec = output_spec(output_type)
    name, n = FINAL_TOOL, 1
    taken = set(tool_names)
    while name in taken:
        n += 1
        name = f"{FINAL_TOOL}_{n}"
    assert isinstance(retries, int)
    return OutputRun(spec, mode, retries, tuple(validators or ()), name)  # type: ignore[arg-type]


def json_from_text(text: str) -> Any:
    """The JSON value in a model's text: the whole text, a fenced block, or the span from
    the first ``{``/``[`` to the last ``}``/``]``. Raises :class:`OutputInvalid`."""
    stripped = text.strip()
    candidates = [stripped]
    if "```" in stripped:
        inside = stripped.split("```", 2)
        if len(inside) == 3:
            block = inside[1]
            block = block[4:] if block.startswith("json") else block
            candidates.append(block.strip())
    starts = [i for i in (stripped.find("{"), stripped.find("[")) if i >= 0]
    end = max(stripped.rfind("}"), stripped.rfind("]"))
    if starts and end > min(starts):
        candidates.append(stripped[min(starts) : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    raise OutputInvalid(
        f"the answer is not JSON ({_short(stripped)}): answer with one JSON value only", text
    )


def _short(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def partial_json(text: str) -> Any:
    """The value of an unfinished JSON text, as far as it goes (``None`` when nothing
    complete yet): open strings, arrays and objects are closed, a dangling key or a
    value in progress dropped. Used for streamed partial output; a few parses at most."""
    cuts: list[int] = []  # where a prefix can end: after { or [, before a comma
    stack: list[str] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            cuts.append(i + 1)
        elif ch in "}]" and stack:
            stack.pop()
        elif ch == ",":
            cuts.append(i)
    candidates = [text + ('"' if in_string and not escaped else "")]
    candidates += [text[:cut] for cut in reversed(cuts[-3:])]
    for candidate in candidates:
        try:
            return json.loads(candidate + "".join(reversed(_closers(candidate))))
        except (ValueError, RecursionError):
            continue
    return None


def _closers(text: str) -> list[str]:
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return stack


Emit = Callable[[dict[str, Any]], Awaitable[None]]

TOOL_ARGS_DELTA: Final = "tool_args_delta"
"""An event a streaming model source sends for each fragment of a tool call's
arguments (``{index, id, name, delta}``; ``id`` is ``""`` when the provider had not
named the call yet); the typed-output emitter and the typed events
(:func:`~toolnexus_trio.loop.stream_events`, as ``ToolCallArgs``) read it, and it never
reaches a SPEC §8 stream's consumer."""


def partial_emitter(out: OutputRun, emit: Emit) -> Emit:
    """*emit* plus ``output_partial {partial}`` events as the typed answer streams in.

    Tool mode follows the final tool's argument fragments; the other modes the text.
    Each partial is sent only when it differs from the one before. The answer so far is
    parsed again only once it has grown by an eighth since the last parse, so a long
    answer in many small deltas costs a few times its length, not its length squared.
    """
    pieces: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    names: dict[int, str] = {}
    text: list[str] = []
    state: dict[str, Any] = {"last": None, "parsed_at": 0, "text_size": 0, "json_at": None}

    async def send_partial(parts: list[str], size: int, skip: int = 0) -> None:
        if size < state["parsed_at"] + max(1, state["parsed_at"] // 8):
            return
        state["parsed_at"] = size
        partial = partial_json("".join(parts)[skip:])
        if partial is not None and partial != state["last"]:
            state["last"] = partial
            if out.spec.wrapped and isinstance(partial, dict):
                if "result" not in partial:
                    return
                partial = partial["result"]
            await emit({"type": "output_partial", "partial": partial})

    async def wrapped(event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == TOOL_ARGS_DELTA:
            index = event.get("index", 0)
            if event.get("name"):
                names[index] = str(event["name"])
            piece = str(event.get("delta") or "")
            pieces.setdefault(index, []).append(piece)
            sizes[index] = sizes.get(index, 0) + len(piece)
            if out.mode == "tool" and names.get(index) == out.tool_name:
                await send_partial(pieces[index], sizes[index])
            return
        if kind == "text" and out.mode != "tool":
            delta = str(event.get("delta") or "")
            if state["json_at"] is None:  # only from the first { or [: words may come first
                found = [i for i in (delta.find("{"), delta.find("[")) if i >= 0]
                if found:
                    state["json_at"] = state["text_size"] + min(found)
            text.append(delta)
            state["text_size"] += len(delta)
        if kind in ("tool_result", "output", "output_invalid"):  # the next turn starts afresh
            pieces.clear()
            sizes.clear()
            names.clear()
            text.clear()
            state.update(last=None, parsed_at=0, text_size=0, json_at=None)
        await emit(event)
        if kind == "text" and out.mode != "tool" and state["json_at"] is not None:
            await send_partial(text, state["text_size"], state["json_at"])

    return wrapped


def bounded_retry(
    toolkit: Toolkit | None, counts: dict[str, int], name: str, result: ToolResult
) -> ToolResult:
    """A :class:`~toolnexus_trio.RetryTool` result, counted in *counts* (the run's)
    against the tool's :attr:`~toolnexus_trio.Tool.retries`."""
    found = toolkit.get(name) if toolkit is not None else None
    allowed = found.retries if found is not None else 0
    used = counts.get(name, 0) + 1
    counts[name] = used
    if used <= allowed:
        message = f"{result.output} (call '{name}' again, fixing this)"
        return ToolResult.error(message, {"retry": used})
    message = f"{result.output} (no retries left for '{name}': {allowed} per run)"
    return ToolResult.error(message, {"retries_spent": allowed})


def output_data(value: Any) -> Any:
    """A typed output's JSON data (attrs classes, dataclasses, pydantic models...)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return payloads.unstructure(value)


def output_json(value: Any) -> str:
    """A typed output as JSON text (what a parent agent's ``task`` tool receives)."""
    return json.dumps(output_data(value), separators=(",", ":"))
