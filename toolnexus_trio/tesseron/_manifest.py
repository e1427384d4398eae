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
import time
from pathlib import Path
from typing import Any

_log = logging.getLogger("toolnexus_trio.tesseron")

MANIFEST_VERSION = 2
"""Released gateways check ``version == 2`` strictly."""


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


def read_manifest_urls(directory: Path) -> list[str]:
    """URLs of live v2 ws manifests in *directory* (blocking; run in a thread)."""
    urls: list[str] = []
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return urls
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _log.debug("skipping unreadable manifest %s", path)
            continue
        if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
            continue
        pid = doc.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and not pid_alive(pid):
            _log.info("skipping manifest %s: pid %d is gone", path.name, pid)
            continue
        if doc.get("helloHandledByHost"):
            _log.info("skipping manifest %s: host-minted claims are not supported", path.name)
            continue
        transport = doc.get("transport")
        if isinstance(transport, dict) and transport.get("kind") == "ws":
            url = transport.get("url")
            if isinstance(url, str):
                urls.append(url)
    return urls
