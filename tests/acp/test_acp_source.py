"""An ACP agent as the loop's model: a real agent process written with the official
Python SDK (tests/acp/sdk_agent.py, asyncio) driven by our loop through ``open_acp``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import TaskCensus
from mcp_helpers import children_groups, group_members, pid_alive

from toolnexus_trio import Answer, InProcessOptions, Request, create_in_process_client
from toolnexus_trio.acp import ACPError, ACPOptions, ACPPermissionTimeoutError, open_acp
from toolnexus_trio.agents import AgentDef, open_agent_runtime

AGENT = str(Path(__file__).with_name("sdk_agent.py"))
HERE = os.path.abspath(".")


def options(scenario: str, **extra: Any) -> ACPOptions:
    return ACPOptions(sys.executable, args=[AGENT, scenario], **extra)


async def diagnostics(acp: Any) -> dict[str, Any]:
    result: dict[str, Any] = await acp.rpc.request("_diagnostics", {})
    return result


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    before = children_groups()
    yield
    assert children_groups() <= before


async def test_warm_session_absolute_cwd_and_no_duplicated_history() -> None:
    async with open_acp(options("echo", cwd=".")) as acp:
        client = create_in_process_client(InProcessOptions(model="acp", generate=acp.generate))
        first = await client.ask("hello", id="c1")
        second = await client.ask("and again", id="c1")
        assert (first.text, second.text) == ("echo:hello", "echo:and again")
        seen = await diagnostics(acp)
        assert seen["cwds"] == [HERE]
        assert seen["mcpServers"] == []
        assert seen["sessions"] == 1  # one warm session serves both turns ...
        assert seen["prompts"] == ["hello", "and again"]  # ... and each message once
        # Another conversation does not extend what the session saw: a fresh session
        # gets the whole transcript once, instead of a stale memory.
        other = await client.ask("other", id="c2")
        assert other.text == "echo:other"
        seen = await diagnostics(acp)
        assert seen["sessions"] == 2
        assert seen["prompts"][-1] == "other"
        # Back to the first conversation: its session is still warm.
        third = await client.ask("third", id="c1")
        assert third.text == "echo:third"
        seen = await diagnostics(acp)
        assert seen["sessions"] == 2
        assert seen["prompts"] == ["hello", "and again", "other", "third"]
        assert acp.alive


async def test_thoughts_and_tool_narration_are_events_not_reply() -> None:
    updates: list[dict[str, Any]] = []
    async with open_acp(options("noisy"), on_update=updates.append) as acp:
        client = create_in_process_client(InProcessOptions(model="acp", generate=acp.generate))
        result = await client.run("what is it?")
    assert result.text == '{"answer": "42"}'
    kinds = [u["sessionUpdate"] for u in updates]
    assert kinds == [
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]


async def test_permission_goes_to_wait_for() -> None:
    asked: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request)
        return Answer(id=request.id, ok=True, data={"optionId": "yes-always"})

    async with open_acp(options("permission"), wait_for=wait_for) as acp:
        client = create_in_process_client(
            InProcessOptions(model="acp", generate=acp.generate, wait_for=wait_for)
        )
        result = await client.run("clean up")
    assert result.text == "PERMITTED:yes-always"
    [request] = asked
    assert request.kind == "approval"
    assert request.data is not None
    assert [c["optionId"] for c in request.data["choices"]] == ["yes-once", "yes-always", "no"]
    assert request.data["toolCall"]["title"] == "rm -rf build"


async def test_two_permission_requests_in_one_turn() -> None:
    asked: list[str] = []

    async def wait_for(request: Request) -> Answer:
        assert request.data is not None
        asked.append(request.data["toolCall"]["title"])
        choice = "yes-once" if len(asked) == 1 else "no"
        return Answer(id=request.id, ok=True, data={"optionId": choice})

    async with open_acp(options("permission2"), wait_for=wait_for) as acp:
        reply = await acp.generate({"messages": [{"role": "user", "content": "x"}]})
    assert reply == {"content": "PERMITTED:no"}
    assert asked == ["rm -rf build", "rm -rf dist"]


async def test_permission_refused_and_auto_allowed() -> None:
    async def refuse(request: Request) -> Answer:
        return Answer(id=request.id, ok=False, reason="declined")

    async with open_acp(options("permission"), wait_for=refuse) as acp:
        assert (await acp.generate({"messages": [{"role": "user", "content": "x"}]})) == {
            "content": "PERMITTED:no"
        }
    async with open_acp(options("permission")) as acp:  # no wait_for: refused
        reply = await acp.generate({"messages": [{"role": "user", "content": "x"}]})
        assert reply == {"content": "PERMITTED:no"}
    async with open_acp(options("permission", permission="allow")) as acp:
        reply = await acp.generate({"messages": [{"role": "user", "content": "x"}]})
        assert reply == {"content": "PERMITTED:yes-once"}


async def test_silent_turn_is_bounded_and_the_next_turn_gets_a_fresh_session() -> None:
    async with open_acp(options("hang", permission_timeout=0.5)) as acp:
        with pytest.raises(ACPPermissionTimeoutError, match="turn hung"):
            await acp.generate({"messages": [{"role": "user", "content": "x"}]})
        seen = await diagnostics(acp)
        assert seen["cancels"] == 1  # the agent was told, and ended the turn
        assert acp.alive


async def test_cancel_of_an_agent_that_ignores_session_cancel_reaps_its_tree() -> None:
    tree_pid = 0
    with TaskCensus() as census:
        async with open_acp(options("deaf")) as acp:
            tree_pid = acp.tree.pid
            with trio.CancelScope() as scope:

                def on_update(update: dict[str, Any]) -> None:
                    if update.get("sessionUpdate") == "agent_thought_chunk":
                        scope.cancel()  # the turn has started: cancel it

                acp.on_update = on_update
                await acp.generate({"messages": [{"role": "user", "content": "x"}]})
            assert scope.cancelled_caught
            assert not acp.alive  # it never ended the turn: stopped, whole tree
            assert group_members(tree_pid) == []
            with pytest.raises(ACPError):
                await acp.generate({"messages": [{"role": "user", "content": "y"}]})
        assert not pid_alive(tree_pid)
    census.assert_no_new_tasks()  # the connection's reader, writer and handlers too


async def test_concurrent_turns_are_serialised() -> None:
    replies: list[str] = []
    async with open_acp(options("echo")) as acp:

        async def one(text: str) -> None:
            reply = await acp.generate({"messages": [{"role": "user", "content": text}]})
            replies.append(reply["content"])

        async with trio.open_nursery() as nursery:
            for text in ("a", "b", "c"):
                nursery.start_soon(one, text)
        assert not (await diagnostics(acp))["reentrant"]
    assert sorted(replies) == ["echo:a", "echo:b", "echo:c"]


async def test_close_stops_the_agent_and_a_missing_command_is_an_acp_error() -> None:
    async with open_acp(options("echo")) as acp:
        pid = acp.tree.pid
        assert pid_alive(pid)
    assert not pid_alive(pid)
    assert not acp.alive
    with pytest.raises(ACPError, match="cannot start"):
        async with open_acp(ACPOptions("/nonexistent/agent")):
            pass


async def test_errors_are_acp_errors_not_groups() -> None:
    with pytest.raises(ACPError, match="acp error -32000: authentication required"):
        async with open_acp(options("refuse")):
            pass
    async with open_acp(options("crash")) as acp:
        with pytest.raises(ACPError, match="closed its output"):
            await acp.generate({"messages": [{"role": "user", "content": "x"}]})
        assert not acp.alive
    with pytest.raises(KeyError):  # the caller's own exception, as raised
        async with open_acp(options("echo")):
            raise KeyError("mine")


async def test_the_agent_runtime_runs_on_an_acp_model() -> None:
    registry = {
        name: AgentDef(name, f"{name} does things", f"you are {name}", "acp") for name in ("a", "b")
    }
    async with (
        open_acp(options("echo")) as acp,
        open_agent_runtime(registry, generate=acp.generate) as runtime,
    ):
        first = await runtime.run("a", "hi")
        second = await runtime.run("b", "yo")
        seen = await diagnostics(acp)
    assert first.text == "echo:system: you are a\nuser: hi"
    assert second.text == "echo:system: you are b\nuser: yo"
    assert seen["sessions"] == 2  # each agent's transcript in a session of its own


async def test_a_cancelled_turn_answers_its_open_permission_request_cancelled() -> None:
    updates: list[dict[str, Any]] = []
    async with open_acp(options("permission"), on_update=updates.append) as acp:
        with trio.CancelScope() as scope:

            async def wait_for(request: Request) -> Answer:
                scope.cancel()  # the user gives up while the question is open
                await trio.sleep_forever()
                raise AssertionError("not reached")

            acp.wait_for = wait_for
            await acp.generate({"messages": [{"role": "user", "content": "x"}]})
        assert scope.cancelled_caught
        seen = await diagnostics(acp)
        assert seen["cancels"] == 1
        assert acp.alive  # the agent ended the turn: it stays
    # The agent heard "cancelled" for its question (and said so, after the turn ended).
    said = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert said == ["OUTCOME:cancelled"]
