"""A served toolkit announces its MCP source's tool changes without polling, and MCP tool
annotations map to our ToolHints and back (real SDK servers and clients on loopback)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

import attrs
import mcp_types as types
import trio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp_helpers import build_everything, http_app

from toolnexus_trio import (
    ToolContext,
    ToolHints,
    ToolkitOptions,
    ToolSource,
    define_tool,
    open_toolkit,
)
from toolnexus_trio.mcp._hints import MAX_TITLE, annotations_from_hints, hints_from_annotations


class Steps(trio.abc.Instrument):
    """Counts the steps of the tasks that watch for tool changes."""

    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith(("toolnexus_trio.mcp._serve", "toolnexus_trio._toolkit")):
            self.count += 1


async def test_served_toolkit_announces_its_mcp_servers_change_without_polling() -> None:
    inner = build_everything("ev")
    changed = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with http_app(inner.streamable_http_app()) as base:
        config = {"ev": {"url": f"{base}/mcp", "tools": {"grow": True, "extra": True}}}
        async with (
            open_toolkit(ToolkitOptions(mcp=config, builtins=False)) as toolkit,
            toolkit.serve() as served,
            Client(served.url, mode="legacy", message_handler=on_message) as client,
        ):
            assert [t.name for t in (await client.list_tools()).tools] == ["ev_grow"]
            # Idle: the watcher is parked on Toolkit.wait_changed, so it does not run at
            # all (the old watcher looked every 0.25 s).
            steps = Steps()
            trio.lowlevel.add_instrument(steps)
            try:
                await trio.sleep(0.6)
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert steps.count == 0
            # The inner server adds a tool and says so; our source relists, the toolkit's
            # version moves, and the served toolkit tells its client.
            await client.call_tool("ev_grow", {})
            with trio.fail_after(10):
                await changed.wait()
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["ev_grow", "ev_extra"]


def annotated_server() -> MCPServer:
    server = MCPServer("ann")

    @server.tool(
        annotations=types.ToolAnnotations(
            title="Read\nthe\x1b[31m files", read_only_hint=True, idempotent_hint=True
        )
    )
    def reader() -> str:
        """Reads."""
        return "r"

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=False))
    def writer() -> str:
        """Writes (MCP defaults: destructive, open world)."""
        return "w"

    @server.tool(
        annotations=types.ToolAnnotations(
            destructive_hint=False, idempotent_hint=True, open_world_hint=False
        )
    )
    def adder() -> str:
        """Adds only."""
        return "a"

    @server.tool()
    def plain() -> str:
        """No annotations."""
        return "p"

    return server


async def test_mcp_annotations_become_hints_and_are_served_back() -> None:
    async def ok(args: dict[str, Any], ctx: ToolContext) -> str:
        return "ok"

    native = attrs.evolve(
        define_tool("mine", "Mine.", None, ok),
        hints=ToolHints(read_only=True, open_world=True, title="My tool"),
    )
    async with http_app(annotated_server().streamable_http_app()) as base:
        options = ToolkitOptions(
            mcp={"ann": {"url": f"{base}/mcp"}}, extra_tools=[native], builtins=False
        )
        async with open_toolkit(options) as toolkit:
            hints = {t.name: t.hints for t in toolkit.tools() if t.source is ToolSource.MCP}
            assert hints == {
                "ann_reader": ToolHints(
                    read_only=True, idempotent=True, open_world=True, title="Read the [31m files"
                ),
                "ann_writer": ToolHints(destructive=True, open_world=True),
                "ann_adder": ToolHints(idempotent=True),
                "ann_plain": None,
            }
            async with toolkit.serve() as served, Client(served.url, mode="legacy") as client:
                listed = {t.name: t.annotations for t in (await client.list_tools()).tools}
    assert listed["ann_plain"] is None
    assert listed["ann_writer"] == types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    )
    assert listed["ann_reader"] == types.ToolAnnotations(
        title="Read the [31m files",
        read_only_hint=True,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=True,
    )
    assert listed["mine"] == types.ToolAnnotations(
        title="My tool",
        read_only_hint=True,
        destructive_hint=False,
        idempotent_hint=False,
        open_world_hint=True,
    )


def test_hints_mapping_rules() -> None:
    # a read-only tool is never destructive, whatever destructiveHint says
    ro = hints_from_annotations(types.ToolAnnotations(read_only_hint=True, destructive_hint=True))
    assert ro == ToolHints(read_only=True, open_world=True)
    # an empty annotations object still means MCP's defaults
    assert hints_from_annotations(types.ToolAnnotations()) == ToolHints(
        destructive=True, open_world=True
    )
    long = hints_from_annotations(types.ToolAnnotations(title="x" * 1000 + "\n"))
    assert long is not None and long.title == "x" * MAX_TITLE
    blank = hints_from_annotations(types.ToolAnnotations(title=" \r\n "))
    assert blank is not None and blank.title is None
    assert annotations_from_hints(None) is None
    # both ways: our hints survive a trip through MCP annotations
    for hints in (ToolHints(), ToolHints(True, False, True, True, "T"), ToolHints(False, True)):
        assert hints_from_annotations(annotations_from_hints(hints)) == hints
