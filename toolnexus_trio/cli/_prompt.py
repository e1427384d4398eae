"""The ``run`` prompt: line editing and a history kept across sessions.

On a terminal (stdin and stdout both one), each prompt line is read by the stdlib
:mod:`readline` module (GNU readline, or libedit on macOS) through :func:`input` in a
worker thread: the arrow keys, Home/End and the rest of readline's editing work, Up
recalls the earlier lines, and every line entered is appended to the history file
(:func:`history_path`), which the next session loads (the last :data:`HISTORY_LENGTH`
lines). Anywhere else (a pipe, a file, stdout redirected, no :mod:`readline` module)
the lines come from :class:`~._terminal.TerminalLines` as before, without editing.

Why readline in a thread, not prompt_toolkit: prompt_toolkit runs its own asyncio
event loop, which under Trio would have to live in a thread of its own; readline is in
the standard library and is what the Python REPL itself uses. Why the thread is safe
here, where :class:`~._terminal.TerminalLines` avoids one: :func:`input` on a terminal
goes through ``PyOS_Readline``, not through ``sys.stdin``'s buffered object, so a
thread left waiting in it after Ctrl-C holds no lock that interpreter shutdown needs.
The SIGINT still reaches Trio (the thread never handles signals), so Ctrl-C and Ctrl-D
behave as before: Ctrl-C at the prompt ends the command (exit 130), Ctrl-D on an empty
line (end of input) quits. Readline puts the terminal in its own mode while it reads;
a read abandoned by Ctrl-C puts the saved terminal mode back.

The history file's folder is made private (0700) and the file too (0600): a line typed
at the prompt may hold anything.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import trio

from ._terminal import TerminalLines, is_terminal

HISTORY_LENGTH: Final = 1000
"""The history keeps this many lines (older ones are dropped when a session starts)."""


def history_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the prompt's history lives: ``$XDG_STATE_HOME/toolnexus-trio/history``,
    by default ``~/.local/state/toolnexus-trio/history`` (a relative ``XDG_STATE_HOME``
    is ignored, as the XDG Base Directory specification says)."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "toolnexus-trio" / "history"


def _load_readline() -> ModuleType | None:
    try:
        import readline
    except ImportError:  # Windows, or a Python built without it
        return None
    return readline


class PromptLines:
    """The lines typed at the ``run`` prompt (*prompt* shown before each).

    :meth:`readline` returns a line (without its ending) or ``None`` at end of input.
    With line editing off, the prompt is written to stderr and the line read from
    *lines* (shared with the tools' questions, which never go into the history).
    """

    def __init__(self, lines: TerminalLines, prompt: str = "> ") -> None:
        self._lines = lines
        self._prompt = prompt
        on_terminal = is_terminal(0) and is_terminal(1)
        self._readline = _load_readline() if on_terminal else None
        self._history = history_path()
        self._loaded = False

    async def readline(self) -> str | None:
        """The next line, or ``None`` at end of input. Cancellable at any point."""
        readline = self._readline
        if readline is not None:
            saved = _terminal_mode()
            try:
                ahead, line = await trio.to_thread.run_sync(
                    self._read, readline, abandon_on_cancel=True
                )
            except BaseException:
                # Abandoned mid-line (Ctrl-C): readline's terminal mode would outlive us.
                _restore_terminal_mode(saved)
                raise
            if not ahead:
                return line
        if is_terminal(0):
            print(self._prompt, end="", file=sys.stderr, flush=True)
        line = await self._lines.readline()
        if line is not None and readline is not None:
            await trio.to_thread.run_sync(self._remember, readline, line)
        return line

    def _load_history(self, readline: ModuleType) -> None:
        readline.set_history_length(HISTORY_LENGTH)
        with suppress(OSError):
            self._history.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(self._history, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            readline.read_history_file(str(self._history))
            if readline.get_current_history_length() >= HISTORY_LENGTH:
                readline.write_history_file(str(self._history))  # the file stays bounded

    def _remember(self, readline: ModuleType, line: str) -> None:
        # A line that did not come through input(): into the history as input() does.
        last = readline.get_history_item(readline.get_current_history_length())
        if line.strip() and line != last:
            readline.add_history(line)
            with suppress(OSError):
                readline.append_history_file(1, str(self._history))

    def _read(self, readline: ModuleType) -> tuple[bool, str | None]:
        """In the worker thread (a Ctrl-C abandons it here, left waiting): ``(True,
        None)`` when a line was typed ahead (read it from the terminal as it is), else
        ``(False, the line or None at end of input)``."""
        if not self._loaded:
            self._loaded = True
            self._load_history(readline)
        # Checked here, as late as can be: readline leaving the line mode would lose a
        # Ctrl-D typed during the turn.
        if _typed_ahead():
            return True, None
        last = readline.get_history_item(readline.get_current_history_length())
        try:
            line = input(self._prompt)
        except EOFError:  # Ctrl-D on an empty line, or the terminal hung up
            return False, None
        # input() has added the line to readline's history unless it is empty or the same
        # as the last one; the file gets what the history got.
        if line.strip() and line != last:
            with suppress(OSError):
                readline.append_history_file(1, str(self._history))
        return False, line


def _typed_ahead() -> bool:
    """Whether a whole line, or a Ctrl-D, was typed during the turn and waits on fd 0.

    The terminal is in its line mode between prompts, so fd 0 is readable only then.
    Such input is read as it is (it was echoed already): readline switching the
    terminal out of line mode would lose a typed-ahead Ctrl-D.
    """
    try:
        readable, _, _ = select.select([0], [], [], 0)
    except (OSError, ValueError):
        return False
    return bool(readable)


def _terminal_mode() -> Any:
    try:
        import termios
    except ImportError:  # not a POSIX system
        return None
    try:
        return termios.tcgetattr(0)
    except termios.error:
        return None


def _restore_terminal_mode(saved: Any) -> None:
    if saved is None:
        return
    import termios

    with suppress(termios.error):
        termios.tcsetattr(0, termios.TCSANOW, saved)
