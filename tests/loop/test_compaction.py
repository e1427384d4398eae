"""Context compaction (SPEC §7F): the compactor hook on its own, in the loop, and the fixture."""

from __future__ import annotations

import copy
import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from helpers import TaskCensus
from hypothesis import given, settings
from hypothesis import strategies as st

from toolnexus_trio import (
    CancelToken,
    ClientOptions,
    GenerateRequest,
    HookError,
    Hooks,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    RunTimeout,
    ToolkitOptions,
    compactor,
    create_client,
    create_in_process_client,
    create_toolkit,
    define_tool,
    estimate_tokens,
)
from toolnexus_trio.loop._compaction import FLUSH_REMINDER, SUMMARY_PREFIX
from toolnexus_trio.testing import open_fake_provider

Message = dict[str, Any]
BLOCK_S = 60.0
FIXTURE = json.loads((Path(__file__).parent / "compaction" / "fixture.json").read_text())


def count_summary(older: list[Message]) -> str:
    return f"summarized {len(older)} messages"


async def async_count_summary(older: list[Message]) -> str:
    await trio.lowlevel.checkpoint()
    return f"summarized {len(older)} messages"


def fixture_transcript() -> list[Message]:
    spec = FIXTURE["input"]
    out: list[Message] = [{"role": "system", "content": spec["systemPrompt"]}]
    for i in range(spec["generator"]["userTurns"]):
        out += [
            {"role": "user", "content": f"question {i} " + "pad " * 40},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " + "data " * 40},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    return out


def tool_call_ids(message: Message) -> set[str]:
    """The tool-call ids an assistant message carries, in either dialect."""
    ids = {c["id"] for c in message.get("tool_calls") or ()}
    content = message.get("content")
    if isinstance(content, list):
        ids |= {b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
    return ids


def tool_result_ids(message: Message) -> set[str]:
    if message.get("role") == "tool":
        return {message["tool_call_id"]}
    content = message.get("content")
    if message.get("role") == "user" and isinstance(content, list):
        return {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
    return set()


def is_user_turn(message: Message) -> bool:
    """A user message that is no tool result: what a request must start with."""
    return message.get("role") == "user" and not tool_result_ids(message)


def assert_tool_pair_safe(messages: list[Message]) -> None:
    called: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            called |= tool_call_ids(message)
        orphans = tool_result_ids(message) - called
        assert not orphans, f"orphaned tool result(s) {orphans} in {messages}"


# The shared fixture (C1-C4) ------------------------------------------------------------


@pytest.mark.parametrize("flush", [False, True])
async def test_the_compaction_fixture(flush: bool) -> None:
    options, expect = FIXTURE["options"], FIXTURE["expect"]
    messages = fixture_transcript()
    before = copy.deepcopy(messages)
    hook = compactor(
        max_tokens=options["maxTokens"],
        keep_tail=options["keepTail"],
        summarize=count_summary,
        flush_to_memory=flush,
    )
    change = await hook({"messages": messages, "tools": [], "model": "m", "turn": 0})
    assert messages == before  # the input list is never changed
    assert expect["compacts"] and change is not None
    out = change["messages"]
    assert estimate_tokens(out) < estimate_tokens(messages)
    lead = expect["leadingSystemMessage"]
    assert out[0] is messages[0] and out[0]["role"] == lead["role"]
    assert lead["contentContains"] in out[0]["content"]
    summary = out[1]
    assert summary["role"] == "system"
    assert summary["content"].startswith(expect["summaryContentPrefix"])
    extra = 1 if flush else 0
    tail = out[2 + extra :]
    if flush:
        reminder = out[2]
        assert reminder == {"role": "system", "content": FLUSH_REMINDER}
        assert "memory tool" in reminder["content"]
    assert tail == messages[len(messages) - len(tail) :]  # a suffix, untouched
    older = len(messages) - 1 - len(tail)
    assert summary["content"] == f"{SUMMARY_PREFIX}summarized {older} messages"
    first_non_system = next(m for m in out if m["role"] != "system")
    assert first_non_system["role"] == expect["firstNonSystemMessageRole"]
    assert_tool_pair_safe(out)
    # The largest tail within keepTail: one more group (4 messages back) would not fit.
    assert estimate_tokens(tail) <= options["keepTail"]
    assert estimate_tokens(messages[len(messages) - len(tail) - 4 :]) > options["keepTail"]


async def test_the_fixture_transcript_under_budget_is_a_no_op() -> None:
    messages = fixture_transcript()[:9]
    hook = compactor(max_tokens=FIXTURE["options"]["maxTokens"], summarize=count_summary)
    assert await hook({"messages": messages}) is None


# The estimator ---------------------------------------------------------------------------


def test_estimate_is_compact_json_characters_over_four_rounded_up() -> None:
    messages = [
        {"role": "user", "content": "héllo ✓"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "x": [1, 2]}]},
    ]
    want = sum(
        math.ceil(len(json.dumps(m, separators=(",", ":"), ensure_ascii=False)) / 4)
        for m in messages
    )
    assert estimate_tokens(messages) == want
    assert estimate_tokens([]) == 0
    assert estimate_tokens([{"role": "user", "content": "abcd"}]) == 8  # 30 chars


async def test_at_the_limit_nothing_happens_one_token_over_it_compacts() -> None:
    messages: list[Message] = [{"role": "system", "content": "s"}]
    for i in range(6):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
    total = estimate_tokens(messages)
    assert (
        await compactor(max_tokens=total, summarize=count_summary)({"messages": messages}) is None
    )
    change = await compactor(max_tokens=total - 1, summarize=count_summary)({"messages": messages})
    assert change is not None


async def test_the_remembered_counts_follow_a_changed_transcript() -> None:
    small = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    messages: list[Message] = [{"role": "system", "content": "s"}, *small]
    budget = estimate_tokens(messages)
    hook = compactor(max_tokens=budget, summarize=count_summary)
    assert await hook({"messages": messages}) is None
    # A message replaced by a new, larger one (the loop replaces, never edits in place).
    messages[2] = {"role": "assistant", "content": "a" * 400}
    messages.append({"role": "user", "content": "next"})
    change = await hook({"messages": messages})
    assert change is not None and change["messages"][-1]["content"] == "next"
    # A shorter, different transcript is counted afresh.
    assert await hook({"messages": small}) is None
    # The same objects, grown: still counted right (only the new message is new).
    grown = [*small, {"role": "user", "content": "x" * 400}]
    assert estimate_tokens(grown) > budget
    change = await hook({"messages": grown})
    assert change is not None


async def test_a_custom_count_tokens_decides_and_splits() -> None:
    messages: list[Message] = [{"role": "system", "content": "s"}]
    for i in range(5):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
    seen: list[int] = []

    def by_count(ms: Any) -> int:
        seen.append(len(ms))
        return len(ms)  # one token per message

    hook = compactor(max_tokens=10, keep_tail=4, summarize=count_summary, count_tokens=by_count)
    change = await hook({"messages": messages})
    assert change is not None
    assert change["messages"][2:] == messages[-4:]  # the largest tail of <= 4 "tokens"
    assert seen[0] == 11
    assert await hook({"messages": messages[:10]}) is None


def one_prompt(groups: int, size: int = 200) -> list[Message]:
    """A one-prompt run: the system prompt, the prompt, then tool group after tool group."""
    out: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "only"}]
    for i in range(groups):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        out += [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "r" * size}]  # fmt: skip
    return out


async def test_a_one_prompt_run_keeps_its_prompt_and_latest_tool_group() -> None:
    # Issue 30: the prompt is the only user turn; summarizing the whole body left a
    # request with no user turn at all (Anthropic refuses it), then one starting with an
    # assistant turn. The prompt stays, followed by the latest group(s) within keep_tail.
    messages = one_prompt(3)
    change = await compactor(max_tokens=10, summarize=count_summary)({"messages": messages})
    assert change is not None
    assert change["messages"] == [messages[0], {"role": "system", "content": SUMMARY_PREFIX
                                  + "summarized 4 messages"}, messages[1], *messages[-2:]]  # fmt: skip
    change = await compactor(max_tokens=10, keep_tail=200, summarize=count_summary)(
        {"messages": messages}
    )
    assert change is not None and change["messages"][2:] == [messages[1], *messages[-4:]]
    # The prompt and one group are all there is: nothing older to summarize.
    assert await compactor(max_tokens=10, summarize=count_summary)(
        {"messages": one_prompt(1)}
    ) is None  # fmt: skip
    # No user turn at all: the whole body is summarized.
    only_model = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a" * 99}]
    change = await compactor(max_tokens=10, summarize=count_summary)({"messages": only_model})
    assert change is not None and change["messages"][2:] == []


async def test_too_big_a_tail_keeps_the_last_user_turn() -> None:
    # The last boundary's tail is over keep_tail: kept anyway (safety over size).
    two_users = [*one_prompt(1), {"role": "user", "content": "u" * 400}]
    change = await compactor(max_tokens=10, keep_tail=1, summarize=count_summary)(
        {"messages": two_users}
    )
    assert change is not None and change["messages"][2:] == [two_users[-1]]
    # And with tool groups after it: that turn and its latest group.
    three = [*one_prompt(2), *one_prompt(2)[1:]]
    change = await compactor(max_tokens=10, keep_tail=1, summarize=count_summary)(
        {"messages": three}
    )
    assert change is not None and change["messages"][2:] == [three[6], *three[-2:]]
    assert change["messages"][1]["content"].endswith("summarized 7 messages")


async def test_without_a_leading_system_message_the_summary_comes_first() -> None:
    messages = [
        {"role": "user", "content": "q" * 200},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "last"},
    ]
    change = await compactor(max_tokens=20, summarize=count_summary)({"messages": messages})
    assert change is not None
    assert change["messages"] == [
        {"role": "system", "content": SUMMARY_PREFIX + "summarized 2 messages"},
        messages[-1],
    ]


async def test_an_anthropic_tool_result_message_is_never_a_boundary() -> None:
    messages: list[Message] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "first " * 50},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "looking"},
                {"type": "tool_use", "id": "tu1", "name": "t", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "x" * 40}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]
    # keep_tail fits the tool_result message and after, but it is not a boundary; the
    # prompt and its latest tool group are all there is: nothing to summarize.
    hook = compactor(max_tokens=50, keep_tail=60, summarize=count_summary)
    assert await hook({"messages": messages}) is None
    # A second tool group: the first is summarized, the prompt stays, the pair is whole.
    second = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu2", "name": "t",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu2",
                                      "content": "y" * 40}]},
    ]  # fmt: skip
    change = await hook({"messages": [*messages[:4], *second]})
    assert change is not None
    assert change["messages"][1]["content"].endswith("summarized 2 messages")
    assert change["messages"][2:] == [messages[1], *second]
    assert_tool_pair_safe(change["messages"])
    # A plain user message with text blocks is one.
    messages.append({"role": "user", "content": [{"type": "text", "text": "next"}]})
    change = await compactor(max_tokens=50, keep_tail=60, summarize=count_summary)(
        {"messages": messages}
    )
    assert change is not None and change["messages"][2:] == [messages[-1]]


def test_bad_budgets_are_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        compactor(max_tokens=-1, summarize=count_summary)
    with pytest.raises(ValueError, match="keep_tail"):
        compactor(max_tokens=10, keep_tail=-1, summarize=count_summary)


# Generated transcripts, both dialects ---------------------------------------------------


@st.composite
def transcripts(draw: st.DrawFn, dialect: str) -> list[Message]:
    text = st.text(alphabet="abc é", max_size=60)
    out: list[Message] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": "SOUL " + draw(text)})
    next_id = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
            if dialect == "anthropic" and draw(st.booleans()):
                out.append({"role": "user", "content": [{"type": "text", "text": draw(text)}]})
            else:
                out.append({"role": "user", "content": draw(text)})
        elif kind == "assistant":
            out.append({"role": "assistant", "content": draw(text)})
        else:
            n = draw(st.integers(1, 3))
            ids = [f"id{next_id + k}" for k in range(n)]
            next_id += n
            results = [draw(text) for _ in ids]
            if dialect == "openai":
                out.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": i, "type": "function",
                             "function": {"name": "t", "arguments": "{}"}}
                            for i in ids
                        ],
                    }
                )  # fmt: skip
                out += [{"role": "tool", "tool_call_id": i, "content": r} for i, r in zip(ids, results, strict=True)]  # fmt: skip
            else:
                out.append(
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": i, "name": "t", "input": {}}
                                    for i in ids],
                    }
                )  # fmt: skip
                out.append(
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": i, "content": r}
                                    for i, r in zip(ids, results, strict=True)],
                    }
                )  # fmt: skip
    return out


def check_generated(messages: list[Message], max_tokens: int, keep_tail: int | None) -> None:
    before = copy.deepcopy(messages)
    hook = compactor(max_tokens=max_tokens, keep_tail=keep_tail, summarize=count_summary)
    change = trio.run(hook, {"messages": messages})
    assert messages == before
    if estimate_tokens(messages) <= max_tokens:
        assert change is None
        return
    lead = 1 if messages and messages[0]["role"] == "system" else 0
    body = messages[lead:]
    users = [i for i, m in enumerate(body) if is_user_turn(m)]
    if change is None:  # only when there is nothing older to summarize
        assert not body or is_user_turn(body[0])
        return
    out = change["messages"]
    assert out[:lead] == before[:lead] and all(
        a is b for a, b in zip(out[:lead], messages[:lead], strict=True)
    )
    assert out[lead]["content"].startswith(SUMMARY_PREFIX)
    kept = out[lead + 1 :]
    if kept and kept[1:] != body[len(body) - len(kept) + 1 :]:
        pytest.fail(f"not a suffix: {kept}")
    if kept and kept != body[len(body) - len(kept) :]:
        # The most recent user turn, then a suffix from an assistant message.
        assert kept[0] is body[users[-1]] and kept[1]["role"] == "assistant"
    assert_tool_pair_safe(out)
    if users:  # a user turn always leads what is kept (the provider needs one)
        assert kept and is_user_turn(kept[0])
        callers = [m for m in body[users[-1] :] if tool_call_ids(m)]
        if callers:  # the latest tool group is kept
            assert any(m is callers[-1] for m in kept)
    else:
        assert kept == []
    older = len(body) - len(kept)
    assert older >= 1 and out[lead]["content"].endswith(f"summarized {older} messages")


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_generated_transcripts_never_orphan_a_tool_result(dialect: str) -> None:
    @settings(max_examples=300, deadline=None)
    @given(
        transcripts(dialect),
        st.integers(0, 400),
        st.one_of(st.none(), st.integers(0, 300)),
    )
    def check(messages: list[Message], max_tokens: int, keep_tail: int | None) -> None:
        check_generated(messages, max_tokens, keep_tail)

    check()


# In the loop ------------------------------------------------------------------------------


def long_model(seen: list[list[Message]]) -> Any:
    """A model that calls a tool twice, then answers; records what it was sent."""

    async def generate(req: GenerateRequest) -> InProcessResponse:
        seen.append(copy.deepcopy(list(req.messages)))
        if req.turn < 2:
            return InProcessResponse(
                content="x" * 200,
                tool_calls=[InProcessToolCall(id=f"k{req.turn}", name="nope", arguments={})],
            )
        return InProcessResponse(content="final")

    return generate


def history() -> list[Message]:
    out: list[Message] = []
    for i in range(8):
        out += [{"role": "user", "content": f"old {i} " + "p" * 100},
                {"role": "assistant", "content": f"answer {i}"}]  # fmt: skip
    return out


async def test_under_budget_a_run_is_byte_identical_to_no_compactor() -> None:
    results = []
    for hooks in (None, Hooks(before_llm=compactor(max_tokens=10**6, summarize=count_summary))):
        seen: list[list[Message]] = []
        client = create_in_process_client(
            InProcessOptions(model="m", generate=long_model(seen), system_prompt="S", hooks=hooks)
        )
        result = await client.run("go", history=history())
        results.append((json.dumps(result.messages), json.dumps(seen), result.status))
    assert results[0] == results[1]


async def test_in_the_loop_the_compacted_transcript_is_the_run_s_from_then_on() -> None:
    seen: list[list[Message]] = []
    hook = compactor(max_tokens=300, keep_tail=150, summarize=async_count_summary)
    client = create_in_process_client(
        InProcessOptions(
            model="m", generate=long_model(seen), system_prompt="S", hooks=Hooks(before_llm=hook)
        )
    )
    result = await client.run("go", history=[{"role": "system", "content": "S"}, *history()])
    assert result.status == "done" and result.text == "final"
    assert all(estimate_tokens(sent) <= 300 or sent[1]["role"] == "system" for sent in seen)
    assert seen[0][0] == {"role": "system", "content": "S"}
    assert seen[0][1]["content"].startswith(SUMMARY_PREFIX)
    assert result.messages[0] == {"role": "system", "content": "S"}
    assert result.messages[1]["content"].startswith(SUMMARY_PREFIX)
    assert_tool_pair_safe(result.messages)
    assert result.messages[-1] == {"role": "assistant", "content": "final"}


async def test_a_sync_summarizer_runs_too() -> None:
    seen: list[list[Message]] = []
    hook = compactor(max_tokens=300, summarize=count_summary)
    client = create_in_process_client(
        InProcessOptions(model="m", generate=long_model(seen), hooks=Hooks(before_llm=hook))
    )
    result = await client.run("go", history=history())
    assert result.messages[0]["content"].startswith(SUMMARY_PREFIX + "summarized ")


async def test_a_summarizer_that_fails_or_answers_no_text_fails_the_run() -> None:
    async def broken(older: list[Message]) -> str:
        raise RuntimeError("model down")

    def not_text(older: list[Message]) -> Any:
        return {"tool_calls": []}

    for summarize, match in ((broken, "model down"), (not_text, "must return a str")):
        hook = compactor(max_tokens=100, summarize=summarize)
        client = create_in_process_client(
            InProcessOptions(model="m", generate=long_model([]), hooks=Hooks(before_llm=hook))
        )
        with pytest.raises(HookError, match=match) as info:
            await client.run("go", history=history())
        assert info.value.result is not None
        assert [m["content"] for m in info.value.result.messages[:2]] == [
            m["content"] for m in history()[:2]
        ]


async def test_a_cancelled_summarizer_leaves_the_transcript_unchanged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()

    async def slow(older: list[Message]) -> str:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    token = CancelToken()
    hook = compactor(max_tokens=100, summarize=slow)
    client = create_in_process_client(
        InProcessOptions(model="m", generate=long_model([]), hooks=Hooks(before_llm=hook))
    )
    with TaskCensus() as census:
        async with trio.open_nursery() as nursery:

            async def cancel_when_summarizing() -> None:
                await started.wait()
                token.cancel("user")

            nursery.start_soon(cancel_when_summarizing)
            result = await client.run("go", history=history(), cancel=token)
        census.assert_no_new_tasks()
    assert result.status == "cancelled"
    assert result.messages == [*history(), {"role": "user", "content": "go"}]

    # The run timeout: the same, in RunTimeout.result.
    client = create_in_process_client(
        InProcessOptions(
            model="m",
            generate=long_model([]),
            hooks=Hooks(before_llm=compactor(max_tokens=100, summarize=slow)),
            run_timeout_ms=500,
        )
    )
    with pytest.raises(RunTimeout) as info:
        await client.run("go", history=history())
    assert info.value.result.messages == [*history(), {"role": "user", "content": "go"}]


async def test_a_cancelled_sync_summarizer_returns_at_once_and_changes_nothing() -> None:
    release, finished = threading.Event(), threading.Event()
    started = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def blocking(older: list[Message]) -> str:
        trio.from_thread.run_sync(started.set, trio_token=token)
        # A blocking call (an HTTP client without async). Bounded, so that a summarizer
        # the cancel cannot leave makes this test fail instead of hang.
        release.wait(timeout=BLOCK_S)
        finished.set()
        return "too late"

    cancel = CancelToken()
    hook = compactor(max_tokens=100, summarize=blocking)
    client = create_in_process_client(
        InProcessOptions(model="m", generate=long_model([]), hooks=Hooks(before_llm=hook))
    )
    try:
        async with trio.open_nursery() as nursery:

            async def cancel_when_summarizing() -> None:
                await started.wait()
                cancel.cancel("user")

            nursery.start_soon(cancel_when_summarizing)
            result = await client.run("go", history=history(), cancel=cancel)
        assert not finished.is_set()  # the run did not wait for the blocked thread
    finally:
        release.set()  # let the abandoned worker thread end
    assert result.status == "cancelled"
    assert result.messages == [*history(), {"role": "user", "content": "go"}]


async def test_a_stored_conversation_keeps_the_compacted_transcript() -> None:
    seen: list[list[Message]] = []
    hook = compactor(max_tokens=300, summarize=count_summary)
    client = create_in_process_client(
        InProcessOptions(model="m", generate=long_model(seen), hooks=Hooks(before_llm=hook))
    )
    for prompt in ("one " * 50, "two " * 50):
        await client.ask(prompt, id="t")
    assert seen[-1][0]["content"].startswith(SUMMARY_PREFIX)


# Over HTTP, both wire styles: what the provider receives --------------------------------


async def _fetch(args: dict[str, Any], ctx: Any) -> str:
    return f"page {args.get('n')} " + "lorem ipsum " * 170  # about 2,000 characters


@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_a_one_prompt_run_after_compaction_is_a_request_the_provider_accepts(
    style: str,
) -> None:
    """Issue 30: one prompt and four ~2,000-character tool results under
    ``compactor(max_tokens=1500)`` sent ``messages: []`` (the summary in ``system``),
    then a request starting with an assistant turn. Every request the provider gets
    starts with a user turn and holds the latest tool call with its result."""
    tool = define_tool("fetch", "Fetch a page.", None, _fetch)
    toolkit = await create_toolkit(ToolkitOptions(extra_tools=[tool], builtins=False))
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"f{n}", "name": "fetch", "arguments": {"n": n}}]} for n in range(4)
    ]
    script.append({"text": "all read"})
    hook = compactor(max_tokens=1500, summarize=count_summary)
    async with open_fake_provider(script) as provider:
        options = ClientOptions(
            base_url=provider.base_url,
            style=style,  # type: ignore[arg-type]
            model="m",
            api_key="k",  # type: ignore[arg-type]
            system_prompt="You read pages.",
            hooks=Hooks(before_llm=hook),
        )
        async with create_client(options) as client:
            result = await client.run("Read the four pages.", toolkit)
    assert result.status == "done" and result.text == "all read"
    bodies = [r.json for r in provider.requests]
    assert len(bodies) == 5
    compacted = 0
    for n, body in enumerate(bodies):
        messages = body["messages"]
        if style == "anthropic":
            system = body.get("system")
            system_text = system if isinstance(system, str) else json.dumps(system)
            compacted += SUMMARY_PREFIX in system_text
        else:
            compacted += any(
                m["role"] == "system" and SUMMARY_PREFIX in str(m["content"]) for m in messages
            )
            messages = [m for m in messages if m["role"] != "system"]
        assert messages, f"request {n} has no messages"
        first = messages[0]
        assert first["role"] == "user" and not tool_result_ids(first), f"request {n}: {first}"
        assert "Read the four pages." in json.dumps(first)
        assert_tool_pair_safe(messages)
        if n:  # the latest tool call and its result are there
            latest = f"f{n - 1}"
            assert any(latest in tool_call_ids(m) for m in messages)
            assert any(latest in tool_result_ids(m) for m in messages)
    assert compacted >= 2  # the third request on is compacted
