"""Our agent as an ACP agent: what ``python -m toolnexus_trio acp`` runs for an editor.

The editor (Zed, or any ACP client) starts the command and speaks JSON-RPC on its
stdio (:mod:`._rpc`). :func:`serve_acp` answers:

- ``initialize``: our capabilities (``loadSession`` when a conversation store is
  configured; MCP servers over stdio and HTTP);
- ``session/new``: a session whose toolkit holds the builtins confined to the
  session's ``cwd`` (their ``base_dir``), the client's MCP servers, the ``--config``
  servers and the ``--skills``; the toolkit lives as long as the connection;
- ``session/load`` (with a store): the conversation saved under that id, replayed as
  ``user_message_chunk`` / ``agent_message_chunk`` updates;
- ``session/prompt``: one :meth:`Client.ask <toolnexus_trio.Client.ask>` on the
  session's conversation, streamed as ``session/update``: ``agent_message_chunk`` (the
  answer's text deltas, tool-call turns' text included), ``agent_thought_chunk`` (the
  model's reasoning when its wire carries it: Responses summaries, Anthropic
  thinking), ``tool_call`` / ``tool_call_update`` (each of our tool calls), ``plan``
  (from ``todowrite``);
- ``session/cancel``: cancels the turn's scope at once (the model request, every tool,
  ``bash``'s process tree, sub-agents); the prompt answers ``stopReason: "cancelled"``.

``bash``, ``write``, ``edit`` and ``apply_patch`` suspend on an approval first
(:mod:`toolnexus_trio.builtins._guard`); our ``wait_for`` asks the editor with
``session/request_permission`` (allow once, allow always for this session, reject), and
the answer resumes the suspended call. When the client offers ``fs.readTextFile`` /
``fs.writeTextFile``, ``read``, ``write`` and ``edit`` go through the editor (its
buffers, unsaved changes included); when it offers ``terminal``, ``bash`` runs in the
editor's terminal (shown live there), else here, under our process-tree supervisor
(:mod:`._editor`).
"""

from __future__ import annotations

import contextvars
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import trio

from .._groups import collapse_groups
from .._lines import LineReader
from .._toolkit import Toolkit, ToolkitOptions, open_toolkit
from .._tools import Tool, ToolResult
from .._version import __version__
from .._wire import Answer, Request
from ..builtins._guard import CONFIRMED
from ..loop import Client, Hooks
from ..mcp._config import McpConfig, McpServerConfig
from ..models import ClientOptions, create_client
from ..stores import ConversationStore
from ._editor import EditorTools
from ._rpc import (
    INVALID_PARAMS,
    MAX_MESSAGE_BYTES,
    METHOD_NOT_FOUND,
    Connection,
    RpcError,
)

logger = logging.getLogger("toolnexus_trio.acp")

MAX_SESSIONS: Final = 64
"""Sessions one connection may open (each holds a toolkit and its MCP servers)."""
MAX_SHOWN: Final = 16_000
"""Characters of a tool's result shown in a ``tool_call_update``."""
_WALK_LIMIT: Final = 10_000
"""Nodes of a model's raw answer looked at for its reasoning."""
_KINDS: Final = {
    "read": "read",
    "write": "edit",
    "edit": "edit",
    "apply_patch": "edit",
    "bash": "execute",
    "grep": "search",
    "glob": "search",
    "webfetch": "fetch",
    "websearch": "fetch",
}


@attrs.define(eq=False)
class _Session:
    id: str
    cwd: str
    toolkit: Toolkit | None = None
    closed: trio.Event = attrs.field(factory=trio.Event)
    turn: trio.CancelScope | None = None
    always: set[str] = attrs.field(factory=set)
    calls: dict[str, list[str]] = attrs.field(factory=dict)  # tool name -> call ids


_current: contextvars.ContextVar[_Session] = contextvars.ContextVar("toolnexus_trio_acp_session")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _prompt_text(blocks: Any) -> str:
    """The prompt's text blocks, and embedded text resources as ``<uri>`` + text."""
    parts: list[str] = []
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            if isinstance(resource.get("text"), str):
                parts.append(f"<{resource.get('uri', '')}>\n{resource['text']}")
        elif block.get("type") == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(f"<{block['uri']}>")
    return "\n\n".join(parts)


def _servers(raw: Any) -> list[McpServerConfig]:
    """The client's ``mcpServers`` as our MCP configs (stdio, http, sse)."""
    out: list[McpServerConfig] = []
    for server in raw if isinstance(raw, list) else ():
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            raise RpcError(INVALID_PARAMS, "an mcpServers entry needs a name")
        pairs = server.get("env") if "command" in server else server.get("headers")
        values = {
            str(p.get("name")): str(p.get("value"))
            for p in pairs or ()
            if isinstance(p, dict) and "name" in p
        }
        if "command" in server:
            command = (str(server["command"]), *map(str, server.get("args") or ()))
            out.append(
                McpServerConfig(
                    name=server["name"], type="local", command=command, environment=values
                )
            )
        elif isinstance(server.get("url"), str):
            transport: Literal["sse", "streamable-http"] = (
                "sse" if server.get("type") == "sse" else "streamable-http"
            )
            out.append(
                McpServerConfig(
                    name=server["name"],
                    type="remote",
                    url=server["url"],
                    headers=values,
                    transport=transport,
                )
            )
    return out


class ACPAgent:
    """One editor connection (see the module docs)."""

    def __init__(
        self,
        client_options: ClientOptions,
        *,
        mcp: McpConfig | None = None,
        skills: Sequence[str] = (),
        store: ConversationStore | None = None,
        confirm: bool = True,
    ) -> None:
        self.confirm = confirm
        self.client_options = attrs.evolve(
            client_options,
            wait_for=self._wait_for,
            hooks=Hooks(
                after_llm=self._after_llm,
                before_tool=self._before_tool,
                after_tool=self._after_tool,
            ),
            store=store,
        )
        self.mcp = mcp
        self.skills = list(skills)
        self.store = store
        self.sessions: dict[str, _Session] = {}
        self.fs: dict[str, bool] = {}
        self.rpc: Connection | None = None
        self.client: Client | None = None
        self.nursery: trio.Nursery | None = None

    async def serve(self, reader: trio.lowlevel.FdStream, writer: trio.abc.SendStream) -> None:
        """Answer the editor on *reader* / *writer* until it closes its end."""
        self.rpc = Connection(
            LineReader(reader, MAX_MESSAGE_BYTES),
            writer,
            self._on_request,
            self._on_notification,
            name="the ACP client",
        )
        with collapse_groups():  # a hidden nursery: one failure is raised as itself
            async with create_client(self.client_options) as client, trio.open_nursery() as nursery:
                self.client, self.nursery = client, nursery
                try:
                    await self.rpc.serve()
                finally:
                    for session in self.sessions.values():
                        session.closed.set()
                    nursery.cancel_scope.cancel()

    # -- requests ----------------------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/cancel":
            session = self.sessions.get(str(params.get("sessionId")))
            if session is not None and session.turn is not None:
                session.turn.cancel()

    async def _on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            capabilities = params.get("clientCapabilities")
            fs = capabilities.get("fs") if isinstance(capabilities, dict) else None
            if isinstance(fs, dict):
                self.fs = {
                    "read": fs.get("readTextFile") is True,
                    "write": fs.get("writeTextFile") is True,
                }
            if isinstance(capabilities, dict) and capabilities.get("terminal") is True:
                self.fs["terminal"] = True
            return {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": self.store is not None,
                    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                    "mcpCapabilities": {"http": True, "sse": True},
                },
                "agentInfo": {"name": "toolnexus-trio", "version": __version__},
                "authMethods": [],
            }
        if method == "session/new":
            session = await self._open_session(str(uuid.uuid4()), params)
            return {"sessionId": session.id}
        if method == "session/load" and self.store is not None:
            return await self._load(params)
        if method == "session/prompt":
            return await self._prompt(params)
        if method == "session/set_mode":
            return {}
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _open_session(self, id: str, params: dict[str, Any]) -> _Session:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, "cwd must be an absolute path")
        if len(self.sessions) >= MAX_SESSIONS:
            raise RpcError(INVALID_PARAMS, f"at most {MAX_SESSIONS} sessions per connection")
        servers = [*(self.mcp.servers if self.mcp else ()), *_servers(params.get("mcpServers"))]
        session = _Session(id, cwd)
        options = ToolkitOptions(
            extra_tools=self._tools(cwd),
            builtins=False,
            mcp=McpConfig(tuple(servers)) if servers else None,
            skills_dir=self.skills or None,
        )
        assert self.nursery is not None
        session.toolkit = await self.nursery.start(self._hold, options, session)
        self.sessions[id] = session
        return session

    @staticmethod
    async def _hold(
        options: ToolkitOptions, session: _Session, *, task_status: trio.TaskStatus[Toolkit]
    ) -> None:
        """Keep a session's toolkit (its MCP servers) open until the connection ends."""
        async with open_toolkit(options) as toolkit:
            task_status.started(toolkit)
            await session.closed.wait()

    async def _load(self, params: dict[str, Any]) -> dict[str, Any]:
        assert self.store is not None
        assert self.rpc is not None
        id = str(params.get("sessionId"))
        messages = await self.store.get(id)
        if messages is None:
            raise RpcError(INVALID_PARAMS, f"no saved session {id!r}")
        if id in self.sessions:
            raise RpcError(INVALID_PARAMS, f"session {id!r} is open already")
        await self._open_session(id, params)
        for message in messages:
            text = _text(message.get("content"))
            kind = {"user": "user_message_chunk", "assistant": "agent_message_chunk"}.get(
                str(message.get("role"))
            )
            if kind and text:
                await self._update(
                    id, {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
                )
        return {}

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None:
            raise RpcError(INVALID_PARAMS, "unknown sessionId")
        if session.turn is not None:
            raise RpcError(INVALID_PARAMS, "a prompt is already running in this session")
        assert self.client is not None
        text = _prompt_text(params.get("prompt"))

        async def on_text(delta: str) -> None:
            await self._update(
                session.id,
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": delta},
                },
            )

        result = None
        token = _current.set(session)
        try:
            with trio.CancelScope() as scope:
                session.turn = scope  # session/cancel cancels it: the whole turn, at once
                result = await self.client.ask(
                    text, session.toolkit, id=session.id, on_text=on_text
                )
        finally:
            session.turn = None
            session.calls.clear()
            _current.reset(token)
        if result is None or result.status == "cancelled":
            return {"stopReason": "cancelled"}
        if result.status == "incomplete":
            return {"stopReason": "max_turn_requests"}
        return {"stopReason": "end_turn"}

    # -- updates -----------------------------------------------------------------------

    async def _update(self, session_id: str, update: dict[str, Any]) -> None:
        assert self.rpc is not None
        await self.rpc.notify("session/update", {"sessionId": session_id, "update": update})

    async def _after_llm(self, event: dict[str, Any]) -> None:
        for text in _thoughts(event.get("response")):
            await self._update(
                _current.get().id,
                {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}},
            )

    async def _before_tool(self, event: dict[str, Any]) -> None:
        session = _current.get()
        name, id = str(event.get("name")), str(event.get("id"))
        session.calls.setdefault(name, []).append(id)
        args = event.get("args")
        await self._update(
            session.id,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": id,
                "title": _title(name, args),
                "kind": _KINDS.get(name, "other"),
                "status": "in_progress",
                "rawInput": args if isinstance(args, dict) else {},
            },
        )

    async def _after_tool(self, event: dict[str, Any]) -> None:
        session = _current.get()
        result = event.get("result")
        if not isinstance(result, ToolResult):
            return
        shown = (
            result.output
            if len(result.output) <= MAX_SHOWN
            else result.output[:MAX_SHOWN] + " [...]"
        )
        await self._update(
            session.id,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": str(event.get("id")),
                "status": "failed" if result.is_error else "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": shown}}],
            },
        )
        args = event.get("args")
        if event.get("name") == "todowrite" and not result.is_error and isinstance(args, dict):
            entries = [
                {
                    "content": str(todo.get("text", "")),
                    "priority": "medium",
                    "status": "completed" if todo.get("completed") is True else "pending",
                }
                for todo in args.get("todos") or ()
                if isinstance(todo, dict)
            ]
            await self._update(session.id, {"sessionUpdate": "plan", "entries": entries})

    # -- permission --------------------------------------------------------------------

    async def _wait_for(self, request: Request) -> Answer:
        session = _current.get()
        data = request.data or {}
        tool = str(data.get("tool", ""))
        if request.kind != "approval" or tool not in CONFIRMED:
            # The editor has no question form in ACP's stable protocol: refuse, said why.
            return Answer(id=request.id, ok=False, reason="declined")
        if tool in session.always:
            return Answer(id=request.id, ok=True)
        ids = session.calls.get(tool) or [request.id]
        assert self.rpc is not None
        reply = await self.rpc.request(
            "session/request_permission",
            {
                "sessionId": session.id,
                "toolCall": {
                    "toolCallId": ids[-1],
                    "title": request.prompt,
                    "kind": _KINDS.get(tool, "other"),
                    "status": "pending",
                    "content": [
                        {
                            "type": "content",
                            "content": {"type": "text", "text": str(data.get("show", ""))},
                        }
                    ],
                },
                "options": [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "always", "name": f"Always allow {tool}", "kind": "allow_always"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            },
        )
        outcome = reply.get("outcome") if isinstance(reply, dict) else None
        chosen = outcome.get("optionId") if isinstance(outcome, dict) else None
        if (
            isinstance(outcome, dict)
            and outcome.get("outcome") == "selected"
            and chosen in ("allow", "always")
        ):
            if chosen == "always":
                session.always.add(tool)
            return Answer(id=request.id, ok=True)
        return Answer(id=request.id, ok=False, reason="declined")

    # -- tools -------------------------------------------------------------------------

    def _tools(self, cwd: str) -> list[Tool]:
        """The session's builtins (see :class:`._editor.EditorTools`)."""
        assert self.rpc is not None
        editor = EditorTools(self.rpc, dict(self.fs), lambda: _current.get().id, self._update)
        return editor.tools(cwd, confirm=self.confirm)


def _thoughts(raw: Any) -> list[str]:
    """The model's reasoning in its raw answer: Responses ``reasoning`` summaries and
    Anthropic ``thinking`` blocks (a bounded walk: the answer is bounded already)."""
    found: list[str] = []
    pending, seen = [raw], 0
    while pending and seen < _WALK_LIMIT:
        node = pending.pop()
        seen += 1
        if isinstance(node, list):
            pending.extend(reversed(node))
        elif isinstance(node, dict):
            if node.get("type") == "thinking" and isinstance(node.get("thinking"), str):
                found.append(node["thinking"])
            elif node.get("type") == "reasoning":
                found.extend(
                    part["text"]
                    for part in node.get("summary") or ()
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
            else:
                pending.extend(reversed(list(node.values())))
    return [text for text in found if text.strip()]


def _title(name: str, args: Any) -> str:
    args = args if isinstance(args, Mapping) else {}
    detail = args.get("command") or args.get("path") or args.get("pattern") or args.get("url") or ""
    text = f"{name} {detail}".strip()
    return text if len(text) <= 200 else text[:200] + "..."


async def serve_acp(
    client_options: ClientOptions,
    *,
    mcp: McpConfig | None = None,
    skills: Sequence[str] = (),
    store: ConversationStore | None = None,
    confirm: bool = True,
    reader: trio.lowlevel.FdStream | None = None,
    writer: trio.abc.SendStream | None = None,
) -> None:
    """Be an ACP agent on *reader* / *writer* (default: this process's stdin and
    stdout) until the editor closes the connection (see the module docs).

    *client_options* is the model; *mcp* servers join every session's toolkit beside
    the client's own; *store* keeps the conversations and enables ``session/load``;
    without *confirm*, ``bash``, ``write``, ``edit`` and ``apply_patch`` run unasked.
    """
    if reader is None:
        reader = trio.lowlevel.FdStream(os.dup(0))
    if writer is None:
        writer = trio.lowlevel.FdStream(os.dup(1))
    agent = ACPAgent(client_options, mcp=mcp, skills=skills, store=store, confirm=confirm)
    async with reader, writer:
        await agent.serve(reader, writer)
