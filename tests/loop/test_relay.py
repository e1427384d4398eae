"""Relay tools in the loop (SPEC §10 relay addendum), each rule through ``run`` and ``stream``.

The model's relay calls of one assistant turn surface as ONE ``kind="tool_call"``
request (every relay call, in call order, ids stamped by the loop, raw arguments kept);
the host's ``Answer.data.results`` (or the single-call shorthand) becomes their tool
results; a refusal is an error result and the run goes on; the suspension is no tool
error. In-process (``wait_for``) and durable (``resume``, ``Client.answer`` on SQLite).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from helpers import TaskCensus

from toolnexus_trio import (
    Answer,
    CancelToken,
    Client,
    ClientOptions,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    RunResult,
    SqliteConversationStore,
    Tool,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_client,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
    pending_of,
    relay_tool,
)
from toolnexus_trio.testing import open_fake_provider

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def weather() -> Tool:
    return relay_tool("get_weather", "The weather in a city.", CITY)


def clock() -> Tool:
    return relay_tool("get_time", "The time in a city.", CITY)


async def _add(args: dict[str, Any], ctx: ToolContext) -> str:
    await trio.sleep(0.5)
    return str(args["a"] + args["b"])


def adder() -> Tool:
    return define_tool("add", "Add.", None, _add)


async def _deploy(args: dict[str, Any], ctx: ToolContext) -> str | ToolResult:
    if ctx.answer is None:
        return pending(Request(id="req-deploy", kind="approval", prompt="deploy?"))
    return "deployed"


def deployer() -> Tool:
    return define_tool("deploy", "Deploy after approval.", None, _deploy)


async def make_toolkit(*extra: Tool) -> Toolkit:
    tools = extra or (weather(), clock(), adder())
    return await create_toolkit(ToolkitOptions(extra_tools=list(tools), builtins=False))


def scripted(*turns: Sequence[InProcessToolCall]) -> Callable[[GenerateRequest], Any]:
    """A model that makes the given tool-call turns, then reports every tool message."""

    async def generate(request: GenerateRequest) -> InProcessResponse:
        assistant_turns = sum(1 for m in request.messages if m["role"] == "assistant")
        if assistant_turns < len(turns):
            return InProcessResponse(tool_calls=list(turns[assistant_turns]))
        seen = [m["content"] for m in request.messages if m["role"] == "tool"]
        return InProcessResponse(content="final: " + " | ".join(seen))

    return generate


MIXED = [
    InProcessToolCall("c1", "get_weather", '{"city": "Paris"}'),  # raw text kept as given
    InProcessToolCall("c2", "add", {"a": 1, "b": 2}),
    InProcessToolCall("c3", "get_time", {"city": "Oslo"}),
]


def client(generate: Any = None, **options: Any) -> Client:
    return create_in_process_client(
        InProcessOptions(model="m", generate=generate or scripted(MIXED), **options)
    )


Runner = Callable[[Client, Toolkit], Awaitable[tuple[RunResult, list[dict[str, Any]]]]]


async def via_run(c: Client, toolkit: Toolkit) -> tuple[RunResult, list[dict[str, Any]]]:
    return await c.run("go", toolkit), []


async def via_stream(c: Client, toolkit: Toolkit) -> tuple[RunResult, list[dict[str, Any]]]:
    async with c.stream("go", toolkit) as channel:
        events = [e async for e in channel]
    assert events[-1]["type"] == "done"
    return events[-1]["result"], events


@pytest.fixture(params=["run", "stream"])
def runner(request: pytest.FixtureRequest) -> Runner:
    return via_run if request.param == "run" else via_stream


def tool_messages(result: RunResult) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in result.messages if m["role"] == "tool"}


EXPECTED_CALLS = [
    {"id": "c1", "name": "get_weather", "input": {"city": "Paris"}, "arguments": '{"city": "Paris"}'},
    {"id": "c3", "name": "get_time", "input": {"city": "Oslo"}, "arguments": '{"city":"Oslo"}'},
]  # fmt: skip


# -- the tool itself ------------------------------------------------------------


async def test_relay_tool_is_a_normal_tool_declared_like_any_other() -> None:
    relay = weather()
    assert relay.source is ToolSource.RELAY and relay.source.value == "relay"

    async def never(args: dict[str, Any], ctx: ToolContext) -> str:
        raise AssertionError("a declaration twin is never run")

    twin = define_tool("get_weather", "The weather in a city.", CITY, never)
    relayed, plain = await make_toolkit(relay), await make_toolkit(twin)
    assert relayed.to_openai() == plain.to_openai()
    assert relayed.to_anthropic() == plain.to_anthropic()
    assert relayed.to_gemini() == plain.to_gemini()
    # Called directly (no loop), it is its own one-call relay.
    result = await relay.call({"city": "Rome"}, ToolContext(call_id="x1"))
    request = pending_of(result)
    assert request is not None and request.kind == "tool_call"
    assert request.data == {
        "calls": [{"id": "x1", "name": "get_weather", "input": {"city": "Rome"},
                   "arguments": '{"city":"Rome"}'}]
    }  # fmt: skip
    assert result.is_error and "get_weather" in result.output
    answered = await relay.call(
        {"city": "Rome"},
        ToolContext(call_id="x1", answer=Answer(request.id, True, {"output": "hot"})),
    )
    assert answered == ToolResult("hot", False)
    # Its schema is enforced like any tool's: a bad call never relays.
    bad = await relay.call({"town": "Rome"}, ToolContext(call_id="x2"))
    assert bad.is_error and pending_of(bad) is None


# -- durable: halt, then resume -------------------------------------------------


async def test_all_relay_calls_of_a_turn_ride_one_request_in_call_order(runner: Runner) -> None:
    toolkit = await make_toolkit()
    c = client()
    halted, events = await runner(c, toolkit)
    assert halted.status == "pending"
    request = halted.pending
    assert request is not None and request.kind == "tool_call"
    assert request.data == {"calls": EXPECTED_CALLS}
    assert [s.id for s in halted.suspended] == ["c1", "c3"]
    assert [s.request for s in halted.suspended] == [request, request]
    # the native call in between ran; the transcript is balanced (one message per call)
    assert tool_messages(halted)["c2"] == "3"
    assert sorted(tool_messages(halted)) == ["c1", "c2", "c3"]
    if events:
        pendings = [e["request"] for e in events if e["type"] == "pending"]
        assert pendings == [request]  # one pending event, not one per relay call

    answer = Answer(
        request.id,
        True,
        {"results": [{"id": "c3", "output": "12:00"}, {"id": "c1", "output": "sunny"}]},
    )
    done = await c.resume(halted, [answer])
    assert done.status == "done"
    assert tool_messages(done) == {"c1": "sunny", "c2": "3", "c3": "12:00"}
    assert done.text == "final: sunny | 3 | 12:00"
    # no new user turn: user, assistant(calls), 3 tool messages, assistant
    assert [m["role"] for m in done.messages] == ["user", "assistant", "tool", "tool", "tool", "assistant"]  # fmt: skip


async def test_a_host_error_and_a_missing_result_are_error_results(runner: Runner) -> None:
    toolkit = await make_toolkit()
    c = client()
    halted, _ = await runner(c, toolkit)
    assert halted.pending is not None
    answer = Answer(
        halted.pending.id,
        True,
        {"results": [{"id": "c1", "output": "no such city", "isError": True}]},
    )
    done = await c.resume(halted, [answer])
    assert done.status == "done"
    records = {r.id: (r.output, r.is_error) for r in done.tool_calls}
    assert records["c1"] == ("no such city", True)
    assert records["c3"][1] is True and "no result for call 'c3'" in records["c3"][0]


async def test_a_declined_relay_is_an_error_result_and_the_loop_continues(runner: Runner) -> None:
    toolkit = await make_toolkit()
    c = client()
    halted, _ = await runner(c, toolkit)
    assert halted.pending is not None
    done = await c.resume(halted, [Answer(halted.pending.id, False, reason="declined")])
    assert done.status == "done"
    messages = tool_messages(done)
    assert messages["c1"] == "relay declined (declined): the caller did not run get_weather"
    assert messages["c3"] == "relay declined (declined): the caller did not run get_time"
    assert done.text.startswith("final: relay declined")


async def test_the_single_call_shorthand(runner: Runner) -> None:
    toolkit = await make_toolkit()
    c = client(scripted([InProcessToolCall("only", "get_weather", {"city": "Lima"})]))
    halted, _ = await runner(c, toolkit)
    assert halted.pending is not None
    assert [call["id"] for call in halted.pending.data["calls"]] == ["only"]  # type: ignore[index]
    done = await c.resume(
        halted, [Answer(halted.pending.id, True, {"output": "fog", "isError": False})]
    )
    assert tool_messages(done) == {"only": "fog"}


async def test_the_shorthand_is_refused_for_several_calls(runner: Runner) -> None:
    toolkit = await make_toolkit()
    c = client()
    halted, _ = await runner(c, toolkit)
    assert halted.pending is not None
    done = await c.resume(halted, [Answer(halted.pending.id, True, {"output": "same for all"})])
    for call_id in ("c1", "c3"):
        assert "relayed 2 calls" in tool_messages(done)[call_id]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"results": "x"}, "Answer.data.results must be a list, not str"),
        ({"results": [7]}, "Answer.data.results[0] is a int, not an object"),
        ({"results": [{"id": "only", "output": 3}]}, "results[0].output must be a string, not int"),
        ({"results": [{"id": "only", "output": "x", "isError": "no"}]}, "isError must be true or false"),
        ({"isError": False}, "no result for call 'only'"),
        (None, "no result for call 'only'"),
    ],
)  # fmt: skip
async def test_a_malformed_answer_is_an_error_result_naming_the_field(
    data: dict[str, Any] | None, message: str
) -> None:
    toolkit = await make_toolkit()
    c = client(scripted([InProcessToolCall("only", "get_weather", {"city": "Lima"})]))
    halted = await c.run("go", toolkit)
    assert halted.pending is not None
    done = await c.resume(halted, [Answer(halted.pending.id, True, data)])
    assert done.status == "done"
    (record,) = done.tool_calls
    assert record.is_error and message in record.output


async def test_first_in_order_halt_is_unchanged_and_resume_fills_every_slot(runner: Runner) -> None:
    toolkit = await make_toolkit(weather(), clock(), deployer())
    turn = [
        InProcessToolCall("d1", "deploy", {}),
        InProcessToolCall("c1", "get_weather", {"city": "Paris"}),
        InProcessToolCall("c3", "get_time", {"city": "Oslo"}),
    ]
    c = client(scripted(turn))
    halted, _ = await runner(c, toolkit)
    # the run halts on the FIRST suspension in call order: the approval
    assert halted.pending == Request(id="req-deploy", kind="approval", prompt="deploy?")
    relay = halted.suspended[1].request
    assert relay.kind == "tool_call" and relay is halted.suspended[2].request
    assert [c["id"] for c in relay.data["calls"]] == ["c1", "c3"]  # type: ignore[index]
    done = await c.resume(
        halted,
        [
            Answer("req-deploy", True),
            Answer(relay.id, True, {"results": [{"id": "c1", "output": "sunny"},
                                                {"id": "c3", "output": "noon"}]}),
        ],
    )  # fmt: skip
    assert tool_messages(done) == {"d1": "deployed", "c1": "sunny", "c3": "noon"}


async def test_a_relay_first_in_order_is_the_surfaced_request(runner: Runner) -> None:
    toolkit = await make_toolkit(weather(), clock(), deployer())
    turn = [
        InProcessToolCall("c1", "get_weather", {"city": "Paris"}),
        InProcessToolCall("d1", "deploy", {}),
        InProcessToolCall("c3", "get_time", {"city": "Oslo"}),
    ]
    halted, _ = await runner(client(scripted(turn)), toolkit)
    assert halted.pending is not None and halted.pending.kind == "tool_call"
    assert [c["id"] for c in halted.pending.data["calls"]] == ["c1", "c3"]  # type: ignore[index]


async def test_relay_pending_survives_json_and_resumes_in_a_fresh_client() -> None:
    toolkit = await make_toolkit()
    halted = await client().run("go", toolkit)
    document = json.loads(json.dumps(halted.to_json()))
    loaded = RunResult.from_json(document)
    assert loaded.pending == halted.pending
    assert loaded.pending is not None
    answer = Answer(loaded.pending.id, True, {"results": [{"id": "c1", "output": "a"},
                                                          {"id": "c3", "output": "b"}]})  # fmt: skip
    done = await client().resume(loaded, [answer], toolkit=toolkit)
    assert tool_messages(done) == {"c1": "a", "c2": "3", "c3": "b"}


async def test_ask_and_answer_on_sqlite(tmp_path: Path) -> None:
    toolkit = await make_toolkit()
    async with SqliteConversationStore(tmp_path / "t.db") as store:
        halted = await client(store=store).ask("go", toolkit, id="thread")
        assert halted.pending is not None and halted.pending.kind == "tool_call"
        request_id = halted.pending.id
    # another client and another store object on the same file: a different process's view
    async with SqliteConversationStore(tmp_path / "t.db") as store:
        answer = Answer(request_id, True, {"results": [{"id": "c1", "output": "rain"},
                                                       {"id": "c3", "output": "9:00"}]})  # fmt: skip
        done = await client(store=store).answer("thread", [answer], toolkit=toolkit)
        assert done.status == "done" and done.text == "final: rain | 3 | 9:00"
        assert await store.get("thread") == done.messages


# -- in process: wait_for ---------------------------------------------------------


async def test_wait_for_is_called_once_per_turn_with_every_relay_call(runner: Runner) -> None:
    asked: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request)
        await trio.sleep(1)
        calls = request.data["calls"]  # type: ignore[index]
        return Answer(request.id, True, {"results": [
            {"id": c["id"], "output": f"{c['name']}:{c['input']['city']}"} for c in calls
        ]})  # fmt: skip

    toolkit = await make_toolkit()
    with TaskCensus() as census:
        done, events = await runner(client(wait_for=wait_for), toolkit)
    census.assert_no_new_tasks()
    assert done.status == "done"
    assert [r.data for r in asked] == [{"calls": EXPECTED_CALLS}]
    assert tool_messages(done) == {"c1": "get_weather:Paris", "c2": "3", "c3": "get_time:Oslo"}
    if events:
        assert [e["request"] for e in events if e["type"] == "pending"] == asked
        results = [
            (e["id"], e["output"], e["is_error"]) for e in events if e["type"] == "tool_result"
        ]
        assert results == [("c1", "get_weather:Paris", False), ("c2", "3", False),
                           ("c3", "get_time:Oslo", False)]  # fmt: skip


async def test_wait_for_declining_feeds_errors_and_the_run_goes_on(runner: Runner) -> None:
    async def wait_for(request: Request) -> Answer:
        return Answer(request.id, False, reason="cancelled")

    toolkit = await make_toolkit()
    done, _ = await runner(client(wait_for=wait_for), toolkit)
    assert done.status == "done"
    assert (
        tool_messages(done)["c1"]
        == "relay declined (cancelled): the caller did not run get_weather"
    )


async def test_wait_for_failing_or_returning_junk_is_an_error_result() -> None:
    async def fails(request: Request) -> Answer:
        raise RuntimeError("host down")

    async def junk(request: Request) -> Any:
        return {"ok": True}

    toolkit = await make_toolkit()
    done = await client(wait_for=fails).run("go", toolkit)
    assert tool_messages(done)["c1"] == "wait_for failed: host down"
    done = await client(wait_for=junk).run("go", toolkit)
    assert tool_messages(done)["c3"] == "wait_for returned dict, not an Answer"


async def test_cancelling_the_turn_token_ends_the_relay_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def wait_for(request: Request) -> Answer:
        await trio.sleep_forever()
        raise AssertionError

    tokens: list[CancelToken] = []
    toolkit = await make_toolkit()
    c = client(wait_for=wait_for)
    with trio.fail_after(60):  # virtual time: a token that fails to end the wait fails here
        async with c.stream("go", toolkit) as channel:
            async for event in channel:
                if event["type"] == "tool_call":
                    tokens.append(event["cancel"])
                if event["type"] == "pending":
                    tokens[0].cancel("user stop")
                if event["type"] == "done":
                    done = event["result"]
    assert tool_messages(done)["c1"] == "cancelled"
    assert tool_messages(done)["c2"] == "3"


async def test_a_non_concurrency_safe_call_between_relay_calls_cannot_deadlock() -> None:
    async def exclusive(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(0.1)
        return "alone"

    solo = Tool("solo", "", {"type": "object"}, ToolSource.NATIVE,
                define_tool("solo", "", None, exclusive).execute, concurrency_safe=False)  # fmt: skip

    async def wait_for(request: Request) -> Answer:
        calls = request.data["calls"]  # type: ignore[index]
        return Answer(
            request.id, True, {"results": [{"id": c["id"], "output": "ok"} for c in calls]}
        )

    turn = [
        InProcessToolCall("c1", "get_weather", {"city": "A"}),
        InProcessToolCall("s", "solo", {}),
        InProcessToolCall("c3", "get_time", {"city": "B"}),
    ]
    toolkit = await make_toolkit(weather(), clock(), solo)
    with trio.fail_after(60):
        done = await client(scripted(turn), wait_for=wait_for).run("go", toolkit)
    assert tool_messages(done) == {"c1": "ok", "s": "alone", "c3": "ok"}


async def test_hooks_see_the_relay_like_any_call() -> None:
    after: list[tuple[str, str]] = []

    def before_tool(event: dict[str, Any]) -> Any:
        if event["name"] == "get_time":
            return {"args": {"city": "Bergen"}}  # the host gets what the hook made of it
        return None

    def after_tool(event: dict[str, Any]) -> Any:
        after.append((event["id"], event["result"].output))
        return None

    async def wait_for(request: Request) -> Answer:
        assert request.data == {"calls": [
            EXPECTED_CALLS[0],
            {"id": "c3", "name": "get_time", "input": {"city": "Bergen"}, "arguments": '{"city":"Bergen"}'},
        ]}  # fmt: skip
        return Answer(request.id, True, {"results": [{"id": "c1", "output": "w"},
                                                     {"id": "c3", "output": "t"}]})  # fmt: skip

    toolkit = await make_toolkit()
    hooks = {"before_tool": before_tool, "after_tool": after_tool}
    done = await client(wait_for=wait_for, hooks=hooks).run("go", toolkit)
    assert done.status == "done"
    # after_tool runs once per call, on the resolved result, never on the suspension
    assert sorted(after) == [("c1", "w"), ("c2", "3"), ("c3", "t")]


# -- not a tool error -------------------------------------------------------------


async def test_the_relay_suspension_is_no_tool_error(runner: Runner) -> None:
    events: list[dict[str, Any]] = []

    async def wait_for(request: Request) -> Answer:
        return Answer(request.id, True, {"results": [{"id": "c1", "output": "x", "isError": True}]})

    toolkit = await make_toolkit()
    c = client(on_metric=events.append, wait_for=wait_for)
    await runner(c, toolkit)
    relay_events = [e for e in events if e["event"] == "tool" and e["source"] == "relay"]
    assert sorted(e["tool"] for e in relay_events) == ["get_time", "get_weather"]
    for e in relay_events:
        assert (e["is_error"], e.get("pending")) == (False, True)
    text = c.metrics()
    assert 'tool="get_weather",source="relay",is_error="false",pending="true"} 1' in text
    assert 'source="relay",is_error="true"' not in text  # a relayed result moves no error metric


async def test_registry_without_on_metric_counts_the_relay_as_pending() -> None:
    toolkit = await make_toolkit()
    c = client()
    await c.run("go", toolkit)
    text = c.metrics()
    assert 'tool="get_time",source="relay",is_error="false",pending="true"} 1' in text
    assert 'is_error="true"' not in text


# -- the collision guard -------------------------------------------------------------


@pytest.mark.parametrize("builtins", [False, True, None])
async def test_a_relay_named_like_a_builtin_fails_the_toolkit(builtins: bool | None) -> None:
    with pytest.raises(ValueError, match="relay tool 'bash' collides with a builtin"):
        await create_toolkit(
            ToolkitOptions(extra_tools=[relay_tool("bash", "", CITY)], builtins=builtins)
        )


async def test_the_guard_holds_for_every_way_to_build_a_toolkit() -> None:
    for name in ("read", "question", "todowrite", "apply_patch", "skill"):
        with pytest.raises(ValueError, match="collides"):
            Toolkit([relay_tool(name, "", CITY)])
    toolkit = Toolkit([])
    with pytest.raises(ValueError, match="collides"):
        toolkit.register(weather(), relay_tool("webfetch", "", CITY))
    assert toolkit.get("get_weather") is None  # nothing was added
    # an ordinary host override of a builtin name is unaffected
    override = define_tool("bash", "mine", None, _add)
    built = await create_toolkit(ToolkitOptions(extra_tools=[override], builtins=False))
    assert built.get("bash") is override


# -- translate: declared, never executed -------------------------------------------------


async def test_translate_declares_relay_tools_and_returns_their_calls() -> None:
    seen: list[Any] = []

    async def generate(request: GenerateRequest) -> InProcessResponse:
        seen.append(request.tools)
        return InProcessResponse(
            tool_calls=[InProcessToolCall("t1", "get_weather", '{"city":"Rome"}')]
        )

    toolkit = await make_toolkit(weather())
    result = await client(generate).translate(
        [{"role": "user", "content": "weather?"}], toolkit=toolkit
    )
    assert seen == [toolkit.to_openai()]
    assert result.finish_reason == "tool_calls"
    assert [(t.id, t.name, t.arguments) for t in result.tool_calls] == [
        ("t1", "get_weather", '{"city":"Rome"}')
    ]


# -- over HTTP, both wire styles -------------------------------------------------------


@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_relay_over_the_http_client(style: str, runner: Runner) -> None:
    script = [
        {"text": "checking", "tool_calls": [
            {"id": "h1", "name": "get_weather", "arguments": {"city": "Paris"}},
            {"id": "h2", "name": "get_time", "arguments": {"city": "Oslo"}},
        ]},
        {"text": "all done"},
    ]  # fmt: skip
    toolkit = await make_toolkit()
    async with open_fake_provider(script) as provider:
        options = ClientOptions(
            base_url=provider.base_url,
            style=style,
            model="m",
            api_key="k",  # type: ignore[arg-type]
        )
        async with create_client(options) as c:
            halted, _ = await runner(c, toolkit)
            assert halted.pending is not None
            calls = halted.pending.data["calls"]  # type: ignore[index]
            assert [(x["id"], x["name"], x["input"]) for x in calls] == [
                ("h1", "get_weather", {"city": "Paris"}),
                ("h2", "get_time", {"city": "Oslo"}),
            ]
            assert [json.loads(x["arguments"]) for x in calls] == [
                {"city": "Paris"},
                {"city": "Oslo"},
            ]
            answer = Answer(halted.pending.id, True, {"results": [
                {"id": "h1", "output": "sunny"}, {"id": "h2", "output": "noon"}]})  # fmt: skip
            done = await c.resume(halted, [answer])
    assert done.text == "all done"
    sent = provider.requests[1].json
    if style == "openai":
        results = [
            (m["tool_call_id"], m["content"]) for m in sent["messages"] if m["role"] == "tool"
        ]
    else:
        blocks = [
            b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]
        ]
        results = [(b["tool_use_id"], b["content"]) for b in blocks if b["type"] == "tool_result"]
    assert results == [("h1", "sunny"), ("h2", "noon")]


# -- a guard that suspends a relay call ------------------------------------------------


def guard(event: dict[str, Any]) -> Any:
    """A before_tool guard that wants an approval before get_weather is relayed."""
    if event["name"] == "get_weather":
        return {
            "result": pending(Request(id=f"ok-{event['id']}", kind="approval", prompt="relay?"))
        }
    return None


async def test_a_guard_approved_relay_call_relays_with_the_turns_others(runner: Runner) -> None:
    asked: list[Request] = []

    async def wait_for(request: Request) -> Answer:
        asked.append(request)
        if request.kind == "approval":
            return Answer(request.id, True)
        calls = request.data["calls"]  # type: ignore[index]
        return Answer(
            request.id, True, {"results": [{"id": c["id"], "output": c["name"]} for c in calls]}
        )

    toolkit = await make_toolkit()
    done, _ = await runner(client(wait_for=wait_for, hooks={"before_tool": guard}), toolkit)
    assert [r.kind for r in asked] == ["approval", "tool_call"]
    assert asked[1].data == {"calls": EXPECTED_CALLS}
    assert tool_messages(done) == {"c1": "get_weather", "c2": "3", "c3": "get_time"}


async def test_a_guard_approved_relay_call_halts_again_on_the_durable_path(runner: Runner) -> None:
    toolkit = await make_toolkit()
    c = client(hooks={"before_tool": guard})
    halted, _ = await runner(c, toolkit)
    assert halted.pending == Request(id="ok-c1", kind="approval", prompt="relay?")
    first_relay = halted.suspended[1].request
    assert [x["id"] for x in first_relay.data["calls"]] == ["c3"]  # type: ignore[index]
    answers = [
        Answer("ok-c1", True),
        Answer(first_relay.id, True, {"output": "noon"}),
    ]
    again = await c.resume(halted, answers)
    # approved, get_weather now relays: the run halts on it, nothing is sent to the model
    assert again.status == "pending" and again.turns == halted.turns
    assert again.pending is not None
    assert again.pending.data == {"calls": [EXPECTED_CALLS[0]]}  # the raw arguments found again
    assert [s.id for s in again.suspended] == ["c1"]
    assert tool_messages(again)["c3"] == "noon"
    loaded = RunResult.from_json(json.loads(json.dumps(again.to_json())))
    done = await c.resume(
        loaded, [Answer(again.pending.id, True, {"output": "sunny"})], toolkit=toolkit
    )
    assert done.status == "done"
    assert tool_messages(done) == {"c1": "sunny", "c2": "3", "c3": "noon"}
    assert done.text == "final: sunny | 3 | noon"


async def test_a_guard_declined_relay_call_is_declined() -> None:
    toolkit = await make_toolkit()
    c = client(hooks={"before_tool": guard})
    halted = await c.run("go", toolkit)
    relay = halted.suspended[1].request
    done = await c.resume(halted, [Answer("ok-c1", False), Answer(relay.id, True, {"output": "x"})])
    assert done.status == "done"
    assert tool_messages(done) == {"c1": "declined/expired: relay?", "c2": "3", "c3": "x"}
