"""Real models: testing your own code with ``toolnexus_trio.testing.FakeProvider``.

The ``test_*`` functions below are what a pytest-trio test module would hold (here a
``main`` runs them, so the docs example is a script). Each test gets a real HTTP server
on loopback that plays a script, so the code under test runs the real wire: no mock.
"""

from typing import Any

import trio

from toolnexus_trio import Client, ClientOptions, GenerateError, create_client
from toolnexus_trio.testing import FakeProvider, Step, open_fake_provider


# [code-under-test]
async def summarize(client: Client, text: str) -> str:
    """The application code to test: one model call, streamed to a list of parts."""
    parts: list[str] = []
    await client.ask(f"Summarize in one line: {text}", on_text=parts.append)
    return "".join(parts)


# [/code-under-test]


def client_for(provider: FakeProvider, **kw: Any) -> Client:
    return create_client(ClientOptions(base_url=provider.base_url, style="openai",
                                       model="test-model", api_key="test-key", **kw))  # fmt: skip


# [tests]
async def test_summarize_sends_the_text_and_streams_the_answer() -> None:
    async with (
        open_fake_provider([{"text": "Trio runs tools in nurseries."}]) as provider,
        client_for(provider) as client,
    ):
        summary = await summarize(client, "a long article")
    assert summary == "Trio runs tools in nurseries."
    request = provider.requests[0]  # everything the server received
    assert request.json["stream"] is True
    assert request.json["messages"][-1]["content"] == "Summarize in one line: a long article"


async def test_a_stream_cut_off_midway_is_an_error() -> None:
    cut = Step(text="one two three four five", drop_after=3)  # 3 SSE events, then EOF
    async with open_fake_provider([cut]) as provider, client_for(provider) as client:
        try:  # in pytest: with pytest.raises(GenerateError, match="stream"):
            await summarize(client, "anything")
        except GenerateError as exc:
            error = str(exc)
        else:
            raise AssertionError("a truncated stream must not look like an answer")
    assert "stream" in error


async def test_a_503_is_retried_once() -> None:
    async with (
        open_fake_provider([{"status": 503}, {"text": "fine"}]) as provider,
        client_for(provider, retry_base_ms=1) as client,
    ):
        assert await summarize(client, "x") == "fine"
    assert [r.step.status for r in provider.requests if r.step] == [503, 200]


# [/tests]


async def main() -> None:
    # The asserts above are the lesson (they are the tests you would write), so they
    # stay; this runner only says which test ran, as pytest would.
    for test in (
        test_summarize_sends_the_text_and_streams_the_answer,
        test_a_stream_cut_off_midway_is_an_error,
        test_a_503_is_retried_once,
    ):
        await test()
        print(f"{test.__name__}: passed")


if __name__ == "__main__":
    trio.run(main)
