"""The runtime stays bounded whatever a model does (issue 30, items 1, 2, 3 and 5).

A model that keeps delegating to its own agent stops at the runtime's ``max_depth``; a
tree deeper than Python's stack is walked, interrupted and closed without recursion; a
long-lived coordinator forgets closed children (flat in memory and in time); the durable
table keeps what a resume needs (it stays readable after big answers); an agent name that
would break handle ids is refused when the agent is defined.
"""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from toolnexus_trio import InMemoryConversationStore, SqliteConversationStore
from toolnexus_trio.agents import (
    LIMIT_MAX_CHILDREN,
    LIMIT_MAX_DEPTH,
    AgentDef,
    Budget,
    SpawnError,
    agent,
    open_agent_runtime,
)
from toolnexus_trio.agents._durable import MAX_RECORD_CHARS, TABLE_ID
from toolnexus_trio.agents._runtime import DEFAULT_MAX_DEPTH
from toolnexus_trio.agents._table import CLOSED_KEPT
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def _def(name: str = "a", **kw: Any) -> AgentDef:
    return AgentDef(name, f"{name} does things", f"you are {name}", "m", **kw)


async def answer_ok(request: GenerateRequest) -> InProcessResponse:
    return InProcessResponse(content="ok", usage=USAGE)


# -- item 1: a model that delegates to its own agent ------------------------------------


async def delegate_to_itself(request: GenerateRequest) -> InProcessResponse:
    """Delegates ``level N+1`` to its own agent, down to level 40; then passes the
    answer it got back up unchanged."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=str(last["content"]), usage=USAGE)
    match = re.search(r"level (\d+)", str(last["content"]))
    level = int(match.group(1)) if match else 0
    if level >= 40:
        return InProcessResponse(content="bottom", usage=USAGE)
    call = InProcessToolCall(f"t{level}", "task", {"agent": "loop", "prompt": f"level {level + 1}"})
    return InProcessResponse(tool_calls=[call], usage=USAGE)


async def test_a_model_delegating_to_itself_stops_at_the_default_depth(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = {"loop": _def("loop", task_targets=["loop"])}
    async with open_agent_runtime(registry, generate=delegate_to_itself) as rt:
        result = await rt.run("loop", "level 0")
    assert result.status == "done"
    # The deepest level was refused its spawn, and said so up the whole chain.
    assert f"max_depth {DEFAULT_MAX_DEPTH}" in result.text
    assert "bottom" not in result.text


async def test_the_depth_cap_is_overridable(autojump_clock: trio.testing.MockClock) -> None:
    async with open_agent_runtime({"a": _def()}, generate=answer_ok, max_depth=3) as rt:
        node = rt.root
        for _ in range(3):
            node = rt.spawn(node, "a")
        with pytest.raises(SpawnError) as refused:
            rt.spawn(node, "a")
        assert refused.value.limit == LIMIT_MAX_DEPTH
    with pytest.raises(ValueError, match="max_depth"):
        async with open_agent_runtime({"a": _def()}, generate=answer_ok, max_depth=0):
            pass


async def slow_answer(request: GenerateRequest) -> InProcessResponse:
    await trio.sleep(10)
    return InProcessResponse(content="ok", usage=USAGE)


@pytest.mark.parametrize("end", ["close", "leave", "cancel"])
async def test_a_tree_deeper_than_the_stack_is_walked_without_recursion(
    autojump_clock: trio.testing.MockClock, end: str
) -> None:
    depth = 1_500  # past Python's recursion limit (1,000)
    with trio.move_on_after(5) as outer:
        async with open_agent_runtime({"a": _def()}, generate=slow_answer, max_depth=depth) as rt:
            node = rt.root
            for _ in range(depth):
                node = rt.spawn(node, "a")
            await trio.lowlevel.checkpoint()  # every service task is up
            top = rt.root.children[0]
            assert len(rt.list()) == depth + 1
            assert rt.wake(node, "go").ok
            await trio.sleep(1)
            rt.interrupt(top)  # reaches the deepest handle's run
            assert (await rt.wait(node)).status == "interrupted"
            assert rt.wake(node, "again").ok
            if end == "close":
                await rt.close(top)
                assert top.state == "closed" and node.state == "closed"
            elif end == "cancel":
                await trio.sleep_forever()  # the outer deadline ends the block
    # Leaving the runtime, even by a cancel, did not break Trio (no RecursionError, no
    # TrioInternalError, no group nested once per level).
    assert outer.cancelled_caught is (end == "cancel")


def _item(text: str) -> Any:
    from toolnexus_trio.agents import InboxItem

    return InboxItem("external", "test", text)


# -- item 3: closed handles are forgotten ---------------------------------------------------


async def test_a_long_lived_coordinator_forgets_closed_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cycles = CLOSED_KEPT + 100
    registry = {"lead": _def("lead", budget=Budget(max_children=2)), "a": _def()}
    async with open_agent_runtime(registry, generate=answer_ok) as rt:
        lead = rt.spawn(rt.root, "lead")
        first = rt.spawn(lead, "a")
        first_id, first_ref = first.id, weakref.ref(first)
        rt.wake(first, "go")
        await rt.wait(first)
        await rt.close(first)
        del first
        for _ in range(cycles):
            child = rt.spawn(lead, "a")
            assert rt.wake(child, "go").ok
            assert (await rt.wait(child)).status == "done"
            await rt.close(child)
        # The latest closed children stay inspectable; older ones are gone for good.
        assert len(lead.children) == CLOSED_KEPT
        assert lead.children[-1] is child and child.state == "closed"
        assert len(rt.list()) == CLOSED_KEPT + 2
        with pytest.raises(KeyError):
            rt.handle(first_id)
        assert await rt.conversation_store.get(first_id) is None
        gc.collect()
        assert first_ref() is None
        # max_children counts the live children only (kept, not walked).
        rt.spawn(lead, "a")
        rt.spawn(lead, "a")
        with pytest.raises(SpawnError) as refused:
            rt.spawn(lead, "a")
        assert refused.value.limit == LIMIT_MAX_CHILDREN


# -- item 2: the durable table keeps what a resume needs ---------------------------------------

BIG = 9 * 1024 * 1024


async def answer_big(request: GenerateRequest) -> InProcessResponse:
    return InProcessResponse(content="x" * BIG, usage=USAGE)


async def test_the_durable_table_stays_readable_after_big_answers(tmp_path: Path) -> None:
    async with SqliteConversationStore(tmp_path / "t.db") as store:
        async with open_agent_runtime({"a": _def()}, generate=answer_big, store=store) as rt:
            for _ in range(2):
                assert len((await rt.run("a", "go")).text) == BIG
            for _ in range(20):  # closed handles leave the table
                h = rt.spawn(rt.root, "a")
                await rt.close(h)
        stored = await store.get(TABLE_ID)
        assert stored is not None
        assert len(stored[0]["content"]) < MAX_RECORD_CHARS // 64
        # The store reopens, with the two open handles (their full answers are in their
        # transcripts).
        async with open_agent_runtime({"a": _def()}, generate=answer_big, store=store) as rt:
            assert [v.id for v in rt.list()] == ["root", "root/a.1", "root/a.2"]
            transcript = await rt.conversation_store.get("root/a.2")
            assert transcript is not None and len(transcript[-1]["content"]) == BIG


async def test_a_table_over_the_bound_is_refused_before_it_is_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InMemoryConversationStore()
    async with open_agent_runtime({"a": _def()}, generate=answer_ok, store=store) as rt:
        await rt.run("a", "go")
        before = await store.get(TABLE_ID)
        h = rt.handle("root/a.1")
        assert rt.post(h, _item("y" * MAX_RECORD_CHARS)).ok
        assert rt.on_change is not None
        with pytest.raises(ValueError, match="would be"):
            await rt.on_change(rt, "settled", h)
        assert await store.get(TABLE_ID) == before
        h.inbox.clear()


# -- item 5: names that break ids --------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["ops/deploy", "a.1/b", "", "x#y", "two words", "tab\there", "nl\n", "\x1b[2J", "."]
)
def test_a_name_that_breaks_ids_is_refused_at_definition(name: str) -> None:
    with pytest.raises(ValueError, match="agent name"):
        agent(name, does="things")
    with pytest.raises(ValueError, match="agent name"):
        _def(name)


async def test_a_registry_key_that_breaks_ids_is_refused() -> None:
    with pytest.raises(ValueError, match="agent name"):
        async with open_agent_runtime({"ops/deploy": _def("deploy")}, generate=answer_ok):
            pass


def test_names_that_fit_ids_are_accepted() -> None:
    for name in ("a.1", "code-reviewer", "deploy_v2", "研究者", "x" * 128):
        assert agent(name, does="things").name == name
    with pytest.raises(ValueError, match="agent name"):
        agent("x" * 129, does="things")
