"""The completion gate's data (toolnexus 0.15): :class:`Completion`, :class:`Verdict` and
the built-in verifier :func:`all_todos_done`.

Plain data below the runtime: :class:`~toolnexus_trio.agents.AgentDef` carries a
``Completion`` (so the gate reaches a delegated child through the registry), and
:mod:`._harness` runs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs

from ..loop._results import RunResult

LIMIT_COMPLETION: Final = "completion"
"""``TaskResult.limit`` / ``RunResult.limit`` when the gate gave up (one of the public
``LIMITS``, which ``agents._types`` builds from this one)."""

RETRY_PROMPT: Final = "Your work did not verify: {reason}. Fix it and finish."
"""What attempt *k* > 1 sends (the contract's string, byte for byte)."""


@attrs.frozen
class Verdict:
    """A verifier's answer: ``ok``, and when not, ``reason`` (shown to the model)."""

    ok: bool
    reason: str = ""


Verify = Callable[[RunResult], "Verdict | bool | Awaitable[Verdict | bool]"]
"""A verifier: sync or async, given the run's result, answers a :class:`Verdict`
(``True`` / ``False`` are accepted as a verdict without a reason)."""


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Completion.max_attempts must be an int >= 1, not {value!r}")


@attrs.frozen
class Completion:
    """The completion gate of an agent (``agent(..., completion=Completion(verify, 3))``).

    After a run ends ``done``, ``verify(result)`` judges it, where ``result.tool_calls``
    holds every tool call of every attempt so far. A failed verdict sends
    ``Your work did not verify: <reason>. Fix it and finish.`` on the same transcript,
    up to ``max_attempts`` runs in all (an int >= 1, required); then the run ends
    ``incomplete`` with ``limit="completion"`` and the text
    ``completion.verify failed <n>x: <reason>``.
    """

    verify: Verify
    max_attempts: int = attrs.field(validator=_positive)

    def __attrs_post_init__(self) -> None:
        if not callable(self.verify):
            raise TypeError(f"Completion.verify must be callable, not {type(self.verify).__name__}")


def all_todos_done(result: RunResult) -> Verdict:
    """The built-in verifier: every item of the plan is done.

    The plan is the ``todos`` metadata of the LAST ``todowrite`` call; an item whose
    ``completed`` is false fails the run with ``"<n> item(s) still open: a; b"`` (the
    items' texts). A run that never declared a plan passes.
    """
    for record in reversed(result.tool_calls):
        if record.name != "todowrite":
            continue
        todos = (record.metadata or {}).get("todos")
        if not isinstance(todos, list):
            continue  # a failed todowrite (bad arguments) declared nothing
        still = [t for t in todos if not (isinstance(t, dict) and t.get("completed"))]
        if not still:
            return Verdict(True)
        texts = "; ".join(str(t.get("text", "")) if isinstance(t, dict) else str(t) for t in still)
        return Verdict(False, f"{len(still)} item(s) still open: {texts}")
    return Verdict(True)
