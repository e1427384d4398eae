"""The loop's side of typed results: a run's output state and the turn that settles it.

:mod:`toolnexus_trio.loop._output` knows types, schemas and values; this module knows
the run: it starts a run's :class:`~toolnexus_trio.loop._output.OutputRun` from the
keywords and the options, and handles a model message that ends (or tries to end) a
typed run, keeping the transcript balanced.

Tool mode's end strategy (deterministic): the first final-result call of a message is
the answer; the message's other calls are not started, each gets a tool message and a
record saying so (``metadata={"not_started": ...}``), and a second final-result call
in the same message is not started either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._toolkit import Toolkit
from ._output import OutputInvalid, OutputMode, OutputRun, OutputValidator, json_from_text
from ._output import start_output as _start_output
from ._records import ToolCallRecord
from ._toolcalls import _Call, _Run

if TYPE_CHECKING:
    from ..models import ClientOptions
    from ._results import InProcessOptions


@attrs.frozen
class Typed:
    """A run's output keywords as given (``None``: the options' default)."""

    output_type: Any = None
    mode: OutputMode | None = None
    retries: int | None = None
    validators: Sequence[OutputValidator] | None = None


def output_for(
    opts: InProcessOptions | ClientOptions, typed: Typed, toolkit: Toolkit | None
) -> OutputRun | None:
    """The run's typed-output state: the keywords, else the options' defaults."""
    output_type = typed.output_type if typed.output_type is not None else opts.output_type
    if output_type is None:
        return None
    mode = typed.mode if typed.mode is not None else opts.output_mode
    retries = typed.retries if typed.retries is not None else opts.output_retries
    validators = typed.validators if typed.validators is not None else opts.output_validators
    names = [t.name for t in toolkit.tools()] if toolkit is not None else []
    return _start_output(output_type, mode, retries, validators, names)


def output_value(run: _Run) -> Any:
    """What :attr:`RunResult.output` holds for *run*."""
    out = run.output
    if out is None:
        return None
    if run.status == "done" and out.settled:
        return out.value
    if run.limit == "output":
        return out.invalid
    return None


def settles(out: OutputRun | None, calls: Sequence[_Call]) -> bool:
    """Whether a message with *calls* is a typed answer (not an ordinary tool turn)."""
    if out is None:
        return False
    return not calls or (out.mode == "tool" and any(c.name == out.tool_name for c in calls))


async def typed_turn(run: _Run, out: OutputRun, calls: list[_Call], text: str) -> None:
    """A message that ends the run with a typed value, or goes back to the model."""
    if out.mode != "tool":
        problem: str | None = None
        raw: Any = text
        try:
            raw = json_from_text(text)
            out.value = await out.accept(raw)
        except OutputInvalid as exc:
            problem, raw = str(exc), exc.raw
        if problem is None:
            await _accepted(run, out)
            return
        await _rejected(run, out, raw, problem)
        if not out.settled:
            run.messages.append(
                {"role": "user", "content": f"Your answer is not valid: {problem}. "
                 "Answer again with one JSON value that fixes it."}
            )  # fmt: skip
        return
    if not calls:  # text, where the final tool was expected
        await _rejected(run, out, text, "text instead of the final-result tool")
        if not out.settled:
            run.messages.append(
                {"role": "user", "content": "Give your final answer by calling the "
                 f"{out.tool_name} tool, not as text."}
            )  # fmt: skip
        return
    final = next(c for c in calls if c.name == out.tool_name)
    accepted = False
    raw = final.args
    problem = ""
    if final.error is not None:
        problem = final.error
        outcome = f"{final.error}: call {out.tool_name} again with a JSON object"
    else:
        try:
            out.value = await out.accept(final.args)
            accepted = True
            outcome = "Final result accepted."
        except OutputInvalid as exc:
            problem = str(exc)
            outcome = f"Invalid final result: {exc}. Fix it and call {out.tool_name} again."
    for c in calls:
        if c is final:
            record = ToolCallRecord(c.id, c.name, c.args, outcome, not accepted)
        else:
            why = (
                f"not started: the {out.tool_name} call of the same message ends the run"
                if c.name != out.tool_name
                else f"not started: only the first {out.tool_name} call of a message counts"
            )
            record = ToolCallRecord(c.id, c.name, c.args, why, True, {"not_started": why})
        run.records.append(record)
        run.messages.append({"role": "tool", "tool_call_id": c.id, "content": record.output})
    if accepted:
        await _accepted(run, out)
    else:
        await _rejected(run, out, raw, problem)


async def _accepted(run: _Run, out: OutputRun) -> None:
    out.settled = True
    run.status = "done"
    if run.emit is not None:
        await run.emit({"type": "output", "output": out.value})


async def _rejected(run: _Run, out: OutputRun, raw: Any, problem: str) -> None:
    retrying = out.retry_or_stop(raw)
    if not retrying:
        run.status, run.limit = "incomplete", "output"
    if run.emit is not None:
        await run.emit({"type": "output_invalid", "reason": problem, "retrying": retrying})
