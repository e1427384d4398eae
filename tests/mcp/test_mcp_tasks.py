"""MCP Tasks, client side: a real peer (the official SDK's MCPServer with its extension
interface, tests/mcp_servers/tasks_peer.py, a stdio subprocess) offers a task-capable
slow tool; our MCP tool calls it as a task (create, poll, result), and a cancel of our
scope sends ``tasks/cancel`` (the peer's ledger records it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import trio
from mcp_helpers import SERVERS

from toolnexus_trio import CancelToken, ToolContext, ToolkitOptions, open_toolkit

PEER = SERVERS / "tasks_peer.py"


def peer_config(ledger: Path) -> dict[str, Any]:
    return {"mcpServers": {"peer": {"command": [sys.executable, str(PEER), str(ledger), "stdio"]}}}


def lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


async def wait_for_line(ledger: Path, line: str) -> None:
    """Wait for the peer process to write *line* (its state is in another process)."""
    with trio.fail_after(20):
        while line not in lines(ledger):  # noqa: ASYNC110 - the state is in the peer process
            await trio.sleep(0.02)


async def test_a_task_capable_tool_is_called_as_a_task(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    options = ToolkitOptions(mcp=peer_config(ledger), builtins=False)
    async with open_toolkit(options) as toolkit:
        out: list[Any] = []

        async def call() -> None:
            out.append(await toolkit.execute("peer_slow", {"label": "one"}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await wait_for_line(ledger, "start one")
            # The peer created a task for it (tasks/list is the extension's method).
            listed = await toolkit.execute("peer_quick", {"text": "x"})
            assert listed.output == "quick: x"
            (tmp_path / "ledger.release").touch()
        assert out[0].output == "slow done: one" and not out[0].is_error
        assert out[0].metadata == {"server": "peer"}
    created, *rest = lines(ledger)
    assert created.startswith("created task-") and rest == ["start one", "done one"]


async def test_a_cancel_of_the_call_sends_tasks_cancel(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    options = ToolkitOptions(mcp=peer_config(ledger), builtins=False)
    async with open_toolkit(options) as toolkit:
        token = CancelToken()
        out: list[Any] = []

        async def call() -> None:
            out.append(await toolkit.execute("peer_slow", {"label": "two"}, ToolContext(token)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await wait_for_line(ledger, "start two")
            token.cancel()
        assert out[0].is_error and "cancelled" in out[0].output
        # tasks/cancel reached the peer (under the shield) before the cancel went on.
        created = [line.split()[1] for line in lines(ledger) if line.startswith("created ")]
        cancels = [line.split()[1] for line in lines(ledger) if line.startswith("cancel ")]
        assert len(created) == 1 and cancels == created
    assert "done two" not in lines(ledger)


async def test_a_cancel_while_the_create_is_answered_still_cancels_the_task(
    tmp_path: Path,
) -> None:
    """The server created the task and started the tool, its answer is on its way when
    the call is cancelled: the create's answer is still awaited (a bounded shield), so
    the task gets its ``tasks/cancel`` instead of running on unobserved."""
    ledger = tmp_path / "ledger"
    options = ToolkitOptions(mcp=peer_config(ledger), builtins=False)
    async with open_toolkit(options) as toolkit:
        token = CancelToken()
        out: list[Any] = []

        async def call() -> None:
            out.append(await toolkit.execute("peer_slow", {"label": "held"}, ToolContext(token)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await wait_for_line(ledger, "start held")
            token.cancel()  # the peer has not answered the create yet
            (tmp_path / "ledger.answer").touch()
        assert out[0].is_error and "cancelled" in out[0].output
        created = [line.split()[1] for line in lines(ledger) if line.startswith("created ")]
        cancels = [line.split()[1] for line in lines(ledger) if line.startswith("cancel ")]
        assert len(created) == 1 and cancels == created
    assert "done held" not in lines(ledger)
