"""ActionContext over a real socket: progress, log, sample, confirm, elicit."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from gateway_helpers import NO_CAPS, gateway, serving

from toolnexus_trio.tesseron import (
    ActionContext,
    ActionError,
    ElicitRequest,
    LogEntry,
    SampleRequest,
    TesseronApp,
)

CONFIRM_SCHEMA = {"type": "object", "properties": {}, "required": []}


async def test_progress_ceiling_is_shared_by_clones() -> None:
    """Seed: a handler reports 55, then 10 (from a clone): the second frame carries 55."""
    app = TesseronApp("t", "T")

    @app.action("work")
    async def work(input: Any, ctx: ActionContext) -> Any:
        await ctx.progress(10)
        await ctx.progress(55, "halfway")
        await ctx.clone().progress(10, "clone", {"k": 1})
        await ctx.progress(message="message only")
        await ctx.progress(-5)
        await ctx.progress(250.7)
        await ctx.clone().progress(99)
        return "ok"

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            others: list[dict[str, Any]] = []
            resp = await gw.response(gw.invoke("work", {}, invocation_id="i-1"), others=others)
            assert resp["result"]["output"] == "ok"
    params = [f["params"] for f in others]
    assert all(f["method"] == "actions/progress" and "id" not in f for f in others)
    assert params == [
        {"invocationId": "i-1", "percent": 10},
        {"invocationId": "i-1", "percent": 55, "message": "halfway"},
        {"invocationId": "i-1", "percent": 55, "message": "clone", "data": {"k": 1}},
        {"invocationId": "i-1", "message": "message only"},
        {"invocationId": "i-1", "percent": 55},
        {"invocationId": "i-1", "percent": 100},
        {"invocationId": "i-1", "percent": 100},
    ]


async def test_ceiling_is_per_invocation() -> None:
    app = TesseronApp("t", "T")

    @app.action("work")
    async def work(input: Any, ctx: ActionContext) -> Any:
        await ctx.progress(input)
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            for pct in (80, 20):
                others: list[dict[str, Any]] = []
                await gw.response(gw.invoke("work", pct), others=others)
                assert others[0]["params"]["percent"] == pct


async def test_log_levels_and_meta() -> None:
    app = TesseronApp("t", "T")

    @app.action("work")
    async def work(input: Any, ctx: ActionContext) -> Any:
        await ctx.log(LogEntry.info("halfway"))
        await ctx.log(LogEntry.debug("d").meta({"a": 1}))
        await ctx.log(LogEntry.warn("w"))
        await ctx.log(LogEntry.error("e"))
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            others: list[dict[str, Any]] = []
            await gw.response(gw.invoke("work", {}, invocation_id="i-1"), others=others)
    assert [(f["method"], f["params"]) for f in others] == [
        ("log", {"invocationId": "i-1", "level": "info", "message": "halfway"}),
        ("log", {"invocationId": "i-1", "level": "debug", "message": "d", "meta": {"a": 1}}),
        ("log", {"invocationId": "i-1", "level": "warn", "message": "w"}),
        ("log", {"invocationId": "i-1", "level": "error", "message": "e"}),
    ]


async def test_capability_checks_send_nothing() -> None:
    """Seed: without sampling/elicitation, sample and elicit raise, confirm is False,
    and no frame reaches the gateway (the invoke response is the very next frame)."""
    app = TesseronApp("t", "T")
    outcomes: list[Any] = []

    @app.action("try")
    async def try_all(input: Any, ctx: ActionContext) -> Any:
        for call in (
            lambda: ctx.sample(SampleRequest("p")),
            lambda: ctx.elicit(ElicitRequest("q")),
            lambda: ctx.sample_as(Answer, SampleRequest("p")),
            lambda: ctx.elicit_as(Answer, ElicitRequest("q")),
        ):
            try:
                await call()
            except ActionError as exc:
                outcomes.append(int(exc.code))
        outcomes.append(await ctx.confirm("sure?"))
        return "done"

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host, NO_CAPS) as gw:
            resp = await gw.call("try", {})  # any other frame first fails here
            assert resp["result"]["output"] == "done"
    assert outcomes == [-32006, -32007, -32006, -32007, False]


@attrs.frozen
class Answer:
    name: str
    count: int = 1


async def test_sample_round_trip_decode_and_mismatch() -> None:
    app = TesseronApp("t", "T")
    results: list[Any] = []

    @app.action("s")
    async def s(input: Any, ctx: ActionContext) -> Any:
        results.append(await ctx.sample(SampleRequest("plain", max_tokens=5)))
        results.append(await ctx.sample_as(Answer, SampleRequest.for_type(Answer, "typed")))
        for _ in range(2):
            try:
                await ctx.sample_as(Answer, SampleRequest("typed again"))
            except ActionError as exc:
                results.append((int(exc.code), exc.data))
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("s", {}, invocation_id="i-1")
            req = await gw.expect_method("sampling/request")
            assert req["params"] == {"invocationId": "i-1", "prompt": "plain", "maxTokens": 5}
            gw.respond(req["id"], {"content": "free text"})
            req = await gw.expect_method("sampling/request")
            assert req["params"]["schema"]["properties"]["name"] == {"type": "string"}
            gw.respond(req["id"], {"content": '{"name": "x", "count": 2}'})
            req = await gw.expect_method("sampling/request")
            gw.respond(req["id"], {"content": "not json"})
            req = await gw.expect_method("sampling/request")
            gw.respond(req["id"], {"content": {"name": 5}})
            assert (await gw.response(rid))["result"]["output"] is None
    assert results[0] == "free text"
    assert results[1] == Answer("x", 2)
    assert results[2][0] == -32005
    assert results[2][1]["raw"] == "not json"
    assert results[3][0] == -32005
    assert results[3][1]["issues"]


async def test_gateway_errors_reach_the_handler_with_data() -> None:
    app = TesseronApp("t", "T")

    @app.action("s")
    async def s(input: Any, ctx: ActionContext) -> Any:
        try:
            await ctx.sample(SampleRequest("deep"))
        except ActionError as exc:
            return {"code": int(exc.code), "data": exc.data}
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("s", {})
            req = await gw.expect_method("sampling/request")
            gw.respond_error(req["id"], -32008, "Sampling depth exceeded", {"depth": 4, "max": 3})
            resp = await gw.response(rid)
    assert resp["result"]["output"] == {"code": -32008, "data": {"depth": 4, "max": 3}}


@pytest.mark.parametrize(
    ("action", "expected"), [("accept", True), ("decline", False), ("cancel", False)]
)
async def test_confirm(action: str, expected: bool) -> None:
    app = TesseronApp("t", "T")

    @app.action("c")
    async def c(input: Any, ctx: ActionContext) -> Any:
        return await ctx.confirm("Delete?")

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("c", {}, invocation_id="i-1")
            req = await gw.expect_method("elicitation/request")
            assert req["params"] == {
                "invocationId": "i-1",
                "question": "Delete?",
                "schema": CONFIRM_SCHEMA,
            }
            gw.respond(req["id"], {"action": action})
            assert (await gw.response(rid))["result"]["output"] is expected


async def test_elicit_accept_decline_default_schema_and_elicit_as() -> None:
    app = TesseronApp("t", "T")
    results: list[Any] = []

    @app.action("e")
    async def e(input: Any, ctx: ActionContext) -> Any:
        results.append(await ctx.elicit(ElicitRequest("Name?")))
        results.append(await ctx.elicit(ElicitRequest("Again?")))
        results.append(await ctx.elicit_as(Answer, ElicitRequest.for_type(Answer, "Typed?")))
        try:
            await ctx.elicit_as(Answer, ElicitRequest("Bad?"))
        except ActionError as exc:
            results.append(int(exc.code))
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("e", {})
            req = await gw.expect_method("elicitation/request")
            assert req["params"]["schema"] == {
                "type": "object",
                "properties": {"response": {"type": "string", "description": "Your response"}},
                "required": ["response"],
            }
            gw.respond(req["id"], {"action": "accept", "value": {"response": "Ada"}})
            req = await gw.expect_method("elicitation/request")
            gw.respond(req["id"], {"action": "decline"})
            req = await gw.expect_method("elicitation/request")
            gw.respond(req["id"], {"action": "accept", "value": {"name": "n", "count": 3}})
            req = await gw.expect_method("elicitation/request")
            gw.respond(req["id"], {"action": "accept", "value": {"name": 1}})
            await gw.response(rid)
    assert results == [{"response": "Ada"}, None, Answer("n", 3), -32005]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "oneOf": [{"type": "object"}]},
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"type": "array"}}},
        {"type": "string"},
    ],
)
async def test_invalid_elicit_schema_is_refused_before_sending(schema: dict[str, Any]) -> None:
    app = TesseronApp("t", "T")

    @app.action("e")
    async def e(input: Any, ctx: ActionContext) -> Any:
        try:
            await ctx.elicit(ElicitRequest("q", schema))
        except ActionError as exc:
            return int(exc.code)
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            assert (await gw.call("e", {}))["result"]["output"] == -32602


async def test_identity_and_claimed_capabilities() -> None:
    app = TesseronApp("t", "T", origin="http://localhost:3000")
    seen: list[Any] = []

    @app.action("who")
    async def who(input: Any, ctx: ActionContext) -> Any:
        seen.append(
            (
                ctx.action_name,
                ctx.invocation_id,
                ctx.origin,
                ctx.route,
                ctx.agent.id,
                ctx.agent_capabilities.sampling,
            )
        )
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host, NO_CAPS) as gw:
            # An invoke right behind the welcome sees the negotiated capabilities.
            await gw.call("who", {}, invocation_id="i-1")
            gw.notify(
                "tesseron/claimed",
                {
                    "agent": {"id": "claude-code", "name": "Claude Code"},
                    "claimedAt": 1714145210123,
                    "agentCapabilities": {
                        "streaming": True,
                        "subscriptions": True,
                        "sampling": True,
                        "elicitation": True,
                    },
                },
            )
            await gw.call("who", {}, invocation_id="i-2")
            assert host.welcome is not None
            assert host.welcome.claim_code is None
            assert host.welcome.agent.id == "claude-code"
    assert seen == [
        ("who", "i-1", "http://localhost:3000", None, "pending", False),
        ("who", "i-2", "http://localhost:3000", None, "claude-code", True),
    ]


async def test_cancelled_returns_at_once_when_already_requested() -> None:
    app = TesseronApp("t", "T")
    done = trio.Event()

    @app.action("w")
    async def w(input: Any, ctx: ActionContext) -> Any:
        with trio.CancelScope(shield=True):
            await ctx.cancelled()
            assert ctx.is_cancelled()
            await ctx.clone().cancelled()  # already requested: returns at once
        done.set()
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("w", {}, invocation_id="i-1")
            await trio.testing.wait_all_tasks_blocked()
            gw.cancel("i-1")
            assert (await gw.response(rid))["error"]["code"] == -32001
            await done.wait()
