"""Tools, results, contexts, cancel tokens, schemas, define_tool and @tool."""

from __future__ import annotations

import logging
from typing import Any, Literal

import attrs
import pytest
import trio

import toolnexus_trio as tn
from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    CancelToken,
    Request,
    Tool,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_toolkit,
    define_tool,
    empty_schema,
    pending,
    pending_of,
    tool,
)
from toolnexus_trio._schema import compile_schema


async def _ok(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.ok(f"got {args}")


def raw_tool(name: str = "t", execute: Any = _ok, schema: dict[str, Any] | None = None) -> Tool:
    return Tool(
        name=name,
        description="d",
        input_schema=schema or empty_schema(),
        source=ToolSource.CUSTOM,
        execute=execute,
    )


def test_public_names_are_pinned() -> None:
    expected = {
        "Answer", "BuiltinsConfig", "ProviderError", "RUN_STATUSES", "answer_declined",
        "answer_output", "CancelToken", "Client", "ClientOptions", "Conversation",
        "ConversationStore", "ErrorInfo", "GenerateError", "GenerateRequest", "HookError",
        "Hooks", "InMemoryConversationStore", "InProcessOptions", "InProcessResponse",
        "InProcessToolCall", "Request", "RunError", "RunResult", "RunTimeout", "SchemaError",
        "SkillDef", "SkillInfo", "SkillInventory", "SkillSkip", "SkipReason", "SuspendedCall", "Tool", "ToolCallRecord", "ToolContext", "ToolHints", "ToolResult",
        "ToolSource", "Toolkit", "ToolkitOptions", "TranslateResult", "TranslatedToolCall",
        "create_client", "create_in_process_client", "create_toolkit", "define_tool",
        "empty_schema", "http_tool", "list_skills", "open_toolkit", "pending", "pending_of",
        "tool", "AlreadyAnswered", "PendingExpired", "PendingState", "PendingStore",
        "SqliteConversationStore",
        "PostgresConversationStore",
        "compactor", "estimate_tokens",
        "relay_tool",
        "Sampler", "SamplingLimits", "SamplingMessage", "SamplingRequest", "SamplingResult",
        "sampler_from_client", "sampler_from_generate",
        "Agent", "AgentDef", "Budget", "TaskResult", "agent", "open_agent_runtime",
        "RetryOutput", "RetryTool",
        # Content parts (SPEC §1B, issue 32)
        "ContentPart", "ContentPartError", "UnsupportedPartError", "audio", "describe_part",
        "file", "get_max_part_bytes", "image", "load_part", "part", "set_max_part_bytes",
        "summarize", "text",
    }  # fmt: skip
    assert set(tn.__all__) == expected
    assert tn.Tool.__module__ == "toolnexus_trio"
    # dir() shows the public names and the subpackages, not typing's helpers (issue 31)
    assert "TYPE_CHECKING" not in dir(tn)


def test_result_and_context_defaults() -> None:
    assert ToolResult.ok("x") == ToolResult("x", False, None)
    assert ToolResult.error("bad", {"k": 1}) == ToolResult("bad", True, {"k": 1})
    ctx = ToolContext()
    assert isinstance(ctx.cancel, CancelToken) and not ctx.cancel.is_cancelled
    assert (ctx.call_id, ctx.timeout_ms, ctx.answer) == (None, 0, None)
    assert ToolContext().cancel is not ctx.cancel
    assert [s.value for s in ToolSource] == [
        "custom", "native", "builtin", "skill", "mcp", "http", "tesseron", "relay", "a2a",
    ]  # fmt: skip
    hints = tn.ToolHints()
    assert (hints.read_only, hints.destructive, hints.idempotent, hints.open_world) == (
        False, False, False, False,
    )  # fmt: skip


async def test_cancel_token_basics() -> None:
    token = CancelToken()
    assert not token.is_cancelled and token.reason is None
    token.cancel("stop")
    token.cancel("again")  # idempotent: the first reason stays
    assert token.is_cancelled and token.reason == "stop"
    with trio.fail_after(1):
        await token.wait_cancelled()  # returns at once


async def test_cancel_token_wakes_waiters_and_cancels_bound_scopes(
    autojump_clock: trio.abc.Clock,
) -> None:
    token = CancelToken()
    woke: list[str] = []

    async def waiter() -> None:
        await token.wait_cancelled()
        woke.append("waiter")

    async def sleeper() -> None:
        with trio.CancelScope() as scope, token.bound(scope):
            await trio.sleep(100)
        woke.append(f"sleeper caught={scope.cancelled_caught}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(sleeper)
        await trio.sleep(1)
        token.cancel()
    assert sorted(woke) == ["sleeper caught=True", "waiter"]
    assert trio.current_time() < 2


async def test_cancel_token_cancels_every_bound_scope_and_none_detached() -> None:
    # The first scope is kept apart from the others (no set for a token binding one):
    # whichever order they are bound and unbound in, cancel reaches exactly the bound.
    token = CancelToken()
    scopes = [trio.CancelScope() for _ in range(4)]
    for scope in scopes:
        token.attach(scope)
    token.detach(scopes[0])  # the first one
    token.detach(scopes[2])  # one of the others
    token.attach(scopes[0])  # bound again, after the others
    with trio.CancelScope() as bounded, token.bound(bounded):
        await trio.lowlevel.checkpoint()
    token.cancel("stop")
    assert [s.cancel_called for s in scopes] == [True, True, False, True]
    assert not bounded.cancel_called  # left its with block before the cancel
    late = trio.CancelScope()
    token.attach(late)  # bound after the cancel: cancelled at once
    assert late.cancel_called


async def test_call_validates_arguments_and_names_path_and_rule() -> None:
    ran: list[bool] = []

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ran.append(True)
        return ToolResult.ok("ran")

    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}},
        "required": ["n"],
    }
    t = raw_tool(execute=execute, schema=schema)
    bad = await t.call({"n": 0})
    assert bad.is_error
    assert "Invalid arguments for tool 't'" in bad.output
    assert "$.n" in bad.output and "minimum" in bad.output
    missing = await t.call({})
    assert missing.is_error and "required" in missing.output
    assert ran == []
    good = await t.call({"n": 2})
    assert good == ToolResult.ok("ran")


async def test_call_turns_exceptions_into_error_results() -> None:
    async def boom(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise RuntimeError("disk on fire")

    async def wrong_type(args: dict[str, Any], ctx: ToolContext) -> Any:
        return 42

    assert await raw_tool(execute=boom).call({}) == ToolResult.error("disk on fire")
    weird = await raw_tool(execute=wrong_type).call({})
    assert weird.is_error and "not a ToolResult" in weird.output


async def test_call_is_cancelled_promptly_even_when_tool_only_sleeps(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(5)
        return "done"

    ctx = ToolContext()
    t = define_tool("slow", "", None, slow)

    async def cancel_soon() -> None:
        await trio.sleep(0.05)
        ctx.cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_soon)
        result = await t.call({}, ctx)
    assert result == ToolResult.error("cancelled")
    assert trio.current_time() == pytest.approx(0.05)


async def test_call_with_an_already_cancelled_token() -> None:
    ctx = ToolContext()
    ctx.cancel.cancel()

    async def slow(args: dict[str, Any], c: ToolContext) -> str:
        await trio.sleep(5)
        return "done"

    with trio.fail_after(1):
        result = await define_tool("slow", "", None, slow).call({}, ctx)
    assert result.output == "cancelled"


async def test_call_enforces_timeout_ms(autojump_clock: trio.abc.Clock) -> None:
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "done"

    result = await define_tool("slow", "", None, slow).call({}, ToolContext(timeout_ms=250))
    assert result == ToolResult.error("timed out after 250ms")
    assert trio.current_time() == pytest.approx(0.25)


async def test_enclosing_cancel_is_not_swallowed(autojump_clock: trio.abc.Clock) -> None:
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(10)
        return "done"

    t = define_tool("slow", "", None, slow)
    outcome: list[ToolResult] = []
    with trio.move_on_after(1) as scope:
        outcome.append(await t.call({}))
    assert scope.cancelled_caught and outcome == []


async def test_define_tool() -> None:
    async def echo(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["x"])

    async def fails(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ValueError("nope")

    async def returns_result(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.error("custom", {"m": 1})

    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    t = define_tool("echo", "Echo", schema, echo)
    assert t.source is ToolSource.NATIVE and t.input_schema == schema
    assert await t.call({"x": "hi"}) == ToolResult.ok("hi")
    assert define_tool("e", "", None, echo).input_schema == empty_schema()
    assert empty_schema() == {"type": "object", "properties": {}}
    assert await define_tool("f", "", None, fails).call({}) == ToolResult.error("nope")
    passthrough = await define_tool("r", "", None, returns_result).call({})
    assert passthrough == ToolResult.error("custom", {"m": 1})

    def not_async(args: dict[str, Any], ctx: ToolContext) -> str:
        return "x"

    # a plain function is accepted and runs in a worker thread (tests/test_tool_authoring.py)
    assert await define_tool("s", "", None, not_async).call({}) == ToolResult.ok("x")
    with pytest.raises(TypeError, match="expected a function"):
        define_tool("s", "", None, "not callable")  # type: ignore[arg-type]


def test_schemas_are_compiled_once_and_remote_refs_refused() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert compile_schema(schema) is compile_schema(dict(schema))
    with pytest.raises(ValueError, match="remote \\$ref refused"):
        raw_tool(schema={"type": "object", "properties": {"a": {"$ref": "https://x/y.json"}}})
    with pytest.raises(ValueError, match="invalid JSON Schema"):
        raw_tool(schema={"type": "no-such-type"})
    with pytest.raises(ValueError, match="prefixItems"):
        raw_tool(schema={"type": "array", "prefixItems": [{"type": "string"}]})


@attrs.frozen
class Point:
    x: int
    y: int = 0


async def test_tool_decorator_derives_schema_and_injects_context() -> None:
    seen: list[ToolContext] = []

    @tool
    async def place(
        label: str,
        where: Point,
        scale: float = 1.0,
        flags: list[str] | None = None,
        mode: Literal["fast", "slow"] = "fast",
        extra: dict[str, Any] | None = None,
        on: bool = False,
        ctx: ToolContext | None = None,
    ) -> str:
        """Place a labelled point.

        More text that is not part of the description.
        """
        if isinstance(ctx, ToolContext):
            seen.append(ctx)
        return f"{label}@{where.x},{where.y}x{scale} {mode} {flags} {on}"

    assert place.name == "place"
    assert place.description == "Place a labelled point."
    props = place.input_schema["properties"]
    assert props["label"] == {"type": "string"}
    assert props["scale"] == {"type": "number"}
    assert props["flags"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert props["extra"] == {"type": ["object", "null"]}
    assert props["mode"] == {"enum": ["fast", "slow"]}
    assert props["on"] == {"type": "boolean"}
    assert props["where"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert place.input_schema["required"] == ["label", "where"]
    assert "ctx" not in props
    ctx = ToolContext(call_id="c1")
    result = await place.call({"label": "a", "where": {"x": 2}, "mode": "slow"}, ctx)
    assert result == ToolResult.ok("a@2,0x1.0 slow None False")
    assert seen == [ctx]
    explicit_null = await place.call({"label": "a", "where": {"x": 2}, "flags": None})
    assert explicit_null == ToolResult.ok("a@2,0x1.0 fast None False")
    rejected = await place.call({"label": "a", "where": {"x": 2}, "mode": "medium"})
    assert rejected.is_error and "$.mode" in rejected.output


async def test_tool_decorator_with_arguments_and_json_results() -> None:
    @tool(name="sum_up", description="Adds")
    async def add(a: int, b: int, ctx: ToolContext) -> dict[str, int]:
        return {"sum": a + b}

    assert (add.name, add.description) == ("sum_up", "Adds")
    assert await add.call({"a": 2, "b": 3}) == ToolResult.ok('{"sum":5}')


def test_request_and_answer_wire_forms() -> None:
    req = Request(kind="approval", prompt="Proceed?")
    assert req.id.startswith("pnd-")
    assert Request(kind="k", prompt="p").id != req.id
    assert req.to_json() == {"id": req.id, "kind": "approval", "prompt": "Proceed?"}
    full = Request(
        id="r1", kind="authorization", prompt="Log in", url="https://x", data={"a": 1},
        expires_at="2026-12-01T00:00:00Z",
    )  # fmt: skip
    assert full.to_json() == {
        "id": "r1", "kind": "authorization", "prompt": "Log in", "url": "https://x",
        "data": {"a": 1}, "expiresAt": "2026-12-01T00:00:00Z",
    }  # fmt: skip
    assert Request.from_json(full.to_json()) == full
    answer = Answer("r1", False, reason="declined")
    assert answer.to_json() == {"id": "r1", "ok": False, "reason": "declined"}
    assert Answer.from_json({"id": "r1", "ok": True, "data": {"v": 2}}) == Answer(
        "r1", True, {"v": 2}
    )


def test_pending_and_pending_of() -> None:
    req = Request(kind="authorization", prompt="Log in", url="https://login")
    result = pending(req)
    assert result.is_error and result.output == "Log in\nhttps://login"
    assert result.metadata == {"pending": req}
    assert pending_of(result) is req
    assert pending(Request(kind="approval", prompt="Go?")).output == "Go?"
    assert pending_of(ToolResult.ok("x")) is None
    as_json = ToolResult.error("p", {"pending": {"id": "1", "kind": "k", "prompt": "p"}})
    assert pending_of(as_json) == Request(id="1", kind="k", prompt="p")


async def test_toolkit_routes_adapts_and_dedupes(caplog: pytest.LogCaptureFixture) -> None:
    a = raw_tool("a")
    a2 = raw_tool("a")
    b = raw_tool("b", schema={"type": "object", "properties": {"q": {"type": "string"}}})
    with caplog.at_level(logging.WARNING, logger="toolnexus_trio"):
        tk = await create_toolkit(
            ToolkitOptions(extra_tools=[a, b, a2], builtins=BuiltinsConfig.off())
        )
    assert [t.name for t in tk.tools()] == ["a", "b"]
    assert tk.get("a") is a and tk.get("zzz") is None
    assert "duplicate tool name 'a'" in caplog.text
    assert await tk.execute("nope", {}) == ToolResult.error("Unknown tool: nope")
    assert (await tk.execute("b", {"q": "x"})).output == "got {'q': 'x'}"
    schema_b = b.input_schema
    assert tk.to_openai()[1] == {
        "type": "function",
        "function": {"name": "b", "description": "d", "parameters": schema_b},
    }
    assert tk.to_anthropic()[1] == {"name": "b", "description": "d", "input_schema": schema_b}
    assert tk.to_gemini() == [
        {
            "functionDeclarations": [
                {"name": "a", "description": "d", "parameters": empty_schema()},
                {"name": "b", "description": "d", "parameters": schema_b},
            ]
        }
    ]
    async with tk as entered:
        assert entered is tk
    await tk.aclose()  # idempotent


async def test_builtins_config_semantics() -> None:
    names = [t.name for t in (await create_toolkit()).tools()]
    assert names == [
        "bash", "read", "write", "edit", "grep", "glob", "webfetch", "question",
        "apply_patch", "todowrite",
    ]  # fmt: skip
    assert [t.name for t in (await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig.off()))).tools()] == []  # fmt: skip
    no_question = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(tools={"question": False, "bash": False})))  # fmt: skip
    assert [t.name for t in no_question.tools()] == [
        n for n in names if n not in ("question", "bash")
    ]
    keep_all = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(tools={"question": True})))  # fmt: skip
    assert [t.name for t in keep_all.tools()] == names
    assert (await create_toolkit(ToolkitOptions(builtins=False))).tools() == []
    off_wins = BuiltinsConfig(enabled=False, tools={"question": True})
    assert (await create_toolkit(ToolkitOptions(builtins=off_wins))).tools() == []
    mine = raw_tool("question")
    shadowed = await create_toolkit(ToolkitOptions(extra_tools=[mine]))
    assert [t.name for t in shadowed.tools()] == [n for n in names if n != "question"] + [
        "question"
    ]
    assert shadowed.get("question") is mine
    dropped = await create_toolkit(ToolkitOptions(disable_tools=["todowrite"]))
    assert [t.name for t in dropped.tools()] == names[:-1]
    assert all(t.source is ToolSource.BUILTIN for t in (await create_toolkit()).tools())


async def test_question_builtin_suspends_then_returns_the_answer() -> None:
    tk = await create_toolkit()
    args = {
        "questions": [
            {"question": "Which colour?", "header": "Colour", "options": ["red", "blue"]},
            {"question": "Why?"},
        ]
    }
    first = await tk.execute("question", args)
    req = pending_of(first)
    assert req is not None and req.kind == "question"
    assert req.prompt == "Which colour? (options: red, blue)\nWhy?"
    assert req.data == {"questions": args["questions"]}
    answered = await tk.execute(
        "question", args, ToolContext(answer=Answer(req.id, True, {"answers": ["red", "x"]}))
    )
    assert answered == ToolResult.ok('{"answers":["red","x"]}')
    bad = await tk.execute("question", {"questions": "nope"})
    assert bad.is_error and "$.questions" in bad.output


async def test_todowrite_builtin() -> None:
    tk = await create_toolkit()
    todos = [
        {"id": "1", "text": "write tests", "completed": True},
        {"id": "2", "text": "ship", "completed": False},
    ]
    result = await tk.execute("todowrite", {"todos": todos})
    assert result == ToolResult.ok("[x] write tests\n[ ] ship", {"todos": todos})
    assert (await tk.execute("todowrite", {"todos": []})).output == "(no todos)"
