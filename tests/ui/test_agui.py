"""The AG-UI endpoint over a real socket, against the FakeProvider: streamed text and
tool calls, the agent tree, an approval as an interrupt answered by the next request,
and a disconnect that ends a sub-agent's real ``bash sleep 60``. Every event is checked
against the ``ag-ui-protocol`` models. Real processes: the real clock, with guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h11
import pytest
import trio
from agui_helpers import post_sse, run_input, run_to_end, until
from builtin_helpers import live_group_members

from toolnexus_trio import Request, ToolContext, ToolResult, pending, tool
from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
from toolnexus_trio.models import ClientOptions
from toolnexus_trio.testing import FakeProvider, open_fake_provider
from toolnexus_trio.ui import AguiAgent, UiServing
from toolnexus_trio.ui._app import MAX_BODY


@tool
async def echo(text: str) -> str:
    """Say *text* back."""
    return f"echo:{text}"


def _options(provider: FakeProvider) -> ClientOptions:
    return ClientOptions(base_url=provider.base_url, style="openai", model="m", api_key="k")


def _types(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


async def test_streamed_text_and_two_tool_calls() -> None:
    script = [
        {
            "tool_calls": [
                {"name": "echo", "arguments": {"text": "a"}, "id": "c1"},
                {"name": "echo", "arguments": {"text": "b"}, "id": "c2"},
            ]
        },
        {"text": "both echoes are back"},
    ]
    with trio.fail_after(20):
        async with (
            open_fake_provider(script) as provider,
            UiServing(AguiAgent(_options(provider), [echo])) as served,
        ):
            frames = await run_to_end(served.url + "agui", run_input("t1", "r1", "hi"))
    types = _types(frames)
    assert types[0] == "RUN_STARTED" and types[1] == "STATE_SNAPSHOT"
    assert types[-1] == "RUN_FINISHED"
    starts = [f for f in frames if f["type"] == "TOOL_CALL_START"]
    assert [(f["toolCallId"], f["toolCallName"]) for f in starts] == [
        ("c1", "echo"),
        ("c2", "echo"),
    ]
    results = {f["toolCallId"]: f["content"] for f in frames if f["type"] == "TOOL_CALL_RESULT"}
    assert results == {"c1": "echo:a", "c2": "echo:b"}
    # The arguments as the provider streamed them: two fragments each, each call opened
    # by its first fragment and closed before it runs.
    pieces: dict[str, list[str]] = {}
    for f in frames:
        if f["type"] == "TOOL_CALL_ARGS":
            pieces.setdefault(f["toolCallId"], []).append(f["delta"])
    assert {k: len(v) for k, v in pieces.items()} == {"c1": 2, "c2": 2}
    assert {k: json.loads("".join(v)) for k, v in pieces.items()} == {
        "c1": {"text": "a"},
        "c2": {"text": "b"},
    }
    for call in ("c1", "c2"):
        mine = [f["type"] for f in frames if f.get("toolCallId") == call]
        assert mine == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_ARGS", "TOOL_CALL_END",
                        "TOOL_CALL_RESULT"]  # fmt: skip
    deltas = [f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) > 1 and "".join(deltas) == "both echoes are back"  # streamed
    assert frames[-1]["result"] == {"status": "done", "text": "both echoes are back"}


async def test_approval_is_an_interrupt_answered_by_the_next_request() -> None:
    ran: list[str] = []

    @tool
    async def launch(ctx: ToolContext, target: str) -> ToolResult:
        """Launch at *target*, once a person approves."""
        if ctx.answer is None:
            return pending(
                Request(
                    kind="approval",
                    prompt=f"launch at {target}?",
                    data={"show": f"launch {target}"},
                )
            )
        ran.append(target)
        return ToolResult.ok(f"launched {target}")

    script = [
        {"tool_calls": [{"name": "launch", "arguments": {"target": "moon"}, "id": "c1"}]},
        {"text": "launched"},
    ]
    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            agent = AguiAgent(_options(provider), [launch])
            async with UiServing(agent) as served:
                url = served.url + "agui"
                first = await run_to_end(url, run_input("t2", "r1", "go"))
                assert first[-1]["type"] == "RUN_FINISHED"
                outcome = first[-1]["outcome"]
                assert outcome["type"] == "interrupt"
                (interrupt,) = outcome["interrupts"]
                assert interrupt["message"] == "launch at moon?"
                assert interrupt["metadata"]["show"] == "launch moon"
                assert ran == [] and agent.live_runs() == 1  # parked on the approval
                resume = [
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ]
                second = await run_to_end(url, run_input("t2", "r2", resume=resume))
    assert ran == ["moon"]
    assert _types(second)[0] == "RUN_STARTED"
    assert second[-1]["result"] == {"status": "done", "text": "launched"}
    assert any(f.get("content") == "launched moon" for f in second)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
async def test_a_disconnect_ends_a_sub_agents_bash(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}; sleep 60 & sleep 60; wait"
    script = [
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "wait"}, "id": "d1"}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}, "id": "b1"}]},
    ]
    tools = [t for t in builtin_tools(BuiltinsConfig(base_dir=str(tmp_path))) if t.name == "bash"]
    with trio.fail_after(30):
        async with open_fake_provider(script) as provider:
            agent = AguiAgent(_options(provider), tools)
            async with UiServing(agent) as served:
                seen: list[dict[str, Any]] = []
                async with post_sse(served.url + "agui", run_input("t3", "r1", "go")) as (
                    _,
                    frames,
                ):
                    async for frame in frames:
                        seen.append(frame)
                        if frame["type"] == "TOOL_CALL_START" and frame["toolCallName"] == "bash":
                            break
                    await until(lambda: pid_file.exists() and pid_file.read_text().strip())
                    pgid = int(pid_file.read_text())
                    await until(lambda: len(live_group_members(pgid)) >= 2)
                # The client is gone: the run, its sub-agent and its processes end.
                await until(lambda: not agent.live_runs() and not live_group_members(pgid))
    deltas = [op for f in seen if f["type"] == "STATE_DELTA" for op in f["delta"]]
    assert any(op["op"] == "add" and op["path"] == "/agents/root~1helper.1" for op in deltas)
    assert any(
        f["type"] == "TOOL_CALL_START" and f["toolCallId"] == "root/helper.1:b1" for f in seen
    )


def test_importing_the_package_leaves_the_ui_alone() -> None:
    probe = (
        "import sys, toolnexus_trio, toolnexus_trio.loop; print('toolnexus_trio.ui' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def _status(url: str, headers: dict[str, str], body: bytes | None = None) -> int:
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "", parts.port or 80)
    conn = h11.Connection(h11.CLIENT)
    method = "GET" if body is None else "POST"
    head = [*headers.items(), ("content-length", str(len(body or b"")))]
    await stream.send_all(conn.send(h11.Request(method=method, target=parts.path, headers=head)))
    await stream.send_all(conn.send(h11.Data(data=body or b"")) + conn.send(h11.EndOfMessage()))
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
            continue
        await stream.aclose()
        assert isinstance(event, h11.Response)
        return event.status_code


async def test_host_and_origin_are_checked_and_bad_bodies_refused() -> None:
    with trio.fail_after(20):
        async with (
            open_fake_provider([]) as provider,
            UiServing(AguiAgent(_options(provider))) as served,
        ):
            url, netloc = served.url, urlsplit(served.url).netloc
            assert await _status(url, {"host": netloc}) == 200
            assert await _status(url, {"host": f"localhost:{urlsplit(url).port}"}) == 200
            assert await _status(url, {"host": "evil.example"}) == 403
            origin = {"host": netloc, "origin": "http://evil.example"}
            assert await _status(url + "agui", origin, b"{}") == 403
            local = {"host": netloc, "origin": f"http://{netloc}"}
            assert await _status(url + "agui", local, b"not json") == 400
            assert await _status(url + "agui", local, b"x" * (MAX_BODY + 1)) == 413
            assert await _status(url + "nothing", {"host": netloc}) == 404
    with pytest.raises(ValueError, match="loopback"):
        UiServing(AguiAgent(_options(provider)), "0.0.0.0")


async def test_a_resume_that_matches_nothing_is_refused_and_the_run_keeps_waiting() -> None:
    @tool
    async def launch(ctx: ToolContext) -> ToolResult:
        """Launch, once approved."""
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="launch?"))
        return ToolResult.ok("launched")

    script = [{"tool_calls": [{"name": "launch", "id": "c1"}]}, {"text": "done"}]
    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            agent = AguiAgent(_options(provider), [launch])
            async with UiServing(agent) as served:
                url = served.url + "agui"
                alone = await run_to_end(
                    url, run_input("t9", "r0", resume=[{"interruptId": "x", "status": "resolved"}])
                )
                assert [f["type"] for f in alone] == ["RUN_STARTED", "RUN_ERROR"]
                first = await run_to_end(url, run_input("t9", "r1", "go"))
                (interrupt,) = first[-1]["outcome"]["interrupts"]
                again = await run_to_end(url, run_input("t9", "r2", "go again"))
                assert again[-1]["type"] == "RUN_ERROR" and "resume" in again[-1]["message"]
                wrong = [
                    {"interruptId": "nope", "status": "resolved", "payload": {"approved": True}}
                ]
                assert (await run_to_end(url, run_input("t9", "r3", resume=wrong)))[-1][
                    "type"
                ] == "RUN_ERROR"
                assert agent.live_runs() == 1
                denied = [
                    {
                        "interruptId": interrupt["id"],
                        "status": "resolved",
                        "payload": {"approved": False},
                    }
                ]
                last = await run_to_end(url, run_input("t9", "r4", resume=denied))
    assert any(
        f["type"] == "TOOL_CALL_RESULT" and f["content"].startswith("declined") for f in last
    )
    assert last[-1]["result"]["status"] == "done"


async def test_malformed_inputs_get_run_error() -> None:
    with trio.fail_after(20):
        async with (
            open_fake_provider([]) as provider,
            UiServing(AguiAgent(_options(provider))) as served,
        ):
            url = served.url + "agui"
            for body in (
                {"threadId": "m1", "messages": "hello"},
                {"threadId": "m2", "messages": [{"role": "assistant", "content": "x"}]},
                {"threadId": "m3", "messages": [], "resume": ["not an entry"]},
                {"threadId": "m4", "messages": {"role": "user"}, "resume": {"x": 1}},
            ):
                frames = await run_to_end(url, body)
                assert [f["type"] for f in frames] == ["RUN_STARTED", "RUN_ERROR"], body


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
async def test_stopping_a_parked_run_ends_what_runs_beside_its_approval(tmp_path: Path) -> None:
    @tool
    async def launch(ctx: ToolContext) -> ToolResult:
        """Launch, once approved."""
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="launch?"))
        return ToolResult.ok("launched")

    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}; sleep 60"
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": command}},
                              {"name": "launch"}]}]  # fmt: skip
    bash = [t for t in builtin_tools(BuiltinsConfig(base_dir=str(tmp_path))) if t.name == "bash"]
    with trio.fail_after(30):
        async with open_fake_provider(script) as provider:
            agent = AguiAgent(_options(provider), [*bash, launch])
            async with UiServing(agent) as served:
                first = await run_to_end(served.url + "agui", run_input("p1", "r1", "go"))
                assert first[-1]["outcome"]["type"] == "interrupt"
                await until(lambda: pid_file.exists() and pid_file.read_text().strip())
                pgid = int(await trio.Path(pid_file).read_text())
                await until(lambda: live_group_members(pgid))
                # The page's Stop (or its pagehide beacon) while no request is open:
                stop = json.dumps({"threadId": "p1", "agent": "root"}).encode()
                host = {"host": urlsplit(served.url).netloc}
                assert await _status(served.url + "interrupt", host, stop) == 200
                await until(lambda: not agent.live_runs() and not live_group_members(pgid))


@pytest.mark.parametrize("style", ["anthropic", "responses"])
async def test_reasoning_streams_as_agui_reasoning_events(style: str) -> None:
    script = [{"text": "the answer", "reasoning": "think it through"}]
    with trio.fail_after(20):
        async with open_fake_provider(script) as provider:
            options = ClientOptions(base_url=provider.base_url, style=style, model="m")
            async with UiServing(AguiAgent(options)) as served:
                frames = await run_to_end(served.url + "agui", run_input("rz", "r1", "why"))
    types = _types(frames)  # each one validated against the ag-ui-protocol models
    thoughts = [f["delta"] for f in frames if f["type"] == "REASONING_MESSAGE_CONTENT"]
    assert "".join(thoughts) == "think it through" and len(thoughts) == 2
    assert types.index("REASONING_START") < types.index("REASONING_MESSAGE_START")
    assert types.index("REASONING_END") < types.index("TEXT_MESSAGE_START")
    (thinking,) = {f["messageId"] for f in frames if f["type"].startswith("REASONING")}
    assert thinking.startswith("think-")
    assert frames[-1]["result"] == {"status": "done", "text": "the answer"}
