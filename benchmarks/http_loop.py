"""Scenarios 8-10: the agent loop over HTTP, ours (Trio, httpx2) and the peer's
(toolnexus 0.21.0 ``create_client``, asyncio), against one FakeProvider process.

One process measures one side of one scenario against the provider at ``--url`` and
prints one JSON object on stdout::

    python -m benchmarks.http_loop overhead ours --url URL --runs 200 --warmup 30
    python -m benchmarks.http_loop burst peer --url URL --runs 1
    python -m benchmarks.http_loop cancel ours --url URL --runs 5

- ``overhead``: the SPEC scenario (2 model calls, 2 parallel tool calls) per run, not
  streamed, openai style. The provider cycles ``[tool calls, final text]``. Each run
  alternates, in the same process, with a run of the side's *floor*: a bare client of
  its own HTTP stack posting the same two request bodies the loop sent (captured once
  through ``body_transform``), encoding each and decoding each answer, no loop, no
  tools; a bare ``httpx2.AsyncClient`` on httpx2's own transport for ours, a bare
  ``urllib`` POST in ``asyncio.to_thread`` (the peer's own stack) for the peer. A run
  minus the floor run beside it is the loop's own overhead.
- ``burst``: one streamed call whose answer is 1,000 text deltas sent as fast as the
  socket takes them; the consumer takes 2 ms per delta (an async sleep). Deltas
  received and the time are reported; a run that has not ended after ``BURST_BOUND_S``
  is stopped and reported as hung.
- ``cancel``: the provider never answers; the run's cancel fires at 100 ms. Time from
  the cancel until ``run`` returns (a peer run still going ``RETURN_BOUND_S`` later is
  left behind and counted as that bound). Each run's ``[marker, cancel time]`` is
  reported (``time.monotonic()``); the orchestrator matches them with the close stamps
  of the provider process (:mod:`benchmarks.http_provider`) once this process has
  exited, and ``ended_at`` tells which closes only came with the exit.

The peer is used as a black box through its public API only (``create_client``,
``create_toolkit``, ``define_tool``, ``run``/``stream`` with ``cancel=asyncio.Event``).
The Trio side also measures each scenario's *limit* with a bare ``httpx2`` client
(for ``overhead``, also the two POSTs as raw bytes on one socket, the provider's own
response time).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.agent import ADD_SCHEMA, FINAL, QUESTION, SPEC_CALLS, WEATHER_SCHEMA, peak_rss_kib

MODEL = "bench-model"
KEY = "sk-bench"
BURST_DELTAS = 1000
BURST_TEXT = "tok "
CONSUMER_S = 0.002
BURST_BOUND_S = 10.0
CANCEL_AFTER_S = 0.100
RETURN_BOUND_S = 3.0
"""How long after the cancel a peer run may take before it is stopped and reported."""


def provider_scripts() -> dict[str, list[dict[str, Any]]]:
    """The provider's (cycled) script per scenario."""
    calls = [{"id": i, "name": n, "arguments": a} for i, n, a in SPEC_CALLS]
    return {
        "overhead": [{"tool_calls": calls}, {"text": FINAL}],
        "burst": [{"text": BURST_TEXT, "burst": BURST_DELTAS}],
        "cancel": [{"stall": True}],
    }


# ---------------------------------------------------------------------------
# Ours (Trio)
# ---------------------------------------------------------------------------


def ours(scenario: str, url: str, runs: int, warmup: int) -> dict[str, Any]:
    import attrs
    import httpx2
    import trio

    from toolnexus_trio import (
        BuiltinsConfig,
        CancelToken,
        ClientOptions,
        ToolContext,
        ToolkitOptions,
        create_client,
        create_toolkit,
        define_tool,
    )

    async def get_weather(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"Sunny, 22C in {args['city']}"

    async def add(args: dict[str, Any], ctx: ToolContext) -> str:
        return str(args["a"] + args["b"])

    tools = [
        define_tool("get_weather", "Weather of a city", WEATHER_SCHEMA, get_weather),
        define_tool("add", "Add two numbers", ADD_SCHEMA, add),
    ]

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        options = ClientOptions(base_url=url, style="openai", model=MODEL, api_key=KEY)
        async with (
            create_client(options) as client,
            await create_toolkit(
                ToolkitOptions(extra_tools=tools, builtins=BuiltinsConfig.off())
            ) as toolkit,
        ):
            if scenario == "overhead":
                # The two request bodies of one run, as the loop sends them.
                bodies: list[dict[str, Any]] = []

                def keep(body: dict[str, Any]) -> dict[str, Any]:
                    bodies.append(json.loads(json.dumps(body)))
                    return body

                capture = attrs.evolve(options, body_transform=keep)
                async with create_client(capture) as capturing:
                    await capturing.run(QUESTION, toolkit)
                assert len(bodies) == 2, bodies
                headers = {"authorization": f"Bearer {KEY}"}
                async with httpx2.AsyncClient(headers=headers) as bare:

                    async def floor() -> None:
                        for body in bodies:
                            content = json.dumps(body, separators=(",", ":")).encode()
                            answer = await bare.post(
                                url + "/chat/completions",
                                content=content,
                                headers={"content-type": "application/json"},
                            )
                            json.loads(answer.content)

                    async def loop() -> None:
                        result = await client.run(QUESTION, toolkit)
                        assert result.text == FINAL, result.text
                        assert len(result.tool_calls) == 2

                    out |= await _alternate(loop, floor, runs, warmup, trio.lowlevel.checkpoint)
                out["raw_ms"] = _raw_overhead(url, warmup, runs)
            elif scenario == "burst":
                out["samples"], out["received"], out["hung"] = [], [], []
                for _ in range(runs):
                    received = 0
                    t0 = time.perf_counter()
                    with trio.move_on_after(BURST_BOUND_S) as bound:
                        async with client.stream(QUESTION) as events:
                            async for event in events:
                                if event["type"] == "text" and event["delta"]:
                                    received += 1
                                    await trio.sleep(CONSUMER_S)
                    out["samples"].append((time.perf_counter() - t0) * 1e3)
                    out["received"].append(received)
                    out["hung"].append(bound.cancelled_caught)
                out["limit_ms"] = await _bare_consumer()
            else:
                out["samples"], out["marks"], out["status"] = [], [], []
                for i in range(runs):
                    marker = f"cancel-ours-{os.getpid()}-{i}"
                    token = CancelToken()
                    fired: list[float] = []

                    async def cancel_later(token: CancelToken = token, fired: list = fired) -> None:
                        await trio.sleep(CANCEL_AFTER_S)
                        fired.append(time.monotonic())
                        token.cancel()

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(cancel_later)
                        result = await client.run(marker, cancel=token)
                        returned = time.monotonic()
                    out["status"].append(result.status)
                    out["samples"].append((returned - fired[0]) * 1e3)
                    out["marks"].append([marker, fired[0]])
                out["limit_ms"], out["limit_mark"] = await _bare_cancel(url)
        return out

    result: dict[str, Any] = trio.run(main)
    result["peak_rss_kib"] = peak_rss_kib()
    return result


async def _alternate(
    lib: Callable[[], Awaitable[None]],
    floor: Callable[[], Awaitable[None]],
    runs: int,
    warmup: int,
    checkpoint: Callable[[], Awaitable[None]],
) -> dict[str, list[float]]:
    """*runs* timed runs of *lib* and of *floor*, alternating, after *warmup* of each;
    which one goes first flips every run, so neither always follows the other.

    Wall time (``samples``, ``limit_ms``) and process CPU time (``samples_cpu``,
    ``limit_ms_cpu``; all threads, steadier on a shared machine), in ms.
    """
    for _ in range(warmup):
        await lib()
        await floor()
    gc.collect()
    out: dict[str, list[float]] = {k: [] for k in ("samples", "limit_ms")}
    out |= {f"{k}_cpu": [] for k in ("samples", "limit_ms")}
    for i in range(runs):
        pair = ((lib, "samples"), (floor, "limit_ms"))
        for fn, key in pair if i % 2 == 0 else pair[::-1]:
            await checkpoint()
            t0, c0 = time.perf_counter(), time.process_time()
            await fn()
            out[f"{key}_cpu"].append((time.process_time() - c0) * 1e3)
            out[key].append((time.perf_counter() - t0) * 1e3)
    return out


def _raw_overhead(url: str, warmup: int, runs: int) -> list[float]:
    """The provider's own response time with no HTTP library: the same two POSTs per
    run as pre-encoded bytes on one blocking keep-alive socket, each answer read to its
    ``Content-Length`` (a blocking socket is fine here: nothing else runs)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": QUESTION}]})
    request = (
        f"POST {parts.path}/chat/completions HTTP/1.1\r\nhost: {parts.netloc}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n{body}"
    ).encode()
    samples: list[float] = []
    with socket.create_connection((parts.hostname, parts.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        for i in range(warmup + runs):
            t0 = time.perf_counter()
            for _ in range(2):
                sock.sendall(request)
                while b"\r\n\r\n" not in buffer:
                    buffer += sock.recv(65536)
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += sock.recv(65536)
                json.loads(buffer[:length])
                buffer = buffer[length:]
            if i >= warmup:
                samples.append((time.perf_counter() - t0) * 1e3)
    return samples


async def _bare_consumer() -> float:
    """The consumer's own time: 1,000 awaits of ``trio.sleep(0.002)``, no network."""
    import trio

    t0 = time.perf_counter()
    for _ in range(BURST_DELTAS):
        await trio.sleep(CONSUMER_S)
    return (time.perf_counter() - t0) * 1e3


async def _bare_cancel(url: str) -> tuple[float, list[Any]]:
    """A bare httpx2 POST to the stalled provider, cancelled by a Trio scope at 100 ms:
    time until the ``await`` unwinds, and the ``[marker, cancel time]`` of the close."""
    import httpx2
    import trio

    marker = f"cancel-bare-{os.getpid()}"
    body = {"model": MODEL, "messages": [{"role": "user", "content": marker}]}
    async with httpx2.AsyncClient() as http:
        with trio.CancelScope() as scope:
            fired: list[float] = []

            async def later() -> None:
                await trio.sleep(CANCEL_AFTER_S)
                fired.append(time.monotonic())
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(later)
                await http.post(url + "/chat/completions", json=body)
        returned = time.monotonic()
    return (returned - fired[0]) * 1e3, [marker, fired[0]]


# ---------------------------------------------------------------------------
# Peer (toolnexus 0.21.0, asyncio) - black-box use of its public API
# ---------------------------------------------------------------------------


def peer(scenario: str, url: str, runs: int, warmup: int) -> dict[str, Any]:
    import asyncio
    import urllib.request

    import toolnexus

    async def get_weather(city: str) -> str:
        return f"Sunny, 22C in {city}"

    async def add(a: float, b: float) -> str:
        return str(a + b)

    tools = [
        toolnexus.define_tool(
            get_weather, name="get_weather", description="Weather", input_schema=WEATHER_SCHEMA
        ),
        toolnexus.define_tool(add, name="add", description="Add", input_schema=ADD_SCHEMA),
    ]
    loop_errors: list[str] = []
    stranded: list[Any] = []  # peer runs that never returned (kept referenced)

    async def main() -> dict[str, Any]:
        # The peer's stream reader reports overflows through the loop's exception
        # handler; count them instead of printing thousands of tracebacks.
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: loop_errors.append(
                type(context.get("exception")).__name__ or str(context.get("message"))
            )
        )
        client = toolnexus.create_client(base_url=url, style="openai", model=MODEL, api_key=KEY)
        out: dict[str, Any] = {}
        toolkit = await toolnexus.create_toolkit(extra_tools=tools, builtins=False)
        async with toolkit:
            if scenario == "overhead":
                # The two request bodies of one run, as the peer's loop sends them.
                bodies: list[dict[str, Any]] = []

                def keep(body: dict[str, Any]) -> None:
                    bodies.append(json.loads(json.dumps(body)))

                capturing = toolnexus.create_client(
                    base_url=url, style="openai", model=MODEL, api_key=KEY, body_transform=keep
                )
                await capturing.run(QUESTION, toolkit)
                assert len(bodies) == 2, bodies
                headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}

                def post(body: dict[str, Any]) -> None:
                    request = urllib.request.Request(
                        url + "/chat/completions",
                        data=json.dumps(body).encode(),
                        method="POST",
                        headers=headers,
                    )
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        json.loads(answer.read())

                async def floor() -> None:
                    for body in bodies:
                        await asyncio.to_thread(post, body)

                async def loop() -> None:
                    result = await client.run(QUESTION, toolkit)
                    assert result.text == FINAL, result.text
                    assert len(result.tool_calls) == 2

                out |= await _alternate(loop, floor, runs, warmup, lambda: asyncio.sleep(0))
            elif scenario == "burst":
                out["samples"], out["received"], out["hung"] = [], [], []
                for _ in range(runs):
                    received = [0]

                    async def consume(received: list[int] = received) -> None:
                        async for event in client.stream(QUESTION):
                            if event.get("type") == "text" and event.get("delta"):
                                received[0] += 1
                                await asyncio.sleep(CONSUMER_S)

                    t0 = time.perf_counter()
                    try:
                        await asyncio.wait_for(consume(), BURST_BOUND_S)
                        hung = False
                    except TimeoutError:
                        hung = True
                    out["samples"].append((time.perf_counter() - t0) * 1e3)
                    out["received"].append(received[0])
                    out["hung"].append(hung)
            else:
                out["samples"], out["marks"], out["status"] = [], [], []
                for i in range(runs):
                    marker = f"cancel-peer-{os.getpid()}-{i}"
                    event = asyncio.Event()
                    fired: list[float] = []

                    def fire(event: asyncio.Event = event, fired: list = fired) -> None:
                        fired.append(time.monotonic())
                        event.set()

                    asyncio.get_running_loop().call_later(CANCEL_AFTER_S, fire)
                    returned: float | None = None
                    # Not wait_for: cancelling a run that ignores its cancel may never end
                    # either. A run still going at the bound is left behind (os._exit).
                    task = asyncio.ensure_future(client.run(marker, cancel=event))
                    await asyncio.wait({task}, timeout=CANCEL_AFTER_S + RETURN_BOUND_S)
                    if not task.done():
                        out["status"].append(f"still running {RETURN_BOUND_S:g} s after the cancel")
                        stranded.append(task)
                    elif task.exception() is not None:
                        out["status"].append(f"raised {type(task.exception()).__name__}")
                        returned = time.monotonic()
                    else:
                        out["status"].append(f"returned {getattr(task.result(), 'status', '?')}")
                        returned = time.monotonic()
                    out["samples"].append(
                        RETURN_BOUND_S * 1e3 if returned is None else (returned - fired[0]) * 1e3
                    )
                    out["marks"].append([marker, fired[0]])
        out["loop_errors"] = len(loop_errors)
        out["loop_error_kinds"] = sorted(set(loop_errors))
        return out

    # Not asyncio.run: at exit it joins the executor, where the peer's abandoned urllib
    # threads stay blocked on a provider that never answers. main() exits the process.
    result = asyncio.new_event_loop().run_until_complete(main())
    result["peak_rss_kib"] = peak_rss_kib()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", choices=["overhead", "burst", "cancel"])
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--url", required=True, help="the provider's base URL (.../v1)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    fn = ours if args.side == "ours" else peer
    result = fn(args.scenario, args.url, args.runs, args.warmup)
    result["ended_at"] = time.monotonic()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    # The peer leaves its urllib threads blocked on abandoned requests (cancel) and its
    # executor would wait for them at exit: leave without joining them.
    os._exit(0)


if __name__ == "__main__":
    main()
