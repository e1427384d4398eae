"""The toolkit: one ordered set of tools, provider adapters, and routing by name."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import attrs
import trio

from ._builtins import BuiltinsConfig, builtin_tools
from ._tools import Tool, ToolContext, ToolResult

logger = logging.getLogger("toolnexus_trio")


@runtime_checkable
class DynamicToolSource(Protocol):
    """A source whose tools change over time, such as a Tesseron gateway.

    ``version`` changes whenever ``tools()`` would return something different, so the
    toolkit can cache its name index and provider adapters between changes.
    """

    @property
    def version(self) -> int:
        """A counter bumped on every change of the tool surface."""
        ...

    def tools(self) -> Sequence[Tool]:
        """The current tools."""
        ...

    async def read_resource(self, app_id: str, name: str) -> Any:
        """Read a resource the source exposes."""
        ...

    async def aclose(self) -> None:
        """Release the source (its connections)."""
        ...


@attrs.frozen
class ToolkitOptions:
    """What goes into a toolkit.

    ``extra_tools`` are your own tools; ``builtins`` picks the builtins (``None`` = all
    on); ``disable_tools`` drops names; ``tesseron`` adds a dynamic source, a
    :class:`toolnexus_trio.tesseron.Gateway`, whose claimed hosts' actions become
    tools (closing the toolkit closes it).
    """

    extra_tools: Sequence[Tool] = ()
    builtins: BuiltinsConfig | bool | None = None
    disable_tools: Sequence[str] = ()
    tesseron: DynamicToolSource | None = None


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

    def __init__(
        self,
        tools: Iterable[Tool],
        sources: Sequence[DynamicToolSource] = (),
        disabled: Iterable[str] = (),
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources = tuple(sources)
        self._disabled = frozenset(disabled)
        # Name index and adapters, rebuilt when a dynamic source's version moves.
        self._index: dict[str, Tool] = {}
        self._adapters: dict[str, list[dict[str, Any]]] = {}
        self._seen: tuple[int, ...] | None = None
        self._closed = False
        self.register(*tools)

    def register(self, *tools: Tool) -> None:
        """Add tools; a name already present keeps its first tool (a warning is logged)."""
        for t in tools:
            if t.name in self._tools:
                logger.warning("toolnexus_trio: duplicate tool name %r; keeping the first", t.name)
                continue
            self._tools[t.name] = t
        self._seen = None

    def _current(self) -> dict[str, Tool]:
        # Read twice per tool call: no generator when there is no dynamic source.
        versions = tuple(src.version for src in self._sources) if self._sources else ()
        if versions != self._seen:
            index = dict(self._tools)
            for src in self._sources:
                for t in src.tools():
                    if t.name in self._disabled:
                        continue
                    if t.name in index:
                        logger.warning(
                            "toolnexus_trio: duplicate tool name %r; keeping the first", t.name
                        )
                        continue
                    index[t.name] = t
            self._index, self._seen = index, versions
            self._adapters.clear()
        return self._index

    def tools(self) -> list[Tool]:
        """Every tool, in assembly order (dynamic sources' tools last)."""
        return list(self._current().values())

    def get(self, name: str) -> Tool | None:
        """The tool called *name*, or ``None``."""
        return self._current().get(name)

    async def execute(
        self, name: str, args: dict[str, Any] | None, ctx: ToolContext | None = None
    ) -> ToolResult:
        """Run tool *name* (see :meth:`Tool.call`); an unknown name is an error result."""
        found = self.get(name)
        if found is None:
            return ToolResult.error(f"Unknown tool: {name}")
        return await found.call(args, ctx)

    async def read_resource(self, app_id: str, name: str) -> Any:
        """Read resource *name* of app *app_id* from the toolkit's dynamic sources.

        Raises :class:`LookupError` when no source has that app.
        """
        for src in self._sources:
            try:
                return await src.read_resource(app_id, name)
            except LookupError:
                continue
        raise LookupError(f"no tool source serves app {app_id!r}")

    def _adapter(self, kind: str) -> list[dict[str, Any]]:
        tools = self._current().values()
        cached = self._adapters.get(kind)
        if cached is None:
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
        """Release the toolkit's sources (a gateway's connections). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for src in self._sources:
            await src.aclose()

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
    sources = [options.tesseron] if options.tesseron is not None else []
    await trio.lowlevel.checkpoint()
    return Toolkit(
        (t for t in [*builtins, *options.extra_tools] if t.name not in disabled),
        sources,
        disabled,
    )
