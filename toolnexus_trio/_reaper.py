"""The supervisor of one process tree, run as a script (see :mod:`toolnexus_trio._procs`).

``python -I -S _reaper.py MODE FD -- COMMAND...`` (Linux). It makes itself the child
subreaper of its own tree (``PR_SET_CHILD_SUBREAPER``), starts COMMAND as its child,
leading a process group of its own, and reaps every process of the tree. As a
subreaper, every process the command ever starts stays its descendant, whatever that
process does: a daemon's double fork and ``setsid()`` reparent it to this supervisor,
not to PID 1. So the whole tree can always be found, and killed.

Being a subreaper is a property of the whole process, and a supervisor is the only
process for which that is safe: it has no children but the tree, so it may reap any
child (``waitpid(-1)``) without taking an exit status that someone else waits for. A
library cannot make its host's process a subreaper for the same reason.

Only its parent (the library) steers it, by signal; signals from anyone else (a
command's ``kill 0`` reaches the whole group, this process too) are ignored:

- ``SIGTERM``: send ``SIGTERM`` to every live descendant, then exit once none is left;
- ``SIGUSR1``: send ``SIGKILL`` to every live descendant, again until none is left,
  then exit.

MODE ``exit`` exits as soon as COMMAND exits (what it left running stays running:
``bash``'s background jobs); MODE ``linger`` exits once COMMAND and every process it
started are gone (an MCP server). Its exit status is COMMAND's: the same code, or death
by the same signal. On FD it writes ``P<pid>`` (COMMAND's pid) and, when COMMAND
cannot be executed, ``E<errno>``; the FD ends when COMMAND runs.

Standard library only, and nothing of this package: it runs without ``site``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# This process starts with every bash call, so it imports little: no typing (the
# functions that never return say so in words) and no contextlib (try/except/pass
# instead of suppress), each a few milliseconds of a start-up of about 15.

_PR_SET_CHILD_SUBREAPER = 36
_REQUESTS = (signal.SIGTERM, signal.SIGUSR1)
_WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP}
_KILL_ROUND = 0.005  # seconds between two SIGKILL rounds while processes remain


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl: still a supervisor, only orphans are lost to PID 1


def _descendants() -> list[int]:
    """Live processes below this one, from ``/proc`` (zombies excluded)."""
    children: dict[int, list[int]] = {}
    zombies: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            fields = stat[stat.rindex(b")") + 2 :].split(b" ", 2)
            pid, ppid = int(name), int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
        if fields[0] in (b"Z", b"X"):
            zombies.add(pid)
    found: list[int] = []
    pending = [os.getpid()]
    while pending:
        for child in children.get(pending.pop(), ()):
            pending.append(child)
            if child not in zombies:
                found.append(child)
    return found


def _signal_all(sig: int) -> None:
    # A descendant's pid cannot be reused before it is reaped, and its reaper is either
    # this process (which is busy here) or a parent in the tree that is still alive; the
    # window between reading /proc and the kill is a few microseconds.
    for pid in _descendants():
        try:  # noqa: SIM105 - see the imports
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _exit_like(status: int | None) -> None:
    """Exit with *status* (the command's): the same code, or death by the same signal."""
    if status is None:
        os._exit(127)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource  # only needed on this path

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command's core, not ours
            if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be handled
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not kill (cannot happen: it killed COMMAND)
    os._exit(os.waitstatus_to_exitcode(status))


def _start(command: list[str], report: int) -> int:
    pid = os.fork()
    if pid == 0:  # the command: its own process group, default signals, then exec
        try:
            os.setpgid(0, 0)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these
                signal.signal(sig, signal.SIG_DFL)
            os.set_inheritable(report, False)  # closed by a successful exec
            os.execvp(command[0], command)
        except OSError as exc:
            try:  # noqa: SIM105 - see the imports
                os.write(report, f"E{exc.errno or 0}\n".encode())
            except OSError:
                pass
        os._exit(127)
    try:  # noqa: SIM105 - see the imports
        os.setpgid(pid, pid)  # both sides set it, so it holds whichever runs first
    except OSError:
        pass  # it already exec'd (the child's own setpgid is done) or already exited
    try:  # noqa: SIM105 - see the imports
        os.write(report, f"P{pid}\n".encode())
    except OSError:
        pass
    os.close(report)
    return pid


def main(argv: list[str]) -> None:
    """Run as ``_reaper.py MODE FD -- COMMAND...`` (see the module docs); never returns."""
    mode, report, command = argv[1], int(argv[2]), argv[4:]
    parent = os.getppid()
    _become_subreaper()
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    main_pid = _start(command, report)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the pipes belong to the tree: their end is the tree's end
        os.dup2(devnull, fd)
    os.close(devnull)
    status: int | None = None
    stopping = killing = False
    while True:
        while True:  # reap whatever has ended: the command, or any adopted orphan
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                _exit_like(status)  # no process of the tree is left
                raise  # not reached: _exit_like does not return
            if pid == 0:
                break
            if pid == main_pid:
                status = wait_status
        if status is not None and mode == "exit" and not stopping:
            _exit_like(status)
        if killing:
            _signal_all(signal.SIGKILL)
        info = signal.sigtimedwait(_WATCHED, _KILL_ROUND if killing else 1.0)
        if info is None or info.si_signo not in _REQUESTS or info.si_pid != parent:
            continue
        stopping = True
        if info.si_signo == signal.SIGUSR1:
            killing = True
        else:
            _signal_all(signal.SIGTERM)


if __name__ == "__main__":
    main(sys.argv)
