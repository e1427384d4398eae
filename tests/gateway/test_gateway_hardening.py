"""Gateway regressions from review: hostile hosts, close races, and frames checked on the wire."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from gateway_helpers import FakeGateway, wait_until
from gateway_rig import fake_host, hello_params, until_closed

from toolnexus_trio import (
    Answer,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.builtins import BUILTIN_ORDER
from toolnexus_trio.tesseron import ActionError, Gateway, GatewayOptions

ACTION = {"name": "act", "description": "d", "inputSchema": {"type": "object"}, "timeoutMs": 60000}


async def _hello(peer: FakeGateway, **extra: Any) -> dict[str, Any]:
    rid = peer.request("tesseron/hello", hello_params(actions=[ACTION], **extra))
    return (await peer.response(rid))["result"]  # type: ignore[no-any-return]


async def _claimed(peer: FakeGateway) -> dict[str, Any]:
    """Say hello, then wait for the gateway's (auto-)claim; returns the welcome."""
    welcome = await _hello(peer)
    await peer.expect_method("tesseron/claimed")
    return welcome


def _ask(peer: FakeGateway, inv_id: str, question: str) -> Any:
    """Send a yes/no elicitation/request for *inv_id*; returns its request id."""
    schema = {"type": "object", "properties": {}}
    return peer.request(
        "elicitation/request", {"invocationId": inv_id, "question": question, "schema": schema}
    )


async def _invoke_request(peer: FakeGateway) -> dict[str, Any]:
    while True:
        frame = await peer.recv()
        if frame.get("method") == "actions/invoke":
            return frame


async def test_a_question_arriving_with_the_answer_does_not_hold_the_call() -> None:
    asked: list[str] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request.prompt)
        await trio.sleep_forever()  # a human who never answers
        raise AssertionError

    async def host_side(peer: FakeGateway) -> None:
        await _claimed(peer)
        for _ in range(10):
            invoke = await _invoke_request(peer)
            inv_id = invoke["params"]["invocationId"]
            question = {"invocationId": inv_id, "question": "sure?", "schema": {"type": "object", "properties": {}}}  # fmt: skip
            # One write: the question, then the timeout answer right behind it.
            peer.send_text(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 900,
                        "method": "elicitation/request",
                        "params": question,
                    }
                )
            )
            peer.send({"jsonrpc": "2.0", "id": invoke["id"], "error": {"code": -32002, "message": "Timed out"}})  # fmt: skip
            answer = await peer.recv()
            while answer.get("id") != 900:
                answer = await peer.recv()
            assert answer["error"]["code"] == -32001  # the abandoned question is answered
        await until_closed(peer)

    with trio.fail_after(20):
        async with (
            fake_host(host_side) as url,
            Gateway(GatewayOptions(wait_for=wait_for, auto_claim=True)) as gw,
        ):
            await gw.connect(url)
            for _ in range(10):
                with pytest.raises(ActionError, match="Timed out"):
                    await gw.invoke("fake", "act", {})
    assert set(asked) <= {"sure?"}  # a question may or may not reach wait_for first


async def test_closing_while_a_connection_is_still_dialling() -> None:
    accepted = trio.Event()

    async def silent(stream: trio.SocketStream) -> None:
        accepted.set()
        await trio.sleep_forever()  # never answers the upgrade

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            async with Gateway() as gw:
                toolkit = await create_toolkit(ToolkitOptions(tesseron=gw, builtins=False))
                outcome: list[BaseException] = []

                async def dial() -> None:
                    try:
                        await gw.connect(f"ws://127.0.0.1:{port}/")
                    except Exception as exc:
                        outcome.append(exc)

                nursery.start_soon(dial)
                await accepted.wait()
                await trio.testing.wait_all_tasks_blocked()
                await toolkit.aclose()
                await wait_until(lambda: outcome)
                assert isinstance(outcome[0], trio.ClosedResourceError)
                assert gw.sessions() == [] and toolkit.tools() == []
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
        {"type": "object", "properties": 7},
    ],
)
async def test_a_hostile_schema_leaves_the_toolkit_working(schema: dict[str, Any]) -> None:
    async def host_side(peer: FakeGateway) -> None:
        bad = dict(ACTION, inputSchema=schema)
        rid = peer.request("tesseron/hello", hello_params(actions=[bad]))
        await peer.response(rid)
        await until_closed(peer)

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            await gw.connect(url)
            async with await create_toolkit(ToolkitOptions(tesseron=gw)) as toolkit:
                names = [t.name for t in toolkit.tools()]
                assert names == [*BUILTIN_ORDER, "fake__act"]
                found = toolkit.get("fake__act")
                assert found is not None and found.input_schema == {"type": "object"}
                assert len(toolkit.to_openai()) == len(BUILTIN_ORDER) + 1


async def test_hostile_ids_and_tokens_get_clear_answers() -> None:
    answers: dict[str, dict[str, Any]] = {}

    async def host_side(peer: FakeGateway) -> None:
        welcome = await _claimed(peer)
        for key, inv_id in (("list", ["a"]), ("object", {"x": 1})):
            rid = peer.request("sampling/request", {"invocationId": inv_id, "prompt": "p"})
            answers[key] = await peer.response(rid)
        answers["welcome"] = welcome
        await until_closed(peer)

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            session = await gw.connect(url)
            await wait_until(lambda: "welcome" in answers)
            assert session.connected
    assert answers["list"]["error"]["code"] == -32602
    assert answers["object"]["error"]["code"] == -32602


async def test_a_resume_token_with_a_lone_surrogate_is_refused_with_32011() -> None:
    dials = [0]
    refused: list[dict[str, Any]] = []

    async def host_side(peer: FakeGateway) -> None:
        dials[0] += 1
        if dials[0] == 1:
            welcome = await _hello(peer)
            peer.sid = welcome["sessionId"]  # type: ignore[attr-defined]
            sid_box.append(welcome["sessionId"])
            await peer.expect_method("tesseron/claimed")
            return
        params = hello_params(actions=[ACTION], sessionId=sid_box[0])
        raw = json.dumps(
            {"jsonrpc": "2.0", "id": 77, "method": "tesseron/resume", "params": params}
        )
        peer.send_text(raw[:-2] + ', "resumeToken": "\\ud800"}}')
        refused.append(await peer.response(77))
        rid = peer.request("tesseron/hello", hello_params(actions=[ACTION]))
        await peer.response(rid)
        await until_closed(peer)

    sid_box: list[str] = []
    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            await gw.connect(url)
            await wait_until(lambda: len(gw.sessions()) == 1 and not gw.sessions()[0].connected)
            fresh = await gw.connect(url)
            assert fresh.session_id != sid_box[0]
    assert refused[0]["error"]["code"] == -32011


async def test_discovery_skips_a_manifest_with_an_impossible_pid(tmp_path: Path) -> None:
    manifest = {
        "version": 2, "instanceId": "inst-x", "appName": "x", "addedAt": 1,
        "pid": 2**40, "transport": {"kind": "ws", "url": "ws://127.0.0.1:9/"},
    }  # fmt: skip
    (tmp_path / "inst-x.json").write_text(json.dumps(manifest))
    with trio.fail_after(10):
        async with Gateway() as gw:
            assert await gw.discover(tmp_path) == []


async def test_wire_frames_decline_one_cancel_and_clamped_progress() -> None:
    seen: dict[str, Any] = {"cancels": 0}
    progress: list[Any] = []

    async def wait_for(request: Request) -> Answer:
        return Answer(request.id, False, reason="declined")

    async def host_side(peer: FakeGateway) -> None:
        await _claimed(peer)
        # 1. a declined elicitation is "decline" on the wire, not "cancel"
        invoke = await _invoke_request(peer)
        inv_id = invoke["params"]["invocationId"]
        for percent, message in ((-5, "a"), (30, "b"), (20, "c"), (None, "d"), (150, "e")):
            params: dict[str, Any] = {"invocationId": inv_id, "message": message}
            if percent is not None:
                params["percent"] = percent
            peer.notify("actions/progress", params)
        rid = peer.request("elicitation/request", {"invocationId": inv_id, "question": "ok?", "schema": {"type": "object", "properties": {}}})  # fmt: skip
        seen["elicit"] = (await peer.response(rid))["result"]
        peer.respond(invoke["id"], {"invocationId": inv_id, "output": "fine"})
        # 2. a cancelled call sends exactly one actions/cancel
        invoke = await _invoke_request(peer)
        seen["second"] = invoke["params"]["invocationId"]
        while True:
            try:
                frame = await peer.recv()
            except Exception:
                return
            if frame.get("method") == "actions/cancel":
                seen["cancels"] += 1

    async def generate(req: Any) -> InProcessResponse:
        if req.turn == 0:
            return InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name="fake__act")])
        if req.turn == 1:
            return InProcessResponse(tool_calls=[InProcessToolCall(id="c2", name="fake__act")])
        return InProcessResponse(content="done")

    with trio.fail_after(20):
        async with fake_host(host_side) as url:
            async with Gateway(GatewayOptions(wait_for=wait_for, auto_claim=True)) as gw:
                await gw.connect(url)
                toolkit = await create_toolkit(ToolkitOptions(tesseron=gw, builtins=False))
                client = create_in_process_client(InProcessOptions(model="m", generate=generate))
                async with client.stream("go", toolkit) as events:
                    async for event in events:
                        if event["type"] == "progress":
                            progress.append((event["percent"], event["message"]))
                        if event["type"] == "tool_call" and event["id"] == "c2":
                            await wait_until(lambda: "second" in seen)
                            event["cancel"].cancel()
                await toolkit.aclose()
            await wait_until(lambda: seen["cancels"] >= 1)
    assert seen["elicit"] == {"action": "decline"}
    assert progress == [(0, "a"), (30, "b"), (30, "c"), (30, "d"), (100, "e")]
    assert seen["cancels"] == 1


async def test_a_host_cannot_ask_unboundedly_many_questions_at_once() -> None:
    answers: list[dict[str, Any]] = []
    release = trio.Event()

    async def wait_for(request: Request) -> Answer:
        await release.wait()
        return Answer(request.id, True, {})

    async def host_side(peer: FakeGateway) -> None:
        await _claimed(peer)
        invoke = await _invoke_request(peer)
        inv_id = invoke["params"]["invocationId"]
        ids = [_ask(peer, inv_id, f"q{i}") for i in range(12)]
        answers.extend([await peer.recv() for _ in range(4)])  # the excess, refused at once
        release.set()
        answers.extend([await peer.recv() for _ in range(8)])
        assert {a["id"] for a in answers} == set(ids)
        peer.respond(invoke["id"], {"invocationId": inv_id, "output": "ok"})
        await until_closed(peer)

    with trio.fail_after(10):
        async with (
            fake_host(host_side) as url,
            Gateway(GatewayOptions(wait_for=wait_for, auto_claim=True)) as gw,
        ):
            await gw.connect(url)
            assert await gw.invoke("fake", "act", {}) == "ok"
    refused = [a for a in answers[:4] if "error" in a]
    assert len(refused) == 4 and all(a["error"]["data"] == {"max": 8} for a in refused)
    assert all(a["result"] == {"action": "accept", "value": {}} for a in answers[4:])


async def test_the_answer_arriving_while_wait_for_runs_ends_the_question() -> None:
    entered = trio.Event()
    frames: list[dict[str, Any]] = []

    async def wait_for(request: Request) -> Answer:
        entered.set()
        await trio.sleep_forever()  # the human is still thinking
        raise AssertionError

    async def host_side(peer: FakeGateway) -> None:
        await _claimed(peer)
        invoke = await _invoke_request(peer)
        inv_id = invoke["params"]["invocationId"]
        rid = _ask(peer, inv_id, "q")
        await entered.wait()
        peer.respond(invoke["id"], {"invocationId": inv_id, "output": "done anyway"})
        frames.append(await peer.response(rid))
        await until_closed(peer)

    with trio.fail_after(10):
        async with (
            fake_host(host_side) as url,
            Gateway(GatewayOptions(wait_for=wait_for, auto_claim=True)) as gw,
        ):
            await gw.connect(url)
            assert await gw.invoke("fake", "act", {}) == "done anyway"
            await wait_until(lambda: frames)
    assert frames[0]["error"]["code"] == -32001


async def test_a_raising_wait_for_is_cancel_on_the_wire() -> None:
    answers: list[dict[str, Any]] = []

    async def wait_for(request: Request) -> Answer:
        raise RuntimeError("the approval service is down")

    async def host_side(peer: FakeGateway) -> None:
        await _claimed(peer)
        invoke = await _invoke_request(peer)
        inv_id = invoke["params"]["invocationId"]
        rid = _ask(peer, inv_id, "q")
        answers.append(await peer.response(rid))
        peer.respond(invoke["id"], {"invocationId": inv_id, "output": "ok"})
        await until_closed(peer)

    with trio.fail_after(10):
        async with (
            fake_host(host_side) as url,
            Gateway(GatewayOptions(wait_for=wait_for, auto_claim=True)) as gw,
        ):
            await gw.connect(url)
            assert await gw.invoke("fake", "act", {}) == "ok"
    assert answers[0]["result"] == {"action": "cancel"}


async def test_host_and_gateway_agree_on_the_default_instances_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolnexus_trio.tesseron import DEFAULT_MANIFEST_DIR, TesseronApp

    monkeypatch.setenv("HOME", str(tmp_path))  # after import: both must resolve it late
    app = TesseronApp("found", "Found")
    with trio.fail_after(10):
        async with app.listen(manifest_dir=DEFAULT_MANIFEST_DIR) as host, Gateway() as gw:
            assert host.manifest_path is not None
            assert host.manifest_path.parent == tmp_path / ".tesseron" / "instances"
            sessions = await gw.discover()
            assert [s.app.id for s in sessions] == ["found"]


async def test_nothing_after_the_result_reaches_events_or_metrics() -> None:
    """Progress and log the host sends after its result, in the same read, are dropped."""
    metrics: list[dict[str, Any]] = []
    events_seen: list[tuple[str, Any]] = []

    async def host_side(peer: FakeGateway) -> None:
        await _claimed(peer)
        for _ in range(3):  # a few rounds: each must hold, not just the first
            invoke = await _invoke_request(peer)
            inv_id = invoke["params"]["invocationId"]
            peer.notify("actions/progress", {"invocationId": inv_id, "percent": 10, "message": "before"})  # fmt: skip
            # One write: the result, then progress and a log right behind it.
            peer.respond(invoke["id"], {"invocationId": inv_id, "output": "fine"})
            peer.notify("actions/progress", {"invocationId": inv_id, "percent": 90, "message": "after"})  # fmt: skip
            peer.notify("log", {"invocationId": inv_id, "level": "info", "message": "after"})
        await until_closed(peer)

    calls = [InProcessToolCall(id=f"c{i}", name="fake__act") for i in range(3)]

    async def generate(req: Any) -> InProcessResponse:
        if req.turn < len(calls):
            return InProcessResponse(tool_calls=[calls[req.turn]])
        return InProcessResponse(content="done")

    with trio.fail_after(20):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            await gw.connect(url)
            toolkit = await create_toolkit(ToolkitOptions(tesseron=gw, builtins=False))
            client = create_in_process_client(
                InProcessOptions(model="m", generate=generate, on_metric=metrics.append)
            )
            async with toolkit, client.stream("go", toolkit) as events:
                async for event in events:
                    if event["type"] in ("progress", "log"):
                        events_seen.append((event["type"], event["message"]))
                    elif event["type"] == "tool_result":
                        events_seen.append(("result", event["output"]))
    assert events_seen == [("progress", "before"), ("result", "fine")] * 3
    forwarded = [(m["event"], m["message"]) for m in metrics if m["event"] in ("progress", "log")]
    assert forwarded == [("progress", "before")] * 3
