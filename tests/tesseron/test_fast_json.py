"""The host's hot-path JSON codec says exactly what the standard library says.

Frames are decoded and encoded without ``json.loads`` / ``json.dumps`` on the fast
path (see ``_wire``); these properties pin the results, and the errors, to theirs.
"""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolnexus_trio._converter import payloads
from toolnexus_trio.tesseron._wire import (
    _payload_json,
    decode,
    invoke_result_frame,
    parse_frame,
    percent_frame,
    progress_frame,
)

texts = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\ud800", 'quote " and \\ backslash', "\x00\x1f", "é✓", "\u2028"]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=10**40)
    | st.floats()  # NaN and the infinities too: the stdlib writes and reads them
    | texts
)
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(texts, kids, max_size=4),
    max_leaves=16,
)


def stdlib_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def same_json(a: Any, b: Any) -> bool:
    # NaN != NaN, so compare the canonical text of both.
    return stdlib_dumps(a) == stdlib_dumps(b)


def outcome(fn: Any, text: str) -> tuple[str, Any]:
    try:
        return ("ok", stdlib_dumps(fn(text)))
    except (ValueError, RecursionError) as exc:
        return ("error", type(exc))


@settings(max_examples=300, derandomize=True)
@given(values)
def test_decoding_matches_json_loads(value: Any) -> None:
    for text in (stdlib_dumps(value), json.dumps(value), f" {stdlib_dumps(value)} "):
        assert outcome(decode, text) == outcome(json.loads, text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "{}x",
        "{} ",
        "\ufeff{}",
        '{"a":1}{"b":2}',
        '{"a":NaN,"b":-Infinity}',
        '{"a":1,"a":2}',
        '{"s":"\\ud800"}',
        '{"s":"\x01"}',
        '{"n":1e400,"m":-0}',
        "[" * 100_000,
        '{"a":' * 100_000,
        "[]",
        '"x"',
    ],
)
def test_decoding_edge_cases_match_json_loads(text: str) -> None:
    assert outcome(decode, text) == outcome(json.loads, text)


@settings(max_examples=300, derandomize=True)
@given(values)
def test_encoding_plain_data_matches_json_dumps(value: Any) -> None:
    assert _payload_json(value) == stdlib_dumps(value)


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@attrs.frozen
class Point:
    x: int
    when: datetime.date
    tags: frozenset[str] = frozenset()


OUTPUTS: list[Any] = [
    Point(1, datetime.date(2026, 1, 2), frozenset({"a"})),
    [Point(2, datetime.date(2026, 1, 3)), {"k": Color.RED}],
    {"level": Level.HIGH, "when": datetime.datetime(2026, 1, 2, 3, 4, 5)},
    {1: "int key", None: "null key"},
    {Color.RED: "an enum key the converter turns into its value"},
    {"b": b"bytes"},
    (1, 2, [3]),
    {"set": {1}},
]


@pytest.mark.parametrize("output", OUTPUTS)
def test_encoding_user_data_matches_unstructure_then_dumps(output: Any) -> None:
    assert _payload_json(output) == stdlib_dumps(payloads.unstructure(output))


def test_data_neither_can_encode_raises_type_error() -> None:
    with pytest.raises(TypeError):
        _payload_json({"x": object()})


@settings(max_examples=100, derandomize=True)
@given(st.integers() | texts | st.none(), texts, values)
def test_invoke_answer_is_the_envelope_json_dumps_writes(rid: Any, inv: str, output: Any) -> None:
    expected = {"jsonrpc": "2.0", "id": rid, "result": {"invocationId": inv, "output": output}}
    assert invoke_result_frame(rid, inv, output) == stdlib_dumps(expected)


def test_progress_data_may_be_user_data() -> None:
    frame = json.loads(progress_frame("i", 5, None, Point(1, datetime.date(2026, 1, 2))))
    assert frame["params"] == {
        "invocationId": "i",
        "percent": 5,
        "data": {"x": 1, "when": "2026-01-02", "tags": []},
    }


def test_parse_frame_reports_bad_json_as_a_parse_error() -> None:
    assert parse_frame('{"jsonrpc":"2.0",').error.code == -32700  # type: ignore[union-attr]


@settings(max_examples=100, derandomize=True)
@given(texts, st.integers(min_value=0, max_value=100))
def test_percent_frame_is_progress_frame(inv: str, percent: int) -> None:
    assert percent_frame(inv, percent) == progress_frame(inv, percent, None, None)
