"""Scenario 13: ``gateway --mcp`` (``python -m benchmarks.mcp_gateway``).

- Agent-to-handler round trip: the mcp SDK's stdio client -> ``gateway --mcp`` -> our
  host (a handler that returns at once), sequential and 16 in flight; the limit is our
  direct gateway-to-host round trip (an in-process :class:`Gateway`, no MCP hop).
- Cancel latency: from the client's ``notifications/cancelled`` (the moment the call's
  scope is cancelled) to the host handler's cancellation, which our host delivers right
  after answering -32001 (both stamps are CLOCK_MONOTONIC, comparable across processes).

The host is the test host ``tests/gateway_hosts/our_host.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "tests" / "gateway_hosts" / "our_host.py"
CODE = re.compile(r"claim code ([A-Z0-9]{4}-[A-Z0-9]{2})")
SCENARIO_TEXT = "13 gateway --mcp: agent-to-handler round trip, cancel latency"


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[int(len(ordered) * 0.95) - 1] * 1000,
    }


def _has_manifest(directory: Path) -> bool:
    return bool(list(directory.glob("*.json")))


def _code(err: Path) -> str | None:
    found = CODE.search(err.read_text())
    return found.group(1) if found else None


def _open_log(err: Path) -> Any:
    return err.open("w")


async def _host(directory: Path) -> trio.Process:
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(HOST), str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    while not _has_manifest(directory):  # noqa: ASYNC110 - another process
        await trio.sleep(0.02)
    return proc


async def measure(n: int = 300, cancels: int = 20) -> dict[str, Any]:
    """Run every measurement once; returns the figures."""
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
                times = []
                for _ in range(n):
                    t = time.perf_counter()
                    await gw.invoke("ours", "echo", {"x": 1})
                    times.append(time.perf_counter() - t)
                out["direct"] = _ms(times)
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
                    times = []
                    for _ in range(n):
                        t = time.perf_counter()
                        await client.call_tool("ours__echo", {"x": 1})
                        times.append(time.perf_counter() - t)
                    out["mcp_sequential"] = _ms(times)
                    t = time.perf_counter()
                    async with trio.open_nursery() as nursery:
                        for _ in range(16):

                            async def worker() -> None:
                                for _ in range(n // 16):
                                    await client.call_tool("ours__echo", {"x": 1})

                            nursery.start_soon(worker)
                    elapsed = time.perf_counter() - t
                    out["mcp_16_in_flight_calls_per_s"] = 16 * (n // 16) / elapsed
                    latencies = []
                    for _ in range(cancels):
                        with trio.CancelScope() as scope:
                            async with trio.open_nursery() as nursery:
                                nursery.start_soon(client.call_tool, "ours__slow", {})
                                await trio.sleep(0.05)
                                cancelled_at = time.monotonic()
                                scope.cancel()
                        while True:
                            seen = json.loads(
                                (await client.call_tool("ours__seen", {})).content[0].text  # type: ignore[union-attr]
                            )
                            if seen["cancelled_at"] and seen["cancelled_at"] > cancelled_at:
                                break
                            await trio.sleep(0.005)
                        latencies.append(seen["cancelled_at"] - cancelled_at)
                    out["cancel_latency"] = _ms(latencies)
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
    return out


if __name__ == "__main__":
    print(json.dumps(trio.run(measure)))
