"""SPEC §7E, the directory is the agent: :func:`agent_from_dir`.

A persona is an ordinary Level-1 :class:`~toolnexus_trio.agents.Agent` whose soul is
composed from its home (:func:`~toolnexus_trio.agents.compose_soul`) and whose tools
include the ``memory`` tool over the same home. Nothing here adds runtime behaviour:
the persona runs on the §7D runtime like any agent, and :func:`start_agent` gives it a
heartbeat.

The soul is composed at **session start** through the SPEC's own seam, ``on_spawn``
(once per handle, before its first turn, in a worker thread): every session of the
persona (a ``run``, an ``as_tool`` call, a ``task`` delegation, a ``start_agent`` block)
starts from the home as it is then, and keeps that snapshot to its end. So memory
written in one session loads in the next even when the same ``Agent`` is reused.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from .._tools import Tool
from ._level1 import Agent, agent
from ._memory import memory_tool
from ._soul import compose_soul, compose_soul_async
from ._types import AgentDef, Handle

OnSpawn = Callable[[Handle], "Awaitable[None] | None"]


@attrs.frozen
class SessionStart:
    """A persona's ``on_spawn``: compose the soul of ``home`` into the handle's
    definition, then run the host's own ``on_spawn`` (``then``), if any.

    :func:`~toolnexus_trio.agents.start_agent` recognises it and composes before its
    clock starts instead (see there).
    """

    home: str
    then: OnSpawn | None = None

    async def __call__(self, h: Handle) -> None:
        soul, _loaded = await compose_soul_async(self.home)
        if h.defn is not None:
            # The session's snapshot: this handle's turns read their system prompt from
            # its definition, and on_spawn runs before the first of them.
            h.defn = attrs.evolve(h.defn, system_prompt=soul)
        await self.run_then(h)

    async def run_then(self, h: Handle) -> None:
        """The host's own ``on_spawn``, sync or async."""
        if self.then is not None:
            outcome = self.then(h)
            if inspect.isawaitable(outcome):
                await outcome


async def session_definition(defn: AgentDef) -> AgentDef:
    """*defn* with its soul composed now, when it is a persona's; else *defn* itself.

    The composed definition keeps only the host's own ``on_spawn``: the session's soul
    is already in it.
    """
    spawn = defn.on_spawn
    if not isinstance(spawn, SessionStart):
        return defn
    soul, _loaded = await compose_soul_async(spawn.home)
    return attrs.evolve(defn, system_prompt=soul, on_spawn=spawn.run_then)


def agent_from_dir(
    dir: str | os.PathLike[str],
    *,
    name: str | None = None,
    does: str | None = None,
    memory: bool = True,
    tools: Sequence[Tool] | None = None,
    **options: Any,
) -> Agent:
    """A persona :class:`~toolnexus_trio.agents.Agent` built from the home *dir*.

    Its soul is the home composed by :func:`~toolnexus_trio.agents.compose_soul` (the
    bootstrap files as ``## <file>`` sections, each capped at 2,097,152 bytes), once
    per session, at session start: when a handle of the persona is spawned, before its
    first turn, off the event loop. The session keeps that snapshot to its end, so what
    the ``memory`` tool writes loads in the next session (the same ``Agent`` may be
    reused). The home is also composed here, once, so a broken home fails at once and
    ``definition.system_prompt`` shows the soul; this reads files and blocks: in async
    code call it in a worker thread (``await trio.to_thread.run_sync(partial(
    agent_from_dir, dir))``).

    ``name`` defaults to the directory's name, ``does`` (the one line a coordinator's
    ``task`` tool shows) to ``"persona agent from <dir>"``. ``memory=False`` leaves the
    ``memory`` tool out (a read-only persona); ``tools`` are added after it. Any other
    keyword goes to :func:`~toolnexus_trio.agents.agent` (``budget``, ``model``,
    ``wait_for``, ``team``, ``hooks``, ...); an ``on_spawn`` there runs after the soul
    is composed. A ``soul``, ``soul_file`` or ``uses`` there is refused, since the home
    is the soul and ``memory``/``tools`` are the tools.
    """
    for taken in ("soul", "soul_file", "uses"):
        if taken in options:
            raise TypeError(f"agent_from_dir() composes the agent's {taken} from its home")
    home = os.fspath(dir)
    soul, _loaded = compose_soul(home)
    base = os.path.basename(os.path.normpath(os.path.abspath(home)))
    own_tools: list[Tool] = [memory_tool(home)] if memory else []
    own_tools.extend(tools or ())
    then: OnSpawn | None = options.pop("on_spawn", None)
    return agent(
        name if name is not None else base,
        does=does if does is not None else f"persona agent from {home}",
        uses=own_tools or None,
        soul=soul,
        on_spawn=SessionStart(home, then),
        **options,
    )
