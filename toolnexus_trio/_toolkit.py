"""The toolkit: one ordered set of tools, provider adapters, and routing by name.
This module is long because the toolkit is the one place that opens every source
(builtins, skills, MCP, A2A, HTTP tools) in order, routes calls among them, and serves
the result."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import trio

from ._groups import collapse_groups
from ._opening import AwaitOrEnter, opener
from ._sampling import Sampler, SamplingLimits
from ._tools import Tool, ToolContext, ToolResult, ToolSource
from ._wire import Answer, Request
from .a2a._agent import A2AAgent, A2ASource, A2AStatus, AgentsInput, agent, agents_of
from .a2a._server import A2AServeConfig, A2AServer, OnTask, TaskClient
from .a2a._serving import A2AServing
from .builtins import BUILTIN_ORDER, BuiltinsConfig, builtin_tools
from .mcp._config import McpConfig, McpConfigInput, parse_mcp_config, serve_profile
from .mcp._sdk import sdk_present as mcp_sdk_present
from .mcp._types import MCPServeConfig, McpStatus, OnCall
from .skills._source import PathArg, SkillCatalog, load_catalog
from .skills._types import SkillDef, SkillProvider

if TYPE_CHECKING:
    from .mcp._serving import McpServing
    from .mcp._source import McpSource

logger = logging.getLogger("toolnexus_trio")

_RESERVED_FOR_RELAY = frozenset({*BUILTIN_ORDER, "skill"})
"""Names a relay tool may not take: every builtin's (and the skill tool's)."""


def check_relay_names(tools: Iterable[Tool]) -> None:
    """Refuse a relay tool named like a builtin (SPEC §10 relay addendum).

    Unconditional, whatever the builtins option says: a proxy runs with builtins off,
    and a builtin added later must never capture a call the host is meant to run.
    The ``skill`` tool is refused too, since it would shadow the relay tool the same way.
    """
    for t in tools:
        if t.source is ToolSource.RELAY and t.name in _RESERVED_FOR_RELAY:
            raise ValueError(
                f"relay tool {t.name!r} collides with a builtin tool's name: "
                "rename the relay tool (the guard holds even with builtins off)"
            )


@runtime_checkable
class DynamicToolSource(Protocol):
    """A source whose tools change over time, such as a Tesseron gateway.

    ``version`` changes whenever ``tools()`` would return something different, so the
    toolkit can cache its name index and provider adapters between changes.

    A source may also offer ``async def wait_changed(self, since: int) -> int`` (return
    ``version`` once it differs from *since*; cancellable): :meth:`Toolkit.wait_changed`
    then wakes on its changes. A source without it is not watched; its changes are seen
    on the next look at the toolkit.
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


def _check_skills_dir(_: object, __: object, value: Any) -> None:
    if value is None or isinstance(value, str | os.PathLike):
        return
    if isinstance(value, bytes) or not isinstance(value, Sequence):
        raise TypeError("skills_dir is a path or a list of paths")
    for item in value:
        if not isinstance(item, str | os.PathLike):
            raise TypeError(f"skills_dir holds paths, not {type(item).__name__}")


def _check_skills(_: object, __: object, value: Any) -> None:
    if isinstance(value, str | bytes | os.PathLike) or not isinstance(value, Sequence):
        raise TypeError("skills takes a list of SkillDef; give folders as skills_dir")
    for item in value:
        if not isinstance(item, SkillDef):
            raise TypeError(f"skills holds SkillDef objects, not {type(item).__name__}")


def _check_filter(_: object, __: object, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise TypeError("skills_filter is a mapping of skill name to bool")
    for key, flag in value.items():
        if not isinstance(key, str) or not isinstance(flag, bool):
            raise TypeError(f"skills_filter maps names to booleans; got {key!r}: {flag!r}")


def _check_sample_limit(_: object, __: object, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < -1:
        raise ValueError(f"skill_sample_limit is -1, 0 or a positive int, not {value!r}")


@attrs.frozen
class ToolkitOptions:
    """What goes into a toolkit.

    ``extra_tools`` are your own tools; ``builtins`` picks the builtins (``None`` = all
    on); ``disable_tools`` drops names; ``tesseron`` adds a dynamic source, a
    :class:`toolnexus_trio.tesseron.Gateway`, whose claimed hosts' actions become
    tools (closing the toolkit closes it).

    Skills (SPEC §3; any of the first three turns the ``skill`` tool on):

    - ``skills_dir``: one folder or a list, searched for ``**/SKILL.md``;
    - ``skills``: :class:`~toolnexus_trio.SkillDef` s, skills supplied as data;
    - ``skill_provider``: a function (plain or ``async``) returning ``SkillDef`` s,
      called once at build; if it fails, the other sources still load;
    - ``skills_filter``: ``name -> bool``; empty keeps all, one ``True`` makes an
      allowlist, only ``False`` drops those names; unknown names are logged;
    - ``disable_skills``: names dropped after the filter;
    - ``skill_sample_limit``: files listed per skill, ``0`` = 10, ``-1`` = no list.

    ``mcp`` is an MCP config (a JSON file's path, a mapping, or a parsed
    :class:`~toolnexus_trio.mcp.McpConfig`) whose servers' tools come first (SPEC §2;
    needs the ``mcp`` extra and a nursery: use :func:`open_toolkit`). ``wait_for``
    answers the servers' elicitations (the SPEC §2 bridge; without it the capability
    is not advertised).

    ``agents`` are remote A2A agents (SPEC §7A): :func:`toolnexus_trio.a2a.agent`
    objects (or card URLs), or the config file's ``agents`` block; each skill of each
    card becomes a tool, after the extra tools. A failing agent gives no tools and a
    ``failed`` entry in :meth:`Toolkit.a2a_status`.
    """

    extra_tools: Sequence[Tool] = ()
    builtins: BuiltinsConfig | bool | None = None
    disable_tools: Sequence[str] = ()
    tesseron: DynamicToolSource | None = None
    skills_dir: PathArg | Sequence[PathArg] | None = attrs.field(
        default=None, validator=_check_skills_dir
    )
    skills: Sequence[SkillDef] = attrs.field(default=(), validator=_check_skills)
    skill_provider: SkillProvider | None = None
    skills_filter: Mapping[str, bool] | None = attrs.field(default=None, validator=_check_filter)
    disable_skills: Sequence[str] = ()
    skill_sample_limit: int = attrs.field(default=0, validator=_check_sample_limit)
    mcp: McpConfigInput | None = None
    wait_for: Callable[[Request], Awaitable[Answer]] | None = None
    sample: Sampler | None = None
    """Answers the MCP servers' sampling requests (see :func:`~toolnexus_trio.sampler_from_client`);
    without it the sampling capability is not advertised."""
    sampling_limits: SamplingLimits = attrs.field(factory=SamplingLimits)
    """Caps on those requests: tokens, nesting depth, requests a minute per server."""
    relay_to_client: bool = False
    """Advertise elicitation and sampling to the MCP servers even without ``wait_for`` /
    ``sample``, for ``serve`` to relay them to its client (what no client can take is
    answered ``cancel`` / refused)."""
    agents: AgentsInput = ()


def _skills_configured(options: ToolkitOptions) -> bool:
    """Whether a skill source is configured (the toolkit then has a ``skill`` tool)."""
    dirs = options.skills_dir
    has_dirs = dirs is not None and (isinstance(dirs, str | os.PathLike) or len(dirs) > 0)
    return has_dirs or len(options.skills) > 0 or options.skill_provider is not None


class Toolkit:
    """An ordered, name-unique set of tools. Use ``async with`` or call :meth:`aclose`.

    Assembly (SPEC §4), in :func:`create_toolkit`: builtins an extra tool shadows are
    dropped; then the order is MCP tools (a slot for the MCP source, which does not
    exist yet), the ``skill`` tool, builtins, extra tools; ``disable_tools`` names are
    removed; on a duplicate name the first tool wins (a warning is logged), so MCP beats
    ``skill`` beats builtins, and an extra tool beats only a builtin. A dynamic source's
    tools (a Tesseron gateway) come after all of these.
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
        self._skills: SkillCatalog | None = None
        self._a2a: A2ASource | None = None
        self._config: McpConfig | None = None  # the config file's serve() defaults
        # The change signal: register() bumps _registered and wakes _lot's parked
        # waiters; `version` moves when that or any source's version moves.
        self._registered = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._version = 0
        self._version_key: tuple[int, ...] | None = None
        self.register(*tools)

    def skills_prompt(self) -> str:
        """The skill catalog for the system prompt (SPEC §3 "System-prompt helper").

        The fixed preamble and ``## Available Skills`` with one ``- **name**:
        description`` line per described skill (sorted by name), or ``"No skills are
        currently available."`` when there is none. ``""`` when the toolkit has no skill
        source, or when its ``skill`` tool is not in the toolkit (dropped by
        ``disable_tools`` or shadowed): the model is never told to use a tool it lacks.
        """
        catalog = self._skills
        if catalog is None or self.get("skill") is not catalog.tool:
            return ""
        return catalog.prompt()

    def register(self, *tools: Tool) -> None:
        """Add tools; a name already present keeps its first tool (a warning is logged).

        A relay tool named like a builtin raises :class:`ValueError` (nothing is added).
        """
        check_relay_names(tools)
        added = False
        for t in tools:
            if t.name in self._tools:
                logger.warning("toolnexus_trio: duplicate tool name %r; keeping the first", t.name)
                continue
            self._tools[t.name] = t
            added = True
        self._seen = None
        if added:
            self._registered += 1
            self._lot.unpark_all()

    def _version_parts(self) -> tuple[int, ...]:
        return (self._registered, *(src.version for src in self._sources))

    @property
    def version(self) -> int:
        """A counter that moves whenever the tool list may have changed: :meth:`register`,
        a dynamic source's change (an MCP ``list_changed``, a Tesseron host's actions)."""
        parts = self._version_parts()
        if parts != self._version_key:
            self._version_key = parts
            self._version += 1
        return self._version

    async def wait_changed(self, since: int) -> int:
        """Wait until :attr:`version` differs from *since* and return it.

        No polling: it parks until :meth:`register` or a source that offers
        ``wait_changed`` (the MCP source does) reports a change. Cancellable; the
        waits it starts end with it.
        """
        while True:
            parts = self._version_parts()
            current = self.version
            if current != since:
                await trio.lowlevel.checkpoint()
                return current
            with collapse_groups():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._wait_registered, parts[0], nursery.cancel_scope)
                    for src, seen in zip(self._sources, parts[1:], strict=True):
                        wait = getattr(src, "wait_changed", None)
                        if wait is not None:
                            nursery.start_soon(self._wait_source, wait, seen, nursery.cancel_scope)

    async def _wait_registered(self, seen: int, done: trio.CancelScope) -> None:
        while self._registered == seen:
            await self._lot.park()
        done.cancel()

    @staticmethod
    async def _wait_source(
        wait: Callable[[int], Awaitable[int]], seen: int, done: trio.CancelScope
    ) -> None:
        await wait(seen)
        done.cancel()

    def _merge(self, index: dict[str, Tool], tools: Iterable[Tool]) -> None:
        for t in tools:
            if t.name in self._disabled:
                continue
            if t.name in index:
                logger.warning("toolnexus_trio: duplicate tool name %r; keeping the first", t.name)
                continue
            index[t.name] = t

    def _current(self) -> dict[str, Tool]:
        # Read twice per tool call: no generator when there is no dynamic source.
        versions = tuple(src.version for src in self._sources) if self._sources else ()
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

    def a2a_status(self) -> dict[str, A2AStatus]:
        """Each remote A2A agent's status (``connected | disabled | failed`` and why),
        keyed by its config id (or card URL); empty without agents."""
        return {} if self._a2a is None else dict(self._a2a.status)

    async def add_agent(self, agent_or_card_url: A2AAgent | str) -> list[str]:
        """Add a remote A2A agent now (SPEC §7A ``addAgent``): read its card and
        register one tool per skill. Returns the new tools' names; a failing agent adds
        none (see :meth:`a2a_status`), and never raises for the peer's fault."""
        if self._closed:
            raise RuntimeError("the toolkit is closed")
        ag = agent(agent_or_card_url) if isinstance(agent_or_card_url, str) else agent_or_card_url
        if not isinstance(ag, A2AAgent):
            raise TypeError("add_agent takes agent(...) or a card URL")
        if self._a2a is None:
            self._a2a = A2ASource()
        tools = await self._a2a.resolve(ag)
        fresh = [t for t in tools if t.name not in self._tools]
        self.register(*tools)
        return [t.name for t in fresh]

    def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        mcp: MCPServeConfig | None = None,
        on_call: OnCall | None = None,
        allow_remote: bool = False,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        client: TaskClient | None = None,
        a2a: A2AServeConfig | None = None,
        on_task: OnTask | None = None,
    ) -> McpServing | A2AServing:
        """Serve this toolkit as an MCP server over streamable HTTP at ``/mcp`` (SPEC §7C),
        and, with *a2a*, as an A2A agent on the same port (SPEC §7B).

        ``async with toolkit.serve() as served:`` (or ``await nursery.start(toolkit.serve())``)
        gives :class:`~toolnexus_trio.mcp.McpServing` with ``url`` and ``aclose()``. Needs
        the ``mcp`` extra. ``Host`` and ``Origin`` are checked on every bind (more names
        with *allowed_hosts*/*allowed_origins*); a *host* that is not loopback needs
        ``allow_remote=True``.

        With ``a2a=A2AServeConfig(...)`` and ``client=`` (the loop's client that fulfils
        each task; *on_task* is told when one ends), the agent card is at
        ``/.well-known/agent-card.json`` and the JSON-RPC endpoint at ``/``
        (``served.base_url + "/"``); without *a2a* those paths 404. With the ``mcp``
        extra missing, ``a2a`` alone is served (an
        :class:`~toolnexus_trio.a2a.A2AServing`; the ``a2a`` extra).
        """
        config = self._config  # the config file's blocks stand in for missing arguments
        if mcp is None and config is not None and config.mcp_server is not None:
            mcp = serve_profile(config.mcp_server)
        if a2a is None and client is not None and config is not None and config.a2a is not None:
            a2a = A2AServeConfig.from_block(config.a2a)
        side: A2AServer | None = None
        if a2a is not None:
            if client is None:
                raise TypeError("serve(a2a=...) needs client=, the client that runs each task")
            side = A2AServer(
                self,
                client,
                a2a,
                on_task,
                host=host,
                allowed_hosts=allowed_hosts,
                allowed_origins=allowed_origins,
            )
            if not mcp_sdk_present():
                return A2AServing(side, host, port, allow_remote=allow_remote)
        from .mcp._sdk import require_sdk

        require_sdk("Toolkit.serve")
        from .mcp._serving import McpServing

        return McpServing(
            self,
            host,
            port,
            mcp=mcp,
            on_call=on_call,
            allow_remote=allow_remote,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            side=side,
        )

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
        if self._a2a is not None:
            await self._a2a.aclose()

    async def __aenter__(self) -> Toolkit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def create_toolkit(
    options: ToolkitOptions | None = None, *, nursery: trio.Nursery | None = None
) -> AwaitOrEnter[Toolkit]:
    """Assemble a :class:`Toolkit` from *options* (SPEC §4 order: MCP, skills,
    builtins, extras): ``async with create_toolkit(options) as toolkit:`` (closed at the
    block's end) or ``toolkit = await create_toolkit(options)`` (close it yourself).

    With ``options.mcp``, the MCP servers load first (concurrently); their connections
    are tasks of the ``async with`` block (or of *nursery*, which ``await`` then needs).
    Skill folders are read in a worker thread; cancelling the build abandons the walk.
    """
    return AwaitOrEnter(
        "create_toolkit",
        "toolkit",
        lambda: _create_toolkit(options, nursery),
        lambda: _opened_toolkit(options, nursery),
    )


async def _create_toolkit(options: ToolkitOptions | None, nursery: trio.Nursery | None) -> Toolkit:
    options = options or ToolkitOptions()
    check_relay_names(options.extra_tools)  # before any MCP server starts
    mcp_source: McpSource | None = None
    # The config file's sibling blocks: its builtins when the options name none, and
    # serve()'s defaults (kept on the toolkit).
    config = parse_mcp_config(options.mcp) if options.mcp is not None else None
    chosen = options.builtins if options.builtins is not None or config is None else config.builtins
    if options.mcp is not None:
        if nursery is None:
            raise TypeError(
                "ToolkitOptions.mcp needs a nursery for the server connections: use "
                "`async with create_toolkit(options) as toolkit:` (as open_toolkit), or nursery="
            )
        from .mcp._sdk import require_sdk

        require_sdk("ToolkitOptions.mcp")
        from .mcp._source import McpSource

        mcp_source = McpSource(
            config or options.mcp,
            wait_for=options.wait_for,
            sample=options.sample,
            sampling_limits=options.sampling_limits,
            relay_to_client=options.relay_to_client,
        )
        try:
            await mcp_source.start(nursery)
        except BaseException:
            await mcp_source.aclose()
            raise
    extra_names = {t.name for t in options.extra_tools}
    builtins = [t for t in builtin_tools(BuiltinsConfig.of(chosen)) if t.name not in extra_names]
    disabled = set(options.disable_tools)
    sources = [options.tesseron] if options.tesseron is not None else []
    catalog: SkillCatalog | None = None
    try:
        if _skills_configured(options):
            catalog = await load_catalog(
                skills_dir=options.skills_dir,
                skills=options.skills,
                skill_provider=options.skill_provider,
                skills_filter=options.skills_filter,
                disable_skills=options.disable_skills,
                sample_limit=options.skill_sample_limit,
            )
        else:
            await trio.lowlevel.checkpoint()
    except BaseException:
        if mcp_source is not None:
            await mcp_source.aclose()  # shielded and bounded inside
        raise
    skill_tools = [catalog.tool] if catalog is not None else []
    a2a_source: A2ASource | None = None
    a2a_tools: list[Tool] = []
    agents = agents_of(options.agents)
    if agents:
        a2a_source = A2ASource()
        try:
            a2a_tools = await a2a_source.resolve_all(agents)
        except BaseException:
            await a2a_source.aclose()
            if mcp_source is not None:
                await mcp_source.aclose()
            raise
    # MCP tools (SPEC §4 slot 1) are dynamic: the toolkit lists them first.
    assembled = [*skill_tools, *builtins, *options.extra_tools, *a2a_tools]
    toolkit = Toolkit(
        (t for t in assembled if t.name not in disabled), sources, disabled, mcp=mcp_source
    )
    toolkit._skills = catalog
    toolkit._a2a = a2a_source
    toolkit._config = config
    return toolkit


@opener("toolkit")
def open_toolkit(
    options: ToolkitOptions | None = None,
) -> contextlib.AbstractAsyncContextManager[Toolkit]:
    """A :class:`Toolkit` for the ``async with`` block, closed at its end: the same as
    ``async with create_toolkit(options) as toolkit:``.

    The MCP server connections (``ToolkitOptions.mcp``) are tasks of this block, so
    none outlives it (and a cancelled load leaves no process).
    """
    return _opened_toolkit(options, None)


@contextlib.asynccontextmanager
async def _opened_toolkit(
    options: ToolkitOptions | None, nursery: trio.Nursery | None
) -> AsyncIterator[Toolkit]:
    with collapse_groups():
        async with trio.open_nursery() as own:  # for the MCP connections, unless given one
            toolkit = await _create_toolkit(options, nursery or own)
            try:
                yield toolkit
            finally:
                await toolkit.aclose()
