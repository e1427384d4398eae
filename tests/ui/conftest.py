"""The UI tests' real peers: ``@ag-ui/client`` from npm (installed once per machine into
a cache directory by the test session) and Debian's ``chromium`` (installed with apt
when missing and the session is root). In CI (``CI=true``) a missing peer fails the
test instead of skipping it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

AGUI_CLIENT = "@ag-ui/client@1"


def missing(what: str) -> None:
    """Skip on a developer's machine; fail in CI, where the peer must be there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} (CI must have it)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def agui_client_prefix() -> Path:
    """A folder whose node_modules holds ``@ag-ui/client`` (npm install, about 15 s once)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing("node and npm are not installed")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = cache / "toolnexus-trio-tests" / "agui-npm"
    if not (prefix / "node_modules" / "@ag-ui" / "client" / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", AGUI_CLIENT],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            missing(f"npm install {AGUI_CLIENT} failed: {done.stderr[-2000:]}")
    return prefix


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of Debian's ``chromium`` (apt-get installed when missing and root)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and shutil.which("apt-get") is not None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            subprocess.run(command, capture_output=True, timeout=900, env=env,
                           stdin=subprocess.DEVNULL)  # fmt: skip
        found = shutil.which("chromium")
    if found is None:
        missing("chromium is not installed (apt-get install -y chromium)")
    assert found is not None
    return found
