"""Tools written the way Python users write them (issue 31): plain functions, parameter
descriptions from docstrings and ``Annotated``, typed parameters arriving as instances,
and clear errors for a type that cannot be described or arguments that do not fit."""

from __future__ import annotations

import dataclasses
import enum
import socket
import threading
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pydantic
import pytest
import trio

from toolnexus_trio import (
    BuiltinsConfig,
    CancelToken,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    create_in_process_client,
    create_toolkit,
    define_tool,
    tool,
)

# Plain (sync) functions ---------------------------------------------------------------


async def test_a_sync_function_runs_in_a_worker_thread() -> None:
    event_loop_thread = threading.get_ident()
    seen: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        seen.append(threading.get_ident())
        return a + b

    assert add.description == "Add two numbers."
    assert add.input_schema["required"] == ["a", "b"]
    assert await add.call({"a": 2, "b": 3}) == ToolResult.ok("5")
    assert seen and seen[0] != event_loop_thread

    def fails(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ValueError(f"no {args['x']}")

    assert await define_tool("f", "", None, fails).call({"x": 1}) == ToolResult.error("no 1")


async def test_a_sync_tool_may_block_without_stopping_the_event_loop() -> None:
    release = threading.Event()

    @tool
    def wait_for_release() -> str:
        release.wait()
        return "released"

    results: list[ToolResult] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _append(results, wait_for_release.call({})))
        # The event loop still runs other tasks while the thread blocks.
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        release.set()
    assert results == [ToolResult.ok("released")]


async def _append(results: list[ToolResult], call: Any) -> None:
    results.append(await call)


async def test_cancelling_a_sync_tool_returns_at_once_and_the_thread_runs_to_its_end() -> None:
    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()
    token = CancelToken()

    @tool
    def slow(ctx: ToolContext) -> str:
        started.set()
        release.wait()
        # The call has returned by now: the thread sees the token and its value is dropped.
        assert ctx.cancel.is_cancelled
        finished.set()
        return "too late"

    results: list[ToolResult] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _append(results, slow.call({}, ToolContext(cancel=token))))
        await trio.to_thread.run_sync(started.wait)
        token.cancel()
    # The call came back cancelled while the function was still blocked in its thread.
    assert results == [ToolResult.error("cancelled")]
    assert not finished.is_set()
    release.set()
    await trio.to_thread.run_sync(finished.wait)

    # An enclosing scope's cancel propagates as trio.Cancelled, as for an async tool.
    release.clear()
    started.clear()

    done = threading.Event()

    @tool
    def blocked() -> str:
        started.set()
        release.wait()
        done.set()
        return "never seen"

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _append(results, blocked.call({})))
            await trio.to_thread.run_sync(started.wait)
            scope.cancel()
    assert scope.cancelled_caught and len(results) == 1
    release.set()
    await trio.to_thread.run_sync(done.wait)  # no thread outlives the test


def test_generators_are_refused() -> None:
    def numbers() -> Any:
        yield 1

    with pytest.raises(TypeError, match="tool 'numbers': a generator cannot be a tool"):
        tool(numbers)


# Parameter descriptions ----------------------------------------------------------------


def _google(city: str, days: int = 1) -> str:
    """Get the forecast.

    Longer text the model does not need.

    Args:
        city: The city's name,
            in English.
        days: How many days ahead.
    """
    return city


def _numpy(city: str, days: int = 1) -> str:
    """Get the forecast.

    Parameters
    ----------
    city : str
        The city's name, in English.
    days : int
        How many days ahead.
    """
    return city


def _rest(city: str, days: int = 1) -> str:
    """Get the forecast.

    :param city: The city's name, in English.
    :param days: How many days ahead.
    :returns: the forecast
    """
    return city


@pytest.mark.parametrize("fn", [_google, _numpy, _rest], ids=["google", "numpy", "rest"])
def test_parameter_descriptions_from_each_docstring_style(fn: Any) -> None:
    t = tool(fn)
    assert t.description == "Get the forecast."
    assert t.input_schema["properties"] == {
        "city": {"type": "string", "description": "The city's name, in English."},
        "days": {"type": "integer", "description": "How many days ahead."},
    }


def test_annotated_descriptions_win_over_the_docstring() -> None:
    @tool
    async def search(
        query: Annotated[str, "What to look for"],
        limit: Annotated[int, 42, "At most this many"] = 10,
        tags: list[Annotated[str, "A tag"]] | None = None,
    ) -> str:
        """Search.

        Args:
            query: Not this one.
        """
        return query

    props = search.input_schema["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for"}
    assert props["limit"] == {"type": "integer", "description": "At most this many"}
    assert props["tags"]["items"] == {"type": "string", "description": "A tag"}


# Typed parameters ----------------------------------------------------------------------


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclasses.dataclass
class Place:
    city: Annotated[str, "The city"]
    country: str | None = None


@attrs.frozen
class Window:
    start: int
    days: int = 1


class _Required(TypedDict):
    unit: Unit


class Options(_Required, total=False):
    # (NotRequired[...] is lost on Python 3.11 under `from __future__ import annotations`)
    detail: Literal["short", "long"]


class Coords(pydantic.BaseModel):
    lat: float = pydantic.Field(ge=-90, le=90)
    lon: float


async def test_typed_parameters_get_a_schema_and_arrive_as_instances() -> None:
    got: dict[str, Any] = {}

    @tool
    async def forecast(
        place: Place,
        window: Window,
        options: Options,
        stops: list[Place],
        by_name: dict[str, Window],
        unit: Unit = Unit.C,
        near: Place | None = None,
    ) -> str:
        """Forecast for a place."""
        got.update(locals())
        return "ok"

    props = forecast.input_schema["properties"]
    assert props["place"] == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city"},
            "country": {"type": ["string", "null"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert props["window"]["required"] == ["start"]
    assert props["options"]["properties"]["unit"] == {"enum": ["celsius", "fahrenheit"]}
    assert props["options"]["properties"]["detail"] == {"enum": ["short", "long"]}
    assert props["options"]["required"] == ["unit"]
    assert props["stops"]["items"] == props["place"]
    assert props["by_name"]["additionalProperties"] == props["window"]
    assert props["near"] == {"anyOf": [props["place"], {"type": "null"}]}
    assert forecast.input_schema["required"] == ["place", "window", "options", "stops", "by_name"]

    args = {
        "place": {"city": "Paris"},
        "window": {"start": 3},
        "options": {"unit": "fahrenheit", "detail": "long"},
        "stops": [{"city": "Lyon", "country": "FR"}],
        "by_name": {"w": {"start": 1, "days": 2}},
        "near": {"city": "Nice"},
    }
    assert await forecast.call(args) == ToolResult.ok("ok")
    assert got["place"] == Place("Paris")
    assert got["window"] == Window(3)
    assert got["options"] == {"unit": Unit.F, "detail": "long"}
    assert got["stops"] == [Place("Lyon", "FR")]
    assert got["by_name"] == {"w": Window(1, 2)}
    assert got["unit"] is Unit.C and got["near"] == Place("Nice")


class Trip(pydantic.BaseModel):
    start: Coords
    stops: list[Coords] = []


async def test_pydantic_models_get_their_schema_and_arrive_validated() -> None:
    got: list[Any] = []

    @tool
    def plan(trip: Trip, at: Coords) -> Trip:
        """Plan a trip."""
        got.append((trip, at))
        return trip

    schema = plan.input_schema
    assert schema["properties"]["at"]["properties"]["lat"]["maximum"] == 90
    assert schema["properties"]["trip"]["properties"]["start"] == {"$ref": "#/$defs/Coords"}
    assert set(schema["$defs"]) == {"Coords"}
    result = await plan.call(
        {"trip": {"start": {"lat": 1, "lon": 2}}, "at": {"lat": 3.5, "lon": 4}}
    )
    assert result == ToolResult.ok('{"start":{"lat":1.0,"lon":2.0},"stops":[]}')
    trip, at = got[0]
    assert (
        isinstance(trip, Trip) and isinstance(trip.start, Coords) and at == Coords(lat=3.5, lon=4)
    )
    # The schema is checked first (the pydantic constraint is in it), naming the field.
    bad = await plan.call({"trip": {"start": {"lat": 91, "lon": 2}}, "at": {"lat": 0, "lon": 0}})
    assert bad.is_error and "$.trip.start.lat" in bad.output and len(got) == 1


@dataclasses.dataclass
class Holder:
    sock: socket.socket


@dataclasses.dataclass
class Node:
    children: list[Node]


async def test_a_type_that_cannot_be_described_fails_at_definition_naming_tool_and_parameter() -> (
    None
):
    with pytest.raises(TypeError) as caught:

        @tool
        async def where(loc: socket.socket) -> str:
            return "x"

    assert str(caught.value) == (
        "tool 'where': parameter 'loc': cannot derive a JSON Schema from <class 'socket.socket'>"
    )

    with pytest.raises(TypeError, match=r"^tool 'keep': parameter 'items': cannot derive a JSON Schema from <class 'socket.socket'> inside .*Holder$"):  # fmt: skip

        @tool
        def keep(items: list[Holder]) -> str:
            return "x"

    @dataclasses.dataclass
    class Local:
        x: int

    def local(x: Local) -> str:
        return "x"

    with pytest.raises(TypeError, match=r"^tool 'local': unresolved annotation: name 'Local'"):
        tool(local)

    with pytest.raises(TypeError, match=r"^tool 'tree': parameter 'root': .*Node.*contains itself"):

        @tool
        def tree(root: Node) -> str:
            return "x"


@dataclasses.dataclass
class Booking:
    nights: int

    def __post_init__(self) -> None:
        if self.nights < 1:
            raise ValueError("nights must be at least 1")


async def test_bad_arguments_from_the_model_name_the_field_and_go_back_to_the_model() -> None:
    ran: list[object] = []

    @tool
    def book(place: Place, booking: Booking, unit: Unit = Unit.C) -> str:
        """Book a stay."""
        ran.append(place)
        return "booked"

    # The schema catches the wrong kinds, naming each path.
    wrong = await book.call({"place": {"city": 3}, "booking": {"nights": 1}, "unit": "kelvin"})
    assert wrong.is_error and "Invalid arguments for tool 'book'" in wrong.output
    assert "$.place.city" in wrong.output and "$.unit" in wrong.output
    # What only the class can check fails when it is built, naming the parameter.
    refused = await book.call({"place": {"city": "Oslo"}, "booking": {"nights": 0}})
    assert refused == ToolResult.error(
        "Invalid arguments for tool 'book': nights must be at least 1 @ $.booking"
    )
    assert ran == []

    # In the loop, the error is the tool message the model reads next.
    seen: list[list[dict[str, Any]]] = []

    async def generate(req: GenerateRequest) -> InProcessResponse:
        seen.append([dict(m) for m in req.messages])
        if req.turn == 0:
            call = InProcessToolCall(
                id="c1",
                name="book",
                arguments={"place": {"city": "Oslo"}, "booking": {"nights": 0}},
            )
            return InProcessResponse(content="", tool_calls=[call])
        return InProcessResponse(content="sorry")

    toolkit = await create_toolkit(ToolkitOptions(builtins=False, extra_tools=[book]))
    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    result = await client.run("book Oslo", toolkit)
    assert result.status == "done"
    assert seen[1][-1]["role"] == "tool"
    assert seen[1][-1]["content"] == refused.output
    assert ran == []


# The read-only builtins preset -----------------------------------------------------------


async def test_read_only_builtins_keep_only_tools_that_change_nothing(tmp_path: Any) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    config = BuiltinsConfig.read_only(base_dir=tmp_path)
    async with await create_toolkit(ToolkitOptions(builtins=config)) as toolkit:
        assert [t.name for t in toolkit.tools()] == ["read", "grep", "glob", "todowrite"]
        for name in ("bash", "write", "edit", "apply_patch", "webfetch", "question"):
            result = await toolkit.execute(name, {})
            assert result == ToolResult.error(f"Unknown tool: {name}")
        read = await toolkit.execute("read", {"path": "notes.txt"})
        assert not read.is_error and "hello" in read.output
        outside = await toolkit.execute("read", {"path": "/etc/hostname"})
        assert outside.is_error and "outside" in outside.output
    assert BuiltinsConfig.read_only().base_dir is None


# More nesting, returns and the loop's direct path -----------------------------------------


@dataclasses.dataclass
class Leg:
    at: Coords
    seats: dict[str, list[Seat]]


class Seat(enum.Enum):
    FRONT = 1
    BACK = 2


async def test_pydantic_inside_a_dataclass_and_enums_inside_containers() -> None:
    got: list[Leg] = []

    @tool
    async def fly(legs: list[Leg]) -> Leg:
        """Fly the legs; returns the first."""
        got.extend(legs)
        return legs[0]

    schema = fly.input_schema
    leg = schema["properties"]["legs"]["items"]
    assert leg["properties"]["at"]["properties"]["lat"]["minimum"] == -90
    assert leg["properties"]["seats"]["additionalProperties"]["items"] == {"enum": [1, 2]}
    result = await fly.call({"legs": [{"at": {"lat": 1, "lon": 2}, "seats": {"ana": [1, 2]}}]})
    assert got == [Leg(Coords(lat=1, lon=2), {"ana": [Seat.FRONT, Seat.BACK]})]
    # A returned dataclass (with a pydantic model and enums in it) is sent as JSON.
    assert result == ToolResult.ok('{"at":{"lat":1.0,"lon":2.0},"seats":{"ana":[1,2]}}')


async def test_sync_tools_on_the_loop_s_direct_path_run_concurrently() -> None:
    both_started = threading.Barrier(2, timeout=30)

    def meet(args: dict[str, Any], ctx: ToolContext) -> str:
        both_started.wait()  # each waits for the other: only concurrent threads get past
        return f"met {args['who']}"

    @tool
    def greet(who: str) -> str:
        both_started.wait()
        return f"hello {who}"

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.turn == 0:
            return InProcessResponse(
                tool_calls=[
                    InProcessToolCall("a", "meet", {"who": "ana"}),
                    InProcessToolCall("b", "greet", {"who": "bo"}),
                ]
            )
        return InProcessResponse(content="done")

    schema = {"type": "object", "properties": {"who": {"type": "string"}}}
    extra = [define_tool("meet", "Meet", schema, meet), greet]
    async with create_toolkit(ToolkitOptions(builtins=False, extra_tools=extra)) as toolkit:
        client = create_in_process_client(InProcessOptions(model="m", generate=generate))
        result = await client.run("go", toolkit)
    assert [(c.name, c.output) for c in result.tool_calls] == [
        ("meet", "met ana"),
        ("greet", "hello bo"),
    ]
