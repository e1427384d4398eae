"""Strict converters: a value of the wrong JSON kind is an error, never a coercion.

cattrs' default hooks call ``bool()``, ``int()``, ``float()`` and ``str()``, so an answer
``{"ok": "false"}`` used to approve. Every boolean crossing a wire or ``from_json`` now
accepts only ``true``/``false``, and the other scalars their own kind.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import attrs
import pytest

from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
    tool,
)
from toolnexus_trio._converter import payloads, wire

NOT_BOOLEANS = ["false", "no", "0", "true", "", [0], [], {}, {"a": 1}, 0, 1, 1.0, None]


@pytest.mark.parametrize("ok", NOT_BOOLEANS, ids=repr)
def test_answer_ok_accepts_only_json_booleans(ok: Any) -> None:
    with pytest.raises(ValueError, match=r"invalid Answer: expected a boolean .* @ \$\.ok"):
        Answer.from_json({"id": "r1", "ok": ok, "reason": "declined"})


def test_answer_from_json_still_reads_real_booleans() -> None:
    assert Answer.from_json({"id": "r1", "ok": False, "reason": "declined"}) == Answer(
        "r1", False, reason="declined"
    )
    assert Answer.from_json({"id": "r1", "ok": True}).ok is True


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"id": 7, "ok": True}, r"expected a string, got int 7 @ \$\.id"),
        ({"id": "r1", "ok": True, "reason": 0}, r"expected str or null, got int 0 @ \$\.reason"),
        ({"id": "r1", "ok": True, "data": [1]}, r"@ \$\.data"),
        ({"ok": True}, r"required field missing @ \$\.id"),
        ("r1", r"expected a JSON object"),
    ],
)
def test_answer_from_json_shape_errors_are_value_errors(data: Any, where: str) -> None:
    with pytest.raises(ValueError, match=where):
        Answer.from_json(data)


def test_answer_built_in_code_refuses_a_non_boolean_ok() -> None:
    with pytest.raises(TypeError, match=r"Answer\.ok must be True or False, not str 'false'"):
        Answer("r1", "false")  # type: ignore[arg-type]


def test_request_from_json_refuses_numbers_for_strings() -> None:
    with pytest.raises(
        ValueError, match=r"invalid Request: expected a string, got int 1 @ \$\.kind"
    ):
        Request.from_json({"id": "r1", "kind": 1, "prompt": "p"})
    with pytest.raises(ValueError, match=r"\$\.expiresAt"):
        Request.from_json({"id": "r1", "kind": "k", "prompt": "p", "expiresAt": 1700000000})


async def test_a_refusal_sent_as_a_string_never_runs_the_approved_action() -> None:
    """The reported scenario: halt on an approval, resume with {"ok": "false"}."""
    ran: list[str] = []

    async def deploy(args: dict[str, Any], ctx: ToolContext) -> Any:
        if ctx.answer is None:
            return pending(Request(kind="approval", prompt="Deploy?"))
        ran.append("deployed")
        return ToolResult.ok("deployed")

    replies = iter([InProcessResponse(tool_calls=[InProcessToolCall(id="c1", name="deploy")])])

    async def generate(request: Any) -> InProcessResponse:
        return next(replies, InProcessResponse(content="done"))

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    tk = await create_toolkit(
        ToolkitOptions(
            extra_tools=[define_tool("deploy", "Deploy", None, deploy)],
            builtins=BuiltinsConfig.off(),
        )
    )
    halted = await client.run("go", tk)
    assert halted.status == "pending" and halted.pending is not None
    wire_answer = {"id": halted.pending.id, "ok": "false", "reason": "declined"}
    with pytest.raises(ValueError, match="expected a boolean"):
        Answer.from_json(wire_answer)
    # A real refusal declines, and nothing ran either way.
    done = await client.resume(halted, [Answer(halted.pending.id, False, reason="declined")])
    assert done.status == "done"
    assert ran == []
    assert done.tool_calls[-1].output == "declined/expired: Deploy?"


# The shared converters, field by field -----------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    ONE = 1


class Level(enum.IntEnum):
    LOW = 1


@attrs.frozen
class Everything:
    flag: bool = False
    count: int = 0
    ratio: float = 0.0
    name: str = ""
    colour: Colour = Colour.RED
    level: Level = Level.LOW
    mode: Literal[1, "a"] = 1
    maybe: int | None = None
    either: str | int = ""


@pytest.mark.parametrize("converter", [wire, payloads], ids=["wire", "payloads"])
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("flag", "false", "expected a boolean"),
        ("flag", 0, "expected a boolean"),
        ("flag", [0], "expected a boolean"),
        ("count", True, "expected an integer, got bool True"),
        ("count", 1.5, "expected an integer, got float 1.5"),
        ("count", "3", "expected an integer, got str '3'"),
        ("count", float("inf"), "expected an integer"),
        ("ratio", "1.5", "expected a number, got str"),
        ("ratio", False, "expected a number, got bool"),
        ("name", 5, "expected a string, got int 5"),
        ("name", None, "expected a string, got NoneType"),
        ("name", ["a"], "expected a string, got list"),
        ("colour", True, "expected one of 'red', 1, got bool True"),
        ("colour", "blue", "expected one of"),
        ("level", True, "expected an integer, got bool"),
        ("level", 2, "expected one of 1, got int 2"),
        ("mode", True, "expected one of 1, 'a', got bool True"),
        ("maybe", True, "expected int or null, got bool True"),
        ("maybe", "1", "expected int or null"),
        ("either", True, "expected str or int, got bool True"),
        ("either", 2.5, "expected str or int"),
    ],
)
def test_converters_refuse_the_wrong_json_kind(
    converter: Any, field: str, value: Any, message: str
) -> None:
    with pytest.raises(Exception) as caught:  # cattrs wraps it in a group
        converter.structure({field: value}, Everything)
    assert message in repr(_leaves(caught.value))


@pytest.mark.parametrize("converter", [wire, payloads], ids=["wire", "payloads"])
def test_converters_keep_legitimate_conversions(converter: Any) -> None:
    got = converter.structure(
        {"flag": True, "count": 2.0, "ratio": 3, "name": "n", "colour": 1, "level": 1,
         "mode": "a", "maybe": None, "either": 4},
        Everything,
    )  # fmt: skip
    assert got == Everything(True, 2, 3.0, "n", Colour.ONE, Level.LOW, "a", None, 4)
    assert type(got.count) is int and type(got.ratio) is float


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


@attrs.frozen
class Order:
    express: bool
    quantity: int


async def test_tool_arguments_structured_into_attrs_are_strict() -> None:
    seen: list[Order] = []

    @tool
    async def place(order: Order) -> str:
        seen.append(order)
        return "placed"

    # The schema refuses first; with a looser schema the converter still refuses.
    assert (await place.call({"order": {"express": "false", "quantity": 1}})).is_error
    loose = attrs.evolve(place, input_schema={"type": "object"})
    result = await loose.call({"order": {"express": "false", "quantity": 1}})
    assert result.is_error and "expected a boolean" in result.output
    assert (await loose.call({"order": {"express": False, "quantity": 2}})).output == "placed"
    assert seen == [Order(False, 2)]


@pytest.mark.parametrize("converter", [wire, payloads], ids=["wire", "payloads"])
@pytest.mark.parametrize(
    ("value", "tp", "message"),
    [
        ("abc", list[str], "expected an array, got str 'abc'"),
        ({"a": 1}, list[str], "expected an array, got dict"),
        ("x", dict[str, Any], "expected an object, got str 'x'"),
        ([["a", 1]], dict[str, int], "expected an object, got list"),
    ],
)
def test_containers_keep_their_json_kind(converter: Any, value: Any, tp: Any, message: str) -> None:
    with pytest.raises(Exception) as caught:
        converter.structure(value, tp)
    assert message in repr(_leaves(caught.value))
    assert converter.structure(["a"], list[str]) == ["a"]
    assert converter.structure({"a": 1}, dict[str, int]) == {"a": 1}
