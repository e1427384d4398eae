"""Where served A2A tasks live (SPEC §7B ``TaskStore``): in memory or one JSON file each.

A task is its wire form (a JSON mapping, the 0.3 shape). Every read and write of the
server goes through the store, so a store shared by processes (a file store on one
directory) answers ``GetTask`` for a task another process runs.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import trio

from ._wire import TERMINAL

DEFAULT_MAX_TASKS: Final = 10_000
DEFAULT_TTL: Final = 3600.0
"""Seconds a finished task stays in the in-memory store."""
_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@runtime_checkable
class TaskStore(Protocol):
    """Task persistence: ``get`` a task by id (``None`` if unknown), ``save`` one."""

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The task called *task_id*, or ``None``."""
        ...

    async def save(self, task: Mapping[str, Any]) -> None:
        """Store *task* (replacing the one with its ``id``)."""
        ...


def _finished(task: Mapping[str, Any]) -> bool:
    status = task.get("status")
    return isinstance(status, Mapping) and status.get("state") in TERMINAL


class InMemoryTaskStore:
    """Tasks in a dict (the default). Bounded: a finished task expires *ttl* seconds
    after it finished, and past *max_tasks* the oldest finished tasks go first (tasks
    still running are never dropped)."""

    def __init__(self, *, max_tasks: int = DEFAULT_MAX_TASKS, ttl: float = DEFAULT_TTL) -> None:
        self.max_tasks = max_tasks
        self.ttl = ttl
        self._tasks: dict[str, dict[str, Any]] = {}
        self._done: OrderedDict[str, float] = OrderedDict()  # id -> when it finished

    def __len__(self) -> int:
        return len(self._tasks)

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The task, or ``None`` (also once it expired)."""
        self._expire()
        await trio.lowlevel.checkpoint()
        found = self._tasks.get(task_id)
        return None if found is None else json.loads(json.dumps(found))

    async def save(self, task: Mapping[str, Any]) -> None:
        """Store a copy of *task*."""
        task_id = str(task["id"])
        self._tasks[task_id] = json.loads(json.dumps(task))
        if _finished(task):
            self._done[task_id] = trio.current_time()
            self._done.move_to_end(task_id)
        self._expire()
        await trio.lowlevel.checkpoint()

    def _expire(self) -> None:
        now = trio.current_time()
        while self._done:
            task_id, when = next(iter(self._done.items()))
            if now - when < self.ttl and len(self._tasks) <= self.max_tasks:
                break
            del self._done[task_id]
            self._tasks.pop(task_id, None)


class FileTaskStore:
    """One ``<id>.json`` per task in *directory* (made if missing); writes are atomic
    (a temporary file renamed over the old one), off the event loop."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, task_id: str) -> Path | None:
        # Ids come from the wire: only plain names map to a file (no path tricks).
        return (
            self.directory / f"{task_id}.json"
            if _ID.fullmatch(task_id) and task_id not in (".", "..")
            else None
        )

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The task read from its file, or ``None``."""
        path = self._path(task_id)
        if path is None:
            await trio.lowlevel.checkpoint()
            return None
        return await trio.to_thread.run_sync(_read, path)

    async def save(self, task: Mapping[str, Any]) -> None:
        """Write the task to ``<id>.json`` atomically."""
        path = self._path(str(task["id"]))
        if path is None:
            raise ValueError(f"not a task id a file may be named after: {task['id']!r}")
        data = json.dumps(task, ensure_ascii=False).encode()
        await trio.to_thread.run_sync(_write, path, data)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return value if isinstance(value, dict) else None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".task-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve_store(store: TaskStore | str | None = None) -> TaskStore:
    """SPEC §7B ``resolveStore``: ``None`` or ``"memory"`` is an
    :class:`InMemoryTaskStore`, ``"file:<dir>"`` a :class:`FileTaskStore`, and a
    :class:`TaskStore` object is used as it is."""
    if store is None or store == "memory":
        return InMemoryTaskStore()
    if isinstance(store, str):
        if store.startswith("file:") and len(store) > len("file:"):
            return FileTaskStore(store[len("file:") :])
        raise ValueError(f'a task store is "memory", "file:<dir>" or a TaskStore, not {store!r}')
    if isinstance(store, TaskStore):
        return store
    raise TypeError(f"not a TaskStore: {type(store).__name__}")
