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
        # Every request the provider got is kept: the wire, checked.
        first = provider.requests[0]
        assert first.path == "/v1/chat/completions"
        assert first.headers["authorization"] == "Bearer sk-example"
        assert first.json["model"] == "gpt-4o-mini"
        assert first.json["messages"][0] == {"role": "system", "content": "You are terse."}
        assert provider.requests[2].json["stream"] is True
        # The second ask on "user-42" carried the first exchange as history.
        history = [m["content"] for m in provider.requests[5].json["messages"]]
        assert history[1:] == ["My name is Ada.", "Nice to meet you, Ada.", "Who am I?"]
    print("ok: run, stream, ask with on_text, conversations and metrics over HTTP")


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
        assert result.text == "2 + 3 = 5."
        assert result.status == "done"
        assert result.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
        assert [c.name for c in result.tool_calls] == ["add"]

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
        assert deltas[:3] == ["Streamed ", "word ", "by "]
        assert deltas[-1] == "streamed."
        assert streamed.text == "Streamed word by word."

        # [conversations]
        await client.ask("My name is Ada.", id="user-42")
        again = await client.ask("Who am I?", id="user-42")  # history from the store
        saved = await client.store.get("user-42")

        chat = client.conversation(toolkit)  # a thread kept in memory
        await chat.send("Hello")
        chat.reset()  # forget it
        # [/conversations]
        assert again.text == "You are Ada."
        assert saved is not None
        assert [m["role"] for m in saved][-2:] == ["user", "assistant"]
        assert chat.messages == []

        # [metrics]
        text = client.metrics()  # Prometheus text, for GET /metrics
        # [/metrics]
        assert 'toolnexus_llm_requests_total{model="gpt-4o-mini",status="ok"} 7' in text
        kinds = [e["event"] for e in metric_events]
        assert kinds.count("llm") == 7
        assert kinds.count("tool") == 1
        assert kinds.count("run") == 6


if __name__ == "__main__":
    trio.run(main)
