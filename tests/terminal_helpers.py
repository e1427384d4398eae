"""A real ``python -m toolnexus_trio ...`` whose stdin is a pipe or a terminal (a pty).

The child runs in its own session (its own process group), which is killed on the way
out. Its output is collected as it comes, from stdout (the pty's master when stdout is
the terminal) and stderr, so a test can wait for a line and then type or press Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Literal

import trio

StdinKind = Literal["pipe", "terminal", "terminal-stdin"]
"""``pipe``: stdin an open pipe nobody writes to unless the test does; ``terminal``:
stdin, stdout and stderr one pty, as in a terminal window (everything arrives as
stdout, with ``\r\n`` line ends); ``terminal-stdin``: stdin a pty, stdout and stderr
pipes (``... 2>log | tee out``)."""


class Child:
    """The running command: what it wrote so far, and its stdin to type into."""

    def __init__(self, proc: trio.Process, stdin: trio.lowlevel.FdStream) -> None:
        self.proc = proc
        self.stdin = stdin
        self.out = b""
        self.err = b""
        self._changed = trio.Event()
        self.out_done = trio.Event()
        self.err_done = trio.Event()

    async def collect(self, stream: trio.abc.ReceiveStream, which: str) -> None:
        done = self.out_done if which == "out" else self.err_done
        try:
            while True:
                try:
                    chunk = await stream.receive_some()
                except trio.BrokenResourceError:  # a pty's master after the child is gone
                    chunk = b""
                if not chunk:
                    return
                if which == "out":
                    self.out += chunk
                else:
                    self.err += chunk
                self._changed.set()
                self._changed = trio.Event()
        finally:
            done.set()
            self._changed.set()

    async def wait_for_output(self, marker: bytes) -> None:
        """Until *marker* is on stdout or stderr; fails if both end first."""
        while marker not in self.out and marker not in self.err:
            assert not (self.out_done.is_set() and self.err_done.is_set()), (
                f"the command ended before printing {marker!r}: {self.out!r} {self.err!r}"
            )
            await self._changed.wait()

    async def wait_for_count(self, marker: bytes, count: int) -> None:
        """Until *marker* is on stdout and stderr *count* times in all."""
        while self.out.count(marker) + self.err.count(marker) < count:
            assert not (self.out_done.is_set() and self.err_done.is_set()), (
                f"the command ended before printing {marker!r} {count} times: "
                f"{self.out!r} {self.err!r}"
            )
            await self._changed.wait()

    async def type(self, text: bytes) -> None:
        """Send *text* to the command's stdin (the pty's master or the pipe)."""
        await self.stdin.send_all(text)

    def interrupt(self) -> None:
        """Ctrl-C, as a terminal sends it: SIGINT to the whole process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    async def finish(self) -> tuple[int, str, str]:
        """Wait for exit and the end of its output; return (code, stdout, stderr).

        On the terminal, stdout is everything, its ``\r\n`` made ``\n``."""
        code = await self.proc.wait()
        await self.out_done.wait()
        await self.err_done.wait()
        out = self.out.replace(b"\r\n", b"\n")
        return code, out.decode(errors="replace"), self.err.decode(errors="replace")


@asynccontextmanager
async def child_command(
    *args: str, stdin: StdinKind, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> AsyncIterator[Child]:
    """``python -m toolnexus_trio *args`` with *stdin* as said; killed on the way out."""
    master, slave = os.openpty() if stdin != "pipe" else os.pipe()[::-1]
    # For a pipe: "slave" is the read end the child gets, "master" our write end.
    out_to: int = slave if stdin == "terminal" else subprocess.PIPE
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "toolnexus_trio", *args],
        stdin=slave,
        stdout=out_to,
        stderr=out_to,
        start_new_session=True,
        cwd=cwd,
        env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"},
    )
    os.close(slave)  # the child has its own copy: the pty ends when the child does
    ours = trio.lowlevel.FdStream(master)
    child = Child(proc, ours)
    try:
        async with trio.open_nursery() as nursery:
            stdout = ours if stdin == "terminal" else proc.stdout
            assert stdout is not None
            nursery.start_soon(child.collect, stdout, "out")
            if proc.stderr is None:  # the terminal: stderr arrives with stdout
                child.err_done.set()
            else:
                nursery.start_soon(child.collect, proc.stderr, "err")
            try:
                yield child
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.move_on_after(10, shield=True):
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            for stream in (ours, proc.stdout, proc.stderr):
                if stream is not None:
                    await stream.aclose()
