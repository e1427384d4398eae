"""Scenario 22: what tracing costs (issue 34).

One process measures one mode and prints one JSON object on stdout::

    python -m benchmarks.tracing --mode absent|api|sdk --runs 300

``absent``: OpenTelemetry cannot be imported (as without the ``[otel]`` extra);
``api``: the API imported, no provider configured (tracing off); ``sdk``: the SDK's
``TracerProvider`` as the global provider with a span processor whose exporter drops
every span (tracing on, no I/O). Each mode runs the SPEC loop (an in-process model,
one tool call, two turns) and a fan-out of 100 parallel tool calls. Targets: ``api``
within noise of ``absent`` (ratio <= 1.10); ``sdk`` is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.rows import Row
    from benchmarks.run import Config

FANOUT = 100
SCENARIO_TEXT = [
    "22. **Tracing overhead** (issue 34): the SPEC loop per run and a fan-out of 100 tool",
    "    calls with OpenTelemetry not importable, with the API and no provider (tracing",
    "    off: within noise), and with the SDK and an exporter that drops spans (reported).",
]
"""Scenario 22's description for the performance page."""


def _setup(mode: str) -> None:
    if mode == "absent":
        # As if the extra were not installed: every import of the package fails.
        for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.metrics"):
            sys.modules[name] = None  # type: ignore[assignment]
        return
    import opentelemetry.trace as trace_api

    if mode == "sdk":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class _Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_Drop()))
        trace_api.set_tracer_provider(provider)


async def _measure(runs: int, warmup: int) -> dict[str, Any]:
    from toolnexus_trio import (
        GenerateRequest,
        InProcessOptions,
        InProcessToolCall,
        ToolkitOptions,
        create_in_process_client,
        create_toolkit,
        define_tool,
    )

    def model(n: int) -> Any:
        async def generate(req: GenerateRequest) -> dict[str, Any]:
            if req.messages[-1]["role"] == "tool":
                return {"content": "done"}
            calls = [InProcessToolCall(id=f"c{i}", name="work", arguments={}) for i in range(n)]
            return {"tool_calls": calls}

        return generate

    async def work(args: dict[str, Any], ctx: Any) -> str:
        return "ok"

    tools = [define_tool("work", "Work.", None, work)]
    out: dict[str, Any] = {}
    async with await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=False)) as kit:
        for key, n, count in (("loop_us", 1, runs), ("fanout_ms", FANOUT, max(20, runs // 10))):
            client = create_in_process_client(InProcessOptions(model="m", generate=model(n)))
            samples: list[float] = []
            for i in range(warmup + count):
                started = time.perf_counter()
                result = await client.run("go", kit)
                took = time.perf_counter() - started
                assert result.status == "done"
                if i >= warmup:
                    samples.append(took * (1e6 if key == "loop_us" else 1e3))
            out[key] = samples
    return out


def collect(
    cfg: Config,
    add: Callable[[str, str, dict[str, Any]], None],
    child: Callable[[list[str], float], dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    """Run scenario 22: alternating modes, one fresh process each."""
    rounds = 4 if cfg.agent_rounds > 2 else 2
    runs = str(cfg.overhead_runs)
    for r in range(rounds):
        modes = ("absent", "api", "sdk") if r % 2 == 0 else ("sdk", "api", "absent")
        for mode in modes:
            add(
                "tracing",
                mode,
                child(["-m", "benchmarks.tracing", "--mode", mode, "--runs", runs], 300),
            )
        progress(f"tracing round {r + 1}/{rounds}")


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Row]:
    """The scenario-22 rows (empty when it did not run)."""
    from benchmarks.rows import Row, Stats, Target, flat

    if "tracing" not in raw:
        return []
    sides = raw["tracing"]
    out = []
    for key, what, unit in (
        ("loop_us", "SPEC loop run", "us"),
        ("fanout_ms", f"fan-out of {FANOUT}", "ms"),
    ):
        absent = Stats.of(flat(sides["absent"], key))
        out.append(
            Row(
                f"22. Tracing off, {what}",
                "run, median (peer column: OpenTelemetry not importable)",
                unit,
                Stats.of(flat(sides["api"], key)),
                absent,
                "the same run without OpenTelemetry",
                Target("ratio", "<=", 1.10),
                ["ours: the API imported, no provider configured"],
            )
        )
        out.append(
            Row(
                f"22. Tracing on, {what} (reported)",
                "run, median (peer column: OpenTelemetry not importable)",
                unit,
                Stats.of(flat(sides["sdk"], key)),
                absent,
                "the same run without OpenTelemetry",
                None,
                ["ours: the SDK's TracerProvider, every span dropped by its exporter"],
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    import trio

    parser = argparse.ArgumentParser(prog="python -m benchmarks.tracing")
    parser.add_argument("--mode", choices=("absent", "api", "sdk"), required=True)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    _setup(args.mode)
    print(json.dumps(trio.run(_measure, args.runs, args.warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
