"""MCP Tasks (2025-11-25's task-augmented ``tools/call``), server side: ``serve`` runs
a tool as a task for a client that asks.

- ``initialize`` advertises ``capabilities.tasks`` (``list``, ``cancel``,
  ``requests.tools.call``) and ``tools/list`` marks each tool
  ``execution.taskSupport: "optional"`` (a relay tool, which asks the calling client
  itself to run it, is not offered as a task).
- A ``tools/call`` with a ``task`` field is answered at once with a
  ``CreateTaskResult``; the tool runs in the server's own nursery (its lifetime, not
  the request's), with no client to relay progress or questions to (the request is
  answered): a tool that suspends ends with an error saying what it asked.
- ``tasks/get``, ``tasks/result`` (waits until the task is terminal), ``tasks/cancel``
  (cancels the tool's scope, as ``notifications/cancelled`` does for a plain call)
  and ``tasks/list`` (pages of :data:`LIST_PAGE`).
- At most :data:`MAX_TASKS` tasks are kept, running or finished; past that the oldest
  finished one is dropped, and when all are running a new one is refused. Each task
  is kept for its ``ttl`` (the client's, capped at :data:`MAX_TTL_MS`): a task past
  it is dropped, cancelled first if it still runs.

The task-augmented ``tools/call`` is answered by a server middleware: the SDK checks a
``tools/call`` handler's result against ``CallToolResult`` on a 2025-11-25 connection
(the per-version sieve) and a ``CreateTaskResult`` is not one; a middleware that
answers without ``call_next`` owns its result. On a 2026-07-28 connection tasks are
the ``io.modelcontextprotocol/tasks`` extension's redesigned lifecycle (SEP-2663),
which this does not implement: there a ``task`` field is ignored and the call runs as
a plain call.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import attrs
import mcp_types as types
import pydantic
import trio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from .._tools import Tool

logger = logging.getLogger("toolnexus_trio.mcp.serve")

MAX_TASKS: Final = 256
"""Tasks kept at once, running or finished (memory stays bounded whatever clients ask)."""
MAX_TTL_MS: Final = 86_400_000
"""The longest a task is kept (a client's larger ``ttl`` is lowered to it)."""
DEFAULT_TTL_MS: Final = 3_600_000
"""How long a task is kept when the client names no ``ttl``."""
POLL_INTERVAL_MS: Final = 500
"""The ``pollInterval`` suggested to clients."""
LIST_PAGE: Final = 100
"""Tasks per ``tasks/list`` page."""
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})

TASKS_CAPABILITY: Final = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(
        tools=types.TasksToolsCapability(call=types.TasksCallCapability())
    ),
)

RunTask = Callable[["Tool", dict[str, Any], str], Awaitable[types.CallToolResult]]
"""Run *tool* with *args* as task *id*; the call's MCP result."""


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@attrs.define
class _Task:
    task_id: str
    ttl_ms: int
    expires: float  # trio time
    created: str = attrs.field(factory=_now)
    updated: str = attrs.field(factory=_now)
    status: str = "working"
    message: str | None = None
    result: types.CallToolResult | None = None
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
            "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS,
        }
        if self.message is not None:
            out["statusMessage"] = self.message
        return out


class TaskBoard:
    """The tasks of one served toolkit (every connection's: a task id is a capability,
    unguessable, and outlives the connection that created it)."""

    def __init__(
        self,
        tools: Callable[[], dict[str, Tool]],
        run: RunTask,
        nursery: Callable[[], trio.Nursery | None],
    ) -> None:
        self._tools = tools
        self._run = run
        self._nursery = nursery
        self._tasks: dict[str, _Task] = {}  # insertion order: oldest first

    def install(self, server: Server[Any]) -> None:
        """Register the ``tasks/*`` methods and the ``tools/call`` middleware."""
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list)
        server.middleware.append(self._middleware)

    # ------------------------------------------------------------------ creating

    async def _middleware(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and params is not None
            and params.get("task") is not None
            and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            await trio.lowlevel.checkpoint()
            return self._create(params)
        return await call_next(ctx)

    def _create(self, raw: Any) -> dict[str, Any]:
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except pydantic.ValidationError as exc:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"tools/call: invalid params ({exc.error_count()} validation errors)",
            ) from None
        tool = self._tools().get(params.name)
        if tool is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        nursery = self._nursery()
        if nursery is None:
            raise MCPError(code=types.INTERNAL_ERROR, message="the server is not running")
        self._sweep()
        if len(self._tasks) >= MAX_TASKS:
            finished = [t for t in self._tasks.values() if t.status in TERMINAL]
            if not finished:
                raise MCPError(
                    code=types.INVALID_REQUEST,
                    message=f"too many tasks running (the limit is {MAX_TASKS}); try later",
                )
            del self._tasks[finished[0].task_id]
        asked = params.task.ttl if params.task is not None else None
        ttl = DEFAULT_TTL_MS if asked is None else max(0, min(asked, MAX_TTL_MS))
        task = _Task(secrets.token_urlsafe(18), ttl, trio.current_time() + ttl / 1000)
        self._tasks[task.task_id] = task
        nursery.start_soon(self._drive, task, tool, dict(params.arguments or {}))
        return {"task": task.wire()}

    async def _drive(self, task: _Task, tool: Tool, args: dict[str, Any]) -> None:
        with task.scope:
            result = await self._run(tool, args, task.task_id)
            task.result = result
            task.status = "failed" if result.is_error else "completed"
        if task.scope.cancelled_caught:
            task.status, task.message = "cancelled", "cancelled by the client (tasks/cancel)"
        task.updated = _now()
        task.done.set()

    def _sweep(self) -> None:
        now = trio.current_time()
        for task in [t for t in self._tasks.values() if t.expires <= now]:
            task.scope.cancel()  # a task past its ttl is not kept, nor left running
            del self._tasks[task.task_id]

    def _find(self, task_id: str) -> _Task:
        self._sweep()
        task = self._tasks.get(task_id)
        if task is None:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"no task {task_id!r} (unknown or expired)"
            )
        return task

    # ------------------------------------------------------------------ tasks/*

    async def _get(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return self._find(params.task_id).wire()

    async def _result(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams
    ) -> types.CallToolResult:
        task = self._find(params.task_id)
        await task.done.wait()
        if task.result is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"task {task.task_id} was cancelled")
        return task.result

    async def _cancel(
        self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        task = self._find(params.task_id)
        if task.status in TERMINAL:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"task {task.task_id} is already {task.status}",
            )
        task.scope.cancel()
        await task.done.wait()
        return task.wire()

    async def _list(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        self._sweep()
        start = 0
        if params.cursor is not None:
            try:
                start = int(params.cursor)
            except ValueError:
                raise MCPError(code=types.INVALID_PARAMS, message="invalid cursor") from None
        tasks = list(self._tasks.values())[start : start + LIST_PAGE]
        out: dict[str, Any] = {"tasks": [t.wire() for t in tasks]}
        if start + LIST_PAGE < len(self._tasks):
            out["nextCursor"] = str(start + LIST_PAGE)
        return out
