"""A toolkit served over MCP advertises outputSchema and returns structuredContent for the
tools whose functions return typed values (issue 33), to the official SDK's client."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("mcp")

from mcp import Client

from toolnexus_trio import BuiltinsConfig, ToolkitOptions, create_toolkit, tool


@dataclasses.dataclass
class Weather:
    city: str
    celsius: float


@tool
async def weather(city: str) -> Weather:
    """The weather in a city."""
    return Weather(city, 21.5)


@tool
async def primes(below: int) -> list[int]:
    """Primes below a number."""
    return [n for n in range(2, below) if all(n % d for d in range(2, n))]


@tool
async def greet(name: str) -> str:
    """Text, not a typed value."""
    return f"hi {name}"


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_typed_tools_have_an_output_schema_and_structured_content(era: str) -> None:
    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[weather, primes, greet], builtins=BuiltinsConfig.off())
    )
    async with toolkit, toolkit.serve() as served, Client(served.url, mode=era) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        sunny = await client.call_tool("weather", {"city": "Oslo"})
        counted = await client.call_tool("primes", {"below": 8})
        said = await client.call_tool("greet", {"name": "Ada"})
    assert listed["weather"].output_schema == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["city", "celsius"],
        "additionalProperties": False,
    }
    assert listed["primes"].output_schema == {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
        "required": ["result"],
    }
    assert listed["greet"].output_schema is None
    assert sunny.structured_content == {"city": "Oslo", "celsius": 21.5}
    assert counted.structured_content == {"result": [2, 3, 5, 7]}
    assert said.structured_content is None
    assert said.content[0].text == "hi Ada"  # type: ignore[union-attr]
