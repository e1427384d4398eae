"""Scenarios 8-10 in ``python -m benchmarks``: the HTTP client against one provider process.

:func:`collect_http` starts one FakeProvider process per scenario (``python -m
toolnexus_trio.testing serve``, or :mod:`benchmarks.http_provider` for the cancel
scenario, which also stamps connection closes) and runs :mod:`benchmarks.http_loop`
children against it, ours and the peer alternately; :func:`http_rows` turns their JSON
into report rows.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.http_loop import BURST_BOUND_S, BURST_DELTAS, RETURN_BOUND_S, provider_scripts

if TYPE_CHECKING:
    from benchmarks.rows import Config, Row

PY = sys.executable
HTTP_SCENARIOS = {8: "overhead", 9: "burst", 10: "cancel"}
OVERHEAD_TARGET_MS = 0.1
"""Scenario 8: the loop's own overhead per run over a bare httpx2 client, at most this."""
_CLOSE_WAIT_S = 3.0

SCENARIO_TEXT = [
    "8. **HTTP loop overhead**: scenario 1 through ``create_client`` (openai style, not",
    "   streamed) against one FakeProvider process on loopback that both sides share",
    "   (``python -m toolnexus_trio.testing serve``, cycling the tool-call answer and",
    "   the final text). The peer is toolnexus 0.21's ``create_client``. Each run",
    "   alternates with its side's floor in the same process: a bare client of the same",
    "   HTTP stack posting the same two request bodies the loop sent, no loop, no tools",
    "   (a bare ``httpx2.AsyncClient`` for ours, ``urllib`` in ``asyncio.to_thread`` for",
    "   the peer). The target is the loop's own overhead over that floor, paired run by",
    f"   run: at most {OVERHEAD_TARGET_MS:g} ms; the ratio of the whole runs to toolnexus",
    "   0.21 is reported beside it.",
    "9. **Streaming burst**: one streamed answer of 1,000 text deltas that the provider",
    "   writes as fast as the socket takes them; the consumer awaits a 2 ms sleep per",
    f"   delta. A run not finished after {BURST_BOUND_S:g} s is stopped and counted as hung.",
    "10. **HTTP cancel**: the provider never answers; the run's cancel fires at 100 ms.",
    "    Time until ``run`` returns, and until the provider process saw the connection",
    "    close (it stamps the close itself; both processes read ``CLOCK_MONOTONIC``).",
]
"""Lines for the Scenarios list of ``docs/performance.rst``."""


@contextmanager
def provider_process(scenario: str, workdir: Path) -> Iterator[tuple[str, Path]]:
    """A FakeProvider process playing *scenario*'s script; yields its URL and the file
    it stamps closes into (empty unless the scenario is ``cancel``)."""
    script = workdir / f"{scenario}.json"
    script.write_text(json.dumps({"steps": provider_scripts()[scenario], "cycle": True}))
    closes = workdir / f"{scenario}-closes.txt"
    closes.touch()
    if scenario == "cancel":
        argv = ["-m", "benchmarks.http_provider", "--script", str(script), "--closes", str(closes)]
    else:
        argv = ["-m", "toolnexus_trio.testing", "serve", "--script", str(script), "--cycle"]
    proc = subprocess.Popen(
        [PY, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the {scenario} provider did not print its URL: {url!r}")
        yield url, closes
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()


def _child(scenario: str, side: str, url: str, runs: int, warmup: int) -> dict[str, Any]:
    argv = [PY, "-m", "benchmarks.http_loop", scenario, side, "--url", url]
    argv += ["--runs", str(runs), "--warmup", str(warmup)]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _close_stamps(closes: Path, markers: set[str]) -> dict[str, float]:
    """The provider's close stamp per marker, waiting a little for the last ones."""
    deadline = time.monotonic() + _CLOSE_WAIT_S
    while True:
        stamps: dict[str, float] = {}
        for line in closes.read_text(encoding="utf-8").splitlines():
            name, _, stamp = line.rpartition("\t")
            if name in markers:
                stamps[name] = float(stamp)
        if len(stamps) == len(markers) or time.monotonic() > deadline:
            return stamps
        time.sleep(0.05)


def _add_closes(value: dict[str, Any], closes: Path) -> None:
    """Turn a cancel child's marks into close times (ms after the cancel)."""
    marks = [*value["marks"], *([value["limit_mark"]] if "limit_mark" in value else [])]
    stamps = _close_stamps(closes, {m for m, _ in marks})
    ended = value["ended_at"]
    value["close_ms"], value["closed_at_exit"], value["never_closed"] = [], 0, 0
    for marker, fired in value["marks"]:
        stamp = stamps.get(marker)
        if stamp is None:
            value["never_closed"] += 1
            continue
        value["close_ms"].append((stamp - fired) * 1e3)
        value["closed_at_exit"] += stamp >= ended
    if "limit_mark" in value:
        marker, fired = value["limit_mark"]
        stamp = stamps.get(marker)
        value["limit_close_ms"] = math.nan if stamp is None else (stamp - fired) * 1e3


def collect_http(
    cfg: Config,
    only: set[int],
    add: Callable[[str, str, dict[str, Any]], None],
    progress: Callable[[str], None],
) -> None:
    """Run the selected HTTP scenarios (8-10); *add(key, side, value)* keeps each result."""
    plan = {
        "overhead": (cfg.http_overhead_runs, cfg.http_overhead_warmup),
        "burst": (cfg.http_burst_runs, 0),
        "cancel": (cfg.http_cancel_runs, 0),
    }
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        for number, scenario in HTTP_SCENARIOS.items():
            if number not in only:
                continue
            runs, warmup = plan[scenario]
            with provider_process(scenario, Path(tmp)) as (url, closes):
                for r in range(cfg.http_rounds):
                    sides = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
                    for side in sides:
                        value = _child(scenario, side, url, runs, warmup)
                        if scenario == "cancel":
                            _add_closes(value, closes)
                        add(f"http_{scenario}", side, value)
                    progress(f"http {scenario} round {r + 1}/{cfg.http_rounds}")


# ---------------------------------------------------------------------------


def _flat(runs: list[dict[str, Any]], key: str) -> list[Any]:
    out: list[Any] = []
    for run in runs:
        value = run.get(key, [])
        out.extend(value if isinstance(value, list) else [value])
    return out


def _per_run(runs: list[dict[str, Any]], lib: str, floor: str) -> list[float]:
    """Library minus floor, run by run, over every process (each run's floor ran beside it)."""
    out: list[float] = []
    for run in runs:
        out.extend(a - b for a, b in zip(run[lib], run[floor], strict=True))
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2 if s else math.nan


def http_rows(raw: dict[str, dict[str, list[dict[str, Any]]]], cfg: Config) -> list[Row]:
    """The report rows of scenarios 8-10, for whichever of them ran."""
    from benchmarks.rows import Row, Stats, Target

    rows: list[Row] = []
    if "http_overhead" in raw:
        o, p = raw["http_overhead"]["ours"], raw["http_overhead"]["peer"]
        floor_o, floor_p = _median(_flat(o, "limit_ms")), _median(_flat(p, "limit_ms"))
        wire = _median(_flat(o, "raw_ms"))
        ours_med, peer_med = _median(_flat(o, "samples")), _median(_flat(p, "samples"))
        over_o, over_p = _per_run(o, "samples", "limit_ms"), _per_run(p, "samples", "limit_ms")
        cpu_o = _median(_per_run(o, "samples_cpu", "limit_ms_cpu"))
        cpu_p = _median(_per_run(p, "samples_cpu", "limit_ms_cpu"))
        n = (
            f"N = {cfg.http_overhead_runs} runs per process after "
            f"{cfg.http_overhead_warmup} warm-up runs, {cfg.http_rounds} processes per side, "
            f"one provider process for all; each run alternates with a floor run"
        )
        rows.append(
            Row(
                "8. HTTP loop overhead (over a bare client of the same HTTP stack)",
                "run minus the floor run beside it, paired",
                "ms",
                Stats.of(over_o),
                Stats.of(over_p),
                f"0 ms: a loop that adds nothing to its HTTP client; the floors, the same 2 "
                f"POSTs per run with no loop: a bare httpx2 client {floor_o:.2f} ms (ours), a "
                f"bare urllib POST in a thread {floor_p:.2f} ms (the peer's stack)",
                Target("ours", "<=", OVERHEAD_TARGET_MS, stat="median", unit="ms"),
                [
                    "the loop, 2 tools and the wire mapping, over the two POSTs it makes; ours "
                    "minus a bare httpx2.AsyncClient posting the same two bodies, the peer "
                    "minus bare urllib.request.urlopen calls in asyncio.to_thread",
                    f"the same in process CPU time (steadier than wall time on a shared "
                    f"machine; the peer's includes its worker threads): ours {cpu_o:.3f} ms, "
                    f"peer {cpu_p:.3f} ms",
                    f"the provider's own response time: the same 2 POSTs as raw bytes on one "
                    f"keep-alive socket take {wire:.2f} ms",
                    n,
                ],
            )
        )
        rows.append(
            Row(
                "8. HTTP loop: time per run (SPEC scenario over loopback HTTP)",
                "time per run, median",
                "ms",
                Stats.of(_flat(o, "samples")),
                Stats.of(_flat(p, "samples")),
                f"the floors: {floor_o:.2f} ms (a bare httpx2 client), {floor_p:.2f} ms (bare "
                f"urllib in a thread); raw bytes on one socket {wire:.2f} ms",
                None,
                [
                    f"the ratio to toolnexus 0.21 is reported, not a target: most of a run "
                    f"is the HTTP client's own time (ours {ours_med:.2f} ms over a "
                    f"{floor_o:.2f} ms floor, the peer {peer_med:.2f} ms over "
                    f"{floor_p:.2f} ms)",
                    n,
                ],
            )
        )
    if "http_burst" in raw:
        o, p = raw["http_burst"]["ours"], raw["http_burst"]["peer"]
        hung_o, hung_p = sum(_flat(o, "hung")), sum(_flat(p, "hung"))
        n = len(_flat(o, "hung"))
        rows.append(
            Row(
                f"9. Streaming burst: {BURST_DELTAS:,} deltas, consumer 2 ms each",
                "deltas received",
                "deltas",
                Stats.of(_flat(o, "received")),
                Stats.of(_flat(p, "received")),
                f"all {BURST_DELTAS:,} deltas the provider sent",
                Target(
                    "ours",
                    ">=",
                    BURST_DELTAS,
                    stat="min",
                    unit="deltas",
                    checks=(("no run hung", hung_o == 0),),
                ),
                [
                    f"runs stopped at the {BURST_BOUND_S:g} s bound (hung): ours {hung_o}/{n}, "
                    f"peer {hung_p}/{len(_flat(p, 'hung'))}",
                    f"errors raised on the peer's event loop: "
                    f"{sum(_flat(p, 'loop_errors')):g} "
                    f"({', '.join(sorted(set(_flat(p, 'loop_error_kinds')))) or 'none'})",
                ],
                higher_is_better=True,
            )
        )
        rows.append(
            Row(
                "9. Streaming burst: time",
                "time until the stream ends",
                "ms",
                Stats.of(_flat(o, "samples")),
                Stats.of(_flat(p, "samples")),
                f"the consumer's own time, 1,000 awaits of trio.sleep(0.002) with no "
                f"network: {_median(_flat(o, 'limit_ms')):.0f} ms",
                None,
                [f"a hung run counts as the {BURST_BOUND_S:g} s bound"],
            )
        )
    if "http_cancel" in raw:
        o, p = raw["http_cancel"]["ours"], raw["http_cancel"]["peer"]
        status_p = sorted(set(_flat(p, "status")))
        status_o = sorted(set(_flat(o, "status")))
        rows.append(
            Row(
                "10. HTTP cancel mid-request: cancel -> run returns",
                "cancel -> run returns",
                "ms",
                Stats.of(_flat(o, "samples")),
                Stats.of(_flat(p, "samples")),
                f"a bare httpx2 POST cancelled by a Trio scope unwinds in "
                f"{_median(_flat(o, 'limit_ms')):.2f} ms",
                Target(
                    "ours",
                    "<=",
                    10.0,
                    stat="p95",
                    unit="ms",
                    checks=(("every run cancelled", status_o == ["cancelled"]),),
                ),
                [
                    f"outcomes: ours {', '.join(status_o)}; peer {', '.join(status_p)}",
                    f"a peer run still going {RETURN_BOUND_S:g} s after the cancel counts "
                    f"as {RETURN_BOUND_S:g} s",
                ],
            )
        )
        closes_o, closes_p = _flat(o, "close_ms"), _flat(p, "close_ms")
        exit_o, exit_p = sum(_flat(o, "closed_at_exit")), sum(_flat(p, "closed_at_exit"))
        never_o, never_p = sum(_flat(o, "never_closed")), sum(_flat(p, "never_closed"))
        rows.append(
            Row(
                "10. HTTP cancel mid-request: cancel -> provider sees the close",
                "cancel -> connection closed at the provider",
                "ms",
                Stats.of(closes_o or [math.nan]),
                Stats.of(closes_p or [math.nan]),
                f"a bare httpx2 POST cancelled by a Trio scope: the provider sees the close "
                f"{_median(_flat(o, 'limit_close_ms')):.2f} ms after the cancel",
                Target(
                    "ours",
                    "<=",
                    10.0,
                    stat="p95",
                    unit="ms",
                    checks=(("every close seen while the process ran", exit_o + never_o == 0),),
                ),
                [
                    f"closes that came only when the side's process exited: ours "
                    f"{exit_o}/{len(_flat(o, 'marks'))}, peer {exit_p}/{len(_flat(p, 'marks'))}"
                    f" (the peer's request thread stays blocked on the open connection)",
                    f"closes never seen: ours {never_o}, peer {never_p}",
                ],
            )
        )
    return rows
