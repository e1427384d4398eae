"""Bad input never crashes the host or loses other work."""

from __future__ import annotations

import json
from typing import Any

import trio
from gateway_helpers import gateway, serving, wait_until

from toolnexus_trio.tesseron import MAX_MESSAGE_BYTES, ActionContext, TesseronApp


def make_app() -> TesseronApp:
    app = TesseronApp("t", "T")

    @app.action("echo")
    async def echo(input: Any, ctx: ActionContext) -> Any:
        return input

    return app


async def test_malformed_frames_get_errors_and_the_connection_survives() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host, gateway(host) as gw:
            gw.send_text("{not json")
            assert (await gw.recv())["error"]["code"] == -32700
            gw.send({"id": 5, "method": "actions/invoke", "params": {}})
            assert await gw.recv() == {
                "jsonrpc": "2.0",
                "id": 5,
                "error": {"code": -32600, "message": "Invalid Request: jsonrpc must be 2.0"},
            }
            rid = gw.request("no/such", {})
            assert (await gw.response(rid))["error"] == {
                "code": -32601,
                "message": "Method not found: no/such",
            }
            gw.notify("no/such/notification", {})  # ignored
            gw.notify("actions/cancel", "garbage")  # ignored
            gw.respond(999, {"stray": True})  # not one of our ids: ignored
            rid = gw.request("actions/invoke", "not an object")
            assert (await gw.response(rid))["error"]["code"] == -32602
            rid = gw.request("actions/invoke", {"name": 1})
            assert (await gw.response(rid))["error"]["code"] == -32602
            # Work still flows on the same connection.
            assert (await gw.call("echo", [1, 2]))["result"]["output"] == [1, 2]


async def test_binary_frames_are_parsed_as_utf8() -> None:
    with trio.fail_after(10):
        async with serving(make_app()) as host, gateway(host) as gw:
            frame = {
                "jsonrpc": "2.0",
                "id": "b-1",
                "method": "actions/invoke",
                "params": {"name": "echo", "input": "é", "invocationId": "i"},
            }
            gw.ws._proto.send_binary(json.dumps(frame).encode())
            gw.ws._pull_output()
            assert (await gw.response("b-1"))["result"]["output"] == "é"


async def test_huge_frame_is_refused_and_the_host_keeps_listening() -> None:
    with trio.fail_after(30):
        async with serving(make_app()) as host:
            async with gateway(host) as gw:
                gw.invoke("echo", "x" * (MAX_MESSAGE_BYTES + 1))
                closed = await gw.expect_closed()
                assert closed.code == 1009  # "message too big"
            await wait_until(lambda: not host.connected)
            async with gateway(host) as gw2:
                assert (await gw2.call("echo", 1))["result"]["output"] == 1


async def test_outbound_ids_are_matched_only_against_our_own_requests() -> None:
    """Gateway and host count ids independently; a gateway request with the same id
    as our pending elicitation must not be mistaken for its answer."""
    app = TesseronApp("t", "T")

    @app.action("ask")
    async def ask(input: Any, ctx: ActionContext) -> Any:
        return await ctx.confirm("ok?")

    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.invoke("ask", {}, id=2)
            req = await gw.expect_method("elicitation/request")
            assert req["id"] == 2  # hello was 1: the collision the notes describe
            # A gateway *request* with id 2 is not a response.
            gw.request("no/such", {}, id=2)
            assert (await gw.recv())["error"]["code"] == -32601
            gw.respond(req["id"], {"action": "accept"})
            assert (await gw.response(rid))["result"]["output"] is True
