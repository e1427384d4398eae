"""Scenario 13: ``gateway --mcp`` (``python -m benchmarks.mcp_gateway``).

- Agent-to-handler round trip: the mcp SDK's stdio client -> ``gateway --mcp`` -> our
  host (a handler that returns at once), sequential and 16 in flight; the limit is our
  direct gateway-to-host round trip (an in-process :class:`Gateway`, no MCP hop).
- Cancel latency, for a handler that ignores cancellation: from the client's
  ``notifications/cancelled`` (the moment the call's scope is cancelled) to the host
  answering -32001 (our host flags the cancel in the same step; the handler stamps it,
  CLOCK_MONOTONIC, comparable across processes). The limit: the same through the direct
  gateway.

The host is ``benchmarks/hosts/gateway_mcp.py``. The figures are raw samples; the rows
of the report are :func:`gateway_mcp_rows`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
CODE = re.compile(r"claim code ([A-Z0-9]{4}-[A-Z0-9]{2})")
IN_FLIGHT = 16
SCENARIO_TEXT = [
    "13. **Gateway for agents** (``python -m toolnexus_trio gateway --mcp``): the mcp",
    "    SDK's stdio client calls a tool of our host through the gateway (a handler that",
    "    returns at once), sequentially and with 16 calls in flight; then cancels a call",
    "    whose handler ignores cancellation and times the host's -32001 from the client's",
    "    ``notifications/cancelled`` (target 10 ms). The peer column here is the limit, not",
    "    a peer: the same through our in-process gateway dialling the host directly.",
]
"""Scenario 13's description for the performance page."""


def _has_manifest(directory: Path) -> bool:
    return bool(list(directory.glob("*.json")))


def _code(err: Path) -> str | None:
    found = CODE.search(err.read_text())
    return found.group(1) if found else None


def _open_log(err: Path) -> Any:
    return err.open("w")


async def _host(directory: Path) -> trio.Process:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "benchmarks.hosts.gateway_mcp", str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    while not _has_manifest(directory):  # noqa: ASYNC110 - another process
        await trio.sleep(0.02)
    return proc


async def _bench(call: Any, n: int, cancels: int) -> dict[str, list[float]]:
    """Sequential and in-flight round trips and cancel latencies through *call*
    (``call(action, args)`` returns the parsed output)."""
    seq: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        await call("echo", {"x": 1})
        seq.append(time.perf_counter() - t)
    t = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(IN_FLIGHT):

            async def worker() -> None:
                for _ in range(n // IN_FLIGHT):
                    await call("echo", {"x": 1})

            nursery.start_soon(worker)
    inflight = (time.perf_counter() - t) / (IN_FLIGHT * (n // IN_FLIGHT))
    latencies: list[float] = []
    for _ in range(cancels):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "stubborn", {})
                await trio.sleep(0.05)
                cancelled_at = time.monotonic()
                scope.cancel()
        while True:
            seen = await call("seen", {})
            if seen["cancelled_at"] and seen["cancelled_at"] > cancelled_at:
                break
            await trio.sleep(0.005)
        latencies.append(seen["cancelled_at"] - cancelled_at)
    return {
        "sequential_us": [x * 1e6 for x in seq],
        "inflight_us": [inflight * 1e6],
        "cancel_ms": [x * 1e3 for x in latencies],
    }


async def measure(n: int = 320, cancels: int = 20) -> dict[str, Any]:
    """Run every measurement once; returns the raw samples (``mcp`` and ``direct``)."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from toolnexus_trio.tesseron import Gateway
    from toolnexus_trio.tesseron._manifest import read_manifest_urls

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        procs = [await _host(a), await _host(b)]
        try:
            # The limit: our gateway dialing the host directly.
            async with Gateway() as gw:
                session = await gw.connect(read_manifest_urls(b)[0])
                assert session.claim_code is not None
                gw.claim(session.claim_code)

                async def direct(action: str, args: Any) -> Any:
                    return await gw.invoke("ours", action, args)

                out["direct"] = await _bench(direct, n, cancels)
            err = Path(tmp, "gw.err")
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "toolnexus_trio", "gateway", "--mcp", "--instances-dir", str(a)],
                env={"PYTHONPATH": str(ROOT)},
            )
            with _open_log(err) as errlog:
                async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                    while (code := _code(err)) is None:  # noqa: ASYNC110 - another process
                        await trio.sleep(0.02)
                    await client.call_tool("tesseron__claim_session", {"code": code})

                    async def via_mcp(action: str, args: Any) -> Any:
                        result = await client.call_tool(f"ours__{action}", args)
                        return json.loads(result.content[0].text)  # type: ignore[union-attr]

                    out["mcp"] = await _bench(via_mcp, n, cancels)
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
    return out


def gateway_mcp_rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Any]:
    """The report rows of scenario 13 (empty when it did not run). The "peer" side of
    each row is the limit: the same measurement through the direct gateway."""
    from benchmarks.rows import Row, Stats, Target

    runs = raw.get("gateway_mcp", {}).get("ours", [])
    if not runs:
        return []

    def stats(side: str, field: str) -> Any:
        return Stats.of([x for run in runs for x in run[side][field]])

    limit = "our in-process gateway dialling the host directly (no MCP hop; peer column)"
    return [
        Row(
            "13. gateway --mcp round trip, sequential (peer column: the direct limit)",
            "agent tools/call -> handler -> result",
            "µs",
            stats("mcp", "sequential_us"),
            stats("direct", "sequential_us"),
            limit,
            None,
            ["the MCP hop adds a stdio JSON-RPC round trip and the mcp SDK's dispatch"],
        ),
        Row(
            f"13. gateway --mcp round trip, {IN_FLIGHT} in flight (peer column: the limit)",
            "wall time per tools/call",
            "µs",
            stats("mcp", "inflight_us"),
            stats("direct", "inflight_us"),
            limit,
            None,
        ),
        Row(
            "13. gateway --mcp cancel latency (peer column: the direct limit)",
            "notifications/cancelled -> host's -32001",
            "ms",
            stats("mcp", "cancel_ms"),
            stats("direct", "cancel_ms"),
            limit + "; the handler ignores cancellation",
            Target("ours", "<=", 10.0, unit="ms"),
        ),
    ]


if __name__ == "__main__":
    print(json.dumps(trio.run(measure)))
