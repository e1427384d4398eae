"""Helpers for the HTTP client tests: every test talks to a real loopback FakeProvider."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from toolnexus_trio import (
    BuiltinsConfig,
    Client,
    ClientOptions,
    Toolkit,
    ToolkitOptions,
    create_client,
    create_toolkit,
    tool,
)
from toolnexus_trio.testing import FakeProvider, open_fake_provider

STYLES = ["openai", "anthropic"]
KEY = "sk-test-0123456789"


@tool
async def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


async def adder() -> Toolkit:
    return await create_toolkit(ToolkitOptions(extra_tools=[add], builtins=BuiltinsConfig.off()))


def options(provider: FakeProvider, style: str, **kw: Any) -> ClientOptions:
    kw.setdefault("api_key", KEY)
    kw.setdefault("model", "m")
    return ClientOptions(base_url=provider.base_url, style=style, **kw)  # type: ignore[arg-type]


@asynccontextmanager
async def served(
    style: str, script: list[Any], **kw: Any
) -> AsyncIterator[tuple[FakeProvider, Client]]:
    """A provider playing *script* and a client of *style* pointed at it."""
    async with (
        open_fake_provider(script) as provider,
        create_client(options(provider, style, **kw)) as client,
    ):
        yield provider, client


def calls_step(*pairs: tuple[int, int], text: str = "") -> dict[str, Any]:
    """A step calling ``add`` once per pair."""
    return {
        "text": text,
        "tool_calls": [{"name": "add", "arguments": {"a": a, "b": b}} for a, b in pairs],
    }


def assert_balanced(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call has exactly one tool message, right after its turn."""
    waiting: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in waiting, m
            waiting.remove(m["tool_call_id"])
            continue
        assert not waiting, f"tool calls without results: {waiting}"
        if m["role"] == "assistant":
            waiting = [c["id"] for c in m.get("tool_calls", [])]
    assert not waiting, f"tool calls without results: {waiting}"


async def run_events(client: Client, prompt: str, toolkit: Toolkit | None) -> list[dict[str, Any]]:
    """Every event of one ``client.stream`` run, in order."""
    async with client.stream(prompt, toolkit) as events:
        return [event async for event in events]
