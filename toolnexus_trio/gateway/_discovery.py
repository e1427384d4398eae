"""Reading the instances directory for :meth:`~toolnexus_trio.gateway.Gateway.discover`.

:func:`scan_instances` lists the ``ws`` URLs of the live v2 manifests of one instances
directory, reading the files in a worker thread that a cancel abandons; the
:class:`~toolnexus_trio.tesseron._manifest.ManifestScanner` of each directory (which
remembers the files it read) is kept in a bounded map the gateway owns. Dialling the
URLs is the gateway's part.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Final

import trio

from ..tesseron._manifest import DEFAULT_MANIFEST_DIR, ManifestScanner

__all__ = ["scan_instances"]

_MAX_SCANNERS: Final = 16  # instances directories whose file identities discover() remembers


async def scan_instances(
    scanners: dict[Path, ManifestScanner], instances_dir: str | os.PathLike[str] | None
) -> list[str]:
    """The URLs of the live v2 ``ws`` manifests in *instances_dir* (default
    ``~/.tesseron/instances``), read with that directory's scanner of *scanners*."""
    directory = (
        Path(instances_dir) if instances_dir is not None else DEFAULT_MANIFEST_DIR.directory()
    )
    scanner = scanners.get(directory)
    if scanner is None:
        if len(scanners) >= _MAX_SCANNERS:  # bounded: forget the oldest
            del scanners[next(iter(scanners))]
        scanner = scanners[directory] = ManifestScanner(directory)
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(scanner.scan, stop, abandon_on_cancel=True)
    finally:
        stop.set()
