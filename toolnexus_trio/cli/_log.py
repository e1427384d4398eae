"""The library's log records as the terminal commands show them (``run``, ``tools``, ``serve``).

Without a handler, Python prints a warning's raw text to stderr (its "last resort"), so
a hostile MCP server's error text, which the library logs, would reach the terminal
with its escape sequences (a window title set, the screen cleared, OSC 52 writing the
clipboard). :func:`terminal_logging` puts one handler on the root logger instead: each
record is one line, its control characters made visible as everywhere else in the CLI.

While a command starts its toolkit it may :meth:`~TerminalLog.hold` the records, report
each failed MCP server itself (once), and then :meth:`~TerminalLog.show_held` the rest,
leaving out the records that only said the same thing again.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, TextIO

from ._ask import _TEXT_CONTROLS, _escape, _one_line

MAX_HELD: Final = 200
"""Records held beyond this many are counted, not kept: memory stays bounded."""

_WIDTH: Final = 2000
_FORMAT: Final = logging.Formatter()


class TerminalLog(logging.Handler):
    """Writes each record of *level* and above as one escaped line to *stream* (default:
    ``sys.stderr`` at the time of writing), after its logger's name with *names*."""

    def __init__(
        self, stream: TextIO | None = None, *, level: int = logging.WARNING, names: bool = False
    ) -> None:
        super().__init__(level)
        self._stream = stream
        self._names = names
        self._held: list[logging.LogRecord] | None = None
        self._dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Write *record* (or keep it, while holding)."""
        if self._held is not None:
            if len(self._held) < MAX_HELD:
                self._held.append(record)
            else:
                self._dropped += 1
            return
        self._write(record)

    def hold(self) -> None:
        """Keep the records from now on, until :meth:`show_held`."""
        if self._held is None:
            self._held = []
            self._dropped = 0

    def show_held(self, *, skip: Callable[[str], bool] = lambda _message: False) -> None:
        """Write the records kept since :meth:`hold`, except those whose message *skip*
        says were reported already; then write records as they come. Idempotent."""
        held, self._held = self._held, None
        for record in held or ():
            if not skip(_message(record)):
                self._write(record)
        if self._dropped:
            self._line(f"({self._dropped} more log records not shown)")
            self._dropped = 0

    def _write(self, record: logging.LogRecord) -> None:
        text = _message(record)
        if self._names:
            text = f"{record.name}: {text}"
        trace = ""
        if record.exc_info and record.exc_info[1] is not None:
            # The traceback keeps its lines; any other control character is made visible.
            trace = _TEXT_CONTROLS.sub(_escape, _FORMAT.formatException(record.exc_info))
        self._line(text, trace)

    def _line(self, text: str, trace: str = "") -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        try:
            stream.write(_one_line(text, _WIDTH) + "\n" + (trace + "\n" if trace else ""))
            stream.flush()
        except (OSError, ValueError):  # stderr closed: nothing more can be said
            pass


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except (TypeError, ValueError):  # a record whose arguments do not fit its format
        return str(record.msg)


@contextmanager
def terminal_logging(*, level: int = logging.WARNING, names: bool = False) -> Iterator[TerminalLog]:
    """A :class:`TerminalLog` on the root logger for the block, the root logger at
    *level* (both as before after it)."""
    root = logging.getLogger()
    handler = TerminalLog(level=level, names=names)
    before = root.level
    root.setLevel(level)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(before)
        handler.show_held()
