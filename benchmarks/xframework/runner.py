"""One side of scenario 17 in one process: build the agent, run the question N times.

    python -m benchmarks.xframework.runner SIDE --url URL --mcp-python PY --runs N --warmup W

SIDE is ``ours``, ``toolnexus`` (0.21), ``pydantic-ai``, ``openai-agents``,
``langgraph-default``, ``langgraph-session`` or ``floor``. Every side but ``ours`` runs
from a virtualenv of its own (:mod:`benchmarks.xframework`), so this module imports only
the standard library at the top and each framework inside its own function. Each
runner is ours, written from the scenario and the framework's public documentation.

The scenario (the upstream README's): one question; the mock answers with one turn of
two parallel tool calls (``get_weather``, ``add``), executed through the shared stdio
MCP server, then a final answer: two model round trips and two MCP ``tools/call`` per
request. Printed, one JSON object: ``import_ms`` (the framework's imports in this fresh
process; for ours also ``import_base_ms``, the package without the MCP extra),
``init_ms`` (agent built and its MCP server connected, tools listed where the framework
does that eagerly), ``first_ms`` (the first request), ``samples`` (ms per request after
the warm-up; ``cpu``: this process's CPU time per request, all threads, steadier
than wall time on a shared machine), ``done_at`` (``time.time()`` after the first
request: the orchestrator's import + first request of a fresh process),
``peak_rss_kib``.

``floor``: the same work without a framework, on blocking sockets and pipes: the two
model requests as raw HTTP bytes (the bodies a framework sends, on a new connection each,
as the mock closes after each answer) and the two ``tools/call`` written at once as raw
JSON-RPC lines to the same MCP server, their answers read back and decoded.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUESTION = "What's the weather in Paris and what is 2+2?"
FINAL = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4."
MODEL = "mock-model"
KEY = "sk-bench"
SERVER = str(Path(__file__).resolve().parent / "upstream" / "mcp_server.py")
SIDES = (
    "ours",
    "toolnexus",
    "pydantic-ai",
    "openai-agents",
    "langgraph-session",
    "langgraph-default",
)
"""The framework sides (``floor`` is separate)."""


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def _check(text: str | None) -> None:
    if text != FINAL:
        raise AssertionError(f"unexpected final answer: {text!r}")


class Timer:
    """Collects the figures every side reports."""

    def __init__(self, runs: int, warmup: int) -> None:
        self.runs, self.warmup = runs, warmup
        self.out: dict[str, Any] = {"samples": [], "cpu": []}

    def imported(self, t0: float, **extra: float) -> None:
        self.out["import_ms"] = _ms(t0)
        self.out.update(extra)


async def _drive_async(timer: Timer, init: Callable[[], Any], one: Callable[[], Any]) -> None:
    t0 = time.perf_counter()
    await init()
    timer.out["init_ms"] = _ms(t0)
    t0 = time.perf_counter()
    await one()
    timer.out["first_ms"] = _ms(t0)
    timer.out["done_at"] = time.time()
    for _ in range(timer.warmup):
        await one()
    for _ in range(timer.runs):
        t0, c0 = time.perf_counter(), time.process_time()
        await one()
        timer.out["cpu"].append((time.process_time() - c0) * 1e3)
        timer.out["samples"].append(_ms(t0))


# ---------------------------------------------------------------------------
# Ours (Trio, our public API)
# ---------------------------------------------------------------------------


def ours(args: argparse.Namespace, timer: Timer) -> None:
    t0 = time.perf_counter()
    import trio

    from toolnexus_trio import ClientOptions, ToolkitOptions, create_client, open_toolkit

    base = _ms(t0)
    from toolnexus_trio.mcp import McpSource  # noqa: F401 - the MCP extra (the SDK), as first use does

    timer.imported(t0, import_base_ms=base)

    async def main() -> None:
        options = ClientOptions(base_url=args.url, style="openai", model=MODEL, api_key=KEY)
        config = {"bench": {"command": [args.mcp_python, SERVER]}}
        t0 = time.perf_counter()
        async with (
            create_client(options) as client,
            open_toolkit(ToolkitOptions(mcp=config, builtins=False)) as toolkit,
        ):
            timer.out["init_ms"] = _ms(t0)

            async def one() -> None:
                result = await client.run(QUESTION, toolkit)
                _check(result.text)
                assert len(result.tool_calls) == 2, result.tool_calls

            async def ready() -> None:
                pass

            init_ms = timer.out["init_ms"]
            await _drive_async(timer, ready, one)
            timer.out["init_ms"] = init_ms

    trio.run(main)


# ---------------------------------------------------------------------------
# Peers (asyncio), each through its public API as its documentation shows
# ---------------------------------------------------------------------------


def toolnexus(args: argparse.Namespace, timer: Timer) -> None:
    t0 = time.perf_counter()
    import asyncio

    import toolnexus as tn

    timer.imported(t0)

    async def main() -> None:
        state: dict[str, Any] = {}

        async def init() -> None:
            state["client"] = tn.create_client(
                base_url=args.url, style="openai", model=MODEL, api_key=KEY
            )
            config = {"bench": {"command": [args.mcp_python, SERVER]}}
            state["toolkit"] = await tn.create_toolkit(mcp_config=config, builtins=False)

        async def one() -> None:
            result = await state["client"].run(QUESTION, state["toolkit"])
            _check(result.text)

        try:
            await _drive_async(timer, init, one)
        finally:
            if "toolkit" in state:
                await state["toolkit"].close()

    asyncio.run(main())


def pydantic_ai(args: argparse.Namespace, timer: Timer) -> None:
    t0 = time.perf_counter()
    import asyncio

    from fastmcp.client import Client
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    timer.imported(t0)

    async def main() -> None:
        state: dict[str, Any] = {}

        async def init() -> None:
            provider = OpenAIProvider(base_url=args.url, api_key=KEY)
            # Pydantic AI 2's MCPToolset over a FastMCP client on the stdio transport.
            server = MCPToolset(Client(StdioTransport(command=args.mcp_python, args=[SERVER])))
            agent = Agent(OpenAIChatModel(MODEL, provider=provider), toolsets=[server])
            await agent.__aenter__()  # connects the MCP server once, for every run
            state["agent"] = agent

        async def one() -> None:
            result = await state["agent"].run(QUESTION)
            _check(result.output)

        try:
            await _drive_async(timer, init, one)
        finally:
            if "agent" in state:
                await state["agent"].__aexit__(None, None, None)

    asyncio.run(main())


def openai_agents(args: argparse.Namespace, timer: Timer) -> None:
    t0 = time.perf_counter()
    import asyncio

    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStdio
    from openai import AsyncOpenAI

    timer.imported(t0)
    set_tracing_disabled(True)  # no tracing exporter: nothing leaves the machine

    async def main() -> None:
        state: dict[str, Any] = {}

        async def init() -> None:
            server = MCPServerStdio(
                params={"command": args.mcp_python, "args": [SERVER]},
                cache_tools_list=True,  # the documented option: tools/list once, as ours
            )
            await server.connect()
            state["server"] = server
            model = OpenAIChatCompletionsModel(
                model=MODEL, openai_client=AsyncOpenAI(base_url=args.url, api_key=KEY)
            )
            state["agent"] = Agent(
                name="bench", instructions="Answer.", model=model, mcp_servers=[server]
            )

        async def one() -> None:
            result = await Runner.run(state["agent"], QUESTION)
            _check(result.final_output)

        try:
            await _drive_async(timer, init, one)
        finally:
            if "server" in state:
                await state["server"].cleanup()

    asyncio.run(main())


def langgraph(args: argparse.Namespace, timer: Timer, session: bool) -> None:
    t0 = time.perf_counter()
    import asyncio
    import contextlib
    import warnings

    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools
    from langchain_openai import ChatOpenAI

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move notice in LangGraph 1.x
        from langgraph.prebuilt import create_react_agent

    timer.imported(t0)

    async def main() -> None:
        state: dict[str, Any] = {}
        async with contextlib.AsyncExitStack() as stack:

            async def init() -> None:
                client = MultiServerMCPClient(
                    {"bench": {"command": args.mcp_python, "args": [SERVER], "transport": "stdio"}}
                )
                if session:  # one MCP session held open for every run
                    live = await stack.enter_async_context(client.session("bench"))
                    tools = await load_mcp_tools(live)
                else:  # the adapters' default: a new session (server process) per tool call
                    tools = await client.get_tools()
                model = ChatOpenAI(model=MODEL, base_url=args.url, api_key=KEY)
                state["agent"] = create_react_agent(model, tools)

            async def one() -> None:
                result = await state["agent"].ainvoke({"messages": [("user", QUESTION)]})
                _check(result["messages"][-1].content)

            await _drive_async(timer, init, one)

    asyncio.run(main())


# ---------------------------------------------------------------------------
# The floor: the mock and the MCP server answering raw requests (stdlib, blocking)
# ---------------------------------------------------------------------------

_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bench_get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "bench_add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "bench_echo",
            "description": "Echo the given text back.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    },
]


def floor(args: argparse.Namespace, timer: Timer) -> None:
    t0 = time.perf_counter()
    timer.imported(t0)
    host, _, port = args.url.removeprefix("http://").partition(":")
    address = (host, int(port.split("/")[0]))

    def post(body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body).encode()
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\n"
            f"Host: {host}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode()
        with socket.create_connection(address) as sock:
            sock.sendall(head + payload)
            chunks = []
            while chunk := sock.recv(65536):  # HTTP/1.0: the mock closes after the answer
                chunks.append(chunk)
        answer = b"".join(chunks)
        return json.loads(answer.partition(b"\r\n\r\n")[2])  # type: ignore[no-any-return]

    state: dict[str, Any] = {"id": 0}

    def rpc_many(requests: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        proc = state["proc"]
        lines = []
        for method, params in requests:
            state["id"] += 1
            message = {"jsonrpc": "2.0", "id": state["id"], "method": method, "params": params}
            lines.append(json.dumps(message))
        proc.stdin.write(("\n".join(lines) + "\n").encode())
        proc.stdin.flush()
        return [json.loads(proc.stdout.readline()) for _ in requests]

    def init() -> None:
        state["proc"] = subprocess.Popen(
            [args.mcp_python, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        rpc_many(
            [
                (
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "floor", "version": "1"},
                    },
                )
            ]
        )
        state["proc"].stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        rpc_many([("tools/list", {})])

    def one() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        first = post({"model": MODEL, "messages": messages, "tools": _TOOLS})
        message = first["choices"][0]["message"]
        calls = message["tool_calls"]
        answers = rpc_many(
            [
                (
                    "tools/call",
                    {
                        "name": c["function"]["name"].removeprefix("bench_"),
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                )
                for c in calls
            ]
        )
        messages.append(message)
        for call, answer in zip(calls, answers, strict=True):
            text = answer["result"]["content"][0]["text"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        second = post({"model": MODEL, "messages": messages, "tools": _TOOLS})
        _check(second["choices"][0]["message"]["content"])

    t0 = time.perf_counter()
    init()
    timer.out["init_ms"] = _ms(t0)
    try:
        t0 = time.perf_counter()
        one()
        timer.out["first_ms"] = _ms(t0)
        timer.out["done_at"] = time.time()
        for _ in range(timer.warmup):
            one()
        for _ in range(timer.runs):
            t0, c0 = time.perf_counter(), time.process_time()
            one()
            timer.out["cpu"].append((time.process_time() - c0) * 1e3)
            timer.out["samples"].append(_ms(t0))
    finally:
        state["proc"].stdin.close()
        state["proc"].wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.xframework.runner")
    parser.add_argument("side", choices=[*SIDES, "floor"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--mcp-python", required=True)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    timer = Timer(args.runs, args.warmup)
    runners: dict[str, Callable[[argparse.Namespace, Timer], None]] = {
        "ours": ours,
        "toolnexus": toolnexus,
        "pydantic-ai": pydantic_ai,
        "openai-agents": openai_agents,
        "langgraph-session": lambda a, t: langgraph(a, t, session=True),
        "langgraph-default": lambda a, t: langgraph(a, t, session=False),
        "floor": floor,
    }
    runners[args.side](args, timer)
    timer.out["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(timer.out))


if __name__ == "__main__":
    main()
