"""The Prometheus registry behind ``client.metrics()`` (SPEC §8 "Observability").

The golden files in tests/fixtures/ are the ``metrics()`` text of toolnexus 0.21.0 (the
released Python port, run as a black box under a fake clock) for exactly the events of
``PEER_EVENTS``, which are that port's own ``on_metric`` events of the same runs. The
SPEC pins the text as byte-identical across ports, so ours must equal them.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import trio

from toolnexus_trio import (
    BuiltinsConfig,
    GenerateError,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    Request,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
    pending,
)
from toolnexus_trio.loop._metrics import PrometheusRegistry

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOUNDS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
LE = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"]

# Three peer runs: tools named to test escaping and sorting (`a#` sorts before `a"q`
# because `"` is escaped; `x!` before `x` because the closing quote is part of the
# rendered label string), an llm call of exactly 50 ms (the first bucket bound), tools
# of exactly 0.25/0.5/1/60 s, a suspended call, and a run whose model call raised.
PEER_EVENTS: list[dict[str, Any]] = [
    {'event': 'llm', 'model': 'm"1\\x\ny', 'status': 'ok', 'ms': 50.0, 'prompt_tokens': 3, 'completion_tokens': 4},
    {'event': 'tool', 'tool': 'echo', 'source': 'native', 'is_error': False, 'ms': 250.0},
    {'event': 'tool', 'tool': 'bad', 'source': 'native', 'is_error': True, 'ms': 123.45678900000001},
    {'event': 'tool', 'tool': 'a"q', 'source': 'native', 'is_error': False, 'ms': 500.0},
    {'event': 'tool', 'tool': 'a#', 'source': 'native', 'is_error': False, 'ms': 60000.0},
    {'event': 'tool', 'tool': 'a\\b', 'source': 'native', 'is_error': False, 'ms': 60500.0},
    {'event': 'tool', 'tool': 'nl\nx', 'source': 'native', 'is_error': False, 'ms': 9.999999406318238e-05},
    {'event': 'tool', 'tool': 'echo', 'source': 'native', 'is_error': False, 'ms': 250.0},
    {'event': 'tool', 'tool': 'x', 'source': 'native', 'is_error': False, 'ms': 250.0},
    {'event': 'tool', 'tool': 'x!', 'source': 'native', 'is_error': False, 'ms': 750.0},
    {'event': 'llm', 'model': 'b-model', 'status': 'ok', 'ms': 2500.0, 'prompt_tokens': 5, 'completion_tokens': 6},
    {'event': 'run', 'model': 'b-model', 'turns': 2, 'tool_calls': 9, 'total_tokens': 18, 'ms': 125173.456889},
    {'event': 'llm', 'model': 'm"1\\x\ny', 'status': 'ok', 'ms': 99.99999999999432, 'prompt_tokens': 0, 'completion_tokens': 0},
    {'event': 'tool', 'tool': 'wait', 'source': 'native', 'is_error': False, 'ms': 1000.0, 'pending': True},
    {'event': 'run', 'model': 'm"1\\x\ny', 'turns': 1, 'tool_calls': 1, 'total_tokens': 0, 'ms': 1099.9999999999943},
    {'event': 'llm', 'model': 'm"1\\x\ny', 'status': 'error', 'ms': 30000.0, 'prompt_tokens': 0, 'completion_tokens': 0},
    {'event': 'run', 'model': 'm"1\\x\ny', 'turns': 1, 'tool_calls': 0, 'total_tokens': 0, 'ms': 30000.0, 'error': 'boom'},
]  # fmt: skip


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def rendered(*events: dict[str, Any]) -> str:
    registry = PrometheusRegistry()
    for event in events:
        registry.observe(event)
    return registry.render()


def samples(text: str) -> dict[str, str]:
    """Sample lines as ``{name{labels}: value}``."""
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    return dict(pairs)


def llm(ms: float = 1.0, model: str = "m", status: str = "ok", **kw: Any) -> dict[str, Any]:
    return {"event": "llm", "model": model, "status": status, "ms": ms, "prompt_tokens": 0, "completion_tokens": 0, **kw}  # fmt: skip


def tool_event(name: str = "t", ms: float = 1.0, **kw: Any) -> dict[str, Any]:
    return {"event": "tool", "tool": name, "source": "native", "is_error": False, "ms": ms, **kw}


def run_event(**kw: Any) -> dict[str, Any]:
    return {"event": "run", "model": "m", "turns": 1, "tool_calls": 0, "total_tokens": 0, "ms": 1.0, **kw}  # fmt: skip


# The pinned bytes -----------------------------------------------------------------------


def test_an_empty_registry_renders_only_help_and_type_lines() -> None:
    text = PrometheusRegistry().render()
    assert text == fixture("metrics_empty.prom")
    assert text.endswith("counter\n")
    assert all(line.startswith("# ") for line in text.splitlines())


def test_the_text_is_byte_identical_to_the_released_port_for_the_same_events() -> None:
    assert rendered(*PEER_EVENTS) == fixture("metrics_golden.prom")


def test_progress_and_log_events_change_nothing() -> None:
    text = rendered(
        {"event": "progress", "id": "c", "tool": "t", "percent": 50},
        {"event": "log", "id": "c", "tool": "t", "level": "info", "message": "hi"},
        {"no": "event key"},
    )
    assert text == fixture("metrics_empty.prom")


# The pieces of the pin -----------------------------------------------------------------


def test_label_values_escape_backslash_quote_and_newline_only() -> None:
    text = rendered(tool_event('a\\b"c\nd\te'))
    assert 'toolnexus_tool_calls_total{tool="a\\\\b\\"c\\nd\te",source="native",is_error="false",pending="false"} 1\n' in text  # fmt: skip


def test_series_sort_by_the_rendered_label_string() -> None:
    text = rendered(llm(model="b"), llm(model="a", status="ok"), llm(model="a", status="error"), llm(model="a!"))  # fmt: skip
    lines = [line for line in text.splitlines() if line.startswith("toolnexus_llm_requests_total{")]
    assert lines == [
        'toolnexus_llm_requests_total{model="a!",status="ok"} 1',
        'toolnexus_llm_requests_total{model="a",status="error"} 1',
        'toolnexus_llm_requests_total{model="a",status="ok"} 1',
        'toolnexus_llm_requests_total{model="b",status="ok"} 1',
    ]


@pytest.mark.parametrize("index", range(len(BOUNDS)))
def test_an_observation_exactly_on_a_bound_lands_in_that_bucket(index: int) -> None:
    bound = BOUNDS[index]
    got = samples(rendered(tool_event(ms=bound * 1000)))
    counts = [got[f'toolnexus_tool_duration_seconds_bucket{{tool="t",le="{le}"}}'] for le in LE]
    assert counts == ["0"] * index + ["1"] * (len(LE) - index)
    assert got['toolnexus_tool_duration_seconds_sum{tool="t"}'] == LE[index]


def test_buckets_are_cumulative_and_over_sixty_seconds_only_inf() -> None:
    got = samples(rendered(tool_event(ms=10), tool_event(ms=300), tool_event(ms=60_001)))
    counts = [got[f'toolnexus_tool_duration_seconds_bucket{{tool="t",le="{le}"}}'] for le in LE]
    assert counts == ["1", "1", "1", "2", "2", "2", "2", "2", "2", "2", "3"]
    assert got['toolnexus_tool_duration_seconds_count{tool="t"}'] == "3"
    assert got['toolnexus_tool_duration_seconds_sum{tool="t"}'] == repr(0.01 + 0.3 + 60.001)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0"),
        (2000, "2"),  # integral seconds print without a fraction
        (1500, "1.5"),
        (123.456789, "0.123456789"),
        (0.0005, "5e-07"),  # Python's repr, like the released Python port
        (1e23, "99999999999999983616"),  # integral: all the digits, no exponent
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_sum_formatting(ms: float, text: str) -> None:
    got = samples(rendered(tool_event(ms=ms)))
    assert got['toolnexus_tool_duration_seconds_sum{tool="t"}'] == text


def test_nan_counts_only_in_the_inf_bucket() -> None:
    got = samples(rendered(tool_event(ms=math.nan)))
    assert got['toolnexus_tool_duration_seconds_bucket{tool="t",le="60"}'] == "0"
    assert got['toolnexus_tool_duration_seconds_bucket{tool="t",le="+Inf"}'] == "1"


# What counts ---------------------------------------------------------------------------


def test_tokens_come_from_ok_calls_only() -> None:
    failed = rendered(llm(status="error", prompt_tokens=7, completion_tokens=7))
    assert "toolnexus_llm_tokens_total{" not in failed
    got = samples(rendered(llm(prompt_tokens=3, completion_tokens=4), llm(prompt_tokens=5)))
    assert got['toolnexus_llm_tokens_total{type="prompt"}'] == "8"
    assert got['toolnexus_llm_tokens_total{type="completion"}'] == "4"
    zero = samples(rendered(llm()))  # an ok call without usage still shows both series
    assert zero['toolnexus_llm_tokens_total{type="prompt"}'] == "0"


def test_a_run_error_is_a_run_event_carrying_error() -> None:
    got = samples(
        rendered(
            run_event(error="boom"),
            run_event(error="timeout", status="incomplete"),
            run_event(error=""),  # an exception with an empty message is still an error
            run_event(error=None),
            run_event(status="cancelled"),
            run_event(status="pending"),
            run_event(model="other"),
        )
    )
    assert got == {'toolnexus_run_errors_total{model="m"}': "3"}


def test_is_error_and_pending_count_only_as_true_booleans() -> None:
    got = samples(
        rendered(tool_event(is_error="false"), tool_event(is_error=True), tool_event(pending=1))
    )
    assert got['toolnexus_tool_calls_total{tool="t",source="native",is_error="false",pending="false"}'] == "2"  # fmt: skip
    assert got['toolnexus_tool_calls_total{tool="t",source="native",is_error="true",pending="false"}'] == "1"  # fmt: skip


def test_series_per_metric_are_capped_and_drops_counted_once_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = PrometheusRegistry(max_series=3)
    with caplog.at_level(logging.WARNING, logger="toolnexus_trio"):
        for i in range(10):
            registry.observe(tool_event(f"t{i}"))
        registry.observe(tool_event("t0"))  # an existing series still counts
    got = samples(registry.render())
    assert sorted(k for k in got if k.startswith("toolnexus_tool_calls_total")) == [
        f'toolnexus_tool_calls_total{{tool="t{i}",source="native",is_error="false",pending="false"}}'
        for i in range(3)
    ]
    assert got['toolnexus_tool_duration_seconds_count{tool="t0"}'] == "2"
    assert registry.dropped == 14  # 7 new tools x (counter + histogram)
    assert len(caplog.records) == 2  # once per metric, not once per drop
    with pytest.raises(ValueError):
        PrometheusRegistry(max_series=0)


# Fed by a real run -------------------------------------------------------------------------


async def test_a_real_in_process_run_feeds_the_registry_through_on_metric(
    autojump_clock: trio.abc.Clock,
) -> None:
    registry = PrometheusRegistry()

    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await trio.sleep(args["s"])
        return "ok"

    async def fails(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("no")

    async def asks(args: dict[str, Any], ctx: ToolContext) -> Any:
        return pending(Request(kind="confirm", prompt="sure?"))

    tools = [define_tool("slow", "", None, slow), define_tool("fails", "", None, fails), define_tool("asks", "", None, asks)]  # fmt: skip
    toolkit = await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off()))
    replies = iter(
        [
            InProcessResponse(
                tool_calls=[
                    InProcessToolCall(name="slow", arguments={"s": 0.25}),
                    InProcessToolCall(name="slow", arguments={"s": 5}),
                    InProcessToolCall(name="fails"),
                ],
                usage={"prompt_tokens": 10, "completion_tokens": 2},
            ),
            InProcessResponse(content="done", usage={"prompt_tokens": 12, "completion_tokens": 3}),
            InProcessResponse(tool_calls=[InProcessToolCall(name="asks")]),
        ]
    )

    async def generate(request: GenerateRequest) -> InProcessResponse:
        await trio.sleep(0.5)
        reply = next(replies, None)
        if reply is None:
            raise RuntimeError("model down")
        return reply

    client = create_in_process_client(
        InProcessOptions(model="gpt", generate=generate, on_metric=registry.observe)
    )
    assert (await client.run("one", toolkit)).status == "done"
    assert (await client.run("two", toolkit)).status == "pending"
    with pytest.raises(RuntimeError):
        await client.run("three", toolkit)

    got = samples(registry.render())
    assert got['toolnexus_llm_requests_total{model="gpt",status="ok"}'] == "3"
    assert got['toolnexus_llm_requests_total{model="gpt",status="error"}'] == "1"
    assert got['toolnexus_llm_tokens_total{type="prompt"}'] == "22"
    assert got['toolnexus_llm_tokens_total{type="completion"}'] == "5"
    assert got['toolnexus_llm_request_duration_seconds_bucket{model="gpt",le="0.5"}'] == "4"
    assert got['toolnexus_llm_request_duration_seconds_sum{model="gpt"}'] == "2"
    assert got['toolnexus_tool_calls_total{tool="slow",source="native",is_error="false",pending="false"}'] == "2"  # fmt: skip
    assert got['toolnexus_tool_calls_total{tool="fails",source="native",is_error="true",pending="false"}'] == "1"  # fmt: skip
    assert got['toolnexus_tool_calls_total{tool="asks",source="native",is_error="false",pending="true"}'] == "1"  # fmt: skip
    assert got['toolnexus_tool_duration_seconds_bucket{tool="slow",le="0.25"}'] == "1"
    assert got['toolnexus_tool_duration_seconds_bucket{tool="slow",le="2.5"}'] == "1"
    assert got['toolnexus_tool_duration_seconds_bucket{tool="slow",le="5"}'] == "2"
    assert got['toolnexus_tool_duration_seconds_sum{tool="slow"}'] == "5.25"
    assert got['toolnexus_run_errors_total{model="gpt"}'] == "1"
    assert registry.render().endswith("\n")


async def test_the_client_metrics_are_the_same_whether_on_metric_listens_or_not(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Without on_metric the loop feeds its registry without building event dicts (the
    # fan-out path); what metrics() renders must not depend on that.
    async def generate(request: GenerateRequest) -> InProcessResponse:
        await trio.sleep(0.25)
        if request.turn == 0:
            return InProcessResponse(
                tool_calls=[InProcessToolCall(name="t")], usage={"prompt_tokens": 7}
            )
        if "fail" in str(request.messages[-3]["content"]):
            raise RuntimeError("model down")
        return InProcessResponse(content="ok", usage={"prompt_tokens": 3, "completion_tokens": 2})

    async def t(args: dict[str, Any], ctx: ToolContext) -> str:
        return "x"

    toolkit = Toolkit([define_tool("t", "", None, t)])
    rendered = []
    for sink in (None, lambda event: None):
        client = create_in_process_client(
            InProcessOptions(model="gpt", generate=generate, on_metric=sink)
        )
        assert (await client.run("go", toolkit)).status == "done"
        with pytest.raises(GenerateError):
            await client.run("fail", toolkit)
        rendered.append(client.metrics())
    assert rendered[0] == rendered[1]
    assert 'toolnexus_llm_requests_total{model="gpt",status="ok"} 3' in rendered[0]
    assert 'toolnexus_run_errors_total{model="gpt"} 1' in rendered[0]
