"""The instance manifest: ``<manifest_dir>/<instanceId>.json`` (manifest v2).

Written by a host, read by a gateway's ``discover()``. Blocking file I/O, run from a
worker thread. Written atomically (a
private temp file in the same directory, then ``os.replace``) with private modes:
the file 0600, and the directory 0700 when the host creates it. A directory that
already exists keeps its mode (it may be shared, e.g. a sticky ``/tmp``-like one);
one that others may write to without the sticky bit is refused, since anyone could
then replace or delete the manifest.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs

_log = logging.getLogger("toolnexus_trio.tesseron")

MANIFEST_VERSION = 2
"""Released gateways check ``version == 2`` strictly."""


class _DefaultManifestDir:
    """Sentinel type: publish the manifest in ``~/.tesseron/instances``."""

    def __repr__(self) -> str:
        return "DEFAULT_MANIFEST_DIR"

    def directory(self) -> Path:
        return Path.home() / ".tesseron" / "instances"


DEFAULT_MANIFEST_DIR: Final = _DefaultManifestDir()
"""Default for ``listen(manifest_dir=...)``: ``~/.tesseron/instances``, resolved at listen time."""


def new_instance_id() -> str:
    """A fresh random instance id, ``inst-<16 hex digits>``."""
    return f"inst-{secrets.token_hex(8)}"


def manifest_document(instance_id: str, app_name: str, url: str) -> dict[str, Any]:
    """The manifest v2 object for a WebSocket host."""
    return {
        "version": MANIFEST_VERSION,
        "instanceId": instance_id,
        "appName": app_name,
        "addedAt": int(time.time() * 1000),
        "pid": os.getpid(),
        "transport": {"kind": "ws", "url": url},
    }


def prepare_directory(directory: Path) -> None:
    """Create *directory* with mode 0700, or check an existing one (see the module docs).

    Raises :class:`ValueError` for an existing directory that is group- or
    world-writable without the sticky bit, or a path that is not a directory.
    """
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    else:
        os.chmod(directory, 0o700)  # ours: mkdir's mode was filtered by the umask
        return
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"manifest_dir {str(directory)!r} exists and is not a directory")
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        raise ValueError(
            f"refusing manifest_dir {str(directory)!r}: it is group- or world-writable "
            f"without the sticky bit (mode {mode:#o}), so others could replace the "
            "manifest; use a private directory, or set the sticky bit (chmod +t)"
        )


def write_manifest(directory: Path, document: dict[str, Any]) -> Path:
    """Write *document* atomically to ``directory/<instanceId>.json``; return the path.

    The directory is prepared first (:func:`prepare_directory`).
    """
    prepare_directory(directory)
    path = directory / f"{document['instanceId']}.json"
    tmp = directory / f".{document['instanceId']}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(document, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def remove_manifest(path: Path) -> None:
    """Remove a manifest written by :func:`write_manifest` (missing is fine)."""
    path.unlink(missing_ok=True)


# -- reading (the gateway side) ----------------------------------------------------

MANIFEST_MAX_BYTES: Final = 64 * 1024
"""Manifests larger than this are skipped unread (a real one is about 300 bytes)."""
MAX_MANIFESTS: Final = 1024
"""At most this many ``*.json`` names of one directory are looked at per scan (in
name order); the rest are ignored, so a flooded directory costs bounded work."""

_OPEN_FLAGS: Final = (
    os.O_RDONLY
    | os.O_NONBLOCK  # a FIFO (or a device) never blocks the open or the read
    | getattr(os, "O_NOFOLLOW", 0)  # a symlink swapped in after the lstat is refused
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
)

Identity = tuple[int, int, int, int]
"""What says a file changed: ``(st_dev, st_ino, st_size, st_mtime_ns)``."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    except (OverflowError, OSError):
        return False  # not a pid this system can have
    return True


def _identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


@attrs.define
class _Seen:
    """What one scan learnt from one file, kept until the file changes."""

    identity: Identity
    url: str | None = None  # None: skipped (the reason was logged when it was read)
    pid: int | None = None
    gone_logged: bool = False


class ManifestScanner:
    """Reads the live v2 ``ws`` manifests of one directory, again and again (blocking).

    Each :meth:`scan` lists ``*.json`` (at most :data:`MAX_MANIFESTS` names) and looks at
    each with ``lstat`` first: anything but a regular file (a symlink, a FIFO, a device,
    a directory) and any file over :data:`MANIFEST_MAX_BYTES` is skipped without being
    opened or read. A regular file is opened ``O_NONBLOCK | O_NOFOLLOW``, checked again
    with ``fstat`` and read up to the cap. A file is read again only when its identity
    (device, inode, size, mtime) changed; a file that fails to parse, for any reason, is
    skipped with one log line (until it changes). Only the pid check runs on every scan.

    Meant to run in a worker thread that a cancel abandons: a scan that finds an earlier
    one still running (stuck on the file system) returns nothing at once instead of
    waiting, and *stop* ends a scan early.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()
        self._flood_logged = False

    def scan(self, stop: threading.Event | None = None) -> list[str]:
        """The URLs of the live manifests, in manifest-name order."""
        if not self._lock.acquire(blocking=False):
            return []  # an abandoned scan is still stuck: do not pile up behind it
        try:
            return self._scan(stop)
        finally:
            self._lock.release()

    def _names(self) -> list[str]:
        names: list[str] = []
        try:
            with os.scandir(self.directory) as entries:
                names = [e.name for e in entries if e.name.endswith(".json")]
        except OSError:
            return []
        names.sort()
        if len(names) > MAX_MANIFESTS:
            if not self._flood_logged:
                _log.warning(
                    "%s holds %d manifests; only the first %d are read",
                    self.directory,
                    len(names),
                    MAX_MANIFESTS,
                )
                self._flood_logged = True
            del names[MAX_MANIFESTS:]
        return names

    def _scan(self, stop: threading.Event | None) -> list[str]:
        urls: list[str] = []
        seen: dict[str, _Seen] = {}
        for name in self._names():
            if stop is not None and stop.is_set():
                break
            path = self.directory / name
            try:
                info = os.lstat(path)
            except OSError:
                continue  # gone since the listing
            entry = self._seen.get(name)
            if entry is None or entry.identity != _identity(info):
                entry = _read(path, info)
            seen[name] = entry
            if entry.url is None:
                continue
            if entry.pid is not None and not pid_alive(entry.pid):
                if not entry.gone_logged:
                    _log.info("skipping manifest %s: pid %d is gone", name, entry.pid)
                    entry.gone_logged = True
                continue
            urls.append(entry.url)
        if stop is None or not stop.is_set():
            self._seen = seen  # forgets the files that are gone
        return urls


def _read(path: Path, info: os.stat_result) -> _Seen:
    """Read and check one manifest; every reason to skip it is logged once, here."""
    name = path.name

    def skip(identity: Identity, why: str, *args: Any) -> _Seen:
        _log.warning("skipping manifest %s: " + why, name, *args)
        return _Seen(identity)

    identity = _identity(info)
    if not stat.S_ISREG(info.st_mode):
        return skip(identity, "not a regular file (a symlink, FIFO or device is never read)")
    if info.st_size > MANIFEST_MAX_BYTES:
        return skip(identity, "%d bytes, over the %d-byte limit", info.st_size, MANIFEST_MAX_BYTES)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        return skip(identity, "cannot open it (%s)", exc.strerror or exc)
    try:
        opened = os.fstat(fd)
        identity = _identity(opened)  # the file read, should it have been replaced
        if not stat.S_ISREG(opened.st_mode):
            return skip(identity, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MANIFEST_MAX_BYTES:
            chunk = os.read(fd, MANIFEST_MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return skip(identity, "cannot read it (%s)", exc.strerror or exc)
    finally:
        os.close(fd)
    if size > MANIFEST_MAX_BYTES:
        return skip(identity, "over the %d-byte limit", MANIFEST_MAX_BYTES)
    try:
        doc = json.loads(b"".join(chunks).decode("utf-8"))
    except Exception as exc:  # any failure (RecursionError, MemoryError too) is a skip
        return skip(identity, "not valid JSON (%s)", type(exc).__name__)
    return _check(doc, identity, skip)


def _check(doc: Any, identity: Identity, skip: Callable[..., _Seen]) -> _Seen:
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
        return skip(identity, "not a version %d manifest", MANIFEST_VERSION)
    if doc.get("helloHandledByHost"):
        return skip(identity, "host-minted claims are not supported")
    transport = doc.get("transport")
    url = transport.get("url") if isinstance(transport, dict) else None
    if not isinstance(transport, dict) or transport.get("kind") != "ws":
        return skip(identity, "only the ws transport is dialed")
    if not isinstance(url, str):
        return skip(identity, "its transport has no url")
    pid = doc.get("pid")
    live_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
    return _Seen(identity, url=url, pid=live_pid)


def read_manifest_urls(directory: Path) -> list[str]:
    """URLs of live v2 ws manifests in *directory* (blocking; one scan, no memory)."""
    return ManifestScanner(directory).scan()
