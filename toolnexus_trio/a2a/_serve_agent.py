"""An agent served over A2A (SPEC §7B for a §7D agent): :func:`serve`.

The a2a family sits below the agent runtime, so this side never imports it: it serves
anything shaped like :class:`ServedAgent` (a name, a description and ``run(prompt)``),
and ``Agent.serve`` (in ``toolnexus_trio.agents``) hands it one. The card carries one
skill, the agent itself (its team is how it works, not what a caller picks); each A2A
task is one ``run`` in the fulfilment's cancel scope, so ``CancelTask`` cancels the
agent's running turn and every descendant's model call and tool with it.

A result that is ``pending`` (a §10 request, e.g. an approval nobody in the tree
answers) ends the task ``failed`` with a message naming the request: an A2A
``input-required`` task would promise a continuation, and the run's runtime is gone
once ``run`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from ._server import A2AServeConfig, A2AServer, OnTask
from ._serving import A2AServing


class ServedAgent(Protocol):
    """What :func:`serve` serves: ``name`` and ``description`` (the card's defaults and
    its one skill) and ``run(prompt)``, whose result has ``status`` (``"done"``:
    completed; ``"pending"``: failed, naming its ``pending`` request; else failed) and
    ``text`` (the artifact, or the failure's reason)."""

    @property
    def name(self) -> str:
        """The agent's name: the card's name and its skill's id."""
        ...

    @property
    def description(self) -> str:
        """What the agent does: the card's and the skill's description."""
        ...

    async def run(self, prompt: str, /) -> Any:
        """Run one task on *prompt* to its end."""
        ...


class PendingRun(Exception):
    """A served agent's run ended waiting for an answer A2A cannot bring back."""


class AgentA2AServer(A2AServer):
    """An :class:`A2AServer` whose tasks run a :class:`ServedAgent` (no toolkit)."""

    def __init__(
        self,
        agent: ServedAgent,
        config: A2AServeConfig,
        on_task: OnTask | None = None,
        *,
        host: str = "127.0.0.1",
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        if not callable(getattr(agent, "run", None)):
            raise TypeError("serve() needs an agent with run(prompt)")
        # The agent is not a loop client; run_task below calls it, never client.run.
        super().__init__(
            None,
            _NoClient(),
            config,
            on_task,
            host=host,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
        )
        self.agent = agent
        if config.description is None:
            self.config = _with_description(config, agent.description)

    @property
    def default_name(self) -> str:
        """The agent's name."""
        return self.agent.name

    def card_skills(self) -> list[dict[str, str]]:
        """One skill: the agent itself."""
        name = self.agent.name
        return [{"id": name, "name": name, "description": self.agent.description}]

    async def run_task(self, text: str, skill: str | None) -> Any:
        """One ``agent.run(text)``; a ``pending`` end raises :class:`PendingRun`."""
        result = await self.agent.run(text)
        if getattr(result, "status", None) == "pending":
            request = getattr(result, "pending", None)
            what = (
                f"{request.kind} {request.prompt!r}"
                if request is not None
                else str(getattr(result, "text", ""))
            )
            raise PendingRun(
                f"the agent is waiting for an answer ({what}) that an A2A task cannot "
                "carry; give the agent a wait_for that answers it"
            )
        return result


class _NoClient:
    async def run(self, prompt: str, toolkit: Any = None, /) -> Any:
        raise AssertionError("an agent's A2A server runs the agent, not a client")


def _with_description(config: A2AServeConfig, description: str) -> A2AServeConfig:
    return attrs.evolve(config, description=description)


def serve(
    agent: ServedAgent,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    a2a: A2AServeConfig | None = None,
    on_task: OnTask | None = None,
    allow_remote: bool = False,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> A2AServing:
    """Serve *agent* as an A2A agent on hypercorn's Trio worker: ``async with
    serve(agent) as served:`` (or ``await nursery.start(serve(agent))``).

    The card (``served.card_url``) is named after the agent (``a2a.name`` overrides),
    describes it with its description and has one skill, the agent; each task is one
    ``agent.run(text)`` (``CancelTask`` cancels it); *on_task* hears each end. *a2a*'s
    ``store``, ``version``, ``provider`` and bounds apply as for ``Toolkit.serve``; a
    *host* that is not loopback needs ``allow_remote=True``. Needs hypercorn (the
    ``a2a`` extra). ``Agent.serve`` calls this with the agent and its runtime options.
    """
    server = AgentA2AServer(
        agent,
        a2a if a2a is not None else A2AServeConfig(),
        on_task,
        host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
    )
    return A2AServing(server, host, port, allow_remote=allow_remote)
