"""A real MCP server with MCP Tasks (2025-11-25 wire), written with the official SDK's
``MCPServer`` and its extension interface, for the task tests.

Run as ``python tasks_peer.py LEDGER stdio`` or ``python tasks_peer.py LEDGER http``
(streamable HTTP on 127.0.0.1, any port; the first stdout line is ``url <URL>``, so a
test can start it once and let client processes come and go). Runs on Trio (the SDK
is anyio).

- The tool ``slow(label)`` declares ``execution.taskSupport: "optional"`` and the
  server advertises ``capabilities.tasks`` (``list``, ``cancel``,
  ``requests.tools.call``) and the extension ``io.modelcontextprotocol/tasks``.
- ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` are the
  extension's ``MethodBinding`` s.
- A task-augmented ``tools/call`` is answered by a server middleware with a
  ``CreateTaskResult``: the extension's ``intercept_tool_call`` runs below the SDK's
  per-version result sieve, which on a 2025-11-25 connection rejects anything that is
  not a ``CallToolResult`` ("Handler returned an invalid result"); a middleware that
  answers without ``call_next`` owns its result.
- The ledger file (outside every process) gets ``created <task id>`` when a task is
  created, ``start <label>`` when the tool starts,
  ``cancel <task id>`` when ``tasks/cancel`` arrives, ``done <label>`` when it
  finishes. A task of a label starting with ``held`` is answered only once the file
  ``LEDGER.answer`` exists. ``slow`` waits until the file ``LEDGER.release`` exists (the test's
  signal), then answers ``slow done: <label>``.
"""

from __future__ import annotations

import itertools
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import mcp_types as types
import trio
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

TERMINAL = {"completed", "failed", "cancelled"}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _Tasks:
    def __init__(self, ledger: Path) -> None:
        self.server: MCPServer | None = None
        self.ledger = ledger
        self.nursery: trio.Nursery | None = None
        self.tasks: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)

    def note(self, line: str) -> None:
        with self.ledger.open("a") as f:
            f.write(line + "\n")

    def view(self, task_id: str) -> dict[str, Any]:
        t = self.tasks.get(task_id)
        if t is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no task {task_id!r}")
        return {
            "taskId": task_id,
            "status": t["status"],
            "createdAt": t["created"],
            "lastUpdatedAt": t["updated"],
            "ttl": 600000,
            "pollInterval": 100,
        }

    def create(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        assert self.nursery is not None
        task_id = f"task-{next(self.ids)}-{trio.current_time():.0f}"
        scope = trio.CancelScope()
        self.tasks[task_id] = {"status": "working", "created": _now(), "updated": _now(),
                               "result": None, "scope": scope, "done": trio.Event()}  # fmt: skip
        self.note(f"created {task_id}")
        self.nursery.start_soon(self._run, task_id, name, arguments, scope)
        return {"task": self.view(task_id)}

    async def _run(
        self, task_id: str, name: str, arguments: dict[str, Any], scope: trio.CancelScope
    ) -> None:
        t = self.tasks[task_id]
        with scope:
            try:
                assert self.server is not None
                result = await self.server.call_tool(name, arguments)
                t["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
                t["status"] = "completed"
            except Exception as exc:
                t["result"] = {"content": [{"type": "text", "text": str(exc)}], "isError": True}
                t["status"] = "failed"
        if scope.cancelled_caught:
            t["status"] = "cancelled"
        t["updated"] = _now()
        t["done"].set()

    async def get(self, ctx: Any, params: types.GetTaskRequestParams) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return self.view(params.task_id)

    async def result(self, ctx: Any, params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        self.view(params.task_id)
        t = self.tasks[params.task_id]
        await t["done"].wait()  # tasks/result blocks until the task is terminal
        if t["status"] == "cancelled":
            raise MCPError(code=types.INVALID_PARAMS, message="the task was cancelled")
        return dict(t["result"])

    async def cancel(self, ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        self.view(params.task_id)
        self.note(f"cancel {params.task_id}")
        t = self.tasks[params.task_id]
        if t["status"] not in TERMINAL:
            t["scope"].cancel()
            await t["done"].wait()
        return self.view(params.task_id)

    async def list(self, ctx: Any, params: types.PaginatedRequestParams) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return {"tasks": [self.view(i) for i in self.tasks]}


class TasksExtension(Extension):
    """The tasks methods, contributed through the SDK's extension interface."""

    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self, tasks: _Tasks) -> None:
        self._tasks = tasks

    def methods(self) -> list[MethodBinding]:
        t = self._tasks
        return [
            MethodBinding("tasks/get", types.GetTaskRequestParams, t.get),
            MethodBinding("tasks/result", types.GetTaskPayloadRequestParams, t.result),
            MethodBinding("tasks/cancel", types.CancelTaskRequestParams, t.cancel),
            MethodBinding("tasks/list", types.PaginatedRequestParams, t.list),
        ]


def build(ledger: Path) -> tuple[MCPServer, _Tasks]:
    tasks = _Tasks(ledger)

    async def middleware(ctx: Any, call_next: Any) -> Any:
        params = dict(ctx.params or {})
        if ctx.method == "tools/call" and params.get("task") is not None:
            arguments = dict(params.get("arguments") or {})
            created = tasks.create(params["name"], arguments)
            if str(arguments.get("label", "")).startswith("held"):
                # Answer only once the test says so: its cancel comes while this
                # answer is still on its way (the task already created and running).
                answer = ledger.with_name(ledger.name + ".answer")
                while not answer.exists():  # noqa: ASYNC110 - the signal is a file from the test
                    await trio.sleep(0.02)
            return created
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            caps = result.setdefault("capabilities", {})
            caps["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        if ctx.method == "tools/list" and isinstance(result, dict):
            for tool in result.get("tools", []):
                if tool.get("name") == "slow":
                    tool["execution"] = {"taskSupport": "optional"}
        return result

    server = MCPServer("tasks-peer", middleware=[middleware], extensions=[TasksExtension(tasks)])
    tasks.server = server

    @server.tool(structured_output=False)
    async def slow(label: str) -> str:
        """Wait for the test's release, then answer (a long job)."""
        tasks.note(f"start {label}")
        release = ledger.with_name(ledger.name + ".release")
        while not release.exists():  # noqa: ASYNC110 - the signal is a file from the test
            await trio.sleep(0.05)
        tasks.note(f"done {label}")
        return f"slow done: {label}"

    @server.tool(structured_output=False)
    def quick(text: str) -> str:
        """Answer at once (no task support declared)."""
        return f"quick: {text}"

    return server, tasks


async def main(ledger: Path, mode: str) -> None:
    server, tasks = build(ledger)
    async with trio.open_nursery() as nursery:
        tasks.nursery = nursery
        if mode == "stdio":
            await server.run_stdio_async()
        else:
            from hypercorn.config import Config
            from hypercorn.trio import serve

            config = Config()
            config.bind = ["127.0.0.1:0"]
            config.accesslog = None
            binds = await nursery.start(
                lambda task_status: serve(
                    server.streamable_http_app(), config, task_status=task_status
                )
            )
            print(f"url {binds[0]}/mcp", flush=True)
            await trio.sleep_forever()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), sys.argv[2])
