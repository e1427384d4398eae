"""Hostile inputs to the builtins: CPU time and event-loop stalls (ours only).

    python -m benchmarks.hostile [--size BYTES]

Prints one JSON object:

- ``strip_html``: CPU seconds of :func:`toolnexus_trio.builtins.strip_html` on pages
  of ``--size`` characters (default the 5 MiB fetch cap) built to make the released
  ports' regular expressions quadratic, and the same for the ports' five substitutions
  on a 32 KiB page (at 5 MiB they would take hours);
- ``grep``: wall and CPU seconds of a ``grep`` call with a catastrophic pattern over a
  file of 10 MiB minus one line (the second call: the file is in the page cache), and
  the longest gap between two ticks of a 1 ms heartbeat task on the event loop while
  it ran (RE2 releases the GIL while it
  matches; Python's ``re`` would hold it for the whole match);
- ``bash``: mean wall seconds of ``bash {command: "true"}`` over 20 calls (the process
  tree's supervisor starts with each call).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from toolnexus_trio import ToolkitOptions, create_toolkit
from toolnexus_trio.builtins import MAX_FETCH_BYTES, MAX_FILE_BYTES, BuiltinsConfig, strip_html

_PORTS = [
    (re.compile(r"<script[^>]*>.*?</script>", re.IGNORECASE | re.DOTALL), ""),
    (re.compile(r"<style[^>]*>.*?</style>", re.IGNORECASE | re.DOTALL), ""),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"[ \t]+\n"), "\n"),
    (re.compile(r"\n{3,}"), "\n\n"),
]


def _ports_strip_html(html: str) -> str:
    for pattern, replacement in _PORTS:
        html = pattern.sub(replacement, html)
    return html.strip()


def _pages(n: int) -> dict[str, str]:
    return {
        "<script> repeated": "<script>" * (n // 8),
        "<style> repeated": "<style>" * (n // 7),
        "< repeated": "<" * n,
        "spaces then x": " " * n + "x",
        "<script repeated, one </script>": "<script" * (n // 7) + "</script>",
        "<script></script> repeated": "<script></script>" * (n // 17),
        "< newline repeated": "< \n" * (n // 3),
        "<a> repeated": "<a>" * (n // 3),
    }


def _cpu(fn: Any, arg: str) -> float:
    start = time.process_time()
    fn(arg)
    return round(time.process_time() - start, 4)


async def _grep(base: Path) -> dict[str, Any]:
    line = "a" * 60 + "!\n"
    (base / "big.txt").write_text(line * (MAX_FILE_BYTES // len(line) - 1) + "xaaa\n")
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
    gaps: list[float] = []
    done = trio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await trio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    await toolkit.execute("grep", {"pattern": "(a+)+$"})  # warm: page cache, first call
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        wall, cpu = time.perf_counter(), time.process_time()
        result = await toolkit.execute("grep", {"pattern": "(a+)+$"})
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        done.set()
    return {
        "pattern": "(a+)+$",
        "file_bytes": (base / "big.txt").stat().st_size,
        "matches": result.metadata,
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "longest_loop_gap_s": round(max(gaps, default=0.0), 4),
    }


async def _bash(base: Path) -> float:
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
    start = time.perf_counter()
    for _ in range(20):
        await toolkit.execute("bash", {"command": "true"})
    return round((time.perf_counter() - start) / 20, 4)


def main() -> None:
    """Run the measurements and print them as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=MAX_FETCH_BYTES)
    size = parser.parse_args().size
    out: dict[str, Any] = {"size": size}
    out["strip_html"] = {name: _cpu(strip_html, page) for name, page in _pages(size).items()}
    out["ports_strip_html_32KiB"] = {
        name: _cpu(_ports_strip_html, page) for name, page in _pages(32 * 1024).items()
    }
    with tempfile.TemporaryDirectory() as tmp:
        out["grep"] = trio.run(_grep, Path(tmp))
        out["bash_true_mean_s"] = trio.run(_bash, Path(tmp))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
