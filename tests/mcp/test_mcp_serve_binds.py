"""``serve``'s Host and Origin checks on every bind (DNS rebinding), and the explicit
opt-in a bind beyond loopback needs. Real HTTP requests against a served toolkit; all
traffic goes to loopback (``127.0.0.2`` is loopback on Linux; a ``0.0.0.0`` bind is
reached through ``127.0.0.1``, with a forged ``Host`` where the test needs one)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2
import trio
from mcp import Client

from toolnexus_trio import ToolContext, ToolkitOptions, create_toolkit, define_tool

ROOT = Path(__file__).resolve().parents[2]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


async def hello(args: dict[str, Any], ctx: ToolContext) -> str:
    return "hello"


async def toolkit() -> Any:
    return await create_toolkit(
        ToolkitOptions(builtins=False, extra_tools=[define_tool("hello", "Hi.", None, hello)])
    )


async def post(port: int, headers: dict[str, str], host: str = "127.0.0.1") -> int:
    """POST ``initialize`` to ``host:port/mcp`` (always a loopback address) with
    *headers* (a forged ``Host`` among them); the status code."""
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            f"http://{host}:{port}/mcp",
            json=INITIALIZE,
            headers={"accept": "application/json, text/event-stream", **headers},
        )
        return response.status_code


def port_of(url: str) -> int:
    return httpx2.URL(url).port or 0


async def test_a_loopback_bind_other_than_127_0_0_1_keeps_the_checks() -> None:
    kit = await toolkit()
    async with kit.serve("127.0.0.2", 0) as served:
        port = port_of(served.url)
        assert served.url.startswith("http://127.0.0.2:")
        async with Client(served.url, mode="legacy") as client:  # the real client works
            assert [t.name for t in (await client.list_tools()).tools] == ["hello"]
        # The bound address and the loopback names pass; any other Host is refused.
        for ok in (f"127.0.0.2:{port}", f"localhost:{port}", f"127.0.0.1:{port}"):
            assert await post(port, {"host": ok}, "127.0.0.2") == 200, ok
        assert await post(port, {"host": f"evil.example:{port}"}, "127.0.0.2") == 421
        # Origin: loopback ones pass, others are refused.
        good = {"host": f"127.0.0.2:{port}", "origin": f"http://127.0.0.2:{port}"}
        assert await post(port, good, "127.0.0.2") == 200
        bad = {"host": f"127.0.0.2:{port}", "origin": "http://evil.example"}
        assert await post(port, bad, "127.0.0.2") == 403


async def test_a_non_loopback_bind_needs_allow_remote() -> None:
    kit = await toolkit()
    for host in ("0.0.0.0", "::", "192.0.2.1", "example.com"):
        with pytest.raises(ValueError, match="allow_remote=True"):
            kit.serve(host, 0)


async def test_a_wildcard_bind_with_allow_remote_still_checks_host_and_origin(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kit = await toolkit()
    with caplog.at_level(logging.WARNING, "toolnexus_trio.mcp.serve"):
        serving = kit.serve(
            "0.0.0.0",
            0,
            allow_remote=True,
            allowed_hosts=["mcp.example:*"],
            allowed_origins=["https://app.example"],
        )
    assert "0.0.0.0, which other machines can reach" in caplog.text
    async with serving as served:
        port = port_of(served.url)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["hello"]
        # Reached through 127.0.0.1 with a forged Host: refused.
        assert await post(port, {"host": f"evil.example:{port}"}) == 421
        assert await post(port, {"host": "evil.example"}) == 421
        # A configured name passes (the packets still go to 127.0.0.1).
        assert await post(port, {"host": f"mcp.example:{port}"}) == 200
        # Origins: loopback and the configured one only.
        host = {"host": f"127.0.0.1:{port}"}
        assert await post(port, {**host, "origin": f"http://localhost:{port}"}) == 200
        assert await post(port, {**host, "origin": "https://app.example"}) == 200
        assert await post(port, {**host, "origin": f"http://0.0.0.0:{port}"}) == 403
        assert await post(port, {**host, "origin": "https://evil.example"}) == 403


def test_cli_serve_refuses_a_non_loopback_host_without_allow_remote() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolnexus_trio", "serve", "--no-builtins", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done.stderr
    assert "--host 0.0.0.0 is not a loopback address" in done.stderr
    assert "--allow-remote" in done.stderr
    assert done.stdout == ""


def test_cli_serve_allow_remote_warns_and_keeps_the_checks(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"builtins": False}))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolnexus_trio",
            "serve",
            "--mcp-config",
            str(config),
            "--host",
            "0.0.0.0",
            "--allow-remote",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line.startswith("serving MCP on http://0.0.0.0:"), line
        port = port_of(line.split()[3])
        statuses: list[int] = []

        async def check() -> None:
            statuses.append(await post(port, {"host": f"evil.example:{port}"}))
            statuses.append(await post(port, {"host": f"localhost:{port}"}))

        trio.run(check)
        assert statuses == [421, 200]
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert "0.0.0.0, which other machines can reach" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
