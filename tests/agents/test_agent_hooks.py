"""The ``agent-hooks`` fixture (SPEC §7D "The §8 seams on an agent run"): H1-H6 and the
unset-is-byte-identical invariant, on the virtual clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from agent_rig import load

from toolnexus_trio import (
    Hooks,
    InProcessOptions,
    Request,
    ToolContext,
    create_in_process_client,
    define_tool,
    pending,
)
from toolnexus_trio.agents import AgentDef, open_agent_runtime
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

FIXTURE = {s["id"]: s for s in load("agent-hooks")["scenarios"]}


class Wire:
    """A model recording what reaches it (the provider payload) and answering ``ok``."""

    def __init__(self, tool: str | None = None) -> None:
        self.seen: list[list[dict[str, Any]]] = []
        self.tool = tool

    async def __call__(self, request: GenerateRequest) -> InProcessResponse:
        self.seen.append([dict(m) for m in request.messages])
        if self.tool and not any(m.get("role") == "tool" for m in request.messages):
            return InProcessResponse(tool_calls=(InProcessToolCall("c1", self.tool, {}),))
        return InProcessResponse(content="ok", usage={"prompt_tokens": 3, "completion_tokens": 1})


def _def(name: str, **kw: Any) -> AgentDef:
    return AgentDef(name, f"{name} agent", "SOUL", "m", **kw)


def _inject(counter: list[str], label: str) -> Any:
    def before_llm(event: dict[str, Any]) -> dict[str, Any]:
        counter.append(label)
        extra = {"role": "system", "content": f"INJECTED-BY-{label}"}
        return {"messages": [*event["messages"], extra]}

    return before_llm


async def test_h1_runtime_hooks_reach_an_agent_turn(autojump_clock: trio.testing.MockClock) -> None:
    fired: list[str] = []
    wire = Wire()
    hooks = Hooks(before_llm=_inject(fired, "HOOK"))
    async with open_agent_runtime({"a": _def("a")}, generate=wire, hooks=hooks) as rt:
        await rt.run("a", "hi")
    assert FIXTURE["H1"]["expect"]["hookRan"] is bool(fired)
    needle = FIXTURE["H1"]["expect"]["wireTranscriptContains"]
    assert any(m["content"] == needle for m in wire.seen[0])


async def test_h2_runtime_on_metric_receives_the_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[dict[str, Any]] = []
    async with open_agent_runtime({"a": _def("a")}, generate=Wire(), on_metric=events.append) as rt:
        await rt.run("a", "hi")
    assert [e["event"] for e in events] == FIXTURE["H2"]["expect"]["eventsReceived"]
    # The same events a directly built client sends (nothing added, renamed, dropped).
    direct: list[dict[str, Any]] = []
    client = create_in_process_client(
        InProcessOptions(model="m", generate=Wire(), system_prompt="SOUL", on_metric=direct.append)
    )
    await client.run("hi")
    assert [sorted(e) for e in events] == [sorted(e) for e in direct]


async def test_h3_a_def_hooks_replace_the_runtime_hooks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fired: list[str] = []
    registry = {"a": _def("a", hooks=Hooks(before_llm=_inject(fired, "A"))), "b": _def("b")}
    runtime_hooks = Hooks(before_llm=_inject(fired, "RUNTIME"))
    async with open_agent_runtime(registry, generate=Wire(), hooks=runtime_hooks) as rt:
        await rt.run("a", "one turn")
        await rt.run("b", "one turn")
    expect = FIXTURE["H3"]["expect"]
    assert fired.count("A") == expect["agentAHookFired"]
    assert fired.count("RUNTIME") == expect["runtimeHookFired"]
    assert fired == ["A", "RUNTIME"]  # never merged: the runtime hook ran only for B


async def test_h4_hooks_and_on_metric_resolve_independently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fired: list[str] = []
    events: list[dict[str, Any]] = []
    registry = {"a": _def("a", hooks=Hooks(before_llm=_inject(fired, "A")))}
    async with open_agent_runtime(
        registry,
        generate=Wire(),
        hooks=Hooks(before_llm=_inject(fired, "RUNTIME")),
        on_metric=events.append,
    ) as rt:
        await rt.run("a", "hi")
    assert (fired == ["A"]) is FIXTURE["H4"]["expect"]["usesDefHooks"]
    assert bool(events) is FIXTURE["H4"]["expect"]["usesRuntimeOnMetric"]


def _seeded() -> list[dict[str, Any]]:
    given = FIXTURE["H5"]["given"]["generator"]
    messages = [dict(given["leading"])]
    for _ in range(given["pairs"]):
        messages.append({"role": "user", "content": "q" * 200})
        messages.append({"role": "assistant", "content": "a" * 200})
    return messages


def _compactor(max_tokens: int, keep_tail: int) -> Any:
    """A stand-in §7F compactor (a before_llm hook): over *max_tokens* (chars / 4), keep
    the leading system message, a summary, and a tail of about *keep_tail* tokens that
    starts at a user turn."""

    def before_llm(event: dict[str, Any]) -> dict[str, Any] | None:
        messages = list(event["messages"])
        if sum(len(str(m.get("content") or "")) for m in messages) // 4 <= max_tokens:
            return None
        head, body = messages[0], messages[1:]
        tail: list[dict[str, Any]] = []
        size = 0
        for m in reversed(body):
            tail.insert(0, m)
            size += len(str(m.get("content") or "")) // 4
            if size >= keep_tail and m["role"] == "user":
                break
        summary = {"role": "system", "content": "SUMMARY-OF-HEAD"}
        return {"messages": [head, summary, *tail]}

    return before_llm


async def test_h5_a_per_agent_compactor_compacts_an_agent_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    options = FIXTURE["H5"]["given"]["compactorOptions"]
    hooks = Hooks(before_llm=_compactor(options["maxTokens"], options["keepTail"]))
    wire = Wire()
    async with open_agent_runtime({"a": _def("a", hooks=hooks)}, generate=wire) as rt:
        h = rt.spawn(rt.root, "a")
        await rt.conversation_store.save(h.id, _seeded())
        stored = await rt.conversation_store.get(h.id)
        assert stored is not None
        expect = FIXTURE["H5"]["expect"]
        assert len(stored) == expect["preRunStoredMessages"]
        rt.wake(h, "next question")
        assert (await rt.wait(h)).status == "done"
    sent = wire.seen[0]
    assert len(sent) < len(stored)
    assert sent[0]["content"] == expect["firstWireMessageContent"]
    assert any(m["content"] == expect["wireTranscriptContains"] for m in sent)
    assert sent[2]["role"] == "user"  # the retained tail starts at a user turn


async def test_h6_a_compacted_turn_that_suspends_is_rewound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ask(args: dict[str, Any], ctx: ToolContext) -> Any:
        return pending(Request(kind="approval", prompt="ok?"))

    options = FIXTURE["H5"]["given"]["compactorOptions"]
    hooks = Hooks(before_llm=_compactor(options["maxTokens"], options["keepTail"]))
    tool = define_tool("ask", "asks", None, ask)
    async with open_agent_runtime(
        {"a": _def("a", hooks=hooks, tools=[tool])}, generate=Wire(tool="ask")
    ) as rt:
        h = rt.spawn(rt.root, "a")
        await rt.conversation_store.save(h.id, _seeded())
        rt.wake(h, "next question")
        result = await rt.wait(h)
        stored = await rt.conversation_store.get(h.id)
    expect = FIXTURE["H6"]["expect"]
    assert result.status == expect["status"]
    assert stored is not None and len(stored) == expect["storedMessagesAfter"]
    assert stored == _seeded()  # the full pre-turn checkpoint, compaction discarded


@pytest.mark.parametrize("explicit_none", [False, True])
async def test_unset_seams_are_byte_identical(
    autojump_clock: trio.testing.MockClock, explicit_none: bool
) -> None:
    """No hooks/on_metric anywhere: the wire transcript, stored transcript, trace and
    result equal a plain client's run with the same soul and prompt."""
    wire = Wire()
    options: dict[str, Any] = {"hooks": None, "on_metric": None} if explicit_none else {}
    async with open_agent_runtime({"a": _def("a")}, generate=wire, **options) as rt:
        result = await rt.run("a", "hi")
        stored = await rt.conversation_store.get("root/a.1")
        trace = list(rt.handle("root/a.1").transitions)
    plain_wire = Wire()
    plain = await create_in_process_client(
        InProcessOptions(model="m", generate=plain_wire, system_prompt="SOUL")
    ).run("hi")
    assert wire.seen == plain_wire.seen
    assert stored == plain.messages
    assert (result.text, result.status, result.own_tokens) == ("ok", "done", 4)
    assert trace == ["idle→running", "running→idle"]
