"""Issue 38: the FakeProvider speaks the Responses and Gemini wires as the vendors'
own SDKs read them.

The official ``openai`` and ``google-genai`` SDKs (test-only) call a real loopback
FakeProvider with their sync clients in a worker thread, and every answer and stream
it renders is parsed by them and validated strictly against their models (the SDKs
alone are lenient: a missing field would pass unseen).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from toolnexus_trio.testing import Step, open_fake_provider

openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")

STEPS: list[dict[str, Any]] = [
    {"text": "hello there"},
    {"text": "", "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}},
                                {"name": "weather", "arguments": {}, "id": "w1"}]},
    {"text": "thinking done", "reasoning": "I considered it",
     "tool_calls": [{"name": "add", "arguments": {"a": 3, "b": 4}}]},
    {"text": "cached", "usage": {"prompt_tokens": 100, "completion_tokens": 3,
                                 "cache_read_tokens": 80}},
    {"text": "cut", "finish_reason": "max_output_tokens"},
    {"text": "no usage", "usage": None},
]  # fmt: skip
GEMINI_STEPS = [s for s in STEPS if s.get("finish_reason") is None] + [
    {"text": "cut", "finish_reason": "MAX_TOKENS"}
]


def _responses_check(base_url: str, streamed: bool) -> list[str]:
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    seen: list[str] = []
    try:
        if not streamed:
            raw = client.responses.with_raw_response.create(model="m", input="hi")
            parsed = raw.parse()
            Response.model_validate(raw.http_response.json())  # strict: every field right
            seen.append(parsed.output_text)
            return seen
        events = TypeAdapter(ResponseStreamEvent)
        with client.responses.create(model="m", input="hi", stream=True) as stream:
            for event in stream:
                events.validate_python(event.to_dict())
                seen.append(event.type)
        return seen
    finally:
        client.close()


@pytest.mark.parametrize("streamed", [False, True])
async def test_openai_sdk_reads_every_responses_answer(streamed: bool) -> None:
    async with open_fake_provider(STEPS) as provider:
        for _ in STEPS:
            seen = await trio.to_thread.run_sync(_responses_check, provider.base_url, streamed)
            assert seen
            if streamed:
                assert seen[0] == "response.created"
                assert seen[-1] in ("response.completed", "response.incomplete")
    assert [r.path for r in provider.requests] == ["/v1/responses"] * len(STEPS)


def _gemini_check(url: str, streamed: bool) -> list[Any]:
    from google.genai import types

    client = genai.Client(
        api_key="k", http_options=types.HttpOptions(base_url=url, api_version="v1beta")
    )
    try:
        if not streamed:
            answer = client.models.generate_content(model="m", contents="hi")
            return [answer]
        return list(client.models.generate_content_stream(model="m", contents="hi"))
    finally:
        client.close()


@pytest.mark.parametrize("streamed", [False, True])
async def test_google_genai_reads_every_gemini_answer(streamed: bool) -> None:
    from google.genai import types

    async with open_fake_provider(GEMINI_STEPS) as provider:
        for step in GEMINI_STEPS:
            answers = await trio.to_thread.run_sync(_gemini_check, provider.url, streamed)
            assert answers
            # The SDK's models refuse unknown fields: validate what it read, strictly.
            for answer in answers:
                types.GenerateContentResponse.model_validate(answer.model_dump(exclude_none=True))
            last = answers[-1]
            assert last.candidates[0].finish_reason is not None
            calls = [c for a in answers for c in (a.function_calls or [])]
            assert [c.name for c in calls] == [c["name"] for c in step.get("tool_calls", [])]
            text = "".join(a.text or "" for a in answers)
            assert text == Step(**step).text
    paths = {r.path for r in provider.requests}
    expected = (
        "/v1beta/models/m:streamGenerateContent?alt=sse"
        if streamed
        else "/v1beta/models/m:generateContent"
    )
    assert paths == {expected}
