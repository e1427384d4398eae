"""A first tool: plain and async functions, their descriptions, what the model sees,
and one run of the loop with a scripted model (no network, no API key).

Run it: ``python docs/examples/tools_first.py``.
"""

import json
import time
from typing import Annotated

import trio

from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Toolkit,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    tool,
)

# --- tools: start ---


@tool
def convert(
    amount: float,
    currency: Annotated[str, "ISO 4217 code of the currency to convert to, e.g. EUR"],
) -> str:
    """Convert an amount of US dollars to another currency.

    Args:
        amount: How many US dollars.
    """
    time.sleep(0.01)  # a plain function may block: it runs in a worker thread
    rate = {"EUR": 0.92, "GBP": 0.79}[currency]
    return f"{amount} USD = {amount * rate:.2f} {currency}"


@tool
async def weather(city: str, days: int = 1) -> dict[str, object]:
    """Get the weather forecast for a city.

    Args:
        city: The city's name, in English.
        days: How many days ahead (1 is today).
    """
    await trio.sleep(0.01)  # an async function runs on the event loop
    return {"city": city, "days": days, "sky": "sunny", "high_c": 22}


# --- tools: end ---


async def main() -> None:
    # --- schema: start ---
    # builtins=False: only these two tools (the ten builtins come along by default)
    options = ToolkitOptions(builtins=False, extra_tools=[convert, weather])
    async with create_toolkit(options) as toolkit:
        print("What the model is sent for `convert` (OpenAI style):")
        print(json.dumps(toolkit.to_openai()[0], indent=2))
        # --- schema: end ---
        await run_once(toolkit)


# --- run: start ---
async def run_once(toolkit: Toolkit) -> None:
    # A scripted model: calls both tools in its first turn, then answers from the results.
    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.turn == 0:
            return InProcessResponse(
                tool_calls=[
                    InProcessToolCall(name="convert", arguments={"amount": 50, "currency": "EUR"}),
                    InProcessToolCall(name="weather", arguments={"city": "Paris"}),
                ]
            )
        return InProcessResponse(content="50 USD is 46 EUR, and Paris is sunny at 22C.")

    client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
    result = await client.run("What is 50 USD in EUR, and the weather in Paris?", toolkit)
    for call in result.tool_calls:
        print(f"  -> {call.name} {json.dumps(call.args)}")
        print(f"  <- {call.name} [{'error' if call.is_error else 'ok'}]: {call.output}")
    print(f"model: {result.text}")


# --- run: end ---


if __name__ == "__main__":
    trio.run(main)
