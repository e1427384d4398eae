"""Typed parameters: dataclasses, enums, ``Literal``, ``TypedDict`` and pydantic models
get a JSON Schema, and the tool receives instances; arguments that do not fit go back
to the model as an error naming the field; a type that cannot be described fails when
the tool is defined.

Run it: ``python docs/examples/tools_typed.py`` (the pydantic part needs pydantic).
"""

import enum
import json
import socket
from dataclasses import dataclass, field
from typing import Literal, TypedDict

import pydantic
import trio

from toolnexus_trio import (
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    tool,
)

# --- typed: start ---


class Seat(enum.Enum):
    WINDOW = "window"
    AISLE = "aisle"


@dataclass
class Passenger:
    name: str
    seat: Seat = Seat.AISLE
    bags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.bags) > 2:
            raise ValueError("at most 2 bags per passenger")


class Trip(TypedDict):
    origin: str
    destination: str


class Payment(pydantic.BaseModel):
    card_last4: str = pydantic.Field(pattern=r"^\d{4}$")
    amount_eur: float = pydantic.Field(gt=0)


@tool
def book(
    trip: Trip,
    passengers: list[Passenger],
    payment: Payment,
    cabin: Literal["economy", "business"] = "economy",
) -> str:
    """Book a flight for one or more passengers."""
    # Instances, not dicts: passengers[0] is a Passenger, its seat a Seat.
    names = ", ".join(f"{p.name} ({p.seat.value})" for p in passengers)
    return (
        f"{cabin} {trip['origin']}->{trip['destination']} for {names}, "
        f"{payment.amount_eur:.2f} EUR on card *{payment.card_last4}"
    )


# --- typed: end ---


async def main() -> None:
    print("The schema of `passengers`:")
    print(json.dumps(book.input_schema["properties"]["passengers"], indent=2))

    # --- errors: start ---
    # Arguments that do not fit are an error result sent back to the model, naming the
    # field; the function does not run.
    too_many_bags = {
        "trip": {"origin": "LIS", "destination": "OSL"},
        "passengers": [{"name": "Ana", "bags": ["a", "b", "c"]}],
        "payment": {"card_last4": "4242", "amount_eur": 120},
    }
    wrong_kind = {**too_many_bags, "passengers": [{"name": "Ana", "seat": "middle"}]}

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.turn == 0:  # first try: a seat that does not exist
            return InProcessResponse(tool_calls=[InProcessToolCall("c1", "book", wrong_kind)])
        if req.turn == 1:  # second try: too many bags (the dataclass's own check)
            return InProcessResponse(tool_calls=[InProcessToolCall("c2", "book", too_many_bags)])
        fixed = {**too_many_bags, "passengers": [{"name": "Ana", "seat": "window"}]}
        if req.turn == 2:
            return InProcessResponse(tool_calls=[InProcessToolCall("c3", "book", fixed)])
        return InProcessResponse(content="Booked: Ana has a window seat.")

    client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
    async with create_toolkit(ToolkitOptions(builtins=False, extra_tools=[book])) as toolkit:
        result = await client.run("Book LIS to OSL for Ana", toolkit)
    for call in result.tool_calls:
        print(f"  <- {call.name} [{'error' if call.is_error else 'ok'}]: {call.output}")
    print(f"model: {result.text}")

    # A type that cannot be described fails when the tool is defined.
    try:

        @tool
        def where(loc: socket.socket) -> str:
            return "?"

    except TypeError as exc:
        print(f"TypeError: {exc}")
    # --- errors: end ---


if __name__ == "__main__":
    trio.run(main)
