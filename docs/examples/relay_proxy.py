"""Relay tools: a proxy whose caller executes ``get_weather`` itself (SPEC §10 addendum).

The caller speaks OpenAI chat shapes and owns the weather function; the proxy owns the
conversation (kept in SQLite) and the model (an OpenAI-style endpoint, here a local
FakeProvider). ``get_weather`` is a relay tool: declared to the model like any tool,
never run by the proxy. When the model calls it, the run halts with ONE
``kind="tool_call"`` request holding every relay call of the turn; the proxy hands
them to the caller as an OpenAI ``tool_calls`` message, the caller runs them and sends
back ``role="tool"`` messages, and the proxy answers the request with
``Answer.data.results``. The run goes on from there, as if the tool had run inside.
"""

import json
import tempfile
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    Answer,
    Client,
    ClientOptions,
    RunResult,
    SqliteConversationStore,
    Toolkit,
    ToolkitOptions,
    create_client,
    create_toolkit,
    relay_tool,
)
from toolnexus_trio.testing import open_fake_provider

# What the model does: two weather calls in one turn, then the answer.
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [
        {"id": "call_paris", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "call_oslo", "name": "get_weather", "arguments": {"city": "Oslo"}},
    ]},
    {"text": "Paris is sunny and Oslo is snowing."},
]  # fmt: skip


# [proxy]
class Proxy:
    """Takes OpenAI-shaped turns from a caller; the caller runs the relay tools."""

    def __init__(self, client: Client, toolkit: Toolkit) -> None:
        self.client, self.toolkit = client, toolkit
        self.waiting: dict[str, str] = {}  # conversation id -> the pending request's id

    def _reply(self, conversation: str, result: RunResult) -> dict[str, Any]:
        if result.status != "pending":
            return {"role": "assistant", "content": result.text}
        request = result.pending  # kind="tool_call", data={"calls": [...]}, call order
        if request is None or request.data is None:  # a pending run always has both
            raise RuntimeError(f"run {conversation} is pending without a request")
        self.waiting[conversation] = request.id
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in request.data["calls"]
        ]}  # fmt: skip

    async def user(self, conversation: str, text: str) -> dict[str, Any]:
        result = await self.client.ask(text, self.toolkit, id=conversation)
        return self._reply(conversation, result)

    async def tool_results(
        self, conversation: str, messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        results = [{"id": m["tool_call_id"], "output": m["content"]} for m in messages]
        answer = Answer(self.waiting.pop(conversation), True, {"results": results})
        result = await self.client.answer(conversation, [answer], toolkit=self.toolkit)
        return self._reply(conversation, result)
        # [/proxy]


# [caller]
def get_weather(city: str) -> str:  # the caller's own function: the proxy never sees it
    return {"Paris": "sunny, 21C", "Oslo": "snow, -3C"}.get(city, "unknown")


async def caller(proxy: Proxy) -> str:
    reply = await proxy.user("chat-1", "What's the weather in Paris and Oslo?")
    while reply.get("tool_calls"):  # the standard OpenAI function-calling loop
        outputs = [
            {"role": "tool", "tool_call_id": call["id"],
             "content": get_weather(**json.loads(call["function"]["arguments"]))}
            for call in reply["tool_calls"]
        ]  # fmt: skip
        reply = await proxy.tool_results("chat-1", outputs)
    return str(reply["content"])


# [/caller]


async def main() -> None:
    # [toolkit]
    weather = relay_tool(
        "get_weather",
        "Current weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    toolkit = await create_toolkit(ToolkitOptions(extra_tools=[weather], builtins=False))
    # [/toolkit]
    with tempfile.TemporaryDirectory() as folder:
        async with (
            open_fake_provider(SCRIPT) as provider,
            SqliteConversationStore(Path(folder) / "threads.db") as store,
        ):
            options = ClientOptions(base_url=provider.base_url, style="openai", model="gpt-x",
                                    api_key="sk-example", store=store)  # fmt: skip
            async with create_client(options) as client:
                answer = await caller(Proxy(client, toolkit))
            saved = await store.get("chat-1")
    print(f"the caller got the answer: {answer!r}")
    # the model saw get_weather declared, and the caller's outputs as the tool results
    first, second = provider.requests
    print("the model was offered:", [t["function"]["name"] for t in first.json["tools"]])
    for m in second.json["messages"]:
        if m["role"] == "tool":
            print(f"  and got back {m['tool_call_id']}: {m['content']!r}, run by the caller")
    print(f"the proxy's store keeps the thread: {len(saved or [])} messages, the last")
    print(f"  {(saved or [{}])[-1]}")


if __name__ == "__main__":
    trio.run(main)
