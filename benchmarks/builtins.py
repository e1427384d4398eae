"""Scenario 11: the builtins, ours (Trio) and the peer's (toolnexus 0.21.0, asyncio).

One process measures one side of one case and prints one JSON object on stdout::

    python -m benchmarks.builtins bash_cancel ours --reps 5
    python -m benchmarks.builtins bash_background peer
    python -m benchmarks.builtins search peer --tree /tmp/tree --runs 5

- ``bash_cancel``: ``sleep 30 & sleep 30 & wait`` (children that ignore nothing),
  cancelled 100 ms after the call started: time from the cancel until the call returns,
  and until no live process of the command's group is left (/proc).
- ``bash_background``: ``echo done; sleep 12 &`` with ``timeout: 2000``: time until the
  call returns, and what it answered.
- ``search``: ``glob`` and ``grep`` over a generated tree of 20,000 files, some of them
  binary (:func:`make_tree`): ``glob **/*.py``, ``grep`` of a rare regex with
  ``include: *.txt`` (no binary file is read: both sides can finish) and a grep over
  the whole tree, binary files included.

The peer is driven through its public API only (``create_builtin_tools``,
``Tool.execute``), as a black box.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.rows import Config, Row

CANCEL_AFTER_S = 0.100
CANCEL_COMMAND = "echo $$ > {pidfile}; sleep 30 & sleep 30 & wait"
BACKGROUND_COMMAND = "echo done; sleep 12 &"
TREE_FILES = 20_000
GLOB = {"pattern": "**/*.py"}
GREP_TXT = {"pattern": "needle_[0-9]+_x", "include": "*.txt"}
GREP_ALL = {"pattern": "needle_[0-9]*05_x"}  # the 50 needles in .py files: a full scan


def make_tree(root: str, files: int = TREE_FILES) -> dict[str, int]:
    """*files* files in 200 directories: .py and .txt text, one in 100 binary (.bin).

    One text file in 200 holds the grep needle (100 in all, half of them in .txt files),
    so a search reads the whole tree before it reaches the default limit of 100 matches.
    """
    rng = random.Random(8)
    words = ["alpha", "beta", "gamma", "delta", "trio", "nursery", "cancel", "scope"]
    counts = {"py": 0, "txt": 0, "bin": 0, "needles": 0}
    for i in range(files):
        directory = os.path.join(root, f"pkg{i % 20:02}", f"mod{i % 200:03}")
        os.makedirs(directory, exist_ok=True)
        if i % 100 == 7:
            with open(os.path.join(directory, f"blob{i}.bin"), "wb") as f:
                f.write(bytes(rng.randrange(256) for _ in range(512)) + b"needle_1_x\x00")
            counts["bin"] += 1
            continue
        ext = "py" if i % 2 else "txt"
        lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(20)]
        if i % 400 in (4, 205):  # as many in .txt files as in .py files
            lines[rng.randrange(20)] += f" needle_{i}_x"
            counts["needles"] += 1
        with open(os.path.join(directory, f"file{i}.{ext}"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        counts[ext] += 1
    return counts


def _live_members(pgid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            count += 1
    return count


def _wait_gone(pgid: int, since: float) -> tuple[float, int]:
    """Poll until group *pgid* has no live process: (ms since *since*, members at start)."""
    at_start = _live_members(pgid)
    while _live_members(pgid):
        time.sleep(0.0005)
    return (time.perf_counter() - since) * 1000, at_start


def _read_pid(path: str) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.001)
    raise RuntimeError("the command never wrote its pid")


# ---------------------------------------------------------------------------
# Ours (Trio)
# ---------------------------------------------------------------------------


def ours_bash_cancel(reps: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio import ToolContext, create_toolkit

    samples, gone, left = [], [], []

    async def once(workdir: str) -> None:
        toolkit = await create_toolkit()
        pidfile = os.path.join(workdir, "pid")
        ctx = ToolContext()
        command = CANCEL_COMMAND.format(pidfile=pidfile)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(toolkit.execute, "bash", {"command": command}, ctx)
            await trio.sleep(CANCEL_AFTER_S)
            pgid = _read_pid(pidfile)
            t0 = time.perf_counter()
            ctx.cancel.cancel()
        samples.append((time.perf_counter() - t0) * 1000)
        gone_ms, alive_at_return = _wait_gone(pgid, t0)
        gone.append(gone_ms)
        left.append(alive_at_return)

    for _ in range(reps):
        with tempfile.TemporaryDirectory() as workdir:
            trio.run(once, workdir)
    return {"samples": samples, "gone_ms": gone, "alive_at_return": left}


def ours_bash_background() -> dict[str, Any]:
    import trio

    from toolnexus_trio import create_toolkit

    async def once() -> dict[str, Any]:
        toolkit = await create_toolkit()
        t0 = time.perf_counter()
        args = {"command": BACKGROUND_COMMAND, "timeout": 2000}
        result = await toolkit.execute("bash", args)
        return {
            "samples": [(time.perf_counter() - t0)],
            "is_error": result.is_error,
            "output": result.output[:80],
        }

    return trio.run(once)


def floors(tree: str) -> dict[str, float]:
    """The work with no tool around it: list the tree (``os.walk``), and also read
    every ``.txt`` file once (ms, best of three)."""
    walk, read = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        listed = [os.path.join(d, f) for d, _, files in os.walk(tree) for f in files]
        walk.append((time.perf_counter() - t0) * 1000)
        for path in listed:
            if path.endswith(".txt"):
                with open(path, "rb") as f:
                    f.read()
        read.append((time.perf_counter() - t0) * 1000)
    return {"walk_ms": min(walk), "walk_read_ms": min(read)}


def ours_search(tree: str, runs: int) -> dict[str, Any]:
    import trio

    from toolnexus_trio import create_toolkit

    async def measure() -> dict[str, Any]:
        toolkit = await create_toolkit()
        out: dict[str, Any] = {}
        for key, name, args in (("glob", "glob", GLOB), ("grep_txt", "grep", GREP_TXT),
                                ("grep_all", "grep", GREP_ALL)):  # fmt: skip
            times, last = [], None
            for i in range(runs + 1):
                t0 = time.perf_counter()
                last = await toolkit.execute(name, {**args, "path": tree})
                if i:  # the first run warms the file-system cache
                    times.append((time.perf_counter() - t0) * 1000)
            assert last is not None
            out[key] = {"samples": times, "is_error": last.is_error, "output": last.output[:120],
                        "count": (last.metadata or {}).get("count")}  # fmt: skip
        out["floors"] = floors(tree)
        return out

    return trio.run(measure)


# ---------------------------------------------------------------------------
# The peer (asyncio)
# ---------------------------------------------------------------------------


def _peer_tools() -> dict[str, Any]:
    import toolnexus

    return {t.name: t for t in toolnexus.create_builtin_tools()}


def peer_bash_cancel(reps: int) -> dict[str, Any]:
    import asyncio

    bash = _peer_tools()["bash"]
    samples, gone, left = [], [], []

    async def once(workdir: str) -> None:
        pidfile = os.path.join(workdir, "pid")
        command = CANCEL_COMMAND.format(pidfile=pidfile)
        task = asyncio.ensure_future(bash.execute({"command": command}, None))
        await asyncio.sleep(CANCEL_AFTER_S)
        pgid = _read_pid(pidfile)
        t0 = time.perf_counter()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        samples.append((time.perf_counter() - t0) * 1000)
        gone_ms, alive_at_return = _wait_gone(pgid, t0)
        gone.append(gone_ms)
        left.append(alive_at_return)

    for _ in range(reps):
        with tempfile.TemporaryDirectory() as workdir:
            asyncio.run(once(workdir))
    return {"samples": samples, "gone_ms": gone, "alive_at_return": left}


def peer_bash_background() -> dict[str, Any]:
    import asyncio

    bash = _peer_tools()["bash"]

    async def once() -> dict[str, Any]:
        t0 = time.perf_counter()
        result = await bash.execute({"command": BACKGROUND_COMMAND, "timeout": 2000}, None)
        return {
            "samples": [(time.perf_counter() - t0)],
            "is_error": result.is_error,
            "output": result.output[:80],
        }

    return asyncio.run(once())


def peer_search(tree: str, runs: int) -> dict[str, Any]:
    import asyncio

    tools = _peer_tools()

    async def measure() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, name, args in (("glob", "glob", GLOB), ("grep_txt", "grep", GREP_TXT),
                                ("grep_all", "grep", GREP_ALL)):  # fmt: skip
            times, last = [], None
            for i in range(runs + 1):
                t0 = time.perf_counter()
                last = await tools[name].execute({**args, "path": tree}, None)
                if i:
                    times.append((time.perf_counter() - t0) * 1000)
            assert last is not None
            out[key] = {"samples": times, "is_error": last.is_error, "output": last.output[:120],
                        "count": (last.metadata or {}).get("count")}  # fmt: skip
        return out

    return asyncio.run(measure())


# ---------------------------------------------------------------------------
# The orchestrator's side: collect and report
# ---------------------------------------------------------------------------


def collect(
    cfg: Config,
    add: Callable[[str, str, dict[str, Any]], None],
    child: Callable[[list[str], float], dict[str, Any]],
    progress: Callable[[str], None],
) -> None:
    """Run scenario 11 (about 40 s; the peer's 12 s background case dominates)."""
    rounds = 2 if cfg.agent_rounds > 2 else 1
    for r in range(rounds):
        for side in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
            argv = ["-m", "benchmarks.builtins", "bash_cancel", side, "--reps", "3"]
            add("builtins_bash_cancel", side, child(argv, 120))
        progress(f"builtins bash cancel round {r + 1}/{rounds}")
    for side in ("ours", "peer"):
        argv = ["-m", "benchmarks.builtins", "bash_background", side]
        add("builtins_bash_background", side, child(argv, 120))
    progress("builtins bash background job")
    tree = tempfile.mkdtemp(prefix="tn-bench-tree-")
    try:
        counts = make_tree(tree)
        add("builtins_tree", "ours", counts)
        for r in range(rounds):
            for side in ("ours", "peer") if r % 2 == 0 else ("peer", "ours"):
                argv = ["-m", "benchmarks.builtins", "search", side, "--tree", tree, "--runs", "5"]
                add("builtins_search", side, child(argv, 300))
            progress(f"builtins glob/grep round {r + 1}/{rounds}")
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def rows(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> list[Row]:
    """The scenario-8 rows of the report (only for what was run)."""
    from benchmarks.rows import Row, Stats, Target, flat

    out: list[Row] = []
    if "builtins_bash_cancel" in raw:
        o, p = raw["builtins_bash_cancel"]["ours"], raw["builtins_bash_cancel"]["peer"]
        alive_o, alive_p = flat(o, "alive_at_return"), flat(p, "alive_at_return")
        gone_o, gone_p = Stats.of(flat(o, "gone_ms")), Stats.of(flat(p, "gone_ms"))
        out.append(
            Row(
                "11. bash cancel at 100 ms (sh + 2 children)",
                "cancel -> call returns",
                "ms",
                Stats.of(flat(o, "samples")),
                Stats.of(flat(p, "samples")),
                "SIGTERM kills sleep and sh at once: the floor is a signal and a reap",
                Target(
                    "ours",
                    "<=",
                    20.0,
                    stat="p95",
                    unit="ms",
                    checks=(("no process of the group alive at return", max(alive_o) == 0),),
                ),
                [
                    f"cancel -> no live process of the group (median): ours "
                    f"{gone_o.median:.1f} ms, peer {gone_p.median:.1f} ms",
                    f"live processes of the group when the call returned: ours max "
                    f"{max(alive_o):g}, peer max {max(alive_p):g}",
                ],
            )
        )
    if "builtins_bash_background" in raw:
        o, p = raw["builtins_bash_background"]["ours"], raw["builtins_bash_background"]["peer"]
        ok_o = not any(flat(o, "is_error"))
        peer_said = "; ".join(sorted({run["output"].splitlines()[0] for run in p}))
        out.append(
            Row(
                "11. bash background job (echo done; sleep 12 &, timeout 2 s)",
                "call -> returns",
                "s",
                Stats.of(flat(o, "samples")),
                Stats.of(flat(p, "samples")),
                "the shell exits at once; ours reads its last output for up to 0.1 s",
                Target("ours", "<=", 0.5, unit="s", checks=(("ours: success", ok_o),)),
                [
                    f"ours answered: success={ok_o}; the peer answered "
                    f"is_error={any(flat(p, 'is_error'))}: {peer_said!r}"
                ],
            )
        )
    if "builtins_search" in raw:
        o, p = raw["builtins_search"]["ours"], raw["builtins_search"]["peer"]
        counts = raw.get("builtins_tree", {}).get("ours", [{}])[0]
        tree = (
            f"{TREE_FILES:,} files in 200 directories ({counts.get('py', 0):,} .py, "
            f"{counts.get('txt', 0):,} .txt, {counts.get('bin', 0):,} binary .bin)"
        )

        def side(runs: list[dict[str, Any]], key: str, field: str) -> list[Any]:
            return [run[key][field] for run in runs]

        def stats(runs: list[dict[str, Any]], key: str) -> Stats:
            return Stats.of([s for run in runs for s in run[key]["samples"]])

        walk_ms = min(run["floors"]["walk_ms"] for run in o)
        read_ms = min(run["floors"]["walk_read_ms"] for run in o)
        all_ok = not any(side(o, "grep_all", "is_error"))
        peer_all = sorted(set(side(p, "grep_all", "output")))[0]
        out.append(
            Row(
                "11. glob **/*.py over 20,000 files",
                "time per call, median",
                "ms",
                stats(o, "glob"),
                stats(p, "glob"),
                f"a bare os.walk lists the tree in {walk_ms:.1f} ms; {tree}",
                Target("ratio", "<=", 1.0),
                [
                    f"results: ours {side(o, 'glob', 'count')[0]}, peer "
                    f"{side(p, 'glob', 'count')[0]} (the limit of 100)"
                ],
            )
        )
        out.append(
            Row(
                "11. grep a rare regex over 20,000 files (include *.txt)",
                "time per call, median",
                "ms",
                stats(o, "grep_txt"),
                stats(p, "grep_txt"),
                f"os.walk plus one read of every .txt file, no regex: {read_ms:.0f} ms "
                "(the matches stay under the limit, so every file is searched)",
                Target(
                    "ratio",
                    "<=",
                    1.0,
                    checks=(("ours: no failure on binary files (whole-tree grep)", all_ok),),
                ),
                [
                    f"matches: ours {side(o, 'grep_txt', 'count')[0]}, peer "
                    f"{side(p, 'grep_txt', 'count')[0]}",
                    f"the same grep over the whole tree, binary files included: ours "
                    f"{stats(o, 'grep_all').median:.0f} ms, "
                    f"{side(o, 'grep_all', 'count')[0]} matches; the peer fails after "
                    f"{stats(p, 'grep_all').median:.0f} ms: {peer_all!r}",
                ],
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.builtins")
    parser.add_argument("case", choices=["bash_cancel", "bash_background", "search"])
    parser.add_argument("side", choices=["ours", "peer"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree")
    args = parser.parse_args(argv)
    runners: dict[tuple[str, str], Callable[[], dict[str, Any]]] = {
        ("bash_cancel", "ours"): lambda: ours_bash_cancel(args.reps),
        ("bash_cancel", "peer"): lambda: peer_bash_cancel(args.reps),
        ("bash_background", "ours"): ours_bash_background,
        ("bash_background", "peer"): peer_bash_background,
        ("search", "ours"): lambda: ours_search(args.tree, args.runs),
        ("search", "peer"): lambda: peer_search(args.tree, args.runs),
    }
    print(json.dumps(runners[(args.case, args.side)]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
