"""SPEC §7E heartbeat: start_agent on Trio (beyond the fixture's H5 checks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.lowlevel
from helpers import TaskCensus

from toolnexus_trio import GenerateRequest, InProcessResponse
from toolnexus_trio.agents import HEARTBEAT_OK, InboxItem, agent, agent_from_dir, start_agent
from toolnexus_trio.agents._heartbeat import HEARTBEAT_PROMPT, is_heartbeat_ok

Generate = Callable[[GenerateRequest], Awaitable[InProcessResponse]]


def answering(*replies: str) -> tuple[list[list[str]], Generate]:
    """A model that gives *replies* in turn (the last one from then on); it records
    each call's message texts (the request's transcript is live: copied at once)."""
    seen: list[list[str]] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        seen.append([str(m.get("content") or "") for m in request.messages])
        await trio.lowlevel.checkpoint()
        return InProcessResponse(replies[min(len(seen), len(replies)) - 1])

    return seen, generate


def test_what_counts_as_heartbeat_ok() -> None:
    for text in (
        "HEARTBEAT_OK",
        " HEARTBEAT_OK\n",
        "`HEARTBEAT_OK`",
        "HEARTBEAT_OK.",
        "**HEARTBEAT_OK**",
    ):
        assert is_heartbeat_ok(text), text
    for text in ("", "heartbeat_ok", "HEARTBEAT_OK, but the 3pm sync is due", "OK"):
        assert not is_heartbeat_ok(text), text
    assert HEARTBEAT_OK in HEARTBEAT_PROMPT and "HEARTBEAT.md" in HEARTBEAT_PROMPT


async def test_only_substantive_replies_are_reported_async_callbacks_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen, generate = answering(HEARTBEAT_OK, "Reminder: stand-up", "HEARTBEAT_OK.", "done")
    reports: list[tuple[float, str]] = []

    async def on_report(text: str) -> None:
        await trio.lowlevel.checkpoint()
        reports.append((trio.current_time(), text))

    start = trio.current_time()
    persona = agent("ava", does="a persona", soul="## HEARTBEAT.md\n\nbe useful")
    async with start_agent(persona, every_ms=250, on_report=on_report, generate=generate) as s:
        await trio.sleep(1.1)
        assert s.beats == 4 and s.reports == 2
    assert [(t - start, text) for t, text in reports] == [
        (0.5, "Reminder: stand-up"),
        (1.0, "done"),
    ]
    assert all(HEARTBEAT_PROMPT in messages[-1] for messages in seen)


async def test_no_clock_without_every_ms_and_the_host_drives(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("You are Ava.", encoding="utf-8")
    seen, generate = answering("hello Muthu")
    reports: list[str] = []
    with TaskCensus() as census:
        async with start_agent(
            agent_from_dir(tmp_path), on_report=reports.append, generate=generate
        ) as started:
            assert started.handle.id == f"root/{tmp_path.name}.1"
            await trio.sleep(0.01)
            assert seen == []  # no heartbeat
            runtime = started.runtime
            assert runtime.post(started.handle, InboxItem("external", "chat", "hi")).ok
            assert runtime.wake(started.handle).ok
            result = await runtime.wait(started.handle)
        census.assert_no_new_tasks()
    assert result.text == "hello Muthu"
    assert reports == []  # a host turn is the host's, never reported as a beat
    assert "## SOUL.md\n\nYou are Ava." in seen[0][0]


async def test_a_host_turn_holds_the_beat_and_its_ticks_coalesce(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[str] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        seen.append(str(request.messages[-1]["content"]))
        if "long job" in seen[-1]:
            await trio.sleep(2.5)
        return InProcessResponse(HEARTBEAT_OK if "Heartbeat" in seen[-1] else "job done")

    persona = agent("ava", does="a persona")
    async with start_agent(persona, every_ms=1000, generate=generate) as started:
        started.runtime.wake(started.handle, "long job")  # 0 s .. 2.5 s
        await trio.sleep(3.5)
        assert started.beats == 1  # the beats at 1 s and 2 s found it running
    assert len(seen) == 2
    assert "Heartbeat" in seen[1] and "x3" in seen[1]  # ticks of 1, 2 and 3 s


async def test_an_outer_cancel_mid_beat_leaves_no_task(autojump_clock: trio.abc.Clock) -> None:
    started_turn = trio.Event()

    async def generate(request: GenerateRequest) -> InProcessResponse:
        started_turn.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with TaskCensus() as census:
        with trio.move_on_after(5) as scope:
            async with start_agent(agent("ava", does="p"), every_ms=1000, generate=generate):
                await started_turn.wait()
                scope.cancel()
        census.assert_no_new_tasks()
    assert scope.cancelled_caught


async def test_a_failing_on_report_ends_the_block(autojump_clock: trio.abc.Clock) -> None:
    _, generate = answering("something to say")

    def on_report(text: str) -> None:
        raise RuntimeError(f"host could not deliver: {text}")

    with pytest.raises(RuntimeError, match="could not deliver"):
        async with start_agent(
            agent("ava", does="p"), every_ms=1000, on_report=on_report, generate=generate
        ):
            await trio.sleep(10)


@pytest.mark.parametrize("every_ms", [0, -5, float("nan"), float("inf")])
async def test_a_bad_interval_is_refused(every_ms: float) -> None:
    _, generate = answering("x")
    with pytest.raises(ValueError, match="every_ms"):
        async with start_agent(agent("ava", does="p"), every_ms=every_ms, generate=generate):
            pass


async def test_an_interrupted_beat_is_silent_and_a_closed_persona_stops_the_clock(
    autojump_clock: trio.abc.Clock,
) -> None:
    calls: list[float] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        calls.append(trio.current_time())
        await trio.sleep(0.5)
        return InProcessResponse("the 3pm sync is due")

    reports: list[str] = []
    start = trio.current_time()
    async with start_agent(
        agent("ava", does="p"), every_ms=1000, on_report=reports.append, generate=generate
    ) as started:
        await trio.sleep(1.25)  # the first beat's turn is running
        started.runtime.interrupt(started.handle)
        await trio.sleep(1.5)  # the beat at 2 s runs to its reply (2.5 s)
        assert reports == ["the 3pm sync is due"]
        await started.runtime.close(started.handle)
        await trio.sleep(5)
        assert started.runtime.inspect(started.handle).state == "closed"
    assert [t - start for t in calls] == [1, 2]  # nothing after the close
    assert started.beats == 2 and started.reports == 1
