"""The ``bash`` builtin: one shell command in its own process group, always reaped.

- ``/bin/sh -c <command>`` starts in a new session (so its own process group) with
  stdin from ``/dev/null``: a ``cat`` never reads the host's stdin, which may be the
  JSON-RPC stream of a toolkit served over stdio.
- The call waits for the *shell's* exit, not for end-of-file on the output pipe: a
  background job that keeps the pipe open cannot turn a finished command into a
  timeout. Such jobs are left running (``&`` means so) and reported as
  ``backgroundLeft``.
- On timeout or cancel the group gets ``SIGTERM``, up to :data:`KILL_GRACE_SECONDS`
  to go, then ``SIGKILL``; all of it shielded, so a ``trio.Cancelled`` still reaps the
  tree, and the call returns as soon as no live process of the group is left.
- Output (stdout and stderr together) is capped at :data:`OUTPUT_LIMIT` characters,
  kept as head and tail around a marker; memory stays bounded by the cap.

A process that leaves the group (``setsid``, a daemon) is out of reach of any group
kill; the call never waits for it.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import os
import signal
import subprocess
from typing import Any, Final

import attrs
import trio

from .._tools import Tool, ToolContext, ToolResult
from ._config import Place, builtin, required, whole_number

SHELL: Final = "/bin/sh"
SHELL_LABEL: Final = "/bin/sh -c"
"""What ``metadata["shell"]`` says, as in the released ports."""

DEFAULT_TIMEOUT_MS: Final = 60_000
OUTPUT_LIMIT: Final = 30_000
"""Characters of output a ``bash`` result keeps: the first and the last half of it.

Longer output has the middle replaced by :func:`truncation_marker`, and the result's
metadata says ``truncated: true`` with ``omittedChars`` and ``outputLimit``.
"""
KILL_GRACE_SECONDS: Final = 2.0
"""How long a process group has to exit after ``SIGTERM`` before ``SIGKILL``."""

_HEAD: Final = OUTPUT_LIMIT // 2
_TAIL: Final = OUTPUT_LIMIT - _HEAD
_REAP_SECONDS: Final = 1.0  # after SIGKILL: the kernel frees the group at once
_DRAIN_SECONDS: Final = 0.1  # after the shell's exit, to read what it wrote last
_READ_CHUNK: Final = 65_536

_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The shell command to run"},
        "workdir": {"type": "string", "description": "Working directory (default: process cwd)"},
        "timeout": {"type": "number", "description": "Timeout in milliseconds (default 60000)"},
        "description": {
            "type": "string",
            "description": "Human-readable description of the command",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}

_DESCRIPTION = (
    "Run a shell command with /bin/sh -c and return its stdout and stderr together. "
    "A non-zero exit code is an error. `timeout` is in milliseconds (default 60000); "
    f"output longer than {OUTPUT_LIMIT} characters keeps only its beginning and end."
)


def truncation_marker(omitted: int) -> str:
    """The text that replaces the middle of an output over :data:`OUTPUT_LIMIT`."""
    return f"\n\n[... {omitted} characters omitted (output limit {OUTPUT_LIMIT}) ...]\n\n"


class _Capture:
    """Decoded output with O(limit) memory: the first ``_HEAD`` chars and a rolling tail."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._head: list[str] = []
        self._head_len = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_len = 0
        self.chars = 0

    def add(self, data: bytes | bytearray, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        if not text:
            return
        self.chars += len(text)
        room = _HEAD - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += len(self._head[-1])
            text = text[room:]
        if text:
            self._tail.append(text)
            self._tail_len += len(text)
            while self._tail_len - len(self._tail[0]) >= _TAIL:
                self._tail_len -= len(self._tail.popleft())

    def result(self) -> tuple[str, int]:
        """The kept text and how many characters were left out of its middle."""
        self.add(b"", final=True)
        head, tail = "".join(self._head), "".join(self._tail)
        if self.chars <= OUTPUT_LIMIT:
            return head + tail, 0
        omitted = self.chars - OUTPUT_LIMIT
        return head + truncation_marker(omitted) + tail[-_TAIL:], omitted


def _group_alive(pgid: int) -> bool:
    """Whether process group *pgid* has a live (not zombie) member. Blocking: /proc scan.

    ``killpg(pgid, 0)`` alone is not enough: a zombie member counts until its new
    parent (often PID 1) reaps it, which can take a while.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split(b" ", 3)
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return await trio.to_thread.run_sync(_group_alive, pgid)


def _signal(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


async def _until_gone(proc: trio.Process) -> None:
    delay = 0.001
    while True:
        proc.poll()  # reaps the shell once it has exited, so it stops counting
        if not await _alive(proc.pid):
            break
        await trio.sleep(delay)
        delay = min(delay * 2, 0.02)
    await proc.wait()


async def stop_group(proc: trio.Process) -> bool:
    """TERM, grace, KILL to the shell's process group; shielded and bounded.

    Returns whether a live group was signalled. Safe to call again.
    """
    with trio.move_on_after(KILL_GRACE_SECONDS + _REAP_SECONDS, shield=True):
        proc.poll()
        if not await _alive(proc.pid):
            await proc.wait()
            return False
        _signal(proc.pid, signal.SIGTERM)
        with trio.move_on_after(KILL_GRACE_SECONDS):
            await _until_gone(proc)
            return True
        _signal(proc.pid, signal.SIGKILL)
        await _until_gone(proc)
    return True


async def _pump(stream: trio.abc.ReceiveStream, capture: _Capture, eof: trio.Event) -> None:
    while data := await stream.receive_some(_READ_CHUNK):
        capture.add(data)
    eof.set()


@attrs.frozen
class ShellOutcome:
    """What one command did: ``exit_code`` is ``None`` when it timed out."""

    output: str
    exit_code: int | None
    killed_tree: bool
    omitted: int
    background_left: bool


async def run_shell(command: str, cwd: str | None, timeout_seconds: float) -> ShellOutcome:
    """Run *command* in its own process group for at most *timeout_seconds*.

    Cancellation propagates once the process group is gone.
    """
    proc = await trio.lowlevel.open_process(
        [SHELL, "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,
    )
    assert proc.stdout is not None
    capture = _Capture()
    eof = trio.Event()
    timed_out = killed = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, proc.stdout, capture, eof)
            with trio.move_on_after(timeout_seconds) as deadline:
                await proc.wait()
            if deadline.cancelled_caught:
                timed_out = True
                killed = await stop_group(proc)
            with trio.move_on_after(_DRAIN_SECONDS):
                await eof.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        await stop_group(proc)
        raise
    finally:
        with trio.move_on_after(_REAP_SECONDS, shield=True):
            await proc.stdout.aclose()
    background = not timed_out and (not eof.is_set() or await _alive(proc.pid))
    output, omitted = capture.result()
    return ShellOutcome(output, None if timed_out else proc.returncode, killed, omitted, background)


def bash_tool(place: Place) -> Tool:
    """The ``bash`` builtin for *place* (``base_dir`` confines ``workdir``)."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = required(args, "command")
        timeout_ms = whole_number(args.get("timeout"), "timeout")
        if timeout_ms is None:
            timeout_ms = DEFAULT_TIMEOUT_MS
        cwd = await place.resolve_async(args.get("workdir") or place.default_dir())
        done = await run_shell(command, cwd, max(timeout_ms, 0) / 1000)
        metadata: dict[str, Any] = {"shell": SHELL_LABEL}
        if done.exit_code is None:
            metadata.update(timedOut=True, killedTree=done.killed_tree)
        else:
            metadata["exitCode"] = done.exit_code
        if done.omitted:
            metadata.update(truncated=True, omittedChars=done.omitted, outputLimit=OUTPUT_LIMIT)
        if done.background_left:
            metadata["backgroundLeft"] = True
        if done.exit_code is None:
            text = f"bash: command timed out after {timeout_ms}ms\n{done.output}"
            return ToolResult.error(text, metadata)
        if done.exit_code != 0:
            text = f"{done.output}\nbash: command exited with code {done.exit_code}"
            return ToolResult.error(text, metadata)
        return ToolResult.ok(done.output, metadata)

    return builtin("bash", _DESCRIPTION, _schema, run)
