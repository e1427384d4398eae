"""The JSON form of a :class:`~toolnexus_trio.RunResult`: versioned, JSON-safe, read strictly.

``RunResult.to_json()`` writes every key, ``null`` where there is no value, so a
document with a key missing is damaged, not old (``output``, added with typed results,
and ``cost``, added with prices, are the keys written only when they have a value).
``RunResult.from_json()`` checks the version first (a newer one is refused with a
message that says so), then the shape with the project's strict converter (``"false"``
is not a boolean, ``"3"`` not an integer, unknown keys are refused), then that the
parts agree: a pending result has its suspended calls, and each of them points at its
own tool message and record.

Keys are snake_case like ``RunResult`` itself; a ``Request`` keeps its wire form
(``expiresAt``), as SPEC §10 pins it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from .._converter import describe_structure_error, make_strict, payloads
from .._schema import MAX_JSON_DEPTH
from .._wire import Request
from ._records import RunStatus, SuspendedCall, ToolCallRecord

if TYPE_CHECKING:
    from ._results import RunResult

RUN_RESULT_VERSION = 1
"""The version :meth:`RunResult.to_json` writes and the newest :meth:`RunResult.from_json` reads."""

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
_DEPTH = MAX_JSON_DEPTH + 8  # a slot (a message, args, metadata) holds model JSON one level down


@attrs.frozen
class _RecordDoc:
    id: str
    name: str
    args: Any
    output: str
    is_error: bool
    metadata: dict[str, Any] | None


@attrs.frozen
class _SuspendedDoc:
    id: str
    name: str
    args: dict[str, Any]
    request: dict[str, Any]
    message_index: int
    record_index: int


@attrs.frozen
class _RunDoc:
    version: int
    text: str
    status: RunStatus
    messages: list[dict[str, Any]]
    tool_calls: list[_RecordDoc]
    turns: int
    usage: dict[str, int]
    model: str
    pending: dict[str, Any] | None
    limit: str | None
    suspended: list[_SuspendedDoc]
    # The suspended run's span (W3C traceparent), written only when tracing saw one,
    # so that a resume in another process links to it.
    trace_parent: str | None = None
    output: Any = None
    cost: float | None = None


# Attribute names as keys (snake_case), unknown keys refused, value kinds strict.
_docs = make_strict(make_converter(forbid_extra_keys=True))


class _NotJson(ValueError):
    pass


def _json_value(value: Any, where: str, *, lenient: bool, depth: int = 0) -> Any:
    """A JSON-safe copy of *value*; what is not JSON raises, or becomes its repr if *lenient*."""
    if depth > _DEPTH:
        raise _NotJson(f"{where} nests more than {_DEPTH} levels")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if lenient:
            return repr(value)
        raise _NotJson(f"{where} is {value!r}, which JSON cannot hold")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                if not lenient:
                    raise _NotJson(f"{where} has a {type(key).__name__} key {key!r:.40}")
                key = repr(key)
            out[key] = _json_value(item, f"{where}.{key}", lenient=lenient, depth=depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [
            _json_value(item, f"{where}[{i}]", lenient=lenient, depth=depth + 1)
            for i, item in enumerate(value)
        ]
    if isinstance(value, Request):
        return _json_value(value.to_json(), where, lenient=lenient, depth=depth + 1)
    if attrs.has(type(value)) or isinstance(value, enum.Enum):
        unstructured = payloads.unstructure(value)
        return _json_value(unstructured, where, lenient=lenient, depth=depth + 1)
    if lenient:
        return repr(value)
    raise _NotJson(f"{where} is a {type(value).__name__}, which is not JSON")


def _record_json(r: ToolCallRecord, i: int) -> dict[str, Any]:
    return {
        "id": r.id,
        "name": r.name,
        "args": _json_value(r.args, f"tool_calls[{i}].args", lenient=False),
        "output": r.output,
        "is_error": r.is_error,
        # Tool metadata is informative only (resume never reads it), so a value
        # that is not JSON is kept as its repr rather than failing a durable save.
        "metadata": None
        if r.metadata is None
        else _json_value(r.metadata, f"tool_calls[{i}].metadata", lenient=True),
    }


def run_result_to_json(result: RunResult) -> dict[str, Any]:
    """See :meth:`RunResult.to_json`."""
    try:
        messages = [
            _json_value(m, f"messages[{i}]", lenient=False) for i, m in enumerate(result.messages)
        ]
        records = [_record_json(r, i) for i, r in enumerate(result.tool_calls)]
        suspended = [
            {
                "id": s.id,
                "name": s.name,
                "args": _json_value(s.args, f"suspended[{i}].args", lenient=False),
                "request": _json_value(s.request, f"suspended[{i}].request", lenient=False),
                "message_index": s.message_index,
                "record_index": s.record_index,
            }
            for i, s in enumerate(result.suspended)
        ]
        usage = _json_value(result.usage, "usage", lenient=False)
        output = _json_value(_dumped(result.output), "output", lenient=False)
        pending = _json_value(result.pending, "pending", lenient=False)
    except _NotJson as exc:
        raise ValueError(f"RunResult.to_json: {exc}") from None
    except RecursionError:
        raise ValueError("RunResult.to_json: a value nests too deeply") from None
    document = {
        "version": RUN_RESULT_VERSION,
        "text": result.text,
        "status": result.status,
        "messages": messages,
        "tool_calls": records,
        "turns": result.turns,
        "usage": usage,
        "model": result.model,
        "pending": pending,
        "limit": result.limit,
        "suspended": suspended,
    }
    if result.trace_parent is not None:
        document["trace_parent"] = result.trace_parent
    if output is not None:
        # Only when there is one: a run without typed output writes the very document
        # it wrote before typed results existed (older readers refuse unknown keys).
        document["output"] = output
    if result.cost is not None:
        # Likewise: without prices the document is as it was. A resumed run adds its
        # calls to this, so a run paused and answered elsewhere still has its cost.
        document["cost"] = result.cost
    # Whatever is written must load back: a result from_json would refuse (negative
    # usage, a suspended call pointing at the wrong message...) fails here, where it
    # can still be handled, not when a paused run is loaded to be answered.
    try:
        run_result_fields(document)
    except ValueError as exc:
        raise ValueError(f"RunResult.to_json: the result would not load back: {exc}") from None
    return document


class RunSnapshots:
    """:meth:`RunResult.to_json` of one run in progress, again and again, in time
    proportional to what changed: a durable run's checkpoint at each step.

    Messages are immutable values (the loop never changes one in place) and records
    are frozen, so an item that is the very object converted last time at the same
    index has the same JSON: only the items after the common prefix are converted and
    checked (``run_result_fields`` on a document of just them, the check
    :meth:`RunResult.to_json` makes of the whole). A transcript replaced by a hook
    or compaction shares no prefix and is converted whole, once.
    """

    def __init__(self) -> None:
        self._messages: tuple[list[Any], list[Any]] = ([], [])  # (objects, their JSON)
        self._records: tuple[list[Any], list[Any]] = ([], [])

    def document(
        self,
        *,
        text: str,
        messages: list[Any],
        records: list[ToolCallRecord],
        turns: int,
        usage: dict[str, int],
        model: str,
    ) -> dict[str, Any]:
        """The ``to_json`` document of a ``"done"`` result with these fields (no
        suspended call, pending request, typed output or trace parent)."""
        try:
            messages_at, new_messages = _fresh(
                self._messages[0],
                messages,
                lambda m, i: _json_value(m, f"messages[{i}]", lenient=False),
            )
            records_at, new_records = _fresh(self._records[0], records, _record_json)
            usage_json = _json_value(usage, "usage", lenient=False)
        except _NotJson as exc:
            raise ValueError(f"RunResult.to_json: {exc}") from None
        except RecursionError:
            raise ValueError("RunResult.to_json: a value nests too deeply") from None
        document = {
            "version": RUN_RESULT_VERSION,
            "text": text,
            "status": "done",
            "messages": new_messages,
            "tool_calls": new_records,
            "turns": turns,
            "usage": usage_json,
            "model": model,
            "pending": None,
            "limit": None,
            "suspended": [],
        }
        try:
            run_result_fields(document)  # the new items and the scalars, as to_json checks
        except ValueError as exc:
            raise ValueError(f"RunResult.to_json: the result would not load back: {exc}") from None
        # Kept only once checked: an item in the cache is never checked again.
        document["messages"] = _keep(self._messages, messages_at, messages, new_messages)
        document["tool_calls"] = _keep(self._records, records_at, records, new_records)
        return document


def _fresh(sources: list[Any], items: list[Any], convert: Any) -> tuple[int, list[Any]]:
    """How many of *items* are *sources*' own first objects, and the JSON of the rest."""
    same = 0
    limit = min(len(sources), len(items))
    while same < limit and items[same] is sources[same]:
        same += 1
    return same, [convert(item, i) for i, item in enumerate(items[same:], same)]


def _keep(
    cache: tuple[list[Any], list[Any]], same: int, items: list[Any], fresh: list[Any]
) -> list[Any]:
    """Cut *cache* to its first *same* items, add *items*' new ones; its JSON, a copy."""
    sources, converted = cache
    del sources[same:], converted[same:]
    sources.extend(items[same:])
    converted.extend(fresh)
    return list(converted)


def _invalid(why: str) -> ValueError:
    return ValueError(f"invalid RunResult document: {why}")


def _check_version(data: dict[str, Any]) -> None:
    if "version" not in data:
        raise _invalid(f"no 'version' key (this toolnexus_trio writes {RUN_RESULT_VERSION})")
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise _invalid(f"'version' must be an integer, not {type(version).__name__}")
    if version > RUN_RESULT_VERSION:
        raise ValueError(
            f"RunResult document version {version} is newer than this toolnexus_trio reads "
            f"(up to {RUN_RESULT_VERSION}): upgrade toolnexus_trio to read it"
        )
    if version < 1:
        raise _invalid(f"unknown version {version}")


def _request(data: dict[str, Any], where: str) -> Request:
    try:
        return Request.from_json(data)
    except ValueError as exc:
        raise _invalid(f"{where}: {exc}") from None


def _metadata(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    # SPEC §10: a result is suspended iff metadata.pending is a Request, so a Request
    # that went out as its wire form comes back as one.
    if metadata is None or not isinstance(metadata.get("pending"), dict):
        return metadata
    try:
        return {**metadata, "pending": Request.from_json(metadata["pending"])}
    except ValueError:
        return metadata


def run_result_fields(data: Any) -> dict[str, Any]:
    """The fields of the :class:`RunResult` a document holds (see :meth:`RunResult.from_json`,
    which builds it: this module does not import the class it reads)."""
    if not isinstance(data, dict):
        raise _invalid(f"expected a JSON object, got {type(data).__name__}")
    _check_version(data)
    try:
        doc = _docs.structure(data, _RunDoc)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        raise _invalid(describe_structure_error(exc)) from None
    if doc.turns < 0:
        raise _invalid("turns must not be negative")
    for key in _USAGE_KEYS:
        if doc.usage.get(key, -1) < 0:
            raise _invalid(f"usage.{key} must be a non-negative integer")
    for i, message in enumerate(doc.messages):
        if not isinstance(message.get("role"), str):
            raise _invalid(f"messages[{i}] has no string 'role'")
    if doc.cost is not None and not (math.isfinite(doc.cost) and doc.cost >= 0):
        raise _invalid(f"cost must be a finite number >= 0, not {doc.cost!r}")
    if doc.limit is not None and doc.status != "incomplete":
        raise _invalid(f"'limit' is set but status is {doc.status!r}, not 'incomplete'")
    pending = None if doc.pending is None else _request(doc.pending, "pending")
    suspended = tuple(
        SuspendedCall(
            s.id,
            s.name,
            s.args,
            _request(s.request, f"suspended[{i}].request"),
            s.message_index,
            s.record_index,
        )
        for i, s in enumerate(doc.suspended)
    )
    if doc.status == "pending":
        if pending is None or not suspended:
            raise _invalid("status is 'pending' but 'pending' or 'suspended' is empty")
        if pending != suspended[0].request:
            raise _invalid("'pending' is not the first suspended call's request")
    elif pending is not None or suspended:
        raise _invalid(f"status is {doc.status!r} but the document has suspended calls")
    _check_suspended(doc, suspended)
    records = [
        ToolCallRecord(r.id, r.name, r.args, r.output, r.is_error, _metadata(r.metadata))
        for r in doc.tool_calls
    ]
    return {
        "text": doc.text,
        "status": doc.status,
        "messages": doc.messages,
        "tool_calls": records,
        "turns": doc.turns,
        "usage": dict(doc.usage),
        "model": doc.model,
        "pending": pending,
        "limit": doc.limit,
        "suspended": suspended,
        "trace_parent": doc.trace_parent,
        "output": doc.output,
        "cost": doc.cost,
    }


def _dumped(value: Any) -> Any:
    """A typed output's JSON form (dataclasses, TypedDicts and pydantic models too)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return payloads.unstructure(value)


def _check_suspended(doc: _RunDoc, suspended: tuple[SuspendedCall, ...]) -> None:
    # resume replaces messages[message_index] and tool_calls[record_index]: a wrong
    # index would overwrite another call's result, so each must point at its own call.
    seen_messages: set[int] = set()
    seen_records: set[int] = set()
    for i, s in enumerate(suspended):
        where = f"suspended[{i}]"
        if not 0 <= s.message_index < len(doc.messages):
            raise _invalid(f"{where}.message_index {s.message_index} is out of range")
        message = doc.messages[s.message_index]
        if message.get("role") != "tool" or message.get("tool_call_id") != s.id:
            raise _invalid(f"{where}.message_index does not point at the tool message of {s.id!r}")
        if not 0 <= s.record_index < len(doc.tool_calls):
            raise _invalid(f"{where}.record_index {s.record_index} is out of range")
        if doc.tool_calls[s.record_index].id != s.id:
            raise _invalid(f"{where}.record_index does not point at the record of {s.id!r}")
        if s.message_index in seen_messages or s.record_index in seen_records:
            raise _invalid(f"{where} shares its message or record with another suspended call")
        seen_messages.add(s.message_index)
        seen_records.add(s.record_index)
