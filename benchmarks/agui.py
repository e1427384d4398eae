"""Scenario 23: the AG-UI endpoint (issue 35). One process measures one case and prints
one JSON object on stdout::

    python -m benchmarks.agui latency --tokens 400
    python -m benchmarks.agui disconnect --rounds 20
    python -m benchmarks.agui concurrent --runs 200 --words 50

- ``latency``: a raw provider on loopback (an OpenAI-style SSE stream, written here so
  that it can stamp each token the moment its bytes are on the socket) streams one
  token every 2 ms; our endpoint (:class:`toolnexus_trio.ui.UiServing`) runs the agent
  on it and a raw client reads the AG-UI SSE. Figure: per token, the time from the
  provider's ``send_all`` to the ``TEXT_MESSAGE_CONTENT`` frame parsed on the client.
  Target: p50 <= 1 ms.
- ``disconnect``: a sub-agent runs a real ``bash`` (two ``sleep 60``); the client hangs
  up. Figure: from the hang-up to the run ended and no process of the shell's group
  left. Target: p95 <= 50 ms.
- ``concurrent``: 200 AG-UI runs at once in one process against a streaming
  FakeProvider (each answer *words* words). Figures: the resident memory added at the
  peak divided by the runs, and the process's CPU time per streamed token (the
  FakeProvider, the endpoint and the 200 clients all count: they share the process);
  every run must get its whole answer.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.rows import Config, Row

SCENARIO_TEXT = [
    "23. **AG-UI endpoint** (issue 35): a token from the provider to its AG-UI SSE frame on",
    "    the client socket (loopback, one token every 2 ms); 200 concurrent AG-UI runs",
    "    against a streaming FakeProvider: memory per run, CPU per streamed token, none lost.",
]
"""Scenario 23's description for the performance page."""


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


async def _post_frames(port: int, body: dict[str, Any]) -> Any:
    """A raw AG-UI client: POST, then yield (perf_counter, frame) per SSE frame."""
    import h11
    import trio

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    conn = h11.Connection(h11.CLIENT)
    data = json.dumps(body).encode()
    headers = [
        ("host", f"127.0.0.1:{port}"),
        ("content-type", "application/json"),
        ("content-length", str(len(data))),
    ]
    await stream.send_all(
        conn.send(h11.Request(method="POST", target="/agui", headers=headers))
        + conn.send(h11.Data(data=data))
        + conn.send(h11.EndOfMessage())
    )
    buffer = b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return
            if isinstance(event, h11.Data):
                now = time.perf_counter()
                buffer += bytes(event.data)
                while b"\n\n" in buffer:
                    raw, buffer = buffer.split(b"\n\n", 1)
                    if raw.startswith(b"data: "):
                        yield now, json.loads(raw[6:])
    finally:
        await stream.aclose()


def _body(run: str, prompt: str) -> dict[str, Any]:
    return {
        "threadId": f"t-{run}",
        "runId": run,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u", "role": "user", "content": prompt}],
    }


async def _latency(tokens: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio.models import ClientOptions
    from toolnexus_trio.ui import AguiAgent, UiServing

    sent: list[float] = []

    async def provider(stream: trio.SocketStream) -> None:
        # One request: read its head and body, then stream *tokens* tokens, 2 ms apart.
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        for i in range(tokens):
            chunk = {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}}],
            }
            await stream.send_all(f"data: {json.dumps(chunk)}\n\n".encode())
            sent.append(time.perf_counter())
            await trio.sleep(0.002)
        end = {
            "id": "x",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
        }
        await stream.send_all(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        await stream.aclose()

    arrived: list[float] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, provider, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        llm = ClientOptions(
            base_url=f"http://127.0.0.1:{port}/v1",
            style="openai",
            model="m",
            api_key="k",
            retries=0,
        )
        async with UiServing(AguiAgent(llm)) as served:
            ui_port = int(served.url.rsplit(":", 1)[1].strip("/"))
            async for at, frame in _post_frames(ui_port, _body("r", "go")):
                if frame["type"] == "TEXT_MESSAGE_CONTENT":
                    arrived.append(at)
        nursery.cancel_scope.cancel()
    latencies = [(a - s) * 1000 for s, a in zip(sent, arrived, strict=True)]
    return {"latency_ms": latencies, "tokens": tokens}


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group *pgid* (a scan of /proc)."""
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and _alive_in(int(n), pgid)]


def _alive_in(pid: int, pgid: int) -> bool:
    """Whether *pid* is alive (not a zombie) and in process group *pgid*."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[0] != b"Z" and int(fields[2]) == pgid


def _written(path: str) -> bool:
    try:
        with open(path) as f:
            return bool(f.read().strip())
    except OSError:
        return False


def _forked(pgid: int) -> bool:
    return len(_group_members(pgid)) >= 3  # the shell and its two sleeps


def _gone(agent: Any, pgid: int, members: list[int]) -> bool:
    return not agent.live_runs() and not any(_alive_in(p, pgid) for p in members)


async def _until(condition: Any) -> None:
    """Poll *condition* every 0.5 ms (processes and files have no event to wait on)."""
    import trio

    while True:
        if condition():
            return
        await trio.sleep(0.0005)


async def _disconnect(rounds: int) -> dict[str, Any]:
    import tempfile

    import trio

    from toolnexus_trio.builtins import BuiltinsConfig, builtin_tools
    from toolnexus_trio.models import ClientOptions
    from toolnexus_trio.testing import open_fake_provider
    from toolnexus_trio.ui import AguiAgent, UiServing

    took: list[float] = []
    with tempfile.TemporaryDirectory() as work:
        pid_file = trio.Path(work) / "pid"
        script = [
            {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "wait"}}]},
            {
                "tool_calls": [
                    {
                        "name": "bash",
                        "arguments": {
                            "command": f"echo $$ > {pid_file}; sleep 60 & sleep 60; wait"
                        },
                    }
                ]
            },
        ]
        tools = [t for t in builtin_tools(BuiltinsConfig(base_dir=work)) if t.name == "bash"]
        async with open_fake_provider(script, cycle=True) as provider:
            llm = ClientOptions(base_url=provider.base_url, style="openai", model="m", api_key="k")
            agent = AguiAgent(llm, tools)
            async with UiServing(agent) as served:
                port = int(served.url.rsplit(":", 1)[1].strip("/"))
                for r in range(rounds):
                    if await pid_file.exists():
                        await pid_file.unlink()
                    frames = _post_frames(port, _body(f"d{r}", "go"))
                    async for _, frame in frames:
                        if frame["type"] == "TOOL_CALL_START" and frame["toolCallName"] == "bash":
                            break
                    await _until(functools.partial(_written, str(pid_file)))
                    pgid = int(await pid_file.read_text())
                    await _until(functools.partial(_forked, pgid))
                    members = _group_members(pgid)
                    started = time.perf_counter()
                    await frames.aclose()  # the client hangs up
                    # Only the known pids are polled: a scan of /proc would block the loop.
                    await _until(functools.partial(_gone, agent, pgid, members))
                    took.append((time.perf_counter() - started) * 1000)
    return {"disconnect_ms": took}


async def _concurrent(runs: int, words: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio.models import ClientOptions
    from toolnexus_trio.testing import open_fake_provider
    from toolnexus_trio.ui import AguiAgent, UiServing

    text = " ".join(f"w{i}" for i in range(words))
    async with open_fake_provider([{"text": text}], cycle=True) as provider:
        llm = ClientOptions(base_url=provider.base_url, style="openai", model="m", api_key="k")
        async with UiServing(AguiAgent(llm)) as served:
            port = int(served.url.rsplit(":", 1)[1].strip("/"))
            # One warm run: imports, pools and first-use allocations are not per run.
            async for _ in _post_frames(port, _body("warm", "go")):
                pass
            base = _rss_kib()
            peak = base
            got: list[str] = []
            deltas = 0
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()

            async def one(i: int) -> None:
                nonlocal deltas, peak
                parts: list[str] = []
                async for _, frame in _post_frames(port, _body(f"r{i}", "go")):
                    if frame["type"] == "TEXT_MESSAGE_CONTENT":
                        parts.append(frame["delta"])
                        deltas += 1
                        if deltas % 500 == 0:
                            peak = max(peak, _rss_kib())
                got.append("".join(parts))

            async with trio.open_nursery() as nursery:
                for i in range(runs):
                    nursery.start_soon(one, i)
            wall = time.perf_counter() - started
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            peak = max(peak, _rss_kib())
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "runs": runs,
        "complete": sum(1 for g in got if g == text),
        "deltas": deltas,
        "rss_per_run_kib": (peak - base) / runs,
        "cpu_us_per_token": cpu * 1e6 / max(1, deltas),
        "wall_s": wall,
    }


def collect(
    cfg: Config,
    add: Any,
    child: Any,
    progress: Any,
) -> None:
    """Run scenario 23 (a few seconds per round)."""
    rounds = 3 if cfg.agent_rounds > 2 else 1
    for r in range(rounds):
        add("agui_latency", "ours", child(["-m", "benchmarks.agui", "latency"], 120))
        progress(f"agui latency round {r + 1}/{rounds}")
    add("agui_disconnect", "ours", child(["-m", "benchmarks.agui", "disconnect"], 300))
    progress("agui disconnect -> every process gone")
    add("agui_concurrent", "ours", child(["-m", "benchmarks.agui", "concurrent"], 300))
    progress("agui 200 concurrent runs")


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Row]:
    """The scenario-23 rows (none when it did not run)."""
    from benchmarks.rows import Row, Stats, Target

    out: list[Row] = []
    if "agui_latency" in raw:
        samples = [s for run in raw["agui_latency"]["ours"] for s in run["latency_ms"]]
        stats = Stats.of(samples)
        out.append(
            Row(
                "23a. AG-UI: provider token -> SSE frame",
                "per token, loopback (peer column: the same)",
                "ms",
                stats,
                stats,
                "-",
                Target("ours", "<=", 1.0, unit="ms"),
                [f"{len(samples)} tokens, one every 2 ms; p95 {stats.p95:.3f} ms"],
            )
        )
    if "agui_disconnect" in raw:
        samples = [s for run in raw["agui_disconnect"]["ours"] for s in run["disconnect_ms"]]
        stats = Stats.of(samples)
        out.append(
            Row(
                "23c. AG-UI: client disconnect -> sub-agent's bash gone",
                "hang-up to the run ended and no process of the group left",
                "ms",
                stats,
                stats,
                "-",
                Target("ours", "<=", 50.0, stat="p95", unit="ms"),
                [f"{len(samples)} rounds; a sub-agent's bash of two sleep 60, polled in /proc"],
            )
        )
    if "agui_concurrent" in raw:
        run = raw["agui_concurrent"]["ours"][0]
        kib = Stats.of([run["rss_per_run_kib"]])
        out.append(
            Row(
                f"23b. AG-UI: {run['runs']} concurrent runs, memory per run",
                "resident memory added at the peak / runs",
                "KiB",
                kib,
                kib,
                "-",
                Target(
                    "ours",
                    ">=",
                    0.0,
                    unit="KiB",
                    checks=(("every run got its whole answer", run["complete"] == run["runs"]),),
                ),
                [
                    f"CPU per streamed token: {run['cpu_us_per_token']:.1f} us (provider, "
                    "endpoint and clients in one process)",
                    f"{run['complete']}/{run['runs']} runs complete, {run['deltas']} deltas, "
                    f"{run['wall_s']:.2f} s",
                ],
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    import trio

    parser = argparse.ArgumentParser(prog="python -m benchmarks.agui")
    parser.add_argument("case", choices=["latency", "disconnect", "concurrent"])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--words", type=int, default=50)
    args = parser.parse_args(argv)
    if args.case == "latency":
        result = trio.run(_latency, args.tokens)
        result["p50_ms"] = statistics.median(result["latency_ms"])
    elif args.case == "disconnect":
        result = trio.run(_disconnect, args.rounds)
    else:
        result = trio.run(_concurrent, args.runs, args.words)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
