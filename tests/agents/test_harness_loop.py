"""The harness (toolnexus 0.15): ``harness``, ``Loop``, the completion gate and guardrails.

Counterparts of toolnexus 0.21's ``test_harness_loop.py`` and the D2 rows of
``test_consumer_issues_86_93.py`` (each peer test named beside ours), plus what the Trio
runtime adds: the gate and the guardrails reach a delegated child, and a verifier that
hangs ends with the run's deadline or cancel. On the virtual clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from toolnexus_trio import (
    Answer,
    CancelToken,
    ClientOptions,
    Hooks,
    InProcessOptions,
    Request,
    RunTimeout,
    ToolContext,
    Toolkit,
    ToolResult,
    define_tool,
    pending,
)
from toolnexus_trio.agents import (
    Budget,
    Completion,
    Verdict,
    agent,
    all_todos_done,
    guarded_hooks,
    harness,
    loop_unsupported,
    open_agent_runtime,
)
from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall
from toolnexus_trio.testing import open_fake_provider

Step = InProcessResponse | Callable[[GenerateRequest], InProcessResponse]


class Script:
    """A model that plays *steps* in order (the last one repeats) and records requests."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.seen: list[GenerateRequest] = []

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        self.seen.append(attrs_copy(request))
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return step(request) if callable(step) else step

    def users(self) -> list[str]:
        """Every distinct user message the model was shown, in order."""
        out: list[str] = []
        for request in self.seen:
            for m in request.messages:
                if m["role"] == "user" and m["content"] not in out:
                    out.append(m["content"])
        return out


def attrs_copy(request: GenerateRequest) -> GenerateRequest:
    # The transcript is live (GenerateRequest's contract): keep a copy.
    return GenerateRequest(request.model, [dict(m) for m in request.messages], None, request.turn)


def call(name: str, args: dict[str, Any] | None = None, cid: str = "c1") -> InProcessResponse:
    return InProcessResponse(tool_calls=(InProcessToolCall(cid, name, args or {}),))


def say(text: str) -> InProcessResponse:
    return InProcessResponse(content=text, usage={"prompt_tokens": 1, "completion_tokens": 1})


def todos(*items: tuple[str, bool], cid: str = "t") -> InProcessResponse:
    plan = [{"id": str(i), "text": t, "completed": done} for i, (t, done) in enumerate(items)]
    return call("todowrite", {"todos": plan}, cid)


TODOWRITE = next(t for t in builtin_tools(BuiltinsConfig()) if t.name == "todowrite")


class Counter:
    """A tool that counts its executions."""

    def __init__(self, name: str = "work") -> None:
        self.entered = 0

        async def run(args: dict[str, Any], ctx: Any) -> str:
            self.entered += 1
            return "worked"

        self.tool = define_tool(name, "does work", {"type": "object"}, run)


def opts(model: Script, **more: Any) -> dict[str, Any]:
    return {"generate": model, "model": "m", **more}


# -- harness and Loop --------------------------------------------------------------------


def test_harness_is_the_spec() -> None:  # peer: test_harness_is_the_spec
    spec = {"does": "checks", "guardrails": [lambda ev: None]}
    assert harness(**spec) == spec
    made = agent("checker", **harness(does="checks"))
    assert made.definition.description == "checks"


async def test_absent_options_unchanged(autojump_clock: trio.testing.MockClock) -> None:
    # peer: test_absent_options_unchanged
    model = Script(say("hello"))
    outcome = await agent("a", does="d").loop(opts(model), Toolkit([])).run("hi")
    assert (outcome.text, outcome.status, outcome.attempts, outcome.stopped_by) == (
        "hello",
        "done",
        1,
        "",
    )
    assert outcome.result.limit is None


async def test_gate_blocks_then_passes(autojump_clock: trio.testing.MockClock) -> None:
    # peer: test_gate_blocks_then_passes
    model = Script(
        todos(("write it", True), ("test it", False)),
        say("finished"),
        todos(("write it", True), ("test it", True), cid="t2"),
        say("really finished"),
    )
    a = agent("a", does="d", completion=Completion(all_todos_done, 3))
    outcome = await a.loop(opts(model), Toolkit([TODOWRITE])).run("build it")
    assert (outcome.status, outcome.attempts, outcome.stopped_by) == ("done", 2, "")
    assert outcome.text == "really finished"
    retry = "Your work did not verify: 1 item(s) still open: test it. Fix it and finish."
    assert model.users() == ["build it", retry]


async def test_unverifiable_run_stops_loudly(autojump_clock: trio.testing.MockClock) -> None:
    # peer: test_unverifiable_run_stops_loudly
    asked: list[int] = []

    def never(result: Any) -> Verdict:
        asked.append(result.turns)
        return Verdict(False, "the tests fail")

    a = agent("a", does="d", completion=Completion(never, 3))
    loop = a.loop(opts(Script(say("done, I think"))), Toolkit([]))
    outcome = await loop.run("fix it")
    message = "completion.verify failed 3x: the tests fail"
    assert (outcome.status, outcome.attempts, outcome.result.limit) == (
        "incomplete",
        3,
        "completion",
    )
    assert outcome.text == message and outcome.stopped_by == message
    assert len(asked) == 3
    assert loop.status == "incomplete"


async def test_a_retry_that_stops_on_a_budget_says_what_was_being_verified(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A non-done run returns as it is, with the gate's note when a retry was under way.
    model = Script(say("done"), call("work"))  # the retry never finishes
    a = agent("a", does="d", completion=Completion(lambda r: Verdict(False, "no tests"), 3))
    outcome = await a.loop(opts(model, max_turns=2), Toolkit([Counter().tool])).run("go")
    assert (outcome.status, outcome.result.limit, outcome.attempts) == (
        "incomplete",
        "maxTurns",
        2,
    )
    assert outcome.text.endswith(" [while verifying: attempt 2 last failed: no tests]")
    assert outcome.stopped_by == "" and outcome.turns == 3


async def test_a_verifier_must_answer_a_verdict(autojump_clock: trio.testing.MockClock) -> None:
    a = agent("a", does="d", completion=Completion(lambda r: "yes", 2))
    loop = a.loop(opts(Script(say("ok"))), None)
    with pytest.raises(TypeError, match=r"completion\.verify returned str, not a Verdict"):
        await loop.run("go")
    assert loop.status == "error"
    b = agent("b", does="d", completion=Completion(lambda r: True, 2))
    assert (await b.loop(opts(Script(say("ok"))), None).run("go")).status == "done"


def test_max_attempts_is_required() -> None:  # peer: test_max_attempts_is_required
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_attempts"):
            Completion(all_todos_done, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_attempts"):
        Completion(all_todos_done)  # type: ignore[call-arg]
    assert Completion(all_todos_done, 1).max_attempts == 1


async def test_no_plan_declared_passes(autojump_clock: trio.testing.MockClock) -> None:
    # peer: test_no_plan_declared_passes
    a = agent("a", does="d", completion=Completion(all_todos_done, 2))
    outcome = await a.loop(opts(Script(say("no plan needed"))), Toolkit([TODOWRITE])).run("hi")
    assert (outcome.status, outcome.attempts) == ("done", 1)
    assert all_todos_done(outcome.result) == Verdict(True)


async def test_gate_judges_accumulated_work(autojump_clock: trio.testing.MockClock) -> None:
    # peer: test_gate_judges_accumulated_work
    seen: list[list[str]] = []

    async def both_tools(result: Any) -> Verdict:  # an async verifier
        names = [c.name for c in result.tool_calls]
        seen.append(names)
        return Verdict({"first", "second"} <= set(names), "call second too")

    model = Script(call("first"), say("one"), call("second", cid="c2"), say("two"))
    tools = Toolkit([Counter("first").tool, Counter("second").tool])
    a = agent("a", does="d", completion=Completion(both_tools, 5))
    outcome = await a.loop(opts(model), tools).run("go")
    assert seen == [["first"], ["first", "second"]]
    assert (outcome.status, outcome.attempts, outcome.turns) == ("done", 2, 4)


# -- guardrails ----------------------------------------------------------------------------


def _event(name: str = "work") -> dict[str, Any]:
    return {"name": name, "args": {}, "id": "c1", "turn": 0, "cancel": CancelToken()}


def test_guardrails_first_deny_wins() -> None:  # peer: test_guardrails_first_deny_wins
    ran: list[str] = []

    def rail(label: str, answer: str | None) -> Callable[[dict[str, Any]], str | None]:
        def check(event: dict[str, Any]) -> str | None:
            ran.append(label)
            return answer

        return check

    hooks = guarded_hooks(
        [rail("a", "allow"), rail("b", None), rail("c", "no shell"), rail("d", "other")]
    )
    assert hooks.before_tool is not None
    out = hooks.before_tool(_event())
    assert out == {"result": ToolResult("denied: no shell", True)}
    assert ran == ["a", "b", "c"]
    assert guarded_hooks([]) == Hooks()


def test_guardrails_run_before_an_existing_hook() -> None:
    # peer: test_guardrails_run_before_an_existing_hook
    order: list[str] = []

    def prior(event: dict[str, Any]) -> dict[str, Any]:
        order.append("hook")
        return {"args": {"rewritten": True}}

    def rail(event: dict[str, Any]) -> str | None:
        order.append("rail")
        return "blocked" if event["name"] == "bad" else None

    hooks = guarded_hooks([rail], Hooks(before_tool=prior))
    assert hooks.before_tool is not None
    assert hooks.before_tool(_event()) == {"args": {"rewritten": True}}
    assert order == ["rail", "hook"]
    order.clear()
    assert hooks.before_tool(_event("bad")) == {"result": ToolResult("denied: blocked", True)}
    assert order == ["rail"]  # a denial ends it: the prior hook does not run


def test_async_guardrail_fails_loudly_instead_of_denying_everything() -> None:
    # peer: test_async_guardrail_fails_loudly_instead_of_denying_everything
    async def coroutine_rail(event: dict[str, Any]) -> str:
        return "allow"

    def int_rail(event: dict[str, Any]) -> Any:
        return 1

    for rail, word in ((coroutine_rail, "coroutine"), (int_rail, "int")):
        hooks = guarded_hooks([rail])
        assert hooks.before_tool is not None
        with pytest.raises(TypeError, match=word) as caught:
            hooks.before_tool(_event())
        assert "before_tool" in str(caught.value)
    with pytest.raises(TypeError, match="callable"):
        guarded_hooks(["allow"])  # type: ignore[list-item]


async def test_a_failing_guardrail_leaves_the_tool_unentered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_async_guardrail_fails_loudly_instead_of_denying_everything (in a run)
    async def coroutine_rail(event: dict[str, Any]) -> str:
        return "allow"

    work = Counter()
    a = agent("a", does="d", guardrails=[coroutine_rail])
    outcome = await a.loop(opts(Script(call("work"), say("ok"))), Toolkit([work.tool])).run("go")
    [record] = outcome.result.tool_calls
    assert record.is_error and "coroutine" in record.output and "before_tool" in record.output
    assert work.entered == 0


def test_guardrails_survive_the_registry_projection() -> None:
    # peer: test_guardrails_survive_the_registry_projection
    child = agent("child", does="c", guardrails=[lambda ev: "not here"])
    lead = agent("lead", does="l", team=[child])
    hooks = lead.registry()["child"].hooks
    assert hooks.before_tool(_event()) == {"result": ToolResult("denied: not here", True)}
    assert lead.registry()["lead"].hooks is None


def test_completion_is_projected_into_the_registry() -> None:
    # peer: test_completion_is_projected_into_the_registry
    gate = Completion(all_todos_done, 2)
    child = agent("child", does="c", completion=gate)
    lead = agent("lead", does="l", team=[child])
    assert lead.registry()["child"].completion is gate
    assert lead.registry()["lead"].completion is None


def _delegating(child_steps: list[InProcessResponse]) -> Callable[[GenerateRequest], Any]:
    """A model for a lead that delegates once to ``child`` and a child playing steps."""
    lead_steps = [call("task", {"agent": "child", "prompt": "do it"}, "d1"), say("lead done")]

    async def generate(request: GenerateRequest) -> InProcessResponse:
        system = request.messages[0]["content"] if request.messages else ""
        steps = lead_steps if system == "LEAD" else child_steps
        return steps.pop(0) if len(steps) > 1 else steps[0]

    return generate


async def test_guardrails_reach_a_delegated_child(autojump_clock: trio.testing.MockClock) -> None:
    work = Counter()
    child = agent("child", does="c", soul="CHILD", uses=[work.tool], guardrails=[lambda e: "no"])
    lead = agent("lead", does="l", soul="LEAD", team=[child])
    result = await lead.run("go", generate=_delegating([call("work"), say("child done")]))
    assert result.status == "done" and work.entered == 0


async def test_the_gate_reaches_a_delegated_child(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[str] = []

    async def lead_model(request: GenerateRequest) -> InProcessResponse:
        tool_messages = [m["content"] for m in request.messages if m["role"] == "tool"]
        if tool_messages:
            seen.extend(tool_messages)
            return say("lead done")
        return call("task", {"agent": "child", "prompt": "do it"}, "d1")

    child_model = Script(say("child done"))

    async def generate(request: GenerateRequest) -> InProcessResponse:
        if request.messages[0]["content"] == "LEAD":
            return await lead_model(request)
        return await child_model(request)

    gate = Completion(lambda r: Verdict(False, "not yet"), 2)
    child = agent("child", does="c", soul="CHILD", completion=gate)
    lead = agent("lead", does="l", soul="LEAD", team=[child])
    result = await lead.run("go", generate=generate)
    assert result.status == "done"
    assert any("completion.verify failed 2x: not yet" in text for text in seen)
    assert "Your work did not verify: not yet. Fix it and finish." in child_model.users()


async def test_a_resumed_run_is_gated_too(autojump_clock: trio.testing.MockClock) -> None:
    async def vault(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="open the vault?"))
        return "opened"

    verdicts: list[tuple[str, list[str]]] = []

    def checked(result: Any) -> Verdict:
        verdicts.append((result.text, [c.output for c in result.tool_calls]))
        return Verdict(result.text == "done, checked", "check it")

    model = Script(call("vault"), say("done"), say("done, checked"))
    gate = Completion(checked, 3)
    a = agent("a", does="d", uses=[define_tool("vault", "v", None, vault)], completion=gate)
    async with open_agent_runtime(a.registry(), generate=model) as rt:
        first = await rt.run("a", "go")
        assert first.status == "pending" and first.pending is not None
        assert verdicts == []
        final = await rt.resume(Answer(first.pending.id, True))
    # The approval did not take the run past the gate: it retried once, then passed.
    assert (final.status, final.text) == ("done", "done, checked")
    assert verdicts == [("done", ["opened"]), ("done, checked", ["opened"])]
    assert "Your work did not verify: check it. Fix it and finish." in model.users()


# -- Loop defaults and state --------------------------------------------------------------


async def test_per_call_model_override_reaches_the_wire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_per_call_model_override_reaches_the_wire
    model = Script(say("ok"))
    loop = agent("a", does="d").loop(opts(model), Toolkit([]))
    first = await loop.run("one", model="big-model")
    await loop.run("two")
    assert [r.model for r in model.seen] == ["big-model", "m"]
    assert first.result.model == "big-model"


async def test_per_call_model_override_reaches_the_http_wire() -> None:
    # peer: test_per_call_model_override_reaches_the_wire (an HTTP model, real sockets)
    script = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    a = agent("a", does="d", soul="SOUL", model="agent-model")
    async with open_fake_provider(script) as provider:
        options = ClientOptions(base_url=provider.base_url, style="openai", model="inherit")
        loop = a.loop(options, None)
        await loop.run("1")
        await loop.run("2", model="per-call")
        await loop.run("3")
    sent = [r.json["model"] for r in provider.requests]
    assert sent == ["agent-model", "per-call", "agent-model"]
    assert provider.requests[0].json["messages"][0] == {"role": "system", "content": "SOUL"}
    assert loop.turns == 3


async def test_turns_accumulate_and_status_is_observed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_turns_accumulate_and_status_is_observed
    statuses: list[str] = []
    holder: list[Any] = []

    def observe(request: GenerateRequest) -> InProcessResponse:
        statuses.append(holder[0].status)
        return say("ok") if request.turn else call("work")

    loop = agent("a", does="d").loop(opts(Script(observe)), Toolkit([Counter().tool]))
    holder.append(loop)
    assert (loop.status, loop.turns) == ("idle", 0)
    assert (await loop.run("one")).turns == 2
    assert (loop.status, loop.turns) == ("idle", 2)
    await loop.run("two")
    assert (loop.status, loop.turns) == ("idle", 4)
    assert set(statuses) == {"running"}


async def test_d2_caller_system_prompt_wins_over_the_soul(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_d2_caller_system_prompt_wins_over_the_soul
    model = Script(say("ok"))
    a = agent("a", does="d", soul="THE SOUL")
    await a.loop(opts(model, system_prompt="THE CALLER"), None).run("hi")
    assert model.seen[0].messages[0] == {"role": "system", "content": "THE CALLER"}


async def test_d2_soul_is_the_default_when_the_caller_sets_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_d2_soul_is_the_default_when_the_caller_sets_none
    for given in (opts(Script(say("ok"))), InProcessOptions(model="m", generate=Script(say("x")))):
        a = agent("a", does="d", soul="THE SOUL")
        loop = a.loop(given, None)
        await loop.run("hi")
        await loop.run("again")  # the history of the first run, not a second soul
        model = given["generate"] if isinstance(given, dict) else given.generate
        messages = model.seen[-1].messages
        assert [m["content"] for m in messages if m["role"] == "system"] == ["THE SOUL"]


async def test_d2_spec_model_and_budget_are_loop_defaults(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # peer: test_d2_spec_model_and_budget_are_loop_defaults
    model = Script(call("work"))  # never finishes: the turn budget ends it
    a = agent("a", does="d", model="agent-model", budget=Budget(max_turns=2))
    loop = a.loop({"generate": model, "model": "inherit"}, Toolkit([Counter().tool]))
    outcome = await loop.run("go")
    assert (outcome.status, outcome.result.limit, outcome.turns) == ("incomplete", "maxTurns", 2)
    assert {r.model for r in model.seen} == {"agent-model"}
    await loop.run("go", model="per-call")
    assert model.seen[-1].model == "per-call"
    # The caller's own model and max_turns win over the agent's.
    mine = Script(call("work"))
    own = a.loop({"generate": mine, "model": "caller", "max_turns": 3}, Toolkit([Counter().tool]))
    assert (await own.run("go")).turns == 3 and mine.seen[0].model == "caller"


def test_d2_loop_unsupported_uses_the_canonical_vocabulary() -> None:
    # peer: test_d2_loop_unsupported_uses_the_canonical_vocabulary
    async def ask(request: Any) -> Any:
        raise AssertionError("not called")

    helper = agent("helper", does="h")
    full = agent(
        "a",
        does="d",
        uses={"tools": [Counter().tool]},
        team=[helper],
        wait_for=ask,
        on_metric=lambda event: None,
    )
    assert loop_unsupported(full) == ["tools", "team", "waitFor", "onMetric"]
    assert loop_unsupported(agent("b", does="d", team=[helper])) == ["team"]
    assert loop_unsupported(helper) == []


async def test_d2_a_denied_tool_is_never_entered(autojump_clock: trio.testing.MockClock) -> None:
    # peer: test_d2_a_denied_tool_is_never_entered
    work = Counter()
    a = agent("a", does="d", guardrails=[lambda ev: "allow", lambda ev: "read only"])
    outcome = await a.loop(opts(Script(call("work"), say("ok"))), Toolkit([work.tool])).run("go")
    assert work.entered == 0
    [record] = outcome.result.tool_calls
    assert (record.output, record.is_error) == ("denied: read only", True)
    # The caller's own hooks replace the agent's, but never its guardrails.
    prior_ran: list[str] = []
    loop = a.loop(
        opts(Script(call("work"), say("ok")), hooks=Hooks(before_tool=prior_ran.append)),
        Toolkit([work.tool]),
    )
    await loop.run("go")
    assert work.entered == 0 and prior_ran == []


# -- bounded by the run's deadline and cancel --------------------------------------------


async def _hang(result: Any) -> Verdict:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def test_a_hanging_verifier_ends_at_the_run_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = agent("a", does="d", completion=Completion(_hang, 2))
    loop = a.loop(opts(Script(say("ok")), run_timeout_ms=5000), None)
    started = trio.current_time()
    with pytest.raises(RunTimeout, match="run timeout after 5000ms") as caught:
        await loop.run("go")
    assert trio.current_time() - started == pytest.approx(5.0)
    assert (caught.value.result.status, caught.value.result.limit) == ("incomplete", "runTimeout")
    assert loop.status == "error"


async def test_a_hanging_verifier_ends_with_the_run_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    token = CancelToken()
    a = agent("a", does="d", completion=Completion(_hang, 2))
    loop = a.loop(opts(Script(say("ok"))), None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _cancel_later(token))
        outcome = await loop.run("go", cancel=token)
    assert (outcome.status, outcome.attempts) == ("cancelled", 1)
    assert loop.status == "cancelled"


async def _cancel_later(token: CancelToken) -> None:
    await trio.sleep(3)
    token.cancel("stop")


async def test_a_hanging_verifier_in_a_runtime_ends_at_the_wall_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a = agent("a", does="d", completion=Completion(_hang, 2), budget=Budget(max_wall_ms=2000))
    result = await a.run("go", generate=Script(say("ok")))
    assert (result.status, result.limit) == ("incomplete", "maxWallMs")


# -- uses= -------------------------------------------------------------------------------


def test_uses_takes_a_list_or_the_peers_tools_dict() -> None:
    work = Counter()
    assert agent("a", does="d", uses={"tools": [work.tool]}).definition.tools == [work.tool]
    assert agent("a", does="d", uses=(work.tool,)).definition.tools == [work.tool]
    with pytest.raises(ValueError, match="unknown keys: mcp"):
        agent("a", does="d", uses={"tools": [], "mcp": []})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"uses\['tools'\]\[0\] is a str, not a Tool"):
        agent("a", does="d", uses={"tools": ["work"]})  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not str"):
        agent("a", does="d", uses="work")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not Toolkit"):
        agent("a", does="d", uses=Toolkit([]))  # type: ignore[arg-type]


async def test_a_loop_runs_one_prompt_at_a_time(autojump_clock: trio.testing.MockClock) -> None:
    gate = trio.Event()

    async def slow(request: GenerateRequest) -> InProcessResponse:
        await gate.wait()
        return say("ok")

    loop = agent("a", does="d").loop({"generate": slow, "model": "m"}, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop.run, "one")
        await trio.sleep(1)
        with pytest.raises(RuntimeError, match="one prompt at a time"):
            await loop.run("two")
        gate.set()
    assert (loop.status, loop.turns) == ("idle", 1)
