"""Crash-durable runs (issue 37): checkpoint overhead and recovery time.

``python -m benchmarks.durable [--runs 200] [--warmup 20] [--steps 20] [--dsn DSN]``

*Overhead*: the SPEC loop scenario (one model turn calling ``get_weather`` and
``calculate``, then the answer) asked with an id on a store, ``durable=False`` and
``durable=True``, alternating, each ask on a fresh id; for SQLite (a file in a
temporary directory, the store's own ``synchronous=FULL``) and PostgreSQL (a
throwaway server from tests/pg_server.py, durable, unless ``--dsn``). The target: with
SQLite, the durable median at most 1.5x the plain one; PostgreSQL is reported.

*Recovery*: a run of ``--steps`` model steps (one tool call each) is stopped at its
last step boundary (its scope cancelled there, which gives its lease up), then
:meth:`Client.recover` finishes it; p50 and p95 of the recovery's wall time.

One JSON object on stdout (one line); :func:`rows` makes scenario 20's report rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import trio

import toolnexus_trio.loop._checkpoint as checkpoint
from toolnexus_trio import (
    BuiltinsConfig,
    Client,
    ConversationStore,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    PostgresConversationStore,
    SqliteConversationStore,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
    define_tool,
)
from toolnexus_trio.stores import CheckpointStore

FINAL = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4."


async def _weather(args: dict[str, Any], ctx: Any) -> str:
    return f"Sunny, 22C in {args.get('city')}"


async def _calculate(args: dict[str, Any], ctx: Any) -> str:
    return "4"


async def _spec_generate(req: GenerateRequest) -> InProcessResponse:
    if any(m["role"] == "tool" for m in req.messages):
        return InProcessResponse(content=FINAL)
    return InProcessResponse(
        tool_calls=[
            InProcessToolCall(id="c1", name="get_weather", arguments={"city": "Paris"}),
            InProcessToolCall(id="c2", name="calculate", arguments={"expression": "2+2"}),
        ]
    )


def _steps_generate(steps: int) -> Any:
    async def generate(req: GenerateRequest) -> InProcessResponse:
        done = sum(1 for m in req.messages if m["role"] == "tool")
        if done < steps:
            call = InProcessToolCall(id=f"s{done}", name="calculate", arguments={"expression": "1"})
            return InProcessResponse(tool_calls=[call])
        return InProcessResponse(content=f"done {steps}")

    return generate


def _client(store: ConversationStore, generate: Any, durable: bool, steps: int = 10) -> Client:
    return create_in_process_client(
        InProcessOptions(
            model="m", generate=generate, store=store, durable=durable, max_turns=steps + 2
        )
    )


async def _toolkit() -> Any:
    tools = [
        define_tool("get_weather", "The weather in a city", None, _weather),
        define_tool("calculate", "Evaluate an expression", None, _calculate),
    ]
    return await create_toolkit(ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off()))


def _stats(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))],
        "n": len(ordered),
        "samples": samples,
    }


async def overhead(store: ConversationStore, runs: int, warmup: int) -> dict[str, Any]:
    tk = await _toolkit()
    sides = {
        False: _client(store, _spec_generate, False),
        True: _client(store, _spec_generate, True),
    }
    samples: dict[bool, list[float]] = {False: [], True: []}
    # The floor, measured between the asks: a checkpoint write of the SPEC run's size,
    # flushed (the response's, marking its calls started) and not (the results').
    assert isinstance(store, CheckpointStore)
    probe, owner = f"floor-{uuid.uuid4().hex}", "bench"
    assert await store.start_run(probe, owner, 3_600_000, {"x": "y" * 1500})
    writes: dict[bool, list[float]] = {False: [], True: []}
    for i in range(warmup + runs):
        for durable in (i % 2 == 0, i % 2 != 0):  # the order flips each run
            started = time.perf_counter()
            result = await sides[durable].ask("weather?", tk, id=f"o-{durable}-{i}")
            elapsed = (time.perf_counter() - started) * 1000
            assert result.text == FINAL, result.text
            if i >= warmup:
                samples[durable].append(elapsed)
        for flush in (True, False):
            started = time.perf_counter()
            assert await store.save_checkpoint(
                probe, owner, {"x": "y" * 1500, "i": i}, durable=flush
            )
            if i >= warmup:
                writes[flush].append((time.perf_counter() - started) * 1000)
    await store.finish_run(probe, owner, "done", None)
    plain, durable = _stats(samples[False]), _stats(samples[True])
    flushed, unflushed = _stats(writes[True]), _stats(writes[False])
    return {
        "plain_ms": plain,
        "durable_ms": durable,
        "ratio": durable["median"] / plain["median"],
        "flushed_write_ms": flushed,
        "unflushed_write_ms": unflushed,
        "floor": (plain["median"] + flushed["median"] + unflushed["median"]) / plain["median"],
    }


async def recovery(store: ConversationStore, steps: int, runs: int) -> dict[str, Any]:
    tk = await _toolkit()
    generate = _steps_generate(steps)
    samples = []
    for i in range(runs):
        seen = 0
        with trio.CancelScope() as scope:

            async def pause(point: str) -> None:
                nonlocal seen
                if point == "step":
                    seen += 1
                    if seen == steps:  # the last step boundary before the answer
                        scope.cancel()
                        await trio.sleep_forever()

            checkpoint._pause_hook = pause
            try:
                await _client(store, generate, True, steps).ask("go", tk, id=f"r-{i}")
            finally:
                checkpoint._pause_hook = None
        started = time.perf_counter()
        result = await _client(store, generate, True, steps).recover(f"r-{i}", tk)
        samples.append((time.perf_counter() - started) * 1000)
        assert result.text == f"done {steps}", result.text
    return {"steps": steps, "recover_ms": _stats(samples)}


SCENARIO_TEXT = [
    "20. **Crash-durable runs** (``benchmarks/durable.py``): the SPEC loop scenario (an",
    "    instant in-process model, two tools) asked with an id, ``durable=False`` and",
    "    ``durable=True`` alternating, on SQLite (``synchronous=FULL``) and PostgreSQL (a",
    "    throwaway durable server); the row is the durable median over the plain one",
    "    (target with SQLite: at most 1.5x; PostgreSQL reported). A note gives the floor",
    "    measured between the asks: the plain ask plus one flushed checkpoint write (the",
    "    response marking its calls started, which must survive a power cut) and one",
    "    unflushed (the results). Then a 20-step run is",
    "    stopped at its last step boundary and :meth:`Client.recover` finishes it:",
    "    p50 of the recovery reported.",
]
"""Scenario 20's description for the performance page."""


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Any]:
    """The report rows of scenario 20 (empty when it did not run)."""
    from benchmarks.rows import Row, Stats, Target

    runs = raw.get("durable", {}).get("ours", [])
    if not runs:
        return []
    out: list[Any] = []
    for kind, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        durable = [x for run in runs for x in run[kind]["durable_ms"]["samples"]]
        plain = [x for run in runs for x in run[kind]["plain_ms"]["samples"]]
        recover = [x for run in runs for x in run[kind]["recover_ms"]["samples"]]
        floors = [run[kind]["floor"] for run in runs if "floor" in run[kind]]
        flushed = [
            x for run in runs for x in run[kind].get("flushed_write_ms", {}).get("samples", [])
        ]
        floor = (
            [
                f"floor: {statistics.median(floors):.2f}x, the plain ask plus one flushed "
                f"checkpoint write (p50 {statistics.median(flushed):.3g} ms: the response "
                "marking its calls started, which must survive a power cut) and one "
                "unflushed (the results), measured between the asks"
            ]
            if floors
            else []
        )
        out.append(
            Row(
                f"20. Checkpoint overhead, {label} (durable over plain)",
                "ms per ask of the SPEC loop scenario, durable vs not",
                "ms",
                Stats.of(durable),
                Stats.of(plain),
                "the plain ask's own store write",
                Target("ratio", "<=", 1.5) if kind == "sqlite" else None,
                [f"peer column: the same ask with durable=False on the same {label} store", *floor],
            )
        )
        out.append(
            Row(
                f"20. Recovery of a 20-step run, {label}",
                "ms from Client.recover to its result",
                "ms",
                Stats.of(recover),
                Stats.of([0.0]),
                "reported",
                None,
                ["p50 reported; the run is stopped at its last step boundary"],
            )
        )
    return out


@contextmanager
def _pg(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pg_server import running_server

    with running_server(durable=True) as server:
        if server is None:
            raise SystemExit("no PostgreSQL binaries: pass --dsn")
        with server.database() as fresh:
            yield fresh


@asynccontextmanager
async def _store(kind: str, where: str) -> AsyncIterator[ConversationStore]:
    if kind == "sqlite":
        async with SqliteConversationStore(where) as sqlite:
            yield sqlite
    else:
        async with PostgresConversationStore(where) as pg:
            yield pg


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, _pg(args.dsn) as dsn:
        for kind, where in (("sqlite", str(Path(tmp) / "runs.db")), ("postgres", dsn)):
            async with _store(kind, where) as store:
                out[kind] = await overhead(store, args.runs, args.warmup)
                out[kind].update(await recovery(store, args.steps, args.recoveries))
    out["target"] = {"sqlite ratio <= 1.5": out["sqlite"]["ratio"] <= 1.5}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--recoveries", type=int, default=20)
    parser.add_argument("--dsn", default=None)
    namespace = parser.parse_args()
    print(json.dumps(trio.run(main, namespace)))
