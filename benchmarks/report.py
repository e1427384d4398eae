"""Turn the children's raw JSON into rows, a table, ``latest.json``, the docs page and a chart.

The rows and their types are :mod:`benchmarks.rows` (the scenarios build their rows
from it, without importing this module). A row's ``met`` is always computed from the
measured numbers and the row's ``Target``; nothing is typed in.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import textwrap
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.a2a import SCENARIO_TEXT as A2A_SCENARIO_TEXT
from benchmarks.agent import FANOUT_SLEEP_S
from benchmarks.agents_runtime import SCENARIO_TEXT as AGENTS_SCENARIO_TEXT
from benchmarks.agui import SCENARIO_TEXT as AGUI_SCENARIO_TEXT
from benchmarks.coldstart import SCENARIO_TEXT as COLDSTART_SCENARIO_TEXT
from benchmarks.compaction import SCENARIO_TEXT as COMPACTION_SCENARIO_TEXT
from benchmarks.conversations import SCENARIO_TEXT as CONVERSATIONS_SCENARIO_TEXT
from benchmarks.durable import SCENARIO_TEXT as DURABLE_SCENARIO_TEXT
from benchmarks.hedge import SCENARIO_TEXT as HEDGE_SCENARIO_TEXT
from benchmarks.http_suite import SCENARIO_TEXT as HTTP_SCENARIO_TEXT
from benchmarks.http_suite import http_rows
from benchmarks.mcp import SCENARIO_TEXT as MCP_SCENARIO_TEXT
from benchmarks.mcp_gateway import SCENARIO_TEXT as GATEWAY_MCP_SCENARIO_TEXT
from benchmarks.rows import Config, Row, Stats, Target
from benchmarks.rows import flat as _flat
from benchmarks.stores import SCENARIO_TEXT as STORES_SCENARIO_TEXT
from benchmarks.tracing import SCENARIO_TEXT as TRACING_SCENARIO_TEXT
from benchmarks.xframework import SCENARIO_TEXT as XFRAMEWORK_SCENARIO_TEXT

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"
DOC = ROOT / "docs" / "performance.rst"
CHART = ROOT / "docs" / "_static" / "bench.png"
CHART_REL = "_static/bench.png"

FANOUT_SLEEP_MS = FANOUT_SLEEP_S * 1000


# ---------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _paired(lib: list[float], floor: list[float]) -> list[float]:
    """Library minus floor, run by run (both lists in measurement order)."""
    return [a - b for a, b in zip(lib, floor, strict=True)]


def _per_run(runs: list[dict[str, Any]], lib: str, floor: str) -> list[float]:
    """Paired overheads over every process: each run's floor was measured beside it."""
    out: list[float] = []
    for run in runs:
        out.extend(_paired(run[lib], run[floor]))
    return out


def fanout_floors(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, float]:
    """The medians the fan-out rows and the docs' explanation quote (ms)."""
    o, p = raw["fanout"]["ours"], raw["fanout"]["peer"]
    out = {
        "ours": _median(_flat(o, "samples")),
        "peer": _median(_flat(p, "samples")),
        "trio": _median(_flat(o, "limit_ms")),
        "asyncio": _median(_flat(p, "limit_ms")),
        "taskgroup": _median(_flat(p, "limit_taskgroup_ms")),
    }
    cold, cold_floor = raw.get("fanout_cold", {}), raw.get("fanout_cold_floor", {})
    for side in ("ours", "peer") if cold and cold_floor else ():
        # The GC time a cold run spends beyond its floor's, paired by round.
        extra = _paired(_flat(cold[side], "cold_gc_ms"), _flat(cold_floor[side], "cold_gc_ms"))
        out[f"cold_gc_{side}"] = _median(extra)
    return out


def _gc_notes(o: list[dict[str, Any]], p: list[dict[str, Any]]) -> list[str]:
    """The cyclic GC's share of the warm runs (the collector is on, as for a user)."""
    if not all("samples_gc" in run for run in (*o, *p)):
        return []
    gc_o, gc_p = _flat(o, "samples_gc"), _flat(p, "samples_gc")
    heavy_o = sum(ms >= 5 for ms in gc_o)
    heavy_p = sum(ms >= 5 for ms in gc_p)
    return [
        f"GC on and nothing collected before a run (a user's runs pay for their own "
        f"garbage): GC time per run, median ours {_median(gc_o):.1f} ms, peer "
        f"{_median(gc_p):.1f} ms; runs with 5 ms or more of it (a full collection): "
        f"ours {heavy_o}/{len(gc_o)}, peer {heavy_p}/{len(gc_p)}"
    ]


def _fanout_rows(raw: dict[str, dict[str, list[dict[str, Any]]]], cfg: Config) -> list[Row]:
    o, p = raw["fanout"]["ours"], raw["fanout"]["peer"]
    f = fanout_floors(raw)
    per_task = {k: (f[k] - FANOUT_SLEEP_MS) for k in ("trio", "asyncio")}  # ms per 1,000
    cpu_o = _median(_per_run(o, "samples_cpu", "limit_ms_cpu"))
    cpu_p = _median(_per_run(p, "samples_cpu", "limit_ms_cpu"))
    floors = (
        f"the runtimes alone, the same 1,000 tool coroutines with no framework: bare Trio "
        f"(one nursery) {f['trio']:.1f} ms, bare asyncio (asyncio.gather, the peer's own "
        f"primitive) {f['asyncio']:.1f} ms; asyncio.TaskGroup {f['taskgroup']:.1f} ms"
    )
    rows = [
        Row(
            "2. Fan-out: 1,000 tool calls of 10 ms (raw wall time)",
            "wall time per run",
            "ms",
            Stats.of(_flat(o, "samples")),
            Stats.of(_flat(p, "samples")),
            floors,
            None,
            [
                f"N = {cfg.fanout_runs} runs per process after {cfg.fanout_warmup} warm-up "
                f"runs, {cfg.agent_rounds} processes per side; each run alternates with a run "
                "of its runtime's floor in the same process",
                f"the former target (raw ratio <= 1) measures Trio more than the library: "
                f"bare Trio alone takes {f['trio']:.1f} ms against the peer's whole run "
                f"{f['peer']:.1f} ms; beyond the 10 ms sleep that is about "
                f"{per_task['trio']:.1f} µs per task on Trio and "
                f"{per_task['asyncio']:.1f} µs on asyncio",
            ],
        ),
        Row(
            "2. Fan-out overhead (over the runtime floor)",
            "run minus its runtime's floor, paired",
            "ms",
            Stats.of(_per_run(o, "samples", "limit_ms")),
            Stats.of(_per_run(p, "samples", "limit_ms")),
            "0 ms: a framework that adds nothing to its runtime; " + floors,
            Target("ratio", "<=", 0.75),
            [
                "ours minus bare Trio, the peer minus bare asyncio, each run paired with "
                "the floor run measured next to it in the same process",
                f"medians: ours {f['ours']:.1f} ms over a {f['trio']:.1f} ms floor, peer "
                f"{f['peer']:.1f} ms over a {f['asyncio']:.1f} ms floor",
                f"the same in process CPU time (steadier than wall time on a shared machine; "
                f"the peer's includes its worker thread): ours {cpu_o:.2f} ms, peer "
                f"{cpu_p:.2f} ms, ratio {_ratio(cpu_o / cpu_p) if cpu_p > 0 else 'n/a'}",
                *_gc_notes(o, p),
            ],
        ),
    ]
    cold_o, cold_p = raw.get("fanout_cold", {}), raw.get("fanout_cold_floor", {})
    if cold_o and cold_p:
        lib_o, lib_p = _flat(cold_o["ours"], "cold_ms"), _flat(cold_o["peer"], "cold_ms")
        fl_o, fl_p = _flat(cold_p["ours"], "cold_ms"), _flat(cold_p["peer"], "cold_ms")

        def gc_note(side: str) -> str:
            lib, fl = cold_o[side], cold_p[side]
            without_gc = _paired(
                _paired(_flat(lib, "cold_ms"), _flat(lib, "cold_gc_ms")),
                _paired(_flat(fl, "cold_ms"), _flat(fl, "cold_gc_ms")),
            )
            return (
                f"{side}: GC time in the timed run {_median(_flat(lib, 'cold_gc_ms')):.1f} ms "
                f"(floor {_median(_flat(fl, 'cold_gc_ms')):.1f} ms), a full collection in "
                f"{sum(_flat(lib, 'cold_gc_full')):g}/{len(lib)} runs "
                f"(floor {sum(_flat(fl, 'cold_gc_full')):g}/{len(fl)}); the cold overhead "
                f"without GC time is {_median(without_gc):.1f} ms"
            )

        rounds = f"{cfg.fanout_cold_rounds} fresh processes per side and per kind"
        rows += [
            Row(
                "2. Fan-out cold first run (raw wall time)",
                "first run of a fresh process",
                "ms",
                Stats.of(lib_o),
                Stats.of(lib_p),
                f"the first run of the bare floor in a fresh process: Trio "
                f"{_median(fl_o):.1f} ms, asyncio {_median(fl_p):.1f} ms",
                Target("ratio", "<=", 1.5),
                [
                    f"{rounds}; no warm-up: imports, tools and client are set up, then "
                    "the first run is timed (imports and set-up excluded, on both sides)"
                ],
            ),
            Row(
                "2. Fan-out cold overhead (over the cold floor)",
                "cold run minus cold floor, paired by round",
                "ms",
                Stats.of(_paired(lib_o, fl_o)),
                Stats.of(_paired(lib_p, fl_p)),
                "0 ms; the floor's first run has its own fresh process (a cold floor cannot "
                "share one with a cold library run), with the same imports and setup",
                None,
                [
                    f"{rounds}, the library's and the floor's processes alternating",
                    gc_note("ours"),
                    gc_note("peer"),
                    "whether the first full collection of a process's import-time heap "
                    "lands in the timed run depends on what that process imported before",
                ],
            ),
        ]
    imports = {side: _flat(cold_o[side], "import_ms") for side in ("ours", "peer")}
    if cold_o and all("import_ms" in run for side in imports for run in cold_o[side]):
        rows.append(
            Row(
                "2. Import time (fresh process)",
                "the library's imports, first thing in a fresh process",
                "ms",
                Stats.of(imports["ours"]),
                Stats.of(imports["peer"]),
                "none measured: what the library imports at start-up",
                None,
                [
                    "ours: trio and toolnexus_trio's facade; the peer: asyncio and "
                    "toolnexus; timed in the cold fan-out's processes (both kinds), "
                    "reported apart from the cold run, which excludes it"
                ],
            )
        )
    mem = raw.get("fanout_memory", {})
    if mem.get("ours") and mem.get("peer"):
        mo, mp = mem["ours"], mem["peer"]
        fl_bytes = {k: _median(_flat(v, "floor_bytes")) for k, v in mem.items()}
        objs = {k: _median(_flat(v, "lib_objects")) for k, v in mem.items()}
        fl_objs = {k: _median(_flat(v, "floor_objects")) for k, v in mem.items()}
        rows.append(
            Row(
                "2. Fan-out memory per in-flight tool call (tracemalloc)",
                "traced bytes with 1,000 calls in flight, per call",
                "B",
                Stats.of(_flat(mo, "lib_bytes")),
                Stats.of(_flat(mp, "lib_bytes")),
                f"the bare floor's tasks: Trio {fl_bytes['ours']:.0f} B, asyncio "
                f"{fl_bytes['peer']:.0f} B per task",
                None,
                [
                    "tracemalloc's traced memory when the 1,000th call starts, minus before "
                    "the run, over 1,000; after one warm run, the collector off while "
                    "measuring; the same for the bare floor",
                    f"GC-tracked objects per in-flight call: ours {objs['ours']:.1f} (bare "
                    f"Trio {fl_objs['ours']:.1f}), peer {objs['peer']:.1f} (bare asyncio "
                    f"{fl_objs['peer']:.1f}): what the cyclic GC scans, and what moves a "
                    "fan-out's objects into the old generation (a full collection runs when "
                    "those pass a quarter of the long-lived heap)",
                    "what bounds it: the runtime's task (the floor) plus, per call, the "
                    "model's call object, the loop's call record and transcript entry, "
                    "the tool's context and the loop's one coroutine",
                ],
            )
        )
    rows.append(
        Row(
            "2. Fan-out: peak RSS",
            "peak RSS of the process",
            "MiB",
            Stats.of([k / 1024 for k in _flat(o, "peak_rss_kib")]),
            Stats.of([k / 1024 for k in _flat(p, "peak_rss_kib")]),
            "the interpreter plus each library's imports; informational",
            None,
        )
    )
    return rows


def build_rows(raw: dict[str, dict[str, list[dict[str, Any]]]], cfg: Config) -> list[Row]:
    """One row per reported metric, in scenario order, for whatever was run."""
    rows: list[Row] = []
    if "overhead" in raw:
        o, p = raw["overhead"]["ours"], raw["overhead"]["peer"]
        rows.append(
            Row(
                "1. Loop overhead (SPEC scenario)",
                "time per run, median",
                "ms",
                Stats.of(_flat(o, "samples")),
                Stats.of(_flat(p, "samples")),
                f"the same work with no framework (2 generate calls + 2 tools in a Trio "
                f"nursery): {_median(_flat(o, 'limit_ms')) * 1000:.1f} µs",
                Target("ratio", "<=", 0.25),  # issue 24 (0.5 before)
                [
                    f"N = {cfg.overhead_runs} runs per process after {cfg.overhead_warmup} "
                    f"warm-up runs, {cfg.agent_rounds} processes per side"
                ],
            )
        )
    if "fanout" in raw:
        rows.extend(_fanout_rows(raw, cfg))
    if "cancel" in raw:
        o, p = raw["cancel"]["ours"], raw["cancel"]["peer"]
        alive_o, alive_p = _flat(o, "alive_after"), _flat(p, "alive_after")
        done_o, done_p = sum(_flat(o, "tool_completed")), sum(_flat(p, "tool_completed"))
        rows.append(
            Row(
                "3. Cancel latency (5 s tool, cancel at 100 ms)",
                "cancel -> run returns",
                "ms",
                Stats.of(_flat(o, "samples")),
                Stats.of(_flat(p, "samples")),
                f"a bare Trio cancel scope unwinds in {_median(_flat(o, 'limit_ms')):.2f} ms",
                Target(
                    "ours",
                    "<=",
                    10.0,
                    stat="p95",
                    unit="ms",
                    checks=(("no task alive after run returns", max(alive_o) == 0),),
                ),
                [
                    f"tasks alive after run returned: ours max {max(alive_o):g}, "
                    f"peer max {max(alive_p):g}",
                    f"tool ran to completion despite the cancel: ours {done_o:g}/{len(alive_o)}, "
                    f"peer {done_p:g}/{len(alive_p)}",
                    "peer outcome: " + ", ".join(sorted(set(_flat(p, "outcome")))),
                ],
            )
        )
    echo = raw.get("echo", {}).get("ours", [])
    echo_tput = _median(_flat(echo, "throughput")) if echo else math.nan
    echo_rtt = _median(_flat(echo, "rtt_us")) if echo else math.nan
    stream = raw.get("stream", {}).get("ours", [])
    stream_rate = _median(_flat(stream, "per_second")) if stream else math.nan
    echo_cpu = _median(_flat(echo, "host_cpu_us_per_op")) if echo else math.nan
    stream_cpu = _median(_flat(stream, "host_cpu_us_per_op")) if stream else math.nan

    def at_least(o: list[dict[str, Any]], p: list[dict[str, Any]], key: str, x: float) -> bool:
        return _median(_flat(o, key)) >= x * _median(_flat(p, key))

    def cpu_note(o: list[dict[str, Any]], p: list[dict[str, Any]], what: str) -> str:
        return (
            f"host CPU time per {what} (median; steadier than wall time here): ours "
            f"{_median(_flat(o, 'host_cpu_us_per_op')):.1f} µs, peer "
            f"{_median(_flat(p, 'host_cpu_us_per_op')):.1f} µs"
        )

    if "invoke" in raw:
        o, p = raw["invoke"]["ours"], raw["invoke"]["peer"]
        rows.append(
            Row(
                "4. Invoke: sequential round trip",
                "round trip",
                "µs",
                Stats.of(_flat(o, "rtt_us")),
                Stats.of(_flat(p, "rtt_us")),
                f"raw WebSocket echo on our stack, same load generator: {echo_rtt:.0f} µs",
                Target("limit", "<=", 1.2),
                [
                    "what bounds it (callgrind on the host): each invocation runs in its own "
                    "Trio task inside its own cancel scope, about half of the ~174k "
                    "instructions per invoke; request to answer takes one scheduler pass "
                    "to start the handler's task and one hop to the writer task, which an "
                    "echo does not pay. Closing the gap would mean running handlers inside "
                    "the read loop or writing from the handler's task, which the design "
                    "forbids (the read loop never awaits user code; one writer task owns the "
                    "socket)",
                ],
                limit_value=echo_rtt,
            )
        )
        rows.append(
            Row(
                "4. Invoke: throughput, 64 in flight",
                "invokes per second",
                "1/s",
                Stats.of(_flat(o, "throughput")),
                Stats.of(_flat(p, "throughput")),
                f"raw WebSocket echo on our stack, same load generator: {echo_tput:,.0f} echoes/s",
                Target(
                    "limit",
                    ">=",
                    0.6,
                    checks=(("ratio >= 2.5", at_least(o, p, "throughput", 2.5)),),
                ),
                [
                    cpu_note(o, p, "invoke"),
                    f"host CPU time per message of the raw echo: {echo_cpu:.1f} µs",
                ],
                higher_is_better=True,
                limit_value=echo_tput,
            )
        )
    if "stubborn" in raw:
        o, p = raw["stubborn"]["ours"], raw["stubborn"]["peer"]
        codes_o, codes_p = _flat(o, "codes"), _flat(p, "codes")
        rows.append(
            Row(
                "5. Stubborn cancel (handler ignores cancellation)",
                "actions/cancel -> -32001",
                "ms",
                Stats.of(_flat(o, "cancel_ms")),
                Stats.of(_flat(p, "cancel_ms")),
                f"one wire round trip: {echo_rtt / 1000:.2f} ms (raw echo)",
                Target(
                    "ours",
                    "<=",
                    1.0,
                    stat="p95",
                    unit="ms",
                    checks=(("every answer is -32001", set(codes_o) == {-32001}),),
                ),
                [
                    f"answer codes: ours {sorted(set(codes_o))}, peer {sorted(set(codes_p))}",
                    "the handler holds for 2 s after the cancel",
                ],
                limit_value=echo_rtt / 1000,
            )
        )
    if "scale" in raw:
        o, p = raw["scale"]["ours"], raw["scale"]["peer"]
        lost_o, lost_p = sum(_flat(o, "lost")), sum(_flat(p, "lost"))
        n = cfg.scale_n
        rows.append(
            Row(
                f"6. Scale: {n:,} concurrent invocations",
                "time until all answered",
                "s",
                Stats.of(_flat(o, "seconds")),
                Stats.of(_flat(p, "seconds")),
                f"~{2 * n:,} frame round trips at the raw echo rate: {2 * n / echo_tput:.2f} s",
                Target("ratio", "<=", 0.5, checks=(("none lost", lost_o == 0),)),
                [
                    f"lost: ours {lost_o:g}, peer {lost_p:g} (every invocation reported progress, "
                    "then was released and answered)",
                    f"time until all {n:,} were in flight (median): ours "
                    f"{_median(_flat(o, 'seconds_to_all_in_flight')):.2f} s, peer "
                    f"{_median(_flat(p, 'seconds_to_all_in_flight')):.2f} s",
                    cpu_note(o, p, "invocation"),
                ],
                limit_value=2 * n / echo_tput,
            )
        )
        rows.append(
            Row(
                "6. Scale: memory per in-flight invocation",
                "host peak RSS growth / n",
                "bytes",
                Stats.of(_flat(o, "bytes_per_inflight")),
                Stats.of(_flat(p, "bytes_per_inflight")),
                "no hard floor; an invoke frame plus its answer are ~250 bytes",
                Target("ratio", "<=", 0.5),
                [
                    "what bounds it (tracemalloc on the host): of about 3.4 KB per in-flight "
                    "invocation, the invocation's Trio task is about 2 KB and its cancel "
                    "scope about 0.6 KB; both are what makes a handler cancellable on its "
                    "own, so they stay",
                ],
            )
        )
    if "storm" in raw:
        o, p = raw["storm"]["ours"], raw["storm"]["peer"]
        viol_o = sum(_flat(o, "ceiling_violations")) + sum(_flat(o, "out_of_range"))
        viol_p = sum(_flat(p, "ceiling_violations")) + sum(_flat(p, "out_of_range"))
        short_o = sum(cfg.storm_n - r for r in _flat(o, "received"))
        rows.append(
            Row(
                f"7. Progress storm ({cfg.storm_n:,} updates)",
                "notifications per second",
                "1/s",
                Stats.of(_flat(o, "per_second")),
                Stats.of(_flat(p, "per_second")),
                f"a raw one-way stream of progress-shaped frames on our stack, decoded by the "
                f"same load generator: {stream_rate:,.0f} frames/s",
                Target(
                    "limit",
                    ">=",
                    0.7,
                    checks=(
                        ("ratio >= 2.5", at_least(o, p, "per_second", 2.5)),
                        ("ceiling never violated on the wire", viol_o == 0),
                    ),
                ),
                [
                    f"percent decreases or out of range on the wire: ours {viol_o:g}, "
                    f"peer {viol_p:g} (every tenth update asks for 5 points less)",
                    f"updates missing: ours {short_o:g}",
                    cpu_note(o, p, "notification"),
                    f"host CPU time per frame of the raw stream: {stream_cpu:.1f} µs",
                ],
                higher_is_better=True,
                limit_value=stream_rate,
            )
        )
    rows += http_rows(raw, cfg)
    if any(key.startswith("builtins_") for key in raw):
        from benchmarks import builtins

        rows.extend(builtins.rows(raw))
    from benchmarks.mcp import mcp_rows  # scenario 12 (MCP) lives in its own module

    rows.extend(mcp_rows(raw))
    from benchmarks.mcp_gateway import gateway_mcp_rows  # scenario 13 (gateway --mcp)

    rows.extend(gateway_mcp_rows(raw))
    if any(key.startswith("compaction_") for key in raw):
        from benchmarks import compaction  # scenario 14 (compaction)

        rows.extend(compaction.rows(raw))
    if any(key.startswith("agents_") for key in raw):  # scenario 15 (sub-agent runtime)
        from benchmarks import agents_runtime

        rows.extend(agents_runtime.rows(raw))
    from benchmarks.a2a import a2a_rows  # scenario 16 (A2A)

    rows.extend(a2a_rows(raw))
    from benchmarks.xframework import xframework_rows  # scenario 17 (other frameworks)

    rows.extend(xframework_rows(raw))
    from benchmarks.stores import stores_rows  # scenario 18 (store scaling)

    rows.extend(stores_rows(raw))
    from benchmarks.hedge import rows as hedge_rows  # scenario 19 (hedged request)

    rows.extend(hedge_rows(raw))
    from benchmarks.agui import rows as agui_rows  # scenario 23 (the AG-UI endpoint)

    rows.extend(agui_rows(raw))
    from benchmarks.durable import rows as durable_rows  # scenario 20 (crash-durable runs)

    rows.extend(durable_rows(raw))
    from benchmarks.conversations import rows as conversations_rows  # scenario 21

    rows.extend(conversations_rows(raw))
    from benchmarks.tracing import rows as tracing_rows  # scenario 22 (tracing overhead)

    rows.extend(tracing_rows(raw))
    from benchmarks.coldstart import rows as coldstart_rows  # scenario 24 (cold start)

    rows.extend(coldstart_rows(raw))
    return rows


# ---------------------------------------------------------------------------


def _fmt(value: float) -> str:
    magnitude = abs(value)  # an overhead row's min can be negative
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}" if value >= 0.01 else f"{value:.1e}"


def _side(s: Stats) -> str:
    return f"{_fmt(s.median)} / {_fmt(s.p95)} / {_fmt(s.min)} / {_fmt(s.max)}"


NONE = "\u2014"  # an em dash: a lone "-" in a list-table cell renders as a bullet


def _to_limit(row: Row) -> str:
    return NONE if row.to_limit is None else f"{row.to_limit:.2f}"


def _met(row: Row) -> str:
    return {True: "met", False: "MISSED", None: NONE}[row.met]


def print_table(rows: list[Row]) -> None:
    """The table on stdout: median / p95 / min / max per side, ratio, target, met."""
    header = [
        "scenario",
        "unit",
        "ours med/p95/min/max",
        "peer med/p95/min/max",
        "ratio",
        "ours/limit",
        "target",
        "met",
    ]
    body = [
        [
            r.name,
            r.unit,
            _side(r.ours),
            _side(r.peer),
            _ratio(r.ratio),
            _to_limit(r),
            r.target.text() if r.target else NONE,
            _met(r),
        ]
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *body]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)))
    print()
    for r in rows:
        print(f"{r.name}: limit: {r.limit}")
        for note in r.notes:
            print(f"    {note}")


def machine_info() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"CPython {platform.python_version()}"
    )


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("toolnexus-trio", "toolnexus", "tesseron", "trio", "websockets", "httpx2"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _budget(row: Row) -> float | None:
    """A target row's measured value over its bound, oriented so that <= 1 meets it:
    value/bound for ``<=``, bound/value for ``>=`` (``None`` when not measurable)."""
    t = row.target
    if t is None:
        return None
    if t.subject == "limit":
        value = row.to_limit
    elif t.subject == "ours":
        value = getattr(row.ours, t.stat)
    else:
        return None
    if value is None or not math.isfinite(value):
        return None
    if t.op == "<=":
        return value / t.value if t.value > 0 else None
    return t.value / value if value > 0 else math.inf


def _chart_panels(rows: list[Row]) -> tuple[list[tuple[Row, float]], list[tuple[Row, float]]]:
    """The chart's two panels: rows judged against the peer (times better than it) and
    rows judged against a target or the physical limit (measured over the bound)."""
    peer: list[tuple[Row, float]] = []
    bound: list[tuple[Row, float]] = []
    for r in rows:
        t = r.target
        if t is None:
            continue
        if t.subject == "ratio":
            if r.peer.median > 0 and r.ours.median > 0:
                # Higher is better here: peer/ours for costs, ours/peer for rates.
                peer.append((r, r.ratio if r.higher_is_better else 1 / r.ratio))
        else:
            used = _budget(r)
            if used is not None:
                bound.append((r, used))
    return peer, bound


def _chart(rows: list[Row], path: Path = CHART) -> str | None:
    """Two panels of bars, one colour rule (met / missed); ``None`` without matplotlib.

    Top: rows with a ratio target, as times better than the peer. Bottom: rows whose
    target is a bound on our own figure or on our distance to the measured limit, as the
    measured value over that bound (a peer plays no part there).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return None
    peer, bound = _chart_panels(rows)
    panels = [p for p in (peer, bound) if p]
    if not panels:
        return None
    colour = {True: "tab:green", False: "tab:red"}

    def label(r: Row) -> str:
        return "\n".join(textwrap.wrap(r.short, width=44))

    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(11, 0.42 * sum(len(p) for p in panels) + 1.6 * len(panels) + 0.6),
        dpi=110,
        height_ratios=[len(p) + 1.5 for p in panels],
        squeeze=False,
    )
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        names = [label(r) for r, _ in panel]
        values = [max(v, 1e-3) for _, v in panel]
        is_peer = panel is peer
        base = 1.0
        ax.barh(
            names,
            [v - base for v in values],
            left=base,
            color=[colour[bool(r.met)] for r, _ in panel],
        )
        for (r, v), name in zip(panel, names, strict=True):
            t = r.target
            assert t is not None
            if is_peer:
                need = t.value if r.higher_is_better else 1 / t.value
                ax.plot([need, need], [name, name], marker="|", markersize=16, color="black")
                text = f"{v:,.0f}x" if v >= 100 else f"{v:.2f}x"
            else:
                figure = r.to_limit if t.subject == "limit" else getattr(r.ours, t.stat)
                unit = "" if t.subject == "limit" else f" {t.unit}".rstrip()
                what = "ours/limit" if t.subject == "limit" else f"{t.stat}"
                text = f"{what} {figure:.4g}{unit}, target {t.op} {t.value:g}{unit}"
            edge = max(v, base) if is_peer or v >= base else base
            ax.annotate(text, (edge, name), xytext=(5, 0), textcoords="offset points",
                        va="center", fontsize=8)  # fmt: skip
        low = min(min(values), 1.0)
        high = max(max(values), 1.0)
        if is_peer:
            low = min(low, *(1 / r.target.value for r, _ in panel if r.target))
        ax.set_xscale("log")
        # Room on the right for the value labels (the bound panel's are longer).
        ax.set_xlim(low / 2, high * (6 if is_peer else 60))
        ax.axvline(1.0, color="grey", linewidth=1)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=8)
        if is_peer:
            ax.set_title("Against the peer (toolnexus 0.21 / tesseron 0.2)", loc="left")
            ax.set_xlabel(
                "times better than the peer (log scale; 1x = parity; right is better; "
                "| = the target)"
            )
        else:
            ax.set_title("Against a target or the measured physical limit (no peer)", loc="left")
            ax.set_xlabel(
                "measured value / its bound (log scale; 1x = exactly the bound; "
                "left of 1x is within it)"
            )
    fig.legend(
        handles=[
            Patch(color=colour[True], label="met (the row's whole target holds)"),
            Patch(color=colour[False], label="missed"),
        ],
        loc="upper right",
        ncols=2,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")  # nothing cut at the edges
    plt.close(fig)
    return CHART_REL


def _rst_text(text: str) -> str:
    """*text* as plain reStructuredText: a glob's ``*`` is not emphasis, and a leading
    "1." is not an enumerated list."""
    text = text.replace("\\", "\\\\").replace("*", "\\*")
    return re.sub(r"^(\d+)\.", r"\1\\.", text)


def _unit(scenario: dict[str, Any]) -> str:
    """The unit of a scenario in its ``latest.json`` form (``"metric (unit)"``)."""
    return str(scenario["metric"]).rsplit(" (", 1)[-1].rstrip(")")


def _rst_table(scenarios: list[dict[str, Any]]) -> list[str]:
    """The results as reStructuredText, one number per cell: the medians, ratio and
    target in the first table, each side's spread (p95, min, max) in a second one.

    *scenarios* are rows in their ``latest.json`` form (:meth:`Row.as_dict`), so the page
    can be rebuilt from a results file (``python -m benchmarks.report``)."""
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 34 6 10 10 8 8 16 6",
        "",
        "   * - Scenario",
        "     - Unit",
        "     - Ours (median)",
        "     - Peer (median)",
        "     - Ratio ours/peer",
        "     - Ours / limit",
        "     - Target",
        "     - Met",
    ]
    for sc in scenarios:
        to_limit = sc.get("ours_to_limit")
        met = {True: "met", False: "MISSED", None: NONE}[sc.get("met")]
        lines += [
            f"   * - {_rst_text(sc['name'])}",
            f"     - {_unit(sc)}",
            f"     - {_fmt(sc['ours']['median'])}",
            f"     - {_fmt(sc['peer']['median'])}",
            f"     - {_ratio(sc['ratio'])}",
            f"     - {NONE if to_limit is None else f'{to_limit:.2f}'}",
            f"     - {sc.get('target') or '(reported)'}",
            f"     - {met}",
        ]
    lines += [
        "",
        "The spread of each side (same unit):",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 34 6 10 10 10 10 10 10",
        "",
        "   * - Scenario",
        "     - Unit",
        "     - Ours p95",
        "     - Ours min",
        "     - Ours max",
        "     - Peer p95",
        "     - Peer min",
        "     - Peer max",
    ]
    for sc in scenarios:
        lines += [f"   * - {_rst_text(sc['name'])}", f"     - {_unit(sc)}"]
        for side in ("ours", "peer"):
            lines += [f"     - {_fmt(sc[side][stat])}" for stat in ("p95", "min", "max")]
    return lines


def refresh_tables(results: Path = RESULTS, doc: Path = DOC) -> None:
    """Rewrite the results tables of *doc* from *results* (a ``latest.json``), leaving
    the rest of the page as the run wrote it: for a change of the tables' layout,
    without measuring again."""
    scenarios = json.loads(results.read_text(encoding="utf-8"))["scenarios"]
    text = doc.read_text(encoding="utf-8")
    head, rest = text.split("\n.. list-table::\n", 1)
    ends = [rest.index(m) for m in ("\n**Targets missed", "\nEvery target was met") if m in rest]
    tail = rest[min(ends) :]
    doc.write_text(head + "\n" + "\n".join(_rst_table(scenarios)) + "\n" + tail, encoding="utf-8")


def write_outputs(
    rows: list[Row],
    raw: dict[str, Any],
    cfg: Config,
    command: str,
    seconds: float,
) -> None:
    """Write ``latest.json``, the chart (if possible) and ``docs/performance.rst``."""
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_info()
    vers = versions()
    document = {
        "machine": machine,
        "date": date,
        "versions": vers,
        "command": command,
        "seconds": round(seconds, 1),
        "scenarios": [r.as_dict() for r in rows],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    chart = _chart(rows)
    if chart is None and CHART.exists():
        CHART.unlink()  # never show a chart from an older run
    fanout = fanout_floors(raw) if "fanout" in raw else None
    DOC.write_text(_rst(rows, machine, vers, date, command, chart, fanout), encoding="utf-8")
    print(
        f"\nwrote {RESULTS.relative_to(ROOT)}, {DOC.relative_to(ROOT)}"
        + (f", {CHART.relative_to(ROOT)}" if chart else " (no chart: matplotlib is not installed)"),
        file=sys.stderr,
    )


def _fanout_section(rows: list[Row], f: dict[str, float]) -> list[str]:
    """Why scenario 2 is judged on overhead, with this run's numbers."""
    by_name = {r.name: r for r in rows}
    warm = by_name["2. Fan-out overhead (over the runtime floor)"]
    cold = by_name.get("2. Fan-out cold overhead (over the cold floor)")
    if f["trio"] >= f["peer"]:
        verdict = "No library built on Trio can meet that"
        versus = f"already more than the peer's whole run, framework included ({f['peer']:.1f} ms)"
    else:
        verdict = "That target measures the runtime more than the library"
        versus = (
            f"{f['trio'] / f['peer']:.0%} of the peer's whole run ({f['peer']:.1f} ms), which "
            f"would leave {f['peer'] - f['trio']:.1f} ms for all of a framework's work"
        )
    why = (
        "Scenario 2 was first judged on the raw ratio of wall times (ours/peer <= 1). "
        f"{verdict}: 1,000 bare ``trio.sleep(0.01)`` tasks in one "
        f"nursery, with no framework at all, take {f['trio']:.1f} ms here, {versus}; the "
        f"same bare tasks on asyncio take {f['asyncio']:.1f} ms. The difference is Trio's "
        f"per-task cost: beyond the 10 ms sleep, about {f['trio'] - FANOUT_SLEEP_MS:.1f} µs "
        f"per task against {f['asyncio'] - FANOUT_SLEEP_MS:.1f} µs on asyncio (a Trio sleep "
        "enters a cancel scope with a deadline and ends when that deadline cancels it, a "
        "``Cancelled`` raised and caught; an asyncio sleep is a timer on a future). Any "
        "Trio library pays that, whatever it does."
    )
    target = (
        "So the raw ratio is still reported, without a target, and the target is what a "
        "library controls: its **framework overhead over its own runtime's floor**, ours "
        "minus bare Trio and the peer minus bare asyncio (``asyncio.gather`` of the same "
        "tool coroutines, the peer's own primitive; ``asyncio.TaskGroup`` is measured too). "
        "Each floor runs in the same process as its library, alternating with the "
        "library's runs, and each run is paired with the floor run next to it. Each side "
        "is used as a user writes it: the model's ``generate`` builds its 1,000 calls on "
        "every request, the tool is ``define_tool(name, description, None, fn)``, the "
        "garbage collector is on and nothing is collected before a timed run (each run "
        "pays for the collections its garbage makes due, full ones included), and the only "
        "warm-up is the process's first run. Target: "
        "overhead ratio ours/peer <= 0.75. The cold first run (a fresh process, no "
        "warm-up, imports and toolkit set-up excluded), which a user sees once per "
        "process, has its own target, ours/peer <= 1.5, and is also reported against "
        "the first run of the floor in a fresh process; import time is reported apart. "
        "Memory per in-flight call is tracemalloc's, with 1,000 calls in flight."
    )
    now = (
        f"In this run the overhead is {warm.ours.median:.2f} ms for ours and "
        f"{warm.peer.median:.2f} ms for the peer (ratio {_ratio(warm.ratio)}, target "
        f"{_met(warm)})"
    )
    if cold is not None and "cold_gc_ours" in f:
        now += (
            f"; cold, {cold.ours.median:.1f} ms and {cold.peer.median:.1f} ms (ratio "
            f"{_ratio(cold.ratio)}), of which the cyclic GC accounts for "
            f"{f['cold_gc_ours']:.1f} ms and {f['cold_gc_peer']:.1f} ms beyond the cold "
            "floors' own GC time (see the notes below)"
        )
    title = "Fan-out: the target is the overhead over the runtime"
    out = [title, "-" * len(title), ""]
    for paragraph in (why, target, now + "."):
        out += [*textwrap.wrap(paragraph, width=88, break_on_hyphens=False), ""]
    return out


def _rst(
    rows: list[Row],
    machine: str,
    vers: dict[str, str],
    date: str,
    command: str,
    chart: str | None,
    fanout: dict[str, float] | None = None,
) -> str:
    missed = [_rst_text(r.name) for r in rows if r.met is False]
    out = [
        ".. This page is generated by ``nox -s bench`` (benchmarks/report.py); do not edit.",
        "",
        "Performance",
        "===========",
        "",
        "toolnexus-trio is measured side by side with what users would pick instead, in one",
        "run on one machine: the in-process agent loop against ``toolnexus`` 0.21.0 (the",
        "asyncio port of the same contract) and the Tesseron host against ``tesseron`` 0.2.0",
        "(the asyncio host). Absolute times on a shared machine are noisy, so the figures",
        "that count are the **ratios** ours/peer of the medians. Each side of each scenario",
        "runs in its own process, ours and the peer alternately, for several rounds.",
        "Scenarios 4-7 use one load-generator process (asyncio with a minimal WebSocket",
        "client, ``benchmarks/loadgen.py``) that plays the gateway for both hosts and for",
        "the raw-echo limits; it decodes every frame it receives.",
        "",
        f"- **Command:** ``{command}``",
        f"- **Date:** {date}",
        f"- **Machine:** {machine} (shared with other jobs while measuring)",
        "- **Versions:** " + ", ".join(f"{k} {v}" for k, v in vers.items()),
        "",
        "Results",
        "-------",
        "",
        "A ratio below 1 means ours takes less of the metric; for throughput rows (1/s)",
        "above 1 means ours is faster. ``Ours / limit`` is the distance to the physical",
        "limit measured in the same run (host scenarios: a raw WebSocket echo or one-way",
        "stream on our own transport, driven by the same load generator): for a rate, the",
        "share of the limit reached; for a time, how many times the limit it takes.",
        "``met`` is computed from the numbers.",
        "",
        *_rst_table([r.as_dict() for r in rows]),
        "",
    ]
    if missed:
        out += ["**Targets missed in this run:** " + "; ".join(missed) + ".", ""]
    else:
        out += ["Every target was met in this run.", ""]
    if chart:
        out += [
            f".. image:: {chart}",
            "   :alt: How many times better than the peer each ratio-targeted row is, "
            "with its target",
            "",
        ]
    else:
        out += ["(No chart: matplotlib was not installed when this page was generated.)", ""]
    if fanout is not None:
        out += _fanout_section(rows, fanout)
    out += [
        "Limits and notes",
        "----------------",
        "",
        "Each scenario is measured against a physical limit on the same machine.",
        "",
    ]
    for r in rows:
        out.append(f"- **{_rst_text(r.name)}**")
        out.append("")
        out.append(f"  - Limit: {r.limit}.")
        out.extend(f"  - {note[0].upper()}{note[1:]}." for note in r.notes)
        out.append("")
    out += [
        "Scenarios",
        "---------",
        "",
        "1. **Loop overhead**: the SPEC scenario (2 model turns, 2 parallel tool calls",
        "   ``get_weather`` and ``add``, then the final text) with an in-process scripted",
        "   model and trivial async tools. The peer's ``generate`` is synchronous, its idiom.",
        "2. **Fan-out**: one model message with 1,000 tool calls that each wait 10 ms;",
        "   wall time, the overhead over each runtime's floor, and the cold first run.",
        "3. **Cancel latency**: the tool sleeps 5 s; the run's cancel token fires at 100 ms",
        "   (the peer takes an ``asyncio.Event``). Time from the cancel until ``run`` returns",
        "   or raises, and whether the tool task is still alive afterwards.",
        "4. **Invoke**: ``actions/invoke`` of an echo action over loopback: sequential round",
        "   trip, then throughput with 64 invocations in flight.",
        "5. **Stubborn cancel**: the handler shields itself from cancellation for 2 s; time",
        "   from ``actions/cancel`` to the -32001 answer.",
        "6. **Scale**: 10,000 concurrent invocations, each reporting progress and then",
        "   waiting until a ``release`` action runs; time until all are answered, and the",
        "   host's peak RSS growth (``VmHWM`` over the pre-run ``VmRSS``) per invocation.",
        "7. **Progress storm**: one invocation sends 100,000 progress updates, every tenth",
        "   asking for a lower percent; the load generator checks that the percent on the",
        "   wire never decreases and stays within 0..100.",
        *HTTP_SCENARIO_TEXT,
        "11. **Builtins**: ``bash`` cancelled 100 ms into ``sleep 30 & sleep 30 & wait``",
        "    (time until the call returns and until no process of its group is left);",
        "    ``bash`` of ``echo done; sleep 12 &`` with a 2 s timeout; ``glob`` and ``grep``",
        "    over a generated tree of 20,000 files, one in 100 binary.",
        *MCP_SCENARIO_TEXT,
        *GATEWAY_MCP_SCENARIO_TEXT,
        *COMPACTION_SCENARIO_TEXT,
        *AGENTS_SCENARIO_TEXT,
        *A2A_SCENARIO_TEXT,
        *XFRAMEWORK_SCENARIO_TEXT,
        *STORES_SCENARIO_TEXT,
        # In scenario order: an enumerated list whose numbers skip ends there (a docutils
        # warning, which fails the ``-W`` docs build).
        *HEDGE_SCENARIO_TEXT,
        *DURABLE_SCENARIO_TEXT,
        *CONVERSATIONS_SCENARIO_TEXT,
        *TRACING_SCENARIO_TEXT,
        *AGUI_SCENARIO_TEXT,
        *COLDSTART_SCENARIO_TEXT,
        "",
        "Raw numbers are in ``benchmarks/results/latest.json``. The benchmarks are never part",
        "of the test suite. Run them with ``nox -s bench`` (about 3 minutes), or",
        "``nox -s bench -- --quick`` (fewer rounds).",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    # ``python -m benchmarks.report``: the page's tables again from latest.json.
    refresh_tables()
    print(f"rewrote the tables of {DOC.relative_to(ROOT)} from {RESULTS.relative_to(ROOT)}")
