"""The ``bash`` builtin: process group, reaping on cancel and timeout, stdin, output cap.

These use real processes and the real clock, with short timeouts. "Nothing left
running" is checked in /proc: no live (non-zombie) process of the command's group.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from builtin_helpers import live_group_members

from toolnexus_trio import ToolContext, ToolkitOptions, ToolResult, create_toolkit
from toolnexus_trio.builtins import OUTPUT_LIMIT, BuiltinsConfig, _shell, truncation_marker

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


async def _bash(tmp: Path, args: dict[str, Any], ctx: ToolContext | None = None) -> ToolResult:
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=tmp)))
    return await toolkit.execute("bash", args, ctx)


async def _read_pid(path: Path) -> int:
    with trio.fail_after(10):
        while True:
            text = await trio.Path(path).read_text() if await trio.Path(path).exists() else ""
            if text.strip():
                return int(text)
            await trio.sleep(0.005)


@pytest.fixture
def reap_later() -> Iterator[list[int]]:
    """Process groups a test leaves running on purpose, killed when it ends."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


async def test_cancel_kills_the_whole_group_before_returning(tmp_path: Path) -> None:
    # A shell with two children; cancel the call once it runs: by the time the call has
    # returned, no process of the group is alive (the grandchildren included). The pid
    # file is written after both forks, so the count below never races them (it did,
    # under load, when the file came first).
    command = "sleep 30 & sleep 30 & echo $$ > pid; wait"
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_bash, tmp_path, {"command": command})
            pgid = await _read_pid(tmp_path / "pid")
            assert len(live_group_members(pgid)) == 3
            nursery.cancel_scope.cancel()
    assert live_group_members(pgid) == []


async def test_a_cancelled_token_reports_cancelled_and_reaps(tmp_path: Path) -> None:
    ctx = ToolContext()
    result: list[ToolResult] = []

    async def call() -> None:
        result.append(await _bash(tmp_path, {"command": "echo $$ > pid; exec sleep 30"}, ctx))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            pgid = await _read_pid(tmp_path / "pid")
            ctx.cancel.cancel()
    assert result == [ToolResult.error("cancelled")]
    assert live_group_members(pgid) == []


async def test_term_ignoring_group_is_killed_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_shell, "KILL_GRACE_SECONDS", 0.2)
    # trap '' TERM makes the shell and its children ignore SIGTERM: only SIGKILL works.
    command = "trap '' TERM; echo $$ > pid; sleep 30 & sleep 30"
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_bash, tmp_path, {"command": command})
            pgid = await _read_pid(tmp_path / "pid")
            nursery.cancel_scope.cancel()
    assert live_group_members(pgid) == []


async def test_timeout_kills_the_tree_and_keeps_the_output(tmp_path: Path) -> None:
    command = "echo $$ > pid; echo started; sleep 30 & sleep 30"
    with trio.fail_after(10):
        result = await _bash(tmp_path, {"command": command, "timeout": 200})
    pgid = int((tmp_path / "pid").read_text())
    assert result == ToolResult.error(
        "bash: command timed out after 200ms\nstarted\n",
        {"shell": "/bin/sh -c", "timedOut": True, "killedTree": True},
    )
    assert live_group_members(pgid) == []


async def test_tool_call_timeout_reaps_too(tmp_path: Path) -> None:
    ctx = ToolContext(timeout_ms=150)
    with trio.fail_after(10):
        result = await _bash(tmp_path, {"command": "echo $$ > pid; sleep 30 & wait"}, ctx)
    assert result == ToolResult.error("timed out after 150ms")
    assert live_group_members(int((tmp_path / "pid").read_text())) == []


async def test_a_background_job_does_not_hold_the_call(
    tmp_path: Path, reap_later: list[int]
) -> None:
    # The job keeps stdout open; the shell itself exits at once with status 0.
    with trio.fail_after(10):
        result = await _bash(tmp_path, {"command": "echo $$; sleep 30 &", "timeout": 20_000})
    pgid = int(result.output.split()[0])
    reap_later.append(pgid)
    assert result == ToolResult.ok(
        f"{pgid}\n", {"shell": "/bin/sh -c", "exitCode": 0, "backgroundLeft": True}
    )
    assert len(live_group_members(pgid)) == 1  # left running, as `&` asks


async def test_stdin_is_dev_null_not_the_hosts(tmp_path: Path) -> None:
    # Put a pipe holding data on fd 0, its write end kept open: a child that inherited
    # our stdin would print the data, then block until the timeout.
    read_end, write_end = os.pipe()
    os.write(write_end, b"HOST-STDIN-SECRET\n")
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        with trio.fail_after(10):
            result = await _bash(tmp_path, {"command": "cat; read line; echo read=$?"})
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert result == ToolResult.ok("read=1\n", {"shell": "/bin/sh -c", "exitCode": 0})


async def test_huge_output_keeps_head_and_tail(tmp_path: Path) -> None:
    # 5 MB of numbered lines: the result keeps the first and last OUTPUT_LIMIT/2 chars.
    command = "seq 1 700000; echo the-end"
    result = await _bash(tmp_path, {"command": command})
    full = "".join(f"{i}\n" for i in range(1, 700_001)) + "the-end\n"
    half = OUTPUT_LIMIT // 2
    omitted = len(full) - OUTPUT_LIMIT
    assert result.output == full[:half] + truncation_marker(omitted) + full[-half:]
    assert result.metadata == {
        "shell": "/bin/sh -c",
        "exitCode": 0,
        "truncated": True,
        "omittedChars": omitted,
        "outputLimit": OUTPUT_LIMIT,
    }
    assert result.output.endswith("the-end\n")


def test_capture_memory_stays_bounded_and_decodes_split_characters() -> None:
    capture = _shell._Capture()
    encoded = "é€😀".encode() * 15_000  # multi-byte characters cut at every offset
    for i in range(0, len(encoded), 7):
        capture.add(encoded[i : i + 7])
        assert capture._tail_len < OUTPUT_LIMIT
    assert capture._tail_len == sum(len(part) for part in capture._tail)
    text, omitted = capture.result()
    whole = "é€😀" * 15_000
    assert omitted == len(whole) - OUTPUT_LIMIT
    assert (
        text
        == whole[: OUTPUT_LIMIT // 2] + truncation_marker(omitted) + whole[-OUTPUT_LIMIT // 2 :]
    )


async def test_output_exactly_at_the_limit_is_whole(tmp_path: Path) -> None:
    result = await _bash(tmp_path, {"command": f"head -c {OUTPUT_LIMIT} /dev/zero | tr '\\0' y"})
    assert result.output == "y" * OUTPUT_LIMIT
    assert result.metadata == {"shell": "/bin/sh -c", "exitCode": 0}


async def test_bad_input(tmp_path: Path) -> None:
    assert (await _bash(tmp_path, {"command": ""})).output == "bash: command is required"
    nan = await _bash(tmp_path, {"command": "true", "timeout": float("nan")})
    assert nan == ToolResult.error("bash: timeout must be a finite number")
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    result = await _bash(tmp_path, {"command": "pwd", "workdir": "file"})
    assert result == ToolResult.error(f"bash: [Errno 20] Not a directory: '{not_dir}'")
    wrong_type = await _bash(tmp_path, {"command": "true", "timeout": "5"})
    assert wrong_type.is_error and "$.timeout" in wrong_type.output


async def test_workdir_through_a_symlink_out_of_base_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "out").symlink_to(tmp_path)
    result = await _bash(base, {"command": "touch escaped", "workdir": "out"})
    assert result == ToolResult.error(f"bash: out resolves outside baseDir {base}")
    assert not (tmp_path / "escaped").exists()


async def test_host_supplied_shell_is_used_verbatim(tmp_path: Path) -> None:
    # peer: test_host_supplied_shell_is_used_verbatim (toolnexus 0.21, host boundary)
    script = tmp_path / "interp.sh"
    script.write_text('#!/bin/sh\necho "via=$0 flag=$1 cmd=$2"\n')
    script.chmod(0o755)
    config = BuiltinsConfig(base_dir=tmp_path, shell=[str(script), "--run"])
    toolkit = await create_toolkit(ToolkitOptions(builtins=config))
    result = await toolkit.execute("bash", {"command": "echo hi"})
    assert result == ToolResult.ok(
        f"via={script} flag=--run cmd=echo hi\n", {"shell": f"{script} --run", "exitCode": 0}
    )


def test_builtin_shell_reports_the_interpreter_and_bash_can_be_disabled() -> None:
    # peer: test_builtin_shell_reports_detection_and_bash_can_be_disabled and
    # test_resolved_interpreter_is_reported (our default is fixed, never sniffed)
    from toolnexus_trio.builtins import DEFAULT_SHELL, builtin_shell, builtin_tools

    assert builtin_shell() == "/bin/sh -c" == " ".join(DEFAULT_SHELL)
    assert builtin_shell(BuiltinsConfig(shell=("/bin/bash", "-lc"))) == "/bin/bash -lc"
    names = [t.name for t in builtin_tools(BuiltinsConfig(tools={"bash": False}))]
    assert "bash" not in names and "read" in names


@pytest.mark.parametrize(
    ("shell", "error"),
    [("/bin/bash -c", TypeError), ([], ValueError), (["/bin/sh", ""], ValueError),
     (["/bin/sh\0", "-c"], ValueError), ([1, "-c"], ValueError)],
)  # fmt: skip
def test_a_bad_shell_is_refused_at_once(shell: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"BuiltinsConfig\(shell=\.\.\.\)"):
        BuiltinsConfig(shell=shell)
