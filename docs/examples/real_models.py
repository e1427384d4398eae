"""Real models: configure ``create_client``, stream, keep conversations, read metrics.

It runs against a local FakeProvider (no key, no network). Against a real endpoint only
the options change: ``base_url="https://api.openai.com/v1"``, or
``"https://api.anthropic.com"`` with ``style="anthropic"``, or a local llama.cpp /
Ollama / vLLM server such as ``"http://127.0.0.1:8080/v1"``.
"""

import json
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import trio

from toolnexus_trio import (
    BuiltinsConfig,
    ClientOptions,
    ToolkitOptions,
    create_client,
    create_toolkit,
    tool,
)
from toolnexus_trio.testing import open_fake_provider


@tool
async def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


SCRIPT: list[dict[str, Any]] = [
    # client.run: a tool call, then the answer
    {"text": "Let me add them.", "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]},
    {"text": "2 + 3 = 5."},
    # client.stream and client.ask(on_text=...)
    {"text": "Streamed word by word."},
    {"text": "Also streamed."},
    # two asks on one conversation id, then a Conversation
    {"text": "Nice to meet you, Ada."},
    {"text": "You are Ada."},
    {"text": "Hello!"},
]


# [file-store]
class JsonFileStore:
    """A ConversationStore keeping each thread in a JSON file (threads survive restarts)."""

    def __init__(self, directory: Path) -> None:
        self.directory = trio.Path(directory)

    async def get(self, id: str) -> list[dict[str, Any]] | None:
        path = self.directory / f"{id}.json"
        if not await path.exists():
            return None
        loaded: list[dict[str, Any]] = json.loads(await path.read_text("utf-8"))
        return loaded

    async def save(self, id: str, messages: Any) -> None:
        await (self.directory / f"{id}.json").write_text(json.dumps(list(messages)), "utf-8")


# [/file-store]


async def main() -> None:
    async with open_fake_provider(SCRIPT) as provider:
        with TemporaryDirectory() as tmp:
            await tour(provider.base_url, Path(tmp))
        # Every request the provider got is kept: the wire, as the server saw it.
        first = provider.requests[0]
        print(f"the server got POST {first.path}, model {first.json['model']!r},")
        print(f"  an Authorization header: {'authorization' in first.headers},")
        print(f"  first message {first.json['messages'][0]}")
        print(f"  request 3 asked to stream: {provider.requests[2].json['stream']}")
        # The second ask on "user-42" carried the first exchange as history.
        history = [m["content"] for m in provider.requests[5].json["messages"]]
        print(f"  the second ask on user-42 sent: {history[1:]}")


async def tour(base_url: str, tmp: Path) -> None:
    metric_events: list[dict[str, Any]] = []
    # [configure]
    options = ClientOptions(
        base_url=base_url,  # e.g. "https://api.openai.com/v1"
        style="openai",  # or "anthropic" (POST {base_url}/messages)
        model="gpt-4o-mini",  # sent verbatim on every call
        api_key="sk-example",  # None: OPENAI_API_KEY / OPENROUTER_API_KEY from the env
        system_prompt="You are terse.",
        run_timeout_ms=60_000,  # the whole run, model calls and tools included
        store=JsonFileStore(tmp),  # where ask(id=...) keeps threads
        on_metric=metric_events.append,
    )
    toolkit_options = ToolkitOptions(extra_tools=[add], builtins=BuiltinsConfig.off())
    async with (
        create_client(options) as client,  # closes its connection pool on exit
        await create_toolkit(toolkit_options) as toolkit,
    ):
        result = await client.run("What is 2 + 3?", toolkit)
        # [/configure]
        print(f"run: {result.text!r} ({result.status}); tools called: ", end="")
        print(", ".join(f"{c.name}({c.args}) -> {c.output}" for c in result.tool_calls))
        print(f"  usage: {result.usage}")

        # [stream]
        deltas: list[str] = []
        async with client.stream("Say something", toolkit) as events:
            async for event in events:
                if event["type"] == "text":
                    deltas.append(event["delta"])  # as the provider sends them
                elif event["type"] == "done":
                    streamed = event["result"]

        async def on_text(delta: str) -> None:  # sync functions work too
            deltas.append(delta)

        await client.ask("And again", toolkit, on_text=on_text)
        # [/stream]
        print(f"stream: {streamed.text!r}, as deltas {deltas}")

        # [conversations]
        await client.ask("My name is Ada.", id="user-42")
        again = await client.ask("Who am I?", id="user-42")  # history from the store
        saved = await client.store.get("user-42")

        chat = client.conversation(toolkit)  # a thread kept in memory
        await chat.send("Hello")
        chat.reset()  # forget it
        # [/conversations]
        print(f"conversation user-42: {again.text!r}; the store keeps {len(saved or [])} messages")
        print(f"a Conversation after reset() holds {len(chat.messages)} messages")

        # [metrics]
        text = client.metrics()  # Prometheus text, for GET /metrics
        # [/metrics]
        requests = [line for line in text.splitlines() if "llm_requests_total{" in line]
        print(f"metrics: {requests[0]}")
        kinds = [e["event"] for e in metric_events]
        llm, tools, runs = (kinds.count(k) for k in ("llm", "tool", "run"))
        print(f"on_metric saw {llm} model calls, {tools} tool call, {runs} runs")


if __name__ == "__main__":
    trio.run(main)
