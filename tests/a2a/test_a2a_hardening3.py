"""Round-3 hardening of A2A (issue 30, items 8-10): the agent's timeout bounds every
request of a call; a ``SendMessage`` that cannot be reported never starts its task;
hostile but valid JSON gets JSON-RPC errors, never a 500 or a reply that is not JSON."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
import trio
from a2a_helpers import SKILLS, Model, served_agent

from toolnexus_trio import (
    InProcessOptions,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import A2AServeConfig, A2AServer, A2AServing, agent

pytest.importorskip("hypercorn")


class Hanging(A2AServer):
    """Our server, except that requests of the method ``hang`` are never answered
    (until ``release`` is set, at the end of the test)."""

    hang: str
    release: trio.Event
    hung: trio.Event

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if json.loads(body).get("method") == self.hang:
            self.hung.set()
            await self.release.wait()
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await super().__call__(scope, replay, send)


@pytest.mark.parametrize("method", ["SendMessage", "GetTask"])
async def test_the_agents_timeout_bounds_an_unanswered_request(method: str) -> None:
    # Was: the call ran on past 8 s (SendMessage fully shielded, GetTask unbounded).
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    client = create_in_process_client(InProcessOptions(model="scripted", generate=Model().generate))
    server = Hanging(toolkit, client, A2AServeConfig(name="hang"))
    server.hang, server.release, server.hung = method, trio.Event(), trio.Event()
    async with toolkit, A2AServing(server) as served:
        try:
            caller = await create_toolkit(
                ToolkitOptions(
                    builtins=False, agents=[agent(served.card_url, timeout=1000, poll_every=20)]
                )
            )
            async with caller:
                tool = caller.get("hang_echo")
                assert tool is not None
                # A generous guard: the call must end by itself, at its 1 s deadline
                # (plus at most the CancelTask grace when a task id is known).
                with trio.fail_after(8):
                    result = await tool.call({"task": "slow forever"})
        finally:
            server.release.set()
    assert server.hung.is_set()
    assert result.is_error and "timed out after 1000ms" in result.output


async def post_raw(url: str, body: bytes) -> httpx2.Response:
    async with httpx2.AsyncClient() as client:
        return await client.post(url, content=body, headers={"Content-Type": "application/json"})


def send_body(context: str) -> bytes:
    # Written by hand: json.dumps would not let a lone surrogate through as it is sent.
    return (
        b'{"jsonrpc":"2.0","id":"s1","method":"SendMessage","params":{"message":'
        b'{"role":"user","messageId":"m1","contextId":"' + context.encode() + b'",'
        b'"parts":[{"kind":"text","text":"hello"}]},"configuration":{"blocking":false}}}'
    )


@pytest.mark.parametrize("context", ["\\ud800", "a\\u0000b", "x" * 5000])
async def test_a_send_that_cannot_be_reported_starts_nothing(context: str) -> None:
    # Was: HTTP 500 (the reply could not be encoded) while the task was saved and ran.
    async with served_agent() as (served, model, ended, _):
        reply = await post_raw(served.base_url + "/", send_body(context))
        assert reply.status_code == 200
        answer = reply.json()
        assert answer["id"] == "s1" and answer["error"]["code"] == -32602
        assert "contextId" in answer["error"]["message"]
        # A valid one still works, and it is the only task that ever ran.
        ok = (await post_raw(served.base_url + "/", send_body("ctx-1"))).json()["result"]
        assert ok["contextId"] == "ctx-1"
        poll = b'{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"%s"}}' % (
            ok["id"].encode()
        )
        with trio.fail_after(10):
            while True:
                got = (await post_raw(served.base_url + "/", poll)).json()["result"]
                if got["status"]["state"] == "completed":
                    break
                await trio.sleep(0.01)
    assert model.seen == ["hello"] and len(ended) == 1


async def test_deeply_nested_json_is_a_parse_error() -> None:
    # Was: HTTP 500 with a traceback (RecursionError), under the 1 MiB cap.
    async with served_agent() as (served, _, _, _):
        reply = await post_raw(served.base_url + "/", b"[" * 200_000)
    assert reply.status_code == 200
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }


def not_json(constant: str) -> Any:
    raise AssertionError(f"the reply holds {constant}, which is not JSON")


@pytest.mark.parametrize(
    "rid", [b"NaN", b"Infinity", b"1e999", b'{"a":1}', b"[1]", b"true", b'"\\udc00"']
)
async def test_an_id_that_is_not_a_json_rpc_id_is_not_echoed(rid: bytes) -> None:
    # Was: NaN echoed as NaN (not JSON), an object echoed back as the id.
    body = b'{"jsonrpc":"2.0","id":' + rid + b',"method":"GetTask","params":{"id":"x"}}'
    async with served_agent() as (served, _, _, _):
        reply = await post_raw(served.base_url + "/", body)
    assert reply.status_code == 200
    answer = json.loads(reply.content, parse_constant=not_json)  # strict JSON: no NaN
    assert answer["id"] is None
    assert answer["error"]["code"] in (-32700, -32600)


class Nesting(A2AServer):
    """Our card, but every JSON-RPC request is answered with 200 000 nested ``[``."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        body = b"[" * 200_000
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def test_our_calls_take_a_deeply_nested_reply_as_a_bad_reply() -> None:
    # Was: RecursionError out of the tool call (the outbound twin of the inbound 500).
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    client = create_in_process_client(InProcessOptions(model="scripted", generate=Model().generate))
    async with toolkit, A2AServing(Nesting(toolkit, client, A2AServeConfig(name="deep"))) as served:
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(served.card_url)])
        )
        async with caller:
            tool = caller.get("deep_echo")
            assert tool is not None
            with trio.fail_after(30):
                result = await tool.call({"task": "x"})
    assert result.is_error and "the reply is not JSON" in result.output
