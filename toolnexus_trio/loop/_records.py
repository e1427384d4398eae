"""What a run leaves behind, below the results module: its status, the record of each
executed tool call, and each call a paused run left suspended.

Both :mod:`._results` (the :class:`~toolnexus_trio.RunResult` that holds them) and
:mod:`._runjson` (their JSON form) build on these, so neither imports the other back.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from .._wire import Request

RunStatus = Literal["done", "pending", "incomplete", "cancelled"]
"""How a run returned (see :class:`~toolnexus_trio.RunResult`)."""

RUN_STATUSES: Final[frozenset[str]] = frozenset({"done", "pending", "incomplete", "cancelled"})
"""The closed vocabulary of :attr:`RunResult.status`. toolnexus 0.21 names three
(``done``, ``pending``, ``incomplete``); a run here can also end ``cancelled`` (a cancel
from its token returns the balanced transcript instead of raising). ``timeout`` is a
task status only (:data:`toolnexus_trio.agents.TASK_STATUSES`): a run's timeout is
:class:`RunTimeout`."""


@attrs.frozen
class ToolCallRecord:
    """One executed tool call and its final result."""

    id: str
    name: str
    args: Any
    output: str
    is_error: bool
    metadata: dict[str, Any] | None = None


@attrs.frozen
class SuspendedCall:
    """A call left suspended by a run that returned ``status="pending"``."""

    id: str
    name: str
    args: dict[str, Any]
    request: Request
    message_index: int
    record_index: int


@attrs.frozen
class InDoubtCall:
    """A tool call that was running when its durable run's process stopped.

    Given to the ``on_in_doubt`` policy of :meth:`Client.recover
    <toolnexus_trio.Client.recover>`: ``run_id`` is the run's id, ``call_id``,
    ``name`` and ``args`` the model's call, ``idempotent`` the tool's
    :attr:`ToolHints.idempotent <toolnexus_trio.ToolHints.idempotent>` (``False`` for
    a tool the toolkit no longer has).
    """

    run_id: str
    call_id: str
    name: str
    args: Any
    idempotent: bool
