"""Scenario 20 of the benchmarks (issue 39) runs end to end at a small N: the streaming
server in its own process, our side in another, and the rows built from what they print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import conversations

ROOT = Path(__file__).resolve().parent.parent


def test_ours_runs_every_conversation_and_the_rows_are_built() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.conversations", "server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{json.loads(server.stdout.readline())['port']}/v1"
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.conversations", "ours", "--url", url, "--n", "8"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
        server.stdout.close()
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    # Every conversation streamed its tool call and every text delta of its answer.
    assert out["n"] == 8
    assert out["tokens"] == out["events"] == 8 * (conversations.TOKENS + 1)
    assert out["cpu_us_per_token"] > 0
    rows = conversations.rows({"conversations": {"ours": [out]}})
    assert [row.unit for row in rows] == ["KiB", "µs"]
    assert all(row.target is None for row in rows)  # no peer measured: no ratio claimed
