"""The data of the agent runtime (SPEC §7D): definitions, budgets, results and views.

Everything here is plain data; the behaviour lives in :mod:`._runtime`. The names and
fields mirror toolnexus 0.21's Python port so that code can move between the two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import attrs
import trio

from .._cancel import CancelToken
from .._tools import Tool
from .._wire import Answer, Request
from ..loop._results import Hooks, OnMetric
from ._completion import LIMIT_COMPLETION, Completion

HandleState = Literal["idle", "running", "suspended", "closed"]
"""The states of a handle (SPEC §7D "Handle state machine")."""

TaskStatus = Literal["done", "pending", "incomplete", "interrupted", "closed", "timeout", "error"]

TASK_STATUSES: Final[tuple[str, ...]] = (
    "done",
    "pending",
    "incomplete",
    "interrupted",
    "closed",
    "timeout",
    "error",
)
"""The closed vocabulary of :attr:`TaskResult.status` (identical in every port)."""

TASK_STATUS_DONE: Final = "done"
TASK_STATUS_PENDING: Final = "pending"
TASK_STATUS_INCOMPLETE: Final = "incomplete"
TASK_STATUS_INTERRUPTED: Final = "interrupted"
TASK_STATUS_CLOSED: Final = "closed"
TASK_STATUS_TIMEOUT: Final = "timeout"
TASK_STATUS_ERROR: Final = "error"

LIMIT_MAX_TURNS: Final = "maxTurns"
LIMIT_MAX_TOKENS: Final = "maxTokens"
LIMIT_MAX_TOOL_CALLS: Final = "maxToolCalls"
LIMIT_MAX_WALL_MS: Final = "maxWallMs"
LIMIT_MAX_CHILDREN: Final = "maxChildren"
LIMIT_MAX_CONCURRENT: Final = "maxConcurrent"
LIMIT_MAX_DEPTH: Final = "maxDepth"
LIMIT_TIMEOUT: Final = "timeout"

LIMITS: Final[tuple[str, ...]] = (
    LIMIT_MAX_TURNS,
    LIMIT_MAX_TOKENS,
    LIMIT_MAX_TOOL_CALLS,
    LIMIT_MAX_WALL_MS,
    LIMIT_MAX_CHILDREN,
    LIMIT_MAX_CONCURRENT,
    LIMIT_MAX_DEPTH,
    LIMIT_COMPLETION,
    LIMIT_TIMEOUT,
)
"""The closed vocabulary of :attr:`TaskResult.limit` (toolnexus 0.21's nine). ``limit``
is set if and only if ``status`` is ``"incomplete"`` or ``"timeout"``: a budget stop
names its limit, a ``wait`` that times out names ``"timeout"``."""

BudgetVerdict = Literal["stop", "extend", "suspend"]

MAX_NAME_CHARS: Final = 128
"""The longest agent name (it is a segment of every id of its handles)."""


def check_agent_name(name: object) -> None:
    """Raise :class:`ValueError` unless *name* can be an agent's name.

    A name is a segment of the handle ids (``root/<name>.<n>``) and of the durable
    records keyed by them, so it may not be empty or longer than :data:`MAX_NAME_CHARS`,
    nor hold ``/`` (the id separator), ``#`` (the durable records' marker),
    whitespace or control characters; ``.`` and ``..`` are refused too.
    """
    if not isinstance(name, str):
        raise TypeError(f"an agent name is a string, not {type(name).__name__}")
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"an agent name has 1 to {MAX_NAME_CHARS} characters, not {len(name)}")
    bad = next(
        (c for c in name if c in "/#\\" or c.isspace() or not c.isprintable()),
        None,
    )
    if bad is not None or name in (".", ".."):
        what = "the name" if bad is None else f"{bad!r}"
        raise ValueError(
            f"invalid agent name {name!r}: {what} cannot be part of a handle id "
            "(no '/', '#', '\\\\', whitespace or control characters)"
        )


def _valid_name(_: object, __: object, value: str) -> None:
    check_agent_name(value)


@attrs.frozen
class Budget:
    """Limits of a handle (SPEC §7D "Budgets"); ``None`` means no limit.

    ``max_turns``, ``max_tokens``, ``max_tool_calls`` and ``max_wall_ms`` stop a run
    (``status="incomplete"`` with ``limit`` named); ``max_children`` and ``max_depth``
    refuse a spawn; ``max_concurrent`` caps the running children of the handle (more
    wakes queue FIFO). Tokens, tool calls and wall time are carved at spawn as
    ``min(own, parent remaining)`` and checked live against every ancestor.
    """

    max_turns: int | None = None
    max_tokens: int | None = None
    max_tool_calls: int | None = None
    max_wall_ms: float | None = None
    max_children: int | None = None
    max_concurrent: int | None = None
    max_depth: int | None = None


@attrs.frozen
class BudgetInfo:
    """What ``AgentDef.on_budget`` is asked about: which handle, which limit, how far."""

    handle: str
    limit: str
    used: float
    max: float


OnBudget = Callable[[BudgetInfo], "BudgetVerdict | Awaitable[BudgetVerdict]"]
WaitFor = Callable[[Request], Awaitable[Answer]]


@attrs.frozen
class AgentDef:
    """One agent of a registry (SPEC §7D).

    ``system_prompt`` is its soul; ``model`` the model it asks (with ``llm`` runtimes, it
    overrides ``ClientOptions.model``; ``"inherit"`` keeps it). ``tools`` are its own
    tools; ``task_targets`` its team (the agents its ``task`` tool may delegate to;
    ``None`` or empty: no ``task`` tool). ``wait_for`` makes it the interpreter of
    suspensions from its subtree (§10). ``on_spawn(handle)`` runs once before the first
    turn, ``on_close(handle, reason)`` before the final state. ``hooks`` and
    ``on_metric`` replace the runtime's for this agent (never merged).
    ``on_budget(info)`` decides what a reached limit does: ``"stop"`` (the default),
    ``"extend"`` (the limit no longer stops the current wake) or ``"suspend"`` (ask
    for approval through §10). ``output_type`` makes each of its runs end with a typed
    value (the agent's client option, tool mode; it replaces ``ClientOptions.output_type``):
    :attr:`TaskResult.output`, and JSON for a parent's ``task`` tool. ``completion`` is
    the completion gate of each wake (:class:`~toolnexus_trio.agents.Completion`;
    guardrails arrive compiled in ``hooks``).

    ``name`` is checked here (:func:`check_agent_name`): it becomes a segment of every
    handle id, so ``/``, ``#``, whitespace and control characters are refused with a
    :class:`ValueError`.
    """

    name: str = attrs.field(validator=_valid_name)
    description: str
    system_prompt: str
    model: str
    budget: Budget | None = None
    tools: Sequence[Tool] | None = None
    wait_for: WaitFor | None = None
    on_spawn: Callable[[Handle], Any] | None = None
    on_close: Callable[[Handle, str], Any] | None = None
    task_targets: Sequence[str] | None = None
    hooks: Hooks | Any | None = None
    on_metric: OnMetric | None = None
    on_budget: OnBudget | None = None
    output_type: Any = None
    completion: Completion | None = None


@attrs.frozen
class InboxItem:
    """One unsolicited item for a handle's inbox: who sent it, on which channel, what.

    ``from_`` is a handle path (``"root/coordinator.1"``), ``"external"`` or ``"clock"``;
    channel ``"timer"`` items are ticks (deduplicated on drain).
    """

    from_: str
    channel: str
    text: str


@attrs.frozen
class PostResult:
    """The synchronous answer of :meth:`AgentRuntime.post` and ``wake``: loud, never silent."""

    ok: bool
    error: str | None = None


@attrs.frozen
class TaskResult:
    """The outcome of a handle's run, as :meth:`AgentRuntime.wait` gives it.

    ``status`` is one of :data:`TASK_STATUSES`; ``limit`` names the budget limit when
    ``status="incomplete"``; ``pending`` is the §10 request when ``status="pending"``.
    ``turns`` and ``total_tokens`` count the handle's whole life (children rolled up in
    ``total_tokens``; ``own_tokens`` only its own model calls). ``output`` is the typed
    value of an agent with an ``output_type`` (``text`` is then its JSON), else ``None``.
    """

    text: str
    is_error: bool
    status: str
    pending: Request | None = None
    turns: int = 0
    total_tokens: int = 0
    own_tokens: int = 0
    limit: str | None = None
    output: Any = None


@attrs.frozen
class HandleView:
    """A read-only view of a handle (:meth:`AgentRuntime.list`, ``inspect``).

    ``tokens`` counts its usage with its children's rolled up; ``inbox`` is the number
    of items waiting; ``transitions`` is its transition trace (``"idle→running"``...),
    left out of equality so a view compares as the four-field view of the SPEC.
    """

    id: str
    state: HandleState
    tokens: int
    inbox: int
    transitions: tuple[str, ...] = attrs.field(default=(), eq=False)


class SpawnError(Exception):
    """A spawn refused by a cap; ``limit`` names it (``"maxChildren"``, ``"maxDepth"``...)."""

    def __init__(self, message: str, limit: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit


class Handle:
    """A handle of the runtime's tree: an agent instance with an id and a state.

    Handles are capabilities: the runtime's verbs take them. ``id`` is deterministic and
    parent-scoped (``root/coordinator.1/explore.2``); ``state`` is one of ``idle``,
    ``running``, ``suspended``, ``closed``; ``transitions`` is the handle's trace. The
    other attributes are the runtime's bookkeeping (read them, never write them).
    """

    def __init__(
        self,
        id: str,
        defn: AgentDef | None,
        parent: Handle | None,
        budget: Budget,
        *,
        spawned_at: float = 0.0,
    ) -> None:
        self.id = id
        self.defn = defn
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.budget = budget
        self.state: HandleState = "idle"
        self.transitions: list[str] = []
        self.inbox: list[InboxItem] = []
        self.children: list[Handle] = []  # live ones, and the latest closed ones kept
        self.live_children = 0  # children not closed: what max_children counts
        self.tokens = 0  # own model calls plus every descendant's, rolled up live
        self.own_tokens = 0
        self.turns = 0
        self.tool_calls = 0  # own tool calls plus every descendant's
        self.spawned_at = spawned_at
        self.last_result: TaskResult | None = None
        self.seq: dict[str, int] = {}  # next child number per def name
        # Runtime bookkeeping (see _runtime.py).
        self.task_key: tuple[str, str] | None = None  # (agent, prompt) when made by `task`
        self.task_children: dict[tuple[str, str], Handle] = {}
        self.pending: Request | None = None  # the relayed request while suspended
        self.pending_run: Any = None  # the halted RunResult while suspended
        self.budget_ask: Request | None = None  # on_budget "suspend" with no interpreter
        self.drained: list[InboxItem] = []  # taken by the running turn, not yet consumed
        self.queued_prompt: str | None = None
        self.queued = False
        self.closing = False
        self.extended: set[str] = set()  # limits on_budget extended for the current wake
        self.stop_limit: str | None = None
        self.stop_reason: str | None = None
        self.running_children = 0
        self.wake_queue: list[Handle] = []
        self.error: BaseException | None = None  # what failed the last run, if anything
        # A durable tree (agents/_recovery.py): the run id its turns checkpoint under,
        # the tree's record kept in that checkpoint, whether the next turn recovers the
        # run instead of starting one, and the running turn's Checkpointer.
        self.durable_id: str | None = None
        self.tree_meta: dict[str, Any] | None = None
        self.recovering = False
        self.checkpointer: Any = None
        # Trio plumbing: the handle's subtree nursery (opened by its service task),
        # work to start once it is open, the settle signal and the running turn's token.
        self.nursery: trio.Nursery | None = None
        self.starts: list[Callable[[], Awaitable[None]]] = []
        self.settled = trio.Event()
        # True while a settle is being made durable: the new result is not told yet.
        self.settling = False
        self.finished = trio.Event()  # set when the handle is closed: its service ends
        # Set when the close under way ends (or fails); made by close() (None before).
        self.close_attempt: trio.Event | None = None
        self.turn_job: Callable[[], Awaitable[None]] | None = None  # the next turn to run
        self.kick = trio.Event()  # wakes the service task: a turn to run, or closed
        self.token: CancelToken | None = None
        self.spawn_hook_done = False
        self.trace: Any = None  # the OpenTelemetry context a `task` call spawned it in
        # The runtime's per-handle caches (its toolkit and its loop client).
        self.toolkit: Any = None
        self.client: Any = None

    def __repr__(self) -> str:
        return f"Handle({self.id!r}, state={self.state!r})"
