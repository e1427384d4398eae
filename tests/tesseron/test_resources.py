"""Resources: read, subscribe, publish, unsubscribe, removal."""

from __future__ import annotations

from typing import Any

import trio
from gateway_helpers import gateway, serving

from toolnexus_trio.tesseron import TesseronApp


async def test_read() -> None:
    app = TesseronApp("t", "T")

    async def read_async() -> Any:
        await trio.lowlevel.checkpoint()
        return {"items": [], "total": 0}

    app.resource("todos", read_async, "All todos")
    app.resource("sync", lambda: 42)

    def broken() -> Any:
        raise RuntimeError("secret")

    app.resource("broken", broken)
    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.request("resources/read", {"name": "todos"})
            assert (await gw.response(rid))["result"] == {"value": {"items": [], "total": 0}}
            rid = gw.request("resources/read", {"name": "sync"})
            assert (await gw.response(rid))["result"] == {"value": 42}
            rid = gw.request("resources/read", {"name": "nope"})
            assert (await gw.response(rid))["error"] == {
                "code": -32003,
                "message": "Resource not readable: nope",
            }
            rid = gw.request("resources/read", {"name": "broken"})
            assert (await gw.response(rid))["error"] == {
                "code": -32603,
                "message": "Internal error",
            }


async def test_subscribe_ack_precedes_updates_and_unsubscribe_cleans_up_once() -> None:
    app = TesseronApp("t", "T")
    cleanups: list[str] = []

    def subscribe(emit: Any) -> Any:
        emit({"total": 1})  # immediate emit: must not overtake the ack
        return lambda: cleanups.append("cleanup")

    stats = app.resource("stats", lambda: {"total": 0}, subscribable=True, subscribe=subscribe)
    app.resource("plain", lambda: 0)
    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.request("resources/subscribe", {"name": "stats", "subscriptionId": "sub-1"})
            assert await gw.recv() == {"jsonrpc": "2.0", "id": rid, "result": None}
            frame = await gw.expect_method("resources/updated")
            assert frame["params"] == {"subscriptionId": "sub-1", "value": {"total": 1}}
            await stats.publish({"total": 42})
            frame = await gw.expect_method("resources/updated")
            assert frame["params"] == {"subscriptionId": "sub-1", "value": {"total": 42}}
            rid = gw.request("resources/unsubscribe", {"subscriptionId": "sub-1"})
            assert (await gw.response(rid))["result"] is None
            assert cleanups == ["cleanup"]
            await stats.publish({"total": 43})  # nobody subscribed: nothing goes out
            rid = gw.request("resources/unsubscribe", {"subscriptionId": "sub-1"})
            assert (await gw.response(rid))["result"] is None  # unknown id: still acked
            assert cleanups == ["cleanup"]
            rid = gw.request("resources/subscribe", {"name": "plain", "subscriptionId": "s2"})
            assert (await gw.response(rid))["error"] == {
                "code": -32003,
                "message": "Resource not subscribable: plain",
            }
            rid = gw.request("resources/subscribe", {"name": "nope", "subscriptionId": "s3"})
            assert (await gw.response(rid))["error"]["code"] == -32003


async def test_removing_a_resource_stops_its_subscriptions() -> None:
    app = TesseronApp("t", "T")
    cleanups: list[str] = []
    app.resource(
        "stats", lambda: 0, subscribable=True, subscribe=lambda emit: lambda: cleanups.append("x")
    )
    with trio.fail_after(10):
        async with serving(app) as host, gateway(host) as gw:
            rid = gw.request("resources/subscribe", {"name": "stats", "subscriptionId": "sub-1"})
            await gw.response(rid)
            app.remove_resource("stats")
            assert cleanups == ["x"]
            frame = await gw.expect_method("resources/list_changed")
            assert frame["params"] == {"resources": []}
            # Replacing it: the new handle has no subscribers yet.
            new = app.resource("stats", lambda: 1, subscribable=True)
            await gw.expect_method("resources/list_changed")
            await new.publish(5)
            rid = gw.request("resources/read", {"name": "stats"})
            assert (await gw.response(rid))["result"] == {"value": 1}
