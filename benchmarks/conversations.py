"""Scenario 21: a thousand conversations in one process (issue 39), ours and the peers'.

N conversations run at once in one process, each two model turns with one tool call,
against a streaming model server in its own process (OpenAI chat completions, SSE):
turn 1 streams one ``lookup`` tool call, the side runs the tool, turn 2 streams the final
answer as ``TOKENS`` text deltas. The server holds every final answer until all N second
turns have arrived, so every conversation is in flight at once when memory is measured.

    python -m benchmarks.conversations server    # prints {"port": P}; stdin EOF stops it
    python -m benchmarks.conversations ours --url URL --n 1000
    python -m benchmarks.conversations pydantic-ai --url URL --n 1000   # from its own venv
    python -m benchmarks.conversations openai-agents --url URL --n 1000

Each side prints one JSON object: ``n``, ``tokens`` (the deltas the server streams, the
same for every side: one tool call and ``TOKENS`` text deltas per conversation),
``events`` (the streamed events the side's own API handed out; each framework counts
differently), ``kib_per_conversation`` (peak RSS during the run minus the RSS after
one warm-up conversation, over N), ``cpu_us_per_token`` (this process's CPU time for
the run, all threads, over ``tokens``), ``wall_s``.

The peers are driven through their public APIs only (pydantic-ai's ``Agent.iter`` with
streamed model requests, the OpenAI Agents SDK's ``Runner.run_streamed``), each with its
own defaults but one: each is handed an ``httpx2.AsyncClient`` of N connections (the
OpenAI SDK's default pool stops at 100, so 900 conversations would wait for a connection
behind answers the server holds until all N are asked: a deadlock, not a figure). Ours
runs on its client's defaults. This module imports
only the standard library at the top: the peers run it from their own virtualenvs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOKENS = 20
"""Text deltas in each final answer."""
MODEL = "bench-model"
KEY = "sk-bench"
QUESTION = "What is the code of Paris?"
TOOL_ARGS = '{"city": "Paris"}'
SIDES = ("ours", "pydantic-ai", "openai-agents")
SCENARIO_TEXT = [
    "21. **A thousand conversations** (issue 39): 1,000 conversations at once in one",
    f"    process, each two streamed turns with one tool call ({TOKENS} text deltas in the",
    "    answer), against a raw streaming server in its own process that holds every answer",
    "    until all are asked; peak RSS growth per conversation and CPU per streamed delta,",
    "    ours with the client's defaults, pydantic-ai and the OpenAI Agents SDK from their",
    "    own virtualenvs.",
]
"""Scenario 21's description for the performance page."""


# -- the streaming model server (asyncio, standard library only) -------------------------


def _sse(obj: dict[str, Any]) -> bytes:
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _usage() -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": TOKENS, "total_tokens": 10 + TOKENS},
    }


class _Server:
    """Answers each POST with a streamed tool call (no tool message yet) or a streamed
    final answer; final answers wait at a barrier of *n* second turns (reset per wave)."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[None]] = []
        self.barrier = 1

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                request_line = head.split(b"\r\n", 1)[0]
                body = await reader.readexactly(length)
                if request_line.startswith(b"POST /barrier"):
                    self.barrier = int(body or b"1")
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                request = json.loads(body)
                has_tool = any(m.get("role") == "tool" for m in request.get("messages", []))
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                if has_tool:
                    await self._wait_barrier()
                    for i in range(TOKENS):
                        delta = (
                            {"content": f"t{i} "} if i else {"role": "assistant", "content": "t0 "}
                        )
                        writer.write(_sse(_chunk(delta)))
                        await writer.drain()
                    writer.write(_sse(_chunk({}, "stop")))
                else:
                    call = {"index": 0, "id": "call_1", "type": "function"}
                    call["function"] = {"name": "lookup", "arguments": ""}
                    writer.write(_sse(_chunk({"role": "assistant", "tool_calls": [call]})))
                    args = {"index": 0, "function": {"arguments": TOOL_ARGS}}
                    writer.write(_sse(_chunk({"tool_calls": [args]})))
                    writer.write(_sse(_chunk({}, "tool_calls")))
                writer.write(_sse(_usage()))
                writer.write(_done())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _wait_barrier(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        if len(self.waiting) >= self.barrier:
            waiting, self.waiting = self.waiting, []
            for f in waiting:
                f.set_result(None)
        await future


def _done() -> bytes:
    data = b"data: [DONE]\n\n"
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


async def _serve() -> None:
    server = _Server()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, backlog=4096)
    port = listener.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    # Stopped by its parent closing our stdin.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    listener.close()


def _set_barrier(url: str, n: int) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
    conn.request("POST", "/barrier", body=str(n).encode())
    conn.getresponse().read()
    conn.close()


# -- measuring -------------------------------------------------------------------------


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Meter:
    """Peak RSS sampled by the side's own event loop while the wave runs."""

    def __init__(self) -> None:
        self.peak = 0

    def sample(self) -> None:
        self.peak = max(self.peak, _rss_kib())


def _figures(
    n: int, events: int, base_kib: int, meter: _Meter, cpu: float, wall: float
) -> dict[str, Any]:
    tokens = n * (TOKENS + 1)
    return {
        "n": n,
        "tokens": tokens,
        "events": events,
        "kib_per_conversation": (meter.peak - base_kib) / n,
        "cpu_us_per_token": cpu * 1e6 / tokens,
        "wall_s": wall,
        "peak_rss_kib": meter.peak,
    }


# -- ours (Trio) -----------------------------------------------------------------------


def ours(url: str, n: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio import ClientOptions, Toolkit, create_client, define_tool

    async def lookup(args: dict[str, Any], ctx: Any) -> str:
        return f"code of {args['city']}: 75"

    tool = define_tool(
        "lookup",
        "Look a city's code up.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        lookup,
    )
    toolkit = Toolkit([tool])

    async def main() -> dict[str, Any]:
        options = ClientOptions(base_url=url, style="openai", model=MODEL, api_key=KEY)
        async with create_client(options) as client:
            counted = [0]

            async def one() -> None:
                async with client.stream(QUESTION, toolkit) as events:
                    async for event in events:
                        if event["type"] in ("text", "tool_call"):
                            counted[0] += 1
                        elif event["type"] == "done":
                            assert event["result"].text.startswith("t0 "), event
                            assert len(event["result"].tool_calls) == 1

            await trio.to_thread.run_sync(_set_barrier, url, 1)
            await one()  # warm-up: imports, the pool's first connection, schemas
            base = _rss_kib()
            await trio.to_thread.run_sync(_set_barrier, url, n)
            counted[0] = 0
            meter = _Meter()
            cpu0, t0 = _cpu_s(), time.perf_counter()

            async def sampler() -> None:
                while True:
                    meter.sample()
                    await trio.sleep(0.01)

            async with trio.open_nursery() as outer:
                outer.start_soon(sampler)
                async with trio.open_nursery() as nursery:
                    for _ in range(n):
                        nursery.start_soon(one)
                outer.cancel_scope.cancel()
            meter.sample()
            return _figures(n, counted[0], base, meter, _cpu_s() - cpu0, time.perf_counter() - t0)

    return trio.run(main)


# -- peers (asyncio), each through its public API --------------------------------------


async def _wave(n: int, url: str, one: Callable[[], Any], counted: list[int]) -> dict[str, Any]:
    await asyncio.to_thread(_set_barrier, url, 1)
    await one()
    base = _rss_kib()
    await asyncio.to_thread(_set_barrier, url, n)
    counted[0] = 0
    meter = _Meter()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    wave = asyncio.gather(*(one() for _ in range(n)))
    while not wave.done():
        meter.sample()
        await asyncio.sleep(0.01)
    await wave
    meter.sample()
    return _figures(n, counted[0], base, meter, _cpu_s() - cpu0, time.perf_counter() - t0)


def pydantic_ai(url: str, n: int) -> dict[str, Any]:
    import httpx2
    from pydantic_ai import Agent
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    pool = httpx2.AsyncClient(limits=httpx2.Limits(max_connections=n), timeout=600)
    provider = OpenAIProvider(base_url=url, api_key=KEY, http_client=pool)
    agent = Agent(OpenAIChatModel(MODEL, provider=provider))

    @agent.tool_plain
    def lookup(city: str) -> str:
        """Look a city's code up."""
        return f"code of {city}: 75"

    counted = [0]

    async def one() -> None:
        # Agent.iter with each model request streamed: the documented streaming loop.
        async with agent.iter(QUESTION) as run:
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as stream:
                        async for event in stream:
                            if isinstance(event, PartStartEvent | PartDeltaEvent):
                                counted[0] += 1
        assert run.result is not None
        assert str(run.result.output).startswith("t0 ")

    return asyncio.run(_wave(n, url, one, counted))


def openai_agents(url: str, n: int) -> dict[str, Any]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def lookup(city: str) -> str:
        """Look a city's code up."""
        return f"code of {city}: 75"

    import httpx2

    pool = httpx2.AsyncClient(limits=httpx2.Limits(max_connections=n), timeout=600)
    model = OpenAIChatCompletionsModel(
        model=MODEL, openai_client=AsyncOpenAI(base_url=url, api_key=KEY, http_client=pool)
    )
    agent = Agent(name="bench", instructions="Answer.", model=model, tools=[lookup])
    counted = [0]

    async def one() -> None:
        result = Runner.run_streamed(agent, QUESTION)
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                counted[0] += 1
        assert str(result.final_output).startswith("t0 ")

    return asyncio.run(_wave(n, url, one, counted))


# -- orchestration ---------------------------------------------------------------------


def peer_pythons() -> dict[str, str]:
    """The peers' interpreters: ``BENCH_XF_XBENCH_<NAME>_PYTHON`` as the noxfile sets them,
    else ``.nox/xbench-<name>`` beside this checkout."""
    root = Path(__file__).resolve().parent.parent
    out = {}
    for side in SIDES[1:]:
        env = os.environ.get(f"BENCH_XF_XBENCH_{side.upper().replace('-', '_')}_PYTHON")
        python = Path(env) if env else root / ".nox" / f"xbench-{side}" / "bin" / "python"
        if python.exists():
            out[side] = str(python)
    return out


def collect(
    rounds: int,
    n: int,
    add: Callable[[str, str, dict[str, Any]], None],
    progress: Callable[[str], None],
) -> None:
    """Scenario 21 for ``benchmarks.run``: one server, one fresh process per side and round."""
    root = str(Path(__file__).resolve().parent.parent)
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.conversations", "server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=root,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        port = json.loads(server.stdout.readline())["port"]
        url = f"http://127.0.0.1:{port}/v1"
        sides = {"ours": sys.executable, **peer_pythons()}
        for r in range(rounds):
            for side, python in sides.items():
                env = dict(os.environ, PYTHONPATH=root) if side != "ours" else None
                proc = subprocess.run(
                    [python, "-m", "benchmarks.conversations", side, "--url", url, "--n", str(n)],
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=True,
                    cwd=root,
                    env=env,
                )
                add("conversations", side, json.loads(proc.stdout.strip().splitlines()[-1]))
            progress(f"1,000 conversations round {r + 1}/{rounds}")
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        assert server.stdout is not None
        server.stdout.close()


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Any]:
    """The scenario's rows: memory per conversation and CPU per streamed token, ours
    against the better of the peers measured."""
    from benchmarks.rows import Row, Stats, Target

    data = raw.get("conversations", {})
    ours_runs = data.get("ours", [])
    if not ours_runs:
        return []
    peers = {side: runs for side, runs in data.items() if side != "ours" and runs}
    n = ours_runs[0]["n"]
    out = []
    for key, metric, unit in (
        ("kib_per_conversation", "memory per conversation (peak RSS)", "KiB"),
        ("cpu_us_per_token", "CPU per streamed token", "µs"),
    ):
        ours_stats = Stats.of([run[key] for run in ours_runs])
        best = min(
            peers, key=lambda s: Stats.of([run[key] for run in peers[s]]).median, default=None
        )
        # Without a peer measured, the peer column repeats ours and the row has no target.
        peer_stats = Stats.of([run[key] for run in peers[best]]) if best else ours_stats
        notes = [f"N = {n} conversations in flight at once, {TOKENS} text deltas each"]
        notes += [
            f"{side}: {Stats.of([run[key] for run in runs]).median:.1f} {unit}"
            for side, runs in peers.items()
        ] or ["peers not measured (no .nox/xbench-* virtualenv)"]
        out.append(
            Row(
                f"21. {n:,} conversations in one process",
                metric + (f" (vs {best})" if best else ""),
                unit,
                ours_stats,
                peer_stats,
                "",
                Target("ratio", "<=", 0.25) if best else None,
                notes,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.conversations")
    parser.add_argument("side", choices=("server", *SIDES))
    parser.add_argument("--url", default="")
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    if args.side == "server":
        asyncio.run(_serve())
        return 0
    run = {"ours": ours, "pydantic-ai": pydantic_ai, "openai-agents": openai_agents}[args.side]
    print(json.dumps(run(args.url, args.n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
