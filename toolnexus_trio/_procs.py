"""Process trees: start a command so that every process it ever starts can be killed.

``bash`` and MCP stdio servers both start a command that may start others, and both
promise that a cancel or a close leaves none of them running. A process group is not
enough for that promise: a daemon (double fork and ``setsid()``) leaves the group, its
parent exits, and it is reparented to PID 1, out of reach. A *child subreaper*
(``PR_SET_CHILD_SUBREAPER``) keeps such orphans: they are reparented to it instead.

This library never makes its host's process a subreaper. That attribute is process
wide: every orphan of every child of the application (not only of ours) would become
our child, and reaping them takes exit statuses that ``trio.Process``, ``subprocess``
or the application's own ``waitpid`` are waiting for; not reaping them leaves zombies.
Instead each command runs under a supervisor of its own (:mod:`toolnexus_trio._reaper`,
a small standard-library script run with ``python -I -S``, about 20 ms and 10 MB): it
is the subreaper of its tree only, reaps all of it, and on request signals every
descendant, found through ``/proc``. Its exit status is the command's.

:func:`open_tree` starts one; :meth:`ProcessTree.stop` is the one kill path: TERM to
the whole tree, a bounded grace, KILL, all shielded and bounded. On systems without
``prctl`` and ``/proc`` (not Linux) the command runs directly in a new session and the
kill reaches its process group only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any, Final

import attrs
import trio

_REAPER: Final = str(Path(__file__).with_name("_reaper.py"))
SUPERVISED: Final = sys.platform.startswith("linux") and bool(sys.executable)
"""Whether commands run under a subreaper supervisor (Linux), or only in a new session."""
_START_BOUND: Final = 10.0  # seconds for the supervisor to start the command
_REPORT_LIMIT: Final = 256
_POLL: Final = 0.01


def group_alive(pgid: int) -> bool:
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
        return True  # no /proc: killpg's answer is all there is
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            fields = stat[stat.rindex(b")") + 2 :].split(b" ", 3)
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False


async def group_alive_async(pgid: int) -> bool:
    """:func:`group_alive`, with the /proc scan in a worker thread."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return await trio.to_thread.run_sync(group_alive, pgid)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@attrs.define(eq=False)
class ProcessTree:
    """A command and every process it starts (see the module docs).

    ``process`` is the supervisor where there is one (its pipes are the command's, its
    exit status is the command's), else the command itself; ``pid`` is the command's,
    which leads its own process group.
    """

    process: trio.Process
    pid: int
    supervised: bool

    @property
    def returncode(self) -> int | None:
        """The command's exit status once the tree (or, in ``exit`` mode, the command)
        is done: a code, or minus the signal that killed it."""
        return self.process.returncode

    async def wait(self) -> int:
        """Wait until the supervisor (or the command) has exited; its status."""
        return await self.process.wait()

    def _ask(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    async def _until_group_gone(self) -> None:
        delay = 0.001
        while True:
            self.process.poll()  # reaps the leader, which otherwise keeps the group
            if not await group_alive_async(self.pid):
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.02)

    async def _stop_group(self, grace: float | None, reap: float) -> bool:
        """TERM, *grace*, KILL to the command's process group (what is left of it)."""
        self.process.poll()
        if not await group_alive_async(self.pid):
            return False
        if grace is not None:
            _signal_group(self.pid, signal.SIGTERM)
            with trio.move_on_after(grace):
                await self._until_group_gone()
                return True
        _signal_group(self.pid, signal.SIGKILL)
        with trio.move_on_after(reap):
            await self._until_group_gone()
        return True

    async def _stop_supervised(self, grace: float | None, reap: float) -> None:
        if grace is not None:
            self._ask(signal.SIGTERM)  # the supervisor TERMs every descendant ...
            with trio.move_on_after(grace):
                await self.process.wait()  # ... and exits once none is left
        if self.process.returncode is None:
            self._ask(signal.SIGUSR1)  # it KILLs every descendant, until none is left
            with trio.move_on_after(reap):
                await self.process.wait()
        if self.process.returncode is None:  # the supervisor itself is stuck
            self.process.kill()
            _signal_group(self.pid, signal.SIGKILL)
            await self.process.wait()

    async def stop(self, grace: float | None, reap: float = 1.0) -> bool:
        """Stop every process of the tree, shielded; returns whether any was running.

        With a *grace*, ``SIGTERM`` first and up to *grace* seconds for the tree to go,
        then ``SIGKILL``; with ``None``, ``SIGKILL`` at once. *reap* bounds the wait
        after ``SIGKILL``. Returns as soon as no process of the tree is left, and after
        at most ``grace + reap`` seconds whatever happens. Safe to call again.
        """
        signalled = False
        bound = trio.current_time() + (grace or 0.0) + reap
        with trio.CancelScope(shield=True, deadline=bound):
            self.process.poll()
            if self.supervised and self.process.returncode is None:
                signalled = True
                await self._stop_supervised(grace, reap)
            # What is left in the command's group: the whole tree when unsupervised;
            # with a supervisor, what the command left running when it exited first.
            if await self._stop_group(grace, reap):
                signalled = True
            await self.process.wait()
        return signalled


async def _read_report(fd: int) -> bytes:
    stream = trio.lowlevel.FdStream(fd)
    data = b""
    async with stream:
        while chunk := await stream.receive_some(_REPORT_LIMIT):
            data += chunk
            if len(data) > _REPORT_LIMIT:
                break
    return data


async def open_tree(argv: list[str], *, linger: bool, **options: Any) -> ProcessTree:
    """Start *argv* as a :class:`ProcessTree`.

    *options* go to ``trio.lowlevel.open_process`` (``stdin``, ``stdout``, ``stderr``,
    ``cwd``, ``env``); the command always starts in a session and process group of
    its own. With *linger* the supervisor (so :meth:`ProcessTree.wait`) ends only when
    every process of the tree has; without it, when the command does. An ``OSError``
    if the command cannot be executed, as from ``subprocess``.
    """
    if not SUPERVISED:
        process = await trio.lowlevel.open_process(argv, start_new_session=True, **options)
        return ProcessTree(process, process.pid, supervised=False)
    read_end, write_end = os.pipe()
    try:
        command = [sys.executable, "-I", "-S", _REAPER, "linger" if linger else "exit"]
        command += [str(write_end), "--", *argv]
        process = await trio.lowlevel.open_process(
            command, start_new_session=True, pass_fds=(write_end,), **options
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    tree = ProcessTree(process, process.pid, supervised=True)
    # Until the report is read the command's pid is unknown, so a cancel must not
    # interrupt: the supervisor answers within milliseconds (bounded all the same).
    with trio.CancelScope(shield=True) as startup:
        startup.deadline = trio.current_time() + _START_BOUND
        report = await _read_report(read_end)
    fields = {line[:1]: line[1:] for line in report.decode("ascii", "replace").split()}
    if "P" in fields and fields["P"].isdigit():
        tree.pid = int(fields["P"])
    if startup.cancelled_caught or "P" not in fields or "E" in fields:
        await tree.stop(None)
        if "E" in fields and fields["E"].isdigit():
            code = int(fields["E"])
            raise OSError(code, os.strerror(code), argv[0])
        raise OSError(f"the process supervisor did not start {argv[0]!r}")
    return tree
