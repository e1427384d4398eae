"""Scenario 12: MCP servers as tools, ours (Trio, mcp 2.x) and the peer's (toolnexus 0.21.0,
mcp 1.30, asyncio).

One process measures one side of one sub-scenario and prints one JSON object::

    python -m benchmarks.mcp cold ours --dir /tmp/x      # 5 stdio servers, one hangs
    python -m benchmarks.mcp calls peer --sequential 2000 --total 4000 --inflight 32
    python -m benchmarks.mcp cancel ours --runs 20
    python -m benchmarks.mcp server                      # the stdio server both sides use

The server is a raw newline JSON-RPC MCP server on the standard library (as the peer's
own benchmark does), so both sides pay the same, small server cost and the numbers show
the clients. The two sides need different ``mcp`` SDKs (toolnexus 0.21 pins ``mcp<2``),
so they run from two virtualenvs: ``BENCH_MCP_OURS_PYTHON`` and
``BENCH_MCP_PEER_PYTHON`` (default: this interpreter); ``nox -s bench`` sets them.
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
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVERS = 5
HANG_TIMEOUT_MS = 2000
CANCEL_SETTLE_S = 0.05
PEER_CANCEL_WAIT_S = 1.0

# ---------------------------------------------------------------------------
# The server (stdlib only)
# ---------------------------------------------------------------------------

_TOOLS = [
    {
        "name": "add",
        "description": "Add two numbers",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
    {"name": "slow", "description": "Never answers", "inputSchema": {"type": "object"}},
    {"name": "seen", "description": "When a cancel arrived", "inputSchema": {"type": "object"}},
]


def serve() -> None:
    """Answer MCP on stdin/stdout until EOF; remember when a ``notifications/cancelled``
    arrives (``time.monotonic()``, comparable across processes on Linux)."""
    pid_file = os.environ.get("BENCH_PID_FILE")
    if pid_file:
        with open(pid_file, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    seen = "none"
    out = sys.stdout.buffer

    def send(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        out.flush()

    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") or {}
        if method == "notifications/cancelled":
            seen = repr(time.monotonic())
        elif rid is None:
            continue
        elif method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": _TOOLS}})
        elif method == "tools/call":
            name, args = params.get("name"), params.get("arguments") or {}
            if name == "slow":
                continue  # never answered; a cancel is what ends it
            text = seen if name == "seen" else str(args.get("a", 0) + args.get("b", 0))
            result = {"content": [{"type": "text", "text": text}], "isError": False}
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": rid, "result": {}})


def _server_entry(pid_file: str | None = None, timeout_ms: int | None = None) -> dict[str, Any]:
    # The SPEC's array form: the peer reads only that.
    entry: dict[str, Any] = {"command": [sys.executable, "-m", "benchmarks.mcp", "server"]}
    env = {"PYTHONPATH": str(ROOT)}
    if pid_file:
        env["BENCH_PID_FILE"] = pid_file
    entry["env"] = env
    if timeout_ms is not None:
        entry["timeout"] = timeout_ms
    return entry


def _cold_config(tmp: Path) -> dict[str, Any]:
    pids = str(tmp / "pids")
    servers = {f"s{i}": _server_entry(pids, HANG_TIMEOUT_MS) for i in range(SERVERS - 1)}
    # Never answers initialize; leaves a child of its own, as npx -> node does.
    script = f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; exec sleep 300"
    servers["hangs"] = {"command": ["sh", "-c", script], "timeout": HANG_TIMEOUT_MS}
    return {"mcpServers": servers}


def _mcp() -> str:
    from importlib import metadata

    return metadata.version("mcp")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def _leftovers(tmp: Path) -> int:
    """Processes of this run still alive; they are killed (by pid) so none outlives us."""
    path = tmp / "pids"
    pids = [int(p) for p in path.read_text().split()] if path.exists() else []
    left = [p for p in pids if _alive(p)]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(left)


# ---------------------------------------------------------------------------
# Ours
# ---------------------------------------------------------------------------


def ours(scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    import trio

    import toolnexus_trio.mcp._source  # noqa: F401 - the SDK import, as `import toolnexus` does
    from toolnexus_trio import CancelToken, ToolContext, ToolkitOptions, open_toolkit

    async def cold() -> dict[str, Any]:
        tmp = Path(args.dir)
        t0 = time.perf_counter()
        async with open_toolkit(ToolkitOptions(mcp=_cold_config(tmp), builtins=False)) as tk:
            ready = time.perf_counter() - t0
            status = {k: v.state for k, v in tk.mcp_status().items()}
            t1 = time.perf_counter()
        closed = time.perf_counter() - t1
        await trio.sleep(0.2)  # let the kernel reap before counting
        left = _leftovers(tmp)
        return {"ready_s": ready, "close_s": closed, "status": status, "left": left, "mcp": _mcp()}

    async def calls() -> dict[str, Any]:
        options = ToolkitOptions(mcp={"b": _server_entry()}, builtins=False)
        async with open_toolkit(options) as tk:
            add = tk.get("b_add")
            assert add is not None
            for _ in range(50):
                await add.call({"a": 1, "b": 2})
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                result = await add.call({"a": 1, "b": 2})
            seq_us = (time.perf_counter() - t0) / args.sequential * 1e6
            assert result.output == "3", result
            per_worker = args.total // args.inflight

            async def worker() -> None:
                for _ in range(per_worker):
                    await add.call({"a": 1, "b": 2})

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(args.inflight):
                    nursery.start_soon(worker)
            par_us = (time.perf_counter() - t0) / (per_worker * args.inflight) * 1e6
        return {"sequential_us": seq_us, "inflight_us": par_us}

    async def cancel() -> dict[str, Any]:
        samples: list[float] = []
        options = ToolkitOptions(mcp={"b": _server_entry()}, builtins=False)
        async with open_toolkit(options) as tk:
            slow, seen = tk.get("b_slow"), tk.get("b_seen")
            assert slow is not None
            assert seen is not None

            async def call(token: CancelToken, out: list[Any]) -> None:
                out.append(await slow.call({}, ToolContext(cancel=token)))

            for _ in range(args.runs):
                token = CancelToken()
                out: list[Any] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call, token, out)
                    await trio.sleep(CANCEL_SETTLE_S)
                    t_cancel = time.monotonic()
                    token.cancel()
                assert out[0].output == "cancelled", out
                t_seen = float((await seen.call({})).output)
                samples.append((t_seen - t_cancel) * 1000)
        return {"cancel_ms": samples}

    return trio.run({"cold": cold, "calls": calls, "cancel": cancel}[scenario])


# ---------------------------------------------------------------------------
# Peer (toolnexus 0.21.0) - black-box use of its public API
# ---------------------------------------------------------------------------


def peer(scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    import toolnexus

    async def cold() -> dict[str, Any]:
        tmp = Path(args.dir)
        t0 = time.perf_counter()
        tk = await toolnexus.create_toolkit(mcp_config=_cold_config(tmp), builtins=False)
        ready = time.perf_counter() - t0
        status = {k: v if isinstance(v, str) else str(v) for k, v in tk.mcp_status().items()}
        t1 = time.perf_counter()
        await tk.close()
        closed = time.perf_counter() - t1
        await asyncio.sleep(0.2)
        left = _leftovers(tmp)
        return {"ready_s": ready, "close_s": closed, "status": status, "left": left, "mcp": _mcp()}

    async def calls() -> dict[str, Any]:
        tk = await toolnexus.create_toolkit(mcp_config={"b": _server_entry()}, builtins=False)
        try:
            for _ in range(50):
                await tk.execute("b_add", {"a": 1, "b": 2})
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                result = await tk.execute("b_add", {"a": 1, "b": 2})
            seq_us = (time.perf_counter() - t0) / args.sequential * 1e6
            assert result.output == "3", result
            per_worker = args.total // args.inflight

            async def worker() -> None:
                for _ in range(per_worker):
                    await tk.execute("b_add", {"a": 1, "b": 2})

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.inflight)))
            par_us = (time.perf_counter() - t0) / (per_worker * args.inflight) * 1e6
        finally:
            await tk.close()
        return {"sequential_us": seq_us, "inflight_us": par_us}

    async def cancel() -> dict[str, Any]:
        tk = await toolnexus.create_toolkit(mcp_config={"b": _server_entry()}, builtins=False)
        seen_any: list[str] = []
        try:
            for _ in range(min(args.runs, 3)):
                task = asyncio.ensure_future(tk.execute("b_slow", {}))
                await asyncio.sleep(CANCEL_SETTLE_S)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.sleep(PEER_CANCEL_WAIT_S)
                seen_any.append((await tk.execute("b_seen", {})).output)
        finally:
            await tk.close()
        return {"seen": seen_any}

    return asyncio.run({"cold": cold, "calls": calls, "cancel": cancel}[scenario]())


# ---------------------------------------------------------------------------
# Orchestration (called from benchmarks.run) and rows (called from benchmarks.report)
# ---------------------------------------------------------------------------


def _python(side: str) -> str:
    return os.environ.get(f"BENCH_MCP_{side.upper()}_PYTHON", sys.executable)


def _child(side: str, argv: list[str], timeout: float = 300) -> dict[str, Any]:
    proc = subprocess.run(
        [_python(side), "-m", "benchmarks.mcp", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmarks.mcp {' '.join(argv)} failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def collect_mcp(
    rounds: int, add: Callable[[str, str, dict[str, Any]], None], note: Callable[[str], None]
) -> None:
    """Run scenario 12 (*rounds* rounds, sides alternating) and add each child's JSON."""
    for r in range(rounds):
        sides = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
        for side in sides:
            with tempfile.TemporaryDirectory() as tmp:
                add("mcp_cold", side, _child(side, ["cold", side, "--dir", tmp]))
            add("mcp_calls", side, _child(side, ["calls", side]))
            add("mcp_cancel", side, _child(side, ["cancel", side]))
        note(f"mcp round {r + 1}/{rounds}")


def mcp_rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Any]:
    """The report rows of scenario 12 (empty when it did not run)."""
    from benchmarks.rows import Row, Stats, Target

    if "mcp_cold" not in raw:
        return []

    def flat(key: str, side: str, field: str) -> list[float]:
        out: list[float] = []
        for run in raw[key][side]:
            value = run[field]
            out.extend(value if isinstance(value, list) else [value])
        return out

    cold_o, cold_p = raw["mcp_cold"]["ours"], raw["mcp_cold"]["peer"]
    close_o = statistics.median(flat("mcp_cold", "ours", "close_s"))
    close_p = statistics.median(flat("mcp_cold", "peer", "close_s"))
    left_o = sum(r["left"] for r in cold_o)
    left_p = sum(r["left"] for r in cold_p)
    hang_o = {r["status"].get("hangs") for r in cold_o}
    peer_seen = [s for r in raw["mcp_cancel"]["peer"] for s in r["seen"]]
    # The peer's server never sees the cancel: shown as the lower bound we waited.
    waited = PEER_CANCEL_WAIT_S * 1000
    never = Stats(waited, waited, waited, waited, len(peer_seen))
    return [
        Row(
            f"12. MCP cold load: {SERVERS} stdio servers, one hangs ({HANG_TIMEOUT_MS} ms timeout)",
            "time until the toolkit is ready",
            "s",
            Stats.of(flat("mcp_cold", "ours", "ready_s")),
            Stats.of(flat("mcp_cold", "peer", "ready_s")),
            f"the hanging server's {HANG_TIMEOUT_MS / 1000:g} s bound (servers load at once)",
            Target("ours", "<=", 2.5, unit="s", checks=(("no process left", left_o == 0),)),
            [
                f"processes left after close (the hanging server's tree): ours {left_o}, "
                f"peer {left_p} (killed by the benchmark afterwards)",
                f"close time (median): ours {close_o:.2f} s, peer {close_p:.2f} s",
                f"hanging server status: ours {sorted(map(str, hang_o))}",
                f"mcp SDK: ours {cold_o[0]['mcp']}, peer {cold_p[0]['mcp']}",
            ],
        ),
        Row(
            "12. MCP call round trip, sequential",
            "time per tools/call",
            "µs",
            Stats.of(flat("mcp_calls", "ours", "sequential_us")),
            Stats.of(flat("mcp_calls", "peer", "sequential_us")),
            "one stdio round trip to a stdlib server, through each library's toolkit",
            Target("ratio", "<=", 1.0),
        ),
        Row(
            "12. MCP call round trip, 32 in flight",
            "wall time per tools/call",
            "µs",
            Stats.of(flat("mcp_calls", "ours", "inflight_us")),
            Stats.of(flat("mcp_calls", "peer", "inflight_us")),
            "32 concurrent callers on one session",
            Target("ratio", "<=", 1.0),
        ),
        Row(
            "12. MCP cancel propagation (peer: never; shown as the 1 s waited)",
            "cancel -> the server sees notifications/cancelled",
            "ms",
            Stats.of(flat("mcp_cancel", "ours", "cancel_ms")),
            never,
            "one stdio write",
            Target("ours", "<=", 20.0, stat="p95", unit="ms"),
            [
                "peer: the server never saw a cancel (asked "
                f"{PEER_CANCEL_WAIT_S:g} s after each, it answered {sorted(set(peer_seen))}): "
                "mcp 1.30 sends no notifications/cancelled, the handler runs on"
            ],
        ),
    ]


SCENARIO_TEXT = [
    "12. **MCP** (toolkit tools from stdio MCP servers; ours on mcp 2.x and Trio, the peer",
    "    on mcp 1.30 and asyncio, each from its own virtualenv; the servers are a raw",
    "    stdlib JSON-RPC server, the same for both): cold load of 5 servers, one of which",
    "    never answers ``initialize`` (2 s timeout), until the toolkit is ready, and the",
    "    processes left after closing it; ``tools/call`` round trip, sequential and 32 in",
    "    flight; the time from cancelling a call until the server reads",
    "    ``notifications/cancelled``.",
]
"""Scenario 12's description for the performance page."""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcp")
    parser.add_argument("scenario", choices=["cold", "calls", "cancel", "server"])
    parser.add_argument("side", nargs="?", choices=["ours", "peer"])
    parser.add_argument("--dir")
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--total", type=int, default=4000)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if args.scenario == "server":
        serve()
        return
    run = ours if args.side == "ours" else peer
    print(json.dumps(run(args.scenario, args)))


if __name__ == "__main__":
    main()
