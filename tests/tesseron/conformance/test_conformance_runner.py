"""The conformance runner itself: matchers, send resolution and failure reports.

A runner that cannot fail proves nothing, so it is run here against scripted fake
hosts (our WebSocket server over real loopback sockets) that misbehave on purpose.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
import trio
from runner import ConformanceFailure, FixtureError, load_fixture, match, resolve, run_fixture

from toolnexus_trio._groups import collapse_groups
from toolnexus_trio.tesseron._ws import WebSocket, WebSocketClosed
from toolnexus_trio.tesseron._ws_server import serve_websocket

FIXTURE_ROOT = Path(__file__).resolve().parent / "fixtures"
GUARD = 15

HELLO = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tesseron/hello",
    "params": {
        "protocolVersion": "1.2.0",
        "app": {"id": "demo", "name": "Demo", "origin": "http://127.0.0.1"},
        "actions": [],
        "resources": [],
        "capabilities": {
            "streaming": True,
            "subscriptions": True,
            "sampling": False,
            "elicitation": False,
        },
    },
}


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ("~any", None),
        ("~string", "x"),
        ("~number", 1.5),
        ("~number", 3),
        ("~boolean", False),
        ("~object", {}),
        ("~array", []),
        ("~regex:^1\\.[0-9]+$", "1.22"),
        ({"a": 1}, {"a": 1, "extra": True}),
        ({"a": "~absent"}, {"b": 1}),
        ([1, {"k": "~string"}], [1, {"k": "v", "z": 0}, "more"]),
        (3, 3.0),
    ],
)
def test_match_accepts(expected: Any, actual: Any) -> None:
    assert match(expected, actual, {}) is None


@pytest.mark.parametrize(
    ("expected", "actual", "why"),
    [
        ("~string", 1, "expected string"),
        ("~number", True, "expected number"),
        ("~boolean", 0, "expected boolean"),
        ("~object", [], "expected object"),
        ("~array", {}, "expected array"),
        ("~regex:^1\\.", "2.0", "matching"),
        ({"a": 1}, {"a": 2}, "$.a: expected 1, got 2"),
        ({"a": 1}, {}, "$.a: missing"),
        ({"a": "~absent"}, {"a": None}, "must be absent"),
        ([1, 2], [1], "at least 2"),
        ([1, 2], [1, 3], "$[1]"),
        (1, True, "expected 1, got true"),
    ],
)
def test_match_rejects(expected: Any, actual: Any, why: str) -> None:
    reason = match(expected, actual, {})
    assert reason is not None
    assert why in reason


def test_capture_then_ref() -> None:
    captures: dict[str, Any] = {}
    assert match({"id": "~capture:x"}, {"id": 42}, captures) is None
    assert captures == {"x": 42}
    assert match({"id": "~ref:x"}, {"id": 42}, captures) is None
    assert match({"id": "~ref:x"}, {"id": "42"}, captures) is not None
    with pytest.raises(FixtureError):
        match("~ref:nope", 1, captures)
    with pytest.raises(FixtureError):
        match("~teleport", 1, captures)


def test_resolve_substitutes_refs_and_omits_absent_keys() -> None:
    frame = resolve({"id": "~ref:h", "result": {"claimCode": "~absent", "t": ["~ref:h"]}}, {"h": 5})
    assert frame == {"id": 5, "result": {"t": [5]}}
    with pytest.raises(FixtureError):
        resolve({"id": "~string"}, {})


Script = Callable[[WebSocket], Awaitable[None]]


async def run_against(script: Script, fixture: dict[str, Any], **kwargs: Any) -> None:
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            await _serve_and_run(nursery, script, fixture, **kwargs)


async def _serve_and_run(
    nursery: trio.Nursery, script: Script, fixture: dict[str, Any], **kwargs: Any
) -> None:
    server = functools.partial(serve_websocket, script, host="127.0.0.1", port=0)
    port = cast(int, await nursery.start(server))
    try:
        await run_fixture(fixture, f"ws://127.0.0.1:{port}/", **kwargs)
    finally:
        nursery.cancel_scope.cancel()


async def hold_open(ws: WebSocket) -> None:
    try:
        while True:
            await ws.receive_batch()
    except WebSocketClosed:
        return


def hello_then(rest: Script | None = None, hello: dict[str, Any] = HELLO) -> Script:
    async def script(ws: WebSocket) -> None:
        await ws.send(json.dumps(hello))
        welcome = json.loads((await ws.receive_batch())[0])
        assert welcome["id"] == hello["id"]
        await (rest or hold_open)(ws)

    return script


async def test_a_well_behaved_fake_host_passes() -> None:
    labels: list[str] = []

    async def after_step(label: str) -> None:
        labels.append(label)

    fixture = load_fixture(FIXTURE_ROOT / "handshake" / "hello-minimal.json")
    fixture["steps"][1]["label"] = "welcomed"
    with trio.fail_after(GUARD):
        await run_against(hello_then(), fixture, after_step=after_step)
    assert labels == ["welcomed"]


async def test_failure_names_fixture_step_expected_and_actual() -> None:
    params = cast(dict[str, Any], HELLO["params"])
    bad = {**HELLO, "params": {**params, "protocolVersion": "2.0.0"}}
    fixture = load_fixture(FIXTURE_ROOT / "handshake" / "hello-minimal.json")
    with trio.fail_after(GUARD), pytest.raises(ConformanceFailure) as info:
        await run_against(hello_then(hello=bad), fixture)
    text = str(info.value)
    assert text.startswith("handshake/hello-minimal: step 0 (recv) failed:")
    assert "$.params.protocolVersion" in text
    assert "expected: " in text and "~regex:" in text
    assert 'actual:   {"id": 7' in text and "2.0.0" in text


async def test_recv_timeout_fails() -> None:
    fixture = {
        "id": "t/timeout",
        "steps": [{"recv": {"method": "tesseron/hello"}, "timeoutMs": 50}],
    }
    with trio.fail_after(GUARD), pytest.raises(ConformanceFailure, match="no frame within 50 ms"):
        await run_against(hold_open, fixture)


async def test_expect_closed_fails_when_host_resends_hello() -> None:
    async def resend(ws: WebSocket) -> None:
        await ws.send(json.dumps(HELLO))
        await hold_open(ws)

    fixture = load_fixture(FIXTURE_ROOT / "handshake" / "protocol-major-mismatch.json")
    with trio.fail_after(GUARD), pytest.raises(ConformanceFailure) as info:
        await run_against(hello_then(resend), fixture)
    assert "step 2 (expectClosed)" in str(info.value)
    assert "tesseron/hello" in str(info.value)


async def test_expect_closed_fails_when_host_stays_open() -> None:
    fixture = load_fixture(FIXTURE_ROOT / "handshake" / "protocol-major-mismatch.json")
    fixture["steps"][2]["timeoutMs"] = 100
    with trio.fail_after(GUARD), pytest.raises(ConformanceFailure, match="still open"):
        await run_against(hello_then(), fixture)


async def test_expect_closed_passes_when_host_closes() -> None:
    async def leave(ws: WebSocket) -> None:
        return  # returning closes the connection

    fixture = load_fixture(FIXTURE_ROOT / "handshake" / "protocol-major-mismatch.json")
    with trio.fail_after(GUARD):
        await run_against(hello_then(leave), fixture)


async def test_expect_silence_fails_on_a_leaked_update() -> None:
    fixture = {
        "id": "t/silence",
        "steps": [
            {"send": {"jsonrpc": "2.0", "method": "go"}},
            {"expectSilence": {"method": "resources/updated"}, "timeoutMs": 2000},
        ],
    }

    async def leak(ws: WebSocket) -> None:
        await ws.receive_batch()
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "log", "params": {}}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "resources/updated"}))
        await hold_open(ws)

    with trio.fail_after(GUARD), pytest.raises(ConformanceFailure, match="expected silence"):
        await run_against(leak, fixture)


async def test_malformed_fixtures_are_refused() -> None:
    for fixture in (
        {"id": "t/empty", "steps": []},
        {"id": "t/two-kinds", "steps": [{"recv": {}, "send": {}}]},
        {"id": "t/unknown", "steps": [{"teleport": True}]},
    ):
        with pytest.raises(FixtureError):
            await run_fixture(fixture, "ws://127.0.0.1:1/")
