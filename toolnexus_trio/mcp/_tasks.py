"""MCP Tasks (the 2025-11-25 revision's task-augmented ``tools/call``), client side.

A connected server's tool is called as a task when the server advertises
``capabilities.tasks.requests.tools.call`` and the tool declares
``execution.taskSupport: "required"``, or ``"optional"`` and the connection does not
answer the server's questions (sampling, elicitation: a plain call keeps them working,
where a task would need ``input_required`` round trips few servers offer).
:class:`TaskCall` sends ``tools/call`` with a ``task`` field, gets a
``CreateTaskResult`` (the task id), polls ``tasks/get`` (honouring the server's
``pollInterval``, clamped to :data:`MIN_POLL_S` .. :data:`MAX_POLL_S`; Trio time, so
cancellable) until the task is terminal (or needs input), then fetches the payload
with ``tasks/result``. A cancel of the calling scope sends ``tasks/cancel`` under a
bounded shield before it propagates; the create itself is shielded (bounded by the
server's ``timeout``), so a cancel while its answer is on its way still knows the task
to cancel.

Inside a durable run the task id is saved in the call's checkpoint
(:class:`~toolnexus_trio._runctx.ResumePoint`) before the first poll: a run recovered
after its process died polls the *same* task instead of calling the tool again.

The wire goes through the SDK's public parts: the session for ``tasks/*`` (whose
results it does not check against a core surface), its ``JSONRPCDispatcher`` for the
task-augmented ``tools/call`` (the session checks every ``tools/call`` answer against
``CallToolResult``, and a ``CreateTaskResult`` is not one). The task models are the
public ones of ``mcp_types``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types
import pydantic
import trio
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from .._runctx import ResumePoint

logger = logging.getLogger("toolnexus_trio.mcp")

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The extension id the tasks continue under after the 2025-11-25 revision."""
TASK_TTL_MS: Final = 3_600_000
"""The retention asked for a task we create (the server may grant less)."""
MIN_POLL_S: Final = 0.05
"""A server's ``pollInterval`` below this is raised to it (no busy polling)."""
MAX_POLL_S: Final = 30.0
"""A server's ``pollInterval`` above this is lowered to it (no endless sleep)."""
DEFAULT_POLL_S: Final = 1.0
"""The poll interval when the server suggests none."""
CANCEL_BOUND: Final = 5.0
"""Seconds a ``tasks/cancel`` may take once the calling scope is cancelled."""
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})

SendRaw = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def task_support(tool: types.Tool) -> str | None:
    """*tool*'s ``taskSupport`` when it may be called as a task (``"optional"`` or
    ``"required"``), else ``None``."""
    execution = tool.execution
    support = execution.task_support if execution is not None else None
    return support if support in ("optional", "required") else None


def server_runs_tasks(session: ClientSession) -> bool:
    """Whether the server advertised task-augmented ``tools/call``."""
    caps = session.server_capabilities
    tasks = caps.tasks if caps is not None else None
    requests = tasks.requests if tasks is not None else None
    tools = requests.tools if requests is not None else None
    return tools is not None and tools.call is not None


def poll_seconds(interval_ms: int | None) -> float:
    """The server's suggested ``pollInterval`` as seconds, clamped."""
    if interval_ms is None:
        return DEFAULT_POLL_S
    return min(max(interval_ms / 1000, MIN_POLL_S), MAX_POLL_S)


def _bad_answer(method: str, exc: pydantic.ValidationError) -> MCPError:
    return MCPError(
        code=types.INVALID_PARAMS,
        message=f"{method}: the server's answer is not a valid task result "
        f"({exc.error_count()} validation errors)",
    )


class TaskCall:
    """One ``tools/call`` of *tool* run as an MCP task (see the module docs)."""

    def __init__(
        self,
        session: ClientSession,
        send_raw: SendRaw,
        server: str,
        tool: str,
        resume: ResumePoint | None,
        create_bound: float,
    ) -> None:
        self.session = session
        self.create_bound = create_bound
        self.send_raw = send_raw
        self.server = server
        self.tool = tool
        self.resume = resume

    def _saved_task(self) -> str | None:
        token = self.resume.token if self.resume is not None else None
        if token is None or token.get("server") != self.server or token.get("tool") != self.tool:
            return None
        task_id = token.get("task_id")
        return task_id if isinstance(task_id, str) else None

    async def run(self, args: dict[str, Any], meta: dict[str, Any]) -> types.CallToolResult:
        """Create the task (or pick the saved one up), wait for it, return its payload."""
        task_id = self._saved_task()
        resumed = task_id is not None
        interval: int | None = None
        if task_id is None:
            params: dict[str, Any] = {
                "name": self.tool,
                "arguments": args,
                "task": {"ttl": TASK_TTL_MS},
            }
            if meta:
                params["_meta"] = meta
            # Shielded (bounded by the server's timeout): the server may create the task
            # and start the tool before its answer reaches us, and a cancel that dropped
            # that answer would leave a task we could not cancel.
            with trio.move_on_after(self.create_bound, shield=True) as bound:
                raw = await self.send_raw("tools/call", params)
            if bound.cancelled_caught:
                raise MCPError(
                    code=types.REQUEST_TIMEOUT,
                    message=f"tools/call: the server created no task within "
                    f"{self.create_bound * 1000:g}ms",
                )
            if "task" not in raw:
                # A server may answer an optional task at once, with the plain result.
                try:
                    return types.CallToolResult.model_validate(raw)
                except pydantic.ValidationError as exc:
                    raise _bad_answer("tools/call", exc) from None
            try:
                created = types.CreateTaskResult.model_validate(raw)
            except pydantic.ValidationError as exc:
                raise _bad_answer("tools/call", exc) from None
            task_id = created.task.task_id
            interval = created.task.poll_interval
        try:
            await trio.lowlevel.checkpoint_if_cancelled()  # a cancel during the create
            if not resumed and self.resume is not None:
                # Flushed before the first wait: from here a recovery polls this task.
                await self.resume.save(
                    {"server": self.server, "tool": self.tool, "task_id": task_id}
                )
            return await self._finish(task_id, interval, resumed=resumed)
        except trio.Cancelled:
            with trio.move_on_after(CANCEL_BOUND, shield=True):
                await self._cancel(task_id)
            raise

    async def _finish(
        self, task_id: str, interval: int | None, *, resumed: bool
    ) -> types.CallToolResult:
        get = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        first = not resumed
        while True:
            if first:
                first = False
                await trio.sleep(poll_seconds(interval))
            try:
                task = await self.session.send_request(get, types.GetTaskResult)
            except MCPError as exc:
                if resumed:
                    # The saved task is unknown to the server now (expired, restarted).
                    raise MCPError(
                        code=exc.error.code,
                        message=f"MCP task {task_id} (saved before the run's process "
                        f"stopped) could not be found again: {exc.error.message}; it may or "
                        "may not have run, and the tool was not called again",
                    ) from exc
                raise
            except pydantic.ValidationError as exc:
                raise _bad_answer("tasks/get", exc) from None
            resumed = False  # found: later errors are ordinary
            if task.status in TERMINAL or task.status == "input_required":
                break  # input_required: tasks/result carries the server's questions
            await trio.sleep(poll_seconds(task.poll_interval))
        if task.status == "cancelled":
            why = f": {task.status_message}" if task.status_message else ""
            text = f"MCP task {task_id} was cancelled{why}"
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)],
                is_error=True,
            )
        payload = types.GetTaskPayloadRequest(
            params=types.GetTaskPayloadRequestParams(task_id=task_id)
        )
        try:
            return await self.session.send_request(payload, types.CallToolResult)
        except pydantic.ValidationError as exc:
            raise _bad_answer("tasks/result", exc) from None

    async def _cancel(self, task_id: str) -> None:
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        try:
            await self.session.send_request(request, types.CancelTaskResult)
        except (MCPError, pydantic.ValidationError) as exc:
            logger.info("MCP server %r: tasks/cancel of %s failed: %s", self.server, task_id, exc)
