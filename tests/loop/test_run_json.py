"""``RunResult.to_json`` / ``RunResult.from_json``: a versioned, strict, JSON-safe form.

The property test builds results the way the loop shapes them (tool messages after
each assistant turn, suspended calls pointing at their placeholders) with unicode,
metadata and several suspensions, and checks that they survive ``json.dumps`` and back.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolnexus_trio import (
    Answer,
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    RunResult,
    SuspendedCall,
    Tool,
    ToolCallRecord,
    ToolContext,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    empty_schema,
    pending,
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=3)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    return Request(
        id=draw(st.text(min_size=1, max_size=10)),
        kind=draw(st.sampled_from(["approval", "input", "authorization", "quéstion"])),
        prompt=draw(st.text(max_size=20)),
        url=draw(st.none() | st.just("https://example.test/ok?x=ü")),
        data=draw(st.none() | json_objects),
        expires_at=draw(st.none() | st.just("2031-05-06T07:08:09Z")),
    )


@st.composite
def run_results(draw: st.DrawFn) -> RunResult:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(st.text(max_size=20))})
    messages.append({"role": "user", "content": draw(st.text(max_size=30))})
    records: list[ToolCallRecord] = []
    suspended: list[SuspendedCall] = []
    turns = draw(st.integers(1, 3))
    halts = draw(st.booleans())
    for turn in range(turns):
        n_calls = draw(st.integers(0 if turn < turns - 1 else 1, 3))
        calls = [(f"c{turn}_{i}", draw(st.text(min_size=1, max_size=8))) for i in range(n_calls)]
        assistant: dict[str, Any] = {"role": "assistant", "content": draw(st.text(max_size=20))}
        if calls:
            assistant["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
                for cid, name in calls
            ]
        messages.append(assistant)
        last = turn == turns - 1
        for cid, name in calls:
            args = draw(json_objects)
            if (last and halts and draw(st.booleans())) or (last and halts and not suspended):
                request = draw(requests())
                suspended.append(
                    SuspendedCall(cid, name, args, request, len(messages), len(records))
                )
                records.append(
                    ToolCallRecord(cid, name, args, request.prompt, True, {"pending": request})
                )
                messages.append({"role": "tool", "tool_call_id": cid, "content": request.prompt})
                continue
            output = draw(st.text(max_size=20))
            metadata = draw(st.none() | json_objects.filter(lambda d: "pending" not in d))
            records.append(ToolCallRecord(cid, name, args, output, draw(st.booleans()), metadata))
            messages.append({"role": "tool", "tool_call_id": cid, "content": output})
    if suspended:
        status, limit = "pending", None
    else:
        status = draw(st.sampled_from(["done", "incomplete", "cancelled"]))
        limit = (
            draw(st.sampled_from(["maxTurns", "runTimeout"])) if status == "incomplete" else None
        )
    prompt, completion = draw(st.integers(0, 10**9)), draw(st.integers(0, 10**9))
    return RunResult(
        text=draw(st.text(max_size=20)),
        status=status,  # type: ignore[arg-type]
        messages=messages,
        tool_calls=records,
        turns=turns,
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        model=draw(st.text(min_size=1, max_size=10)),
        pending=suspended[0].request if suspended else None,
        limit=limit,
        suspended=tuple(suspended),
        cost=draw(st.none() | st.floats(min_value=0, allow_nan=False, allow_infinity=False)),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_results())
def test_to_json_and_back_is_the_same_result(result: RunResult) -> None:
    document = result.to_json()
    assert document["version"] == 1
    text = json.dumps(document, allow_nan=False)  # plain JSON: no live objects inside
    restored = RunResult.from_json(json.loads(text))
    assert restored == result
    assert restored.to_json() == document
    assert len(restored.suspended) == len(result.suspended)


class Opaque:
    """A value that is not JSON."""


not_json = st.builds(Opaque) | st.just({1, 2}) | st.just(float("nan")) | st.just(b"x")
any_values = json_values | not_json


@st.composite
def damaged_run_results(draw: st.DrawFn) -> RunResult:
    """A result of the loop's shape with some of its parts changed at random, as a host
    (or a bug) could build one: negative or missing token counts, a message without a
    role, values that are not JSON, a status, limit or suspended call that disagree
    with the rest."""
    result = draw(run_results())
    changes: dict[str, Any] = {}
    if draw(st.booleans()):
        usage = dict(result.usage)
        key = draw(st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens", "x"]))
        if draw(st.booleans()):
            usage[key] = draw(st.integers(-(10**12), 10**12))
        else:
            usage.pop(key, None)
        changes["usage"] = usage
    if draw(st.booleans()):
        changes["turns"] = draw(st.integers(-3, 3))
    if draw(st.booleans()):
        messages = list(result.messages)
        i = draw(st.integers(0, len(messages) - 1))
        messages[i] = draw(
            st.dictionaries(st.sampled_from(["role", "content", "tool_call_id"]), any_values)
        )
        changes["messages"] = messages
    if draw(st.booleans()):
        changes["status"] = draw(st.sampled_from(["done", "pending", "incomplete", "cancelled"]))
    if draw(st.booleans()):
        changes["limit"] = draw(st.none() | st.sampled_from(["maxTurns", "runTimeout"]))
    if draw(st.booleans()):
        changes["pending"] = draw(st.none() | requests())
    if result.suspended and draw(st.booleans()):
        first = result.suspended[0]
        moved = attrs.evolve(
            first,
            message_index=draw(st.integers(-1, len(result.messages))),
            record_index=draw(st.integers(-1, len(result.tool_calls))),
            args=draw(st.just(first.args) | st.dictionaries(st.text(max_size=3), any_values)),
        )
        changes["suspended"] = (moved, *result.suspended[1:])
    if draw(st.booleans()):
        request = draw(requests())
        changes["pending"] = attrs.evolve(request, data={"odd": draw(any_values)})
    if draw(st.booleans()):
        changes["cost"] = draw(st.sampled_from([-0.5, float("nan"), float("inf"), 0, 1e-9]))
    if result.tool_calls and draw(st.booleans()):
        record = result.tool_calls[0]
        changed = attrs.evolve(
            record,
            args=draw(any_values),
            metadata=draw(st.none() | st.dictionaries(st.text(max_size=3), any_values)),
        )
        changes["tool_calls"] = [changed, *result.tool_calls[1:]]
    return attrs.evolve(result, **changes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_run_results())
def test_what_to_json_writes_from_json_reads(result: RunResult) -> None:
    """Issue 17 item 24: a result to_json writes must load back (a paused run saved
    with negative usage could never be answered); one it cannot is refused on saving."""
    try:
        document = result.to_json()
    except ValueError:
        return  # refused when saving, with a reason: nothing unreadable was written
    text = json.dumps(document, allow_nan=False)  # plain JSON, no live objects inside
    restored = RunResult.from_json(json.loads(text))
    again = restored.to_json()
    assert RunResult.from_json(json.loads(json.dumps(again))) == restored


def test_to_json_refuses_negative_usage_at_once() -> None:
    document = sample_document()
    result = RunResult.from_json(document)
    odd = attrs.evolve(result, usage={**result.usage, "prompt_tokens": -5})
    with pytest.raises(
        ValueError, match=r"would not load back.*usage\.prompt_tokens must be a non-negative"
    ):
        odd.to_json()


def test_cost_survives_to_json_and_back() -> None:
    """Issue 38: a priced run's cost is kept (a paused run resumed from its JSON goes on
    adding to it); a run without one writes the document it always wrote."""
    result = RunResult.from_json(sample_document())
    assert result.cost is None and "cost" not in result.to_json()
    priced = attrs.evolve(result, cost=0.0123)
    document = json.loads(json.dumps(priced.to_json()))
    assert document["cost"] == 0.0123
    assert RunResult.from_json(document).cost == 0.0123
    assert RunResult.from_json(document) == priced
    assert RunResult.from_json(sample_document() | {"cost": 0}).cost == 0.0


@pytest.mark.parametrize("cost", [-1, "0.5", True, float("inf"), float("nan"), [1]])
def test_a_bad_cost_is_refused(cost: Any) -> None:
    with pytest.raises(ValueError, match=r"invalid RunResult document.*cost"):
        RunResult.from_json(sample_document() | {"cost": cost})
    if isinstance(cost, float):  # what from_json refuses, to_json does not write
        result = attrs.evolve(RunResult.from_json(sample_document()), cost=cost)
        with pytest.raises(ValueError, match=r"would not load back.*cost"):
            result.to_json()


def sample_document() -> dict[str, Any]:
    request = Request(
        id="req-1", kind="approval", prompt="Deploy?", expires_at="2031-01-01T00:00:00Z"
    )
    return RunResult(
        text="Deploy?",
        status="pending",
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "deploy", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Deploy?"},
        ],
        tool_calls=[ToolCallRecord("c1", "deploy", {}, "Deploy?", True, {"pending": request})],
        turns=1,
        usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        model="m",
        pending=request,
        suspended=(SuspendedCall("c1", "deploy", {}, request, 2, 0),),
    ).to_json()


def test_the_document_shape_is_pinned() -> None:
    document = sample_document()
    assert list(document) == [
        "version", "text", "status", "messages", "tool_calls", "turns", "usage", "model",
        "pending", "limit", "suspended",
    ]  # fmt: skip
    assert document["pending"] == {
        "id": "req-1",
        "kind": "approval",
        "prompt": "Deploy?",
        "expiresAt": "2031-01-01T00:00:00Z",
    }
    assert document["suspended"][0] == {
        "id": "c1", "name": "deploy", "args": {}, "request": document["pending"],
        "message_index": 2, "record_index": 0,
    }  # fmt: skip
    assert document["tool_calls"][0]["metadata"] == {"pending": document["pending"]}
    assert document["limit"] is None


def test_a_newer_version_is_refused_clearly() -> None:
    document = sample_document() | {"version": 2}
    with pytest.raises(
        ValueError, match=r"version 2 is newer than this toolnexus_trio reads \(up to 1\)"
    ):
        RunResult.from_json(document)


@pytest.mark.parametrize("version", [None, "1", True, 0, 1.5])
def test_a_bad_version_is_refused(version: Any) -> None:
    with pytest.raises(ValueError, match="invalid RunResult document"):
        RunResult.from_json(sample_document() | {"version": version})


def test_no_version_is_refused() -> None:
    document = sample_document()
    del document["version"]
    with pytest.raises(ValueError, match="no 'version' key"):
        RunResult.from_json(document)


@pytest.mark.parametrize("key", [k for k in sample_document() if k != "version"])
def test_a_missing_field_is_named(key: str) -> None:
    document = sample_document()
    del document[key]
    with pytest.raises(
        ValueError, match=rf"invalid RunResult document: required field missing @ \$\.{key}"
    ):
        RunResult.from_json(document)


def test_a_missing_nested_field_is_named() -> None:
    document = sample_document()
    del document["suspended"][0]["record_index"]
    with pytest.raises(
        ValueError, match=r"required field missing @ \$\.suspended\[0\]\.record_index"
    ):
        RunResult.from_json(document)


def mutate(path: str, value: Any) -> dict[str, Any]:
    document = sample_document()
    *parents, last = path.split(".")
    target: Any = document
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    return document


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("tool_calls.0.is_error", "false", r"expected a boolean.*tool_calls\[0\]\.is_error"),
        ("turns", "1", r"expected an integer.*\$\.turns"),
        ("turns", -1, "turns must not be negative"),
        ("status", "finished", r"expected one of.*\$\.status"),
        ("messages", "hello", r"expected an array.*\$\.messages"),
        ("messages.0", ["user", "go"], r"expected an object.*\$\.messages\[0\]"),
        ("messages.0", {"content": "go"}, r"messages\[0\] has no string 'role'"),
        ("usage.total_tokens", -3, "usage.total_tokens must be a non-negative integer"),
        ("surprise", 1, "surprise"),
        ("suspended.0.message_index", 1, "does not point at the tool message of 'c1'"),
        ("suspended.0.message_index", 7, "message_index 7 is out of range"),
        ("suspended.0.record_index", 3, "record_index 3 is out of range"),
        (
            "suspended.0.request",
            {"id": "req-1", "kind": 1, "prompt": "x"},
            r"suspended\[0\]\.request: invalid Request",
        ),
        ("suspended", [], "status is 'pending' but 'pending' or 'suspended' is empty"),
        (
            "pending",
            {"id": "other", "kind": "approval", "prompt": "Deploy?"},
            "not the first suspended call's request",
        ),
        ("limit", "maxTurns", "'limit' is set but status is 'pending'"),
        ("status", "done", "status is 'done' but the document has suspended calls"),
    ],
)
def test_malformed_documents_are_refused_with_the_reason(
    path: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RunResult.from_json(mutate(path, value))


@pytest.mark.parametrize("garbage", [None, [], "{}", 3])
def test_a_document_that_is_not_an_object_is_refused(garbage: Any) -> None:
    with pytest.raises(ValueError, match="invalid RunResult document: expected a JSON object"):
        RunResult.from_json(garbage)


def test_from_json_does_not_change_its_input() -> None:
    document = sample_document()
    before = copy.deepcopy(document)
    RunResult.from_json(document)
    assert document == before


def test_to_json_refuses_a_transcript_that_is_not_json_but_keeps_odd_metadata() -> None:
    result = RunResult.from_json(sample_document())
    odd = RunResult(
        text="", status="done", messages=[{"role": "user", "content": {1, 2}}], tool_calls=[],
        turns=0, usage=dict(result.usage), model="m",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"messages\[0\]\.content is a set"):
        odd.to_json()
    with_metadata = RunResult(
        text="", status="done", messages=[], turns=1, usage=dict(result.usage), model="m",
        tool_calls=[ToolCallRecord("c", "t", {}, "o", False, {"when": object, "n": float("nan"), 3: "x"})],
    )  # fmt: skip
    metadata = with_metadata.to_json()["tool_calls"][0]["metadata"]
    assert metadata == {"when": repr(object), "n": "nan", "3": "x"}
    json.dumps(metadata, allow_nan=False)


# The real loop: halt in one client, resume in a fresh one from the JSON text ----------


async def test_a_pending_run_resumes_from_its_json_in_a_fresh_client() -> None:
    runs: list[Answer | None] = []

    async def deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        runs.append(ctx.answer)
        if ctx.answer is None:
            return pending(Request(id="req-deploy", kind="approval", prompt=f"Deploy {args['v']}?"))
        return ToolResult.ok(f"deployed {args['v']} ✓")

    async def generate(req: GenerateRequest) -> InProcessResponse:
        if req.messages[-1]["role"] == "tool":
            return InProcessResponse(content=f"finished: {req.messages[-1]['content']}")
        return InProcessResponse(
            tool_calls=[InProcessToolCall(id="c1", name="deploy", arguments={"v": "v2"})]
        )

    def new_client() -> Any:
        return create_in_process_client(InProcessOptions(model="m", generate=generate))

    tool = Tool("deploy", "", empty_schema(), ToolSource.CUSTOM, deploy)
    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[tool], builtins=BuiltinsConfig.off())
    )
    halted = await new_client().run("ship it", toolkit)
    text = json.dumps(halted.to_json())

    restored = RunResult.from_json(json.loads(text))
    assert restored == halted
    fresh = new_client()
    with pytest.raises(ValueError, match="resume needs toolkit="):
        await fresh.resume(restored, [Answer("req-deploy", True)])
    done = await fresh.resume(restored, [Answer("req-deploy", True)], toolkit=toolkit)
    assert (done.status, done.text) == ("done", "finished: deployed v2 ✓")
    assert runs == [None, Answer("req-deploy", True)]
    assert [m["role"] for m in done.messages] == ["user", "assistant", "tool", "assistant"]
    assert done.turns == 2


def _done(messages: list[dict[str, Any]], records: list[ToolCallRecord]) -> RunResult:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    return RunResult("t", "done", messages, records, 2, usage, "m")


def test_run_snapshots_give_to_json_converting_only_what_is_new() -> None:
    from toolnexus_trio.loop._runjson import RunSnapshots

    snapshots = RunSnapshots()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi \x00 \ud800"}]
    records: list[ToolCallRecord] = []

    def document() -> dict[str, Any]:
        usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        return snapshots.document(
            text="t", messages=messages, records=records, turns=2, usage=usage, model="m"
        )

    assert document() == _done(messages, records).to_json()
    messages.append({"role": "assistant", "tool_calls": [{"id": "c"}]})
    messages.append({"role": "tool", "tool_call_id": "c", "content": "4"})
    records.append(ToolCallRecord("c", "calc", {"x": (1, 2)}, "4", False, {"k": {1, 2}}))
    assert document() == _done(messages, records).to_json()
    # A message that cannot load back is refused, and stays refused (never cached).
    messages.append({"content": "no role"})
    for _ in range(2):
        with pytest.raises(ValueError, match="role"):
            document()
    # A transcript replaced (a hook, compaction) is converted again from where it differs.
    messages = [{"role": "user", "content": "other"}]
    records = []
    assert document() == _done(messages, records).to_json()
