"""The builtins an ACP agent runs through the editor, when the editor offers it.

``read``, ``write`` and ``edit`` use the client's ``fs/read_text_file`` and
``fs/write_text_file`` (so edits land in its buffers, unsaved changes included), with
the same confinement to the session's folder as the builtins (``base_dir``); ``bash``
runs in the editor's terminal (``terminal/create``), shown live there, killed there on
a timeout or a cancel, and always released. The rest are the builtins as they are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from .._tools import Tool, ToolContext, ToolResult
from ..builtins import BuiltinsConfig, builtin_tools
from ..builtins._config import Place, required
from ..builtins._guard import CONFIRMED, confirm_first
from ..builtins._shell import DEFAULT_TIMEOUT_MS, OUTPUT_LIMIT, SHELL
from ._rpc import INVALID_PARAMS, ACPError, Connection, RpcError

_RELEASE_BOUND: Final = 2.0
"""Seconds to kill and release an editor terminal after a cancel."""

Update = Callable[[str, dict[str, Any]], Awaitable[None]]


class EditorTools:
    """The builtins of one session, through *rpc* where the editor *offers* it
    (``read``, ``write``, ``terminal``); *session_id* names the session of the running
    call, *update* sends it a ``session/update``."""

    def __init__(
        self,
        rpc: Connection,
        offers: Mapping[str, bool],
        session_id: Callable[[], str],
        update: Update,
    ) -> None:
        self.rpc = rpc
        self.offers = offers
        self.session_id = session_id
        self.update = update

    def tools(self, cwd: str, *, confirm: bool) -> list[Tool]:
        """The builtins confined to *cwd*; ``read``/``write``/``edit`` through the editor
        when it offers ``fs``, ``bash`` in its terminal when it offers one; with
        *confirm*, the changing ones approved first."""
        place = Place(cwd)
        tools = []
        for tool in builtin_tools(BuiltinsConfig(base_dir=cwd)):
            if tool.name == "read" and self.offers.get("read"):
                tool = attrs.evolve(tool, execute=self._fs_read(place))
            elif tool.name == "write" and self.offers.get("write"):
                tool = attrs.evolve(tool, execute=self._fs_write(place))
            elif tool.name == "edit" and self.offers.get("read") and self.offers.get("write"):
                tool = attrs.evolve(tool, execute=self._fs_edit(place))
            elif tool.name == "bash" and self.offers.get("terminal"):
                tool = attrs.evolve(tool, execute=self._terminal_bash(place))
            tools.append(confirm_first(tool) if confirm and tool.name in CONFIRMED else tool)
        return tools

    async def _read(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        params: dict[str, Any] = {"sessionId": self.session_id(), "path": path}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        reply = await self.rpc.request("fs/read_text_file", params)
        content = reply.get("content") if isinstance(reply, dict) else None
        if not isinstance(content, str):
            raise RpcError(INVALID_PARAMS, "fs/read_text_file answered without content")
        return content

    async def _write(self, path: str, content: str) -> None:
        await self.rpc.request(
            "fs/write_text_file", {"sessionId": self.session_id(), "path": path, "content": content}
        )

    def _terminal_bash(self, place: Place) -> Any:
        """``bash`` in the editor's terminal (``terminal/create``): the editor shows it
        live; a timeout or a cancel kills it there (``terminal/kill``), and the
        terminal is always released."""

        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            session = self.session_id()
            try:
                command = required(args, "command")
                timeout = args.get("timeout")
                seconds = (
                    timeout if isinstance(timeout, int | float) else DEFAULT_TIMEOUT_MS
                ) / 1000
                cwd = await place.resolve_async(args.get("workdir") or place.default_dir())
            except Exception as exc:
                return ToolResult.error(f"bash: {exc}")
            created = await self.rpc.request(
                "terminal/create",
                {
                    "sessionId": session,
                    "command": SHELL,
                    "args": ["-c", command],
                    "cwd": cwd,
                    "outputByteLimit": OUTPUT_LIMIT,
                },
            )
            terminal = created.get("terminalId") if isinstance(created, dict) else None
            if not isinstance(terminal, str):
                return ToolResult.error("bash: terminal/create answered without a terminalId")
            ids = {"sessionId": session, "terminalId": terminal}
            exited = False
            try:
                if ctx.call_id:
                    await self.update(
                        session,
                        {
                            "sessionUpdate": "tool_call_update",
                            "toolCallId": ctx.call_id,
                            "content": [{"type": "terminal", "terminalId": terminal}],
                        },
                    )
                with trio.move_on_after(max(seconds, 0)):
                    await self.rpc.request("terminal/wait_for_exit", ids)
                    exited = True
                if not exited:
                    await self.rpc.request("terminal/kill", ids)
                output = await self.rpc.request("terminal/output", ids)
            finally:
                with (
                    trio.CancelScope(shield=True, deadline=trio.current_time() + _RELEASE_BOUND),
                    contextlib.suppress(ACPError),  # the editor is gone: nothing to release
                ):
                    if not exited:
                        await self.rpc.request("terminal/kill", ids)
                    await self.rpc.request("terminal/release", ids)
            text = str(output.get("output", "")) if isinstance(output, dict) else ""
            status = output.get("exitStatus") if isinstance(output, dict) else None
            code = status.get("exitCode") if isinstance(status, dict) else None
            if not exited:
                return ToolResult.error(
                    f"bash: command timed out after {seconds * 1000:.0f}ms\n{text}",
                    {"timedOut": True},
                )
            if code != 0:
                return ToolResult.error(
                    f"{text}\nbash: command exited with code {code}", {"exitCode": code}
                )
            return ToolResult.ok(text, {"exitCode": 0})

        return execute

    def _fs_read(self, place: Place) -> Any:
        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            try:
                real = await place.resolve_async(required(args, "path"))
                offset, limit = args.get("offset"), args.get("limit")
                return ToolResult.ok(
                    await self._read(
                        real,
                        offset if isinstance(offset, int) else None,
                        limit if isinstance(limit, int) else None,
                    )
                )
            except Exception as exc:
                return ToolResult.error(f"read: {exc}")

        return execute

    def _fs_write(self, place: Place) -> Any:
        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            try:
                path = required(args, "path")
                content = str(args.get("content", ""))
                await self._write(await place.resolve_async(path), content)
            except Exception as exc:
                return ToolResult.error(f"write: {exc}")
            size = len(content.encode("utf-8"))
            return ToolResult.ok(f"Wrote {size} bytes to {path}", {"bytes": size})

        return execute

    def _fs_edit(self, place: Place) -> Any:
        async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            try:
                path = required(args, "path")
                old, new = required(args, "oldString"), str(args.get("newString", ""))
                real = await place.resolve_async(path)
                text = await self._read(real)
                found = text.count(old)
                if found == 0:
                    return ToolResult.error(f"edit: oldString not found in {path}")
                every = args.get("replaceAll") is True
                if found > 1 and not every:
                    return ToolResult.error(
                        f"edit: oldString is not unique in {path} ({found} occurrences); "
                        "use replaceAll"
                    )
                await self._write(
                    real, text.replace(old, new) if every else text.replace(old, new, 1)
                )
            except Exception as exc:
                return ToolResult.error(f"edit: {exc}")
            count = found if every else 1
            return ToolResult.ok(f"Edited {path} ({count} replacement{'s' * (count != 1)})")

        return execute
