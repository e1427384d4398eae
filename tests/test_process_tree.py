"""Whole process trees: ``bash`` and MCP stdio servers leave no process behind, not even
a daemon (double fork and ``setsid()``), and the host process is never made a subreaper.

Real processes, real pipes; "gone" is checked in /proc (a zombie counts as gone).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from builtin_helpers import live_group_members
from mcp_helpers import pid_alive, stdio

from toolnexus_trio import ToolContext, ToolkitOptions, ToolResult, _procs, create_toolkit
from toolnexus_trio.builtins import BuiltinsConfig
from toolnexus_trio.mcp import McpStatus, open_mcp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc")

DAEMONIZE = Path(__file__).resolve().parent / "mcp_servers" / "daemonize.py"
_PR_GET_CHILD_SUBREAPER = 37


async def _pid_from(path: Path) -> int:
    """The pid a process wrote to *path* (polled: the writer is another process)."""
    file = trio.Path(path)
    with trio.fail_after(15):
        while not await file.exists():  # noqa: ASYNC110 - another process's file
            await trio.sleep(0.005)
    return int(await file.read_text())


def _session_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2 :].split()[3])


@pytest.fixture
def kill_later() -> Iterator[list[int]]:
    """Pids a failing test could leave running; killed when it ends."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _daemon_command(pidfile: Path, *then: str) -> list[str]:
    return [sys.executable, str(DAEMONIZE), str(pidfile), *then]


async def _bash(base: Path, args: dict[str, Any], ctx: ToolContext | None = None) -> ToolResult:
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
    return await toolkit.execute("bash", args, ctx)


# -- bash ------------------------------------------------------------------------------


async def test_bash_cancel_kills_a_daemon_that_left_the_group(
    tmp_path: Path, kill_later: list[int]
) -> None:
    pidfile = tmp_path / "daemon.pid"
    command = subprocess.list2cmdline(_daemon_command(pidfile)) + "; echo $$ > sh.pid; sleep 300"
    ctx = ToolContext()
    results: list[ToolResult] = []

    async def call() -> None:
        results.append(await _bash(tmp_path, {"command": command}, ctx))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            daemon = await _pid_from(pidfile)
            kill_later.append(daemon)
            shell = await _pid_from(tmp_path / "sh.pid")
            assert _session_of(daemon) != _session_of(shell)  # it really left
            ctx.cancel.cancel()
    assert results == [ToolResult.error("cancelled")]
    assert not pid_alive(daemon)
    assert live_group_members(shell) == []


async def test_bash_timeout_kills_a_daemon_too(tmp_path: Path, kill_later: list[int]) -> None:
    pidfile = tmp_path / "daemon.pid"
    # The shell waits for the daemon before it sleeps: the timeout finds it running.
    wait = f"while [ ! -s {pidfile} ]; do sleep 0.01; done"
    command = subprocess.list2cmdline(_daemon_command(pidfile)) + f"; {wait}; sleep 300"
    with trio.fail_after(20):
        result = await _bash(tmp_path, {"command": command, "timeout": 3000})
    daemon = int(pidfile.read_text())
    kill_later.append(daemon)
    assert result.is_error and result.metadata == {
        "shell": "/bin/sh -c", "timedOut": True, "killedTree": True,
    }  # fmt: skip
    assert not pid_alive(daemon)


async def test_bash_keeps_exit_codes_signals_and_default_sigpipe(tmp_path: Path) -> None:
    # The supervisor is invisible: the shell's own status, and the signals it gets are
    # the defaults (Python ignores SIGPIPE; `yes | head` must end by SIGPIPE, not loop).
    exited = await _bash(tmp_path, {"command": "echo out; exit 7"})
    assert exited == ToolResult.error(
        "out\n\nbash: command exited with code 7", {"shell": "/bin/sh -c", "exitCode": 7}
    )
    killed = await _bash(tmp_path, {"command": "kill -TERM $$"})
    assert killed.metadata == {"shell": "/bin/sh -c", "exitCode": -15}
    with trio.fail_after(20):
        piped = await _bash(tmp_path, {"command": "yes | head -n 2; trap"})
    assert piped == ToolResult.ok("y\ny\n", {"shell": "/bin/sh -c", "exitCode": 0})


async def test_a_command_signalling_its_own_group_does_not_stop_the_supervisor(
    tmp_path: Path,
) -> None:
    # `kill 0` reaches every process of the group; only the library steers the
    # supervisor, so this is the command's business alone (the shell survives a HUP
    # it traps; the call ends normally).
    result = await _bash(tmp_path, {"command": "trap 'echo hup' HUP; kill -HUP 0; echo done"})
    assert result == ToolResult.ok("hup\ndone\n", {"shell": "/bin/sh -c", "exitCode": 0})


async def test_the_host_process_is_never_made_a_subreaper(tmp_path: Path) -> None:
    # A subreaper would adopt the orphans of every child of the application, ours or
    # not; each command gets a supervisor of its own instead.
    assert (await _bash(tmp_path, {"command": "sleep 0.01 & echo hi"})).output == "hi\n"
    flag = ctypes.c_int(-1)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    assert flag.value == 0


async def test_without_a_supervisor_the_group_is_still_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fallback where there is no prctl or /proc: the command's process group only.
    monkeypatch.setattr(_procs, "SUPERVISED", False)
    command = "echo $$ > pid; sleep 300 & sleep 300"
    ctx = ToolContext()

    async def call() -> None:
        await _bash(tmp_path, {"command": command}, ctx)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            shell = await _pid_from(tmp_path / "pid")
            assert len(live_group_members(shell)) == 3
            ctx.cancel.cancel()
    assert live_group_members(shell) == []


# -- the process tree itself -----------------------------------------------------------


async def test_open_tree_reports_a_command_that_cannot_run_as_subprocess_does() -> None:
    with pytest.raises(FileNotFoundError) as ours:
        await _procs.open_tree(["/nonexistent/server"], linger=True)
    with pytest.raises(FileNotFoundError) as theirs:
        await trio.run_process(["/nonexistent/server"])
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(PermissionError):
        await _procs.open_tree([os.devnull], linger=False)


async def test_a_lingering_tree_lasts_until_its_last_process(tmp_path: Path) -> None:
    # The command exits at once and leaves a daemon: the tree is not done until that
    # daemon is, and stopping it kills the daemon.
    pidfile = tmp_path / "daemon.pid"
    tree = await _procs.open_tree(_daemon_command(pidfile), linger=True)
    daemon = await _pid_from(pidfile)
    with trio.fail_after(20):
        while pid_alive(tree.pid):  # noqa: ASYNC110 - another process's state
            await trio.sleep(0.01)
        assert tree.returncode is None and pid_alive(daemon)
        assert await tree.stop(0.5, 0.5)
    assert tree.returncode == 0  # the command's own status
    assert not pid_alive(daemon)


# -- MCP stdio ---------------------------------------------------------------------------


async def test_mcp_close_kills_a_daemon_the_server_started(
    tmp_path: Path, kill_later: list[int]
) -> None:
    pidfile = tmp_path / "daemon.pid"
    config = {"ev": {**stdio(), "command": _daemon_command(pidfile, *stdio()["command"])}}
    with trio.fail_after(30):
        async with open_mcp(config) as source:
            assert source.status()["ev"] == McpStatus("connected", None, 11)
            daemon = await _pid_from(pidfile)
            kill_later.append(daemon)
            assert pid_alive(daemon)
    assert not pid_alive(daemon)


async def test_mcp_cancelled_connect_kills_a_daemon(tmp_path: Path, kill_later: list[int]) -> None:
    # A server that never answers initialize, cancelled once its daemon runs.
    pidfile = tmp_path / "daemon.pid"
    config = {"hang": {"command": _daemon_command(pidfile, "sleep", "300")}}

    async def cancel_when_spawned(scope: trio.CancelScope) -> None:
        kill_later.append(await _pid_from(pidfile))
        scope.cancel()

    with trio.fail_after(30), trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_spawned, scope)
            await create_toolkit(ToolkitOptions(mcp=config), nursery=nursery)
            pytest.fail("the load was not cancelled")  # pragma: no cover
    assert scope.cancelled_caught
    assert not pid_alive(kill_later[-1])
