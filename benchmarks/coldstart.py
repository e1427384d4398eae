"""Scenario 24: cold start (issue 39). One process measures every round and prints one
JSON object on stdout::

    python -m benchmarks.coldstart --rounds 10

- ``serve``: ``python -m toolnexus_trio serve --stdio`` (builtins on) against a stdio
  server of the official MCP SDK's high-level API (``MCPServer``, FastMCP's name in
  mcp 2.x) offering two tools (:func:`peer_server`). Figure: from just before the
  process is spawned to the ``tools/list`` answer read on its stdout, the client (this
  process, raw JSON lines over pipes) writing ``initialize``, then, on its answer, the
  ``initialized`` notification and ``tools/list``; and the child's CPU (user + sys from
  ``os.wait4``, to its exit on stdin's end). Both run on ``BENCH_MCP_OURS_PYTHON`` (our
  ``[mcp]`` extra and FastMCP both need mcp>=2.3). Target: ratio <= 0.7.
- ``import``: ``import toolnexus_trio`` against ``import toolnexus`` (0.21), each first
  thing in a fresh ``python -c`` process, timed inside it (``perf_counter`` and
  ``process_time`` around the import), both on this interpreter. Target: ratio <= 0.35.
- What bounds them, measured in the same rounds: ``python -c "import mcp"`` from the
  spawn to the import done (every MCP server, ours and FastMCP, imports the SDK), and
  ``import trio`` timed as the imports are (our floor).

Every side runs once before the timed rounds, after ``compileall`` of our package and
of this one (pip compiles a wheel's bytecode, the peers' included; an editable install
is not). The rounds interleave the sides; the order flips each round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.rows import Config, Row

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_TEXT = [
    "24. **Cold start** (issue 39): ``python -m toolnexus_trio serve --stdio`` (builtins on)",
    "    against an ``MCPServer`` (FastMCP) stdio server of two tools, from the spawn to",
    "    the ``tools/list`` answer of a raw client over pipes, and the child's CPU;",
    "    ``import toolnexus_trio`` against ``import toolnexus`` in fresh processes; with",
    '    ``python -c "import mcp"`` and ``import trio`` measured as their bounds.',
]
"""Scenario 24's description for the performance page."""

_IMPORT = (
    "import time; w = time.perf_counter(); c = time.process_time(); import {m}; "
    "print((time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3)"
)
_PEER = "from benchmarks.coldstart import peer_server; peer_server()"
_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "coldstart", "version": "0"},
    },
}
_THEN = [
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def peer_server() -> None:
    """The FastMCP side: two tools on stdio, as its documentation writes one."""
    from mcp.server import MCPServer

    server = MCPServer("coldstart")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    server.run("stdio")


def _mcp_python() -> str:
    return os.environ.get("BENCH_MCP_OURS_PYTHON", sys.executable)


def _watchdog(pid: int, seconds: float) -> threading.Timer:
    """Kill the child's process group if the round hangs (a read would block forever)."""

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    timer = threading.Timer(seconds, kill)
    timer.daemon = True
    timer.start()
    return timer


def _serve(argv: list[str]) -> dict[str, Any]:
    """One cold start: spawn, initialize, tools/list; wall to the answer, CPU to exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        start_new_session=True,  # its own group: the watchdog kills the whole tree
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    timer = _watchdog(proc.pid, 60)
    try:

        def answer(request_id: int) -> dict[str, Any]:
            assert proc.stdout is not None
            while True:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"{argv[1:]} closed stdout before answering")
                message: dict[str, Any] = json.loads(line)
                if message.get("id") == request_id:
                    if "result" not in message:
                        raise RuntimeError(f"{argv[1:]}: {message}")
                    return message

        proc.stdin.write(json.dumps(_INIT).encode() + b"\n")
        proc.stdin.flush()
        answer(1)
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in _THEN))
        proc.stdin.flush()
        tools = answer(2)["result"]["tools"]
        wall_ms = (time.perf_counter() - t0) * 1e3
        proc.stdin.close()  # end of input: both servers exit
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        timer.cancel()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        proc.stdout.close()
    return {
        "wall_ms": wall_ms,
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1e3,
        "tools": len(tools),
    }


def _imported(python: str, module: str) -> dict[str, Any]:
    """A fresh process imports *module* first thing: its own figures, and from the spawn
    to its line read here (the import done), as the servers' spawn to their answer."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", _IMPORT.format(m=module)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    timer = _watchdog(proc.pid, 60)
    try:
        line = proc.stdout.readline()
        process_ms = (time.perf_counter() - t0) * 1e3
        proc.stdout.read()
        if proc.wait() != 0 or not line:
            raise RuntimeError(f"{python} -c 'import {module}' failed ({proc.returncode})")
    finally:
        timer.cancel()
        proc.stdout.close()
    wall, cpu = line.split()
    return {"wall_ms": float(wall), "cpu_ms": float(cpu), "process_ms": process_ms}


def _breakdown(python: str, *argv: str) -> dict[str, float]:
    """``python -X importtime *argv`` in one fresh process (stdin at its end): the self
    time (ms) summed by top-level package, the largest first (what the imports cost)."""
    err = subprocess.run(
        [python, "-X", "importtime", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    ).stderr
    by: dict[str, float] = {}
    for line in err.splitlines()[1:]:  # "import time: self [us] | cumulative | package"
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and fields[0].strip().isdigit():
            top = fields[2].strip().split(".")[0]
            by[top] = by.get(top, 0.0) + int(fields[0]) / 1e3
    return by


def measure(rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Every side once untimed, then *rounds* interleaved rounds (the order flips)."""
    mcp_py = _mcp_python()
    sides: dict[str, Callable[[], dict[str, Any]]] = {
        "serve_ours": lambda: _serve([mcp_py, "-m", "toolnexus_trio", "serve", "--stdio"]),
        "serve_peer": lambda: _serve([mcp_py, "-c", _PEER]),
        "import_ours": lambda: _imported(sys.executable, "toolnexus_trio"),
        "import_peer": lambda: _imported(sys.executable, "toolnexus"),
        "import_mcp": lambda: _imported(mcp_py, "mcp"),
        "import_trio": lambda: _imported(sys.executable, "trio"),
    }
    for python in {mcp_py, sys.executable}:
        subprocess.run(
            [python, "-m", "compileall", "-q", "toolnexus_trio", "benchmarks"],
            cwd=ROOT,
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
    for run in sides.values():
        run()
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(sides[name]())
    argv = {
        "import_ours": (sys.executable, "-c", "import toolnexus_trio"),
        "import_peer": (sys.executable, "-c", "import toolnexus"),
        "serve_ours": (mcp_py, "-m", "toolnexus_trio", "serve", "--stdio"),
        "serve_peer": (mcp_py, "-c", _PEER),
    }
    samples: dict[str, list[dict[str, float]]] = {side: [] for side in argv}
    for r in range(3):  # one -X importtime process is noisy: per package, the median of 3
        for side in list(argv) if r % 2 == 0 else list(argv)[::-1]:
            samples[side].append(_breakdown(*argv[side]))
    by: dict[str, dict[str, float]] = {}
    for side, runs in samples.items():
        packages = {k for run in runs for k in run}
        medians = {k: statistics.median(run.get(k, 0.0) for run in runs) for k in packages}
        by[side] = dict(sorted(medians.items(), key=lambda kv: -kv[1]))
    out["breakdown"] = []
    for side, other in (("import_ours", "import_peer"), ("serve_ours", "serve_peer")):
        for a, b in ((side, other), (other, side)):
            out["breakdown"].append(
                {
                    "side": a,
                    "by_package_ms": dict(list(by[a].items())[:8]),
                    "total_ms": sum(by[a].values()),
                    "not_in_other_ms": sum(v for k, v in by[a].items() if k not in by[b]),
                }
            )
    return out


def collect(
    cfg: Config,
    add: Callable[[str, str, dict[str, Any]], None],
    child: Callable[[list[str], float], dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    """Run scenario 24 (one child, about 40 s)."""
    rounds = 10 if cfg.agent_rounds > 2 else 3
    add("coldstart", "ours", child(["-m", "benchmarks.coldstart", "--rounds", str(rounds)], 600))
    progress(f"cold start, {rounds} rounds")


def _importtime(runs: dict[str, Any], side: str, label: str) -> list[str]:
    """A note: where one side's imports go (its ``-X importtime`` by package)."""
    return [
        f"imports of {label} (python -X importtime, median of 3 processes): "
        f"{b['total_ms']:.0f} ms, {b['not_in_other_ms']:.0f} ms of it in packages the "
        "other side does not import; "
        "the largest, self time by top-level package: "
        + ", ".join(f"{k} {v:.0f} ms" for k, v in list(b["by_package_ms"].items())[:6])
        for b in runs.get("breakdown", [])
        if b["side"] == side
    ]


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Row]:
    """The scenario-24 rows (none when it did not run)."""
    from benchmarks.rows import Row, Stats, Target

    if "coldstart" not in raw:
        return []
    runs: dict[str, Any] = raw["coldstart"]["ours"][0]

    def of(side: str, key: str) -> list[float]:
        return [run[key] for run in runs[side]]

    def med(side: str, key: str) -> float:
        return statistics.median(of(side, key))

    n = len(runs["serve_ours"])
    mcp_ms = med("import_mcp", "process_ms")
    serve_cpu = med("serve_ours", "cpu_ms") / med("serve_peer", "cpu_ms")
    import_cpu = med("import_ours", "cpu_ms") / med("import_peer", "cpu_ms")
    floor = mcp_ms / med("serve_peer", "wall_ms")
    return [
        Row(
            "24a. Cold start: serve --stdio to the tools/list answer vs FastMCP",
            "spawn to the tools/list answer, raw client over pipes",
            "ms",
            Stats.of(of("serve_ours", "wall_ms")),
            Stats.of(of("serve_peer", "wall_ms")),
            f'python -c "import mcp", spawn to the import done: {mcp_ms:.0f} ms (measured)',
            Target("ratio", "<=", 0.7),
            [
                f"{n} interleaved rounds, one fresh process each, bytecode compiled on both "
                f"sides; ours: builtins on ({runs['serve_ours'][0]['tools']} tools), FastMCP "
                f"(mcp.server.MCPServer): {runs['serve_peer'][0]['tools']} tools; both on the "
                "mcp>=2.3 interpreter",
                f"CPU (user+sys to exit, os.wait4): ours {med('serve_ours', 'cpu_ms'):.0f} ms, "
                f"FastMCP {med('serve_peer', 'cpu_ms'):.0f} ms, ratio {serve_cpu:.2f}",
                f"what bounds it: serve --stdio imports the mcp SDK, and python -c "
                f'"import mcp" alone takes {mcp_ms:.0f} ms from the spawn to the import '
                f"done (the import itself {med('import_mcp', 'wall_ms'):.0f} ms, CPU "
                f"{med('import_mcp', 'cpu_ms'):.0f} ms): {floor:.2f}x FastMCP's whole cold "
                f"start; 0.7x needs ours at or below {0.7 * med('serve_peer', 'wall_ms'):.0f}"
                + (
                    " ms, which no start-up that imports the SDK reaches" if floor >= 0.7 else " ms"
                ),
                *_importtime(runs, "serve_ours", "ours"),
                *_importtime(runs, "serve_peer", "FastMCP"),
            ],
            limit_value=mcp_ms,
        ),
        Row(
            "24b. Cold start: import toolnexus_trio vs import toolnexus 0.21",
            "the import, first thing in a fresh process (timed inside it)",
            "ms",
            Stats.of(of("import_ours", "wall_ms")),
            Stats.of(of("import_peer", "wall_ms")),
            f"import trio alone: {med('import_trio', 'wall_ms'):.0f} ms (measured)",
            Target("ratio", "<=", 0.35),
            [
                f"{n} interleaved rounds, one fresh python -c process each, bytecode "
                "compiled on both sides, the same interpreter",
                f"CPU (process_time around the import): ours "
                f"{med('import_ours', 'cpu_ms'):.0f} ms, toolnexus "
                f"{med('import_peer', 'cpu_ms'):.0f} ms, ratio {import_cpu:.2f}",
                f"what bounds it: import trio alone takes {med('import_trio', 'wall_ms'):.0f} "
                f"ms (CPU {med('import_trio', 'cpu_ms'):.0f} ms) in the same rounds, "
                f"{med('import_trio', 'wall_ms') / med('import_peer', 'wall_ms'):.2f}x "
                "toolnexus's import",
                *_importtime(runs, "import_ours", "ours"),
                *_importtime(runs, "import_peer", "toolnexus"),
            ],
            limit_value=med("import_trio", "wall_ms"),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coldstart", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
