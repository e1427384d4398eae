"""MCP Tasks, server side: ``serve`` runs our tools as tasks for a client that asks,
driven by the official SDK's client (its ``ClientSession`` over streamable HTTP, the
task-augmented ``tools/call`` sent through the SDK's public ``JSONRPCDispatcher``,
since the session checks every ``tools/call`` answer against ``CallToolResult``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
import trio
import trio.testing
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from toolnexus_trio import (
    BuiltinsConfig,
    ToolContext,
    ToolkitOptions,
    create_toolkit,
    define_tool,
    open_toolkit,
)
from toolnexus_trio.mcp._taskboard import MAX_TASKS, TaskBoard

HEADERS = {"headers": {"mcp-protocol-version": "2025-11-25"}}


class Probe:
    def __init__(self) -> None:
        self.release = trio.Event()
        self.started = trio.Event()
        self.cancelled: list[str] = []
        self.call_ids: list[str | None] = []


async def toolkit_for(probe: Probe) -> Any:
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        probe.call_ids.append(ctx.call_id)
        probe.started.set()
        try:
            await probe.release.wait()
        except trio.Cancelled:
            probe.cancelled.append(args["label"])
            raise
        return f"slow done: {args['label']}"

    tool = define_tool(
        "slow",
        "Wait for the test's release.",
        {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]},
        slow,
    )
    return await create_toolkit(ToolkitOptions(extra_tools=[tool], builtins=BuiltinsConfig.off()))


@asynccontextmanager
async def sdk_client(url: str) -> AsyncIterator[tuple[ClientSession, JSONRPCDispatcher[Any]]]:
    async with streamable_http_client(url) as (read, write):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            yield session, dispatcher


async def create(dispatcher: JSONRPCDispatcher[Any], label: str) -> types.CreateTaskResult:
    params = {"name": "slow", "arguments": {"label": label}, "task": {"ttl": 60_000}}
    raw = await dispatcher.send_raw_request("tools/call", params, HEADERS)  # type: ignore[arg-type]
    return types.CreateTaskResult.model_validate(raw)


def get(task_id: str) -> types.GetTaskRequest:
    return types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))


def payload(task_id: str) -> types.GetTaskPayloadRequest:
    return types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))


async def test_a_task_is_created_polled_and_its_result_fetched() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    with trio.fail_after(30):
        async with toolkit.serve() as served, sdk_client(served.url) as (session, dispatcher):
            caps = session.server_capabilities
            assert caps is not None and caps.tasks is not None
            assert caps.tasks.requests is not None and caps.tasks.requests.tools is not None
            assert caps.tasks.requests.tools.call is not None and caps.tasks.cancel is not None
            listed = await session.list_tools()
            assert [(t.name, t.execution) for t in listed.tools] == [
                ("slow", types.ToolExecution(task_support="optional"))
            ]

            created = await create(dispatcher, "one")  # answered at once, the tool running
            task_id = created.task.task_id
            await probe.started.wait()
            assert created.task.status == "working" and created.task.ttl == 60_000
            polled = await session.send_request(get(task_id), types.GetTaskResult)
            assert polled.status == "working" and polled.poll_interval == 500
            listing = await session.send_request(types.ListTasksRequest(), types.ListTasksResult)
            assert [t.task_id for t in listing.tasks] == [task_id]
            probe.release.set()
            result = await session.send_request(payload(task_id), types.CallToolResult)
            assert result.content == [types.TextContent(type="text", text="slow done: one")]
            assert not result.is_error
            done = await session.send_request(get(task_id), types.GetTaskResult)
            assert done.status == "completed"
            assert probe.call_ids == [task_id]
            # A plain call still answers in place.
            plain = await session.call_tool("slow", {"label": "two"})
            assert plain.content == [types.TextContent(type="text", text="slow done: two")]


async def test_tasks_cancel_cancels_the_tools_scope() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    with trio.fail_after(30):
        async with toolkit.serve() as served, sdk_client(served.url) as (session, dispatcher):
            created = await create(dispatcher, "three")
            task_id = created.task.task_id
            await probe.started.wait()
            request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
            cancelled = await session.send_request(request, types.CancelTaskResult)
            assert cancelled.status == "cancelled"
            assert probe.cancelled == ["three"]
            with pytest.raises(MCPError, match="cancelled"):
                await session.send_request(payload(task_id), types.CallToolResult)
            with pytest.raises(MCPError, match="already cancelled"):
                await session.send_request(request, types.CancelTaskResult)
            with pytest.raises(MCPError, match="unknown or expired"):
                await session.send_request(get("nope"), types.GetTaskResult)


async def test_our_client_calls_our_served_tool_as_a_task() -> None:
    probe = Probe()
    toolkit = await toolkit_for(probe)
    with trio.fail_after(30):
        async with toolkit.serve() as served:
            options = ToolkitOptions(
                mcp={"mcpServers": {"us": {"url": served.url}}}, builtins=BuiltinsConfig.off()
            )
            async with open_toolkit(options) as client_side:
                out: list[Any] = []

                async def call() -> None:
                    out.append(await client_side.execute("us_slow", {"label": "four"}))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call)
                    await probe.started.wait()
                    probe.release.set()
    assert out[0].output == "slow done: four" and not out[0].is_error
    # Run as a task: the tool's call id is the task's id, not a JSON-RPC request id.
    assert len(probe.call_ids) == 1 and not str(probe.call_ids[0]).isdigit()


async def test_the_board_keeps_tasks_bounded_and_drops_them_after_their_ttl(
    autojump_clock: trio.abc.Clock,
) -> None:
    """serve's task board on its own (no transport): a task past its ttl is cancelled
    and dropped; at most MAX_TASKS are kept, the oldest finished one making room, and
    a new one is refused when all of them run."""
    probe = Probe()
    toolkit = await toolkit_for(probe)
    runs: list[str] = []

    async def run(tool: Any, args: dict[str, Any], task_id: str) -> types.CallToolResult:
        runs.append(task_id)
        result = await tool.call(args, ToolContext(call_id=task_id))
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.output)])

    async with trio.open_nursery() as nursery:
        board = TaskBoard(lambda: toolkit._current(), run, lambda: nursery)

        def create(label: str, ttl: int | None = None) -> str:
            task: dict[str, Any] = {} if ttl is None else {"ttl": ttl}
            raw = {"name": "slow", "arguments": {"label": label}, "task": task}
            created: str = board._create(raw)["task"]["taskId"]
            return created

        short = create("short", ttl=1000)
        await trio.sleep(2)  # past its ttl: cancelled and dropped at the next look
        with pytest.raises(MCPError, match="unknown or expired"):
            board._find(short)
        await trio.testing.wait_all_tasks_blocked()  # the cancelled tool unwinds
        assert probe.cancelled == ["short"]

        first = create("first")
        probe.release.set()
        await trio.sleep(1)  # `first` completes
        probe.release = trio.Event()
        others = [create(f"t{i}") for i in range(MAX_TASKS - 1)]
        assert len(board._tasks) == MAX_TASKS
        newest = create("newest")  # the oldest finished one (`first`) made room
        assert first not in board._tasks and newest in board._tasks
        with pytest.raises(MCPError, match="too many tasks running"):
            create("refused")  # all 256 run
        assert len(board._tasks) == MAX_TASKS and others[0] in board._tasks
        with pytest.raises(MCPError, match="Unknown tool"):
            board._create({"name": "nope", "arguments": {}, "task": {}})
        nursery.cancel_scope.cancel()
