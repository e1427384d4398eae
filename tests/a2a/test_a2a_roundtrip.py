"""Our A2A outbound (SPEC §7A) against our own inbound (SPEC §7B) on loopback: the
SPEC's 0.3 wire both ways, the card, errors, cancel reaching the remote task."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
import trio
from a2a_helpers import SKILLS, Model, served_agent
from helpers import TaskCensus

from toolnexus_trio import (
    CancelToken,
    InProcessOptions,
    ToolContext,
    ToolkitOptions,
    ToolSource,
    create_in_process_client,
    create_toolkit,
)
from toolnexus_trio.a2a import (
    A2AServeConfig,
    A2AServer,
    A2AServing,
    FileTaskStore,
    InMemoryTaskStore,
    agent,
    parse_agents_config,
)

pytest.importorskip("hypercorn")


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx2.Response:
    async with httpx2.AsyncClient() as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await client.post(url, content=content, headers=headers or {})


async def get(url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    async with httpx2.AsyncClient() as client:
        return await client.get(url, headers=headers or {})


async def test_card_has_the_pinned_defaults_and_skills_only() -> None:
    async with served_agent() as (served, _, _, _):
        card = (await get(served.base_url + "/.well-known/agent-card.json")).json()
    assert card == {
        "name": "toolnexus-agent",
        "description": "",
        "version": "0.1.0",
        "protocolVersion": "0.3.0",
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [
            {"id": "echo", "name": "echo", "description": "Echoes a task back"},
            {"id": "summarize", "name": "summarize", "description": "Summarizes text"},
        ],
        "url": served.base_url + "/",
    }


async def test_card_filter_and_provider() -> None:
    config = A2AServeConfig(
        name="Helper Bot",
        version="2.0",
        provider={"organization": "Acme", "url": "https://acme.example"},
        skills=["echo"],
    )
    async with served_agent(config) as (served, _, _, _):
        card = (await get(served.base_url + "/.well-known/agent-card.json")).json()
    assert card["name"] == "Helper Bot" and card["version"] == "2.0"
    assert card["provider"] == {"organization": "Acme", "url": "https://acme.example"}
    assert [s["id"] for s in card["skills"]] == ["echo"]


async def test_without_a2a_the_routes_404() -> None:
    toolkit = await create_toolkit(ToolkitOptions(builtins=False))
    async with toolkit, toolkit.serve() as served:
        assert (await get(served.base_url + "/.well-known/agent-card.json")).status_code == 404
        assert (await post(served.base_url + "/", {"jsonrpc": "2.0"})).status_code == 404


async def test_jsonrpc_errors() -> None:
    async with served_agent() as (served, _, _, _):
        url = served.base_url + "/"
        unknown = await post(
            url, {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
        )
        assert unknown.json()["error"]["code"] == -32001
        method = await post(url, {"jsonrpc": "2.0", "id": 2, "method": "Nope", "params": {}})
        assert method.json() == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {"code": -32601, "message": "Method not found: Nope"},
        }
        assert (await post(url, b"{not json")).json()["error"]["code"] == -32700
        big = await post(url, b"x" * (1024 * 1024 + 10))
        assert big.status_code == 413
        bad_host = await get(
            served.base_url + "/.well-known/agent-card.json", {"Host": "evil.example"}
        )
        assert bad_host.status_code == 421
        bad_origin = await post(url, {"jsonrpc": "2.0"}, {"Origin": "http://evil.example"})
        assert bad_origin.status_code == 403


async def test_spec_wire_send_then_get() -> None:
    async with served_agent() as (served, _, ended, _):
        url = served.base_url + "/"
        sent = await post(
            url,
            {
                "jsonrpc": "2.0",
                "id": "a",
                "method": "SendMessage",
                "params": {
                    "message": {
                        "role": "user",
                        "messageId": "m1",
                        "parts": [{"kind": "text", "text": "hi"}],
                    },
                    "configuration": {"blocking": False},
                },
            },
        )
        task = sent.json()["result"]
        assert task["status"] == {"state": "submitted"}
        while True:
            got = (
                await post(
                    url,
                    {
                        "jsonrpc": "2.0",
                        "id": "b",
                        "method": "GetTask",
                        "params": {"id": task["id"]},
                    },
                )
            ).json()
            if got["result"]["status"]["state"] in ("completed", "failed"):
                break
            await trio.sleep(0.01)
    assert got["result"]["status"] == {"state": "completed"}
    [artifact] = got["result"]["artifacts"]
    assert artifact["parts"] == [{"kind": "text", "text": "echo: hi"}]
    assert [(t.id, t.state, t.task) for t in ended] == [(task["id"], "completed", "hi")]
    assert ended[0].result.text == "echo: hi"


async def test_outbound_tools_from_our_card() -> None:
    async with served_agent(A2AServeConfig(name="helper bot")) as (served, _, _, _):
        card = served.base_url + "/.well-known/agent-card.json"
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(card, poll_every=10)])
        )
        async with caller:
            echo = caller.get("helper_bot_echo")
            assert echo is not None and caller.get("helper_bot_summarize") is not None
            assert echo.source is ToolSource.A2A
            assert echo.input_schema == {
                "type": "object",
                "properties": {"task": {"type": "string"}},
                "required": ["task"],
            }
            result = await echo.call({"task": "ping"})
            assert caller.a2a_status()[card].state == "connected"
    assert not result.is_error and result.output == "echo: ping"
    meta = result.metadata or {}
    assert meta["agent"] == "helper bot" and meta["state"] == "completed"
    assert set(meta) == {"agent", "taskId", "state", "polls", "ms"} and meta["polls"] >= 1


async def test_failed_task_maps_to_the_spec_string() -> None:
    async with served_agent() as (served, _, ended, _):
        card = served.base_url + "/.well-known/agent-card.json"
        caller = await create_toolkit(ToolkitOptions(builtins=False))
        async with caller:
            names = await caller.add_agent(agent(card, poll_every=10))
            assert names == ["toolnexus-agent_echo", "toolnexus-agent_summarize"]
            tool = caller.get("toolnexus-agent_echo")
            assert tool is not None
            result = await tool.call({"task": "boom now"})
    task_id = (result.metadata or {})["taskId"]
    assert result.is_error
    assert (
        result.output == f"A2A task {task_id} failed: generate raised RuntimeError: the model broke"
    )
    assert ended[-1].state == "failed"


async def test_timeout_string_and_remote_cancel() -> None:
    async with served_agent() as (served, model, ended, _):
        card = served.base_url + "/.well-known/agent-card.json"
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(card, timeout=200, poll_every=20)])
        )
        async with caller:
            tool = caller.get("toolnexus-agent_echo")
            assert tool is not None
            result = await tool.call({"task": "slow one"})
        task_id = (result.metadata or {})["taskId"]
        assert result.output.startswith(f"A2A task {task_id} timed out after 200ms (state=")
        assert model.cancelled == ["slow one"]  # CancelTask reached the remote run
        assert ended[-1].state == "canceled"


class PolledStore(InMemoryTaskStore):
    """Sets ``polled`` once a task is read (a ``GetTask`` arrived)."""

    def __init__(self) -> None:
        super().__init__()
        self.polled = trio.Event()

    async def get(self, task_id: str) -> dict[str, Any] | None:
        self.polled.set()
        return await super().get(task_id)


@pytest.mark.parametrize("when", ["submitting", "polling"])
async def test_cancelled_call_cancels_the_remote_task(when: str) -> None:
    store = PolledStore()
    async with served_agent(A2AServeConfig(store=store)) as (served, model, ended, _):
        card = served.base_url + "/.well-known/agent-card.json"
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(card, poll_every=20)])
        )
        async with caller:
            tool = caller.get("toolnexus-agent_echo")
            assert tool is not None
            token = CancelToken()
            with TaskCensus() as census:
                async with trio.open_nursery() as nursery:

                    async def call() -> None:
                        results.append(
                            await tool.call({"task": "slow two"}, ToolContext(cancel=token))
                        )

                    results: list[Any] = []
                    nursery.start_soon(call)
                    await model.started.wait()
                    if when == "polling":
                        await store.polled.wait()
                    token.cancel("stop")
            # The server's own tasks (a kept-alive connection) live on; the call's are gone.
            server = ("hypercorn", "trio._highlevel_serve_listeners")
            stray = [t.name for t in census.new_tasks() if not t.name.startswith(server)]
            assert stray == []
        # SPEC §7A's result for a cancelled call (peer: test_a2a_cancel_mid_poll_stops_
        # further_gettask, test_a2a_cancel_mid_sendmessage_is_a_cancel_not_transport_error).
        meta = results[0].metadata
        assert results[0].output == f"A2A task {meta['taskId']} canceled" and meta["taskId"]
        assert results[0].is_error
        assert sorted(meta) == ["agent", "ms", "polls", "state", "taskId"]
        assert (meta["agent"], meta["state"]) == ("toolnexus-agent", "canceled")
        assert (meta["polls"] > 0) == (when == "polling")
        assert model.cancelled == ["slow two"]
        assert ended[-1].state == "canceled"


async def test_a_cancelled_run_records_the_a2a_canceled_result() -> None:
    # peer: test_a2a_cancel_mid_gettask_is_a_cancel_not_transport_error (in a run)
    store = PolledStore()
    async with served_agent(A2AServeConfig(store=store)) as (served, model, ended, _):
        card = served.base_url + "/.well-known/agent-card.json"
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(card, poll_every=20)])
        )
        async with caller:

            async def generate(request: Any) -> dict[str, Any]:
                call = {"id": "a1", "name": "toolnexus-agent_echo", "arguments": {"task": "slow"}}
                return {"content": "", "tool_calls": [call]}

            client = create_in_process_client(InProcessOptions(model="m", generate=generate))
            token = CancelToken()
            async with trio.open_nursery() as nursery:

                async def stop() -> None:
                    await store.polled.wait()
                    token.cancel("stop")

                nursery.start_soon(stop)
                result = await client.run("go", caller, cancel=token)
        assert result.status == "cancelled"
        [record] = result.tool_calls
        assert record.output == f"A2A task {record.metadata['taskId']} canceled"
        assert record.metadata["state"] == "canceled" and record.is_error
        assert result.messages[-1]["content"] == record.output
        assert model.cancelled == ["slow"]
        assert ended[-1].state == "canceled"


async def test_failing_agent_gives_no_tools_and_a_status() -> None:
    dead = "http://127.0.0.1:9/.well-known/agent-card.json"
    toolkit = await create_toolkit(
        ToolkitOptions(
            builtins=False, agents={"gone": {"card": dead}, "off": {"card": dead, "disabled": True}}
        )
    )
    async with toolkit:
        assert toolkit.tools() == []
        status = toolkit.a2a_status()
    assert status["gone"].state == "failed" and "127.0.0.1:9" in (status["gone"].error or "")
    assert status["off"].state == "disabled"


def test_config_block_rules() -> None:
    [one] = parse_agents_config(
        {"a": {"card": "http://h/c.json", "pollEvery": 5, "timeout": 7, "enabled": False}}
    )
    assert (one.id, one.poll_every, one.timeout, one.enabled) == ("a", 5, 7, False)
    with pytest.raises(ValueError, match=r"agents\.a"):
        parse_agents_config({"a": {"card": "http://h/c.json", "pollEvery": "5"}})
    with pytest.raises(ValueError, match="unknown keys"):
        parse_agents_config({"a": {"card": "http://h/c.json", "extra": 1}})


async def test_file_store_keeps_tasks(tmp_path: Any) -> None:
    store = FileTaskStore(tmp_path)
    async with served_agent(A2AServeConfig(store=store)) as (served, _, _, _):
        card = served.base_url + "/.well-known/agent-card.json"
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(card, poll_every=10)])
        )
        async with caller:
            tool = caller.get("toolnexus-agent_echo")
            assert tool is not None
            result = await tool.call({"task": "keep"})
    task_id = (result.metadata or {})["taskId"]
    saved = json.loads((tmp_path / f"{task_id}.json").read_text())
    assert saved["status"]["state"] == "completed"
    assert await store.get("../etc") is None


async def test_a2a_alone_without_the_mcp_server() -> None:
    # What Toolkit.serve(a2a=...) gives when the mcp extra is missing: A2A on hypercorn alone.
    model = Model()
    client = create_in_process_client(InProcessOptions(model="scripted", generate=model.generate))
    toolkit = await create_toolkit(ToolkitOptions(skills=SKILLS, builtins=False))
    server = A2AServer(toolkit, client, A2AServeConfig(name="solo"))
    async with toolkit, A2AServing(server) as served:
        assert served.url == served.base_url + "/"
        assert (await get(served.base_url + "/mcp")).status_code == 404
        caller = await create_toolkit(
            ToolkitOptions(builtins=False, agents=[agent(served.card_url, poll_every=10)])
        )
        async with caller:
            tool = caller.get("solo_echo")
            assert tool is not None
            result = await tool.call({"task": "alone"})
    assert result.output == "echo: alone"
    with pytest.raises(ValueError, match="loopback"):
        A2AServing(server, "0.0.0.0")
