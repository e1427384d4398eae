"""Tracing off: ``import toolnexus_trio`` and a run import no OpenTelemetry, and a run
works where OpenTelemetry cannot be imported at all (the ``[otel]`` extra absent)."""

from __future__ import annotations

import json
import subprocess
import sys

RUN = """
import trio
from toolnexus_trio import InProcessOptions, create_in_process_client

async def generate(req):
    return {"content": "hi"}

async def main():
    result = await create_in_process_client(InProcessOptions(model="m", generate=generate)).run("x")
    assert result.text == "hi" and result.trace_parent is None

trio.run(main)
"""


def _loaded(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_and_running_loads_no_opentelemetry() -> None:
    assert _loaded("import toolnexus_trio") == []
    assert _loaded(RUN) == []


def test_a_run_works_without_opentelemetry() -> None:
    blocked = "import sys\nsys.modules['opentelemetry'] = None\nsys.modules['opentelemetry.trace'] = None\n"
    assert _loaded(blocked + RUN) == ["opentelemetry", "opentelemetry.trace"]  # the blocks
