"""The orchestrator: ``python -m benchmarks [--quick] [--only 1 4 ...]``.

Every side of every scenario runs in its own child process (so each peak RSS belongs to
one side of one scenario), ours and the peer alternately, for several rounds; the order
flips each round. Scenarios 4-7 start one host process per side per round and drive it
with one load-generator process (:mod:`benchmarks.loadgen`), the same for every host.
Scenarios 8-10 (:mod:`benchmarks.http_suite`) start one FakeProvider process per scenario
that both sides' children talk to over loopback HTTP.
Results go to stdout as a table, to ``benchmarks/results/latest.json`` and to
``docs/performance.rst`` (plus ``docs/_static/bench.png`` when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.http_suite import collect_http
from benchmarks.report import build_rows, machine_info, print_table, write_outputs
from benchmarks.rows import Config, Raw

PY = sys.executable
SIDES = ("ours", "peer")


QUICK = dataclasses.replace(
    Config(),
    agent_rounds=2,
    host_rounds=1,
    fanout_runs=6,
    fanout_cold_rounds=4,
    overhead_warmup=30,
    stubborn_reps=2,
)
QUICK = dataclasses.replace(QUICK, http_rounds=1)  # scenarios 8-10
QUICK = dataclasses.replace(QUICK, xf_rounds=1)  # scenario 17
QUICK = dataclasses.replace(QUICK, store_rounds=1)  # scenario 18
QUICK = dataclasses.replace(QUICK, conv_rounds=1)  # scenario 21


def _json_child(argv: list[str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run([PY, *argv], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _order(round_index: int) -> tuple[str, ...]:
    return SIDES if round_index % 2 == 0 else SIDES[::-1]


@contextmanager
def host_process(module: str) -> Iterator[tuple[str, int]]:
    """Start ``benchmarks.hosts.<module>``; yield its URL and pid; stop it on exit."""
    proc = subprocess.Popen(
        [PY, "-m", f"benchmarks.hosts.{module}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        if not line.startswith("url="):
            raise RuntimeError(f"host {module} did not print its URL: {line!r}")
        fields = dict(part.split("=", 1) for part in line.split())
        yield fields["url"], int(fields["pid"])
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def loadgen(module: str, scenario: str, *extra: str, timeout: float = 300) -> dict[str, Any]:
    """One load-generator run against a fresh host process."""
    with host_process(module) as (url, pid):
        argv = ["-m", "benchmarks.loadgen", scenario, url, "--pid", str(pid), *extra]
        return _json_child(argv, timeout)


def _progress(label: str, t0: float) -> None:
    print(f"  [{time.perf_counter() - t0:6.1f}s] {label}", file=sys.stderr, flush=True)


def collect(cfg: Config, only: set[int]) -> Raw:
    """Run the selected scenarios; return every child's JSON, keyed by scenario and side."""
    raw: Raw = {}
    t0 = time.perf_counter()

    def add(key: str, side: str, value: dict[str, Any]) -> None:
        raw.setdefault(key, {}).setdefault(side, []).append(value)

    agent = [
        (1, "overhead", cfg.overhead_runs, cfg.overhead_warmup),
        (2, "fanout", cfg.fanout_runs, cfg.fanout_warmup),
        (3, "cancel", cfg.cancel_runs, 0),
    ]
    for number, scenario, runs, warmup in agent:
        if number not in only:
            continue
        for r in range(cfg.agent_rounds):
            for side in _order(r):
                argv = ["-m", "benchmarks.agent", scenario, side]
                argv += ["--runs", str(runs), "--warmup", str(warmup)]
                add(scenario, side, _json_child(argv, timeout=120))
            _progress(f"{scenario} round {r + 1}/{cfg.agent_rounds}", t0)
        if scenario == "fanout":
            # The cold first run: one fresh process per measurement, the library's
            # first run and the bare floor's first run alternating within each side.
            for r in range(cfg.fanout_cold_rounds):
                for side in _order(r):
                    for floor in (False, True) if r % 2 == 0 else (True, False):
                        argv = ["-m", "benchmarks.agent", scenario, side, "--cold"]
                        key = "fanout_cold_floor" if floor else "fanout_cold"
                        add(key, side, _json_child([*argv, "--floor"] if floor else argv, 120))
                _progress(f"{scenario} cold round {r + 1}/{cfg.fanout_cold_rounds}", t0)
            for r in range(2):  # memory per in-flight call: deterministic, two processes
                for side in _order(r):
                    argv = ["-m", "benchmarks.agent", scenario, side, "--memory"]
                    add("fanout_memory", side, _json_child(argv, 120))

    hosted: list[tuple[int, str, list[str]]] = [
        (4, "invoke", ["--sequential", str(cfg.invoke_sequential)]),
        (5, "stubborn", ["--reps", str(cfg.stubborn_reps)]),
        (6, "scale", ["--n", str(cfg.scale_n)]),
        (7, "storm", ["--n", str(cfg.storm_n)]),
    ]
    if only & {4, 5, 6, 7}:
        # The limits: a raw WebSocket echo and a raw one-way stream on our stack, driven
        # by the same load generator.
        for r in range(cfg.host_rounds):
            add(
                "echo",
                "ours",
                loadgen(
                    "echo", "invoke", "--echo", *hosted[0][2], "--total", str(cfg.invoke_total)
                ),
            )
            add("stream", "ours", loadgen("echo", "stream", "--echo", "--n", str(cfg.storm_n)))
            _progress(f"raw echo limits round {r + 1}/{cfg.host_rounds}", t0)
    for number, scenario, extra in hosted:
        if number not in only:
            continue
        if scenario == "invoke":
            extra = [*extra, "--total", str(cfg.invoke_total)]
        for r in range(cfg.host_rounds):
            for side in _order(r):
                add(scenario, side, loadgen(side, scenario, *extra))
            _progress(f"{scenario} round {r + 1}/{cfg.host_rounds}", t0)
    collect_http(cfg, only, add, lambda label: _progress(label, t0))
    if 11 in only:
        from benchmarks import builtins

        builtins.collect(cfg, add, _json_child, lambda label: _progress(label, t0))
    if 12 in only:  # MCP: its own module (two virtualenvs, see benchmarks/mcp.py)
        from benchmarks.mcp import collect_mcp

        collect_mcp(cfg.host_rounds, add, lambda label: _progress(label, t0))
    if 13 in only:  # gateway --mcp: needs our mcp>=2.3 virtualenv, as scenario 12's ours side
        python = os.environ.get("BENCH_MCP_OURS_PYTHON", sys.executable)
        proc = subprocess.run(
            [python, "-m", "benchmarks.mcp_gateway"],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        add("gateway_mcp", "ours", figures)  # rows: benchmarks.mcp_gateway.gateway_mcp_rows
        _progress("gateway --mcp", t0)
    if 14 in only:  # compaction (SPEC §7F): its own module
        from benchmarks import compaction

        compaction.collect(cfg, add, _json_child, lambda label: _progress(label, t0))
    if 15 in only:  # the sub-agent runtime (SPEC §7D)
        from benchmarks import agents_runtime

        rounds = 2 if cfg.agent_rounds > 2 else 1
        agents_runtime.collect(rounds, add, _json_child, lambda label: _progress(label, t0))
    if 16 in only:  # A2A: the peer from BENCH_A2A_PEER_PYTHON, ours as scenario 13
        from benchmarks.a2a import collect_a2a

        collect_a2a(cfg.host_rounds, add, lambda label: _progress(label, t0))
    if 17 in only:  # end to end against other frameworks, each from its own virtualenv
        from benchmarks.xframework import collect_xframework

        collect_xframework(
            cfg.xf_rounds, cfg.xf_runs, cfg.xf_warmup, add, lambda label: _progress(label, t0)
        )
    if 18 in only:  # store scaling: each run is its own process (it starts its own server)
        for r in range(cfg.store_rounds):
            add("stores", "ours", _json_child(["-m", "benchmarks.stores"], timeout=900))
            _progress(f"stores round {r + 1}/{cfg.store_rounds}", t0)
    if 19 in only:  # a hedged request whose first provider stalls (issue 38)
        from benchmarks import hedge

        hedge.collect(cfg, add, _json_child, lambda label: _progress(label, t0))
    if 20 in only:  # crash-durable runs (issue 37): checkpoint overhead and recovery
        add("durable", "ours", _json_child(["-m", "benchmarks.durable"], timeout=900))
        _progress("durable", t0)
    if 21 in only:  # a thousand conversations in one process (issue 39), peers' venvs too
        from benchmarks import conversations

        conversations.collect(cfg.conv_rounds, cfg.conv_n, add, lambda label: _progress(label, t0))
    if 22 in only:  # what tracing costs (issue 34)
        from benchmarks import tracing

        tracing.collect(cfg, add, _json_child, lambda label: _progress(label, t0))
    if 23 in only:  # the AG-UI endpoint (issue 35)
        from benchmarks import agui

        agui.collect(cfg, add, _json_child, lambda label: _progress(label, t0))
    if 24 in only:  # cold start: serve --stdio against FastMCP, the imports (issue 39)
        from benchmarks import coldstart

        coldstart.collect(cfg, add, _json_child, lambda label: _progress(label, t0))
    return raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (about 2 minutes)")
    parser.add_argument(
        "--only", type=int, nargs="+", default=list(range(1, 25)), help="scenario numbers"
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the table only; leave files alone"
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    command = "nox -s bench" + (" -- --quick" if args.quick else "")
    started = time.perf_counter()
    print(f"benchmarks: {machine_info()}", file=sys.stderr)
    raw = collect(cfg, set(args.only))
    rows = build_rows(raw, cfg)
    print_table(rows)
    if not args.no_write:
        write_outputs(rows, raw, cfg, command, time.perf_counter() - started)
    return 0
