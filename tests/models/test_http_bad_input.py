"""A hostile or broken provider gets a clear error and the transcript loses nothing."""

from __future__ import annotations

from typing import Any

import pytest
from http_helpers import STYLES, adder, assert_balanced, calls_step, served
from trio.abc import Clock

from toolnexus_trio import GenerateError


async def failing_run(style: str, script: list[Any], stream: bool = False, **kw: Any) -> Any:
    """Run (or stream) against *script*; return the GenerateError it must raise."""
    kw.setdefault("retries", 0)
    async with served(style, script, **kw) as (_, client):
        toolkit = await adder()
        try:
            if stream:
                async with client.stream("go", toolkit) as events:
                    async for _ in events:
                        pass
            else:
                await client.run("go", toolkit)
        except GenerateError as exc:
            return exc
    raise AssertionError("the run did not raise GenerateError")


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    ("body", "message"),
    [("<html>bad gateway</html>", "not JSON"), ("[1, 2]", "expected an object"),
     ('{"choices": []}', None), ('{"content": 5}', None), ('{"error": {"message": "quota"}}',
     "quota"), ("", "not JSON"), ("[" * 100_000, "not JSON")],
)  # fmt: skip
async def test_a_bad_json_answer_is_a_clear_error(
    style: str, body: str, message: str | None
) -> None:
    # A first good turn, so the failure comes with tool messages to keep.
    error = await failing_run(style, [calls_step((1, 1)), {"body": body}])
    if message is not None:
        assert message in str(error)
    assert error.result is not None
    roles = [m["role"] for m in error.result.messages]
    assert roles == ["user", "assistant", "tool"]
    assert_balanced(error.result.messages)
    assert [r.output for r in error.result.tool_calls] == ["2"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("drop_after", [0, 1, 3])
async def test_a_truncated_stream_is_an_error(style: str, drop_after: int) -> None:
    error = await failing_run(style, [{"text": "a b c d e f", "drop_after": drop_after}], True)
    assert "stream" in str(error) or "POST" in str(error)
    assert error.result is not None
    assert error.result.messages == [{"role": "user", "content": "go"}]


@pytest.mark.parametrize("style", STYLES)
async def test_a_stream_without_its_end_marker_is_truncated(style: str) -> None:
    # Ends the body cleanly but never sends [DONE] / message_stop.
    body = {
        "openai": 'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n',
        "anthropic": 'event: ping\ndata: {"type": "ping"}\n\n',
    }[style]
    error = await failing_run(style, [{"body": body}], True)
    assert "truncated" in str(error)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "data",
    ["not json", "[]", '{"choices": 3}', '{"error": {"message": "overloaded"}}', "[" * 100_000],
)
async def test_garbage_inside_a_stream_is_an_error(style: str, data: str) -> None:
    error = await failing_run(style, [{"body": f"data: {data}\n\n"}], True)
    assert error.result is not None
    assert error.result.messages == [{"role": "user", "content": "go"}]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("stream", [False, True])
async def test_invalid_tool_arguments_are_that_calls_error_result(style: str, stream: bool) -> None:
    script = [
        {"tool_calls": [{"name": "add", "arguments": '{"a": 1, "b":'},
                        {"name": "add", "arguments": '[1, 2]'},
                        {"name": "add", "arguments": {"a": 2, "b": 3}}]},
        {"text": "two of three failed"},
    ]  # fmt: skip
    async with served(style, script) as (provider, client):
        toolkit = await adder()
        if stream:
            async with client.stream("go", toolkit) as events:
                result = [e async for e in events][-1]["result"]
        else:
            result = await client.run("go", toolkit)
    assert result.status == "done" and result.text == "two of three failed"
    bad, wrong_shape, good = result.tool_calls
    assert bad.is_error and "Invalid JSON arguments" in bad.output
    assert wrong_shape.is_error and "JSON object" in wrong_shape.output
    assert not good.is_error and good.output == "5"
    assert_balanced(result.messages)
    # The provider got a well-formed transcript back (anthropic: objects for inputs).
    sent = provider.requests[1].json["messages"]
    if style == "anthropic":
        inputs = [b["input"] for b in sent[1]["content"] if b["type"] == "tool_use"]
        assert inputs == [{}, {}, {"a": 2, "b": 3}]


async def test_a_4xx_with_an_error_body(socket_autojump_clock: Clock) -> None:
    body = '{"error": {"type": "invalid_request_error", "message": "max_tokens too big"}}'
    error = await failing_run("anthropic", [{"status": 400, "body": body}], retries=2)
    assert "HTTP 400" in str(error) and "max_tokens too big" in str(error)
    assert error.status == 400


async def test_an_oversized_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolnexus_trio.models import _http, _source

    monkeypatch.setattr(_http, "MAX_RESPONSE_BYTES", 1000)
    monkeypatch.setattr(_source, "MAX_RESPONSE_BYTES", 1000)
    error = await failing_run("openai", [{"text": "x" * 5000}])
    assert "larger than" in str(error)
    error = await failing_run("openai", [{"text": "x" * 50, "burst": 100}], True)
    assert "over 1000 bytes" in str(error)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
async def test_non_finite_usage_on_the_wire_is_a_generate_error(style: str, number: str) -> None:
    # Python's json reads these literals; int() of them would escape as a bare ValueError.
    body = {
        "openai": '{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": %s}}',
        "anthropic": '{"content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": %s}}',
    }[style] % number
    error = await failing_run(style, [{"body": body}])
    assert "non-finite" in str(error)
    assert error.result is not None


# -- token counts (issue 17 item 24) ----------------------------------------------------


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_negative_token_count_is_a_generate_error(style: str, stream: bool) -> None:
    """A provider's -5 made RunResult.usage negative and the Prometheus token counter go
    down (and a paused run saved with it could not be loaded back)."""
    step = {"text": "hi", "usage": {"prompt_tokens": -5, "completion_tokens": 2}}
    async with served(style, [step], retries=0) as (_, client):
        on_text = (lambda _: None) if stream else None
        with pytest.raises(GenerateError, match="not a non-negative integer") as caught:
            await client.ask("go", on_text=on_text)
        metrics = client.metrics()
    assert caught.value.result is not None
    assert caught.value.result.usage == {"prompt_tokens": 0, "completion_tokens": 0,
                                         "total_tokens": 0}  # fmt: skip
    assert 'toolnexus_llm_tokens_total{type="prompt"}' not in metrics  # nothing counted
    assert "-5" not in metrics


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("number", ["-1", "1.5", '"7"', "true", "[1]", "-0.5"])
async def test_a_token_count_that_is_not_a_count_is_a_generate_error(
    style: str, number: str
) -> None:
    body = {
        "openai": '{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": %s}}',
        "anthropic": '{"content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": %s}}',
    }[style] % number
    error = await failing_run(style, [{"body": body}])
    assert "not a non-negative integer" in str(error)
    assert error.result is not None


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(("number", "counted"), [("null", 0), ("12.0", 12), ("0", 0)])
async def test_absent_and_integral_token_counts_are_read(
    style: str, number: str, counted: int
) -> None:
    body = {
        "openai": '{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": %s}}',
        "anthropic": '{"content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": %s}}',
    }[style] % number
    async with served(style, [{"body": body}]) as (_, client):
        result = await client.run("go")
    assert result.usage["prompt_tokens"] == counted
