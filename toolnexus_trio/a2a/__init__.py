"""A2A both ways (SPEC §7A, §7B): remote agents as tools, a toolkit as an A2A agent.

Outbound: :func:`agent` names a remote agent by its card URL; give it to
``ToolkitOptions(agents=[...])`` (or the config block, :func:`parse_agents_config`) or
:meth:`Toolkit.add_agent <toolnexus_trio.Toolkit.add_agent>`, and each skill of its
card becomes a tool (source ``"a2a"``) that sends a task and polls it to its end.

Inbound: ``toolkit.serve(client=..., a2a=A2AServeConfig(...))`` serves the toolkit as
an A2A agent (card and JSON-RPC) beside ``/mcp``; tasks live in a :class:`TaskStore`.
:func:`serve` serves a §7D agent (a :class:`ServedAgent`; ``Agent.serve`` makes one)
the same way, each task one run of the agent's tree.

Both speak the SPEC's wire (A2A 0.3 shapes, methods ``SendMessage``/``GetTask``) and
the a2a-sdk 1.x shapes (``A2A-Version: 1.0``); serving needs hypercorn (the ``a2a``
or ``mcp`` extra).
"""

from __future__ import annotations

from ._agent import DEFAULT_POLL_EVERY_MS as DEFAULT_POLL_EVERY_MS
from ._agent import DEFAULT_TIMEOUT_MS as DEFAULT_TIMEOUT_MS
from ._agent import A2AAgent as A2AAgent
from ._agent import A2AStatus as A2AStatus
from ._agent import AgentsInput as AgentsInput
from ._agent import agent as agent
from ._agent import parse_agents_config as parse_agents_config
from ._serve_agent import DEFAULT_INPUT_TIMEOUT_MS as DEFAULT_INPUT_TIMEOUT_MS
from ._serve_agent import AgentA2AServer as AgentA2AServer
from ._serve_agent import AgentSession as AgentSession
from ._serve_agent import ServedAgent as ServedAgent
from ._serve_agent import answer_of as answer_of
from ._serve_agent import serve as serve
from ._server import A2AServeConfig as A2AServeConfig
from ._server import A2AServer as A2AServer
from ._server import OnTask as OnTask
from ._server import TaskClient as TaskClient
from ._server import TaskInfo as TaskInfo
from ._serving import A2AServing as A2AServing
from ._store import FileTaskStore as FileTaskStore
from ._store import InMemoryTaskStore as InMemoryTaskStore
from ._store import TaskStore as TaskStore
from ._store import resolve_store as resolve_store
from ._wire import A2AError as A2AError

__all__ = [
    "DEFAULT_INPUT_TIMEOUT_MS",
    "DEFAULT_POLL_EVERY_MS",
    "DEFAULT_TIMEOUT_MS",
    "A2AAgent",
    "A2AError",
    "A2AServeConfig",
    "A2AServer",
    "A2AServing",
    "A2AStatus",
    "AgentA2AServer",
    "AgentSession",
    "AgentsInput",
    "FileTaskStore",
    "InMemoryTaskStore",
    "OnTask",
    "ServedAgent",
    "TaskClient",
    "TaskInfo",
    "TaskStore",
    "agent",
    "answer_of",
    "parse_agents_config",
    "resolve_store",
    "serve",
]
