"""A2A bounds and secrets: headers expanded per request and never logged, tasks in
flight capped, finished tasks expiring from the in-memory store."""

from __future__ import annotations

import json
import logging
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
from toolnexus_trio.a2a import A2AServeConfig, A2AServer, A2AServing, InMemoryTaskStore, agent

pytest.importorskip("hypercorn")


class Recording(A2AServer):
    """Our server, remembering the ``x-key`` header of every request, whether it had an
    ``a2a-version`` header, and every request body."""

    seen: list[str]
    versions: list[bytes | None]
    bodies: list[bytes]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            self.seen.append(headers.get(b"x-key", b"").decode())
            self.versions.append(headers.get(b"a2a-version"))

            async def recording_receive() -> Any:
                message = await receive()
                self.bodies.append(message.get("body", b""))
                return message

            await super().__call__(scope, recording_receive, send)
            return
        await super().__call__(scope, receive, send)


def recording_server(toolkit: Any, model: Model) -> Recording:
    client = create_in_process_client(InProcessOptions(model="scripted", generate=model.generate))
    server = Recording(toolkit, client, A2AServeConfig(name="rec"))
    server.seen, server.versions, server.bodies = [], [], []
    return server


async def test_the_spec_wire_byte_for_byte() -> None:
    # Against a 0.3 card (ours), the requests are the SPEC's JSON, keys in its order, and
    # no A2A-Version header.
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    server = recording_server(toolkit, Model())
    async with toolkit, A2AServing(server) as served:
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(served.card_url, poll_every=10)])
        )
        async with caller:
            tool = caller.get("rec_echo")
            assert tool is not None
            result = await tool.call({"task": "exact"})
    task_id = (result.metadata or {})["taskId"]
    raw = [b for b in server.bodies if b]
    send, poll = json.loads(raw[0]), json.loads(raw[-1])
    rid, mid = send["id"], send["params"]["message"]["messageId"]
    assert raw[0] == (
        b'{"jsonrpc":"2.0","id":"' + rid.encode() + b'","method":"SendMessage","params":'
        b'{"message":{"role":"user","messageId":"' + mid.encode() + b'","parts":'
        b'[{"kind":"text","text":"exact"}]},"configuration":{"blocking":false}}}'
    )
    assert list(poll) == ["jsonrpc", "id", "method", "params"]
    assert (poll["method"], poll["params"]) == ("GetTask", {"id": task_id})
    assert set(server.versions) == {None}


async def test_env_headers_are_expanded_per_request_and_never_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    server = recording_server(toolkit, Model())
    monkeypatch.setenv("A2A_TEST_KEY", "first-s3cret")
    async with toolkit, A2AServing(server) as served:
        helper = agent(served.card_url, headers={"X-Key": "k=${A2A_TEST_KEY}"}, poll_every=10)
        caller = await create_toolkit(ToolkitOptions(builtins=False, agents=[helper]))
        async with caller:
            tool = caller.get("rec_echo")
            assert tool is not None
            assert not (await tool.call({"task": "one"})).is_error
            monkeypatch.setenv("A2A_TEST_KEY", "second-s3cret")  # a rotated token
            assert not (await tool.call({"task": "two"})).is_error
        # A failing agent with the secret in its headers: the error is logged, not the key.
        gone = agent(served.base_url + "/nope.json", headers={"X-Key": "${A2A_TEST_KEY}"})
        failing = await create_toolkit(ToolkitOptions(builtins=False, agents=[gone]))
        async with failing:
            assert failing.a2a_status()[gone.card].state == "failed"
    assert server.seen[0] == "k=first-s3cret"  # the card
    assert "k=first-s3cret" in server.seen and "k=second-s3cret" in server.seen
    assert server.seen.index("k=second-s3cret") > server.seen.index("k=first-s3cret")
    assert "s3cret" not in caplog.text


async def test_tasks_in_flight_are_capped() -> None:
    async with served_agent(A2AServeConfig(max_in_flight=1)) as (served, model, _, _):

        async def send(text: str) -> dict[str, Any]:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "role": "user",
                        "messageId": "m",
                        "parts": [{"kind": "text", "text": text}],
                    }
                },
            }
            async with httpx2.AsyncClient() as http:
                reply = await http.post(served.base_url + "/", content=json.dumps(body).encode())
            result: dict[str, Any] = reply.json()
            return result

        first = await send("slow a")
        assert first["result"]["status"]["state"] == "submitted"
        await model.started.wait()
        second = await send("slow b")
        assert second["error"]["code"] == -32000
        assert "too many A2A tasks in flight (1)" in second["error"]["message"]


async def test_finished_tasks_expire(autojump_clock: trio.testing.MockClock) -> None:
    store = InMemoryTaskStore(ttl=60, max_tasks=2)
    await store.save({"id": "run", "status": {"state": "working"}})
    await store.save({"id": "done", "status": {"state": "completed"}})
    assert await store.get("done") is not None
    await trio.sleep(61)
    assert await store.get("done") is None
    assert await store.get("run") is not None  # a running task never expires
    for n in range(3):  # past max_tasks, the oldest finished go first
        await store.save({"id": f"f{n}", "status": {"state": "failed"}})
    assert await store.get("f0") is None
    assert await store.get("f2") is not None and await store.get("run") is not None
