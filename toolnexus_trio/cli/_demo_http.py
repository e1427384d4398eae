"""The third part of the demo: the same loop through the HTTP client, still offline.

A :class:`~toolnexus_trio.testing.FakeProvider` serves the OpenAI wire on loopback in
this process (no key, no network); :func:`~toolnexus_trio.create_client` talks to it
over real HTTP. The model calls two tools at once, then streams its answer word by
word; the run's usage and the client's Prometheus counters close the part. The text
and tool lines are printed by the ``ask`` command's own printer.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from .._toolkit import ToolkitOptions, create_toolkit
from .._tools import ToolContext, define_tool
from ..builtins import BuiltinsConfig
from ..loop import RunResult
from ..models import ClientOptions, create_client
from ..testing import open_fake_provider
from ._ask import TurnPrinter

MODEL = "demo-model"
_WORD_DELAY_MS = 25
"""Between streamed events of the answer, so the streaming shows on a terminal."""

_SCRIPT: list[dict[str, Any]] = [
    {
        "text": "Let me check both at once.",
        "tool_calls": [
            {"id": "call_weather", "name": "weather", "arguments": {"city": "Paris"}},
            {"id": "call_add", "name": "add", "arguments": {"a": 19, "b": 23}},
        ],
        "usage": {"prompt_tokens": 61, "completion_tokens": 24},
    },
    {
        "text": "Paris is sunny at 22C, and 19 + 23 = 42.",
        "usage": {"prompt_tokens": 112, "completion_tokens": 15},
        "event_delay_ms": _WORD_DELAY_MS,
    },
]


async def _weather(args: dict[str, Any], ctx: ToolContext) -> str:
    await trio.sleep(0.05)
    return f"{args['city']}: sunny, 22C"


async def _add(args: dict[str, Any], ctx: ToolContext) -> str:
    await trio.sleep(0.05)
    return str(args["a"] + args["b"])


_TOOLS = [
    define_tool(
        "weather",
        "Current weather for a city",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        _weather,
    ),
    define_tool(
        "add",
        "Add two numbers",
        {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        _add,
    ),
]


async def run_http_demo() -> RunResult:
    """Run the HTTP part and print it; returns the run's result."""
    printer = TurnPrinter(
        sys.stdout, sys.stdout, text_prefix="model (streamed): ", info_prefix="  "
    )
    async with open_fake_provider(_SCRIPT) as provider:
        print(f"provider: a FakeProvider speaks the OpenAI wire on {provider.base_url}")
        options = ClientOptions(
            base_url=provider.base_url,
            style="openai",
            model=MODEL,
            api_key="not-needed",  # never the user's real key from the environment
            hooks=printer.hooks(),
        )
        toolkit_options = ToolkitOptions(extra_tools=_TOOLS, builtins=BuiltinsConfig.off())
        async with (
            create_client(options) as client,
            await create_toolkit(toolkit_options) as toolkit,
        ):
            prompt = "What's the weather in Paris, and what is 19 + 23?"
            print(f"user: {prompt}", flush=True)
            result = await client.ask(prompt, toolkit, on_text=printer.text)
            printer.end_text()
            metrics = client.metrics()
        posts = len(provider.requests)
        streamed = sum(1 for r in provider.requests if (r.json or {}).get("stream") is True)
    usage = result.usage
    print(
        f"usage: {usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion "
        f"= {usage['total_tokens']} tokens over {posts} POSTs to /v1/chat/completions "
        f"({streamed} streamed)"
    )
    print("client.metrics() counters:")
    for line in metrics.splitlines():
        if line.startswith("toolnexus_") and "_total" in line.split("{", 1)[0]:
            print(f"  {line}")
    print(f"status={result.status} turns={result.turns} tool_calls={result.tool_call_count}")
    return result
