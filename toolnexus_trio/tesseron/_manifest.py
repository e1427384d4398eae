"""The instance manifest: ``<manifest_dir>/<instanceId>.json`` (manifest v2).

Blocking file I/O, run from a worker thread by the host. Written atomically (a
private temp file in the same directory, then ``os.replace``) with private modes:
the directory 0700, the file 0600.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

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


def write_manifest(directory: Path, document: dict[str, Any]) -> Path:
    """Write *document* atomically to ``directory/<instanceId>.json``; return the path."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask, and may pre-exist
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
