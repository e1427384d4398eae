"""The second half of the demo: an agent turn driving a Tesseron app, end to end.

A todo host listens on loopback; an in-process gateway dials it, claims the session
and turns its actions into tools; a scripted model calls them through the agent loop.
Progress streams back live, a slow import is cancelled part-way (the cancel travels
from the turn's token to the handler's ``ActionContext``), ``confirm`` and ``elicit``
become ``wait_for`` questions, and the resource shows the final list.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

from .._toolkit import ToolkitOptions, create_toolkit
from .._wire import Answer, Request
from ..gateway import Gateway, GatewayOptions
from ..loop import (
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    RunResult,
    create_in_process_client,
)
from ._terminal import TerminalLines, is_terminal
from ._todo import build_todo_app

IMPORT_CANCEL_AT = 40
"""The import is cancelled once its progress reaches this percent."""


class _Printer:
    """Prints progress as one live line on a terminal, as plain lines otherwise."""

    def __init__(self) -> None:
        self.live = sys.stdout.isatty()
        self.open_line = False

    def line(self, text: str) -> None:
        if self.open_line:
            print()
            self.open_line = False
        print(text, flush=True)

    def progress(self, tool: str, percent: int | None, message: str | None) -> None:
        shown = 0 if percent is None else percent
        bar = "#" * (shown // 5) + "." * (20 - shown // 5)
        text = f"    {tool} [{bar}] {shown:3d}% {message or ''}"
        if self.live:
            print("\r" + text.ljust(78), end="", flush=True)
            self.open_line = True
        else:
            print(text, flush=True)


def _script() -> list[InProcessResponse]:
    def call(name: str, call_id: str, **args: Any) -> InProcessToolCall:
        return InProcessToolCall(id=call_id, name=f"todo__{name}", arguments=args)

    return [
        InProcessResponse(
            content="Adding your todos.",
            tool_calls=[call("add", "add", items=["buy milk", "write report", "call mum"])],
        ),
        InProcessResponse(
            content="Importing the old tracker's items.",
            tool_calls=[call("import_todos", "import", count=20, seconds_per_item=0.05)],
        ),
        InProcessResponse(
            content="Deleting 'buy milk' as asked.", tool_calls=[call("delete", "delete", id=1)]
        ),
        InProcessResponse(
            content="Renaming the report todo.", tool_calls=[call("rename", "rename", id=2)]
        ),
    ]


async def _ask_terminal(lines: TerminalLines, question: str) -> str | None:
    """The typed line, or ``None`` at end of input (stdin closed or ``/dev/null``)."""
    # The prompt goes to stdout with the story; the answer is read from fd 0 without a
    # thread stuck in sys.stdin, so Ctrl-C here is the usual goodbye (see _terminal).
    print(question, end="", flush=True)
    try:
        reply = await lines.readline()
    except trio.Cancelled:
        print(flush=True)  # Ctrl-C: the goodbye line does not follow the prompt
        raise
    if reply is None or not is_terminal():
        print(flush=True)  # end the prompt's line (a terminal echoed the typed newline)
    return reply


async def run_app_demo(*, ask: bool = False) -> RunResult:
    """Run the agent-to-app story and print it; returns the run's result.

    With *ask*, questions are read from the terminal; at end of input a question is
    declined (one line says so).
    """
    out = _Printer()
    lines = TerminalLines()

    def declined(request: Request) -> Answer:
        out.line(f"  wait_for: {request.prompt} -> declined (end of input)")
        return Answer(request.id, False, reason="declined")

    async def wait_for(request: Request) -> Answer:
        schema = (request.data or {}).get("schema") or {}
        fields = list((schema.get("properties") or {}).keys())
        if not fields:  # a yes/no confirmation
            if ask:
                reply = await _ask_terminal(lines, f"  ? {request.prompt} [y/N] ")
                if reply is None:
                    return declined(request)
                ok = reply.strip().lower() in {"y", "yes"}
            else:
                ok = True
            out.line(f"  wait_for: {request.prompt} -> {'yes' if ok else 'no'}"
                     + ("" if ask else " (auto-approved)"))  # fmt: skip
            return Answer(request.id, ok, reason=None if ok else "declined")
        data: dict[str, Any] = {}
        for name in fields:
            if ask:
                typed = await _ask_terminal(lines, f"  ? {request.prompt} {name}: ")
                if typed is None:
                    return declined(request)
                data[name] = typed
            else:
                data[name] = "write the quarterly report"
        out.line(f"  wait_for: {request.prompt} -> {json.dumps(data)}"
                 + ("" if ask else " (auto-answered)"))  # fmt: skip
        return Answer(request.id, True, data)

    script = _script()

    async def generate(request: GenerateRequest) -> InProcessResponse:
        if request.turn < len(script):
            reply = script[request.turn]
        else:
            reply = InProcessResponse(
                content="Done: todos added, the import stopped at your request, "
                "'buy milk' deleted and the report renamed."
            )
        return reply

    app = build_todo_app()
    async with app.listen(port=0, manifest_dir=None) as host:
        out.line(f"host: the todo app listens on {host.url}")
        async with Gateway(GatewayOptions(wait_for=wait_for)) as gateway:
            session = await gateway.connect(host.url)
            out.line(f"gateway: connected to '{session.app.name}', claim code {session.claim_code}")
            assert session.claim_code is not None
            gateway.claim(session.claim_code)  # what the user does by typing the code
            out.line("gateway: session claimed; the app's actions are now tools")
            options = ToolkitOptions(tesseron=gateway, builtins=False)
            async with await create_toolkit(options) as toolkit:
                out.line("tools: " + ", ".join(t.name for t in toolkit.tools()))
                client = create_in_process_client(
                    InProcessOptions(model="scripted", generate=generate, wait_for=wait_for)
                )
                result = await _drive(client, toolkit, out)
                todos = await toolkit.read_resource("todo", "todos")
                out.line("resource todo/todos:")
                for todo in todos:
                    out.line(f"  [{'x' if todo['done'] else ' '}] #{todo['id']} {todo['text']}")
    out.line(f"status={result.status} turns={result.turns} tool_calls={result.tool_call_count}")
    return result


async def _drive(client: Any, toolkit: Any, out: _Printer) -> RunResult:
    prompt = "Add my todos, import the old tracker, delete 'buy milk', rename the report."
    out.line(f"user: {prompt}")
    tokens: dict[str, Any] = {}
    stopped = False
    result: RunResult | None = None
    async with client.stream(prompt, toolkit) as events:
        async for event in events:
            kind = event["type"]
            if kind == "text":
                out.line(f"model: {event['delta']}")
            elif kind == "tool_call":
                tokens[event["id"]] = event["cancel"]
                out.line(f"  -> {event['name']}({json.dumps(event['args'])})")
            elif kind == "progress":
                out.progress(event["tool"], event.get("percent"), event.get("message"))
                percent = event.get("percent") or 0
                if event["id"] == "import" and percent >= IMPORT_CANCEL_AT and not stopped:
                    stopped = True
                    out.line(f"user: stop the import! (cancelling the turn at {percent}%)")
                    tokens["import"].cancel("user pressed stop")
            elif kind == "log":
                out.line(f"    log[{event.get('level')}] {event.get('message')}")
            elif kind == "tool_result":
                flag = "error" if event["is_error"] else "ok"
                out.line(f"  <- {event['name']} [{flag}]: {event['output']}")
            elif kind == "done":
                result = event["result"]
    assert result is not None
    return result
