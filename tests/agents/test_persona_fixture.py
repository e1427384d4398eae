"""The toolnexus ``persona-agent`` fixture (SPEC §7E), every ``expect``, on Trio's virtual clock.

The fixture (vendored unchanged in ``fixtures/persona-agent/``, MIT, see ``fixtures/NOTICE.md``) is
data: a home (``bootstrapDir``), a scripted mock model per persona (``mockLLM.scripts``)
and the expectations H1-H5. This runner writes the home to a temporary directory, plays
the scripts as an in-process ``generate`` (dispatched on the model name), runs the
personas on our runtime and checks each ``expect`` key; a key it does not know fails the
run, so a fixture update cannot be skipped silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from agent_rig import FIXTURES, load
from helpers import TaskCensus

from toolnexus_trio import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.agents import (
    BOOTSTRAP_ORDER,
    HEARTBEAT_OK,
    agent,
    agent_from_dir,
    compose_soul,
    memory_tool,
    start_agent,
)

FIXTURE_DIR = FIXTURES / "persona-agent"
FIXTURE: dict[str, Any] = load("persona-agent")
EXPECT: dict[str, Any] = FIXTURE["expect"]
USAGE: dict[str, int] = FIXTURE["mockLLM"]["usagePerCall"]


def checks(key: str) -> Any:
    """The fixture's ``expect[key]`` (the name marks where each key is checked)."""
    return EXPECT[key]


def write_home(path: Path, files: Mapping[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The fixture's ``bootstrapDir`` written out as a persona home."""
    return write_home(tmp_path / "ava", FIXTURE["bootstrapDir"])


def _system(request: GenerateRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages if m["role"] == "system")


def _last_user(request: GenerateRequest) -> str:
    users = [m for m in request.messages if m["role"] == "user"]
    return str(users[-1].get("content") or "") if users else ""


def script(request: GenerateRequest) -> InProcessResponse:
    """One answer of the fixture's ``mockLLM.scripts[<model>]``, played by hand."""
    system = _system(request)
    tool_messages = [m for m in request.messages if m["role"] == "tool"]
    if request.model == "m-echo-soul":
        found = [name for name in FIXTURE["bootstrapOrder"] if f"## {name}" in system]
        return InProcessResponse(f"sections:[{','.join(found)}]", usage=USAGE)
    if request.model == "m-remember":
        if not tool_messages:
            (step,) = FIXTURE["mockLLM"]["scripts"]["m-remember"][0]["toolCalls"]
            call = InProcessToolCall(id="c1", name=step["name"], arguments=step["args"])
            return InProcessResponse(tool_calls=[call], usage=USAGE)
        return InProcessResponse(f"saved: {tool_messages[0]['content']}", usage=USAGE)
    if request.model == "m-recall":
        text = "I recall: dark roast" if "Prefers dark roast" in system else "no memory"
        return InProcessResponse(text, usage=USAGE)
    if request.model == "m-heartbeat":
        due = "remind about the 3pm sync" in system and "Heartbeat" in _last_user(request)
        return InProcessResponse("Reminder: 3pm sync 🔔" if due else HEARTBEAT_OK, usage=USAGE)
    raise AssertionError(f"the fixture has no script for model {request.model!r}")


async def generate(request: GenerateRequest) -> InProcessResponse:
    await trio.lowlevel.checkpoint()
    return script(request)


def test_the_fixture_pins_our_constants() -> None:
    assert tuple(FIXTURE["bootstrapOrder"]) == BOOTSTRAP_ORDER
    assert FIXTURE["maxFileBytes"] == 2_097_152


async def test_h1_sections_in_order_reach_the_child_system_prompt(home: Path) -> None:
    expected = checks("H1_composedSoulSectionsInOrder")
    _soul, loaded = compose_soul(home)
    assert loaded == expected
    # The vendored ava/ home has the same four files.
    assert compose_soul(FIXTURE_DIR / "ava")[1] == expected
    persona = agent_from_dir(home, model="m-echo-soul")
    result = await persona.run("Which sections do you see?", generate=generate)
    # Agent.run spawns the persona as a child of the runtime's root: its system prompt
    # is the composed soul.
    assert checks("H1_soulReachesChildSystemPrompt") is True
    assert result.status == "done", result
    assert result.text == f"sections:[{','.join(expected)}]"


async def test_h1_the_soul_reaches_a_persona_delegated_to_by_task(home: Path) -> None:
    # The persona as a team member: a lead's task call spawns it as the lead's child.
    async def lead_or_persona(request: GenerateRequest) -> InProcessResponse:
        await trio.lowlevel.checkpoint()
        if request.model != "m-lead":
            return script(request)
        tools = [m for m in request.messages if m["role"] == "tool"]
        if not tools:
            call = InProcessToolCall(
                id="t1", name="task", arguments={"agent": "ava", "prompt": "your sections?"}
            )
            return InProcessResponse(tool_calls=[call], usage=USAGE)
        return InProcessResponse(f"lead got: {tools[0]['content']}", usage=USAGE)

    persona = agent_from_dir(home, model="m-echo-soul")
    lead = agent("lead", does="delegates", team=[persona], model="m-lead")
    result = await lead.run("ask ava", generate=lead_or_persona)
    expected = checks("H1_composedSoulSectionsInOrder")
    assert result.text == f"lead got: sections:[{','.join(expected)}]"


async def test_h2_a_file_over_the_cap_is_truncated_with_a_notice(home: Path) -> None:
    assert checks("H2_over2MBFileTruncatedWithNotice") is True
    cap = FIXTURE["maxFileBytes"]
    big = "- note\n" * (cap // 7 + 100)
    (home / "MEMORY.md").write_text(big, encoding="utf-8")
    soul, loaded = compose_soul(home)
    assert loaded == EXPECT["H1_composedSoulSectionsInOrder"]
    memory_section = soul.split("## MEMORY.md\n\n", 1)[1]
    assert memory_section.endswith("\n[truncated: exceeds 2 MB bootstrap cap]")
    assert len(memory_section.encode()) < len(big.encode())
    assert (home / "MEMORY.md").read_text(encoding="utf-8") == big  # the file is untouched
    result = await agent_from_dir(home, model="m-echo-soul").run("?", generate=generate)
    assert result.text.endswith("MEMORY.md]")


async def test_h3_the_memory_actions(home: Path) -> None:
    tool = memory_tool(home)
    add = await tool.call({"action": "add", "text": "Lives in Chennai"})
    assert not add.is_error and checks("H3_memoryAddAppendsEntry") is True
    assert (home / "MEMORY.md").read_text() == "- Onboarded 2026-07.\n- Lives in Chennai\n"

    replace = await tool.call({"action": "replace", "text": "Chennai", "with": "Pune"})
    assert not replace.is_error and checks("H3_memoryReplaceSwapsSubstring") is True
    assert (home / "MEMORY.md").read_text() == "- Onboarded 2026-07.\n- Lives in Pune\n"

    remove = await tool.call({"action": "remove", "text": "Lives in Pune"})
    assert not remove.is_error and checks("H3_memoryRemoveDeletesEntry") is True
    assert (home / "MEMORY.md").read_text() == "- Onboarded 2026-07.\n"

    miss = await tool.call({"action": "remove", "text": "Lives in Pune"})
    assert miss.is_error and checks("H3_missingSubstringIsLoudError") is True
    assert "not found" in miss.output

    user = await tool.call({"action": "add", "target": "user", "text": "Likes filter coffee"})
    assert not user.is_error and checks("H3_targetUserWritesUSERmd") is True
    assert (home / "USER.md").read_text().endswith("\n- Likes filter coffee\n")
    assert "filter coffee" not in (home / "MEMORY.md").read_text()


async def test_h4_a_write_lands_on_disk_and_loads_next_session(home: Path) -> None:
    # Built before the write and reused after it: each session composes its own snapshot.
    recall = agent_from_dir(home, model="m-recall")
    assert (await recall.run("What do I like?", generate=generate)).text == "no memory"

    systems: list[str] = []

    async def watching(request: GenerateRequest) -> InProcessResponse:
        systems.append(_system(request))
        return await generate(request)

    # One session of two turns: the write lands on disk at once, but the live prompt of
    # the session never changes (the frozen snapshot).
    async with start_agent(agent_from_dir(home, model="m-remember"), generate=watching) as s:
        assert s.runtime.wake(s.handle, "I prefer dark roast.").ok
        first = await s.runtime.wait(s.handle)
        assert first.status == "done", first
        assert first.text.startswith("saved: ok")
        lands = checks("H4_writeLandsOnDisk")
        assert lands["contains"] in (home / lands["file"]).read_text(encoding="utf-8")
        assert s.runtime.wake(s.handle, "Anything else?").ok
        await s.runtime.wait(s.handle)
    assert len(systems) == 3
    assert all("Prefers dark roast" not in system for system in systems)

    nxt = checks("H4_nextSessionSnapshotCarriesMemory")
    assert recall.definition.model == nxt["model"]
    assert (await recall.run("What do I like?", generate=generate)).text == nxt["text"]
    fresh = agent_from_dir(home, model=nxt["model"])
    assert (await fresh.run("What do I like?", generate=generate)).text == nxt["text"]


async def _beat_for(
    home: Path, seconds: float, model_generate: Callable[[GenerateRequest], Awaitable[Any]]
) -> tuple[list[str], int]:
    reports: list[str] = []
    persona = agent_from_dir(home, model="m-heartbeat")
    with TaskCensus() as census:
        async with start_agent(
            persona, every_ms=1000, on_report=reports.append, generate=model_generate
        ) as started:
            await trio.sleep(seconds)
            beats = started.beats
        census.assert_no_new_tasks()
    return reports, beats


async def test_h5_heartbeat_ok_is_silent(home: Path, autojump_clock: trio.abc.Clock) -> None:
    assert checks("H5_heartbeatOKisSilent") is True
    not_due = FIXTURE["heartbeatNotDue"]["HEARTBEAT.md"]
    (home / "HEARTBEAT.md").write_text(not_due, encoding="utf-8")
    reports, beats = await _beat_for(home, 5.5, generate)
    assert beats == 5
    assert reports == []


async def test_h5_a_due_heartbeat_surfaces(home: Path, autojump_clock: trio.abc.Clock) -> None:
    wanted = checks("H5_dueHeartbeatSurfaces")["beatContains"]
    reports, beats = await _beat_for(home, 3.5, generate)
    assert beats == 3
    assert len(reports) == 3
    assert all(wanted in report for report in reports)


async def test_h5_ticks_coalesce_to_one_turn(home: Path, autojump_clock: trio.abc.Clock) -> None:
    assert checks("H5_ticksCoalesceToOneTurn") is True
    seen: list[str] = []

    async def slow(request: GenerateRequest) -> InProcessResponse:
        seen.append(_last_user(request))
        await trio.sleep(3.5)  # a beat that takes three and a half intervals
        return script(request)

    reports, beats = await _beat_for(home, 10.5, slow)
    # Ticks at 1..10 s; turns woken at 1 s (ends 4.5 s), 5 s (ends 8.5 s) and 9 s.
    assert beats == len(seen) == 3
    tick_lines = [[line for line in turn.splitlines() if "tick" in line] for turn in seen]
    assert [len(lines) for lines in tick_lines] == [1, 1, 1]  # one counted entry per turn
    assert "x4" in tick_lines[1][0]  # the ticks of 2, 3, 4 and 5 s, drained as one turn
    assert len(reports) == 2  # the third turn is still running when the block ends


def test_every_expectation_has_a_test() -> None:
    # The keys the tests above check (each through checks()); a key the fixture gains
    # fails here until a test covers it.
    covered = {
        "H1_composedSoulSectionsInOrder",
        "H1_soulReachesChildSystemPrompt",
        "H2_over2MBFileTruncatedWithNotice",
        "H3_memoryAddAppendsEntry",
        "H3_memoryReplaceSwapsSubstring",
        "H3_memoryRemoveDeletesEntry",
        "H3_missingSubstringIsLoudError",
        "H3_targetUserWritesUSERmd",
        "H4_writeLandsOnDisk",
        "H4_nextSessionSnapshotCarriesMemory",
        "H5_heartbeatOKisSilent",
        "H5_dueHeartbeatSurfaces",
        "H5_ticksCoalesceToOneTurn",
    }
    assert set(EXPECT) == covered
