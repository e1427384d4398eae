"""An editor written with the official ACP Python SDK (asyncio, in its own process),
driving ``python -m toolnexus_trio acp``. ``sdk_client.py SCENARIO WORKDIR -- COMMAND...``
prints one JSON report on stdout:

- ``edit``: prompt 1 (the model plans, then writes a file: the write goes through our
  ``fs/write_text_file``, approved), prompt 2 (a ``bash`` the editor rejects);
- ``cancel``: a prompt whose ``bash`` (approved) runs ``sleep 60``; once it runs, a
  ``session/cancel``; the report says whether the sleep is still alive after the
  prompt answered;
- ``load``: a prompt, then a second connection loads the session (a store is configured);
- ``terminal``: the editor offers its terminal; ``bash`` runs there (``terminal_cancel``:
  cancelled while it runs);
- ``always``: the editor answers "always allow" (asked once for two writes);
- ``mcp``: the session gets an MCP server of the editor's (tests/mcp_servers/everything.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    FileSystemCapabilities,
    KillTerminalResponse,
    McpServerStdio,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

SCENARIO, WORKDIR = sys.argv[1], sys.argv[2]
COMMAND = sys.argv[sys.argv.index("--") + 1 :]
EVERYTHING = str(Path(__file__).resolve().parent.parent / "mcp_servers" / "everything.py")


class Editor:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.permissions: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []
        self.buffers: dict[str, str] = {}
        self.reject: set[str] = set()
        self.always = False
        self.terminals: dict[str, asyncio.subprocess.Process] = {}
        self.calls: list[list[str]] = []
        self.waiting = asyncio.Event()

    async def request_permission(
        self, options: Any, session_id: str, tool_call: Any, **kw: Any
    ) -> Any:
        self.permissions.append(
            {
                "title": tool_call.title,
                "options": [o.option_id for o in options],
                "kinds": [o.kind for o in options],
            }
        )
        title = tool_call.title or ""
        if any(word in title for word in self.reject):
            choice = next(o for o in options if o.kind == "reject_once")
        elif self.always:
            choice = next(o for o in options if o.kind == "allow_always")
        else:
            choice = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=choice.option_id, outcome="selected")
        )

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update.model_dump(by_alias=True, exclude_none=True))

    async def write_text_file(self, content: str, path: str, session_id: str, **kw: Any) -> Any:
        self.writes.append({"path": path, "content": content})
        self.buffers[path] = content
        return WriteTextFileResponse()

    async def read_text_file(self, path: str, session_id: str, **kw: Any) -> Any:
        return ReadTextFileResponse(content=self.buffers.get(path, ""))

    async def create_terminal(
        self, command: str, session_id: str, args: Any = None, cwd: Any = None, **kw: Any
    ) -> Any:
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        terminal = f"term{len(self.terminals) + 1}"
        self.terminals[terminal] = process
        self.calls.append(["create", command, *(args or [])])
        return CreateTerminalResponse(terminal_id=terminal)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append(["wait", terminal_id])
        self.waiting.set()
        code = await self.terminals[terminal_id].wait()
        return WaitForTerminalExitResponse(exit_code=code)

    async def terminal_output(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        process = self.terminals[terminal_id]
        assert process.stdout is not None
        output = (await process.stdout.read()).decode()
        status = TerminalExitStatus(exit_code=process.returncode)
        return TerminalOutputResponse(output=output, truncated=False, exit_status=status)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append(["kill", terminal_id])
        os.killpg(self.terminals[terminal_id].pid, signal.SIGKILL)
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        self.calls.append(["release", terminal_id])
        process = self.terminals.pop(terminal_id)
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        return ReleaseTerminalResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        pass


def live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state.split(")")[-1].split()[0] not in ("Z", "X")


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


async def connect(editor: Editor) -> Any:
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "PATH": os.environ.get("PATH", "")}
    return spawn_agent_process(
        editor, COMMAND[0], *COMMAND[1:], env=env, cwd=WORKDIR, transport_kwargs={"stderr": None}
    )


async def start(conn: Any, *, terminal: bool = False) -> str:
    await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
            terminal=terminal,
        ),
    )
    session = await conn.new_session(cwd=WORKDIR, mcp_servers=[])
    return str(session.session_id)


async def edit() -> dict[str, Any]:
    editor = Editor()
    editor.reject.add("bash")
    async with await connect(editor) as (conn, _process):
        session = await start(conn)
        first = await conn.prompt(session_id=session, prompt=[text_block("write the file")])
        one = list(editor.updates)
        editor.updates.clear()
        second = await conn.prompt(session_id=session, prompt=[text_block("now touch it")])
    return {
        "stop": [first.stop_reason, second.stop_reason],
        "first": one,
        "second": editor.updates,
        "permissions": editor.permissions,
        "writes": editor.writes,
    }


async def cancel() -> dict[str, Any]:
    editor = Editor()
    ready = Path(WORKDIR) / "sleep.pid"
    os.mkfifo(ready)  # bash writes its pid here once it runs: a read waits for it
    async with await connect(editor) as (conn, _process):
        session = await start(conn)
        prompt = asyncio.create_task(conn.prompt(session_id=session, prompt=[text_block("sleep")]))
        pid = int(await asyncio.to_thread(ready.read_text))
        await conn.cancel(session_id=session)
        answer = await prompt
        alive = live(pid)  # the tree is killed before the prompt answers
    return {"stop": answer.stop_reason, "pid": pid, "alive_after": alive, "updates": editor.updates}


async def load() -> dict[str, Any]:
    editor = Editor()
    async with await connect(editor) as (conn, _process):
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd=WORKDIR, mcp_servers=[])).session_id
        await conn.prompt(session_id=session, prompt=[text_block("remember 7")])
    editor.updates.clear()
    again = Editor()
    async with await connect(again) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        await conn.load_session(cwd=WORKDIR, session_id=session, mcp_servers=[])
        replay = list(again.updates)
        again.updates.clear()
        await conn.prompt(session_id=session, prompt=[text_block("what was it?")])
    return {
        "load": init.agent_capabilities.load_session,
        "replay": replay,
        "after": again.updates,
    }


async def terminal() -> dict[str, Any]:
    editor = Editor()
    async with await connect(editor) as (conn, _process):
        session = await start(conn, terminal=True)
        answer = await conn.prompt(session_id=session, prompt=[text_block("run it")])
    return {"stop": answer.stop_reason, "calls": editor.calls, "updates": editor.updates}


async def terminal_cancel() -> dict[str, Any]:
    editor = Editor()
    async with await connect(editor) as (conn, _process):
        session = await start(conn, terminal=True)
        prompt = asyncio.create_task(conn.prompt(session_id=session, prompt=[text_block("run")]))
        await editor.waiting.wait()  # the command runs in our terminal
        pid = editor.terminals["term1"].pid
        await conn.cancel(session_id=session)
        answer = await prompt
    return {"stop": answer.stop_reason, "calls": editor.calls, "pid": pid, "alive": live(pid)}


async def mcp() -> dict[str, Any]:
    editor = Editor()
    server = McpServerStdio(name="ev", command=sys.executable, args=[EVERYTHING], env=[])
    async with await connect(editor) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = (await conn.new_session(cwd=WORKDIR, mcp_servers=[server])).session_id
        answer = await conn.prompt(session_id=session, prompt=[text_block("add")])
    return {"stop": answer.stop_reason, "updates": editor.updates}


async def always() -> dict[str, Any]:
    editor = Editor()
    editor.always = True
    async with await connect(editor) as (conn, _process):
        session = await start(conn)
        answer = await conn.prompt(session_id=session, prompt=[text_block("two writes")])
    return {"stop": answer.stop_reason, "permissions": editor.permissions, "writes": editor.writes}


SCENARIOS = {
    "always": always,
    "mcp": mcp,
    "edit": edit,
    "cancel": cancel,
    "load": load,
    "terminal": terminal,
    "terminal_cancel": terminal_cancel,
}


async def main() -> None:
    report = await SCENARIOS[SCENARIO]()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
