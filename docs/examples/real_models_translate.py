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
    print(f"the model said {out.text!r} and stopped for {out.finish_reason!r}")
    print(f"its call: {call.id} {call.name}({json.loads(call.arguments)}); usage {out.usage}")
    sent = provider.requests[0]
    print(f"what went over the wire: POST {sent.path}, anthropic-version")
    print(f"  {sent.headers['anthropic-version']}, system {sent.json['system']!r},")
    print(f"  max_tokens {sent.json['max_tokens']}, and the tool as")
    print(f"  {json.dumps(sent.json['tools'][0])}")


if __name__ == "__main__":
    trio.run(main)
