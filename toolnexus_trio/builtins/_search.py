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

Both patterns come from a model, so they are treated as hostile: ``grep``'s regular
expression and the regular expression a glob becomes run on RE2 (google-re2), whose
matching time is linear in the text whatever the pattern, and which lets go of the
GIL while it matches, so the event loop keeps running beside the worker thread.
Python's ``re`` backtracks: ``(a+)+$`` against one 26-character line held the GIL for
7 s. ``grep`` patterns are therefore RE2 syntax (the dialect of the Go and Rust ports
and of ripgrep); what only a backtracking engine can do (lookaround,
backreferences) is refused with an error that says so.
"""

from __future__ import annotations

import errno
import os
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


RE2_MAX_MEM: Final = 8 * 1024 * 1024
"""Memory RE2 may use for one compiled pattern (its default); a bigger one is refused."""


def _re2_options(*, dot_nl: bool = False, never_nl: bool = False) -> Any:
    # RE2 is imported by the first search, not with the package (a few ms of start-up).
    import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # RE2 would print every bad pattern on stderr
    options.never_capture = True  # only whether and where: no submatches to track
    options.dot_nl = dot_nl
    options.never_nl = never_nl
    return options


def _re2_compile(pattern: str, options: Any) -> Any:
    """*pattern* compiled by RE2; :class:`ValueError` with RE2's reason when it refuses."""
    try:
        encoded = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the pattern is not valid Unicode (a lone surrogate)") from None
    import re2

    try:
        return re2.compile(encoded, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "rejected"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None


def _literal(c: str) -> str:
    """*c* as an RE2 literal, inside or outside a class."""
    if c.isalnum() or c == "_" or not c.isascii():
        return c
    if c.isprintable():
        return "\\" + c  # RE2 takes any escaped ASCII punctuation (and space) as itself
    return f"\\x{{{ord(c):x}}}"


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
                out.append(_literal(c))
                i += 1
            else:
                body = pattern[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                # "-" between two characters makes a range; every other one is itself.
                items = [
                    "-" if ch == "-" and 0 < k < len(body) - 1 else _literal(ch)
                    for k, ch in enumerate(body)
                ]
                out.append(("[^/" if negate else "[") + "".join(items) + "]")
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
                out.append(_literal(c))
                i += 1
            else:
                out.append("(?:" + "|".join(alternatives) + ")")
                i = j + 1
        else:
            out.append(_literal(c))
            i += 1
    return "".join(out), i


def _path_bytes(path: str) -> bytes:
    # A name that is not UTF-8 comes from os.scandir with one lone surrogate per bad
    # byte; "replace" makes each of them one "?", so it is still one character.
    try:
        return path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "replace")


@attrs.frozen
class GlobMatcher:
    """A compiled glob (see the module docs for the syntax), matched by RE2."""

    pattern: str
    _regex: Any = attrs.field(init=False, eq=False, repr=False)
    _whole_path: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        translated, _ = _translate(self.pattern)
        try:
            regex = _re2_compile(translated, _re2_options(dot_nl=True))
        except ValueError as exc:
            raise BuiltinError(f"invalid glob pattern {self.pattern!r}: {exc}") from None
        object.__setattr__(self, "_regex", regex)
        object.__setattr__(self, "_whole_path", "/" in self.pattern)

    def matches(self, relative: str, name: str) -> bool:
        """Whether the file at *relative* (``/``-separated), named *name*, matches."""
        subject = _path_bytes(relative if self._whole_path else name)
        return self._regex.fullmatch(subject) is not None


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
    regex: Any  # an RE2 regex over UTF-8 bytes, with per-line anchors (see _per_line)
    literal: bytes | None


_METACHARACTERS: Final = frozenset("\\^$.|?*+()[]{}")


def _class_end(pattern: str, i: int) -> int:
    """The index just past the character class that starts at ``pattern[i] == "["``."""
    n = len(pattern)
    j = i + 1
    if j < n and pattern[j] == "^":
        j += 1
    if j < n and pattern[j] == "]":  # a "]" first is itself
        j += 1
    while j < n:
        c = pattern[j]
        if c == "\\":
            j += 2
        elif c == "[" and pattern.startswith("[:", j):
            close = pattern.find(":]", j + 2)
            j = n if close < 0 else close + 2
        elif c == "]":
            return j + 1
        else:
            j += 1
    return n  # unterminated: RE2 reports it


def _per_line(pattern: str) -> str:
    r"""*pattern* with every anchor made a line anchor.

    ``grep`` matches each line on its own, so ``^``, ``\A`` mean the line's start and
    ``$``, ``\z`` (and Python's ``\Z``) its end, whatever ``(?m)`` says. Written as
    ``(?m:^)`` and ``(?m:$)``, the pattern can be searched over the whole file at once
    (with RE2's ``never_nl`` no match crosses a newline), and each line is read once.
    """
    out: list[str] = []
    n = len(pattern)
    i = 0
    while i < n:
        c = pattern[i]
        if c == "\\":
            escaped = pattern[i + 1 : i + 2]
            if escaped == "A":
                out.append("(?m:^)")
            elif escaped in ("z", "Z"):
                out.append("(?m:$)")
            elif escaped == "C":
                raise ValueError("\\C (any byte) is not supported")
            elif escaped == "Q":  # \Q...\E is literal text: copied as it is
                close = pattern.find("\\E", i + 2)
                stop = n if close < 0 else close + 2
                out.append(pattern[i:stop])
                i = stop
                continue
            else:
                out.append(pattern[i : i + 2])
            i += 2
        elif c == "^":
            out.append("(?m:^)")
            i += 1
        elif c == "$":
            out.append("(?m:$)")
            i += 1
        elif c == "[":
            stop = _class_end(pattern, i)
            out.append(pattern[i:stop])
            i = stop
        else:
            out.append(c)
            i += 1
    return "".join(out)


# What RE2 says, and what it means for a pattern written for a backtracking engine.
_HINTS: Final = {
    "invalid perl operator": "grep uses RE2 syntax: no lookaround or backreferences",
    "invalid escape sequence": "grep uses RE2 syntax: no lookaround or backreferences",
    "invalid repetition size": "RE2 allows at most 1000 repetitions, nesting included",
    "bad repetition operator": "RE2 allows at most 1000 repetitions, nesting included",
    "pattern too large": f"RE2 compiles a pattern into at most {RE2_MAX_MEM // 2**20} MiB",
}


def _compile_grep(pattern: str) -> _Grep:
    try:
        regex = _re2_compile(_per_line(pattern), _re2_options(never_nl=True))
    except ValueError as exc:
        reason = str(exc)
        hint = next((h for start, h in _HINTS.items() if reason.startswith(start)), None)
        if hint is not None:
            reason += f" ({hint})"
        raise BuiltinError(f"invalid regex: {reason}") from None
    literal = None
    if not _METACHARACTERS.intersection(pattern) and "\r" not in pattern and "\n" not in pattern:
        literal = pattern.encode("utf-8")  # a plain word: search the raw bytes first
    return _Grep(regex, literal)


def _search_file(
    grep: _Grep, rel: str, full: str, out: list[str], limit: int, stop: threading.Event
) -> None:
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
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    if "\r" in text:
        data = universal_newlines(text).encode("utf-8")
    del text
    # One pass over the whole file: each match lies within one line (never_nl); its line
    # is reported and the search goes on from the next line, so no byte is read twice.
    # The empty string after a final newline is not a line.
    phantom = len(data) if data.endswith(b"\n") else -1
    search = grep.regex.search
    pos = counted = 0
    number = 1
    while len(out) < limit:
        if stop.is_set():
            raise Stopped
        found = search(data, pos)
        if found is None:
            break
        start = found.start()
        if start == phantom:
            break
        number += data.count(b"\n", counted, start)
        counted = start
        line_start = data.rfind(b"\n", 0, start) + 1
        line_end = data.find(b"\n", start)
        if line_end < 0:
            line_end = len(data)
        out.append(f"{rel}:{number}:{data[line_start:line_end].decode('utf-8')}")
        pos = line_end + 1
        if pos > len(data):
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
        _search_file(grep, rel, full, out, limit, stop)
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
        "Search the contents of files under a directory with a regular expression (RE2 "
        "syntax: no lookaround or backreferences). Output is one `path:line:text` per "
        "matching line; `include` filters files by a glob. Binary and non-UTF-8 files are "
        "skipped. `path` may also be one file."
    )
    return builtin("grep", description, _grep_schema, run)
