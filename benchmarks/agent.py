"""Scenarios 1-3: the agent loop, ours (Trio) and the peer's (toolnexus 0.21.0, asyncio).

One process measures one side of one scenario and prints one JSON object on stdout::

    python -m benchmarks.agent overhead ours --runs 300 --warmup 50
    python -m benchmarks.agent fanout peer --runs 3
    python -m benchmarks.agent fanout ours --cold           # first run of a fresh process
    python -m benchmarks.agent fanout ours --cold --floor   # first bare-Trio fan-out instead
    python -m benchmarks.agent cancel ours --runs 1

The peer is used as a black box through its public API only (``create_toolkit``,
``define_tool``, ``create_in_process_client``, ``Client.run(cancel=asyncio.Event)``),
in its own idiom: its ``generate`` is synchronous because the peer runs it on a worker
thread. Each side also measures the scenario's *limit* (the same work with no
framework at all) where that makes sense.

Fan-out measures each side against its own runtime's floor: the same 1,000 tool
coroutines run bare, in one Trio nursery (ours) or one ``asyncio.gather`` (the peer's
own primitive; ``asyncio.TaskGroup`` is measured too), in the same process, the
library run and the floor run alternating. ``--cold`` times the first run of a fresh
process after the same imports and setup and nothing else; with ``--floor`` that first
run is the bare floor instead (a cold floor cannot share a process with a cold library
run, so it gets its own fresh process).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

QUESTION = "What's the weather in Paris and what is 2+2?"
FINAL = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4."
SPEC_CALLS = [
    ("call_weather_1", "get_weather", {"city": "Paris"}),
    ("call_add_1", "add", {"a": 2, "b": 2}),
]
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
FANOUT_CALLS = 1000
FANOUT_SLEEP_S = 0.010
CANCEL_AFTER_S = 0.100
CANCEL_TOOL_SLEEP_S = 5.0


def _has_tool_message(messages: Any) -> bool:
    return any(m.get("role") == "tool" for m in messages)


class GcTimer:
    """Time spent in the cyclic GC while active (``gc.callbacks``), and full collections.

    Used around a cold run: whether the first full collection of the import-time heap
    lands inside the timed run depends on each process's import history.
    """

    def __init__(self) -> None:
        self.ms = 0.0
        self.full = 0
        self._t0 = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.ms += (time.perf_counter() - self._t0) * 1e3
            self.full += info["generation"] == 2

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB (Linux ``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---------------------------------------------------------------------------
# Ours (Trio)
# ---------------------------------------------------------------------------


def ours(
    scenario: str, runs: int, warmup: int, cold: bool, floor: bool, memory: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    import trio

    from toolnexus_trio import (
        CancelToken,
        GenerateRequest,
        InProcessOptions,
        InProcessResponse,
        InProcessToolCall,
        ToolContext,
        ToolkitOptions,
        create_in_process_client,
        create_toolkit,
        define_tool,
    )

    import_ms = (time.perf_counter() - started) * 1e3

    async def get_weather(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"Sunny, 22C in {args['city']}"

    async def add(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["a"] + args["b"])

    async def wait_10ms(args: dict[str, Any], ctx: ToolContext) -> str:
        if PROBE:
            PROBE[0]()
        await trio.sleep(FANOUT_SLEEP_S)
        return "ok"

    async def bare_wait() -> str:  # the tool's body, for the floor
        if PROBE:
            PROBE[0]()
        await trio.sleep(FANOUT_SLEEP_S)
        return "ok"

    state = {"alive": 0, "completed": 0}

    async def sleep_5s(args: dict[str, Any], ctx: ToolContext) -> str:
        state["alive"] += 1
        try:
            await trio.sleep(CANCEL_TOOL_SLEEP_S)
            state["completed"] += 1
        finally:
            state["alive"] -= 1
        return "slept"

    spec_response = InProcessResponse(
        tool_calls=[InProcessToolCall(id=i, name=n, arguments=a) for i, n, a in SPEC_CALLS]
    )
    cancel_response = InProcessResponse(tool_calls=[InProcessToolCall(id="c0", name="sleep")])
    final = InProcessResponse(content=FINAL)

    def scripted(first: InProcessResponse | None) -> Callable[[GenerateRequest], Any]:
        async def generate(req: GenerateRequest) -> InProcessResponse:
            if _has_tool_message(req.messages):
                return final
            if first is None:  # the fan-out: a model's message is new on every request
                calls = [InProcessToolCall(id=f"c{i}", name="wait") for i in range(FANOUT_CALLS)]
                return InProcessResponse(tool_calls=calls)
            return first

        return generate

    async def main() -> dict[str, Any]:
        tools = {
            "overhead": [
                define_tool("get_weather", "Weather of a city", WEATHER_SCHEMA, get_weather),
                define_tool("add", "Add two numbers", ADD_SCHEMA, add),
            ],
            "fanout": [define_tool("wait", "Waits 10 ms", None, wait_10ms)],
            "cancel": [define_tool("sleep", "Sleeps 5 s", None, sleep_5s)],
        }[scenario]
        first = {"overhead": spec_response, "fanout": None, "cancel": cancel_response}[scenario]
        client = create_in_process_client(
            InProcessOptions(model="scripted", generate=scripted(first))
        )
        out: dict[str, Any] = {}
        async with await create_toolkit(
            ToolkitOptions(extra_tools=tools, builtins=False)
        ) as toolkit:
            if scenario == "overhead":
                for _ in range(warmup):
                    await client.run(QUESTION, toolkit)
                out["samples"] = samples = []
                gc.collect()
                for _ in range(runs):
                    t0 = time.perf_counter()
                    result = await client.run(QUESTION, toolkit)
                    samples.append((time.perf_counter() - t0) * 1e3)
                    assert result.text == FINAL
                    assert len(result.tool_calls) == 2
                out["limit_ms"] = await _bare_overhead_trio(scripted(first), runs)
            elif scenario == "fanout":

                async def library() -> float:
                    t0 = time.perf_counter()
                    result = await client.run(QUESTION, toolkit)
                    elapsed = (time.perf_counter() - t0) * 1e3
                    assert result.text == FINAL
                    assert len(result.tool_calls) == FANOUT_CALLS
                    return elapsed

                if cold:
                    out["import_ms"] = import_ms
                    with GcTimer() as gc_timer:
                        out["cold_ms"] = await (
                            _bare_fanout_trio(bare_wait) if floor else library()
                        )
                    out["cold_gc_ms"], out["cold_gc_full"] = gc_timer.ms, gc_timer.full
                elif memory:
                    out |= await _in_flight_memory(
                        lambda: client.run(QUESTION, toolkit), _bare_fanout_trio, bare_wait
                    )
                else:
                    for _ in range(warmup):
                        await library()
                        await _bare_fanout_trio(bare_wait)

                    async def floor_run() -> float:
                        return await _bare_fanout_trio(bare_wait)

                    steps = {"samples": library, "limit_ms": floor_run}
                    out |= await _alternate(runs, steps, collect=False)
            else:
                out["samples"] = samples = []
                out["alive_after"] = alive = []
                for _ in range(runs):
                    token = CancelToken()
                    fired: list[float] = []

                    async def cancel_later(token: CancelToken = token, fired: list = fired) -> None:
                        await trio.sleep(CANCEL_AFTER_S)
                        fired.append(time.perf_counter())
                        token.cancel()

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(cancel_later)
                        result = await client.run(QUESTION, toolkit, cancel=token)
                        returned = time.perf_counter()
                        # Counted before the nursery closes: a tool task still running
                        # now would be a leak.
                        alive.append(state["alive"])
                    assert result.status == "cancelled", result.status
                    samples.append((returned - fired[0]) * 1e3)
                out["tool_completed"] = state["completed"]
                out["limit_ms"] = await _bare_cancel_trio()
        return out

    result = trio.run(main)
    result["peak_rss_kib"] = peak_rss_kib()
    return result


async def _bare_overhead_trio(generate: Callable[[Any], Any], runs: int) -> float:
    """The scenario's work without a framework: 2 generate calls and 2 tool calls."""
    import trio

    class Req:
        messages: list[dict[str, str]] = []

    req, req2 = Req(), Req()
    req2.messages = [{"role": "tool"}]

    async def tool(_: Any) -> str:
        return "x"

    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await generate(req)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tool, 1)
            nursery.start_soon(tool, 2)
        await generate(req2)
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return samples[len(samples) // 2]


async def _alternate(
    runs: int, steps: dict[str, Callable[[], Awaitable[float]]], *, collect: bool = True
) -> dict[str, list[float]]:
    """Run each step *runs* times: its wall times under its key, its process CPU times
    under ``<key>_cpu`` and its cyclic-GC time under ``<key>_gc``. The order flips
    every run. With *collect* every timed run starts after ``gc.collect()``; the
    fan-out passes ``collect=False``: a user's runs pay for the collections their own
    garbage makes due, full ones included, and so do these (the median over many runs
    and processes then shows how often a run pays for one)."""
    out: dict[str, list[float]] = {}
    items = list(steps.items())
    for i in range(runs):
        for key, measure in items if i % 2 == 0 else items[::-1]:
            if collect:
                gc.collect()
            cpu0 = time.process_time()
            with GcTimer() as gc_timer:
                out.setdefault(key, []).append(await measure())
            out.setdefault(f"{key}_cpu", []).append((time.process_time() - cpu0) * 1e3)
            out.setdefault(f"{key}_gc", []).append(gc_timer.ms)
    return out


async def _in_flight_memory(
    run: Callable[[], Awaitable[Any]],
    bare: Callable[[Callable[[], Any]], Awaitable[float]],
    body: Callable[[], Awaitable[str]],
) -> dict[str, float]:
    """Memory per in-flight tool call: tracemalloc's traced bytes and the GC-tracked
    objects when all 1,000 calls are running, minus before the run, per call; for the
    library run (*run*, after one warm run) and for the bare floor (*bare* of *body*).

    The fan-out tools call :data:`PROBE` as they start: the 1,000th start takes the
    snapshot (the sleep is 10 ms, as in the timed runs). The collector is off while
    measuring, so that no collection frees garbage between the two snapshots.
    """
    import tracemalloc

    snap: dict[str, tuple[int, int]] = {}
    phase = ["lib"]
    started = [0]

    def take(tag: str) -> None:
        snap[tag] = (tracemalloc.get_traced_memory()[0], len(gc.get_objects()))

    def probe() -> None:
        started[0] += 1
        if started[0] == FANOUT_CALLS:
            take(phase[0])

    await run()  # warm: caches filled, as in the timed runs
    PROBE.append(probe)
    out: dict[str, float] = {}
    try:
        for kind in ("lib", "floor"):
            phase[0], started[0] = kind, 0
            gc.collect()
            gc.disable()
            tracemalloc.start()
            try:
                take(f"{kind}_base")
                await (run() if kind == "lib" else bare(body))
            finally:
                tracemalloc.stop()
                gc.enable()
            (peak, objs), (base, objs0) = snap[kind], snap[f"{kind}_base"]
            out[f"{kind}_bytes"] = (peak - base) / FANOUT_CALLS
            out[f"{kind}_objects"] = (objs - objs0) / FANOUT_CALLS
    finally:
        PROBE.clear()
    return out


PROBE: list[Callable[[], None]] = []
"""Set only while :func:`_in_flight_memory` measures: the fan-out tools call it as they
start (an empty-list test otherwise, the same on both sides)."""


async def _bare_fanout_trio(tool: Callable[[], Any]) -> float:
    """The floor: 1,000 bare calls of the tool's body (``trio.sleep(0.01)``, return
    ``"ok"``) as tasks of one nursery, results collected: 10 ms plus Trio's dispatch."""
    import trio

    results: list[str | None] = [None] * FANOUT_CALLS

    async def one(i: int) -> None:
        results[i] = await tool()

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(FANOUT_CALLS):
            nursery.start_soon(one, i)
    elapsed = (time.perf_counter() - t0) * 1e3
    assert results.count("ok") == FANOUT_CALLS
    return elapsed


async def _bare_cancel_trio() -> float:
    """A bare cancel scope around a 5 s sleep, cancelled at 100 ms: time to unwind."""
    import trio

    fired: list[float] = []
    with trio.CancelScope() as scope:

        async def later() -> None:
            await trio.sleep(CANCEL_AFTER_S)
            fired.append(time.perf_counter())
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            await trio.sleep(CANCEL_TOOL_SLEEP_S)
    return (time.perf_counter() - fired[0]) * 1e3


# ---------------------------------------------------------------------------
# Peer (toolnexus 0.21.0, asyncio) - black-box use of its public API
# ---------------------------------------------------------------------------


def peer(
    scenario: str, runs: int, warmup: int, cold: bool, floor: bool, memory: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    import asyncio

    import toolnexus

    import_ms = (time.perf_counter() - started) * 1e3

    async def get_weather(city: str) -> str:
        return f"Sunny, 22C in {city}"

    async def add(a: float, b: float) -> str:
        return str(a + b)

    async def wait(**_: Any) -> str:
        if PROBE:
            PROBE[0]()
        await asyncio.sleep(FANOUT_SLEEP_S)
        return "ok"

    state = {"alive": 0, "completed": 0}

    async def sleep(**_: Any) -> str:
        state["alive"] += 1
        try:
            await asyncio.sleep(CANCEL_TOOL_SLEEP_S)
            state["completed"] += 1
        finally:
            state["alive"] -= 1
        return "slept"

    def call(i: str, n: str, a: dict[str, Any]) -> dict[str, Any]:
        return {"id": i, "name": n, "arguments": a}

    first = {
        "overhead": {"tool_calls": [call(*c) for c in SPEC_CALLS]},
        "fanout": None,  # built on every request, as ours
        "cancel": {"tool_calls": [call("c0", "sleep", {})]},
    }[scenario]
    final = {"content": FINAL}

    def generate(request: dict[str, Any]) -> dict[str, Any]:
        if _has_tool_message(request["messages"]):
            return final
        if first is None:
            return {"tool_calls": [call(f"c{i}", "wait", {}) for i in range(FANOUT_CALLS)]}
        return first

    empty = {"type": "object", "properties": {}}
    tools = {
        "overhead": [
            toolnexus.define_tool(
                get_weather, name="get_weather", description="Weather", input_schema=WEATHER_SCHEMA
            ),
            toolnexus.define_tool(add, name="add", description="Add", input_schema=ADD_SCHEMA),
        ],
        "fanout": [
            toolnexus.define_tool(wait, name="wait", description="Waits", input_schema=empty)
        ],
        "cancel": [
            toolnexus.define_tool(sleep, name="sleep", description="Sleeps", input_schema=empty)
        ],
    }[scenario]

    async def gather_floor() -> float:
        """The asyncio floor, in the peer's own idiom: 1,000 bare tool coroutines gathered."""
        t0 = time.perf_counter()
        results = await asyncio.gather(*(wait() for _ in range(FANOUT_CALLS)))
        elapsed = (time.perf_counter() - t0) * 1e3
        assert results.count("ok") == FANOUT_CALLS
        return elapsed

    async def taskgroup_floor() -> float:
        """The same with ``asyncio.TaskGroup`` (reported beside the gather floor)."""
        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(wait()) for _ in range(FANOUT_CALLS)]
        results = [t.result() for t in tasks]
        elapsed = (time.perf_counter() - t0) * 1e3
        assert results.count("ok") == FANOUT_CALLS
        return elapsed

    async def main() -> dict[str, Any]:
        client = toolnexus.create_in_process_client(model="scripted", generate=generate)
        out: dict[str, Any] = {}
        toolkit = await toolnexus.create_toolkit(extra_tools=tools, builtins=False)
        async with toolkit:

            async def library(expect: int) -> float:
                t0 = time.perf_counter()
                result = await client.run(QUESTION, toolkit)
                elapsed = (time.perf_counter() - t0) * 1e3
                assert result.text == FINAL, result.text
                assert len(result.tool_calls) == expect
                return elapsed

            if scenario == "fanout" and cold:
                out["import_ms"] = import_ms
                with GcTimer() as gc_timer:
                    out["cold_ms"] = await (gather_floor() if floor else library(FANOUT_CALLS))
                out["cold_gc_ms"], out["cold_gc_full"] = gc_timer.ms, gc_timer.full
            elif scenario == "fanout" and memory:

                async def bare(tool: Callable[[], Any]) -> float:
                    await asyncio.gather(*(tool() for _ in range(FANOUT_CALLS)))
                    return 0.0

                out |= await _in_flight_memory(lambda: client.run(QUESTION, toolkit), bare, wait)
            elif scenario == "fanout":
                for _ in range(warmup):
                    await library(FANOUT_CALLS)
                    await gather_floor()
                    await taskgroup_floor()

                async def library_run() -> float:
                    return await library(FANOUT_CALLS)

                steps = {
                    "samples": library_run,
                    "limit_ms": gather_floor,
                    "limit_taskgroup_ms": taskgroup_floor,
                }
                out |= await _alternate(runs, steps, collect=False)
            elif scenario == "overhead":
                for _ in range(warmup):
                    await client.run(QUESTION, toolkit)
                gc.collect()
                out["samples"] = [await library(2) for _ in range(runs)]
            else:
                out["samples"] = samples = []
                out["alive_after"] = alive = []
                out["outcome"] = outcomes = []
                for _ in range(runs):
                    event = asyncio.Event()
                    fired: list[float] = []

                    def fire(event: asyncio.Event = event, fired: list = fired) -> None:
                        fired.append(time.perf_counter())
                        event.set()

                    asyncio.get_running_loop().call_later(CANCEL_AFTER_S, fire)
                    try:
                        result = await client.run(QUESTION, toolkit, cancel=event)
                        outcomes.append(f"returned status={getattr(result, 'status', '?')}")
                    except Exception as exc:  # the peer raises RunCancelled
                        outcomes.append(f"raised {type(exc).__name__}")
                    returned = time.perf_counter()
                    others = asyncio.all_tasks() - {asyncio.current_task()}
                    alive.append(max(state["alive"], len(others)))
                    samples.append((returned - fired[0]) * 1e3)
                    if others:  # let a leaked task finish before the next run
                        await asyncio.wait(others)
                out["tool_completed"] = state["completed"]
        return out

    result = asyncio.run(main())
    result["peak_rss_kib"] = peak_rss_kib()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", choices=["overhead", "fanout", "cancel"])
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--cold", action="store_true", help="fanout: time the first run only")
    parser.add_argument("--floor", action="store_true", help="with --cold: the bare floor")
    parser.add_argument(
        "--memory", action="store_true", help="fanout: bytes and objects per in-flight call"
    )
    args = parser.parse_args()
    if (args.cold or args.floor) and args.scenario != "fanout":
        parser.error("--cold and --floor apply to the fanout scenario")
    if args.memory and (args.cold or args.scenario != "fanout"):
        parser.error("--memory applies to the warm fanout scenario")
    if args.floor and not args.cold:
        parser.error("--floor needs --cold (warm runs measure the floor anyway)")
    fn = ours if args.side == "ours" else peer
    out = fn(args.scenario, args.runs, args.warmup, args.cold, args.floor, args.memory)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
