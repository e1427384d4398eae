"""The toolkit: one ordered set of tools, provider adapters, and routing by name."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

from ._builtins import BuiltinsConfig, builtin_tools
from ._groups import collapse_groups
from ._tools import Tool, ToolContext, ToolResult
from ._wire import Answer, Request
from .mcp._config import McpConfigInput
from .mcp._types import MCPServeConfig, McpStatus, OnCall

if TYPE_CHECKING:
    from .mcp._serving import McpServing
    from .mcp._source import McpSource

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

    ``mcp`` is an MCP config (a JSON file's path, a mapping, or a parsed
    :class:`~toolnexus_trio.mcp.McpConfig`) whose servers' tools come first (SPEC §2;
    needs the ``mcp`` extra and a nursery: use :func:`open_toolkit`). ``wait_for``
    answers the servers' elicitations (the SPEC §2 bridge; without it the capability
    is not advertised).
    """

    extra_tools: Sequence[Tool] = ()
    builtins: BuiltinsConfig | bool | None = None
    disable_tools: Sequence[str] = ()
    tesseron: DynamicToolSource | None = None
    mcp: McpConfigInput | None = None
    wait_for: Callable[[Request], Awaitable[Answer]] | None = None


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
        *,
        mcp: McpSource | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._mcp = mcp
        # The MCP source's tools come first (SPEC §4 order), the other sources' last.
        self._head: tuple[DynamicToolSource, ...] = () if mcp is None else (mcp,)
        self._sources = (*self._head, *sources)
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

    def _merge(self, index: dict[str, Tool], tools: Iterable[Tool]) -> None:
        for t in tools:
            if t.name in self._disabled:
                continue
            if t.name in index:
                logger.warning("toolnexus_trio: duplicate tool name %r; keeping the first", t.name)
                continue
            index[t.name] = t

    def _current(self) -> dict[str, Tool]:
        versions = tuple(src.version for src in self._sources)
        if versions != self._seen:
            index: dict[str, Tool] = {}
            for src in self._head:
                self._merge(index, src.tools())
            self._merge(index, self._tools.values())
            for src in self._sources[len(self._head) :]:
                self._merge(index, src.tools())
            self._index, self._seen = index, versions
            self._adapters.clear()
        return self._index

    def tools(self) -> list[Tool]:
        """Every tool, in assembly order (MCP tools first, other dynamic sources' last)."""
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

    def mcp_status(self) -> dict[str, McpStatus]:
        """Each configured MCP server's status (``connected | disabled | failed`` and why);
        empty without ``ToolkitOptions.mcp``."""
        return {} if self._mcp is None else self._mcp.status()

    def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        mcp: MCPServeConfig | None = None,
        on_call: OnCall | None = None,
    ) -> McpServing:
        """Serve this toolkit as an MCP server over streamable HTTP at ``/mcp`` (SPEC §7C).

        ``async with toolkit.serve() as served:`` (or ``await nursery.start(toolkit.serve())``)
        gives :class:`~toolnexus_trio.mcp.McpServing` with ``url`` and ``aclose()``. Needs
        the ``mcp`` extra.
        """
        from .mcp._sdk import require_sdk

        require_sdk("Toolkit.serve")
        from .mcp._serving import McpServing

        return McpServing(self, host, port, mcp=mcp, on_call=on_call)

    async def serve_stdio(
        self, *, mcp: MCPServeConfig | None = None, on_call: OnCall | None = None
    ) -> None:
        """Serve this toolkit as an MCP server on stdin/stdout until the client closes
        stdin (for local clients such as Claude Desktop). Needs the ``mcp`` extra."""
        from .mcp._sdk import require_sdk

        require_sdk("Toolkit.serve_stdio")
        from .mcp._serving import serve_stdio

        await serve_stdio(self, mcp=mcp, on_call=on_call)

    async def aclose(self) -> None:
        """Release the toolkit's sources (a gateway's connections, MCP servers). Idempotent."""
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


async def create_toolkit(
    options: ToolkitOptions | None = None, *, nursery: trio.Nursery | None = None
) -> Toolkit:
    """Assemble a :class:`Toolkit` from *options* (SPEC §4 order).

    With ``options.mcp``, the MCP servers load first (concurrently) and their
    connections live in *nursery* until the toolkit is closed; :func:`open_toolkit`
    provides both the nursery and the close.
    """
    options = options or ToolkitOptions()
    mcp_source: McpSource | None = None
    if options.mcp is not None:
        if nursery is None:
            raise TypeError(
                "ToolkitOptions.mcp needs a nursery for the server connections: use "
                "`async with open_toolkit(options) as toolkit:` (or pass nursery=)"
            )
        from .mcp._sdk import require_sdk

        require_sdk("ToolkitOptions.mcp")
        from .mcp._source import McpSource

        mcp_source = McpSource(options.mcp, wait_for=options.wait_for)
        try:
            await mcp_source.start(nursery)
        except BaseException:
            await mcp_source.aclose()
            raise
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
        mcp=mcp_source,
    )


@contextlib.asynccontextmanager
async def open_toolkit(options: ToolkitOptions | None = None) -> AsyncIterator[Toolkit]:
    """A :class:`Toolkit` for the ``async with`` block, closed at its end.

    The form to use with ``ToolkitOptions.mcp``: the MCP server connections are tasks
    of this block, so none outlives it (and a cancelled load leaves no process).
    """
    with collapse_groups():
        async with trio.open_nursery() as nursery:
            toolkit = await create_toolkit(options, nursery=nursery)
            try:
                yield toolkit
            finally:
                await toolkit.aclose()
