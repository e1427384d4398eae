"""SPEC §7E, the ``memory`` tool: durable notes a persona edits in its own home.

One tool, three actions on one of two files: ``add`` appends an entry (a ``- <text>``
line), ``replace`` swaps every occurrence of an existing substring for ``with``,
``remove`` deletes every occurrence (and a bullet line it leaves empty). ``target`` is
``self`` (``MEMORY.md``, the default) or ``user`` (``USER.md``).

Every action writes to disk atomically (the ``write`` builtin's temporary-file-then-
``os.replace``), in a worker thread that a cancel waits for, so a cancelled call has
written the whole change or nothing. Calls are serialised on the home itself: each edit
holds an OS lock (``flock``) on the home directory, so every memory tool on that home, in
this process or another, takes its turn and none loses another's update (a per-tool
lock and ``concurrency_safe=False`` spare the threads a queue). The lock is only ever
tried, never waited for in a thread: a busy home is retried from Trio after a short
sleep, so a cancel gets through even while another process holds it.

An entry is one line of data, never structure: the text of ``add`` and the ``with`` of
``replace`` have every line break (and other control character) turned into a space, so
an entry cannot start a ``## <file>`` section of the next soul; and an edit that would
add a Markdown heading line to the file (``#`` ..., or a ``===``/``---`` underline) is
refused.
The tool never changes the running prompt: the soul is a snapshot taken at session
start, and what is written loads at the start of the next session (the description
tells the model so).

Refused loudly (an ``is_error`` result, nothing written): a ``replace``/``remove`` whose
substring is absent; a call without ``text`` (or with an empty one; toolnexus 0.21
accepts it and writes an empty entry); a ``replace`` without ``with``; an edit that
would grow the file past the 2 MiB bootstrap cap (the end of the file, where ``add``
writes, would be cut off the next soul); an edit that would add a heading; a target that
is a symlink leading out of the home or not a regular file.
"""

from __future__ import annotations

import collections
import fcntl
import os
import re
from typing import Any, Final

import trio

from .._tools import Tool, ToolContext, ToolResult, ToolSource
from ..builtins._files import write_atomic
from ._soul import MAX_BOOTSTRAP_BYTES, HomeFileError, decode, home_path, read_capped

MEMORY_TARGETS: Final = {"self": "MEMORY.md", "user": "USER.md"}
"""The ``memory`` tool's targets and the home files they edit."""

_DESCRIPTION: Final = (
    "Persist durable memory in your home directory. action=add appends an entry; "
    "action=replace swaps an existing substring (text) for another (with); "
    "action=remove deletes an existing substring. target=self (MEMORY.md, the default) "
    "or user (USER.md, what you know about the user). Writes go to disk now but load "
    "only at the START of your next session: they do NOT change your current context."
)

_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "replace", "remove"]},
        "target": {"type": "string", "enum": ["self", "user"]},
        "text": {
            "type": "string",
            "description": "For add: the entry. For replace/remove: the existing text.",
        },
        "with": {"type": "string", "description": "For replace: the replacement text."},
    },
    "required": ["action", "text"],
    "additionalProperties": False,
}

_EMPTY_BULLETS: Final = frozenset({"", "-", "*", "+"})

# A Markdown heading line: ATX ("## AGENTS.md") or a setext underline ("===", "---").
_HEADING: Final = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-{2,}[ \t]*$)")

_RETRY_S: Final = (0.001, 0.05)
"""The first and the longest pause before trying a busy home's lock again."""


class _Refused(Exception):
    """A call the tool turns down; its message is the error result's text."""


def one_line(text: str) -> str:
    """*text* as one line of data: line breaks and control characters become spaces."""
    flat = " ".join(text.splitlines())
    return "".join(c if c.isprintable() else " " for c in flat).strip()


def _headings(text: str) -> collections.Counter[str]:
    return collections.Counter(line for line in text.splitlines() if _HEADING.match(line))


def _add(current: str, text: str) -> str:
    entry = one_line(text)
    separator = "" if not current or current.endswith("\n") else "\n"
    return f"{current}{separator}- {entry}\n"


def _remove(current: str, text: str) -> str:
    if "\n" in text:
        return current.replace(text, "")
    kept: list[str] = []
    for line in current.splitlines(keepends=True):
        if text in line:
            rest = line.replace(text, "")
            # A bullet emptied by the removal goes with it: the entry is gone, not blanked.
            if rest.strip() in _EMPTY_BULLETS and line.strip() not in _EMPTY_BULLETS:
                continue
            line = rest
        kept.append(line)
    return "".join(kept)


def _edit(home: str, name: str, action: str, text: str, replacement: str | None) -> None:
    """Apply one action to *name* in *home* (blocking; runs in a worker thread)."""
    path = home_path(home, name)
    current = ""
    if path is not None:
        data, cut = read_capped(path, MAX_BOOTSTRAP_BYTES)
        if cut:
            raise _Refused(
                f"{name} is over {MAX_BOOTSTRAP_BYTES} bytes (the bootstrap cap): "
                "remove or replace entries before adding more"
            )
        current = decode(data, path, cut=False)
    else:
        path = os.path.join(os.path.realpath(home), name)
    if action == "add":
        updated = _add(current, text)
    elif text not in current:
        raise _Refused(f"not found in {name}: {text}")
    elif action == "replace":
        updated = current.replace(text, one_line(replacement or ""))
    else:
        updated = _remove(current, text)
    if _headings(updated) - _headings(current):
        raise _Refused(
            f"the edit would add a heading to {name}; entries are one line of data, never structure"
        )
    encoded = updated.encode("utf-8")
    if len(encoded) > MAX_BOOTSTRAP_BYTES:
        raise _Refused(
            f"{name} would grow past {MAX_BOOTSTRAP_BYTES} bytes (the bootstrap cap), and "
            "the end of it would not load: remove or replace entries first"
        )
    write_atomic(path, path, encoded)


def _edit_locked(home: str, name: str, action: str, text: str, replacement: str | None) -> bool:
    """:func:`_edit` under an exclusive ``flock`` of the home directory (blocking; runs
    in a worker thread); ``False``, with nothing read or written, while another writer
    holds it."""
    real = os.path.realpath(home)
    if action == "add":
        os.makedirs(real, exist_ok=True)
    elif not os.path.exists(real):
        _edit(home, name, action, text, replacement)  # no file to edit: refused as missing
        return True
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        _edit(home, name, action, text, replacement)
        return True
    finally:
        os.close(fd)  # releases the lock


def memory_tool(dir: str | os.PathLike[str]) -> Tool:
    """The ``memory`` tool over the persona home *dir* (SPEC §7E; see the module docs).

    Not one of the default builtins: a persona gets it from
    :func:`~toolnexus_trio.agents.agent_from_dir` (``memory=True``), or any agent from
    ``uses=[memory_tool(dir)]``. The home is created on the first write when missing.
    A success is a plain text result naming the file; a miss or a refusal is an
    ``is_error`` result and leaves the files as they were.
    """
    home = os.fspath(dir)
    lock = trio.Lock()

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        action = args.get("action")
        target = args.get("target", "self")
        text = args.get("text")
        replacement = args.get("with")
        # Checked here too: execute may be called without the schema in front of it.
        if action not in ("add", "replace", "remove"):
            return ToolResult.error(f"memory: unknown action {action!r} (add, replace, remove)")
        if target not in MEMORY_TARGETS:
            return ToolResult.error(f"memory: unknown target {target!r} (self, user)")
        if not isinstance(text, str) or not text.strip():
            return ToolResult.error("memory: text is required (the entry, or the text to find)")
        if action == "replace" and not isinstance(replacement, str):
            return ToolResult.error("memory: with is required for replace")
        name = MEMORY_TARGETS[target]
        async with lock:
            pause = _RETRY_S[0]
            try:
                # Not abandoned on cancel: the short write finishes, or never starts.
                while not await trio.to_thread.run_sync(
                    _edit_locked, home, name, action, text, replacement
                ):
                    # Another memory tool (maybe another process) is editing this home.
                    await trio.sleep(pause)
                    pause = min(pause * 2, _RETRY_S[1])
            except (_Refused, HomeFileError) as exc:
                return ToolResult.error(str(exc))
            except OSError as exc:
                return ToolResult.error(f"memory: {exc}")
        return ToolResult.ok(f"ok ({action} -> {name}); it loads at the start of the next session")

    return Tool(
        name="memory",
        description=_DESCRIPTION,
        input_schema=_SCHEMA,
        source=ToolSource.NATIVE,
        execute=execute,
        concurrency_safe=False,
    )
