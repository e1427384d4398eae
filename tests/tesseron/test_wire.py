"""Pure wire-level tests: error codes, envelope classification, hot-path frames."""

from __future__ import annotations

import json

import attrs
import pytest

from toolnexus_trio.tesseron import (
    ActionError,
    ElicitRequest,
    LogEntry,
    SampleRequest,
    TesseronErrorCode,
)
from toolnexus_trio.tesseron._context import check_elicit_schema
from toolnexus_trio.tesseron._wire import (
    Invalid,
    Notification,
    ProgressParams,
    Request,
    Response,
    app_id_problem,
    invoke_result_frame,
    parse_frame,
    progress_frame,
    unstructure,
)


def test_all_seventeen_codes() -> None:
    expected = {
        "PARSE_ERROR": -32700,
        "INVALID_REQUEST": -32600,
        "METHOD_NOT_FOUND": -32601,
        "INVALID_PARAMS": -32602,
        "INTERNAL_ERROR": -32603,
        "PROTOCOL_MISMATCH": -32000,
        "CANCELLED": -32001,
        "TIMEOUT": -32002,
        "ACTION_NOT_FOUND": -32003,
        "INPUT_VALIDATION": -32004,
        "HANDLER_ERROR": -32005,
        "SAMPLING_NOT_AVAILABLE": -32006,
        "ELICITATION_NOT_AVAILABLE": -32007,
        "SAMPLING_DEPTH_EXCEEDED": -32008,
        "UNAUTHORIZED": -32009,
        "TRANSPORT_CLOSED": -32010,
        "RESUME_FAILED": -32011,
    }
    assert {c.name: c.value for c in TesseronErrorCode} == expected


def test_action_error_constructors() -> None:
    err = ActionError.handler("nope", {"why": 1})
    assert (err.code, err.message, err.data) == (
        TesseronErrorCode.HANDLER_ERROR,
        "nope",
        {"why": 1},
    )
    assert err.to_wire() == {"code": -32005, "message": "nope", "data": {"why": 1}}
    err = ActionError.protocol(TesseronErrorCode.SAMPLING_DEPTH_EXCEEDED, "deep", {"depth": 4})
    assert err.code is TesseronErrorCode.SAMPLING_DEPTH_EXCEEDED
    cause = RuntimeError("secret detail")
    err = ActionError.internal(cause)
    assert (err.code, err.message) == (TesseronErrorCode.INTERNAL_ERROR, "Internal error")
    assert err.__cause__ is cause
    assert "secret" not in json.dumps(err.to_wire())
    # A code outside the catalogue is kept exactly.
    assert ActionError.protocol(-1, "odd").code == -1


@pytest.mark.parametrize(
    ("text", "kind", "code", "reply"),
    [
        ("{not json", Invalid, -32700, True),
        ("[1, 2]", Invalid, -32600, True),
        ('{"id": 7, "method": "x"}', Invalid, -32600, True),
        ('{"method": "x"}', Invalid, -32600, False),
        ('{"jsonrpc": "2.0", "id": 7, "method": "x"}', Request, None, None),
        ('{"jsonrpc": "2.0", "id": null, "method": "x"}', Request, None, None),
        ('{"jsonrpc": "2.0", "method": "x"}', Notification, None, None),
        ('{"jsonrpc": "2.0", "id": 3, "result": null}', Response, None, None),
        (
            '{"jsonrpc": "2.0", "id": 3, "error": {"code": -32008, "message": "m"}}',
            Response,
            None,
            None,
        ),
        ('{"jsonrpc": "2.0", "id": 3}', Invalid, -32600, True),
    ],
)
def test_parse_frame(text: str, kind: type, code: int | None, reply: bool | None) -> None:
    parsed = parse_frame(text)
    assert type(parsed) is kind
    if isinstance(parsed, Invalid):
        assert parsed.error.code == code
        assert parsed.reply is reply


def test_missing_jsonrpc_echoes_the_id() -> None:
    parsed = parse_frame('{"id": "abc", "method": "actions/invoke"}')
    assert isinstance(parsed, Invalid)
    assert parsed.id == "abc"


def test_error_response_keeps_data() -> None:
    parsed = parse_frame(
        '{"jsonrpc":"2.0","id":2,"error":{"code":-32008,"message":"m","data":{"depth":4,"max":3}}}'
    )
    assert isinstance(parsed, Response)
    assert parsed.error is not None
    assert parsed.error.code == TesseronErrorCode.SAMPLING_DEPTH_EXCEEDED
    assert parsed.error.data == {"depth": 4, "max": 3}


@pytest.mark.parametrize(
    ("percent", "message", "data"),
    [(10, None, None), (None, "m", None), (0, "x", {"a": 1}), (None, None, None)],
)
def test_progress_frame_matches_the_wire_type(
    percent: int | None, message: str | None, data: object
) -> None:
    frame = json.loads(progress_frame("i-1", percent, message, data))
    params = unstructure(ProgressParams("i-1", message=message, percent=percent, data=data))
    assert frame == {"jsonrpc": "2.0", "method": "actions/progress", "params": params}
    assert "id" not in frame


def test_invoke_result_keeps_null_output() -> None:
    frame = json.loads(invoke_result_frame(None, "i-1", None))
    assert frame == {
        "jsonrpc": "2.0",
        "id": None,
        "result": {"invocationId": "i-1", "output": None},
    }


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {}},
        {"type": "object"},
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"description": "untyped"}}},
        {"type": "object", "oneOf": []},  # falsy combinators are ignored, as in JS
    ],
)
def test_elicit_schema_allowed(schema: dict[str, object]) -> None:
    check_elicit_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        [],
        {"properties": {}},
        {"type": "object", "oneOf": [{"type": "object"}]},
        {"type": "object", "anyOf": [{"type": "object"}]},
        {"type": "object", "allOf": [{"type": "object"}]},
        {"type": "object", "not": {"type": "object"}},
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"type": "array"}}},
        {"type": "object", "properties": {"a": {"type": ["array", "string"]}}},
    ],
)
def test_elicit_schema_refused(schema: object) -> None:
    with pytest.raises(ActionError) as info:
        check_elicit_schema(schema)
    assert info.value.code == TesseronErrorCode.INVALID_PARAMS


def test_log_entry_builders() -> None:
    entry = LogEntry.info("halfway").meta({"a": 1}).meta({"b": 2})
    assert (entry.level, entry.message, entry.metadata) == ("info", "halfway", {"a": 1, "b": 2})
    assert [LogEntry.debug("m").level, LogEntry.warn("m").level, LogEntry.error("m").level] == [
        "debug",
        "warn",
        "error",
    ]


@attrs.frozen
class Suggested:
    items: list[str]


def test_requests_for_type() -> None:
    sample = SampleRequest.for_type(Suggested, "p", max_tokens=400)
    assert sample.schema is not None
    assert sample.schema["properties"] == {"items": {"type": "array", "items": {"type": "string"}}}
    assert sample.max_tokens == 400
    elicit = ElicitRequest.for_type(Suggested, "q")
    assert elicit.schema == sample.schema


@pytest.mark.parametrize("app_id", ["shop\n", "shop\r", "Shop", "1shop", "", "tesseron"])
def test_app_ids_are_checked_whole(app_id: str) -> None:
    # ``$`` also matches before a final newline: the check must cover the whole string.
    assert app_id_problem(app_id) is not None
    assert app_id_problem("shop_2") is None
