"""The runtime beyond the fixtures: live budgets, ``on_budget``, the verbs' edge
contracts, errors at the handle boundary and the Level-1 surface (virtual clock)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from toolnexus_trio import Answer, ClientOptions, Request, ToolContext, define_tool
from toolnexus_trio.agents import (
    LIMIT_MAX_DEPTH,
    LIMIT_MAX_TOKENS,
    LIMIT_MAX_TOOL_CALLS,
    LIMIT_MAX_WALL_MS,
    AgentDef,
    Budget,
    BudgetInfo,
    SpawnError,
    agent,
    open_agent_runtime,
)
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.testing import open_fake_provider

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}


class Model:
    """Calls the tool *tool* with *args* ``calls`` times per turn until it has *rounds*
    tool messages, then answers ``"ok"``; each call costs 40 tokens."""

    def __init__(self, tool: str = "work", rounds: int = 1_000, calls: int = 1) -> None:
        self.tool, self.rounds, self.calls = tool, rounds, calls
        self.started = 0

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        self.started += 1
        await trio.sleep(0.001)
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if request.model == "m-fail":
            raise RuntimeError("the model is down")
        if done >= self.rounds:
            return InProcessResponse(content="ok", usage=USAGE)
        calls = tuple(InProcessToolCall(f"c{done}_{i}", self.tool, {}) for i in range(self.calls))
        return InProcessResponse(tool_calls=calls, usage=USAGE)


def _work(seconds: float = 0) -> Any:
    runs: list[float] = []

    async def work(args: dict[str, Any], ctx: ToolContext) -> str:
        runs.append(trio.current_time())
        await trio.sleep(seconds)
        return "worked"

    tool = define_tool("work", "does work", None, work)
    return tool, runs


def _def(name: str = "a", **kw: Any) -> AgentDef:
    return AgentDef(name, f"{name} does things", f"you are {name}", kw.pop("model", "m"), **kw)


async def test_a_five_second_tool_under_max_wall_ms_300_is_incomplete_at_300ms(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, runs = _work(5)
    model = Model()
    registry = {"a": _def(tools=[tool], budget=Budget(max_wall_ms=300))}
    async with open_agent_runtime(registry, generate=model) as rt:
        start = trio.current_time()
        result = await rt.run("a", "go")
        elapsed = trio.current_time() - start
    assert (result.status, result.limit) == ("incomplete", LIMIT_MAX_WALL_MS)
    assert elapsed == pytest.approx(0.3)
    assert model.started == 1 and len(runs) == 1


async def test_max_tokens_stops_after_the_first_response_that_overspends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # toolnexus 0.21 measured: max_tokens=30 finished "done" after 80 tokens.
    tool, runs = _work()
    model = Model(rounds=1)
    async with open_agent_runtime(
        {"a": _def(tools=[tool], budget=Budget(max_tokens=30))}, generate=model
    ) as rt:
        result = await rt.run("a", "go")
    assert (result.status, result.limit) == ("incomplete", LIMIT_MAX_TOKENS)
    assert result.total_tokens == 40
    assert model.started == 1 and runs == []  # no tool, no second call after the limit


async def test_max_tool_calls_is_checked_before_each_tool_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, runs = _work(1)
    model = Model(calls=3)
    async with open_agent_runtime(
        {"a": _def(tools=[tool], budget=Budget(max_tool_calls=2))}, generate=model
    ) as rt:
        result = await rt.run("a", "go")
        stored = await rt.conversation_store.get("root/a.1")
    assert (result.status, result.limit) == ("incomplete", LIMIT_MAX_TOOL_CALLS)
    assert len(runs) == 2 and model.started == 1
    # The partial transcript is kept and balanced: one tool message per call.
    assert stored is not None
    assert [m["role"] for m in stored].count("tool") == 3


async def test_a_sibling_spend_counts_against_the_live_pool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, _ = _work()
    model = Model(rounds=1)
    registry = {"lead": _def("lead"), "w": _def("w", tools=[tool])}
    async with open_agent_runtime(registry, generate=model) as rt:
        lead = rt.spawn(rt.root, "lead", Budget(max_tokens=100))
        one, two = rt.spawn(lead, "w"), rt.spawn(lead, "w")
        assert one.budget.max_tokens == two.budget.max_tokens == 100
        rt.wake(one, "go")
        assert (await rt.wait(one)).status == "done"  # 80 of the pool
        rt.wake(two, "go")
        second = await rt.wait(two)  # its carve said 100; the pool has 20
        assert (second.status, second.limit) == ("incomplete", LIMIT_MAX_TOKENS)
        with pytest.raises(SpawnError) as refused:
            rt.spawn(lead, "w")
        assert refused.value.limit == LIMIT_MAX_TOKENS


@pytest.mark.parametrize("verdict", ["extend", "stop"])
async def test_on_budget_extends_or_stops(
    autojump_clock: trio.testing.MockClock, verdict: str
) -> None:
    tool, _ = _work()
    asked: list[BudgetInfo] = []

    def on_budget(info: BudgetInfo) -> Any:
        asked.append(info)
        return verdict

    registry = {"a": _def(tools=[tool], budget=Budget(max_tokens=30), on_budget=on_budget)}
    async with open_agent_runtime(registry, generate=Model(rounds=1)) as rt:
        result = await rt.run("a", "go")
    assert asked[0] == BudgetInfo("root/a.1", LIMIT_MAX_TOKENS, 40, 30)
    assert result.status == ("done" if verdict == "extend" else "incomplete")


@pytest.mark.parametrize("ok", [True, False])
async def test_on_budget_suspend_asks_the_nearest_wait_for(
    autojump_clock: trio.testing.MockClock, ok: bool
) -> None:
    tool, _ = _work()
    asked: list[Request] = []

    async def approve(request: Request) -> Answer:
        asked.append(request)
        return Answer(request.id, ok)

    registry = {
        "lead": _def("lead", wait_for=approve),
        "a": _def(tools=[tool], budget=Budget(max_tokens=30), on_budget=lambda i: "suspend"),
    }
    async with open_agent_runtime(registry, generate=Model(rounds=1)) as rt:
        lead = rt.spawn(rt.root, "lead")
        child = rt.spawn(lead, "a")
        rt.wake(child, "go")
        result = await rt.wait(child)
    assert asked[0].kind == "approval" and asked[0].data is not None
    assert asked[0].data["path"] == ["root", "lead.1", "a.1"]
    assert result.status == ("done" if ok else "incomplete")


async def test_max_depth_and_unknown_defs_are_refused_at_spawn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = {"a": _def(budget=Budget(max_depth=1))}
    async with open_agent_runtime(registry, generate=Model()) as rt:
        top = rt.spawn(rt.root, "a")
        child = rt.spawn(top, "a")
        with pytest.raises(SpawnError) as refused:
            rt.spawn(child, "a")
        assert refused.value.limit == LIMIT_MAX_DEPTH
        with pytest.raises(SpawnError, match="unknown agent 'b'"):
            rt.spawn(top, "b")
        assert [v.id for v in rt.list()] == ["root", "root/a.1", "root/a.1/a.1"]


async def test_wait_timeout_is_explicit_and_the_child_keeps_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, _ = _work(10)
    async with open_agent_runtime({"a": _def(tools=[tool])}, generate=Model(rounds=1)) as rt:
        h = rt.spawn(rt.root, "a")
        rt.wake(h, "go")
        early = await rt.wait(h, timeout_ms=500)
        assert early.status == "timeout" and rt.inspect(h).state == "running"
        late = await rt.wait(h)
        assert late.status == "done"
        assert await rt.wait(h) is late  # a settled handle answers at once


async def test_wake_is_loud_and_interrupting_a_suspended_handle_cancels_its_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        from toolnexus_trio import pending

        return pending(Request(kind="approval", prompt="may I?"))

    asker = define_tool("work", "asks", None, ask)
    async with open_agent_runtime({"a": _def(tools=[asker])}, generate=Model()) as rt:
        h = rt.spawn(rt.root, "a")
        assert not rt.wake(h).ok  # nothing to do
        rt.wake(h, "go")
        busy = rt.wake(h, "again")
        assert not busy.ok and busy.error is not None and "running" in busy.error
        first = await rt.wait(h)
        assert first.status == "pending" and h.state == "suspended"
        rt.interrupt(h)
        assert h.state == "idle" and h.pending is None
        assert (await rt.wait(h)).status == "interrupted"
        assert h.transitions == ["idle→running", "running→suspended", "suspended→idle"]
        with pytest.raises(LookupError):
            await rt.resume(Answer(first.pending.id if first.pending else "", True))


async def test_close_gives_a_running_turn_shutdown_ms_then_interrupts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, _ = _work(60)
    reasons: list[str] = []
    registry = {"a": _def(tools=[tool], on_close=lambda h, r: reasons.append(r))}
    async with open_agent_runtime(registry, generate=Model(), shutdown_ms=200) as rt:
        h = rt.spawn(rt.root, "a")
        rt.wake(h, "go")
        await trio.sleep(1)
        start = trio.current_time()
        await rt.close(h, reason="done for today")
        assert trio.current_time() - start == pytest.approx(0.2)
        assert h.state == "closed" and reasons == ["done for today"]
        assert (await rt.wait(h)).status == "closed"
        assert not rt.wake(h, "more").ok


async def test_a_failed_child_is_an_error_result_to_its_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def parent_model(request: GenerateRequest) -> InProcessResponse:
        tools = [m for m in request.messages if m.get("role") == "tool"]
        if request.model == "m-fail":
            raise RuntimeError("the model is down")
        if not tools:
            call = InProcessToolCall("t", "task", {"agent": "broken", "prompt": "x"})
            return InProcessResponse(tool_calls=(call,))
        return InProcessResponse(content=f"parent saw: {tools[0]['content']}")

    lead = agent("lead", does="leads", team=[agent("broken", does="fails", model="m-fail")])
    result = await lead.run("go", generate=parent_model)
    assert result.status == "done"
    assert "parent saw: error: generate raised RuntimeError: the model is down" in result.text
    # Only the root raises to the host.
    with pytest.raises(Exception, match="the model is down"):
        await agent("broken", does="fails", model="m-fail").run("go", generate=parent_model)


async def test_level_one_agent_run_and_as_tool(autojump_clock: trio.testing.MockClock) -> None:
    tool, runs = _work()
    helper = agent("helper", does="helps", uses=[tool])
    lead = agent("lead", does="leads", soul="You lead.", team=[helper])
    assert sorted(lead.registry()) == ["helper", "lead"]
    assert lead.definition.task_targets == ["helper"]
    result = await helper.run("go", generate=Model(rounds=1))
    assert (result.status, result.text, result.turns) == ("done", "ok", 2)
    as_tool = helper.as_tool(generate=Model(rounds=1))
    assert as_tool.name == "helper" and as_tool.description == "helps"
    out = await as_tool.call({"prompt": "go"})
    assert out.output == "ok" and out.metadata is not None
    assert out.metadata["agent"] == "helper" and out.metadata["totalTokens"] == 80
    assert len(runs) == 2


async def test_wait_idle_returns_when_a_turn_ends(autojump_clock: trio.testing.MockClock) -> None:
    tool, _ = _work(3)
    async with open_agent_runtime({"a": _def(tools=[tool])}, generate=Model(rounds=1)) as rt:
        h = rt.spawn(rt.root, "a")
        assert await rt.wait_idle(h) == "idle"
        rt.wake(h, "go")
        start = trio.current_time()
        assert await rt.wait_idle(h) == "idle"
        assert trio.current_time() - start >= 3


async def test_an_llm_runtime_talks_to_a_real_http_model(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    """``llm=ClientOptions``: each agent's client on the real wire (FakeProvider); a def's
    model overrides the options' model, ``"inherit"`` keeps it; a stall is interrupted
    mid-request."""
    script = [
        {"tool_calls": [{"name": "task", "arguments": {"agent": "helper", "prompt": "x"}}]},
        {"text": "helped"},
        {"text": "lead: done"},
        {"stall": True},
    ]
    helper = agent("helper", does="helps")
    lead = agent("lead", does="leads", model="m-lead", team=[helper])
    async with open_fake_provider(script) as provider:
        options = ClientOptions(
            base_url=provider.base_url, style="openai", model="m-base", api_key="k"
        )
        async with open_agent_runtime(lead.registry(), llm=options) as rt:
            result = await rt.run("lead", "go")
            assert (result.status, result.text) == ("done", "lead: done")
            assert [r.json["model"] for r in provider.requests] == ["m-lead", "m-base", "m-lead"]
            stalled = rt.spawn(rt.root, "helper")
            rt.wake(stalled, "stall")
            await trio.sleep(1)
            rt.interrupt(stalled)
            assert (await rt.wait(stalled)).status == "interrupted"


class ThreeLevels:
    """lead → mid → leaf: each level delegates once with ``task``; the leaf's tool asks."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        self.calls[request.model] = self.calls.get(request.model, 0) + 1
        tools = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
        if tools:
            return InProcessResponse(content=f"{request.model}<{tools[-1]}>")
        if request.model == "m-leaf":
            return InProcessResponse(tool_calls=(InProcessToolCall("s", "secret", {}),))
        target = {"m-lead": "mid", "m-mid": "leaf"}[request.model]
        call = InProcessToolCall("t", "task", {"agent": target, "prompt": "do it"})
        return InProcessResponse(tool_calls=(call,))


def _three(wait_for: Any = None) -> tuple[Any, list[int]]:
    runs: list[int] = []

    async def secret(args: dict[str, Any], ctx: ToolContext) -> Any:
        from toolnexus_trio import pending

        runs.append(1)
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="open the vault?"))
        return "token"

    leaf = agent(
        "leaf", does="asks", model="m-leaf", uses=[define_tool("secret", "s", None, secret)]
    )
    mid = agent("mid", does="relays", model="m-mid", team=[leaf])
    lead = agent("lead", does="leads", model="m-lead", team=[mid], wait_for=wait_for)
    return lead, runs


async def test_escalation_is_strictly_one_hop_per_level(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked: list[Request] = []

    async def approve(request: Request) -> Answer:
        asked.append(request)
        return Answer(request.id, True)

    lead, runs = _three(approve)
    model = ThreeLevels()
    async with open_agent_runtime(lead.registry(), generate=model) as rt:
        result = await rt.run("lead", "go")
        mid = rt.handle("root/lead.1/mid.1")
        leaf = rt.handle("root/lead.1/mid.1/leaf.1")
        # The relaying level (mid) stamped its own path; the interpreter is lead's.
        assert [r.data["path"] for r in asked if r.data] == [["root", "lead.1", "mid.1"]]
        assert mid.transitions[:4] == [
            "idle→running", "running→suspended", "suspended→running", "running→idle",
        ]  # fmt: skip
        assert leaf.transitions[:4] == mid.transitions[:4]
        assert rt.handle("root/lead.1").transitions == ["idle→running", "running→idle"]
    assert result.text == "m-lead<m-mid<m-leaf<token>>>"
    assert len(runs) == 2
    assert model.calls == {"m-lead": 2, "m-mid": 2, "m-leaf": 2}  # parked levels: 0 calls


async def test_a_three_level_pending_tree_resumes_from_the_root(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lead, runs = _three()
    model = ThreeLevels()
    async with open_agent_runtime(lead.registry(), generate=model) as rt:
        first = await rt.run("lead", "go")
        assert first.status == "pending" and first.pending is not None
        assert first.pending.data == {"path": ["root", "lead.1"]}
        assert {v.state for v in rt.list() if v.id != "root"} == {"suspended"}
        final = await rt.resume(Answer(first.pending.id, True))
        assert final.text == "m-lead<m-mid<m-leaf<token>>>"
        for hid in ("root/lead.1", "root/lead.1/mid.1", "root/lead.1/mid.1/leaf.1"):
            assert rt.handle(hid).transitions[:5] == [
                "idle→running", "running→suspended", "suspended→idle", "idle→running",
                "running→idle",
            ], hid  # fmt: skip
        assert [line.split(": ")[1] for line in rt.trace] == [
            "task replay → REATTACH root/lead.1/mid.1/leaf.1",
            "task replay → REATTACH root/lead.1/mid.1",
        ]
    assert len(runs) == 2


@pytest.mark.parametrize("ok", [True, False])
async def test_on_budget_suspend_without_an_interpreter_is_pending_at_the_root(
    autojump_clock: trio.testing.MockClock, ok: bool
) -> None:
    tool, runs = _work()
    worker = agent(
        "worker",
        does="works",
        uses=[tool],
        budget=Budget(max_tokens=30),
        on_budget=lambda info: "suspend",
    )
    lead = agent("lead", does="leads", model="m-lead", team=[worker])

    async def model(request: GenerateRequest) -> InProcessResponse:
        tools = [m for m in request.messages if m.get("role") == "tool"]
        if request.model == "m-lead":
            if tools:
                return InProcessResponse(content=f"lead<{tools[-1]['content']}>")
            call = InProcessToolCall("t", "task", {"agent": "worker", "prompt": "go"})
            return InProcessResponse(tool_calls=(call,))
        return await Model(rounds=1)(request)

    async with open_agent_runtime(lead.registry(), generate=model) as rt:
        first = await rt.run("lead", "go")
        assert first.status == "pending" and first.pending is not None
        assert first.pending.kind == "approval"
        assert first.pending.data == {"limit": LIMIT_MAX_TOKENS, "path": ["root", "lead.1"]}
        assert runs == []  # stopped before its tool
        final = await rt.resume(Answer(first.pending.id, ok))
    if ok:
        assert (final.status, final.text) == ("done", "lead<ok>")
        assert len(runs) == 1
    else:
        # §10: a declined answer reaches the parent's task call as "declined/expired".
        assert final.status == "done"
        assert final.text.startswith("lead<declined/expired: root/lead.1/worker.1 reached")
        assert runs == []


async def test_the_same_task_twice_in_one_turn_reattaches_instead_of_spawning_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool, runs = _work(1)
    helper = agent("helper", does="helps", uses=[tool])
    lead = agent("lead", does="leads", model="m-lead", team=[helper])

    async def model(request: GenerateRequest) -> InProcessResponse:
        tools = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
        if request.model == "m-lead":
            if tools:
                return InProcessResponse(content=" | ".join(tools))
            same = {"agent": "helper", "prompt": "same"}
            calls = (InProcessToolCall("a", "task", same), InProcessToolCall("b", "task", same))
            return InProcessResponse(tool_calls=calls)
        return await Model(rounds=1)(request)

    async with open_agent_runtime(lead.registry(), generate=model) as rt:
        result = await rt.run("lead", "go")
        assert [c.id for c in rt.handle("root/lead.1").children] == ["root/lead.1/helper.1"]
        assert any("REATTACH root/lead.1/helper.1" in line for line in rt.trace)
    assert result.text == "ok | ok"
    assert len(runs) == 1
