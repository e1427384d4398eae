"""Our agent as an ACP agent: ``python -m toolnexus_trio acp`` driven by an editor
written with the official ACP Python SDK (tests/acp/sdk_client.py, asyncio, its own
process), the model a FakeProvider served here."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_helpers import children_groups, pid_alive

from toolnexus_trio.testing import FakeProvider, open_fake_provider

CLIENT = str(Path(__file__).with_name("sdk_client.py"))


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    before = children_groups()
    yield
    assert children_groups() <= before


async def drive(
    scenario: str, provider: FakeProvider, workdir: Path, *extra: str, style: str = "openai"
) -> dict[str, Any]:
    agent = [sys.executable, "-m", "toolnexus_trio", "acp", "--base-url", provider.base_url]
    agent += ["--style", style, "--model", "m", "--api-key", "k", *extra]
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, CLIENT, scenario, str(workdir), "--", *agent],
            capture_stdout=True,
            check=False,
        )
    assert done.returncode == 0
    report: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return report


async def test_prompt_streams_plan_tool_calls_and_the_answer_and_writes_through_the_editor(
    tmp_path: Path,
) -> None:
    script = [
        {
            "reasoning": "A plan first.",
            "tool_calls": [
                {
                    "name": "todowrite",
                    "arguments": {
                        "todos": [{"id": "1", "text": "write out.txt", "completed": False}]
                    },
                }
            ],
        },
        {"tool_calls": [{"name": "write", "arguments": {"path": "out.txt", "content": "hello"}}]},
        {"text": "Wrote it."},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "touch nope"}}]},
        {"text": "Refused."},
    ]
    async with open_fake_provider(script) as provider:
        report = await drive("edit", provider, tmp_path, style="responses")
    assert report["stop"] == ["end_turn", "end_turn"]
    first = report["first"]
    kinds = [u["sessionUpdate"] for u in first]
    assert kinds[:4] == ["agent_thought_chunk", "tool_call", "tool_call_update", "plan"]
    assert first[0]["content"]["text"] == "A plan first."
    assert first[1]["title"].startswith("todowrite")
    assert first[3]["entries"] == [
        {"content": "write out.txt", "priority": "medium", "status": "pending"}
    ]
    assert kinds[4:6] == ["tool_call", "tool_call_update"]
    assert first[4]["kind"] == "edit"
    assert first[5]["status"] == "completed"
    text = "".join(
        u["content"]["text"] for u in first if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text == "Wrote it."
    # The write was approved by the editor, and went to its buffer, not to the disk.
    assert report["permissions"][0]["title"] == "Allow write to out.txt?"
    assert report["permissions"][0]["kinds"] == ["allow_once", "allow_always", "reject_once"]
    assert report["writes"] == [{"path": str(tmp_path / "out.txt"), "content": "hello"}]
    assert not (tmp_path / "out.txt").exists()
    # The editor rejected the bash call: it never ran; the model was told.
    assert report["permissions"][1]["title"].startswith("Allow bash")
    assert not (tmp_path / "nope").exists()
    second = report["second"]
    [update] = [u for u in second if u["sessionUpdate"] == "tool_call_update"]
    assert update["status"] == "failed" or "declined" in json.dumps(update)
    assert "declined" in json.dumps(provider.requests[-1].json)


async def test_cancel_mid_bash_kills_the_command_at_once(tmp_path: Path) -> None:
    script = [
        {
            "tool_calls": [
                {"name": "bash", "arguments": {"command": "echo $$ > sleep.pid; exec sleep 60"}}
            ]
        },
        {"text": "never asked"},
    ]
    async with open_fake_provider(script) as provider:
        report = await drive("cancel", provider, tmp_path)
    assert report["stop"] == "cancelled"
    assert report["pid"] > 0
    assert not report["alive_after"]
    assert not pid_alive(report["pid"])
    assert len(provider.requests) == 1  # the turn ended there


async def test_session_load_replays_the_stored_conversation(tmp_path: Path) -> None:
    store = tmp_path / "conversations.sqlite"
    script = [{"text": "Noted: 7."}, {"text": "It was 7."}]
    async with open_fake_provider(script) as provider:
        report = await drive("load", provider, tmp_path, "--store", str(store))
    assert report["load"] is True
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in report["replay"]] == [
        ("user_message_chunk", "remember 7"),
        ("agent_message_chunk", "Noted: 7."),
    ]
    contents = [m.get("content") for m in provider.requests[-1].json["messages"]]
    assert contents[:2] == ["remember 7", "Noted: 7."]
    text = "".join(
        u["content"]["text"] for u in report["after"] if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text == "It was 7."


async def test_bash_runs_in_the_editors_terminal_when_offered(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo from-terminal; exit 3"}}]},
        {"text": "It failed with 3."},
    ]
    async with open_fake_provider(script) as provider:
        report = await drive("terminal", provider, tmp_path, "--yes")
    assert report["stop"] == "end_turn"
    assert report["calls"] == [
        ["create", "/bin/sh", "-c", "echo from-terminal; exit 3"],
        ["wait", "term1"],
        ["release", "term1"],
    ]
    shown = [u for u in report["updates"] if u["sessionUpdate"] == "tool_call_update"]
    assert shown[0]["content"] == [{"type": "terminal", "terminalId": "term1"}]
    assert shown[-1]["status"] == "failed"
    tool_message = provider.requests[-1].json["messages"][-1]
    assert "from-terminal" in tool_message["content"]
    assert "exited with code 3" in tool_message["content"]


async def test_cancel_kills_and_releases_the_editors_terminal(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 60"}}]},
        {"text": "never asked"},
    ]
    async with open_fake_provider(script) as provider:
        report = await drive("terminal_cancel", provider, tmp_path, "--yes")
    assert report["stop"] == "cancelled"
    assert report["calls"] == [
        ["create", "/bin/sh", "-c", "sleep 60"],
        ["wait", "term1"],
        ["kill", "term1"],
        ["release", "term1"],
    ]
    assert not report["alive"]
    assert len(provider.requests) == 1


async def test_the_editors_mcp_servers_join_the_session(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "ev_add", "arguments": {"a": 2, "b": 3}}]},
        {"text": "Five."},
    ]
    async with open_fake_provider(script) as provider:
        report = await drive("mcp", provider, tmp_path)
    assert report["stop"] == "end_turn"
    [update] = [u for u in report["updates"] if u["sessionUpdate"] == "tool_call_update"]
    assert update["status"] == "completed"
    assert update["content"][0]["content"]["text"] == '{"result":5}'
    offered = [t["function"]["name"] for t in provider.requests[0].json["tools"]]
    assert "ev_add" in offered


async def test_bad_input_gets_clear_errors_and_an_overlong_line_ends_the_connection(
    tmp_path: Path,
) -> None:
    agent = [sys.executable, "-m", "toolnexus_trio", "acp", "--base-url", "http://127.0.0.1:9"]
    agent += ["--style", "openai", "--model", "m", "--api-key", "k"]
    lines = [
        b"this is not json",
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"rel","mcpServers":[]}}',
        b'{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}',
    ]
    with trio.fail_after(60):
        done = await trio.run_process(
            agent, stdin=b"\n".join(lines) + b"\n", capture_stdout=True, cwd=tmp_path
        )
    answers = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert answers[0]["error"]["code"] == -32700 and answers[0]["id"] is None
    assert answers[1]["id"] == 1 and answers[1]["result"]["protocolVersion"] == 1
    assert answers[2]["id"] == 2 and answers[2]["error"]["code"] == -32602
    assert "absolute" in answers[2]["error"]["message"]
    assert answers[3]["id"] == 3 and answers[3]["error"]["code"] == -32601
    # One line over the 16 MiB limit: the connection ends; nothing was kept of it.
    overlong = b'{"jsonrpc":"2.0","method":"x","params":{"p":"' + b"a" * (17 * 2**20)
    with trio.fail_after(60):
        done = await trio.run_process(
            agent, stdin=overlong, capture_stdout=True, capture_stderr=True, cwd=tmp_path
        )
    assert done.stdout == b""
    assert b"over 16777216 bytes" in done.stderr


async def test_always_allow_is_asked_once_per_tool_and_session(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "1"}}]},
        {"tool_calls": [{"name": "write", "arguments": {"path": "b.txt", "content": "2"}}]},
        {"text": "Both."},
    ]
    async with open_fake_provider(script) as provider:
        report = await drive("always", provider, tmp_path)
    assert report["stop"] == "end_turn"
    assert [p["title"] for p in report["permissions"]] == ["Allow write to a.txt?"]
    assert [w["content"] for w in report["writes"]] == ["1", "2"]
