"""Core hardening: deep arguments, non-finite usage, fixed tuples, ``self``/``cls``
parameters, and the SPEC parity items (builtin schemas, ``Request`` key order)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolnexus_trio import (
    BuiltinsConfig,
    GenerateError,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    Tool,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    tool,
)
from toolnexus_trio._schema import (
    MAX_JSON_DEPTH,
    SchemaError,
    compile_schema,
    nested_too_deeply,
    schema_for_type,
)

FIXTURES = Path(__file__).parent / "fixtures"


def deep_list(depth: int) -> Any:
    """``[[[...]]]`` nested *depth* deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


DEEP_TEXT = '{"items":' + "[" * 1200 + "]" * 1200 + "}"  # the 2.4 KB report


@tool
async def echo(items: list[Any]) -> str:
    """Echo."""
    return "echoed"


def model(*arguments: Any) -> Any:
    """A model that calls ``echo`` once per argument value (one turn), then says "done"."""
    turns = iter(
        [
            InProcessResponse(
                tool_calls=[
                    InProcessToolCall(id=f"c{i}", name="echo", arguments=a)
                    for i, a in enumerate(arguments)
                ]
            )
        ]
    )

    async def generate(request: GenerateRequest) -> InProcessResponse:
        return next(turns, InProcessResponse(content="done"))

    return generate


async def run_with(*arguments: Any) -> Any:
    tk = await create_toolkit(ToolkitOptions(extra_tools=[echo], builtins=BuiltinsConfig.off()))
    client = create_in_process_client(InProcessOptions(model="m", generate=model(*arguments)))
    return await client.run("go", tk)


TOO_DEEP = "Invalid JSON arguments: nested too deeply"


# Item 3: deeply nested tool-call arguments -------------------------------------------


async def test_deep_argument_string_is_an_error_result_and_the_run_goes_on() -> None:
    assert len(DEEP_TEXT) > 2400
    result = await run_with(DEEP_TEXT, '{"items": [1]}')
    assert result.status == "done" and result.text == "done"
    first, second = result.tool_calls
    assert first.is_error and first.output.startswith(TOO_DEEP)
    assert first.args == DEEP_TEXT  # kept as sent, for the transcript
    assert second.output == "echoed"
    # The transcript is balanced and still JSON.
    json.dumps(result.messages)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 600, 1200, 50_000])
async def test_deep_dict_arguments_from_generate_are_an_error_result(depth: int) -> None:
    result = await run_with({"items": deep_list(depth)})
    assert result.status == "done"
    (record,) = result.tool_calls
    assert record.is_error and record.output.startswith(TOO_DEEP)
    assert record.args == {}
    json.dumps(result.messages)


async def test_arguments_at_the_depth_limit_still_work() -> None:
    # The object itself is one level: items may nest MAX_JSON_DEPTH - 1 more.
    value = {"items": deep_list(MAX_JSON_DEPTH - 1)}
    result = await run_with(value, json.dumps(value))
    assert [r.output for r in result.tool_calls] == ["echoed", "echoed"]


async def test_deep_arguments_do_not_end_a_stream() -> None:
    tk = await create_toolkit(ToolkitOptions(extra_tools=[echo], builtins=BuiltinsConfig.off()))
    client = create_in_process_client(
        InProcessOptions(model="m", generate=model(DEEP_TEXT, {"items": deep_list(5000)}))
    )
    async with client.stream("go", tk) as channel:
        events = [e async for e in channel]
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["is_error"] for r in results] == [True, True]
    assert all(r["output"].startswith(TOO_DEEP) for r in results)
    assert events[-1]["type"] == "done" and events[-1]["result"].text == "done"


def test_nested_too_deeply_is_iterative_and_exact() -> None:
    assert not nested_too_deeply(deep_list(MAX_JSON_DEPTH))
    assert nested_too_deeply(deep_list(MAX_JSON_DEPTH + 1))
    assert nested_too_deeply(deep_list(100_000))
    assert not nested_too_deeply({"a": [1, {"b": "[[[[["}]}, limit=3)
    assert nested_too_deeply({"a": [1, {"b": []}]}, limit=3)
    # The bracket count of the text lets shallow values skip the walk entirely.
    assert not nested_too_deeply(deep_list(10), limit=3, text="[]")


RECURSIVE = {
    "$ref": "#/definitions/node",
    "definitions": {"node": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
}


async def test_validating_a_deep_value_against_a_recursive_schema_is_an_issue() -> None:
    validator = compile_schema(RECURSIVE)
    assert validator.issues(deep_list(50)) == []
    (issue,) = validator.issues(deep_list(5000))
    assert (issue.rule, issue.location) == ("depth", "$")

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.ok("ran")

    t = Tool(
        name="tree",
        description="",
        input_schema={
            "type": "object",
            "properties": {"tree": {"$ref": "#/definitions/node"}},
            "definitions": RECURSIVE["definitions"],
        },
        source=ToolSource.NATIVE,
        execute=run,
    )
    result = await t.call({"tree": deep_list(5000)})
    assert result.is_error and "nested too deeply" in result.output


def test_a_deeply_nested_schema_is_a_schema_error() -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(SchemaError, match="nested too deeply"):
        compile_schema(schema)


# Item 8: non-finite usage numbers --------------------------------------------------------


@pytest.mark.parametrize("key", ["prompt_tokens", "completionTokens", "total_tokens"])
@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
async def test_non_finite_usage_is_a_generate_error_with_the_result(
    key: str, number: float
) -> None:
    async def generate(request: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(content="hi", usage={key: number})

    metrics: list[dict[str, Any]] = []
    client = create_in_process_client(
        InProcessOptions(model="m", generate=generate, on_metric=metrics.append)
    )
    with pytest.raises(GenerateError, match="non-finite usage number") as info:
        await client.run("go")
    assert info.value.result is not None
    assert info.value.result.messages == [{"role": "user", "content": "go"}]
    assert [m["status"] for m in metrics if m["event"] == "llm"] == ["error"]


# Item 6: fixed tuples ---------------------------------------------------------------------


async def test_tool_fixed_tuple_schema_and_structuring() -> None:
    seen: list[Any] = []

    @tool
    async def pair(p: tuple[int, str], rest: tuple[float, ...] = ()) -> str:
        seen.append((p, rest))
        return "ok"

    assert pair.input_schema["properties"]["p"] == {
        "type": "array",
        "items": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
        "additionalItems": False,
    }
    assert pair.input_schema["properties"]["rest"] == {"type": "array", "items": {"type": "number"}}
    assert (await pair.call({"p": [1, "one"], "rest": [1, 2.5]})).output == "ok"
    assert seen == [((1, "one"), (1.0, 2.5))]
    assert type(seen[0][0]) is tuple and type(seen[0][1]) is tuple
    for bad in ([1, 2], [1], [1, "one", "x"], [], ["one", 1], [True, "one"]):
        result = await pair.call({"p": bad})
        assert result.is_error and "Invalid arguments" in result.output, bad
    assert len(seen) == 1


def test_fixed_tuple_schemas_are_draft_07() -> None:
    assert schema_for_type(tuple[()]) == {"type": "array", "maxItems": 0}
    assert schema_for_type(tuple[int]) == {
        "type": "array",
        "items": [{"type": "integer"}],
        "minItems": 1,
        "maxItems": 1,
        "additionalItems": False,
    }
    assert schema_for_type(tuple) == {"type": "array"}
    v = compile_schema(schema_for_type(tuple[bool, str, int]))
    assert v.issues([True, "a", 3]) == []
    assert {i.rule for i in v.issues([True, "a", 3, 4])} == {"maxItems", "items"}


# Item 7: parameters named self and cls --------------------------------------------------


async def test_self_and_cls_are_ordinary_parameters_of_a_plain_function() -> None:
    @tool
    async def odd(self: str, cls: int) -> str:
        return f"{self}/{cls}"

    assert list(odd.input_schema["properties"]) == ["self", "cls"]
    assert odd.input_schema["required"] == ["self", "cls"]
    assert (await odd.call({"self": "a", "cls": 2})).output == "a/2"


async def test_bound_methods_and_classmethods_still_hide_self_and_cls() -> None:
    class Shop:
        def __init__(self) -> None:
            self.prefix = "item"

        async def find(self, name: str) -> str:
            return f"{self.prefix}:{name}"

        @classmethod
        async def kind(cls, n: int) -> str:
            return f"{cls.__name__}:{n}"

    find = tool(Shop().find)
    kind = tool(Shop.kind)
    assert list(find.input_schema["properties"]) == ["name"]
    assert list(kind.input_schema["properties"]) == ["n"]
    assert (await find.call({"name": "x"})).output == "item:x"
    assert (await kind.call({"n": 3})).output == "Shop:3"


# Parity: builtin schemas and Request key order ------------------------------------------


def _compact(value: Any) -> str:
    # Insertion order kept: byte-identical means key order too.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def test_builtin_schemas_are_byte_identical_to_the_reference() -> None:
    expected = json.loads((FIXTURES / "builtin_schemas.json").read_text(encoding="utf-8"))
    tk = await create_toolkit()
    for name in ("question", "todowrite"):
        found = tk.get(name)
        assert found is not None
        assert _compact(found.input_schema) == _compact(expected[name]), name
        # And what a provider receives.
        (entry,) = [t for t in tk.to_openai() if t["function"]["name"] == name]
        assert _compact(entry["function"]["parameters"]) == _compact(expected[name])


def test_request_to_json_puts_id_first() -> None:
    full = Request(
        kind="authorization", prompt="Log in", url="https://x", data={"a": 1},
        expires_at="2026-12-01T00:00:00Z",
    )  # fmt: skip
    assert list(full.to_json()) == ["id", "kind", "prompt", "url", "data", "expiresAt"]
    assert list(Request(kind="k", prompt="p").to_json()) == ["id", "kind", "prompt"]
    assert list(Request(id="r1", kind="k", prompt="p", expires_at="t").to_json()) == [
        "id", "kind", "prompt", "expiresAt"
    ]  # fmt: skip
    assert Request.from_json(full.to_json()) == full
