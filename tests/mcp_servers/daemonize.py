"""Start a daemon the classic way, then carry on: ``daemonize.py PIDFILE [COMMAND...]``.

The daemon is made by a double fork with ``setsid()`` in between: it leads a new session
and process group, its parent has exited (so it is an orphan), and it has closed its
standard streams, so no pipe leads back to whoever started it. It writes its pid to
PIDFILE (atomically) and sleeps. The script then waits for the first child and, when
COMMAND is given, execs it (an MCP server, say), else exits.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    pidfile = sys.argv[1]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            with open(pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pidfile + ".tmp", pidfile)
            time.sleep(300)
        os._exit(0)
    os.wait()  # the first child is gone: the daemon is an orphan now
    if len(sys.argv) > 2:
        os.execvp(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()
