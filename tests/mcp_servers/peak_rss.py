"""Run a command and write its peak resident set (bytes, from wait4) to a file.

    python peak_rss.py OUT COMMAND...

The command inherits our stdin, stdout and stderr; we exit with its exit status. A
child's ``ru_maxrss`` counts the image it was forked from, so measuring a command
started straight from a big process (a test run) would measure that process: started
from this small one, it measures the command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    out, command = Path(sys.argv[1]), sys.argv[2:]
    child = subprocess.Popen(command)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    out.write_text(str(usage.ru_maxrss * 1024))  # KiB on Linux
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
