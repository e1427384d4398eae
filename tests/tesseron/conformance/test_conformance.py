"""The Tesseron conformance fixtures (CC BY 4.0, Tesseron / Kenny Vaneetvelde) against our host.

One test per fixture file: the fixture's app is built through the public API, served
on 127.0.0.1:0 without a manifest, and the runner plays the gateway. A fixture whose
``requires`` names a capability we lack is skipped, never passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from fixture_app import (
    UnsupportedFixture,
    build_fixture_app,
    missing_capabilities,
)
from runner import ConformanceFailure, load_fixture, run_fixture

HERE = Path(__file__).resolve().parent
FIXTURE_ROOT = HERE / "fixtures"
FIXTURES = sorted(FIXTURE_ROOT.rglob("*.json"))
HOST_SCRIPT = HERE.parents[2] / "conformance" / "host.py"
GUARD = 30  # against hangs only; the runner's per-step timeouts do the asserting


def fixture_id(path: Path) -> str:
    return path.relative_to(FIXTURE_ROOT).with_suffix("").as_posix()


def test_all_twelve_fixtures_are_vendored_with_matching_ids() -> None:
    assert len(FIXTURES) == 12
    for path in FIXTURES:
        assert load_fixture(path)["id"] == fixture_id(path)


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
async def test_fixture(path: Path) -> None:
    fixture = load_fixture(path)
    missing = missing_capabilities(fixture)
    if missing:
        pytest.skip(f"{fixture['id']} requires {missing}, which this host does not implement")
    app = build_fixture_app(fixture)
    with trio.fail_after(GUARD):
        async with app.app.listen(host="127.0.0.1", port=0, manifest_dir=None) as host:
            await run_fixture(fixture, host.url)
    app.check()


def test_builder_refuses_members_it_cannot_serve() -> None:
    base: dict[str, Any] = {"id": "x/y", "steps": [{"recv": {}}]}
    specs: list[dict[str, Any]] = [
        {"actions": [{"name": "a", "teleports": True}]},
        {"resources": [{"name": "r", "value": 1, "streams": True}]},
        {"prompts": []},
        {"resources": [{"name": "r", "emits": [{"afterStep": "nowhere", "value": 1}]}]},
        {"actions": [{"name": "a", "returnsConfirmResult": True}]},
    ]
    for spec in specs:
        with pytest.raises(UnsupportedFixture, match="x/y: cannot serve"):
            build_fixture_app({**base, "fixture": spec})


async def test_assert_handler_not_called_is_enforced() -> None:
    # The same app with the schema removed: the handler runs, and check() must say so.
    fixture = load_fixture(FIXTURE_ROOT / "actions" / "input-validation-failure.json")
    del fixture["fixture"]["actions"][0]["inputSchema"]
    app = build_fixture_app(fixture)
    with trio.fail_after(GUARD):
        async with app.app.listen(host="127.0.0.1", port=0, manifest_dir=None) as host:
            with pytest.raises(ConformanceFailure, match=r"(?s)step 3 .*-32004"):
                await run_fixture(fixture, host.url)
    with pytest.raises(AssertionError, match="assertHandlerNotCalled"):
        app.check()


# -- the launch contract: conformance/host.py as a subprocess --------------------


async def _run_host_process(path: Path) -> None:
    env = {**os.environ, "TESSERON_CONFORMANCE_FIXTURE": str(path)}
    process = await trio.lowlevel.open_process(
        [sys.executable, str(HOST_SCRIPT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        first = b""
        while not first.endswith(b"\n"):
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"host exited before printing its URL (status {process.poll()})"
            first += chunk
        line = first.decode()
        assert line.startswith("tesseron-conformance-url=ws://127.0.0.1:")
        assert line.count("\n") == 1  # exactly one line, nothing else on stdout
        url = line.strip().split("=", 1)[1]
        await run_fixture(load_fixture(path), url)
        await process.stdin.aclose()  # the contract: stdin closing ends the host
        assert await process.wait() == 0
        assert await process.stdout.receive_some(4096) == b""  # still nothing else
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()


@pytest.mark.parametrize(
    "name", ["actions/progress-monotonic", "resources/subscribe-update-unsubscribe"]
)
async def test_host_script_serves_a_fixture(name: str) -> None:
    with trio.fail_after(GUARD):
        await _run_host_process(FIXTURE_ROOT / f"{name}.json")


async def test_host_script_refuses_unservable_fixture(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    bad = {"id": "x/bad", "fixture": {"actions": [{"name": "a", "teleports": True}]}}
    path.write_text(json.dumps({**bad, "steps": [{"recv": {}}]}))
    env = {**os.environ, "TESSERON_CONFORMANCE_FIXTURE": str(path)}
    with trio.fail_after(GUARD):
        result = await trio.run_process(
            [sys.executable, str(HOST_SCRIPT)],
            env=env,
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"teleports" in result.stderr
