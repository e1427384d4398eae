"""The ``apply_patch`` builtin: opencode's patch grammar, applied all or nothing.

::

    *** Begin Patch
    *** Add File: path          then the new file's lines, each starting with "+"
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path       optional, right after "Update File"
    @@ optional context line    starts a hunk; the line must be found, the hunk follows it
     context line               (one leading space)
    -removed line
    +added line
    *** End of File             optional: the hunk must end at the end of the file
    *** End Patch

How it applies:

1. Parse the whole patch; a malformed one changes nothing.
2. Work out every file's new content in memory. Operations compose in order (an added
   file can be updated later in the same patch; two updates of one file both apply).
   A hunk is looked for from where the previous one ended, then from the top; its old
   lines must match exactly. A hunk that does not match changes nothing.
3. Write each new content to a temporary file beside its target (making missing
   directories), then move them all into place and delete what is deleted. A failure
   before that point removes the temporary files and the directories it made; a
   failure while moving files into place (rare: the file system changed under us)
   puts back the files already replaced.

A file's final newline is a line ending, not an empty last line: a file that ended
with one still does, one that did not still does not. Added files get no final
newline, as in the released ports.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from typing import Any

import attrs
import trio

from .._tools import Tool, ToolContext, ToolResult
from ._config import BuiltinError, Place, builtin, required
from ._files import read_text, remove_dirs, stage, target_path

_schema: dict[str, Any] = {
    "type": "object",
    "properties": {
        "patchText": {
            "type": "string",
            "description": "The patch text in Begin/End Patch format",
        },
    },
    "required": ["patchText"],
    "additionalProperties": False,
}

_DESCRIPTION = (
    "Apply a patch to one or more files: `*** Begin Patch`, then `*** Add File: p` "
    "(lines starting with +), `*** Delete File: p` or `*** Update File: p` (optionally "
    "`*** Move to: q`) with `@@` hunks of ' ' context, '-' removed and '+' added lines, "
    "then `*** End Patch`. All or nothing: if any hunk does not match, no file changes."
)

_BEGIN, _END = "*** Begin Patch", "*** End Patch"
_ADD, _DELETE, _UPDATE, _MOVE = (
    "*** Add File: ",
    "*** Delete File: ",
    "*** Update File: ",
    "*** Move to: ",
)
_END_OF_FILE = "*** End of File"


@attrs.frozen
class Hunk:
    """One ``@@`` section: *old* lines become *new* lines, after *anchor* if given."""

    anchor: str | None
    old: tuple[str, ...]
    new: tuple[str, ...]
    at_end: bool


@attrs.frozen
class Operation:
    """One file operation of a patch."""

    kind: str  # "add" | "delete" | "update"
    path: str
    lines: tuple[str, ...] = ()  # an added file's lines
    move_to: str | None = None
    hunks: tuple[Hunk, ...] = ()


def _path(line: str, prefix: str) -> str:
    path = line[len(prefix) :].strip()
    if not path:
        raise BuiltinError(f"unexpected line: {line}")
    return path


def _hunks(body: list[str]) -> tuple[Hunk, ...]:
    hunks: list[Hunk] = []
    anchor: str | None = None
    old: list[str] = []
    new: list[str] = []
    at_end = False
    started = False

    def close() -> None:
        if started and (old or new or anchor is not None):
            hunks.append(Hunk(anchor, tuple(old), tuple(new), at_end))

    for line in body:
        if line.startswith("@@"):
            close()
            header = line[2:].strip()
            anchor, old, new, at_end, started = header or None, [], [], False, True
        elif line == _END_OF_FILE:
            at_end = True
        elif line == "" or line[0] in " -+":
            started = True
            mark, text = (line[0], line[1:]) if line else (" ", "")
            if mark != "+":
                old.append(text)
            if mark != "-":
                new.append(text)
        else:
            raise BuiltinError(f"unexpected line: {line}")
    close()
    return tuple(hunks)


def parse_patch(text: str) -> list[Operation]:
    """The operations of a patch in opencode's grammar (see the module docs)."""
    lines = text.replace("\r\n", "\n").strip().split("\n")
    if lines[0].strip() != _BEGIN:
        raise BuiltinError(f"missing '{_BEGIN}'")
    try:
        end = next(i for i, line in enumerate(lines) if line.strip() == _END)
    except StopIteration:
        raise BuiltinError(f"missing '{_END}'") from None
    ops: list[Operation] = []
    i = 1
    while i < end:
        line = lines[i]
        i += 1
        body_start = i
        while i < end and not lines[i].startswith((_ADD, _DELETE, _UPDATE)):
            i += 1
        body = lines[body_start:i]
        if line.startswith(_ADD):
            added = tuple(b[1:] if b.startswith("+") else b for b in body)
            ops.append(Operation("add", _path(line, _ADD), lines=added))
        elif line.startswith(_DELETE):
            if body:
                raise BuiltinError(f"unexpected line: {body[0]}")
            ops.append(Operation("delete", _path(line, _DELETE)))
        elif line.startswith(_UPDATE):
            move_to = None
            if body and body[0].startswith(_MOVE):
                move_to = _path(body[0], _MOVE)
                body = body[1:]
            ops.append(
                Operation("update", _path(line, _UPDATE), move_to=move_to, hunks=_hunks(body))
            )
        elif line.strip():
            raise BuiltinError(f"unexpected line: {line}")
    return ops


def _find(lines: list[str], seq: tuple[str, ...], start: int) -> int:
    size = len(seq)
    for i in range(start, len(lines) - size + 1):
        if lines[i : i + size] == list(seq):
            return i
    return -1


def apply_hunks(text: str, hunks: tuple[Hunk, ...]) -> str:
    """*text* with every hunk applied in order; a hunk that does not match raises."""
    trailing = text.endswith("\n")
    lines = text.split("\n")
    if trailing:
        lines.pop()
    if text == "":
        lines = []
    cursor = 0
    for hunk in hunks:
        start = cursor
        if hunk.anchor is not None:
            found = _find(lines, (hunk.anchor,), cursor)
            if found < 0:
                found = _find(lines, (hunk.anchor,), 0)
            if found < 0:
                raise BuiltinError("hunk does not match file contents")
            start = found + 1
        if not hunk.old:
            at = len(lines) if hunk.anchor is None else start
        elif hunk.at_end:
            at = len(lines) - len(hunk.old)
            if at < start or lines[at:] != list(hunk.old):
                raise BuiltinError("hunk does not match file contents")
        else:
            at = _find(lines, hunk.old, start)
            if at < 0 and hunk.anchor is None:
                at = _find(lines, hunk.old, 0)
            if at < 0:
                raise BuiltinError("hunk does not match file contents")
        lines[at : at + len(hunk.old)] = hunk.new
        cursor = at + len(hunk.new)
    return "\n".join(lines) + ("\n" if trailing and lines else "")


@attrs.define
class _Plan:
    """Every file's planned content: ``None`` means deleted; ``shown`` the patch's name."""

    content: dict[str, str | None] = attrs.field(factory=dict)
    shown: dict[str, str] = attrs.field(factory=dict)

    def exists(self, real: str) -> bool:
        if real in self.content:
            return self.content[real] is not None
        return os.path.lexists(real)

    def current(self, real: str, shown: str) -> str:
        planned = self.content.get(real, "")
        if real in self.content:
            if planned is None:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), shown)
            return planned
        if not os.path.exists(real):
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), shown)
        return read_text(real, shown)

    def set(self, real: str, shown: str, content: str | None) -> None:
        self.content[real] = content
        self.shown.setdefault(real, shown)


def plan_patch(place: Place, ops: list[Operation]) -> tuple[_Plan, dict[str, int]]:
    """Resolve and check every operation; the new contents, in memory only."""
    plan = _Plan()
    counts = {"added": 0, "updated": 0, "deleted": 0}
    for op in ops:
        real, shown = place.resolve(op.path), place.display(op.path)
        if op.kind == "add":
            if plan.exists(real):
                raise BuiltinError(f"file already exists: {shown}")
            plan.set(real, shown, "\n".join(op.lines))
            counts["added"] += 1
        elif op.kind == "delete":
            if not plan.exists(real):
                raise BuiltinError(f"file not found: {shown}")
            if real not in plan.content and os.path.isdir(real) and not os.path.islink(real):
                raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
            plan.set(real, shown, None)
            counts["deleted"] += 1
        else:
            updated = apply_hunks(plan.current(real, shown), op.hunks)
            if op.move_to is not None:
                destination = place.resolve(op.move_to)
                if destination != real:
                    if plan.exists(destination):
                        raise BuiltinError(f"file already exists: {place.display(op.move_to)}")
                    plan.set(real, shown, None)
                    real, shown = destination, place.display(op.move_to)
            plan.set(real, shown, updated)
            counts["updated"] += 1
    _check_directories(plan)
    return plan, counts


def _check_directories(plan: _Plan) -> None:
    written = {real for real, content in plan.content.items() if content is not None}
    for real in written:
        parent = os.path.dirname(real)
        while parent and parent != os.path.dirname(parent):
            if parent in written:
                raise BuiltinError(
                    f"{plan.shown[real]} needs {plan.shown[parent]} to be a directory"
                )
            parent = os.path.dirname(parent)


def commit(plan: _Plan) -> None:
    """Write the plan to disk, all or nothing (see the module docs)."""
    created: list[str] = []
    staged: list[tuple[str, str]] = []  # (temporary, destination)
    backups: list[tuple[str, str | None]] = []  # (path, its old content's new name)
    try:
        for real, content in plan.content.items():
            if content is not None:
                destination = target_path(real)
                temp = stage(destination, plan.shown[real], content.encode("utf-8"), created)
                staged.append((temp, destination))
        deleted = [real for real, content in plan.content.items() if content is None]
        # Everything that can fail is done. The old files stay reachable under a hidden
        # name until the end, so a late failure can put them back.
        try:
            for temp, destination in staged:
                backups.append((destination, _keep_old(destination, link=True)))
                os.replace(temp, destination)
            for real in deleted:
                if os.path.lexists(real):
                    # One at a time: a failure must find every earlier move recorded.
                    backups.append((real, _keep_old(real, link=False)))  # noqa: PERF401
        except BaseException:
            _restore(backups)
            raise
    except BaseException:
        for temp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        remove_dirs(created)
        raise
    for _, old in backups:
        if old is not None:
            with contextlib.suppress(OSError):
                os.unlink(old)


def _keep_old(path: str, *, link: bool) -> str | None:
    """Give the file at *path* a second, hidden name (a hard link, or a copy where links
    are not supported); with ``link=False``, move it there. ``None`` if it is absent."""
    if not os.path.lexists(path):
        return None
    old = os.path.join(
        os.path.dirname(path), f".{os.path.basename(path)}.{secrets.token_hex(6)}.old"
    )
    if not link:
        os.replace(path, old)
        return old
    try:
        os.link(path, old, follow_symlinks=False)
    except OSError:
        shutil.copy2(path, old, follow_symlinks=False)
    return old


def _restore(backups: list[tuple[str, str | None]]) -> None:
    for path, old in reversed(backups):
        with contextlib.suppress(OSError):
            if old is None:
                os.unlink(path)
                continue
            os.replace(old, path)
            # A rename between two links of one file does nothing (the replace that
            # failed left *path* as it was): the spare name still has to go.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)


def apply_patch_tool(place: Place) -> Tool:
    """``apply_patch {patchText}`` (see the module docs)."""

    def work(text: str) -> dict[str, int]:
        plan, counts = plan_patch(place, parse_patch(text))
        commit(plan)
        return counts

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        text = required(args, "patchText")
        counts = await trio.to_thread.run_sync(work, text)
        total = sum(counts.values())
        plural = "" if total == 1 else "s"
        return ToolResult.ok(f"Applied patch: {total} file operation{plural}", counts)

    return builtin("apply_patch", _DESCRIPTION, _schema, run)
