"""The official AG-UI TypeScript client (``@ag-ui/client`` under node, a subprocess)
drives our endpoint: streamed text and two tool calls, an approval answered with
``resume``, and an abort that ends a sub-agent's real ``bash``. Real processes: the
real clock, with guards."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from agui_helpers import until, validate
from builtin_helpers import live_group_members

from toolnexus_trio import Request, ToolContext, ToolResult, pending, tool
from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
from toolnexus_trio.models import ClientOptions
from toolnexus_trio.testing import FakeProvider, open_fake_provider
from toolnexus_trio.ui import AguiAgent, UiServing

SCRIPT = Path(__file__).with_name("agui_client.mjs")


def _options(provider: FakeProvider) -> ClientOptions:
    return ClientOptions(base_url=provider.base_url, style="openai", model="m", api_key="k")


HANG_GUARD_S = 120
"""A bound on a whole test that only stops a hang (start-up waits on readiness signals)."""


async def _node(prefix: Path, url: str, mode: str, *more: str) -> list[dict[str, Any]]:
    done = await trio.run_process(
        ["node", str(SCRIPT), str(prefix), url, mode, *more],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        stdin=b"",
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    for line in lines:
        if "event" in line:
            validate(line["event"])
    return lines


@tool
async def echo(text: str) -> str:
    """Say *text* back."""
    return f"echo:{text}"


async def test_node_client_streamed_text_and_two_tool_calls(agui_client_prefix: Path) -> None:
    script = [
        {"tool_calls": [{"name": "echo", "arguments": {"text": "a"}, "id": "c1"},
                        {"name": "echo", "arguments": {"text": "b"}, "id": "c2"}]},
        {"text": "both echoes are back"},
    ]  # fmt: skip
    with trio.fail_after(HANG_GUARD_S):
        async with (
            open_fake_provider(script) as provider,
            UiServing(AguiAgent(_options(provider), [echo])) as served,
        ):
            lines = await _node(agui_client_prefix, served.url + "agui", "run")
    assert "error" not in lines[-1], lines[-1]
    events = [line["event"] for line in lines if "event" in line]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "both echoes are back"
    results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert results == {"c1": "echo:a", "c2": "echo:b"}
    # The client built the conversation from our events: two tool calls, their results.
    messages = lines[-1]["messages"]
    calls = [c["function"]["name"] for m in messages for c in m.get("toolCalls") or ()]
    assert calls == ["echo", "echo"]
    assert lines[-1]["done"] == {"status": "done", "text": "both echoes are back"}


async def test_node_client_answers_an_approval(agui_client_prefix: Path) -> None:
    ran: list[str] = []

    @tool
    async def launch(ctx: ToolContext, target: str) -> ToolResult:
        """Launch at *target*, once a person approves."""
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt=f"launch at {target}?"))
        ran.append(target)
        return ToolResult.ok(f"launched {target}")

    script = [
        {"tool_calls": [{"name": "launch", "arguments": {"target": "moon"}, "id": "c1"}]},
        {"text": "launched"},
    ]
    with trio.fail_after(HANG_GUARD_S):
        async with (
            open_fake_provider(script) as provider,
            UiServing(AguiAgent(_options(provider), [launch])) as served,
        ):
            lines = await _node(agui_client_prefix, served.url + "agui", "approve")
    (asked,) = [line["interrupts"] for line in lines if "interrupts" in line]
    assert [i["message"] for i in asked] == ["launch at moon?"]
    assert ran == ["moon"]
    assert lines[-1]["done"] == {"status": "done", "text": "launched"}


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
async def test_node_client_abort_reaches_a_sub_agents_bash(
    agui_client_prefix: Path, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    # Only a kill ends these sleeps while the test runs: an abort that missed the group
    # cannot pass by waiting for them to end on their own.
    command = f"echo $$ > {pid_file}; sleep 3600 & sleep 3600; wait"
    script = [
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "wait"}, "id": "d1"}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}, "id": "b1"}]},
    ]
    tools = [t for t in builtin_tools(BuiltinsConfig(base_dir=str(tmp_path))) if t.name == "bash"]
    try:
        # Nothing here waits on time: node aborts once the shell has written its pid (a
        # readiness signal: an abort on the call's start alone could kill the shell
        # before it wrote it, on a loaded machine), then the test waits for the end.
        # This bound only keeps a broken abort from hanging the suite; how fast the
        # abort ends everything is bench scenario agui_disconnect's (p95 <= 50 ms).
        with trio.fail_after(HANG_GUARD_S):
            async with open_fake_provider(script) as provider:
                agent = AguiAgent(_options(provider), tools)
                async with UiServing(agent) as served:
                    lines = await _node(
                        agui_client_prefix, served.url + "agui", "abort", str(pid_file)
                    )
                    assert any("aborting" in line for line in lines), lines
                    pgid = int(pid_file.read_text())
                    await until(lambda: not agent.live_runs() and not live_group_members(pgid))
    finally:
        _kill_left(pid_file)


def _kill_left(pid_file: Path) -> None:
    """A failed test leaves no shell behind (what the test checks is gone, if it passed)."""
    text = pid_file.read_text().strip() if pid_file.exists() else ""
    if text:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(text), signal.SIGKILL)
