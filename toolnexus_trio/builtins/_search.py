"""The search builtins ``glob`` and ``grep``: one tree walk, run in a worker thread.

The walk lists regular files only, never follows a symlink (so it cannot leave the
tree, nor ``base_dir``), and skips ``.git`` and ``node_modules`` directories, as the
released ports do. Results are sorted by relative path (code point order). The walk
checks a stop flag as it goes: a cancelled call is abandoned at once and its thread
stops within a directory or a file.

Glob patterns: ``*`` (within one path segment), ``**`` (across segments; ``**/``
also matches no directory at all), ``?``, ``[abc]``/``[!abc]`` and ``{a,b}``. A
pattern without ``/`` matches a file's name at any depth; one with ``/`` matches the
path relative to the search directory.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
from collections.abc import Iterator
from functools import partial
from typing import Any, Final

import attrs
import trio

from .._tools import Tool, ToolContext, ToolResult
from ._config import BuiltinError, Place, builtin, required, whole_number
from ._files import MAX_FILE_BYTES, universal_newlines

DEFAULT_LIMIT: Final = 100
SKIPPED_DIRS: Final = frozenset({".git", "node_modules"})
_BINARY_SNIFF: Final = 8192

_grep_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Regular expression to search for"},
        "path": {"type": "string", "description": "Directory to search (default: process cwd)"},
        "include": {"type": "string", "description": "Glob filter for file names"},
        "limit": {"type": "number", "description": "Maximum number of matches (default 100)"},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

_glob_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Glob pattern to match"},
        "path": {"type": "string", "description": "Directory to search (default: process cwd)"},
        "limit": {"type": "number", "description": "Maximum number of results (default 100)"},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}


class Stopped(Exception):
    """The walk's caller went away (its call was cancelled)."""


def _translate(pattern: str, i: int = 0, in_braces: bool = False) -> tuple[str, int]:
    out: list[str] = []
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if in_braces and c in ",}":
            break
        if c == "*":
            if pattern.startswith("**", i):
                if pattern.startswith("**/", i):
                    out.append("(?:.*/)?")
                    i += 3
                else:
                    out.append(".*")
                    i += 2
            else:
                out.append("[^/]*")
                i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern.startswith(("[!", "[]"), i) else i + 1)
            if end < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                escaped = re.sub(r"([\\^\[&~|])", r"\\\1", body)
                out.append(("[^/" if negate else "[") + escaped + "]")
                i = end + 1
        elif c == "{":
            alternatives: list[str] = []
            j = i + 1
            while True:
                part, j = _translate(pattern, j, in_braces=True)
                alternatives.append(part)
                if j >= n or pattern[j] == "}":
                    break
                j += 1  # past ","
            if j >= n:  # no closing brace: a literal "{"
                out.append(re.escape(c))
                i += 1
            else:
                out.append("(?:" + "|".join(alternatives) + ")")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out), i


@attrs.frozen
class GlobMatcher:
    """A compiled glob (see the module docs for the syntax)."""

    pattern: str
    _regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)
    _whole_path: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        translated, _ = _translate(self.pattern)
        try:
            regex = re.compile(translated, re.DOTALL)
        except re.error as exc:
            raise BuiltinError(f"invalid glob pattern {self.pattern!r}: {exc}") from None
        object.__setattr__(self, "_regex", regex)
        object.__setattr__(self, "_whole_path", "/" in self.pattern)

    def matches(self, relative: str, name: str) -> bool:
        """Whether the file at *relative* (``/``-separated), named *name*, matches."""
        return self._regex.fullmatch(relative if self._whole_path else name) is not None


def search_root(place: Place, path: str, *, allow_file: bool = False) -> str:
    """The directory to walk for *path* (or, with *allow_file*, a single file to search).

    A missing path, or a file where a directory is needed, is an error.
    """
    root = place.resolve(path)
    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), place.display(path)) from None
    if not stat.S_ISDIR(info.st_mode) and not (allow_file and stat.S_ISREG(info.st_mode)):
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), place.display(path))
    return root


def walk_files(root: str, stop: threading.Event) -> Iterator[tuple[str, str, str]]:
    """``(relative, name, full path)`` of every regular file under *root*, unsorted.

    A *root* that is a file yields that file alone, named by its base name.
    """
    if not os.path.isdir(root):
        name = os.path.basename(root)
        yield name, name, root
        return
    pending = [("", root)]
    while pending:
        if stop.is_set():
            raise Stopped
        prefix, directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            continue  # unreadable or vanished: skipped, as os.walk does
        for entry in listed:
            try:  # follow_symlinks=False: a symlink is neither, so it is skipped
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in SKIPPED_DIRS:
                        pending.append((prefix + entry.name + "/", entry.path))
                elif entry.is_file(follow_symlinks=False):
                    yield prefix + entry.name, entry.name, entry.path
            except OSError:
                continue


def _glob(root: str, matcher: GlobMatcher, limit: int, stop: threading.Event) -> list[str]:
    found = [rel for rel, name, _ in walk_files(root, stop) if matcher.matches(rel, name)]
    found.sort()
    return found[: max(limit, 0)]


@attrs.frozen
class _Grep:
    regex: re.Pattern[str]
    prefilter: re.Pattern[str] | None
    literal: bytes | None


_UNSAFE_FOR_PREFILTER = ("(?<!", "(?!", "\\A", "\\Z", "(?-")


def _compile_grep(pattern: str) -> _Grep:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise BuiltinError(f"invalid regex: {exc}") from None
    # One search over the whole text rejects most files before they are split into
    # lines. It can only give false positives, except with the constructs listed.
    prefilter = None
    if not any(token in pattern for token in _UNSAFE_FOR_PREFILTER):
        prefilter = re.compile(pattern, re.MULTILINE)
    literal = None
    if re.escape(pattern) == pattern and "\r" not in pattern and "\n" not in pattern:
        literal = pattern.encode("utf-8")  # a plain word: search the raw bytes first
    return _Grep(regex, prefilter, literal)


def _search_file(grep: _Grep, rel: str, full: str, out: list[str], limit: int) -> None:
    """Append *full*'s matching lines to *out*.

    Skipped without a word: files over :data:`MAX_FILE_BYTES`, unreadable ones, binary
    ones (a NUL byte in the first 8 KiB) and ones that are not UTF-8.
    """
    try:
        with open(full, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                return
            data = f.readall() if size == 0 else f.read(size + 1)
    except OSError:
        return
    if len(data) > MAX_FILE_BYTES:
        return
    if grep.literal is not None and grep.literal not in data:
        return
    if b"\0" in data[:_BINARY_SNIFF]:
        return
    try:
        text = universal_newlines(data.decode("utf-8"))
    except UnicodeDecodeError:
        return
    if grep.prefilter is not None and grep.prefilter.search(text) is None:
        return
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # a final newline ends the last line; it does not start another
    search = grep.regex.search
    for number, line in enumerate(lines, 1):
        if search(line) is not None:
            out.append(f"{rel}:{number}:{line}")
            if len(out) >= limit:
                break


def _grep(
    root: str, grep: _Grep, include: GlobMatcher | None, limit: int, stop: threading.Event
) -> list[str]:
    files = [
        (rel, full)
        for rel, name, full in walk_files(root, stop)
        if include is None or include.matches(rel, name)
    ]
    files.sort()
    out: list[str] = []
    for rel, full in files:
        if len(out) >= limit:
            break
        if stop.is_set():
            raise Stopped
        _search_file(grep, rel, full, out, limit)
    return out


async def _in_thread(fn: Any, *args: Any) -> Any:
    """Run a walk in a worker thread; on cancel, abandon it and tell it to stop."""
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(partial(fn, *args, stop), abandon_on_cancel=True)
    finally:
        stop.set()


def glob_tool(place: Place) -> Tool:
    """``glob {pattern, path?, limit?}``: sorted relative paths of matching files."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = required(args, "pattern")
        limit = whole_number(args.get("limit"), "limit")
        limit = DEFAULT_LIMIT if limit is None else limit
        path = args.get("path") or place.default_dir()
        matcher = GlobMatcher(pattern)
        root = await trio.to_thread.run_sync(search_root, place, path, abandon_on_cancel=True)
        found: list[str] = await _in_thread(_glob, root, matcher, limit)
        return ToolResult.ok("\n".join(found), {"count": len(found)})

    description = (
        "List files whose path matches a glob pattern under a directory, as sorted relative "
        "paths, one per line (`*`, `**`, `?`, `[abc]`, `{a,b}`; a pattern without `/` "
        "matches file names at any depth)."
    )
    return builtin("glob", description, _glob_schema, run)


def grep_tool(place: Place) -> Tool:
    """``grep {pattern, path?, include?, limit?}``: ``file:line:text`` matches."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        grep = _compile_grep(required(args, "pattern"))
        limit = whole_number(args.get("limit"), "limit")
        limit = DEFAULT_LIMIT if limit is None else limit
        include = args.get("include")
        matcher = GlobMatcher(include) if include else None
        path = args.get("path") or place.default_dir()
        root = await trio.to_thread.run_sync(
            partial(search_root, place, path, allow_file=True), abandon_on_cancel=True
        )
        if limit <= 0:
            return ToolResult.ok("", {"count": 0})
        found: list[str] = await _in_thread(_grep, root, grep, matcher, limit)
        return ToolResult.ok("\n".join(found), {"count": len(found)})

    description = (
        "Search the contents of files under a directory with a regular expression (Python "
        "syntax). Output is one `path:line:text` per matching line; `include` filters files "
        "by a glob. Binary and non-UTF-8 files are skipped. `path` may also be one file."
    )
    return builtin("grep", description, _grep_schema, run)
