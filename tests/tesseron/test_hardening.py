"""Regressions from review: inputs and races that used to cost a connection or a response."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from gateway_helpers import NO_CAPS, dial, gateway, serving, wait_until, welcome

from toolnexus_trio.tesseron import ActionContext, ActionError, ElicitRequest, TesseronApp


def make_app() -> tuple[TesseronApp, trio.Event]:
    app = TesseronApp("t", "T")
    release = trio.Event()

    @app.action("wait")
    async def wait(input: Any, ctx: ActionContext) -> Any:
        await release.wait()
        return "ok"

    @app.action("echo")
    async def echo(input: Any, ctx: ActionContext) -> Any:
        return input

    return app, release


async def test_lone_surrogates_and_deep_nesting_cost_nothing() -> None:
    app, release = make_app()
    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("wait", {}, invocation_id="other")  # unrelated work in flight
            # json.loads turns "\ud800" into a lone surrogate that ends up in our answers.
            gw.send_text('{"jsonrpc":"2.0","id":"x","method":"no/such\\ud800"}')
            answer = await gw.recv()
            assert answer["id"] == "x" and answer["error"]["code"] == -32601
            gw.send_text(
                '{"jsonrpc":"2.0","id":"e","method":"actions/invoke",'
                '"params":{"name":"echo","invocationId":"i-e","input":"\\udc80"}}'
            )
            echoed = await gw.response("e")
            assert echoed["result"]["output"] == "\udc80"
            gw.send_text("[" * 100_000)
            deep = await gw.recv()
            assert deep["error"]["code"] == -32700
            release.set()
            assert (await gw.response(rid))["result"]["output"] == "ok"
            assert host.connected


async def test_action_error_from_a_handlers_own_nursery_keeps_code_and_data() -> None:
    app = TesseronApp("t", "T")

    @app.action("fan")
    async def fan(input: Any, ctx: ActionContext) -> Any:
        async def child() -> None:
            raise ActionError.handler("Cart is locked", {"cart": 7})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)

    @app.action("fan_two")
    async def fan_two(input: Any, ctx: ActionContext) -> Any:
        async def child(n: int) -> None:
            raise ActionError.handler(f"locked {n}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child, 1)
            nursery.start_soon(child, 2)

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            single = (await gw.call("fan", {}))["error"]
            assert single == {"code": -32005, "message": "Cart is locked", "data": {"cart": 7}}
            several = (await gw.call("fan_two", {}))["error"]
            assert several == {"code": -32603, "message": "Internal error"}


async def test_invoke_sent_before_the_welcome_waits_for_it() -> None:
    app = TesseronApp("t", "T")

    @app.action("caps")
    async def caps(input: Any, ctx: ActionContext) -> Any:
        return ctx.agent_capabilities.sampling

    with trio.fail_after(10):
        async with serving(app) as host, dial(host) as gw:
            hello = await gw.recv()
            rid = gw.invoke("caps", {})
            # The host answers this even before the welcome: once the answer is back, the
            # read loop has seen the invoke too (one TCP stream, in order).
            gw.send({"id": "probe", "method": "x"})
            assert (await gw.recv())["id"] == "probe"
            await trio.testing.wait_all_tasks_blocked()
            gw.respond(hello["id"], welcome(NO_CAPS))  # sampling: False
            assert (await gw.response(rid))["result"]["output"] is False


async def test_abandoned_prompts_leave_no_pending_entries() -> None:
    app = TesseronApp("t", "T")
    done: list[int] = []

    @app.action("ask")
    async def ask(input: Any, ctx: ActionContext) -> Any:
        try:
            return await ctx.confirm("ok?")
        finally:
            done.append(1)

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            connection = host._active
            assert connection is not None
            for i in range(5):
                rid = gw.invoke("ask", {}, invocation_id=f"i{i}")
                await gw.expect_method("elicitation/request")
                gw.cancel(f"i{i}")  # the gateway never answers the abandoned prompt
                assert (await gw.response(rid))["error"]["code"] == -32001
            await wait_until(lambda: len(done) == 5)
            assert connection._pending == {}


async def test_elicit_as_checks_the_capability_before_the_schema() -> None:
    app = TesseronApp("t", "T")

    @app.action("ask")
    async def ask(input: Any, ctx: ActionContext) -> Any:
        bad = ElicitRequest("q", schema={"type": "no-such-type"})
        try:
            await ctx.elicit_as(dict, bad)
        except ActionError as exc:
            return int(exc.code)
        return None

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host, caps=NO_CAPS) as gw:
            assert (await gw.call("ask", {}))["result"]["output"] == -32007


async def test_a_dialer_that_never_answers_hello_loses_the_slot(
    socket_autojump_clock: trio.abc.Clock,
) -> None:
    app, _ = make_app()
    with trio.fail_after(600):
        async with serving(app) as host:
            async with dial(host) as squatter:
                assert (await squatter.recv())["method"] == "tesseron/hello"
                await squatter.expect_closed()  # after the welcome timeout, in virtual time
            async with gateway(host) as gw:
                assert (await gw.call("echo", 5))["result"]["output"] == 5


async def test_progress_with_an_unusable_percent_never_raises() -> None:
    app = TesseronApp("t", "T")

    @app.action("odd")
    async def odd(input: Any, ctx: ActionContext) -> Any:
        await ctx.progress(percent=40)
        await ctx.progress(percent="half", message="a string")  # type: ignore[arg-type]
        await ctx.progress(percent=float("nan"), message="nan")
        await ctx.progress(percent=True, message="a bool")  # type: ignore[arg-type]
        return "fine"

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("odd", {})
            seen = []
            while True:
                frame = await gw.recv()
                if frame.get("id") == rid:
                    break
                seen.append(frame["params"])
            assert frame["result"]["output"] == "fine"
    assert [p.get("percent") for p in seen] == [40, None, None, None]
    assert [p.get("message") for p in seen] == [None, "a string", "nan", "a bool"]
