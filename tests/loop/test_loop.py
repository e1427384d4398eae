"""The in-process client loop: one nursery per turn, each semantic of the issue pinned."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers import TaskCensus

from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    CancelToken,
    GenerateError,
    GenerateRequest,
    HookError,
    Hooks,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    RunTimeout,
    Tool,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    define_tool,
    empty_schema,
    pending,
    tool,
)

Fn = Callable[[dict[str, Any], ToolContext], Any]


def call(name: str, args: Any = None, id: str = "") -> InProcessToolCall:
    return InProcessToolCall(id=id, name=name, arguments={} if args is None else args)


def scripted(*replies: InProcessResponse) -> Callable[[GenerateRequest], Any]:
    """A model that answers with *replies* in order, then with "done"."""
    seen: list[GenerateRequest] = []
    roles: list[list[str]] = []  # the transcript is live, so snapshot it at call time

    async def generate(req: GenerateRequest) -> InProcessResponse:
        seen.append(req)
        roles.append([m["role"] for m in req.messages])
        index = len(seen) - 1
        return replies[index] if index < len(replies) else InProcessResponse(content="done")

    generate.seen = seen  # type: ignore[attr-defined]
    generate.roles = roles  # type: ignore[attr-defined]
    return generate


async def toolkit_of(*tools: Tool) -> Toolkit:
    return await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off()))


def client(generate: Any, **kw: Any) -> Any:
    return create_in_process_client(InProcessOptions(model="m", generate=generate, **kw))


def tool_messages(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]


# 1. One nursery per turn; concurrent calls; call ids; the turn token ---------------------


async def test_calls_of_one_message_run_concurrently_with_their_own_call_ids() -> None:
    started = {"a": trio.Event(), "b": trio.Event()}
    contexts: list[ToolContext] = []

    async def meet(args: dict[str, Any], ctx: ToolContext) -> str:
        contexts.append(ctx)
        me, other = args["me"], args["other"]
        started[me].set()
        await started[other].wait()  # deadlocks unless both run at once
        return me

    gen = scripted(
        InProcessResponse(
            tool_calls=[
                call("meet", {"me": "a", "other": "b"}, "id-a"),
                call("meet", {"me": "b", "other": "a"}, "id-b"),
            ]
        )
    )
    with trio.fail_after(5):
        result = await client(gen).run("go", await toolkit_of(define_tool("meet", "", None, meet)))
    assert result.status == "done"
    assert tool_messages(result.messages) == [("id-a", "a"), ("id-b", "b")]
    assert sorted(c.call_id for c in contexts) == ["id-a", "id-b"]
    assert contexts[0].cancel is contexts[1].cancel  # one token per turn


async def test_each_turn_gets_a_fresh_token_and_missing_ids_become_call_i() -> None:
    tokens: list[CancelToken] = []
    ids: list[str | None] = []

    async def probe(args: dict[str, Any], ctx: ToolContext) -> str:
        tokens.append(ctx.cancel)
        ids.append(ctx.call_id)
        return "ok"

    gen = scripted(
        InProcessResponse(tool_calls=[call("probe"), call("probe")]),
        InProcessResponse(tool_calls=[call("probe")]),
    )
    result = await client(gen).run("go", await toolkit_of(define_tool("probe", "", None, probe)))
    assert result.turns == 3 and result.status == "done"
    assert sorted(i or "" for i in ids[:2]) == ["call_0", "call_1"] and ids[2] == "call_0"
    assert tokens[0] is tokens[1] and tokens[2] is not tokens[0]


async def test_concurrency_unsafe_tools_never_overlap(autojump_clock: trio.abc.Clock) -> None:
    active: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    def make(name: str, safe: bool | None) -> Tool:
        async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            active.append(name)
            if len(active) > 1 and any(not s for n, s in kinds.items() if n in active):
                overlaps.append(tuple(active))
            await trio.sleep(1)
            active.remove(name)
            return ToolResult.ok(name)

        return Tool(name, "", empty_schema(), ToolSource.CUSTOM, run, concurrency_safe=safe)

    kinds = {"s1": True, "s2": True, "x": False, "s3": True}
    tools = [make(n, None if s else False) for n, s in kinds.items()]
    gen = scripted(InProcessResponse(tool_calls=[call(n) for n in kinds]))
    result = await client(gen).run("go", await toolkit_of(*tools))
    assert overlaps == []
    assert [c for _, c in tool_messages(result.messages)] == ["s1", "s2", "x", "s3"]
    # s1 and s2 together (1 s), then x alone (1 s), then s3 (1 s)
    assert trio.current_time() == pytest.approx(3)


# 2. Tool messages in call order -------------------------------------------------------


async def test_tool_messages_follow_call_order_not_finish_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    finished: list[str] = []

    async def nap(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(args["s"])
        finished.append(ctx.call_id or "")
        return f"slept {args['s']}"

    gen = scripted(InProcessResponse(tool_calls=[call("nap", {"s": 3}, "c1"), call("nap", {"s": 1}, "c2")]))  # fmt: skip
    result = await client(gen).run("go", await toolkit_of(define_tool("nap", "", None, nap)))
    assert finished == ["c2", "c1"]
    assert tool_messages(result.messages) == [("c1", "slept 3"), ("c2", "slept 1")]
    assert [r.id for r in result.tool_calls] == ["c1", "c2"]
    assert gen.roles[1] == ["user", "assistant", "tool", "tool"]  # type: ignore[attr-defined]
    assert trio.current_time() == pytest.approx(3)  # concurrent: 3 s, not 4 s


# 3. A raising tool is an error for that call only ------------------------------------


async def test_raising_raw_tool_is_isolated(autojump_clock: trio.abc.Clock) -> None:
    async def explode(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        await trio.sleep(0.1)
        raise RuntimeError("kaboom")

    async def steady(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(1)
        return "fine"

    boom = Tool("boom", "", empty_schema(), ToolSource.CUSTOM, explode)
    gen = scripted(InProcessResponse(tool_calls=[call("boom"), call("steady")]))
    with TaskCensus() as census:
        result = await client(gen).run(
            "go", await toolkit_of(boom, define_tool("steady", "", None, steady))
        )
        census.assert_no_new_tasks()
    assert result.status == "done" and result.text == "done"
    assert [(r.output, r.is_error) for r in result.tool_calls] == [
        ("kaboom", True),
        ("fine", False),
    ]


# 4. Cancellation -------------------------------------------------------------------------


async def test_tool_cancelling_the_turn_ends_every_inflight_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def quitter(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(0.5)
        ctx.cancel.cancel("enough")
        await trio.sleep(10)
        return "never"

    async def sleeper(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "never"

    async def after(args: dict[str, Any], ctx: ToolContext) -> str:
        assert not ctx.cancel.is_cancelled
        return "fresh token"

    gen = scripted(
        InProcessResponse(tool_calls=[call("quitter"), call("sleeper")]),
        InProcessResponse(tool_calls=[call("after")]),
    )
    tk = await toolkit_of(
        *(define_tool(f.__name__, "", None, f) for f in (quitter, sleeper, after))
    )
    with TaskCensus() as census:
        result = await client(gen).run("go", tk)
        census.assert_no_new_tasks()
    assert [m for _, m in tool_messages(result.messages)] == [
        "cancelled",
        "cancelled",
        "fresh token",
    ]
    assert result.status == "done"
    assert trio.current_time() == pytest.approx(0.5)


async def test_host_cancels_the_turn_through_the_hook_token(autojump_clock: trio.abc.Clock) -> None:
    async def sleeper(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "never"

    turn_tokens: list[CancelToken] = []
    tool_started = trio.Event()

    def before_tool(event: dict[str, Any]) -> None:
        turn_tokens.append(event["cancel"])
        tool_started.set()

    gen = scripted(InProcessResponse(tool_calls=[call("sleeper")]))
    c = client(gen, hooks=Hooks(before_tool=before_tool))
    tk = await toolkit_of(define_tool("sleeper", "", None, sleeper))
    async with trio.open_nursery() as nursery:

        async def host() -> None:
            await tool_started.wait()
            await trio.sleep(1)  # the user presses stop one (virtual) second in
            turn_tokens[0].cancel("user pressed stop")

        nursery.start_soon(host)
        result = await c.run("go", tk)
    assert tool_messages(result.messages) == [("call_0", "cancelled")]
    assert result.status == "done" and trio.current_time() == pytest.approx(1)


async def test_run_cancel_token_ends_the_run_with_a_balanced_transcript(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def sleeper(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "never"

    cancel = CancelToken()
    gen = scripted(InProcessResponse(tool_calls=[call("sleeper"), call("sleeper")]))
    tk = await toolkit_of(define_tool("sleeper", "", None, sleeper))
    with TaskCensus() as census:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _cancel_later(cancel, 0.2))
            result = await client(gen).run("go", tk, cancel=cancel)
        census.assert_no_new_tasks()
    assert result.status == "cancelled" and result.turns == 1
    assert tool_messages(result.messages) == [("call_0", "cancelled"), ("call_1", "cancelled")]
    assert trio.current_time() == pytest.approx(0.2)


async def _cancel_later(token: CancelToken, delay: float) -> None:
    await trio.sleep(delay)
    token.cancel()


async def test_run_cancel_also_interrupts_the_model_call(autojump_clock: trio.abc.Clock) -> None:
    async def slow_model(req: GenerateRequest) -> InProcessResponse:
        await trio.sleep(100)
        return InProcessResponse(content="late")

    cancel = CancelToken()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _cancel_later(cancel, 1))
        result = await client(slow_model).run("go", None, cancel=cancel)
    assert result.status == "cancelled" and result.turns == 0
    assert trio.current_time() == pytest.approx(1)


async def test_enclosing_scope_cancel_raises_out_of_run(autojump_clock: trio.abc.Clock) -> None:
    async def sleeper(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "never"

    gen = scripted(InProcessResponse(tool_calls=[call("sleeper")]))
    tk = await toolkit_of(define_tool("sleeper", "", None, sleeper))
    returned: list[object] = []
    with TaskCensus() as census:
        with trio.move_on_after(1) as scope:
            returned.append(await client(gen).run("go", tk))
        census.assert_no_new_tasks()
    assert scope.cancelled_caught and returned == []


# 5. Timeouts -------------------------------------------------------------------------------


async def test_tool_timeout_is_set_and_enforced(autojump_clock: trio.abc.Clock) -> None:
    budgets: list[int] = []

    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        budgets.append(ctx.timeout_ms)
        await trio.sleep_forever()
        return "never"

    async def quick(args: dict[str, Any], ctx: ToolContext) -> str:
        budgets.append(ctx.timeout_ms)
        return "quick"

    gen = scripted(InProcessResponse(tool_calls=[call("hang"), call("quick")]))
    tk = await toolkit_of(
        define_tool("hang", "", None, hang), define_tool("quick", "", None, quick)
    )
    result = await client(gen, tool_timeout_ms=300).run("go", tk)
    assert budgets == [300, 300]
    assert tool_messages(result.messages) == [("call_0", "timed out after 300ms"), ("call_1", "quick")]  # fmt: skip
    assert trio.current_time() == pytest.approx(0.3)


async def test_run_timeout_bounds_a_hung_tool(autojump_clock: trio.abc.Clock) -> None:
    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        with trio.CancelScope(shield=False):
            await trio.sleep_forever()
        return "never"

    gen = scripted(InProcessResponse(tool_calls=[call("hang")]))
    tk = await toolkit_of(define_tool("hang", "", None, hang))
    with TaskCensus() as census:
        with pytest.raises(RunTimeout, match="run timeout after 2000ms") as info:
            await client(gen, run_timeout_ms=2000).run("go", tk)
        census.assert_no_new_tasks()
    assert tool_messages(info.value.result.messages) == [("call_0", "cancelled")]
    assert (info.value.result.status, info.value.result.limit) == ("incomplete", "runTimeout")
    assert trio.current_time() == pytest.approx(2)


async def test_run_timeout_bounds_a_hung_wait_for_and_a_hung_model(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return (
            ToolResult.ok("yes") if ctx.answer else pending(Request(kind="approval", prompt="ok?"))
        )

    async def never_answers(req: Request) -> Answer:
        await trio.sleep_forever()
        raise AssertionError

    gen = scripted(InProcessResponse(tool_calls=[call("ask")]))
    tk = await toolkit_of(define_tool("ask", "", None, ask))
    with pytest.raises(RunTimeout):
        await client(gen, wait_for=never_answers, run_timeout_ms=500).run("go", tk)
    assert trio.current_time() == pytest.approx(0.5)

    async def hung_model(req: GenerateRequest) -> InProcessResponse:
        await trio.sleep_forever()
        raise AssertionError

    with pytest.raises(RunTimeout):
        await client(hung_model, run_timeout_ms=500).run("go", None)


# 6. Suspension ----------------------------------------------------------------------------


def suspending(name: str, prompt: str, *, twice: bool = False) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None or twice:
            return pending(Request(id=f"req-{name}", kind="approval", prompt=prompt))
        return ToolResult.ok(f"{name} got {ctx.answer.data}")

    return Tool(name, "", empty_schema(), ToolSource.CUSTOM, execute)


async def test_wait_for_resolves_suspensions_concurrently_and_reruns_once() -> None:
    asked = {"req-a": trio.Event(), "req-b": trio.Event()}

    async def wait_for(req: Request) -> Answer:
        asked[req.id].set()
        other = "req-b" if req.id == "req-a" else "req-a"
        await asked[other].wait()  # deadlocks if wait_for calls run one at a time
        return Answer(req.id, True, {"v": req.id})

    gen = scripted(InProcessResponse(tool_calls=[call("a"), call("b")]))
    tk = await toolkit_of(suspending("a", "A?"), suspending("b", "B?"))
    with trio.fail_after(5):
        result = await client(gen, wait_for=wait_for).run("go", tk)
    assert result.status == "done"
    assert [m for _, m in tool_messages(result.messages)] == [
        "a got {'v': 'req-a'}",
        "b got {'v': 'req-b'}",
    ]


async def test_declined_and_resuspended_answers() -> None:
    async def wait_for(req: Request) -> Answer:
        return Answer(req.id, req.id != "req-no", reason=None if req.id != "req-no" else "declined")

    gen = scripted(InProcessResponse(tool_calls=[call("no"), call("again")]))
    tk = await toolkit_of(suspending("no", "Delete?"), suspending("again", "Still?", twice=True))
    result = await client(gen, wait_for=wait_for).run("go", tk)
    assert [m for _, m in tool_messages(result.messages)] == [
        "declined/expired: Delete?",
        "unresolved: Still?",
    ]


async def test_wait_for_raising_is_that_calls_error() -> None:
    async def wait_for(req: Request) -> Answer:
        raise ConnectionError("approval service down")

    gen = scripted(InProcessResponse(tool_calls=[call("a")]))
    result = await client(gen, wait_for=wait_for).run("go", await toolkit_of(suspending("a", "A?")))
    assert tool_messages(result.messages) == [("call_0", "wait_for failed: approval service down")]
    assert result.status == "done"


async def test_without_wait_for_the_run_halts_pending_and_balanced_then_resumes() -> None:
    async def plain(args: dict[str, Any], ctx: ToolContext) -> str:
        return "plain"

    gen = scripted(InProcessResponse(tool_calls=[call("plain"), call("b"), call("a")]))
    tk = await toolkit_of(define_tool("plain", "", None, plain), suspending("a", "A?"), suspending("b", "B?"))  # fmt: skip
    c = client(gen)
    halted = await c.run("go", tk)
    assert halted.status == "pending"
    assert halted.pending is not None and halted.pending.id == "req-b"  # first in call order
    assert [s.request.id for s in halted.suspended] == ["req-b", "req-a"]
    assert tool_messages(halted.messages) == [("call_0", "plain"), ("call_1", "B?"), ("call_2", "A?")]  # fmt: skip
    assert halted.text == "B?"

    with pytest.raises(ValueError, match="matches no suspended request"):
        await c.resume(halted, [Answer("req-zzz", True)])
    resumed = await c.resume(halted, [Answer("req-b", True, {"x": 1}), Answer("req-a", False)])
    assert resumed.status == "done" and resumed.text == "done"
    assert tool_messages(resumed.messages) == [
        ("call_0", "plain"),
        ("call_1", "b got {'x': 1}"),
        ("call_2", "declined/expired: A?"),
    ]
    assert [m["role"] for m in resumed.messages].count("user") == 1
    assert resumed.turns == 2
    assert tool_messages(halted.messages)[1] == ("call_1", "B?")  # the old result is untouched
    with pytest.raises(ValueError, match="pending"):
        await c.resume(resumed, [])


async def test_question_builtin_without_wait_for_halts() -> None:
    gen = scripted(InProcessResponse(tool_calls=[call("question", {"questions": [{"question": "Name?"}]})]))  # fmt: skip
    result = await client(gen).run("go", await create_toolkit())
    assert result.status == "pending" and result.pending is not None
    assert (result.pending.kind, result.pending.prompt) == ("question", "Name?")


# 7. max_turns ------------------------------------------------------------------------------


async def test_max_turns_gives_incomplete_even_with_text() -> None:
    async def loop_forever(req: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(content="Let me check...", tool_calls=[call("t")])

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "again"

    result = await client(loop_forever, max_turns=3).run("go", await toolkit_of(define_tool("t", "", None, t)))  # fmt: skip
    assert (result.status, result.limit, result.turns) == ("incomplete", "maxTurns", 3)
    assert result.text == "Let me check..."
    assert len(result.tool_calls) == 3


async def test_an_answer_on_the_last_turn_is_done() -> None:
    gen = scripted(InProcessResponse(tool_calls=[call("t")]), InProcessResponse(content="fin"))

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "x"

    result = await client(gen, max_turns=2).run("go", await toolkit_of(define_tool("t", "", None, t)))  # fmt: skip
    assert (result.status, result.limit, result.text) == ("done", None, "fin")


# 8. Hooks ----------------------------------------------------------------------------------


async def test_hook_return_contracts() -> None:
    log: list[str] = []

    async def echo(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"echo {args.get('v')}"

    def before_llm(event: dict[str, Any]) -> dict[str, Any] | None:
        log.append(f"before_llm turn={event['turn']} n={len(event['messages'])}")
        if event["turn"] == 0:
            return {"messages": [{"role": "user", "content": "rewritten"}], "model": "big"}
        return None

    async def after_llm(event: dict[str, Any]) -> None:
        log.append(f"after_llm model={event['model']}")

    def before_tool(event: dict[str, Any]) -> dict[str, Any] | None:
        if event["id"] == "deny":
            return {"result": ToolResult.error("denied")}
        if event["id"] == "rewrite":
            return {"args": {"v": "new"}}
        return None

    async def after_tool(event: dict[str, Any]) -> dict[str, Any]:
        log.append(f"after_tool {event['id']}")
        return {"result": ToolResult.ok(event["result"].output.upper())}

    gen = scripted(
        InProcessResponse(
            tool_calls=[call("echo", {"v": "a"}, "deny"), call("echo", {"v": "old"}, "rewrite")]
        )
    )
    hooks = Hooks(before_llm=before_llm, after_llm=after_llm, before_tool=before_tool, after_tool=after_tool)  # fmt: skip
    result = await client(gen, hooks=hooks).run("original", await toolkit_of(define_tool("echo", "", None, echo)))  # fmt: skip
    first = gen.seen[0]  # type: ignore[attr-defined]
    assert first.messages[0]["content"] == "rewritten" and first.model == "big"
    assert gen.seen[1].model == "m"  # type: ignore[attr-defined]
    assert tool_messages(result.messages) == [("deny", "denied"), ("rewrite", "ECHO NEW")]
    assert result.tool_calls[1].args == {"v": "new"}
    assert "after_tool deny" not in log and "after_tool rewrite" in log
    assert log[0] == "before_llm turn=0 n=1" and "after_llm model=big" in log


async def test_raising_tool_hooks_become_error_results() -> None:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> str:
        return "fine"

    def before_tool(event: dict[str, Any]) -> None:
        if event["id"] == "b":
            raise PermissionError("policy says no")

    def after_tool(event: dict[str, Any]) -> None:
        if event["id"] == "c":
            raise ValueError("redactor broke")

    gen = scripted(InProcessResponse(tool_calls=[call("echo", id=i) for i in "abc"]))
    with TaskCensus() as census:
        result = await client(
            gen, hooks={"before_tool": before_tool, "after_tool": after_tool}
        ).run("go", await toolkit_of(define_tool("echo", "", None, echo)))
        census.assert_no_new_tasks()
    assert tool_messages(result.messages) == [
        ("a", "fine"),
        ("b", "before_tool hook failed: policy says no"),
        ("c", "after_tool hook failed: redactor broke"),
    ]
    assert result.status == "done"


async def test_raising_llm_hook_fails_the_run_clearly() -> None:
    def before_llm(event: dict[str, Any]) -> None:
        raise RuntimeError("quota check failed")

    with TaskCensus() as census:
        with pytest.raises(HookError, match="quota check failed"):
            await client(scripted(), hooks=Hooks(before_llm=before_llm)).run("go", None)
        census.assert_no_new_tasks()


# 9. Metrics ---------------------------------------------------------------------------------


async def test_metric_events() -> None:
    events: list[dict[str, Any]] = []

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "x"

    gen = scripted(
        InProcessResponse(tool_calls=[call("t")], usage={"prompt_tokens": 10, "completion_tokens": 4}),
        InProcessResponse(content="fin", usage={"promptTokens": 1, "completionTokens": 2, "totalTokens": 9}),
    )  # fmt: skip
    result = await client(gen, on_metric=events.append).run("go", await toolkit_of(define_tool("t", "", None, t)))  # fmt: skip
    kinds = [e["event"] for e in events]
    assert kinds == ["llm", "tool", "llm", "run"]
    llm = events[0]
    assert (llm["model"], llm["status"], llm["prompt_tokens"], llm["completion_tokens"]) == ("m", "ok", 10, 4)  # fmt: skip
    tool_event = events[1]
    assert (tool_event["tool"], tool_event["source"], tool_event["is_error"]) == (
        "t",
        "native",
        False,
    )
    run = events[-1]
    assert (run["turns"], run["tool_calls"], run["total_tokens"]) == (2, 1, 23)
    assert result.usage == {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 23}
    assert all(isinstance(e["ms"], float) for e in events)


async def test_suspension_metric_is_pending_not_error_and_broken_sinks_are_ignored() -> None:
    events: list[dict[str, Any]] = []

    def sink(event: dict[str, Any]) -> None:
        events.append(event)
        raise RuntimeError("metrics backend down")

    gen = scripted(InProcessResponse(tool_calls=[call("a")]))
    result = await client(gen, on_metric=sink).run("go", await toolkit_of(suspending("a", "A?")))
    tool_event = next(e for e in events if e["event"] == "tool")
    assert tool_event["pending"] is True and tool_event["is_error"] is False
    assert result.status == "pending"


# 10. Bad input ------------------------------------------------------------------------------


async def test_bad_tool_calls_are_clear_errors_and_lose_nothing() -> None:
    async def add(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["a"] + args["b"])

    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}  # fmt: skip
    gen = scripted(
        InProcessResponse(
            tool_calls=[
                call("nope", {}, "unknown"),
                call("add", '{"a": 1, "b": ', "broken-json"),
                call("add", {"a": "x", "b": 2}, "schema"),
                call("add", "[1, 2]", "not-object"),
                call("add", '{"a": 2, "b": 3}', "good"),
            ]
        )
    )
    result = await client(gen).run("go", await toolkit_of(define_tool("add", "", schema, add)))
    out = dict(tool_messages(result.messages))
    assert out["unknown"] == "Unknown tool: nope"
    assert out["broken-json"].startswith("Invalid JSON arguments") and "'add'" in out["broken-json"]
    assert "$.a must be number" in out["schema"] and "rule: type" in out["schema"]
    assert out["not-object"].startswith("Arguments must be a JSON object")
    assert out["good"] == "5"
    assistant = result.messages[1]
    assert assistant["tool_calls"][1]["function"]["arguments"] == '{"a": 1, "b": '
    assert result.status == "done"


async def test_generate_raising_is_a_clear_error_that_keeps_the_transcript() -> None:
    events: list[dict[str, Any]] = []
    calls = 0

    async def flaky(req: GenerateRequest) -> InProcessResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return InProcessResponse(tool_calls=[call("t", {}, "c1")])
        raise ConnectionRefusedError("model server down")

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "side effect done"

    tk = await toolkit_of(define_tool("t", "", None, t))
    with pytest.raises(
        GenerateError, match="generate raised ConnectionRefusedError: model server down"
    ) as info:
        await client(flaky, on_metric=events.append).run("go", tk)
    assert isinstance(info.value.__cause__, ConnectionRefusedError)
    partial = info.value.result
    assert partial is not None and partial.turns == 1
    assert tool_messages(partial.messages) == [("c1", "side effect done")]
    assert [e["event"] for e in events] == ["llm", "tool", "llm", "run"]
    assert events[2]["status"] == "error" and "model server down" in events[3]["error"]


@pytest.mark.parametrize(
    "garbage",
    [None, 42, "just text", {"tool_calls": "nope"}, {"tool_calls": [7]}, {"content": 5}],
)
async def test_generate_returning_garbage_is_a_clear_error(garbage: Any) -> None:
    async def bad(req: GenerateRequest) -> Any:
        return garbage

    with pytest.raises(GenerateError, match="generate returned"):
        await client(bad).run("go", None)


# Model plumbing ------------------------------------------------------------------------------


async def test_generate_request_shape_system_prompt_history_and_dict_replies() -> None:
    seen: list[GenerateRequest] = []

    def sync_generate(req: GenerateRequest) -> dict[str, Any]:
        seen.append(req)
        if req.turn == 0:
            return {"toolCalls": [{"name": "t", "arguments": json.dumps({"q": "x"})}]}
        return {"content": "fin", "usage": {"prompt_tokens": 2, "completion_tokens": 3}}

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return args["q"]

    tk = await toolkit_of(define_tool("t", "desc", {"type": "object", "properties": {"q": {"type": "string"}}}, t))  # fmt: skip
    c = client(sync_generate, system_prompt="be brief")
    result = await c.run("hi", tk)
    assert result.text == "fin" and result.usage["total_tokens"] == 5
    first = seen[0]
    assert first.model == "m" and first.turn == 0 and first.tools == tk.to_openai()
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]  # fmt: skip
    assert result.messages[2]["tool_calls"][0]["function"] == {"name": "t", "arguments": '{"q": "x"}'}  # fmt: skip
    again = await c.run("more", tk, history=result.messages)
    assert [m["role"] for m in again.messages].count("system") == 1
    assert again.messages[len(result.messages)] == {"role": "user", "content": "more"}
    no_tools = await client(scripted()).run("x", None)
    assert no_tools.status == "done" and no_tools.text == "done"
    assert no_tools.messages[-1] == {"role": "assistant", "content": "done"}


async def test_stream_events(autojump_clock: trio.abc.Clock) -> None:
    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(1)
        return "tool out"

    gen = scripted(InProcessResponse(content="thinking", tool_calls=[call("t", {}, "c1")]))
    tk = await toolkit_of(define_tool("t", "", None, t))
    events: list[dict[str, Any]] = []
    async with client(gen).stream("go", tk) as channel:
        events.extend([e async for e in channel])
    kinds = [e["type"] for e in events]
    assert kinds == ["text", "tool_call", "tool_result", "text", "usage", "done"]
    assert events[1]["id"] == "c1" and isinstance(events[1]["cancel"], CancelToken)
    assert events[2] == {"type": "tool_result", "id": "c1", "name": "t", "output": "tool out", "is_error": False}  # fmt: skip
    assert events[-1]["result"].text == "done"


async def test_stream_leaving_early_cancels_the_run(autojump_clock: trio.abc.Clock) -> None:
    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep_forever()
        return "never"

    # Two calls: when the consumer leaves, the loop is blocked sending the second event.
    gen = scripted(InProcessResponse(tool_calls=[call("hang"), call("hang")]))
    tk = await toolkit_of(define_tool("hang", "", None, hang))
    with trio.fail_after(60), TaskCensus() as census:
        async with client(gen).stream("go", tk) as channel:
            first = await channel.receive()
            await trio.testing.wait_all_tasks_blocked()
        census.assert_no_new_tasks()
    assert first["type"] == "tool_call"


async def test_stream_raises_the_runs_error_directly() -> None:
    async def broken(req: GenerateRequest) -> InProcessResponse:
        raise ConnectionRefusedError("down")

    async def consume() -> None:
        async with client(broken).stream("go", None) as channel:
            async for _ in channel:
                pass

    with pytest.raises(GenerateError) as info:
        await consume()
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


async def test_stream_emits_pending() -> None:
    gen = scripted(InProcessResponse(tool_calls=[call("a")]))
    events: list[dict[str, Any]] = []
    async with client(gen).stream("go", await toolkit_of(suspending("a", "A?"))) as channel:
        events.extend([e async for e in channel])
    assert [e["type"] for e in events] == ["tool_call", "pending", "tool_result", "usage", "done"]
    assert events[1]["request"].id == "req-a"
    assert events[-1]["result"].status == "pending"


# Regressions found in review ------------------------------------------------------------


async def _failing_cleanup_tool(args: dict[str, Any], ctx: ToolContext) -> str:
    """A tool whose own nursery has a child that fails while being cancelled."""

    async def child() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("cleanup failed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)
        await trio.sleep_forever()
    return "never"


async def test_a_group_from_a_tool_being_cancelled_is_still_a_result(
    autojump_clock: trio.abc.Clock,
) -> None:
    t = define_tool("messy", "", None, _failing_cleanup_tool)
    ctx = ToolContext()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_later, ctx.cancel, 1)
        direct = await t.call({}, ctx)
    assert direct == ToolResult.error("cleanup failed")

    async def quick(args: dict[str, Any], c: ToolContext) -> str:
        await trio.sleep(0.5)
        c.cancel.cancel()
        return "quick"

    gen = scripted(InProcessResponse(tool_calls=[call("messy"), call("quick")]))
    tk = await toolkit_of(t, define_tool("quick", "", None, quick))
    with TaskCensus() as census:
        result = await client(gen).run("go", tk)
        census.assert_no_new_tasks()
    assert result.status == "done"
    assert tool_messages(result.messages) == [("call_0", "cleanup failed"), ("call_1", "quick")]


async def test_stream_cancel_while_events_wait_keeps_the_transcript_balanced() -> None:
    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "never ran"

    cancel = CancelToken()
    gen = scripted(
        InProcessResponse(content="calling", tool_calls=[call("t", {}, "c1"), call("t", {}, "c2")])
    )
    seen: list[dict[str, Any]] = []
    with trio.fail_after(10):
        async with client(gen).stream(
            "go", await toolkit_of(define_tool("t", "", None, t)), cancel=cancel
        ) as channel:
            async for event in channel:
                seen.append(event)
                if event["type"] == "tool_call":
                    cancel.cancel("stop")  # the host presses stop on the first tool_call
    done = seen[-1]
    assert done["type"] == "done"
    result = done["result"]
    assert result.status == "cancelled"
    assert tool_messages(result.messages) == [("c1", "cancelled"), ("c2", "cancelled")]


async def test_an_already_cancelled_token_is_honoured() -> None:
    tk = await create_toolkit()
    ctx = ToolContext()
    ctx.cancel.cancel()
    todo = await tk.execute("todowrite", {"todos": []}, ctx)  # never checkpoints by itself
    assert todo == ToolResult.error("cancelled")

    called: list[int] = []

    def generate(req: GenerateRequest) -> InProcessResponse:
        called.append(req.turn)
        return InProcessResponse(content="answered anyway")

    async def async_generate(req: GenerateRequest) -> InProcessResponse:
        called.append(req.turn)
        return InProcessResponse(content="answered anyway")

    for gen in (generate, async_generate):
        token = CancelToken()
        token.cancel()
        result = await client(gen).run("go", None, cancel=token)
        assert (result.status, result.text) == ("cancelled", "")
    assert called == []


async def test_resume_respects_concurrency_unsafe_tools(autojump_clock: trio.abc.Clock) -> None:
    active: list[str] = []
    overlaps: list[list[str]] = []

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            return pending(Request(id=f"req-{ctx.call_id}", kind="approval", prompt="ok?"))
        active.append(ctx.call_id or "")
        if len(active) > 1:
            overlaps.append(list(active))
        await trio.sleep(1)
        active.remove(ctx.call_id or "")
        return ToolResult.ok("done")

    unsafe = Tool("unsafe", "", empty_schema(), ToolSource.CUSTOM, execute, concurrency_safe=False)
    gen = scripted(InProcessResponse(tool_calls=[call("unsafe", {}, "a"), call("unsafe", {}, "b")]))
    c = client(gen)
    halted = await c.run("go", await toolkit_of(unsafe))
    assert halted.status == "pending"
    resumed = await c.resume(halted, [Answer("req-a", True), Answer("req-b", True)])
    assert overlaps == []
    assert tool_messages(resumed.messages) == [("a", "done"), ("b", "done")]
    assert trio.current_time() == pytest.approx(2)


async def test_each_suspended_call_is_rerun_exactly_once() -> None:
    runs: list[Answer | None] = []

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        runs.append(ctx.answer)
        if ctx.answer is None:
            return pending(Request(id="r", kind="input", prompt="value?"))
        return ToolResult.ok(f"got {ctx.answer.data}")

    async def wait_for(req: Request) -> Answer:
        return Answer(req.id, True, {"v": 1})

    gen = scripted(InProcessResponse(tool_calls=[call("ask")]))
    tk = await toolkit_of(Tool("ask", "", empty_schema(), ToolSource.CUSTOM, execute))
    result = await client(gen, wait_for=wait_for).run("go", tk)
    assert runs == [None, Answer("r", True, {"v": 1})]
    assert tool_messages(result.messages) == [("call_0", "got {'v': 1}")]


@attrs.frozen
class Person:
    first_name: str
    last_name: str = ""


async def test_tool_arguments_keep_attrs_field_names() -> None:
    @tool
    async def greet(person: Person) -> str:
        """Greet someone."""
        return f"hello {person.first_name} {person.last_name}".strip()

    assert greet.input_schema["properties"]["person"]["required"] == ["first_name"]
    assert await greet.call({"person": {"first_name": "Ada", "last_name": "L"}}) == ToolResult.ok(
        "hello Ada L"
    )


@pytest.mark.parametrize(
    "garbage",
    [
        InProcessResponse(tool_calls=[{"name": "t"}, 3]),  # type: ignore[list-item]
        InProcessResponse(tool_calls=None),  # type: ignore[arg-type]
        InProcessResponse(usage="lots"),  # type: ignore[arg-type]
        InProcessResponse(tool_calls=[InProcessToolCall(name=None)]),  # type: ignore[arg-type]
        {"usage": 3},
    ],
)
async def test_malformed_attrs_responses_are_generate_errors(garbage: Any) -> None:
    async def bad(req: GenerateRequest) -> Any:
        return garbage

    with pytest.raises(GenerateError, match="generate returned"):
        await client(bad).run("go", None)


async def test_a_tool_call_dict_inside_an_attrs_response_is_accepted() -> None:
    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "ran"

    gen = scripted(InProcessResponse(tool_calls=[{"id": "d1", "name": "t", "arguments": {}}]))  # type: ignore[list-item]
    result = await client(gen).run("go", await toolkit_of(define_tool("t", "", None, t)))
    assert tool_messages(result.messages) == [("d1", "ran")]


async def test_one_tool_metric_per_call_whatever_the_outcome(
    autojump_clock: trio.abc.Clock,
) -> None:
    events: list[dict[str, Any]] = []

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.call_id == "quit":
            await trio.sleep(3)
            ctx.cancel.cancel()
        await trio.sleep(10)
        return "never"

    def before_tool(event: dict[str, Any]) -> Any:
        if event["id"] == "deny":
            return {"result": ToolResult.error("denied")}
        if event["id"] == "boom":
            raise RuntimeError("hook broke")
        return None

    gen = scripted(
        InProcessResponse(
            tool_calls=[call("slow", "{bad", "json"), call("slow", {}, "deny"), call("slow", {}, "boom"),
                        call("slow", {}, "quit"), call("slow", {}, "victim")]
        )
    )  # fmt: skip
    await client(gen, on_metric=events.append, hooks=Hooks(before_tool=before_tool)).run(
        "go", await toolkit_of(define_tool("slow", "", None, slow))
    )
    tools = [e for e in events if e["event"] == "tool"]
    assert len(tools) == 5
    assert all(e["is_error"] for e in tools)
    executed = [e for e in tools if e["ms"] > 0]
    assert len(executed) == 2  # quit and victim ran for 3 (virtual) seconds
    assert all(e["source"] == "native" and e["ms"] == pytest.approx(3000) for e in executed)


async def test_sync_generate_gets_its_own_copy_of_the_transcript() -> None:
    seen: list[GenerateRequest] = []

    def generate(req: GenerateRequest) -> InProcessResponse:
        seen.append(req)
        return InProcessResponse(content="fin")

    result = await client(generate).run("go", None)
    assert seen[0].messages is not result.messages
    assert list(seen[0].messages) == [{"role": "user", "content": "go"}]


@pytest.mark.parametrize(
    "bad", [{"result": {"output": "denied", "isError": True}}, {"result": "no"}, {"args": "x"}]
)
async def test_a_malformed_before_tool_answer_fails_closed(bad: dict[str, Any]) -> None:
    ran: list[bool] = []

    async def dangerous(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(True)
        return "deleted everything"

    gen = scripted(InProcessResponse(tool_calls=[call("dangerous")]))
    result = await client(gen, hooks=Hooks(before_tool=lambda e: bad)).run(
        "go", await toolkit_of(define_tool("dangerous", "", None, dangerous))
    )
    assert ran == []
    assert "before_tool hook returned" in tool_messages(result.messages)[0][1]


# The seam a dynamic tool source (the Tesseron gateway) uses ---------------------------------


class FakeSource:
    def __init__(self) -> None:
        self.version = 0
        self._tools: list[Tool] = []
        self.closed = False

    def set(self, *tools: Tool) -> None:
        self._tools = list(tools)
        self.version += 1

    def tools(self) -> list[Tool]:
        return self._tools

    async def read_resource(self, app_id: str, name: str) -> Any:
        if app_id != "todo":
            raise LookupError(app_id)
        return {"items": [], "name": name}

    async def aclose(self) -> None:
        self.closed = True


async def test_dynamic_sources_update_the_toolkit_and_close_with_it() -> None:
    source = FakeSource()
    mine = define_tool("mine", "", None, _echo_ctx)
    tk = await create_toolkit(
        ToolkitOptions(
            extra_tools=[mine], builtins=False, tesseron=source, disable_tools=["todo__hidden"]
        )
    )
    assert [t.name for t in tk.tools()] == ["mine"]
    source.set(
        define_tool("todo__add", "", None, _echo_ctx),
        define_tool("todo__hidden", "", None, _echo_ctx),
    )
    assert [t.name for t in tk.tools()] == ["mine", "todo__add"]
    assert [t["function"]["name"] for t in tk.to_openai()] == ["mine", "todo__add"]
    assert (await tk.execute("todo__add", {})).output == "ran"
    source.set()
    assert tk.get("todo__add") is None
    assert await tk.read_resource("todo", "list") == {"items": [], "name": "list"}
    with pytest.raises(LookupError):
        await tk.read_resource("other", "list")
    async with tk:
        pass
    assert source.closed


async def _echo_ctx(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ran"


async def test_tools_see_the_running_loops_services() -> None:
    from toolnexus_trio._runctx import current_run

    asked: list[GenerateRequest] = []
    events: list[dict[str, Any]] = []

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.tools is None:  # the sampling call: one user message, no tools
            asked.append(req)
            return InProcessResponse(content="sampled!")
        if req.turn == 0:
            return InProcessResponse(tool_calls=[call("probe")])
        return InProcessResponse(content="fin")

    async def probe(args: dict[str, Any], ctx: ToolContext) -> str:
        services = current_run.get()
        assert services is not None and services.sample is not None and services.metric is not None
        services.metric({"event": "probe"})
        return await services.sample("suggest a name", 20)

    assert current_run.get() is None
    c = client(generate, on_metric=events.append)
    result = await c.run("go", await toolkit_of(define_tool("probe", "", None, probe)))
    assert tool_messages(result.messages) == [("call_0", "sampled!")]
    assert asked[0].messages == [{"role": "user", "content": "suggest a name"}]
    assert asked[0].max_tokens == 20
    assert {"event": "probe"} in events
    assert current_run.get() is None


async def test_a_cancel_during_resume_ends_the_resumed_calls(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            return pending(Request(id=f"req-{ctx.call_id}", kind="approval", prompt="ok?"))
        if ctx.call_id == "quit":
            await trio.sleep(1)
            ctx.cancel.cancel()  # the resumed turn's token
        await trio.sleep(10)
        return ToolResult.ok("never")

    gen = scripted(InProcessResponse(tool_calls=[call("t", {}, "quit"), call("t", {}, "other")]))
    c = client(gen)
    tk = await toolkit_of(Tool("t", "", empty_schema(), ToolSource.CUSTOM, execute))
    halted = await c.run("go", tk)
    with TaskCensus() as census:
        resumed = await c.resume(halted, [Answer("req-quit", True), Answer("req-other", True)])
        census.assert_no_new_tasks()
    assert tool_messages(resumed.messages) == [("quit", "cancelled"), ("other", "cancelled")]
    assert trio.current_time() == pytest.approx(1)


async def test_resume_without_an_answer_for_a_call_says_unresolved() -> None:
    gen = scripted(InProcessResponse(tool_calls=[call("a"), call("b")]))
    c = client(gen)
    halted = await c.run("go", await toolkit_of(suspending("a", "A?"), suspending("b", "B?")))
    resumed = await c.resume(halted, {"req-a": Answer("req-a", True, {"v": 1})})
    assert tool_messages(resumed.messages) == [
        ("call_0", "a got {'v': 1}"),
        ("call_1", "unresolved: B?"),
    ]


async def test_a_cancelled_run_has_no_text_even_when_the_model_said_something(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep_forever()
        return "never"

    cancel = CancelToken()
    gen = scripted(InProcessResponse(content="thinking...", tool_calls=[call("hang")]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_later, cancel, 1)
        result = await client(gen).run(
            "go", await toolkit_of(define_tool("hang", "", None, hang)), cancel=cancel
        )
    assert (result.status, result.text) == ("cancelled", "")
