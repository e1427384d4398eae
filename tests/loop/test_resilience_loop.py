"""Resilience of the agent loop: every fault ends the run clearly, and nothing is left running.

One parametrized test drives each fault scenario through :meth:`Client.run` and through
:meth:`Client.stream`, under ``autojump_clock`` (virtual time, so a hang would be seen as
a jump to the guard's deadline, not as a slow test). For every scenario it checks:

- no hang: the run ends inside ``trio.fail_after``, at the exact virtual instant the
  scenario predicts (a timeout fires at its deadline, everything else at t=0);
- a clear outcome: the exact exception (type, message, ``__cause__``) or result (status,
  limit, text, the tool message of every call);
- a balanced transcript (every tool call has its tool message, in call order, and the
  records agree), also on the partial transcript an exception carries;
- no task outlives the run: the task tree is walked (``TaskCensus``) right after the run
  returns or raises, before anything else gets a chance to clean up.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers import TaskCensus
from test_loop import call, client, scripted, tool_messages, toolkit_of

from toolnexus_trio import (
    Answer,
    CancelToken,
    GenerateError,
    GenerateRequest,
    HookError,
    Hooks,
    InProcessResponse,
    InProcessToolCall,
    Request,
    RunResult,
    RunTimeout,
    Tool,
    ToolContext,
    ToolResult,
    ToolSource,
    define_tool,
    empty_schema,
    pending,
)

# -- scenario plumbing ----------------------------------------------------------------------


@attrs.frozen
class Expect:
    """What a scenario must end with.

    ``error``/``match``/``cause``: the exception :meth:`Client.run` raises (``cause`` is
    the type of its ``__cause__``; ``NoCause`` means it must have none). ``status``,
    ``limit``, ``text``, ``turns`` and ``tools`` (``(call id, tool message)`` in order)
    describe the result, or the partial result the exception carries. ``at`` is the
    virtual time at which the run must have ended.
    """

    error: type[BaseException] | None = None
    match: str | None = None
    cause: type[BaseException] | None = None
    status: str | None = None
    limit: str | None = None
    text: str | None = None
    turns: int | None = None
    tools: list[tuple[str, str]] | None = None
    at: float = 0.0


class NoCause(Exception):
    """Marker for :attr:`Expect.cause`: the error must not chain another exception."""


@attrs.frozen
class Scenario:
    """Client options (``generate`` included), the tools, the expectation.

    ``tools=None`` runs without a toolkit. ``host`` runs beside the run (it gets the
    run's cancel token); ``finalize`` runs after the checks (e.g. to free a thread).
    ``threaded`` scenarios run ``generate`` in a worker thread: the clock then jumps only
    after 100 ms of real idleness, so it does not jump while the thread is still working.
    """

    options: dict[str, Any]
    tools: tuple[Tool, ...] | None
    expect: Expect
    host: Callable[[CancelToken], Awaitable[None]] | None = None
    finalize: Callable[[], None] | None = None
    threaded: bool = False


def native(name: str, fn: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]) -> Tool:
    return define_tool(name, "", None, fn)


def raw(name: str, execute: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]) -> Tool:
    return Tool(name, "", empty_schema(), ToolSource.CUSTOM, execute)


def one_turn(*calls: InProcessToolCall) -> Callable[[GenerateRequest], Any]:
    """A model that makes *calls* once, then answers "done"."""
    return scripted(InProcessResponse(tool_calls=list(calls)))


async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def hang_hook(event: dict[str, Any]) -> None:
    await trio.sleep_forever()


async def quick(args: dict[str, Any], ctx: ToolContext) -> str:
    return "quick"


async def ask(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Suspends on an approval until the loop re-runs it with an answer."""
    if ctx.answer is None:
        return pending(Request(id="req-1", kind="approval", prompt="Proceed?"))
    return ToolResult.ok(f"answered {ctx.answer.ok}")


def raise_(exc: BaseException) -> Callable[..., Any]:
    def fn(*args: Any) -> Any:
        raise exc

    return fn


def araise(exc: BaseException) -> Callable[..., Awaitable[Any]]:
    async def fn(*args: Any) -> Any:
        await trio.lowlevel.checkpoint()
        raise exc

    return fn


# -- the scenarios --------------------------------------------------------------------------


def hung_tool_under_run_timeout() -> Scenario:
    # The quick sibling's result survives the timeout; the hung call is "cancelled".
    gen = one_turn(call("hang", id="c1"), call("quick", id="c2"))
    return Scenario(
        {"generate": gen, "run_timeout_ms": 2000},
        (native("hang", hang), native("quick", quick)),
        Expect(RunTimeout, "run timeout after 2000ms", status="incomplete", limit="runTimeout",
               turns=1, tools=[("c1", "cancelled"), ("c2", "quick")], at=2.0),
    )  # fmt: skip


def hung_tool_under_tool_timeout() -> Scenario:
    gen = one_turn(call("hang", id="c1"), call("quick", id="c2"))
    return Scenario(
        {"generate": gen, "tool_timeout_ms": 300, "run_timeout_ms": 5000},
        (native("hang", hang), native("quick", quick)),
        Expect(status="done", text="done", turns=2,
               tools=[("c1", "timed out after 300ms"), ("c2", "quick")], at=0.3),
    )  # fmt: skip


def hung_raw_tool_under_run_timeout() -> Scenario:
    return Scenario(
        {"generate": one_turn(call("hang", id="c1")), "run_timeout_ms": 700},
        (raw("hang", hang),),
        Expect(RunTimeout, "run timeout after 700ms", status="incomplete", limit="runTimeout",
               tools=[("c1", "cancelled")], at=0.7),
    )  # fmt: skip


def run_cancelled_mid_tool() -> Scenario:
    started = trio.Event()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def host(cancel: CancelToken) -> None:
        await started.wait()
        cancel.cancel("user pressed stop")

    return Scenario(
        {"generate": one_turn(call("slow", id="c1"), call("slow", id="c2"))},
        (native("slow", slow),),
        Expect(status="cancelled", text="", turns=1,
               tools=[("c1", "cancelled"), ("c2", "cancelled")]),
        host=host,
    )  # fmt: skip


def turn_cancelled_mid_tool() -> Scenario:
    # A tool cancels its own turn: the whole turn ends, the run goes on to the answer.
    async def quitter(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(0.5)
        ctx.cancel.cancel("enough")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return Scenario(
        {"generate": one_turn(call("quitter", id="c1"), call("hang", id="c2"))},
        (native("quitter", quitter), native("hang", hang)),
        Expect(status="done", text="done", turns=2,
               tools=[("c1", "cancelled"), ("c2", "cancelled")], at=0.5),
    )  # fmt: skip


def raw_tool_execute_raises() -> Scenario:
    async def group(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ExceptionGroup("many", [ValueError("first"), KeyError("second")])

    return Scenario(
        {"generate": one_turn(call("boom", id="c1"), call("bare", id="c2"),
                              call("group", id="c3"), call("quick", id="c4"))},
        (raw("boom", araise(RuntimeError("kaboom"))), raw("bare", raise_(ValueError())),
         raw("group", group), native("quick", quick)),
        Expect(status="done", text="done", turns=2,
               tools=[("c1", "kaboom"), ("c2", "ValueError"), ("c3", "first; 'second'"),
                      ("c4", "quick")]),
    )  # fmt: skip


def raw_tool_returns_garbage() -> Scenario:
    async def junk(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {"not": "a ToolResult"}

    return Scenario(
        {"generate": one_turn(call("junk", id="c1"))},
        (raw("junk", junk),),
        Expect(status="done", text="done",
               tools=[("c1", "tool 'junk' returned dict, not a ToolResult")]),
    )  # fmt: skip


def wait_for_hangs() -> Scenario:
    async def never(req: Request) -> Answer:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return Scenario(
        {"generate": one_turn(call("ask", id="c1")), "wait_for": never, "run_timeout_ms": 1500},
        (native("ask", ask),),
        Expect(RunTimeout, "run timeout after 1500ms", status="incomplete", limit="runTimeout",
               tools=[("c1", "cancelled")], at=1.5),
    )  # fmt: skip


def wait_for_raises() -> Scenario:
    return Scenario(
        {"generate": one_turn(call("ask", id="c1"), call("quick", id="c2")),
         "wait_for": araise(ConnectionError("approval service down"))},
        (native("ask", ask), native("quick", quick)),
        Expect(status="done", text="done",
               tools=[("c1", "wait_for failed: approval service down"), ("c2", "quick")]),
    )  # fmt: skip


def wait_for_returns_garbage() -> Scenario:
    # Not an Answer: contained as that call's error.
    async def garbage(req: Request) -> Any:
        return "yes please"

    return Scenario(
        {"generate": one_turn(call("ask", id="c1"), call("quick", id="c2")), "wait_for": garbage},
        (native("ask", ask), native("quick", quick)),
        Expect(status="done", text="done",
               tools=[("c1", "wait_for returned str, not an Answer"), ("c2", "quick")]),
    )  # fmt: skip


def before_tool_hook_raises() -> Scenario:
    return Scenario(
        {"generate": one_turn(call("quick", id="c1")),
         "hooks": Hooks(before_tool=raise_(PermissionError("policy says no")))},
        (native("quick", quick),),
        Expect(status="done", text="done",
               tools=[("c1", "before_tool hook failed: policy says no")]),
    )  # fmt: skip


def after_tool_hook_raises() -> Scenario:
    return Scenario(
        {"generate": one_turn(call("quick", id="c1")),
         "hooks": Hooks(after_tool=araise(ValueError("redactor broke")))},
        (native("quick", quick),),
        Expect(status="done", text="done",
               tools=[("c1", "after_tool hook failed: redactor broke")]),
    )  # fmt: skip


def before_tool_hook_hangs() -> Scenario:
    return Scenario(
        {"generate": one_turn(call("quick", id="c1")), "run_timeout_ms": 900,
         "hooks": Hooks(before_tool=hang_hook)},
        (native("quick", quick),),
        Expect(RunTimeout, "run timeout after 900ms", status="incomplete", limit="runTimeout",
               tools=[("c1", "cancelled")], at=0.9),
    )  # fmt: skip


def before_llm_hook_raises() -> Scenario:
    def before_llm(event: dict[str, Any]) -> None:
        raise RuntimeError("quota check failed")

    return Scenario(
        {"generate": one_turn(call("quick", id="c1")), "hooks": Hooks(before_llm=before_llm)},
        (native("quick", quick),),
        Expect(HookError, "LLM hook before_llm failed: quota check failed", RuntimeError,
               turns=0, tools=[]),
    )  # fmt: skip


def after_llm_hook_raises_on_turn_two() -> Scenario:
    async def after_llm(event: dict[str, Any]) -> None:
        if event["turn"] == 1:
            raise LookupError("audit log full")

    return Scenario(
        {"generate": one_turn(call("quick", id="c1")), "hooks": Hooks(after_llm=after_llm)},
        (native("quick", quick),),
        Expect(HookError, "LLM hook after_llm failed: audit log full", LookupError,
               turns=2, tools=[("c1", "quick")]),
    )  # fmt: skip


def generate_raises() -> Scenario:
    replies = iter([InProcessResponse(tool_calls=[call("quick", id="c1")])])

    async def flaky(req: GenerateRequest) -> InProcessResponse:
        for reply in replies:
            return reply
        raise ConnectionRefusedError("model server down")

    return Scenario(
        {"generate": flaky},
        (native("quick", quick),),
        Expect(GenerateError, "generate raised ConnectionRefusedError: model server down",
               ConnectionRefusedError, turns=1, tools=[("c1", "quick")]),
    )  # fmt: skip


def sync_generate_raises() -> Scenario:
    # A plain function runs in a worker thread; its exception still becomes __cause__.
    return Scenario(
        {"generate": raise_(OSError("socket reset"))},
        None,
        Expect(GenerateError, "generate raised OSError: socket reset", OSError,
               turns=0, tools=[]),
        threaded=True,
    )  # fmt: skip


def generate_hangs() -> Scenario:
    async def slow(req: GenerateRequest) -> InProcessResponse:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return Scenario(
        {"generate": slow, "run_timeout_ms": 400},
        None,
        Expect(RunTimeout, "run timeout after 400ms", status="incomplete", limit="runTimeout",
               turns=0, tools=[], at=0.4),
    )  # fmt: skip


def sync_generate_hangs_in_a_thread() -> Scenario:
    # The worker thread cannot be interrupted: the run abandons it at the deadline.
    release = threading.Event()

    def blocked(req: GenerateRequest) -> InProcessResponse:
        release.wait(timeout=30)
        return InProcessResponse(content="late")

    return Scenario(
        {"generate": blocked, "run_timeout_ms": 250},
        None,
        Expect(RunTimeout, "run timeout after 250ms", status="incomplete", limit="runTimeout",
               turns=0, tools=[], at=0.25),
        finalize=release.set,
        threaded=True,
    )  # fmt: skip


def garbage_scenario(garbage: Any, match: str) -> Callable[[], Scenario]:
    def make() -> Scenario:
        async def bad(req: GenerateRequest) -> Any:
            return garbage

        return Scenario(
            {"generate": bad},
            (native("quick", quick),),
            Expect(GenerateError, match, NoCause, turns=0, tools=[]),
        )

    make.__name__ = f"generate_returns_{type(garbage).__name__}"
    return make


def generate_calls_an_unknown_tool() -> Scenario:
    gen = one_turn(call("x", id="c1"), call("quick", id="c2"), call("quick", "{oops", "c3"))
    return Scenario(
        {"generate": gen},
        (native("quick", quick),),
        Expect(status="done", text="done", turns=2,
               tools=[("c1", "Unknown tool: x"), ("c2", "quick"),
                      ("c3", "Invalid JSON arguments: Expecting property name enclosed in "
                             "double quotes: line 1 column 2 (char 1) (tool 'quick')")]),
    )  # fmt: skip


def generate_calls_a_tool_without_a_toolkit() -> Scenario:
    return Scenario(
        {"generate": one_turn(call("x", id="c1"))},
        None,
        Expect(status="done", text="done", tools=[("c1", "Unknown tool: x")]),
    )


def generate_never_stops_calling_tools() -> Scenario:
    async def forever(req: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(content="again", tool_calls=[call("x", id=f"t{req.turn}")])

    return Scenario(
        {"generate": forever, "max_turns": 3},
        None,
        Expect(status="incomplete", limit="maxTurns", text="again", turns=3,
               tools=[(f"t{i}", "Unknown tool: x") for i in range(3)]),
    )  # fmt: skip


SCENARIOS: list[Callable[[], Scenario]] = [
    hung_tool_under_run_timeout,
    hung_tool_under_tool_timeout,
    hung_raw_tool_under_run_timeout,
    run_cancelled_mid_tool,
    turn_cancelled_mid_tool,
    raw_tool_execute_raises,
    raw_tool_returns_garbage,
    wait_for_hangs,
    wait_for_raises,
    wait_for_returns_garbage,
    before_tool_hook_raises,
    after_tool_hook_raises,
    before_tool_hook_hangs,
    before_llm_hook_raises,
    after_llm_hook_raises_on_turn_two,
    generate_raises,
    sync_generate_raises,
    generate_hangs,
    sync_generate_hangs_in_a_thread,
    garbage_scenario(None, "generate returned NoneType"),
    garbage_scenario(42, "generate returned int"),
    garbage_scenario({"tool_calls": "nope"}, "generate returned tool_calls of type str"),
    garbage_scenario({"tool_calls": [7]}, "generate returned a tool call of type int"),
    garbage_scenario({"content": 5}, "generate returned content of type int"),
    garbage_scenario(InProcessResponse(usage=[1]), "generate returned usage of type list"),  # type: ignore[arg-type]
    generate_calls_an_unknown_tool,
    generate_calls_a_tool_without_a_toolkit,
    generate_never_stops_calling_tools,
]


# -- checks ---------------------------------------------------------------------------------


def assert_balanced(result: RunResult) -> None:
    """Every assistant tool call is followed by its tool message, in call order; the
    records list the same calls with the same outputs; no tool message is orphaned."""
    messages = result.messages
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"orphan tool message at {i}: {message}"
        ids = [tc["id"] for tc in message.get("tool_calls") or ()]
        following = messages[i + 1 : i + 1 + len(ids)]
        assert [(m["role"], m.get("tool_call_id")) for m in following] == [
            ("tool", call_id) for call_id in ids
        ], f"unbalanced after message {i}"
        i += 1 + len(ids)
    assert [(r.id, r.output) for r in result.tool_calls] == tool_messages(messages)


async def drive(
    mode: str, scenario: Scenario, cancel: CancelToken
) -> tuple[RunResult | None, BaseException | None]:
    """Run the scenario through ``run`` or ``stream``; return (result, error)."""
    c = client(**scenario.options)
    tk = await toolkit_of(*scenario.tools) if scenario.tools is not None else None
    try:
        if mode == "run":
            return await c.run("go", tk, cancel=cancel), None
        async with c.stream("go", tk, cancel=cancel) as events:
            done = [event["result"] async for event in events if event["type"] == "done"]
        assert len(done) == 1
        return done[0], None
    except Exception as exc:
        return None, exc


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("make", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
async def test_a_fault_ends_the_run_clearly_and_leaves_no_task(
    make: Callable[[], Scenario], mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    scenario = make()
    if scenario.threaded:
        # A worker thread's progress is invisible to Trio: jump only after a full second
        # of real idleness, so a slow machine cannot skip past a thread still working.
        autojump_clock.autojump_threshold = 1.0
    expect = scenario.expect
    cancel = CancelToken()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            if scenario.host is not None:
                nursery.start_soon(scenario.host, cancel)
            with TaskCensus() as census:
                result, error = await drive(mode, scenario, cancel)
                ended_at = trio.current_time()
                census.assert_no_new_tasks()
    try:
        assert ended_at == pytest.approx(expect.at)
        if expect.error is None:
            assert error is None, f"unexpected {error!r}"
        else:
            assert type(error) is expect.error, f"expected {expect.error.__name__}, got {error!r}"
            assert str(error) == expect.match or (
                expect.match is not None and str(error).startswith(expect.match)
            ), str(error)
            if expect.cause is NoCause:
                assert error.__cause__ is None
            elif expect.cause is not None:
                assert type(error.__cause__) is expect.cause
            result = getattr(error, "result", None)
        assert result is not None, "every outcome carries the transcript so far"
        assert_balanced(result)
        assert result.messages[0] == {"role": "user", "content": "go"}
        if expect.status is not None:
            assert result.status == expect.status
        if expect.error is not None or expect.limit is not None:
            assert result.limit == expect.limit
        if expect.text is not None:
            assert result.text == expect.text
        if expect.turns is not None:
            assert result.turns == expect.turns
        if expect.tools is not None:
            assert tool_messages(result.messages) == expect.tools
    finally:
        if scenario.finalize is not None:
            scenario.finalize()


def test_every_scenario_can_fail() -> None:
    """The checks are not vacuous: each scenario pins a concrete outcome."""
    for make in SCENARIOS:
        expect = make().expect
        assert expect.error is not None or (expect.status is not None and expect.tools is not None)


async def test_the_census_sees_a_task_that_outlives_its_scope() -> None:
    """Guard for the guard: a task left behind is reported, so the checks above can fail."""
    with TaskCensus() as census:
        trio.lowlevel.spawn_system_task(trio.sleep_forever, name="leaked")
        await trio.lowlevel.checkpoint()
        with pytest.raises(AssertionError, match="leaked"):
            census.assert_no_new_tasks()
    for task in census.new_tasks():
        assert task.name == "leaked"
    # The system nursery is cancelled when the test's run ends.
