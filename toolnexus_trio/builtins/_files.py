"""The file builtins ``read``, ``write`` and ``edit``, and the file helpers they share.

Every file operation runs in a worker thread. ``read`` is abandoned at once on cancel
(it changes nothing); ``write`` and ``edit`` finish their short write first, so a
cancelled call has either written the whole file or nothing.

Writes are atomic: the content goes to a temporary file in the target's directory,
which then replaces the target (``os.replace``). Readers never see half a file, and a
failed write leaves the old file as it was. The file keeps its permission bits; a
symlinked target is replaced at its real location, so the link stays a link.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import secrets
import stat
from functools import partial
from typing import Any, Final

import trio

from .._content import EXTENSIONS, ContentPart, ContentPartError, check_size
from .._tools import Tool, ToolContext, ToolResult
from ._config import BuiltinError, Place, builtin, required, whole_number

MAX_FILE_BYTES: Final = 10 * 1024 * 1024
"""The largest file ``read``, ``edit`` and ``apply_patch`` open (``grep`` skips larger ones)."""

_read_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path to the file to read"},
        "offset": {"type": "number", "description": "1-based line to start from"},
        "limit": {"type": "number", "description": "Maximum number of lines to read"},
    },
    "required": ["path"],
    "additionalProperties": False,
}

_write_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path to write to"},
        "content": {"type": "string", "description": "Content to write"},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}

_edit_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path to the file to edit"},
        "oldString": {"type": "string", "description": "Exact string to replace"},
        "newString": {"type": "string", "description": "Replacement string"},
        "replaceAll": {"type": "boolean", "description": "Replace all occurrences"},
    },
    "required": ["path", "oldString", "newString"],
    "additionalProperties": False,
}


def _os_error(code: int, path: str) -> OSError:
    # The same text Python's own error would have: "[Errno 21] Is a directory: 'p'".
    return OSError(code, os.strerror(code), path)


def read_text(real: str, display: str, path: str | None = None) -> str:
    """A UTF-8 text file's content with universal newlines (``\\r\\n``/``\\r`` -> ``\\n``).

    Refuses directories, non-regular files (a FIFO or ``/dev/zero`` would never end),
    files over :data:`MAX_FILE_BYTES` and undecodable bytes: ``"<path> is not valid
    UTF-8 text"`` when *path* is given, else the codec's own message (as the ports do).
    """
    data = read_bytes(real, display)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if path is None:
            raise
        raise BuiltinError(f"{path} is not valid UTF-8 text") from None
    return universal_newlines(text)


def read_bytes(real: str, display: str) -> bytes:
    """A regular file's bytes, at most :data:`MAX_FILE_BYTES` (directories, FIFOs and
    devices, and larger files, are refused)."""
    info = os.stat(real)
    if stat.S_ISDIR(info.st_mode):
        raise _os_error(errno.EISDIR, display)
    if not stat.S_ISREG(info.st_mode):
        raise BuiltinError(f"{display} is not a regular file")
    with open(real, "rb") as f:
        # Sized by the stat, not the cap: a 10 MiB buffer per small file is slow.
        data = f.read(min(info.st_size, MAX_FILE_BYTES) + 1)
        if len(data) > MAX_FILE_BYTES:
            raise BuiltinError(f"{display} is larger than {MAX_FILE_BYTES} bytes")
        if len(data) > info.st_size:  # it grew since the stat: read the rest, bounded
            data += f.read(MAX_FILE_BYTES + 1 - len(data))
    if len(data) > MAX_FILE_BYTES:
        raise BuiltinError(f"{display} is larger than {MAX_FILE_BYTES} bytes")
    return data


def read_media(real: str, display: str, path: str, mime: str) -> ToolResult:
    """A media file (an extension of the fixed table) as a content part: the output
    names it (``<path> (image/png, 82 bytes)``), the part carries the bytes."""
    data = read_bytes(real, display)
    kind = mime.split("/")[0] if mime.startswith(("image/", "audio/")) else "file"
    try:
        check_size(len(data), None)  # the process-wide cap, if any
    except ContentPartError as exc:
        raise BuiltinError(f"{display}: {exc}") from None
    encoded = base64.b64encode(data).decode("ascii")
    part = ContentPart(type=kind, mime_type=mime, data=encoded, name=os.path.basename(real))
    return ToolResult(f"{path} ({mime}, {len(data)} bytes)", parts=(part,))


def universal_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` as ``\\n``, like Python's text mode."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def target_path(real: str) -> str:
    """Where a write to *real* lands: a symlink's real target, else *real* itself."""
    return os.path.realpath(real) if os.path.islink(real) else real


def stage(real: str, display: str, data: bytes, created_dirs: list[str]) -> str:
    """Write *data* to a new temporary file beside *real*; return the temporary's path.

    Missing parent directories are made and appended to *created_dirs* (so a failed
    multi-file operation can remove them). The temporary file gets the mode of the file
    it will replace, or the umask's default for a new one.
    """
    if os.path.isdir(real):
        raise _os_error(errno.EISDIR, display)
    parent = os.path.dirname(real) or "."
    _make_dirs(parent, created_dirs)
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = None
    temp = os.path.join(parent, f".{os.path.basename(real)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(temp, mode)
    except BaseException:
        os.unlink(temp)
        raise
    return temp


def _make_dirs(path: str, created: list[str]) -> None:
    missing: list[str] = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        os.mkdir(directory)
        created.append(directory)


def remove_dirs(created: list[str]) -> None:
    """Remove directories :func:`stage` made, deepest first, where they are still empty."""
    for directory in reversed(created):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def write_atomic(real: str, display: str, data: bytes) -> None:
    """Replace the file at *real* with *data* in one step (see the module docs)."""
    created: list[str] = []
    destination = target_path(real)
    try:
        temp = stage(destination, display, data, created)
        try:
            os.replace(temp, destination)
        except BaseException:
            os.unlink(temp)
            raise
    except BaseException:
        remove_dirs(created)
        raise


def _window(text: str, offset: int | None, limit: int | None) -> str:
    if not offset and limit is None:
        return text
    start = max((offset or 1) - 1, 0)
    lines = text.split("\n")
    chosen = lines[start:] if limit is None else lines[start : start + max(limit, 0)]
    return "\n".join(chosen)


def read_tool(place: Place) -> Tool:
    """``read {path, offset?, limit?}``: a UTF-8 text file, or a window of its lines; a
    media file (png, jpg, gif, webp, pdf, mp3, wav) as a content part."""

    def work(path: str, offset: int | None, limit: int | None) -> str | ToolResult:
        real, display = place.resolve(path), place.display(path)
        mime = EXTENSIONS.get(os.path.splitext(path)[1].lower())
        if mime is not None:
            return read_media(real, display, path, mime)
        return _window(read_text(real, display, path), offset, limit)

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = required(args, "path")
        offset = whole_number(args.get("offset"), "offset")
        limit = whole_number(args.get("limit"), "limit")
        text = await trio.to_thread.run_sync(
            partial(work, path, offset, limit), abandon_on_cancel=True
        )
        return text if isinstance(text, ToolResult) else ToolResult.ok(text)

    description = (
        "Read a UTF-8 text file. With offset (1-based line) and/or limit (a number of "
        "lines), only that window of lines is returned."
    )
    return builtin("read", description, _read_schema, run)


def write_tool(place: Place) -> Tool:
    """``write {path, content}``: create or replace a file atomically, making parents."""

    def work(path: str, content: str) -> int:
        if path.endswith(("/", os.sep)):  # resolving would drop the slash
            raise _os_error(errno.EISDIR, place.display(path))
        data = content.encode("utf-8")
        write_atomic(place.resolve(path), place.display(path), data)
        return len(data)

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = required(args, "path")
        written = await trio.to_thread.run_sync(work, path, args["content"])
        return ToolResult.ok(f"Wrote {written} bytes to {path}", {"bytes": written})

    description = (
        "Write content to a file, creating it or replacing it whole, and creating missing "
        "parent directories. The write is atomic."
    )
    return builtin("write", description, _write_schema, run)


def edit_tool(place: Place) -> Tool:
    """``edit {path, oldString, newString, replaceAll?}``: exact-string replacement."""

    def work(path: str, old: str, new: str, replace_all: bool) -> int:
        real = place.resolve(path)
        text = read_text(real, place.display(path))
        found = text.count(old)
        if found == 0:
            raise BuiltinError(f"oldString not found in {path}")
        if found > 1 and not replace_all:
            raise BuiltinError(
                f"oldString is not unique in {path} ({found} occurrences); use replaceAll"
            )
        edited = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        write_atomic(real, place.display(path), edited.encode("utf-8"))
        return found if replace_all else 1

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = required(args, "path")
        old = required(args, "oldString")
        replace_all = bool(args.get("replaceAll", False))
        count = await trio.to_thread.run_sync(work, path, old, args["newString"], replace_all)
        plural = "" if count == 1 else "s"
        return ToolResult.ok(
            f"Edited {path} ({count} replacement{plural})", {"replacements": count}
        )

    description = (
        "Replace an exact string in a file. oldString must occur exactly once unless "
        "replaceAll is true, which replaces every occurrence."
    )
    return builtin("edit", description, _edit_schema, run)
