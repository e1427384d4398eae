"""Handshake, claim, resume, events and the one-connection rule, over real sockets."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from gateway_helpers import ALL_CAPS, dial, gateway, serving, wait_until, welcome

from toolnexus_trio.gateway._ws_client import connect_websocket
from toolnexus_trio.tesseron import (
    ActionContext,
    Claimed,
    Disconnected,
    HandshakeFailed,
    TesseronApp,
    Welcome,
)
from toolnexus_trio.tesseron._ws import WebSocketClosed


def make_app() -> TesseronApp:
    app = TesseronApp("shop", "Acme Shop", description="Products", version="1.0.0")

    @app.action("search", "Search the catalog", annotations={"readOnly": True}, timeout_ms=5000)
    async def search(input: Any, ctx: ActionContext) -> Any:
        return ctx.agent_capabilities.sampling

    app.resource("route", lambda: "/cart", "Current route", subscribable=True)
    return app


async def test_hello_is_sent_at_once_with_the_full_manifest() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host, dial(host) as gw:
            assert re.fullmatch(r"ws://127\.0\.0\.1:\d+/", host.url)
            assert gw.ws.subprotocol == "tesseron-gateway"
            hello = await gw.recv()
    assert hello["method"] == "tesseron/hello"
    assert hello["id"] == 1
    assert hello["params"] == {
        "protocolVersion": "1.2.0",
        "app": {
            "id": "shop",
            "name": "Acme Shop",
            "origin": "http://127.0.0.1",
            "description": "Products",
            "version": "1.0.0",
        },
        "actions": [
            {
                "name": "search",
                "description": "Search the catalog",
                "inputSchema": {"type": "object", "additionalProperties": True},
                "timeoutMs": 5000,
                "annotations": {"readOnly": True},
            }
        ],
        "resources": [{"name": "route", "description": "Current route", "subscribable": True}],
        "capabilities": ALL_CAPS,
    }


async def test_welcome_is_applied_before_an_invoke_sent_right_behind_it() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host, dial(host) as gw:
            hello = await gw.recv()
            # Invoke first, in the same burst as the welcome: it must wait for it.
            rid = gw.invoke("search", {})
            gw.respond(hello["id"], welcome())
            assert (await gw.response(rid))["result"]["output"] is True


async def test_events_welcome_claimed_disconnected() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            events = host.events()
            async with gateway(host) as gw:
                gw.notify(
                    "tesseron/claimed",
                    {"agent": {"id": "claude", "name": "Claude"}, "claimedAt": 5},
                )
                ev = await events.receive()
                assert isinstance(ev, Welcome)
                assert ev.claim_code == "AB3X-7K"
                ev = await events.receive()
                assert isinstance(ev, Claimed)
                assert ev.agent.id == "claude"
                assert host.welcome is not None and host.welcome.claim_code is None
            ev = await events.receive()
            assert isinstance(ev, Disconnected)
        # listen() exit ends every events channel.
        with pytest.raises(trio.EndOfChannel):
            await events.receive()


async def test_resume_uses_the_newest_credentials() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            async with gateway(host, resume_token="rt_1", session_id="s_1"):
                pass
            await wait_until(lambda: not host.connected)
            async with dial(host) as gw:
                frame = await gw.recv()
                assert frame["method"] == "tesseron/resume"
                assert frame["params"]["sessionId"] == "s_1"
                assert frame["params"]["resumeToken"] == "rt_1"
                assert frame["params"]["actions"][0]["name"] == "search"
                gw.respond(
                    frame["id"], welcome(session_id="s_1", resume_token="rt_2", claim_code=None)
                )
                await wait_until(
                    lambda: host.welcome is not None and host.welcome.resume_token == "rt_2"
                )
            await wait_until(lambda: not host.connected)
            async with dial(host) as gw:
                frame = await gw.recv()
                assert frame["params"]["resumeToken"] == "rt_2"


async def test_resume_failed_falls_back_to_hello_on_the_same_connection() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            async with gateway(host):
                pass
            await wait_until(lambda: not host.connected)
            async with dial(host) as gw:
                frame = await gw.recv()
                assert frame["method"] == "tesseron/resume"
                gw.respond_error(frame["id"], -32011, 'No resumable session "s"')
                frame = await gw.recv()
                assert frame["method"] == "tesseron/hello"
                assert frame["id"] != 1  # a fresh id of ours
                gw.respond(frame["id"], welcome(resume_token=None))
                assert (await gw.call("search", {}))["result"]["output"] is True
            await wait_until(lambda: not host.connected)
            # The credentials are gone: the next dial says hello.
            async with dial(host) as gw:
                assert (await gw.recv())["method"] == "tesseron/hello"


async def test_drop_during_resume_keeps_the_credentials() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            async with gateway(host, resume_token="rt_keep"):
                pass
            await wait_until(lambda: not host.connected)
            async with dial(host) as gw:
                assert (await gw.recv())["method"] == "tesseron/resume"
            await wait_until(lambda: not host.connected)
            async with dial(host) as gw:
                frame = await gw.recv()
                assert frame["method"] == "tesseron/resume"
                assert frame["params"]["resumeToken"] == "rt_keep"


@pytest.mark.parametrize("where", ["error", "welcome"])
async def test_protocol_major_mismatch_closes_without_retry(where: str) -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            events = host.events()
            async with dial(host) as gw:
                hello = await gw.recv()
                if where == "error":
                    gw.respond_error(hello["id"], -32000, "Gateway speaks protocol 2.0.0")
                else:
                    gw.respond(hello["id"], welcome(protocol_version="2.0.0"))
                await gw.expect_closed()  # and no second hello
            ev = await events.receive()
            assert isinstance(ev, HandshakeFailed)
            assert ev.error.code == -32000
            assert isinstance(await events.receive(), Disconnected)


async def test_minor_version_difference_is_accepted() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host, gateway(host, protocol_version="1.9.0") as gw:
            assert (await gw.call("search", {}))["result"]["output"] is True


async def test_upgrade_without_the_subprotocol_is_refused() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            with pytest.raises(WebSocketClosed):
                async with connect_websocket(host.url, subprotocols=()):
                    pass
            # The host is fine: a proper dial works.
            async with gateway(host) as gw:
                assert (await gw.call("search", {}))["result"]["output"] is True


async def test_one_live_connection_and_redial_after_close() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host:
            async with gateway(host) as first:
                async with dial(host) as second:
                    closed = await second.expect_closed()
                    assert closed.code == 1013
                assert (await first.call("search", {}))["result"]["output"] is True
            await wait_until(lambda: not host.connected)
            async with gateway(host) as third:
                assert (await third.call("search", {}))["result"]["output"] is True


async def test_list_changed_after_the_welcome() -> None:
    app = make_app()
    with trio.fail_after(10):
        async with serving(app) as host, dial(host) as gw:
            hello = await gw.recv()
            # Registered while the handshake is in flight: announced after the welcome.

            @app.action("extra")
            async def extra(input: Any, ctx: ActionContext) -> Any:
                return "x"

            gw.respond(hello["id"], welcome())
            frame = await gw.expect_method("actions/list_changed")
            assert [a["name"] for a in frame["params"]["actions"]] == ["search", "extra"]
            assert (await gw.call("extra", {}))["result"]["output"] == "x"
            app.remove_action("extra")
            frame = await gw.expect_method("actions/list_changed")
            assert [a["name"] for a in frame["params"]["actions"]] == ["search"]
            assert (await gw.call("extra", {}))["error"]["code"] == -32003
            app.resource("count", lambda: 1)
            frame = await gw.expect_method("resources/list_changed")
            assert [r["name"] for r in frame["params"]["resources"]] == ["route", "count"]
            app.remove_resource("count")
            frame = await gw.expect_method("resources/list_changed")
            assert [r["name"] for r in frame["params"]["resources"]] == ["route"]


async def test_changes_while_disconnected_travel_in_the_next_hello() -> None:
    app = make_app()
    with trio.fail_after(10):
        async with serving(app) as host:

            @app.action("late")
            async def late(input: Any, ctx: ActionContext) -> Any:
                return None

            async with dial(host) as gw:
                hello = await gw.recv()
                assert [a["name"] for a in hello["params"]["actions"]] == ["search", "late"]
                gw.respond(hello["id"], welcome())
                # No list_changed follows: the first response is the call's own.
                assert (await gw.call("late", {}))["result"]["output"] is None
