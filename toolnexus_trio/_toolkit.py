"""The toolkit: one ordered set of tools, provider adapters, and routing by name."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import attrs

from ._builtins import BuiltinsConfig, builtin_tools
from ._tools import Tool, ToolContext, ToolResult

logger = logging.getLogger("toolnexus_trio")


@attrs.frozen
class ToolkitOptions:
    """What goes into a toolkit: extra tools, builtins (``None`` = all on), names to drop."""

    extra_tools: Sequence[Tool] = ()
    builtins: BuiltinsConfig | bool | None = None
    disable_tools: Sequence[str] = ()


def _builtins_config(value: BuiltinsConfig | bool | None) -> BuiltinsConfig:
    if value is None or value is True:
        return BuiltinsConfig()
    if value is False:
        return BuiltinsConfig.off()
    return value


class Toolkit:
    """An ordered, name-unique set of tools. Use ``async with`` or call :meth:`aclose`.

    Assembly (SPEC §4): builtins a host tool shadows are dropped, then builtins come
    before extra tools, ``disable_tools`` names are removed, and on a duplicate name
    the first tool wins (a warning is logged).
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        self._adapters: dict[str, list[dict[str, Any]]] = {}
        self._closed = False
        self.register(*tools)

    def register(self, *tools: Tool) -> None:
        """Add tools; a name already present keeps its first tool (a warning is logged)."""
        for t in tools:
            if t.name in self._tools:
                logger.warning("toolnexus_trio: duplicate tool name %r; keeping the first", t.name)
                continue
            self._tools[t.name] = t
        self._adapters.clear()

    def tools(self) -> list[Tool]:
        """Every tool, in assembly order."""
        return list(self._tools.values())

    def get(self, name: str) -> Tool | None:
        """The tool called *name*, or ``None``."""
        return self._tools.get(name)

    async def execute(
        self, name: str, args: dict[str, Any] | None, ctx: ToolContext | None = None
    ) -> ToolResult:
        """Run tool *name* (see :meth:`Tool.call`); an unknown name is an error result."""
        found = self._tools.get(name)
        if found is None:
            return ToolResult.error(f"Unknown tool: {name}")
        return await found.call(args, ctx)

    def _adapter(self, kind: str) -> list[dict[str, Any]]:
        cached = self._adapters.get(kind)
        if cached is None:
            tools = self._tools.values()
            if kind == "openai":
                cached = [
                    {
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.input_schema,
                        },
                    }
                    for t in tools
                ]
            elif kind == "anthropic":
                cached = [
                    {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                    for t in tools
                ]
            else:
                cached = [
                    {
                        "functionDeclarations": [
                            {
                                "name": t.name,
                                "description": t.description,
                                "parameters": t.input_schema,
                            }
                            for t in tools
                        ]
                    }
                ]
            self._adapters[kind] = cached
        return cached

    def to_openai(self) -> list[dict[str, Any]]:
        """``[{"type": "function", "function": {name, description, parameters}}]``."""
        return list(self._adapter("openai"))

    def to_anthropic(self) -> list[dict[str, Any]]:
        """``[{name, description, input_schema}]``."""
        return list(self._adapter("anthropic"))

    def to_gemini(self) -> list[dict[str, Any]]:
        """``[{"functionDeclarations": [{name, description, parameters}, ...]}]`` (one element)."""
        return list(self._adapter("gemini"))

    async def aclose(self) -> None:
        """Release the toolkit's sources. Idempotent."""
        self._closed = True

    async def __aenter__(self) -> Toolkit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def create_toolkit(options: ToolkitOptions | None = None) -> Toolkit:
    """Assemble a :class:`Toolkit` from *options* (SPEC §4 order)."""
    options = options or ToolkitOptions()
    extra_names = {t.name for t in options.extra_tools}
    builtins = [
        t for t in builtin_tools(_builtins_config(options.builtins)) if t.name not in extra_names
    ]
    disabled = set(options.disable_tools)
    return Toolkit(t for t in [*builtins, *options.extra_tools] if t.name not in disabled)
