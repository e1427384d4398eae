"""Typed results (issue 33): output_type in its three modes, against the real wire of a
loopback FakeProvider (both styles) and the in-process client."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal, TypedDict

import attrs
import pydantic
import pytest
from http_helpers import STYLES, adder, assert_balanced, served

from toolnexus_trio import (
    BuiltinsConfig,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    RetryOutput,
    RetryTool,
    RunResult,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    tool,
)
from toolnexus_trio.loop._output import output_spec, partial_json


@attrs.frozen
class Person:
    name: str
    age: int = attrs.field()


@attrs.frozen
class Cat:
    meows: bool


@attrs.frozen
class Dog:
    barks: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Invoice(pydantic.BaseModel):
    number: str
    total: float


def final(arguments: Any, name: str = "final_result") -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# -- tool mode over the wire ------------------------------------------------------


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("stream", [False, True])
async def test_tool_mode_answers_well(style: str, stream: bool) -> None:
    script = [{"text": "here", **final({"name": "Ada", "age": 36})}]
    async with served(style, script) as (provider, client):
        toolkit = await adder()
        if stream:
            async with client.stream("who?", toolkit, output_type=Person) as events:
                seen = [e async for e in events]
            result = seen[-1]["result"]
            partials = [e["partial"] for e in seen if e["type"] == "output_partial"]
            # The final tool's arguments, parsed as their two fragments arrived.
            assert partials and partials[-1] == {"name": "Ada", "age": 36}
            assert len(partials) == 2
            assert [e["output"] for e in seen if e["type"] == "output"] == [Person("Ada", 36)]
            assert not [e for e in seen if e["type"] == "tool_args_delta"]
        else:
            result = await client.run("who?", toolkit, output_type=Person)
    assert result.status == "done" and result.output == Person("Ada", 36)
    assert result.text == "here"
    # The final tool is declared beside the toolkit's, never part of it.
    body = provider.requests[0].json
    names = [t["function"]["name"] if style == "openai" else t["name"] for t in body["tools"]]
    assert names == ["add", "final_result"]
    assert [t.name for t in toolkit.tools()] == ["add"]
    assert_balanced(result.messages)
    assert result.tool_calls[-1].output == "Final result accepted."


@pytest.mark.parametrize("style", STYLES)
async def test_invalid_json_then_a_good_answer(style: str) -> None:
    script = [final('{"name": "Ada", "age": '), final({"name": "Ada", "age": 36})]
    async with served(style, script) as (provider, client):
        result = await client.run("who?", output_type=Person)
    assert result.status == "done" and result.output == Person("Ada", 36)
    # The first answer went back to the model as the final tool's error.
    error = provider.requests[1].json["messages"][-1]
    text = json.dumps(error)
    assert "final_result" in text and ("JSON" in text or "required" in text)
    assert_balanced(result.messages)


@pytest.mark.parametrize("style", STYLES)
async def test_the_wrong_shape_twice_ends_incomplete_keeping_the_last_value(style: str) -> None:
    script = [final({"name": "Ada", "age": "old"}), final({"name": "Ada", "age": -1.5})]
    async with served(style, script) as (provider, client):
        result = await client.run("who?", output_type=Person)
    assert result.status == "incomplete" and result.limit == "output"
    assert result.output == {"name": "Ada", "age": -1.5}  # the last invalid value, as sent
    assert len(provider.requests) == 2  # output_retries=1: one retry, then stop
    first_error = result.tool_calls[0].output
    assert "$.age" in first_error and "rule: type" in first_error
    assert result.tool_calls[0].is_error
    assert_balanced(result.messages)


@pytest.mark.parametrize("style", STYLES)
async def test_final_tool_beside_other_calls_does_not_start_them(style: str) -> None:
    ran: list[int] = []

    @tool
    async def add(a: int, b: int) -> str:
        """Add two integers."""
        ran.append(a + b)
        return str(a + b)

    toolkit = await create_toolkit(ToolkitOptions(extra_tools=[add], builtins=BuiltinsConfig.off()))
    step = {
        "tool_calls": [
            {"name": "add", "arguments": {"a": 1, "b": 2}},
            {"name": "final_result", "arguments": {"name": "Ada", "age": 36}},
            {"name": "add", "arguments": {"a": 3, "b": 4}},
        ]
    }
    async with served(style, [step]) as (_, client):
        result = await client.run("who?", toolkit, output_type=Person)
    assert result.status == "done" and result.output == Person("Ada", 36)
    assert ran == []
    first, last, second = result.tool_calls
    assert last.name == "final_result" and not last.is_error
    for record in (first, second):
        assert record.is_error and record.metadata is not None
        assert "not started" in record.metadata["not_started"]
    assert_balanced(result.messages)


async def test_the_final_tool_avoids_a_users_tool_of_that_name() -> None:
    @tool(name="final_result")
    async def user_final() -> str:
        """A user's tool that happens to be called final_result."""
        return "mine"

    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[user_final], builtins=BuiltinsConfig.off())
    )
    async with served("openai", [final({"name": "Ada", "age": 1}, "final_result_2")]) as (
        provider,
        client,
    ):
        result = await client.run("who?", toolkit, output_type=Person)
    assert result.output == Person("Ada", 1)
    names = [t["function"]["name"] for t in provider.requests[0].json["tools"]]
    assert names == ["final_result", "final_result_2"]


@pytest.mark.parametrize("style", STYLES)
async def test_text_instead_of_the_final_tool_is_sent_back(style: str) -> None:
    script = [{"text": "Ada, 36"}, final({"name": "Ada", "age": 36})]
    async with served(style, script) as (provider, client):
        result = await client.run("who?", output_type=Person)
    assert result.output == Person("Ada", 36)
    assert "final_result" in json.dumps(provider.requests[1].json["messages"][-1])


# -- prompted and native ------------------------------------------------------------


@pytest.mark.parametrize("style", STYLES)
async def test_prompted_mode_reads_json_from_the_text(style: str) -> None:
    script = [
        {"text": 'Sure: {"name": "Ada"}'},
        {"text": '```json\n{"name": "Ada", "age": 3}\n```'},
    ]
    async with served(style, script, system_prompt="Be brief.") as (provider, client):
        result = await client.run("who?", output_type=Person, output_mode="prompted")
    assert result.status == "done" and result.output == Person("Ada", 3)
    first = provider.requests[0].json
    system = first["messages"][0]["content"] if style == "openai" else first["system"]
    assert system.startswith("Be brief.") and '"age"' in system
    assert "tools" not in first
    retry = provider.requests[1].json["messages"][-1]
    assert retry["role"] == "user" and "'age'" in retry["content"]
    assert "rule: required" in retry["content"]


async def test_native_mode_openai_body_matches_the_openai_sdk_types() -> None:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    @attrs.frozen
    class Strict:
        name: str
        tags: list[str]

    async with served("openai", [{"text": '{"name": "a", "tags": ["x"]}'}]) as (provider, client):
        result = await client.run("go", output_type=Strict, output_mode="native")
    assert result.output == Strict("a", ["x"])
    body = provider.requests[0].json
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "final_result"
    assert fmt["json_schema"]["strict"] is True  # every property required, objects closed
    # The official SDK's own request type accepts the body as it is.
    adapter = pydantic.TypeAdapter(CompletionCreateParamsNonStreaming)
    adapter.validate_python(body, strict=False)
    bad = {**body, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}
    with pytest.raises(pydantic.ValidationError):
        adapter.validate_python(bad)  # the check would catch a missing name


async def test_native_mode_is_not_strict_when_a_field_has_a_default() -> None:
    @attrs.frozen
    class Loose:
        name: str
        n: int = 0

    async with served("openai", [{"text": '{"name": "a"}'}]) as (provider, client):
        result = await client.run("go", output_type=Loose, output_mode="native")
    assert result.output == Loose("a")
    assert provider.requests[0].json["response_format"]["json_schema"]["strict"] is False


async def test_native_mode_anthropic_uses_output_config_format() -> None:
    async with served("anthropic", [{"text": '{"result": [1, 2]}'}]) as (provider, client):
        result = await client.run("go", output_type=list[int], output_mode="native")
    assert result.output == [1, 2]
    body = provider.requests[0].json
    assert body["output_config"] == {
        "format": {
            "type": "json_schema",
            "schema": {
                "type": "object",
                "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
                "required": ["result"],
                "additionalProperties": False,
            },
        }
    }
    assert "response_format" not in body
    # The official Anthropic SDK's own request type accepts the body as it is.
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    pydantic.TypeAdapter(MessageCreateParamsNonStreaming).validate_python(body)


async def test_native_mode_responses_uses_text_format() -> None:
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    async with served("responses", [{"text": '{"result": [1, 2]}'}]) as (provider, client):
        result = await client.run("go", output_type=list[int], output_mode="native")
    assert result.status == "done" and result.output == [1, 2]
    body = provider.requests[0].json
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "final_result",
            "schema": {
                "type": "object",
                "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
                "required": ["result"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    }
    assert "response_format" not in body
    # The official SDK's own request type accepts the body as it is.
    pydantic.TypeAdapter(ResponseCreateParamsNonStreaming).validate_python(body)


async def test_native_mode_gemini_uses_generation_config() -> None:
    from google.genai import types

    async with served("gemini", [{"text": '{"name": "Ada", "age": 36}'}]) as (provider, client):
        result = await client.run("who?", output_type=Person, output_mode="native")
    assert result.status == "done" and result.output == Person("Ada", 36)
    config = provider.requests[0].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["name", "age"]
    assert "response_format" not in provider.requests[0].json
    # The official google-genai SDK's own config type reads it (camelCase aliases).
    read = types.GenerationConfig.model_validate(config)
    assert read.response_json_schema == config["responseJsonSchema"]


@pytest.mark.parametrize("style", ["responses", "gemini"])
async def test_tool_mode_over_the_newer_styles(style: str) -> None:
    async with served(style, [final({"name": "Ada", "age": 36})]) as (_, client):
        result = await client.run("who?", output_type=Person)
    assert result.status == "done" and result.output == Person("Ada", 36)
    assert_balanced(result.messages)


@pytest.mark.parametrize("style", STYLES)
async def test_streamed_prompted_output_gives_partials(style: str) -> None:
    script = [{"text": '{"name": "Ada", "age": 36}'}]
    async with (
        served(style, script) as (_, client),
        client.stream("who?", output_type=Person, output_mode="prompted") as events,
    ):
        seen = [e async for e in events]
    partials = [e["partial"] for e in seen if e["type"] == "output_partial"]
    assert {"name": "Ada"} in partials and partials[-1] == {"name": "Ada", "age": 36}
    assert seen[-1]["result"].output == Person("Ada", 36)


# -- the types, in process ------------------------------------------------------------


def scripted(*answers: Any) -> Any:
    queue = list(answers)
    seen: list[Any] = []

    async def generate(request: Any) -> InProcessResponse:
        seen.append(request)
        arguments = queue.pop(0)
        if isinstance(arguments, str):
            return InProcessResponse(content=arguments)
        name = request.tools[-1]["function"]["name"]
        return InProcessResponse(tool_calls=[InProcessToolCall("c", name, arguments)])

    generate.seen = seen  # type: ignore[attr-defined]
    return generate


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
          "required": ["n"]}  # fmt: skip


@pytest.mark.parametrize(
    ("output_type", "sent", "expected"),
    [
        (Point, {"x": 1, "y": 2}, Point(1, 2)),
        (Movie, {"title": "Up", "year": 2009}, {"title": "Up", "year": 2009}),
        (int, {"result": 7}, 7),
        (str, {"result": "hi"}, "hi"),
        (list[Point], {"result": [{"x": 1, "y": 2}]}, [Point(1, 2)]),
        (Literal["yes", "no"], {"result": "no"}, "no"),
        (Color, {"result": "blue"}, Color.BLUE),
        (Cat | Dog, {"result": {"barks": 3}}, Dog(3)),
        (Cat | Dog, {"result": {"meows": True}}, Cat(True)),
        (Invoice, {"number": "A1", "total": 9.5}, Invoice(number="A1", total=9.5)),
        (SCHEMA, {"n": 2}, {"n": 2}),
    ],
)
async def test_every_kind_of_output_type(output_type: Any, sent: Any, expected: Any) -> None:
    client = create_in_process_client(InProcessOptions(model="m", generate=scripted(sent)))
    result = await client.run("go", output_type=output_type)
    assert result.status == "done", result.tool_calls
    assert result.output == expected and type(result.output) is type(expected)


async def test_a_raw_schema_is_checked() -> None:
    client = create_in_process_client(
        InProcessOptions(model="m", generate=scripted({"n": 0}, {"n": 0}))
    )
    result = await client.run("go", output_type=SCHEMA)
    assert result.limit == "output" and result.output == {"n": 0}
    assert "$.n" in result.tool_calls[0].output and "rule: minimum" in result.tool_calls[0].output


async def test_the_schema_is_derived_once_per_type() -> None:
    assert output_spec(Person) is output_spec(Person)
    assert output_spec(list[Point]) is output_spec(list[Point])
    assert output_spec(dict(SCHEMA)) is output_spec(dict(SCHEMA))


async def test_options_hold_the_defaults_and_keywords_override() -> None:
    generate = scripted({"x": 1, "y": 2}, "no type")
    client = create_in_process_client(
        InProcessOptions(model="m", generate=generate, output_type=Point, output_retries=0)
    )
    result = await client.run("go")
    assert result.output == Point(1, 2)
    plain = await client.run("go", output_type=None)  # None: the options' Point again
    assert plain.status == "incomplete" and plain.limit == "output"  # text; no retry left


async def test_a_run_without_output_type_has_no_output() -> None:
    client = create_in_process_client(InProcessOptions(model="m", generate=scripted("hi")))
    result = await client.run("go")
    assert result.output is None and result.text == "hi"


async def test_bad_mode_or_retries_is_refused_before_any_call() -> None:
    generate = scripted()
    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    with pytest.raises(ValueError, match="output_mode"):
        await client.run("go", output_type=Point, output_mode="json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="output_retries"):
        await client.run("go", output_type=Point, output_retries=-1)
    with pytest.raises(TypeError, match="cannot derive"):
        await client.run("go", output_type=object())
    assert generate.seen == []


# -- validators and RetryOutput / RetryTool ------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True])
async def test_an_output_validator_may_send_the_value_back(is_async: bool) -> None:
    checked: list[Point] = []

    def check(point: Point) -> None:
        checked.append(point)
        if point.x < 0:
            raise RetryOutput("x must not be negative")

    async def acheck(point: Point) -> None:
        check(point)

    generate = scripted({"x": -1, "y": 0}, {"x": 1, "y": 0})
    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    result = await client.run(
        "go", output_type=Point, output_validators=[acheck if is_async else check]
    )
    assert result.output == Point(1, 0) and checked == [Point(-1, 0), Point(1, 0)]
    assert "x must not be negative" in result.tool_calls[0].output


async def test_retry_tool_is_bounded_by_the_tools_retries() -> None:
    @tool(retries=1)
    async def lookup(key: str) -> str:
        """Look a key up."""
        raise RetryTool(f"no key {key!r}; try a lower-case key")

    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[lookup], builtins=BuiltinsConfig.off())
    )
    turns = iter(["A", "B"])

    async def generate(request: Any) -> InProcessResponse:
        key = next(turns, None)
        if key is None:
            return InProcessResponse(content="gave up")
        return InProcessResponse(tool_calls=[InProcessToolCall("c" + key, "lookup", {"key": key})])

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    result = await client.run("go", toolkit)
    first, second = result.tool_calls
    assert "try a lower-case key" in first.output and "call 'lookup' again" in first.output
    assert "no retries left for 'lookup'" in second.output
    assert result.text == "gave up"


# -- durable ------------------------------------------------------------------------


async def test_typed_output_round_trips_through_json() -> None:
    client = create_in_process_client(
        InProcessOptions(model="m", generate=scripted({"result": [{"x": 1, "y": 2}]}))
    )
    result = await client.run("go", output_type=list[Point])
    document = json.loads(json.dumps(result.to_json()))
    assert document["output"] == [{"x": 1, "y": 2}]
    assert RunResult.from_json(document).output == [{"x": 1, "y": 2}]
    assert RunResult.from_json(document, output_type=list[Point]).output == [Point(1, 2)]
    older = {k: v for k, v in document.items() if k != "output"}
    assert RunResult.from_json(older).output is None


def test_partial_json_closes_what_is_open() -> None:
    assert partial_json('{"a": 1, "b": "he') == {"a": 1, "b": "he"}
    assert partial_json('{"a": [1, 2') == {"a": [1, 2]}
    assert partial_json('{"a": 1, "b') == {"a": 1}
    assert partial_json("") is None


async def test_a_paused_typed_run_stays_typed_when_resumed() -> None:
    from toolnexus_trio import Answer, Request, ToolContext, define_tool, pending

    async def approve(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="may I?"))
        return "approved"

    toolkit = await create_toolkit(
        ToolkitOptions(
            extra_tools=[define_tool("approve", "asks", None, approve)],
            builtins=BuiltinsConfig.off(),
        )
    )
    answers: list[Any] = [
        InProcessResponse(tool_calls=[InProcessToolCall("a", "approve", {})]),
        InProcessResponse(tool_calls=[InProcessToolCall("f", "final_result", {"x": 1, "y": 2})]),
    ]

    async def generate(request: Any) -> InProcessResponse:
        return answers.pop(0)

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    paused = await client.run("go", toolkit, output_type=Point)
    assert paused.status == "pending" and paused.output is None
    assert paused.pending is not None
    resumed = await client.resume(paused, [Answer(id=paused.pending.id, ok=True)])
    assert resumed.status == "done" and resumed.output == Point(1, 2)


async def test_the_stream_says_when_an_answer_is_sent_back() -> None:
    script = [final({"name": "Ada"}), final({"name": "Ada", "age": 1})]
    async with (
        served("openai", script) as (_, client),
        client.stream("who?", output_type=Person) as events,
    ):
        seen = [e async for e in events]
    [invalid] = [e for e in seen if e["type"] == "output_invalid"]
    assert invalid["retrying"] is True and "'age'" in invalid["reason"]
    assert seen[-1]["result"].output == Person("Ada", 1)


async def test_a_typed_run_round_trips_through_a_durable_store() -> None:
    from toolnexus_trio import (
        Answer,
        Request,
        SqliteConversationStore,
        ToolContext,
        define_tool,
        pending,
    )

    async def approve(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="may I?"))
        return "approved"

    toolkit = await create_toolkit(
        ToolkitOptions(
            extra_tools=[define_tool("approve", "asks", None, approve)],
            builtins=BuiltinsConfig.off(),
        )
    )
    answers: list[Any] = [
        InProcessResponse(tool_calls=[InProcessToolCall("a", "approve", {})]),
        InProcessResponse(tool_calls=[InProcessToolCall("f", "final_result", {"x": 3, "y": 4})]),
    ]

    async def generate(request: Any) -> InProcessResponse:
        return answers.pop(0)

    store = SqliteConversationStore(":memory:")
    options = InProcessOptions(model="m", generate=generate, store=store, output_type=Point)
    paused = await create_in_process_client(options).ask("go", toolkit, id="t1")
    assert paused.status == "pending" and paused.pending is not None
    # Another client (as another process would): the state comes from the store's JSON.
    later = create_in_process_client(options)
    done = await later.answer("t1", [Answer(id=paused.pending.id, ok=True)], toolkit=toolkit)
    assert done.status == "done" and done.output == Point(3, 4)
    assert RunResult.from_json(done.to_json(), output_type=Point).output == Point(3, 4)


async def test_a_long_streamed_answer_is_parsed_a_bounded_number_of_times() -> None:
    from toolnexus_trio.loop._output import TOOL_ARGS_DELTA, partial_emitter, start_output

    out = start_output(list[int], "tool", 1, None, [])
    sent: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        sent.append(event)

    wrapped = partial_emitter(out, emit)
    text = json.dumps({"result": list(range(2000))})
    for ch in text:  # one character per delta: the worst a server can do
        await wrapped({"type": TOOL_ARGS_DELTA, "index": 0, "name": "final_result", "delta": ch})
    partials = [e["partial"] for e in sent if e["type"] == "output_partial"]
    assert len(text) > 10_000 and len(partials) < 120  # geometric, not one per delta
    assert not [e for e in sent if e["type"] == TOOL_ARGS_DELTA]
    assert partials[-1][:3] == [0, 1, 2]
