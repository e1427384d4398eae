"""Sub-agents and the agent runtime (SPEC §7D), on Trio.

``async with open_agent_runtime(registry, generate=...) as runtime:`` opens a tree of
agent handles whose turns run in one Trio task tree: ``spawn``, ``post``, ``wake``,
``wait``, ``interrupt`` and ``close`` drive it, budgets are enforced live inside a run,
and a child's §10 suspension escalates to the nearest ``wait_for`` or up to the host
(``resume(answer)``). The Level-1 surface is :func:`agent` (``run``, ``as_tool``,
``serve`` over A2A).

Modules: ``_types`` (the data), ``_inbox`` (the unsolicited rail's block), ``_budget``
(carve and live checks), ``_escalation`` (``data.path`` and answer routing), ``_task``
(the ``task`` tool), ``_turn`` (one turn on the shared loop), ``_table`` (the handle
table: ids, walks, closed handles), ``_runtime`` (the verbs), ``_snapshot`` (the table as
JSON) and ``_level1`` (``agent``). The harness (toolnexus 0.15): ``_completion`` (the
gate's data), ``_harness`` (guardrails, the gate, :class:`Loop`) and ``_uses``
(``agent(uses=...)``).

Personas (SPEC §7E) ride on it: ``_soul`` (:func:`compose_soul`), ``_memory``
(:func:`memory_tool`), ``_persona`` (:func:`agent_from_dir`) and ``_heartbeat``
(:func:`start_agent`).
"""

from .._opening import opener as _opener
from ._completion import LIMIT_COMPLETION as LIMIT_COMPLETION
from ._completion import Completion as Completion
from ._completion import Verdict as Verdict
from ._completion import all_todos_done as all_todos_done
from ._harness import Loop as Loop
from ._harness import Outcome as Outcome
from ._harness import guarded_hooks as guarded_hooks
from ._harness import harness as harness
from ._harness import loop_unsupported as loop_unsupported
from ._heartbeat import StartedAgent as StartedAgent
from ._heartbeat import start_agent as start_agent
from ._level1 import Agent as Agent
from ._level1 import agent as agent
from ._memory import memory_tool as memory_tool
from ._persona import agent_from_dir as agent_from_dir
from ._runtime import AgentRuntime as AgentRuntime
from ._runtime import open_agent_runtime as _open_agent_runtime
from ._soul import BOOTSTRAP_ORDER as BOOTSTRAP_ORDER
from ._soul import HEARTBEAT_OK as HEARTBEAT_OK
from ._soul import compose_soul as compose_soul
from ._turn import current_handle as current_handle
from ._types import LIMIT_MAX_CHILDREN as LIMIT_MAX_CHILDREN
from ._types import LIMIT_MAX_CONCURRENT as LIMIT_MAX_CONCURRENT
from ._types import LIMIT_MAX_DEPTH as LIMIT_MAX_DEPTH
from ._types import LIMIT_MAX_TOKENS as LIMIT_MAX_TOKENS
from ._types import LIMIT_MAX_TOOL_CALLS as LIMIT_MAX_TOOL_CALLS
from ._types import LIMIT_MAX_TURNS as LIMIT_MAX_TURNS
from ._types import LIMIT_MAX_WALL_MS as LIMIT_MAX_WALL_MS
from ._types import LIMIT_TIMEOUT as LIMIT_TIMEOUT
from ._types import LIMITS as LIMITS
from ._types import TASK_STATUS_CLOSED as TASK_STATUS_CLOSED
from ._types import TASK_STATUS_DONE as TASK_STATUS_DONE
from ._types import TASK_STATUS_ERROR as TASK_STATUS_ERROR
from ._types import TASK_STATUS_INCOMPLETE as TASK_STATUS_INCOMPLETE
from ._types import TASK_STATUS_INTERRUPTED as TASK_STATUS_INTERRUPTED
from ._types import TASK_STATUS_PENDING as TASK_STATUS_PENDING
from ._types import TASK_STATUS_TIMEOUT as TASK_STATUS_TIMEOUT
from ._types import TASK_STATUSES as TASK_STATUSES
from ._types import AgentDef as AgentDef
from ._types import Budget as Budget
from ._types import BudgetInfo as BudgetInfo
from ._types import Handle as Handle
from ._types import HandleView as HandleView
from ._types import InboxItem as InboxItem
from ._types import PostResult as PostResult
from ._types import SpawnError as SpawnError
from ._types import TaskResult as TaskResult

open_agent_runtime = _opener("runtime")(_open_agent_runtime)
"""The public :func:`open_agent_runtime`: a forgotten ``async with`` or a stray ``await``
is an error showing the line to write (``toolnexus_trio._opening``)."""

__all__ = [
    "BOOTSTRAP_ORDER",
    "HEARTBEAT_OK",
    "LIMITS",
    "LIMIT_COMPLETION",
    "LIMIT_MAX_CHILDREN",
    "LIMIT_MAX_CONCURRENT",
    "LIMIT_MAX_DEPTH",
    "LIMIT_MAX_TOKENS",
    "LIMIT_MAX_TOOL_CALLS",
    "LIMIT_MAX_TURNS",
    "LIMIT_MAX_WALL_MS",
    "LIMIT_TIMEOUT",
    "TASK_STATUSES",
    "TASK_STATUS_CLOSED",
    "TASK_STATUS_DONE",
    "TASK_STATUS_ERROR",
    "TASK_STATUS_INCOMPLETE",
    "TASK_STATUS_INTERRUPTED",
    "TASK_STATUS_PENDING",
    "TASK_STATUS_TIMEOUT",
    "Agent",
    "AgentDef",
    "AgentRuntime",
    "Budget",
    "BudgetInfo",
    "Completion",
    "Handle",
    "HandleView",
    "InboxItem",
    "Loop",
    "Outcome",
    "PostResult",
    "SpawnError",
    "StartedAgent",
    "TaskResult",
    "Verdict",
    "agent",
    "agent_from_dir",
    "all_todos_done",
    "compose_soul",
    "current_handle",
    "guarded_hooks",
    "harness",
    "loop_unsupported",
    "memory_tool",
    "open_agent_runtime",
    "start_agent",
]
