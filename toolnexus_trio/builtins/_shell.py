"""The ``bash`` builtin: one shell command, its whole process tree always reaped.

- ``/bin/sh -c <command>`` starts in a new session and process group, under a
  supervisor that keeps every process it starts within reach (see
  :mod:`toolnexus_trio._procs`), with stdin from ``/dev/null``: a ``cat`` never reads
  the host's stdin, which may be the JSON-RPC stream of a toolkit served over stdio.
- The call waits for the *shell's* exit, not for end-of-file on the output pipe: a
  background job that keeps the pipe open cannot turn a finished command into a
  timeout. Such jobs are left running (``&`` means so) and reported as
  ``backgroundLeft``.
- On timeout or cancel every process of the tree gets ``SIGTERM``, including one that
  left the group (``setsid``, a daemon's double fork), up to :data:`KILL_GRACE_SECONDS`
  to go, then ``SIGKILL``; all of it shielded, so a ``trio.Cancelled`` still reaps the
  tree, and the call returns as soon as no live process of the tree is left.
- Output (stdout and stderr together) is capped at :data:`OUTPUT_LIMIT` characters,
  kept as head and tail around a marker; memory stays bounded by the cap.
"""

from __future__ import annotations

import codecs
import collections
import subprocess
from collections.abc import Sequence
from typing import Any, Final

import attrs
import trio

from .._procs import ProcessTree, group_alive_async, open_tree
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
"""How long a command's process tree has to exit after ``SIGTERM`` before ``SIGKILL``."""

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


async def stop_tree(tree: ProcessTree) -> bool:
    """TERM, grace, KILL to every process of the command's tree; shielded and bounded.

    Returns whether a live process was signalled. Safe to call again.
    """
    return await tree.stop(KILL_GRACE_SECONDS, _REAP_SECONDS)


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


async def run_shell(
    command: str, cwd: str | None, timeout_seconds: float, shell: Sequence[str] = (SHELL, "-c")
) -> ShellOutcome:
    """Run *command* with *shell* (an argv prefix) in its own process tree for at most
    *timeout_seconds*.

    Cancellation propagates once the process tree is gone.
    """
    tree = await open_tree(
        [*shell, command],
        linger=False,  # the call ends with the shell; background jobs are left running
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
    )
    stdout = tree.process.stdout
    assert stdout is not None
    capture = _Capture()
    eof = trio.Event()
    timed_out = killed = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, stdout, capture, eof)
            with trio.move_on_after(timeout_seconds) as deadline:
                await tree.wait()
            if deadline.cancelled_caught:
                timed_out = True
                killed = await stop_tree(tree)
            with trio.move_on_after(_DRAIN_SECONDS):
                await eof.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        await stop_tree(tree)
        raise
    finally:
        with trio.move_on_after(_REAP_SECONDS, shield=True):
            await stdout.aclose()
    background = not timed_out and (not eof.is_set() or await group_alive_async(tree.pid))
    output, omitted = capture.result()
    return ShellOutcome(output, None if timed_out else tree.returncode, killed, omitted, background)


def bash_tool(place: Place, shell: Sequence[str] | None = None) -> Tool:
    """The ``bash`` builtin for *place* (``base_dir`` confines ``workdir``), running
    commands with *shell* (an argv prefix; default ``/bin/sh -c``)."""
    argv = tuple(shell) if shell is not None else (SHELL, "-c")
    label = SHELL_LABEL if shell is None else " ".join(argv)

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = required(args, "command")
        timeout_ms = whole_number(args.get("timeout"), "timeout")
        if timeout_ms is None:
            timeout_ms = DEFAULT_TIMEOUT_MS
        cwd = await place.resolve_async(args.get("workdir") or place.default_dir())
        done = await run_shell(command, cwd, max(timeout_ms, 0) / 1000, argv)
        metadata: dict[str, Any] = {"shell": label}
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
