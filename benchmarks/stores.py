"""Store scaling: answers per second with 1, 2 and 4 worker processes on one store.

``python -m benchmarks.stores [--n 600] [--workers 1 2 4] [--tasks 8] [--dsn DSN]``

For each store (PostgreSQL, SQLite) and each worker count: N runs are halted for
approval in a fresh database (or file), then W worker processes, each with T tasks,
answer them with :meth:`Client.answer` (load, take, resume, save), every worker
walking all N threads from its own starting point, as workers taking from one queue
would; a thread another worker took is skipped (``AlreadyAnswered``). The rate is N
over the wall time from "go" to the last worker done; a double take is a thread two
workers both won (there must be none). Without ``--dsn`` (or ``PG*`` variables) a
throwaway server is started with the tests' helper (tests/pg_server.py), durable
(commits flushed to disk, as SQLite's ``synchronous=FULL`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import (
    AlreadyAnswered,
    Answer,
    BuiltinsConfig,
    Client,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    PendingStore,
    PostgresConversationStore,
    Request,
    SqliteConversationStore,
    Tool,
    ToolContext,
    Toolkit,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_in_process_client,
    create_toolkit,
    empty_schema,
    pending,
)


async def _deploy(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.answer is None:
        return pending(Request(id=f"req-{args['v']}", kind="approval", prompt="Deploy?"))
    return ToolResult.ok(f"deployed {args['v']}")


async def _generate(req: GenerateRequest) -> InProcessResponse:
    last = req.messages[-1]
    if last["role"] == "tool":
        return InProcessResponse(content=f"done: {last['content']}")
    v = str(last["content"]).split()[-1]
    return InProcessResponse(tool_calls=[InProcessToolCall(name="deploy", arguments={"v": v})])


async def _agent(store: PendingStore) -> tuple[Client, Toolkit]:
    tool = Tool("deploy", "Deploy", empty_schema(), ToolSource.CUSTOM, _deploy)
    toolkit = await create_toolkit(
        ToolkitOptions(extra_tools=[tool], builtins=BuiltinsConfig.off())
    )
    options = InProcessOptions(model="m", generate=_generate, store=store)
    return create_in_process_client(options), toolkit


@asynccontextmanager
async def _open(where: str) -> AsyncIterator[PendingStore]:
    if where.startswith("postgresql://"):
        async with PostgresConversationStore(where) as pg:
            yield pg
    else:
        async with SqliteConversationStore(where, timeout=60) as sqlite:
            yield sqlite


async def _prepare(where: str, n: int) -> None:
    async with _open(where) as store:
        client, toolkit = await _agent(store)
        limiter = trio.CapacityLimiter(16)

        async def halt(i: int) -> None:
            async with limiter:
                result = await client.ask(f"deploy t{i}", toolkit, id=f"t{i}")
                assert result.status == "pending"

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(halt, i)


async def _worker(where: str, index: int, workers: int, n: int, tasks: int) -> None:
    async with _open(where) as store:
        client, toolkit = await _agent(store)
        await store.get("warm-up")  # connects (and checks the schema) before the clock
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        start = time.perf_counter()
        first = index * n // workers
        order = iter([f"t{(first + i) % n}" for i in range(n)])
        won: list[str] = []

        async def run() -> None:
            for thread in order:  # shared by the tasks: each thread is tried once here
                try:
                    done = await client.answer(
                        thread, [Answer(f"req-{thread}", True)], toolkit=toolkit
                    )
                except AlreadyAnswered:
                    continue
                assert done.status == "done"
                won.append(thread)

        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(run)
        print(json.dumps({"won": won, "seconds": time.perf_counter() - start}), flush=True)


def _round(where: str, workers: int, n: int, tasks: int) -> dict[str, Any]:
    trio.run(_prepare, where, n)
    command = [sys.executable, "-m", "benchmarks.stores", "--worker", where]
    procs = [
        subprocess.Popen(
            [*command, str(i), str(workers), str(n), str(tasks)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for i in range(workers)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            assert p.stdout is not None
            reports.append(json.loads(p.stdout.readline()))
        wall = time.perf_counter() - start
    finally:
        for p in procs:
            p.kill()
            p.wait()
    every = [t for r in reports for t in r["won"]]
    return {
        "workers": workers,
        "answers": len(every),
        "double_takes": len(every) - len(set(every)),
        "lost": n - len(set(every)),
        "seconds": round(wall, 3),
        "per_second": round(n / wall, 1),
        "by_worker": [len(r["won"]) for r in reports],
    }


@contextmanager
def _postgres(dsn: str | None) -> Iterator[Any]:
    """Yields a function giving a fresh database's DSN per round."""
    if dsn is not None:
        yield lambda: dsn
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pg_server import running_server

    with running_server(durable=True) as server:
        if server is None:
            raise SystemExit("no PostgreSQL binaries: pip install pgserver, or pass --dsn")
        names: list[Any] = []

        def fresh() -> str:
            context = server.database()
            names.append(context)
            return context.__enter__()

        try:
            yield fresh
        finally:
            for context in names:
                context.__exit__(None, None, None)


SCENARIO_TEXT = [
    "18. **Store scaling** (``benchmarks/stores.py``): N = 600 runs halted for approval in one",
    "    store, then 1, 2 or 4 worker processes (8 tasks each) answer them all with",
    "    :meth:`Client.answer`, each walking every thread from its own starting point; the rate",
    "    is N over the wall time. PostgreSQL (a throwaway durable server from pgserver's",
    "    binaries) and SQLite (``synchronous=FULL``). The row is the 4-worker rate over the",
    "    1-worker rate of the same run; a double take (a thread two workers both won) or a",
    "    lost thread fails it. On a 2-core machine four workers and the server share the",
    "    same two cores, which bounds the scaling.",
]
"""Scenario 18's description for the performance page."""


def stores_rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Any]:
    """The report rows of scenario 18 (empty when it did not run): per store, the
    4-worker rate over the 1-worker rate of the same run."""
    from benchmarks.rows import Row, Stats, Target

    if "stores" not in raw:
        return []
    runs = raw["stores"].get("ours", [])
    rows: list[Any] = []
    for kind, label in (("postgres", "PostgreSQL"), ("sqlite", "SQLite")):
        scaling: list[float] = []
        rates: dict[int, list[float]] = {}
        bad = 0
        for run in runs:
            by_workers = {r["workers"]: r for r in run.get(kind, [])}
            for workers, r in by_workers.items():
                rates.setdefault(workers, []).append(r["per_second"])
                bad += r["double_takes"] + r["lost"]
            if 1 in by_workers and 4 in by_workers:
                scaling.append(by_workers[4]["per_second"] / by_workers[1]["per_second"])
        if not scaling:
            continue
        notes = [
            f"answers/s (median of {len(runs)} runs): "
            + ", ".join(
                f"{w} worker(s) {statistics.median(v):.0f}" for w, v in sorted(rates.items())
            ),
            f"double takes and lost threads over all runs: {bad}",
        ]
        target = (
            Target("ours", ">=", 2.0, unit="x", checks=(("zero double takes", bad == 0),))
            if kind == "postgres"
            else None
        )
        rows.append(
            Row(
                f"18. Store scaling, {label}: 4 workers over 1",
                "answers/s with 4 worker processes over 1",
                "x",
                Stats.of(scaling),
                Stats.of([0.0]),
                "2 cores: four workers and the server share them",
                target,
                notes,
                higher_is_better=True,
            )
        )
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        where, index, workers, n, tasks = argv[1:6]
        trio.run(_worker, where, int(index), int(workers), int(n), int(tasks))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stores")
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--dsn", default=os.environ.get("BENCH_PG_DSN"))
    parser.add_argument("--only", choices=["postgres", "sqlite"])
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, Any]]] = {}
    with _postgres(args.dsn) as fresh_pg, tempfile.TemporaryDirectory() as tmp:
        for kind in ("postgres", "sqlite"):
            if args.only and kind != args.only:
                continue
            for workers in args.workers:
                fresh = fresh_pg() if kind == "postgres" else str(Path(tmp) / f"w{workers}.db")
                row = _round(fresh, workers, args.n, args.tasks)
                results.setdefault(kind, []).append(row)
                print(
                    f"{kind:8} {workers} worker(s): {row['per_second']:8.1f} answers/s "
                    f"({row['answers']} in {row['seconds']} s, by worker {row['by_worker']}, "
                    f"double takes {row['double_takes']}, lost {row['lost']})",
                    flush=True,
                )
    for kind, rows in results.items():
        base = rows[0]["per_second"]
        scale = ", ".join(f"{r['workers']}: {r['per_second'] / base:.2f}x" for r in rows)
        print(f"{kind}: scaling vs {rows[0]['workers']} worker(s): {scale}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
