"""toolnexus 0.21's config file beyond its servers, and A2A serve memory (issue 32's small
gaps): the ``builtins``, ``a2a`` and ``mcpServer`` blocks, a served task continuing the
conversation of its ``contextId``, a pending run ending ``input-required``.

Each test names the peer test it answers (toolnexus 0.21.0's suite).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest

from toolnexus_trio import (
    BuiltinsConfig,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolContext,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
)
from toolnexus_trio.a2a import A2AServeConfig, TaskInfo
from toolnexus_trio.loop import GenerateRequest
from toolnexus_trio.mcp import parse_mcp_config

pytest.importorskip("hypercorn")
pytest.importorskip("mcp")


def test_the_config_keeps_its_sibling_blocks_and_checks_their_kinds() -> None:
    config = parse_mcp_config(
        {"mcpServers": {}, "builtins": False, "a2a": {"name": "x"}, "mcpServer": {"name": "y"}}
    )
    assert (config.servers, config.builtins) == ((), False)
    assert config.a2a == {"name": "x"} and config.mcp_server == {"name": "y"}
    bare = parse_mcp_config({"builtins": {"disabled": ["bash"]}})  # a bare server map
    assert bare.servers == () and bare.builtins == {"disabled": ["bash"]}
    for bad, why in [
        ({"builtins": "no"}, "builtins must be true, false or an object"),
        ({"a2a": []}, "a2a block must be an object"),
        ({"mcpServer": "x"}, "mcpServer block must be an object"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_mcp_config(bad)


def test_the_builtins_object_form() -> None:
    config = BuiltinsConfig.of(
        {"tools": {"read": True, "webfetch": False}, "disabled": ["bash"], "baseDir": "/srv"}
    )
    assert config == BuiltinsConfig(True, {"read": True, "webfetch": False, "bash": False}, "/srv")
    assert not BuiltinsConfig.of({"enabled": False}).enabled
    assert BuiltinsConfig.of({"shell": ["/bin/bash", "-c"]}).shell == ("/bin/bash", "-c")
    with pytest.raises(ValueError, match="unknown key 'disable' \\(did you mean 'disabled'\\?\\)"):
        BuiltinsConfig.of({"disable": ["bash"]})
    with pytest.raises(ValueError, match=r"builtins\.tools must map tool names"):
        BuiltinsConfig.of({"tools": {"bash": "no"}})


async def test_the_config_files_builtins_key_drives_the_builtins(tmp_path: Path) -> None:
    # peer: the config file's top-level builtins (bool or dict) drives the toggle
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {}, "builtins": {"disabled": ["bash", "write"]}}))
    async with create_toolkit(ToolkitOptions(mcp=str(path))) as toolkit:
        names = {t.name for t in toolkit.tools()}
    assert "read" in names and not {"bash", "write"} & names
    path.write_text(json.dumps({"mcpServers": {}, "builtins": False}))
    async with create_toolkit(ToolkitOptions(mcp=str(path))) as toolkit:
        assert toolkit.tools() == []
    # The options' own choice wins over the file's.
    async with create_toolkit(ToolkitOptions(mcp=str(path), builtins=True)) as toolkit:
        assert "bash" in {t.name for t in toolkit.tools()}


def _echo_model(seen: list[list[dict[str, Any]]]) -> Any:
    async def generate(request: GenerateRequest) -> InProcessResponse:
        seen.append(list(request.messages))
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        return InProcessResponse(content=" | ".join(users))

    return generate


async def _send(url: str, text: str, context: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
        "kind": "message",
    }
    if context is not None:
        message["contextId"] = context
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    async with httpx2.AsyncClient() as http:
        reply = (await http.post(url, json=body)).json()
        task = reply["result"]
        for _ in range(200):
            got = await http.post(
                url, json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": task}
            )
            task = got.json()["result"]
            if task["status"]["state"] not in ("submitted", "working"):
                return task
    raise AssertionError(f"the task never ended: {task}")


async def test_the_config_files_a2a_and_mcp_server_blocks_are_serves_defaults(
    tmp_path: Path,
) -> None:
    # peer: test_serve_top_level_a2a_config_block_picked_up and
    # test_top_level_mcp_server_config_picked_up
    path = tmp_path / "mcp.json"
    blocks = {"a2a": {"name": "Config Bot", "version": "3.1"}, "mcpServer": {"name": "cfg-mcp"}}
    path.write_text(json.dumps({"mcpServers": {}, "builtins": False, **blocks}))
    client = create_in_process_client(InProcessOptions(model="m", generate=_echo_model([])))
    async with (
        create_toolkit(ToolkitOptions(mcp=str(path))) as toolkit,
        toolkit.serve(client=client) as served,
        httpx2.AsyncClient() as http,
    ):
        card = (await http.get(served.base_url + "/.well-known/agent-card.json")).json()
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        headers = {"accept": "application/json, text/event-stream"}
        answer = await http.post(served.url, json=init, headers=headers)
    assert (card["name"], card["version"]) == ("Config Bot", "3.1")
    text = answer.text
    payload = (
        json.loads(text[text.index("{") :].splitlines()[0]) if "data:" in text else answer.json()
    )
    assert payload["result"]["serverInfo"]["name"] == "cfg-mcp"


def test_a_bad_a2a_block_is_refused() -> None:
    with pytest.raises(ValueError, match="a2a: unknown key 'nme'"):
        A2AServeConfig.from_block({"nme": "x"})
    with pytest.raises(ValueError, match=r"a2a\.skills must be an array"):
        A2AServeConfig.from_block({"skills": "echo"})


async def test_a_served_task_continues_the_conversation_of_its_context_id() -> None:
    # peer: test_a2a_serve_remembers_peer_turns_by_context_id
    seen: list[list[dict[str, Any]]] = []
    client = create_in_process_client(InProcessOptions(model="m", generate=_echo_model(seen)))
    ended: list[TaskInfo] = []
    async with (
        create_toolkit(ToolkitOptions(builtins=False)) as toolkit,
        toolkit.serve(client=client, a2a=A2AServeConfig(), on_task=ended.append) as served,
    ):
        url = served.base_url + "/"
        first = await _send(url, "my name is Ada", "ctx-1")
        second = await _send(url, "what is my name?", "ctx-1")
        other = await _send(url, "hello", "ctx-2")
        anonymous = await _send(url, "no context")
    texts = [t["artifacts"][0]["parts"][0]["text"] for t in (first, second, other, anonymous)]
    assert texts == ["my name is Ada", "my name is Ada | what is my name?", "hello", "no context"]
    assert second["contextId"] == "ctx-1" and len(seen[1]) == 3  # user, assistant, user
    assert [i.state for i in ended] == ["completed"] * 4


async def test_a_pending_run_is_input_required_with_its_prompt_and_no_artifact() -> None:
    # peer: test_serve_suspended_run_surfaces_input_required_not_completed_g1
    async def approve(args: dict[str, Any], ctx: ToolContext) -> Any:
        return pending(Request(kind="approval", prompt="May I deploy?"))

    async def generate(request: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(tool_calls=(InProcessToolCall("c1", "deploy", {}),))

    deploy = define_tool("deploy", "deploys", None, approve)
    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    ended: list[TaskInfo] = []
    options = ToolkitOptions(builtins=False, extra_tools=[deploy])
    async with (
        create_toolkit(options) as toolkit,
        toolkit.serve(client=client, a2a=A2AServeConfig(), on_task=ended.append) as served,
    ):
        task = await _send(served.base_url + "/", "deploy it", "ctx-9")
    assert task["status"]["state"] == "input-required"
    assert task["status"]["message"]["parts"][0]["text"] == "May I deploy?"
    assert "artifacts" not in task
    (info,) = ended
    assert info.state == "input-required" and info.result.status == "pending"
    # The run is kept under the contextId: the host answers it through its client.
    assert (await client.store.get("ctx-9")) is not None
