"""Every script in docs/examples runs and exits 0, and so does the demo command.

Examples that serve (they print a URL and wait for a gateway) carry the marker
``EXAMPLE_SERVES = True`` and are driven by their own end-to-end tests instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import toolnexus_trio.__main__ as cli

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
SCRIPTS = sorted(
    p for p in EXAMPLES.glob("*.py") if "EXAMPLE_SERVES = True" not in p.read_text("utf-8")
)


def test_the_seed_examples_are_present() -> None:
    names = {p.name for p in SCRIPTS}
    assert {
        "seed_1_cancellation.py",
        "seed_2_timeout.py",
        "seed_3_answer.py",
        "seed_4_call_id.py",
    } <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout


def test_demo_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "tool[call_export]: cancelled" in out
    assert "tool[call_rm]: deleted build/" in out
    assert "status=done" in out
    # the two tools of the first turn overlapped: both started before either finished
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if "weather(Paris) started" in line or "add(2, 2) started" in line]  # fmt: skip
    first_finish = next(i for i, line in enumerate(lines) if "finished" in line)
    assert len(starts) == 2 and max(starts) < first_finish
