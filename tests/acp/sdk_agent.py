"""An ACP agent written with the official Python SDK (``agent-client-protocol``, asyncio),
run as a process by the model-source tests. ``sdk_agent.py SCENARIO``:

- ``echo``: replies ``echo:<prompt text>``;
- ``noisy``: a thought, a tool call and its update between two message chunks;
- ``permission``: asks permission for a tool call, replies ``PERMITTED:<optionId>`` or
  ``OUTCOME:cancelled``; ``permission2`` asks twice in the turn (the second answer
  counts);
- ``hang``: never answers a prompt (but answers ``session/cancel``: the turn ends);
- ``deaf``: never answers a prompt and ignores ``session/cancel``, with a child process;
- ``refuse``: answers ``initialize`` with an error;
- ``crash``: exits in the middle of a prompt.

The extension method ``_diagnostics`` reports what it received.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.schema import PermissionOption, ToolCallUpdate

SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "echo"


class Agent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.cwds: list[str] = []
        self.mcp_servers: list[Any] = []
        self.prompts: list[str] = []
        self.sessions = 0
        self.cancels = 0
        self.active = 0
        self.reentrant = False
        self.child: asyncio.subprocess.Process | None = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        if SCENARIO == "refuse":
            raise RequestError(-32000, "authentication required")
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        self.sessions += 1
        self.cwds.append(cwd)
        self.mcp_servers = [m.model_dump() for m in (mcp_servers or [])]
        return NewSessionResponse(session_id=f"s{self.sessions}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancels += 1
        if SCENARIO != "deaf" and self.waiting is not None:
            self.waiting.set()

    waiting: asyncio.Event | None = None

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        self.prompts.append(text)
        if self.active:
            self.reentrant = True
        self.active += 1
        try:
            return await self._prompt(session_id, text)
        finally:
            self.active -= 1

    async def _say(self, session_id: str, update: Any) -> None:
        await self.conn.session_update(session_id=session_id, update=update)

    async def _prompt(self, session_id: str, text: str) -> PromptResponse:
        if SCENARIO == "crash":
            await self._say(session_id, update_agent_message_text("half an ans"))
            os._exit(3)
        if SCENARIO in ("hang", "deaf"):
            if SCENARIO == "deaf" and self.child is None:
                self.child = await asyncio.create_subprocess_exec(
                    "sleep", "300", stdin=subprocess.DEVNULL
                )
            self.waiting = asyncio.Event()
            await self._say(session_id, update_agent_thought_text("started"))
            await self.waiting.wait()
            return PromptResponse(stop_reason="cancelled")
        if SCENARIO == "noisy":
            await self._say(session_id, update_agent_message_text('{"answer": '))
            await self._say(session_id, update_agent_thought_text("thinking hard"))
            await self._say(session_id, start_tool_call("t1", "Reading a file", kind="read"))
            await self._say(session_id, update_tool_call("t1", status="completed"))
            await self._say(session_id, update_agent_message_text('"42"}'))
        elif SCENARIO in ("permission", "permission2"):
            options = [
                PermissionOption(option_id="yes-once", name="Allow once", kind="allow_once"),
                PermissionOption(option_id="yes-always", name="Always", kind="allow_always"),
                PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ]
            answer = await self.conn.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(tool_call_id="t9", title="rm -rf build"),
                options=options,
            )
            if SCENARIO == "permission2":  # a second question in the same turn
                answer = await self.conn.request_permission(
                    session_id=session_id,
                    tool_call=ToolCallUpdate(tool_call_id="t10", title="rm -rf dist"),
                    options=options,
                )
            outcome = answer.outcome
            if getattr(outcome, "outcome", "") == "selected":
                reply = f"PERMITTED:{outcome.option_id}"
            else:
                reply = "OUTCOME:cancelled"
            await self._say(session_id, update_agent_message_text(reply))
        else:
            await self._say(session_id, update_agent_message_text(f"echo:{text}"))
        return PromptResponse(stop_reason="end_turn")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "cwds": self.cwds,
            "mcpServers": self.mcp_servers,
            "sessions": self.sessions,
            "prompts": self.prompts,
            "cancels": self.cancels,
            "reentrant": self.reentrant,
        }


async def main() -> None:
    await run_agent(Agent())


if __name__ == "__main__":
    asyncio.run(main())
