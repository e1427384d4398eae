"""SPEC §7E, the directory is the agent: the bootstrap files composed into a soul.

A persona's home is a folder. :func:`compose_soul` reads the seven bootstrap files of
:data:`BOOTSTRAP_ORDER` that are present and joins them, in that order, as ``## <file>``
sections: the system prompt the persona runs with. Each file is read with a byte cap
(:data:`MAX_BOOTSTRAP_BYTES`, 2,097,152 bytes); a larger file is cut at the cap, which
may split a multibyte character (the broken tail is dropped), and :data:`TRUNCATION_NOTICE`
follows it. The file on disk is never touched.

The home is a place the host points at, maybe written by others, so each file is checked
before it is read: a symlink must stay inside the home, the file must be a regular file
(a FIFO or a device named ``MEMORY.md`` would block or never end: it is opened
non-blocking and checked on the open descriptor, so a swap between check and read is
caught), and only the cap plus one byte is ever read. Everything here blocks: async code
runs it in a worker thread (:func:`compose_soul_async`).
"""

from __future__ import annotations

import codecs
import os
import stat
from typing import Final

import trio

BOOTSTRAP_ORDER: Final = (
    "AGENTS.md",
    "SOUL.md",
    "IDENTITY.md",
    "USER.md",
    "TOOLS.md",
    "HEARTBEAT.md",
    "MEMORY.md",
)
"""The bootstrap files of a persona home, in the order they enter the soul (SPEC §7E)."""

MAX_BOOTSTRAP_BYTES: Final = 2_097_152
"""The per-file cap, in bytes (2 MiB): a larger file enters the soul cut to this size."""

TRUNCATION_NOTICE: Final = "[truncated: exceeds 2 MB bootstrap cap]"
"""The line that follows a bootstrap file cut at :data:`MAX_BOOTSTRAP_BYTES`."""

HEARTBEAT_OK: Final = "HEARTBEAT_OK"
"""The reply that keeps a heartbeat silent: a beat answered with it is not reported."""


class HomeFileError(ValueError):
    """A home file exists but cannot be used (not regular, outside the home, not UTF-8)."""


def home_path(home: str | os.PathLike[str], name: str) -> str | None:
    """The real path of *name* in *home*, or ``None`` when it is absent.

    A symlink is followed only when its real target lies inside the real home; any
    other symlink (or a dangling one) is refused. Blocking.
    """
    base = os.path.realpath(home)
    path = os.path.join(base, name)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISLNK(info.st_mode):
        return path
    real = os.path.realpath(path)
    if not real.startswith(base.rstrip(os.sep) + os.sep):
        raise HomeFileError(f"{path} is a symlink that leads outside the agent home {base}")
    if not os.path.exists(real):
        raise HomeFileError(f"{path} is a dangling symlink")
    return real


def read_capped(path: str, cap: int) -> tuple[bytes, bool]:
    """At most *cap* bytes of the regular file *path*, and whether it was longer. Blocking."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    # O_NOFOLLOW: *path* comes from home_path (never a symlink), so a symlink found
    # here was swapped in after the check, and is refused (ELOOP).
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))
    try:
        # Checked on the descriptor, not the name: the file read is the file checked.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HomeFileError(f"{path} is not a regular file")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        data = f.read(cap + 1)
    return data[:cap], len(data) > cap


def decode(data: bytes, path: str, *, cut: bool) -> str:
    """*data* as UTF-8; when it was *cut*, an incomplete last character is dropped."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        # final=False keeps a split multibyte tail pending (dropped) and still refuses
        # invalid bytes anywhere else.
        text = decoder.decode(data, final=not cut)
    except UnicodeDecodeError:
        raise HomeFileError(f"{path} is not valid UTF-8 text") from None
    return text


def compose_soul(dir: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """The soul composed from the persona home *dir*, and the files it was built from.

    Each present file of :data:`BOOTSTRAP_ORDER` becomes a section ``## <file>``, a
    blank line, and the file's text with surrounding whitespace stripped; sections are
    separated by a blank line. Absent files are skipped (a home with none, or a home
    that does not exist, gives ``("", [])``); a file over :data:`MAX_BOOTSTRAP_BYTES`
    bytes is cut there and followed by :data:`TRUNCATION_NOTICE` on its own line. Raises
    :class:`ValueError` for a file that is present but unusable (a directory, a FIFO, a
    symlink leading out of the home, text that is not UTF-8), or a home that is a file.

    It reads files and so blocks: call it before the event loop starts, or in a worker
    thread (``await trio.to_thread.run_sync(compose_soul, dir)``), as
    :func:`~toolnexus_trio.agents.agent_from_dir` does.
    """
    if os.path.exists(dir) and not os.path.isdir(dir):
        raise HomeFileError(f"the agent home {os.fspath(dir)} is not a directory")
    sections: list[str] = []
    loaded: list[str] = []
    for name in BOOTSTRAP_ORDER:
        path = home_path(dir, name)
        if path is None:
            continue
        data, cut = read_capped(path, MAX_BOOTSTRAP_BYTES)
        body = decode(data, path, cut=cut)
        if cut:
            body += "\n" + TRUNCATION_NOTICE
        sections.append(f"## {name}\n\n{body.strip()}")
        loaded.append(name)
    return "\n\n".join(sections), loaded


async def compose_soul_async(dir: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """:func:`compose_soul` in a worker thread (it reads up to 14 MiB); abandoned on cancel."""
    return await trio.to_thread.run_sync(compose_soul, dir, abandon_on_cancel=True)
