"""``gateway --mcp`` in the middle: the agent's MCP request carries its trace context to
the gateway (a process with no tracer provider of its own), which passes it on in
``actions/invoke``, so the app handler's span (another process) is in the agent's trace,
a child of the agent's MCP request span."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import trio
from opentelemetry.trace import SpanKind
from otel_helpers import attrs_of, global_recorder, parent_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
from test_gateway_mcp import claim, gateway, text

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


@contextlib.asynccontextmanager
async def traced_host(spans: Path, directory: Path) -> AsyncIterator[None]:
    directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - a local temp dir
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(HERE / "traced_host.py"), str(spans), str(directory)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        with trio.fail_after(20):
            while not list(directory.glob("*.json")):  # noqa: ASYNC110, ASYNC240 - another process
                await trio.sleep(0.02)
        yield
    finally:
        with trio.move_on_after(5, shield=True):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def test_the_handlers_span_is_in_the_agents_trace(tmp_path: Path) -> None:
    spans = tmp_path / "host-spans.jsonl"
    directory = tmp_path / "instances"
    with global_recorder() as rec:
        async with traced_host(spans, directory), gateway(tmp_path, directory) as (client, agent):
            await claim(client, agent, "ours")
            assert text(await client.call_tool("ours__traced", {})) == "traced"
    sent = [
        s
        for s in rec.spans()
        if s.kind is SpanKind.CLIENT and attrs_of(s).get("mcp.method.name") == "tools/call"
    ]
    request = next(s for s in sent if "ours__traced" in s.name)
    theirs = [json.loads(line) for line in spans.read_text().splitlines()]
    handler = next(s for s in theirs if s["name"] == "handler work")
    assert handler["trace_id"] == request.context.trace_id
    assert handler["parent"] == request.context.span_id
    assert parent_of(request) is None  # the test's own request: the root of the trace
