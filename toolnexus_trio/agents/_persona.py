"""SPEC §7E, the directory is the agent: :func:`agent_from_dir`.

A persona is an ordinary Level-1 :class:`~toolnexus_trio.agents.Agent` whose soul is
composed from its home (:func:`~toolnexus_trio.agents.compose_soul`) and whose tools
include the ``memory`` tool over the same home. Nothing here adds runtime behaviour:
the persona runs on the §7D runtime like any agent, and :func:`start_agent` gives it a
heartbeat.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .._tools import Tool
from ._level1 import Agent, agent
from ._memory import memory_tool
from ._soul import compose_soul


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

    The soul is composed now, once (:func:`~toolnexus_trio.agents.compose_soul`): the
    bootstrap files as ``## <file>`` sections, each capped at 2,097,152 bytes. It is a
    frozen snapshot for every run of this agent, so what the ``memory`` tool writes
    loads in the next session: build the agent again (at the start of each session)
    to pick it up. Composing reads files and so blocks; in async code call it in a
    worker thread (``await trio.to_thread.run_sync(partial(agent_from_dir, dir))``).

    ``name`` defaults to the directory's name, ``does`` (the one line a coordinator's
    ``task`` tool shows) to ``"persona agent from <dir>"``. ``memory=False`` leaves the
    ``memory`` tool out (a read-only persona); ``tools`` are added after it. Any other
    keyword goes to :func:`~toolnexus_trio.agents.agent` (``budget``, ``model``,
    ``wait_for``, ``team``, ``hooks``, ...); a ``soul`` or ``soul_file`` there is
    refused, since the home is the soul.
    """
    for taken in ("soul", "soul_file", "uses"):
        if taken in options:
            raise TypeError(f"agent_from_dir() composes the agent's {taken} from its home")
    home = os.fspath(dir)
    soul, _loaded = compose_soul(home)
    base = os.path.basename(os.path.normpath(os.path.abspath(home)))
    own_tools: list[Tool] = [memory_tool(home)] if memory else []
    own_tools.extend(tools or ())
    return agent(
        name if name is not None else base,
        does=does if does is not None else f"persona agent from {home}",
        uses=own_tools or None,
        soul=soul,
        **options,
    )
