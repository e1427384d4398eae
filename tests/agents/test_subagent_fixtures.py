"""The toolnexus §7D fixtures (``fixtures/subagent-*``), driven on Trio's virtual clock.

Each test builds the fixture's registry, runs its steps on our runtime and checks every
``expect`` of the fixture. One expectation is deliberately different, because our
budgets are enforced live inside a run (SPEC §7D "live-enforced"; issue 19):

- ``subagent-budgets`` step 6 expects ``done`` for a run that overspends the shared pool
  during the run (20 tokens left, the run spends 80). toolnexus checks the pool only at
  admission; we check it after every model response too, so that run stops after its
  first response with ``incomplete`` / ``maxTokens`` instead of spending past the limit.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from agent_rig import ScriptedModel, Tools, auto_approve, budget_of, load, registry_of

from toolnexus_trio import AlreadyAnswered, Answer, InMemoryConversationStore
from toolnexus_trio.agents import (
    LIMIT_MAX_CHILDREN,
    LIMIT_MAX_TOKENS,
    LIMIT_MAX_TURNS,
    TASK_STATUSES,
    AgentRuntime,
    Handle,
    InboxItem,
    SpawnError,
    open_agent_runtime,
)
from toolnexus_trio.agents._inbox import UNTRUSTED_CLOSE, UNTRUSTED_OPEN


def same_transitions(actual: list[str] | tuple[str, ...], expected: list[str]) -> bool:
    """The fixtures write a close from any state as ``→closed``; we record ``idle→closed``."""
    if len(actual) != len(expected):
        return False
    return all(
        a == e or (e.startswith("→") and a.endswith(e))
        for a, e in zip(actual, expected, strict=True)
    )


def by_path(rt: AgentRuntime, path: str) -> Handle:
    """A fixture's short handle name (``coordinator/peer``) or a full id."""
    if path.startswith("root"):
        return rt.handle(path)
    node = rt.root
    for part in path.split("/"):
        node = next(c for c in node.children if c.defn is not None and c.defn.name == part)
    return node


@pytest.fixture(autouse=True)
def _approvals() -> None:
    auto_approve.asked = []  # type: ignore[attr-defined]


# -- subagent-fanout ------------------------------------------------------------------


async def test_fanout(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-fanout")
    model, tools = ScriptedModel(fx["mockLLM"]), Tools()
    expect = fx["expect"]
    async with open_agent_runtime(registry_of(fx, tools), generate=model) as rt:
        result = await rt.run(fx["run"]["entry"], fx["run"]["prompt"])
        parent = rt.handle("root/coordinator.1")
        assert result.status == expect["status"]
        for needle in expect["textContains"]:
            assert needle in result.text
        for needle, count in expect["textOccurrences"].items():
            assert result.text.count(needle) == count
        assert result.turns == expect["parentTurns"]
        assert [c.id for c in parent.children] == expect["childIds"]
        assert model.peak >= expect["concurrentTurnsObservedAtLeast"]
        assert result.total_tokens == expect["parentUsageTotal"] == parent.tokens
        assert (
            all(c.state == "closed" for c in parent.children) is expect["childrenClosedAfterTask"]
        )
        for hid, trace in expect["transitions"].items():
            assert same_transitions(rt.inspect(rt.handle(hid)).transitions, trace), hid
        # The parent's transcript gained exactly one tool message per task call.
        stored = await rt.conversation_store.get(parent.id)
        assert stored is not None
        assert [m["role"] for m in stored].count("tool") == 2
        # The task tool's description lists the team only, from `does`.
        coordinator_tools = model.calls[0].tools or []
        task = next(t for t in coordinator_tools if t["function"]["name"] == "task")
        assert "- explore: read-only research" in task["function"]["description"]
        assert "coordinator" not in task["function"]["description"].split("Team:")[1]
        # Children get no task tool: their def has no team.
        explore_call = next(c for c in model.calls if c.model == "m-explore")
        assert [t["function"]["name"] for t in explore_call.tools or []] == ["lookup"]


async def test_task_to_an_agent_outside_the_team_lists_the_team(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fx = load("subagent-fanout")
    script = [
        {"whenToolMsgs": 0, "toolCalls": [{"name": "task", "args": {"agent": "coordinator", "prompt": "x"}}]},
        {"whenToolMsgs": ">=1", "text": "<first tool msg content>"},
    ]  # fmt: skip
    mock = {**fx["mockLLM"], "scripts": {**fx["mockLLM"]["scripts"], "m-coordinator": script}}
    async with open_agent_runtime(registry_of(fx, Tools()), generate=ScriptedModel(mock)) as rt:
        result = await rt.run("coordinator", "go")
    assert result.status == "done"
    assert "your team is explore" in result.text
    assert set(TASK_STATUSES) == {
        "done", "pending", "incomplete", "interrupted", "closed", "timeout", "error",
    }  # fmt: skip


# -- subagent-lifecycle ---------------------------------------------------------------


async def test_lifecycle_coalesced_drain(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    scenario = fx["scenarios"]["coalescedDrain"]
    model = ScriptedModel(fx["mockLLM"])
    async with open_agent_runtime(registry_of(fx, Tools()), generate=model) as rt:
        peer = rt.spawn(rt.root, "peer")
        for step in scenario["steps"]:
            if "post" in step:
                p = step["post"]
                assert rt.post(peer, InboxItem(p["from"], p["channel"], p["text"])).ok
            else:
                assert rt.wake(peer).ok
                result = await rt.wait(peer)
    assert result.turns == scenario["expect"]["turns"]
    assert result.text == scenario["expect"]["text"]
    block = model.calls[0].messages[-1]["content"]
    # Provenance on every item; ticks deduped into one counted entry; the sibling and
    # the external sender inside the untrusted block.
    trusted, untrusted = block.split(UNTRUSTED_OPEN)
    assert "from clock (timer): tick x3" in trusted
    assert "from root/coordinator.1 (peer): update 1" in untrusted
    assert "from external (external): webhook payload" in untrusted
    assert untrusted.rstrip().endswith(UNTRUSTED_CLOSE)


async def test_lifecycle_parent_posts_are_trusted(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    model = ScriptedModel(fx["mockLLM"])
    async with open_agent_runtime(registry_of(fx, Tools()), generate=model) as rt:
        boss = rt.spawn(rt.root, "coordinator")
        peer = rt.spawn(boss, "peer")
        rt.post(peer, InboxItem(boss.id, "peer", "from the boss"))
        rt.wake(peer)
        await rt.wait(peer)
    assert UNTRUSTED_OPEN not in model.calls[0].messages[-1]["content"]


async def test_lifecycle_inbox_gate(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    scenario = fx["scenarios"]["inboxGate"]
    async with open_agent_runtime(
        registry_of(fx, Tools()), generate=ScriptedModel(fx["mockLLM"]), inbox_cap=2
    ) as rt:
        peer = rt.spawn(rt.root, "peer")
        for step in scenario["steps"]:
            p = step["post"]
            posted = rt.post(peer, InboxItem("external", "external", p["text"]))
            expect = step.get("expect")
            if expect is None:
                assert posted.ok
            else:
                assert posted.ok is not expect["rejected"]
                assert posted.error is not None and expect["errorContains"] in posted.error
        assert rt.inspect(peer).inbox == 2


async def test_lifecycle_concurrency_gate(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    scenario = fx["scenarios"]["concurrencyGate"]
    overrides = scenario["registryOverride"]
    async with open_agent_runtime(
        registry_of(fx, Tools(), **overrides), generate=ScriptedModel(fx["mockLLM"])
    ) as rt:
        result = await rt.run(scenario["run"]["entry"], scenario["run"]["prompt"])
    assert result.status == scenario["expect"]["status"]
    for needle in scenario["expect"]["traceContains"]:
        assert any(needle in line for line in rt.trace), needle
    assert rt.trace.index("root/coordinator.1/explore.2: wake QUEUED") < rt.trace.index(
        "root/coordinator.1/explore.2: DEQUEUED wake"
    )


async def test_lifecycle_turn_gate(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    scenario = fx["scenarios"]["turnGate"]
    model = ScriptedModel(fx["mockLLM"])
    async with open_agent_runtime(
        registry_of(fx, Tools()), generate=model, max_concurrent_turns=1
    ) as rt:
        result = await rt.run(scenario["run"]["entry"], scenario["run"]["prompt"])
    assert result.status == scenario["expect"]["status"]
    assert model.peak == scenario["expect"]["maxObservedConcurrentTurns"]


async def test_lifecycle_interrupt(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    scenario = fx["scenarios"]["interrupt"]
    model = ScriptedModel(fx["mockLLM"])
    results: list[Any] = []
    async with open_agent_runtime(registry_of(fx, Tools()), generate=model) as rt:
        slow = rt.spawn(rt.root, "slow")
        async with trio.open_nursery() as nursery:
            for step in scenario["steps"]:
                if "post" in step:
                    assert rt.post(slow, InboxItem("external", "note", step["post"]["text"])).ok
                elif "wake" in step:
                    assert rt.wake(slow, step["wake"]["prompt"]).ok

                    async def waiter() -> None:
                        results.append(await rt.wait(slow))

                    nursery.start_soon(waiter)
                elif "awaitState" in step:
                    # wake flips the state synchronously (atomic admission).
                    assert rt.inspect(slow).state == step["awaitState"]["state"]
                    await trio.sleep(1)  # the model call is in flight (it blocks)
                    assert model.in_flight == 1
                else:
                    rt.interrupt(slow)
        expect = scenario["expect"]
        assert results[0].status == expect["waiterStatus"]
        assert rt.inspect(slow).state == expect["finalState"]
        assert rt.inspect(slow).inbox == expect["inboxLen"]
        # Improvement over the SPEC's python row: the model call itself was cancelled.
        assert model.cancelled == 1 and model.in_flight == 0
        assert slow.transitions == ["idle→running", "running→idle"]


async def test_lifecycle_close_cascade(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-lifecycle")
    scenario = fx["scenarios"]["closeCascade"]
    closed: list[tuple[str, str]] = []

    def on_close(h: Handle, reason: str) -> None:
        closed.append((h.id, reason))

    registry = {k: attrs.evolve(d, on_close=on_close) for k, d in registry_of(fx, Tools()).items()}
    async with open_agent_runtime(registry, generate=ScriptedModel(fx["mockLLM"])) as rt:
        for path in scenario["tree"]:
            parent_path, _, name = path.rpartition("/")
            rt.spawn(by_path(rt, parent_path) if parent_path else rt.root, name)
        await rt.close(rt.root)
        late = rt.post(by_path(rt, "coordinator/peer"), InboxItem("external", "x", "late"))
        assert not late.ok and late.error is not None
        assert scenario["steps"][1]["expect"]["errorContains"] in late.error
        assert [hid for hid, _ in closed] == [
            "root/coordinator.1/peer.1/peer.1",
            "root/coordinator.1/peer.1",
            "root/coordinator.1",
        ]  # grandchild, child, parent (leaf-first)
        assert {v.state for v in rt.list()} == {"closed"}
        with pytest.raises(SpawnError, match="closed"):
            rt.spawn(rt.root, "peer")


# -- subagent-budgets -----------------------------------------------------------------


async def test_budgets(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-budgets")
    model = ScriptedModel(fx["mockLLM"])
    steps = fx["steps"]
    async with open_agent_runtime(registry_of(fx, Tools()), generate=model) as rt:
        coordinator = rt.spawn(rt.root, "coordinator", budget_of(steps[0]["spawn"]["budget"]))
        e1 = rt.spawn(coordinator, "explore", budget_of(steps[1]["spawn"]["budget"]))
        assert e1.budget.max_tokens == steps[1]["expect"]["effectiveTokens"]  # carve
        e2 = rt.spawn(coordinator, "explore")
        with pytest.raises(SpawnError) as refused:
            rt.spawn(coordinator, "explore")
        assert refused.value.limit == steps[3]["expect"]["isError"] == LIMIT_MAX_CHILDREN

        rt.wake(e1, "go")
        r1 = await rt.wait(e1)
        assert r1.status == steps[4]["expect"]["status"]
        assert coordinator.budget.max_tokens is not None
        assert (
            coordinator.budget.max_tokens - coordinator.tokens
            == steps[4]["expect"]["parentPoolAfter"]
        )

        # Deliberate difference (see the module docstring): the fixture's "done" spent
        # 80 tokens of a 20-token pool; the live check stops after the first response.
        calls_before = model.started
        rt.wake(e2, "go")
        r2 = await rt.wait(e2)
        assert (r2.status, r2.limit) == ("incomplete", LIMIT_MAX_TOKENS)
        assert model.started - calls_before == 1  # no model call after the limit
        assert "budget exhausted" in r2.text

        calls_before = model.started
        rt.wake(e2, "again")
        r3 = await rt.wait(e2)
        assert r3.status == steps[6]["expect"]["status"]
        assert steps[6]["expect"]["errorContains"] in r3.text
        assert model.started == calls_before  # the live walk refused before any call

        looper = rt.spawn(rt.root, "looper", budget_of(steps[7]["spawn"]["budget"]))
        rt.wake(looper, "loop forever")
        r4 = await rt.wait(looper)
        assert (r4.status, r4.limit) == (steps[8]["expect"]["status"], LIMIT_MAX_TURNS)
        assert r4.turns == 3


# -- subagent-escalation and subagent-durable-resume ----------------------------------


async def test_escalation(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-escalation")
    tools = Tools()
    expect = fx["expect"]
    async with open_agent_runtime(
        registry_of(fx, tools), generate=ScriptedModel(fx["mockLLM"])
    ) as rt:
        result = await rt.run(fx["run"]["entry"], fx["run"]["prompt"])
        assert result.status == expect["status"]
        for needle in expect["textContains"]:
            assert needle in result.text
        # The parent's wait_for answered, once, with the child's path in data.path.
        (asked,) = auto_approve.asked  # type: ignore[attr-defined]
        assert asked.data["path"] == ["root", "approverParent.1", "asker.1"]
        assert expect["escalation"]["answeredBy"] == "root/approverParent.1"
        child = rt.handle("root/approverParent.1/asker.1")
        assert child.transitions[1:3] == expect["escalation"]["childTrace"]
        for hid, trace in expect["transitions"].items():
            assert same_transitions(rt.handle(hid).transitions, trace), hid
        assert tools.runs["check_secret"] == 2  # once suspending, once with the answer


async def test_durable_resume_in_process(autojump_clock: trio.testing.MockClock) -> None:
    fx = load("subagent-durable-resume")
    tools = Tools()
    model = ScriptedModel(fx["mockLLM"])
    async with open_agent_runtime(registry_of(fx, tools), generate=model) as rt:
        first = await rt.run(fx["run"]["entry"], fx["run"]["prompt"])
        e1 = fx["phase1_expect"]
        assert first.status == e1["status"]
        assert first.pending is not None and first.pending.kind == e1["pendingKind"]
        assert "/".join(first.pending.data["path"]) == e1["pendingDataPathEndsWithin"]
        assert {v.state for v in rt.list() if v.id != "root"} == {e1["allHandles"]}
        leaf = rt.handle("root/approverParent.1/asker.1")
        leaf_tokens = leaf.own_tokens
        # Parked levels burn nothing while they wait.
        calls = model.started
        await trio.sleep(60)
        assert model.started == calls
        # The stored transcripts stay at the pre-turn checkpoint (rewind).
        assert await rt.conversation_store.get(leaf.id) is None

        answer = Answer(first.pending.id, **fx["resume"]["answer"])
        final = await rt.resume(answer)
        e2 = fx["phase2_expect"]
        assert final.status == "done" and "asker-done: secret-token" in final.text
        assert leaf.own_tokens > leaf_tokens  # resumed at its checkpoint: usage grew
        assert tools.runs["check_secret"] == 2  # once per approval, never re-run to suspend
        parent = rt.handle("root/approverParent.1")
        assert [c.id for c in parent.children] == ["root/approverParent.1/asker.1"]
        assert parent.state == e2["finalParentState"]
        for hid, trace in e2["transitions"].items():
            assert same_transitions(rt.handle(hid).transitions, trace), hid
        for needle in e2["traceContains"]:
            assert any(needle in line for line in rt.trace), needle
        # An answer is taken once.
        with pytest.raises(AlreadyAnswered):
            await rt.resume(answer)


async def test_durable_resume_in_a_fresh_runtime(autojump_clock: trio.testing.MockClock) -> None:
    """The snapshot seam: a second runtime on the same store, rebuilt from the first's
    snapshot (as JSON text), resumes the pending tree; the leaf tool runs once more."""
    fx = load("subagent-durable-resume")
    tools = Tools()
    store = InMemoryConversationStore()
    registry = registry_of(fx, tools)
    async with open_agent_runtime(
        registry, generate=ScriptedModel(fx["mockLLM"]), store=store
    ) as first_rt:
        first = await first_rt.run(fx["run"]["entry"], fx["run"]["prompt"])
        saved = json.dumps(first_rt.snapshot())
    assert first.pending is not None
    async with open_agent_runtime(
        registry, generate=ScriptedModel(fx["mockLLM"]), store=store
    ) as rt:
        rt.restore(json.loads(saved))
        final = await rt.resume(Answer(first.pending.id, True))
        assert final.status == "done" and "asker-done: secret-token" in final.text
        for hid, trace in fx["phase2_expect"]["transitions"].items():
            assert same_transitions(rt.handle(hid).transitions, trace), hid
        assert any("task replay → REATTACH" in line for line in rt.trace)
    assert tools.runs["check_secret"] == 2
