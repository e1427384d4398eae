"""SPEC §7E heartbeat: :func:`start_agent`, a long-lived persona with its own clock.

``async with start_agent(agent, every_ms=..., on_report=...) as started:`` opens an
agent runtime, spawns the persona under its root and, every ``every_ms`` of Trio time,
posts a timer tick to the persona's own inbox (the unsolicited rail). When the persona is
idle the beat wakes it with :data:`HEARTBEAT_PROMPT`; a turn still running when the next
beats come leaves their ticks in the inbox, and the next idle wake drains them as one
coalesced turn, so a slow beat never piles up turns. A reply of :data:`HEARTBEAT_OK` is
silent; any other reply (an error result's text included) goes to ``on_report``.

The beat never blocks on the turn: the turn runs in its own task beside the clock, in a
nursery inside the block, and leaving the block cancels both before the runtime closes
the persona, so no task outlives it. Time is Trio's clock (tests run it on
``trio.testing.MockClock``). Inbound channels are the host's: deliver an event with
``started.runtime.post(started.handle, ...)`` and ``wake``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from .._groups import collapse_groups
from ._level1 import Agent
from ._persona import session_definition
from ._runtime import AgentRuntime, open_agent_runtime
from ._soul import HEARTBEAT_OK
from ._types import Handle, InboxItem, TaskResult

HEARTBEAT_PROMPT: Final = (
    "Heartbeat. Read the HEARTBEAT.md section of your instructions and do what it says "
    f"is due now. If nothing needs attention, reply with exactly {HEARTBEAT_OK}."
)
"""The prompt a heartbeat wakes the persona with (ahead of the coalesced ticks)."""

_UNSPOKEN: Final = frozenset({"interrupted", "closed"})

HEARTBEAT_TICK: Final = InboxItem(from_="clock", channel="timer", text="tick")
"""The item each beat posts to the persona's own inbox."""

OnReport = Callable[[str], "Awaitable[None] | None"]
"""``on_report(text)``: sync or async; gets each beat reply that is not ``HEARTBEAT_OK``."""


def is_heartbeat_ok(text: str) -> bool:
    """Whether a reply is the silent ``HEARTBEAT_OK`` (whitespace, quotes, a full stop aside)."""
    return text.strip().strip("`*_'\".").strip() == HEARTBEAT_OK


@attrs.define(eq=False)
class StartedAgent:
    """A persona started by :func:`start_agent`: its runtime and its handle.

    ``beats`` counts the heartbeat turns started so far and ``reports`` the replies
    handed to ``on_report``; both grow while the block runs (read them, the heartbeat
    writes them).
    """

    runtime: AgentRuntime
    handle: Handle
    beats: int = 0
    reports: int = 0


async def _report(on_report: OnReport | None, text: str) -> None:
    if on_report is None:
        return
    outcome = on_report(text)
    if inspect.isawaitable(outcome):
        await outcome


async def _beat_turn(started: StartedAgent, on_report: OnReport | None, done: trio.Event) -> None:
    """Run one heartbeat turn to its result and report it unless it is ``HEARTBEAT_OK``."""
    try:
        result: TaskResult = await started.runtime.wait(started.handle)
        # A beat the host interrupted or closed said nothing; an error is worth a report.
        if result.status not in _UNSPOKEN and not is_heartbeat_ok(result.text):
            started.reports += 1
            await _report(on_report, result.text)
    finally:
        done.set()


async def _heartbeat(started: StartedAgent, every_ms: float, on_report: OnReport | None) -> None:
    runtime, handle = started.runtime, started.handle
    interval = every_ms / 1000
    turn_done = trio.Event()
    turn_done.set()  # no turn yet
    async with trio.open_nursery() as nursery:
        next_beat = trio.current_time() + interval
        while True:
            await trio.sleep_until(next_beat)
            # Beats stay on the grid; beats missed while the loop was busy are not replayed.
            next_beat += (math.floor((trio.current_time() - next_beat) / interval) + 1) * interval
            if runtime.inspect(handle).state == "closed":
                return  # the host closed the persona: its clock stops with it
            # A full inbox refuses the tick; harmless: a wake still drains what is queued.
            runtime.post(handle, HEARTBEAT_TICK)
            if not turn_done.is_set() or runtime.inspect(handle).state != "idle":
                continue  # woken only at idle: the ticks wait in the inbox, coalesced
            if not runtime.wake(handle, HEARTBEAT_PROMPT).ok:
                continue
            started.beats += 1
            turn_done = trio.Event()
            nursery.start_soon(_beat_turn, started, on_report, turn_done)


@asynccontextmanager
async def start_agent(
    agent: Agent,
    *,
    every_ms: float | None = None,
    on_report: OnReport | None = None,
    **runtime_options: Any,
) -> AsyncIterator[StartedAgent]:
    """Start *agent* as a long-lived persona for the ``async with`` block (SPEC §7E).

    ``runtime_options`` go to :func:`~toolnexus_trio.agents.open_agent_runtime`
    (``generate=`` or ``llm=`` is required there). The block is one session: a persona
    from :func:`~toolnexus_trio.agents.agent_from_dir` has its soul composed from its
    home on entry (off the event loop, before the clock starts) and keeps it to the end.
    The persona is spawned under the runtime's root and stays idle until woken. With
    ``every_ms`` (milliseconds of Trio time, > 0) it has a heartbeat: each interval a
    tick goes to its own inbox and, only when it is idle, it is woken with
    :data:`HEARTBEAT_PROMPT`; ticks that arrive while a turn runs are drained together
    by the next idle wake. A reply other than :data:`HEARTBEAT_OK` is passed to
    ``on_report`` (sync or async; an exception from it ends the block); a beat the host
    interrupted or closed is silent, and closing the persona stops its clock. Without
    ``every_ms`` there is no clock: the host drives the persona with
    ``started.runtime.post``/``wake``/``wait`` on ``started.handle``.

    Leaving the block cancels the heartbeat and any beat turn, then closes the runtime;
    nothing started here outlives it.
    """
    if every_ms is not None and not (every_ms > 0 and math.isfinite(every_ms)):
        raise ValueError(f"every_ms must be a positive number of milliseconds, not {every_ms!r}")
    registry = agent.registry()
    # The session starts here: a persona's soul is composed before the clock runs (in
    # a worker thread, which on a virtual clock would otherwise let beats pass).
    registry[agent.name] = await session_definition(registry[agent.name])
    async with open_agent_runtime(registry, **runtime_options) as runtime:
        handle = runtime.spawn(runtime.root, agent.name)
        started = StartedAgent(runtime, handle)
        # The nursery is hidden from the caller: it sees the error it would expect.
        with collapse_groups():
            async with trio.open_nursery() as nursery:
                if every_ms is not None:
                    nursery.start_soon(_heartbeat, started, every_ms, on_report)
                yield started
                nursery.cancel_scope.cancel()
