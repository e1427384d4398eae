"""``python -m toolnexus_trio demo``: the agent loop, offline, with a scripted model.

Three turns show the three things the loop is for: two tools running at once, a
suspension approved through ``wait_for``, and a turn cancelled while its tool runs.
"""

from __future__ import annotations

from typing import Any

import trio

from .._cancel import CancelToken
from .._toolkit import ToolkitOptions, create_toolkit
from .._tools import Tool, ToolContext, ToolResult, ToolSource, define_tool, pending
from .._wire import Answer, Request
from ..builtins import BuiltinsConfig
from ..loop import (
    GenerateRequest,
    Hooks,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    RunResult,
    create_in_process_client,
)


class _Clock:
    def __init__(self) -> None:
        self.start = trio.current_time()

    def stamp(self) -> str:
        return f"[{(trio.current_time() - self.start) * 1000:6.0f} ms]"


def _say(clock: _Clock, text: str) -> None:
    print(f"{clock.stamp()} {text}", flush=True)


async def run_demo(*, step_s: float = 0.3) -> RunResult:
    """Run the scripted agent and print its transcript; returns the run's result."""
    clock = _Clock()

    async def weather(args: dict[str, Any], ctx: ToolContext) -> str:
        _say(clock, f"  tool weather({args['city']}) started  [call {ctx.call_id}]")
        await trio.sleep(step_s)
        _say(clock, f"  tool weather({args['city']}) finished")
        return f"{args['city']}: sunny, 22C"

    async def add(args: dict[str, Any], ctx: ToolContext) -> str:
        _say(clock, f"  tool add({args['a']}, {args['b']}) started  [call {ctx.call_id}]")
        await trio.sleep(step_s)
        _say(clock, f"  tool add({args['a']}, {args['b']}) finished")
        return str(args["a"] + args["b"])

    async def delete_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            _say(clock, f"  tool delete_dir({args['path']}) suspends: needs approval")
            return pending(Request(kind="approval", prompt=f"Delete {args['path']}?"))
        _say(clock, f"  tool delete_dir({args['path']}) re-run with the answer: deleting")
        return ToolResult.ok(f"deleted {args['path']}")

    async def export(args: dict[str, Any], ctx: ToolContext) -> str:
        _say(clock, "  tool export started (takes 60 s)")
        try:
            await trio.sleep(60)
        except trio.Cancelled:
            _say(clock, "  tool export sees the turn's cancellation and unwinds")
            raise
        return "exported"

    path_schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = [
        define_tool(
            "weather",
            "Current weather for a city",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            weather,
        ),
        define_tool(
            "add",
            "Add two numbers",
            {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
            add,
        ),
        Tool(
            "delete_dir",
            "Delete a directory (asks first)",
            path_schema,
            ToolSource.CUSTOM,
            delete_dir,
        ),
        define_tool("export", "Export everything (slow)", None, export),
    ]

    script = [
        InProcessResponse(
            content="Checking the weather and doing the sum at once.",
            tool_calls=[
                InProcessToolCall(id="call_weather", name="weather", arguments={"city": "Paris"}),
                InProcessToolCall(id="call_add", name="add", arguments={"a": 2, "b": 2}),
            ],
        ),
        InProcessResponse(
            content="Now cleaning up the build directory.",
            tool_calls=[
                InProcessToolCall(id="call_rm", name="delete_dir", arguments={"path": "build/"})
            ],
        ),
        InProcessResponse(
            content="Starting the big export.",
            tool_calls=[InProcessToolCall(id="call_export", name="export")],
        ),
    ]

    async def generate(request: GenerateRequest) -> InProcessResponse:
        if request.turn < len(script):
            reply = script[request.turn]
        else:
            reply = InProcessResponse(
                content="Paris is sunny (22C), 2 + 2 = 4, build/ is deleted; "
                "the export was cancelled, so I stopped there."
            )
        _say(clock, f"model (turn {request.turn}): {reply.content}")
        return reply

    async def approve(request: Request) -> Answer:
        _say(clock, f"  wait_for: {request.kind} '{request.prompt}' -> approved (auto)")
        return Answer(id=request.id, ok=True)

    export_turn: list[CancelToken] = []
    export_started = trio.Event()

    def before_tool(event: dict[str, Any]) -> None:
        if event["id"] == "call_export":
            export_turn.append(event["cancel"])
            export_started.set()

    async def user_presses_stop() -> None:
        await export_started.wait()
        await trio.sleep(step_s)
        _say(clock, "host: the user presses stop; cancelling this turn's token")
        export_turn[0].cancel("user pressed stop")

    async with await create_toolkit(
        ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off())
    ) as toolkit:
        client = create_in_process_client(
            InProcessOptions(
                model="scripted",
                generate=generate,
                wait_for=approve,
                hooks=Hooks(before_tool=before_tool),
            )
        )
        prompt = "What's the weather in Paris, what is 2+2, and tidy up?"
        _say(clock, f"user: {prompt}")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(user_presses_stop)
            result = await client.run(
                "What's the weather in Paris, what is 2+2, and tidy up?", toolkit
            )
            nursery.cancel_scope.cancel()

    print()
    print("Transcript:")
    for message in result.messages:
        role = message["role"]
        if role == "tool":
            print(f"  tool[{message['tool_call_id']}]: {message['content']}")
        elif message.get("tool_calls"):
            calls = ", ".join(c["function"]["name"] for c in message["tool_calls"])
            print(f"  {role}: {message.get('content', '')}  -> calls {calls}")
        else:
            print(f"  {role}: {message['content']}")
    print(f"\nstatus={result.status} turns={result.turns} tool_calls={result.tool_call_count}")
    return result
