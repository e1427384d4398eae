"""More of the model world: the Responses and Gemini styles, fallback and hedging,
prompt caching and cost, all against FakeProviders on loopback."""

from __future__ import annotations

import trio

from toolnexus_trio import ClientOptions, create_client
from toolnexus_trio.testing import open_fake_provider


async def styles() -> None:
    async with (
        open_fake_provider([{"text": "from responses"}]) as openai_server,
        open_fake_provider([{"text": "from gemini"}]) as google_server,
    ):
        # [styles]
        responses = ClientOptions(
            base_url=openai_server.base_url,  # e.g. https://api.openai.com/v1
            style="responses",
            model="gpt-5-mini",
        )
        gemini = ClientOptions(
            base_url=google_server.base_url,  # https://generativelanguage.googleapis.com/v1beta
            style="gemini",
            model="gemini-2.5-flash",
        )
        async with create_client(responses) as client:
            print("responses style:", (await client.run("hi")).text)
        async with create_client(gemini) as client:
            print("gemini style:", (await client.run("hi")).text)
        # [/styles]
    for server in (openai_server, google_server):
        print("  the server got POST", server.requests[0].path)


async def fallback() -> None:
    async with (
        open_fake_provider([{"stall": True}]) as slow,
        open_fake_provider([{"text": "the backup answered"}]) as backup,
    ):
        # [fallback]
        options = ClientOptions(
            base_url=slow.base_url,
            style="anthropic",
            model="claude-sonnet-4-5",
            fallback=[ClientOptions(base_url=backup.base_url, style="openai", model="gpt-5-mini")],
            hedge_after_ms=250,  # no first byte after 250 ms: ask the backup too
        )
        async with create_client(options) as client:
            result = await client.run("hi")
        print(f"fallback: {result.text!r}, from {result.model}")
        # [/fallback]
        await slow.requests[0].closed.wait()
        print("  and the stalled provider's connection was closed")


async def cost() -> None:
    usage = {"prompt_tokens": 2000, "completion_tokens": 100, "cache_read_tokens": 1500}
    async with open_fake_provider([{"text": "cheap", "usage": usage}]) as server:
        # [cost]
        options = ClientOptions(
            base_url=server.base_url,
            style="anthropic",
            model="claude-sonnet-4-5",
            system_prompt="You are a careful assistant.",
            prompt_cache=True,  # cache_control on the system prompt, tools and history
            prices={"claude-sonnet-4-5": {"input": 3.0, "output": 15.0, "cache_read": 0.3,
                                          "cache_write": 3.75}},  # per million tokens
        )  # fmt: skip
        async with create_client(options) as client:
            result = await client.run("hi")
        print(f"usage: {result.usage}")
        print(f"cost: ${result.cost:.6f}")  # 500 input, 1500 cache reads, 100 output
        # [/cost]


async def main() -> None:
    await styles()
    await fallback()
    await cost()


if __name__ == "__main__":
    trio.run(main)
