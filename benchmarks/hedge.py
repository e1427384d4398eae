"""Scenario 19: a hedged model request whose first provider stalls (issue 38).

One process measures one round and prints one JSON object on stdout::

    python -m benchmarks.hedge --runs 40 --hedge-ms 50 --latency-ms 20

Two FakeProviders on loopback: the first (in this process, which sees every close)
never answers (``stall``), the second (a process of its own) answers after
``--latency-ms``. A client with ``fallback=[second]`` and
``hedge_after_ms=--hedge-ms`` runs one turn; alternately, a client of the second alone
runs the same turn (its latency as measured here). Target: the hedged turn's median is
within the hedge delay plus the second's median latency, plus 1 ms; and every stalled
request's connection is closed by the client (the first provider sees it hang up).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.rows import Row
    from benchmarks.run import Config

HEDGE_MS = 50
LATENCY_MS = 20
SCENARIO_TEXT = [
    "19. **Hedged request** (issue 38): two FakeProviders on loopback, the first stalls,",
    f"    the second answers after {LATENCY_MS} ms; ``hedge_after_ms={HEDGE_MS}`` against the",
    "    second provider asked directly; every stalled request's connection must be closed.",
]
"""Scenario 19's description for the performance page."""


@contextmanager
def _second_provider(latency_ms: int) -> Iterator[str]:
    """The answering FakeProvider, in a process of its own: its ``delay_ms`` timer is
    not in the measuring process (where it would add its wake-up lateness to the
    hedged side twice). Yields its base URL; stopped (its process group) on exit."""
    with tempfile.TemporaryDirectory() as workdir:
        script = Path(workdir) / "second.json"
        script.write_text(json.dumps([{"text": "ok", "delay_ms": latency_ms}]))
        argv = ["-m", "toolnexus_trio.testing", "serve", "--script", str(script), "--cycle"]
        proc = subprocess.Popen(
            [sys.executable, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            url = proc.stdout.readline().strip()
            if not url.startswith("http://127.0.0.1:"):
                raise RuntimeError(f"the provider did not print its URL: {url!r}")
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stdout.close()


async def _measure(
    second_url: str, runs: int, warmup: int, hedge_ms: int, latency_ms: int
) -> dict[str, Any]:
    import trio

    from toolnexus_trio import ClientOptions, create_client
    from toolnexus_trio.testing import open_fake_provider

    async with open_fake_provider([{"stall": True}], cycle=True) as first:
        direct = ClientOptions(base_url=second_url, style="openai", model="b", api_key="k")
        hedged = ClientOptions(
            base_url=first.base_url, style="openai", model="a", api_key="k", retries=0,
            fallback=[direct], hedge_after_ms=hedge_ms,
        )  # fmt: skip
        hedged_ms: list[float] = []
        direct_ms: list[float] = []
        timer_late: list[float] = []
        async with create_client(direct) as alone, create_client(hedged) as raced:
            for i in range(warmup + runs):
                for client, samples in ((raced, hedged_ms), (alone, direct_ms))[:: 1 - 2 * (i % 2)]:
                    started = time.perf_counter()
                    result = await client.run("hi")
                    took = (time.perf_counter() - started) * 1000
                    assert result.text == "ok"
                    if i >= warmup:
                        samples.append(took)
                # The floor of any hedge: how late a bare timer of the delay wakes here.
                started = time.perf_counter()
                await trio.sleep(hedge_ms / 1000)
                if i >= warmup:
                    timer_late.append((time.perf_counter() - started) * 1000 - hedge_ms)
        closed = 0
        with trio.move_on_after(5):
            for request in first.requests:
                await request.closed.wait()
                closed += 1
    return {
        "hedged_ms": hedged_ms,
        "direct_ms": direct_ms,
        "timer_late_ms": timer_late,
        "hedge_ms": hedge_ms,
        "latency_ms": latency_ms,
        "stalled": len(first.requests),
        "closed": closed,
    }


def collect(
    cfg: Config,
    add: Callable[[str, str, dict[str, Any]], None],
    child: Callable[[list[str], float], dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    """Run scenario 19 (a few seconds per round)."""
    rounds = 3 if cfg.agent_rounds > 2 else 1
    for r in range(rounds):
        add("hedge", "ours", child(["-m", "benchmarks.hedge", "--runs", "40"], 120))
        progress(f"hedge round {r + 1}/{rounds}")


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Row]:
    """The scenario-19 row (empty when it did not run)."""
    from benchmarks.rows import Row, Stats, Target

    if "hedge" not in raw:
        return []
    runs = raw["hedge"]["ours"]
    hedged = [s for run in runs for s in run["hedged_ms"]]
    direct = [s for run in runs for s in run["direct_ms"]]
    hedge_ms = runs[0]["hedge_ms"]
    bound = hedge_ms + statistics.median(direct) + 1
    stalled = sum(run["stalled"] for run in runs)
    late = statistics.median(s for run in runs for s in run["timer_late_ms"])
    closed = sum(run["closed"] for run in runs)
    return [
        Row(
            "19. Hedged request, first provider stalls",
            "run -> answer, median (peer column: the second provider asked directly)",
            "ms",
            Stats.of(hedged),
            Stats.of(direct),
            f"hedge delay {hedge_ms} ms + the second's latency",
            Target(
                "ours",
                "<=",
                round(bound, 2),
                unit="ms",
                checks=(("every stalled connection closed", closed == stalled),),
            ),
            [
                f"bound: {hedge_ms} ms + {statistics.median(direct):.2f} ms (the second's "
                f"median) + 1 ms = {bound:.2f} ms",
                f"stalled requests whose connection the client closed: {closed}/{stalled}",
                f"a bare trio.sleep({hedge_ms / 1000:g}) in the same process wakes "
                f"{late:.2f} ms late (median): the OS's share of the excess",
            ],
            limit_value=hedge_ms + statistics.median(direct),
        )
    ]


def main(argv: list[str] | None = None) -> int:
    import trio

    parser = argparse.ArgumentParser(prog="python -m benchmarks.hedge")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--hedge-ms", type=int, default=HEDGE_MS)
    parser.add_argument("--latency-ms", type=int, default=LATENCY_MS)
    args = parser.parse_args(argv)
    with _second_provider(args.latency_ms) as url:
        result = trio.run(_measure, url, args.runs, args.warmup, args.hedge_ms, args.latency_ms)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
