"""Agents in front of people: an AG-UI endpoint and a local web UI (issue 35).

``UiServing(AguiAgent(llm, tools))`` serves one page at ``/`` and the AG-UI endpoint at
``POST /agui`` (AG-UI 1.0 events over SSE) on hypercorn's Trio worker, loopback only.
The agent streams its answers, tool calls (start, arguments, end, result), its tree of
sub-agents (``STATE_SNAPSHOT`` and ``STATE_DELTA``) and approvals (``RUN_FINISHED``
with an ``interrupt`` outcome, answered by the client's next request with ``resume``).
A client that disconnects cancels its run: every model call, tool, sub-agent and
process group in it ends. ``python -m toolnexus_trio ui`` is the command.

Needs hypercorn (the ``a2a`` or ``mcp`` extra). Not imported by ``import
toolnexus_trio``.

The same tree's typed events without AG-UI: :func:`stream_tree`.

Modules: ``_agui`` (runs and the translation of :mod:`toolnexus_trio.loop._events` to
AG-UI), ``_tree`` (one agent tree's typed events: :func:`stream_tree`), ``_scoped``
(each thread's agent tree in the shared store) and ``_app`` (the ASGI app, the Host and
Origin checks, the server).
"""

from ._agui import AguiAgent as AguiAgent
from ._app import UiApp as UiApp
from ._app import UiServing as UiServing
from ._tree import stream_tree as stream_tree

__all__ = ["AguiAgent", "UiApp", "UiServing", "stream_tree"]
