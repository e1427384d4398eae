"""Real models: ``translate``, one provider call on OpenAI-shaped input (SPEC §11).

Nothing is executed: the model's tool calls come back as data. The same OpenAI-shaped
messages and tools go to an Anthropic-style endpoint here; the client translates them
on the way out (``system`` hoisted, ``tools`` with ``input_schema``) and the answer on
the way back.
"""

import json

import trio

from toolnexus_trio import ClientOptions, create_client
from toolnexus_trio.testing import open_fake_provider

WEATHER_CALL = {"id": "toolu_1", "name": "get_weather", "arguments": {"city": "Paris"}}


async def main() -> None:
    script = [{"text": "Checking.", "tool_calls": [WEATHER_CALL]}]
    async with open_fake_provider(script) as provider:
        options = ClientOptions(base_url=provider.base_url, style="anthropic",
                                model="claude-x", api_key="sk-ant-example")  # fmt: skip
        async with create_client(options) as client:
            # [translate]
            out = await client.translate(
                [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather in Paris?"},
                ],
                tools=[
                    {
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "description": "Current weather for a city",
                            "parameters": {
                                "type": "object",
                                "properties": {"city": {"type": "string"}},
                                "required": ["city"],
                            },
                        },
                    }
                ],
                max_tokens=256,
            )
            call = out.tool_calls[0]  # TranslatedToolCall(id, name, arguments: a JSON string)
            # [/translate]
    assert out.text == "Checking."
    assert out.finish_reason == "tool_calls"
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_1", "get_weather",
                                                                 {"city": "Paris"})  # fmt: skip
    assert out.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    sent = provider.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json["system"] == "Be brief."
    assert sent.json["max_tokens"] == 256
    assert sent.json["tools"][0]["input_schema"]["required"] == ["city"]
    print(f"ok: translate -> {call.name}({call.arguments}), finish_reason={out.finish_reason}")


if __name__ == "__main__":
    trio.run(main)
