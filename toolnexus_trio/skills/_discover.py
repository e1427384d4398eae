"""The file-system half of the skill source: finding ``SKILL.md`` files and sampling.

Everything here is blocking and runs in a worker thread (:func:`in_thread`), so the
event loop never waits on a disk. A cancelled caller abandons the thread and sets its
``stop`` flag, which the walks check at every directory: an abandoned walk ends soon
instead of finishing a large tree for nobody.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

import trio

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 1024 * 1024
"""A ``SKILL.md`` larger than this is skipped as ``unreadable``: memory stays bounded."""
SKIP_DIRS = frozenset({"node_modules", ".git"})
"""Directories neither discovery nor the sampler enters."""

T = TypeVar("T")


class Abandoned(Exception):
    """The caller went away; the walk stopped early."""


async def in_thread(fn: Callable[[threading.Event], T]) -> T:
    """Run ``fn(stop)`` in a worker thread; a cancel abandons it and sets ``stop``."""
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(fn, stop, abandon_on_cancel=True)
    finally:
        stop.set()


def _entries(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []  # unreadable or vanished: nothing to find there


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks
    except OSError:
        return False


def find_skill_files(root: str, stop: threading.Event) -> list[str] | None:
    """Every ``SKILL.md`` under *root* (absolute paths), ``None`` if *root* is no directory.

    Symlinked directories and files are followed; a directory whose real path was
    already visited is not entered again (a cycle, or the same tree reached twice), and
    one real ``SKILL.md`` is found once. The order is depth first (fewest directories
    between *root* and the file), then the relative path by code point, so the
    first-wins rule is deterministic.
    """
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        return None
    visited = {os.path.realpath(root)}
    files: set[str] = set()
    found: list[tuple[int, str, str]] = []
    queue: deque[tuple[str, str, int]] = deque([(root, "", 0)])
    while queue:
        if stop.is_set():
            raise Abandoned
        path, rel, depth = queue.popleft()
        for entry in sorted(_entries(path), key=lambda e: e.name):
            child = f"{rel}/{entry.name}" if rel else entry.name
            if _is_dir(entry):
                if entry.name in SKIP_DIRS:
                    continue
                real = os.path.realpath(entry.path)
                if real not in visited:
                    visited.add(real)
                    queue.append((entry.path, child, depth + 1))
            elif entry.name == SKILL_FILE:
                # A dangling link is kept: reading it reports it as unreadable.
                real = os.path.realpath(entry.path)
                if real not in files:
                    files.add(real)
                    found.append((depth, child, entry.path))
    found.sort(key=lambda f: (f[0], f[1]))
    return [path for _, _, path in found]


def read_skill_file(path: str) -> str:
    """The text of a ``SKILL.md``: UTF-8 (a BOM is dropped), newlines made ``\\n``.

    Raises :class:`OSError` or :class:`ValueError` (not a regular file, too large, not
    UTF-8) with a message fit for a skip's ``detail``.
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")  # a FIFO would block the open
    with open(path, "rb") as f:
        data = f.read(MAX_SKILL_BYTES + 1)
    if len(data) > MAX_SKILL_BYTES:
        raise ValueError(f"larger than {MAX_SKILL_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def sample_files(directory: str, limit: int, stop: threading.Event) -> list[str]:
    """Up to *limit* files under *directory* except ``SKILL.md`` files, as absolute paths.

    The sample is the first *limit* of all such files sorted by relative path (code
    point), found without listing the whole tree: each directory's entries are taken
    in the order their paths sort (a directory sorts as ``name/``, since every path
    under it starts so), depth first, so the walk stops once it has *limit* files.
    Symlinks are followed with the same real-path guard as discovery.
    """
    out: list[str] = []
    visited: set[str] = set()
    # Items are (absolute path of a directory still to list, or None for a file, rel).
    # A directory is marked when it is listed, so of two paths to one real directory
    # the one that sorts first lists it.
    stack: list[tuple[str | None, str]] = [(directory, "")]
    while stack and len(out) < limit:
        if stop.is_set():
            raise Abandoned
        path, rel = stack.pop()
        if path is None:
            out.append(os.path.join(directory, rel))
            continue
        real = os.path.realpath(path)
        if real in visited:
            continue
        visited.add(real)
        keyed: list[tuple[str, str | None, str]] = []
        for entry in _entries(path):
            child = f"{rel}/{entry.name}" if rel else entry.name
            if _is_dir(entry):
                if entry.name not in SKIP_DIRS:
                    keyed.append((entry.name + "/", entry.path, child))
            elif entry.name != SKILL_FILE and _is_file(entry):
                keyed.append((entry.name, None, child))
        keyed.sort(key=lambda k: k[0])
        stack.extend((p, c) for _, p, c in reversed(keyed))
    return out


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False
