"""Gateway discovery against hostile instance directories: real files, symlinks, a real
host beside them (issue 17, items 11 and 13; the FIFO and ``/dev/zero`` cases run the
gateway as a subprocess, in ``tests/test_gateway_mcp.py``)."""

from __future__ import annotations

import json
import logging
import os
import tracemalloc
from pathlib import Path

import pytest
import trio

from toolnexus_trio.tesseron import Gateway, TesseronApp
from toolnexus_trio.tesseron._manifest import read_manifest_urls

MANIFEST_LOG = "toolnexus_trio.tesseron"


def manifest(url: str, *, pid: int | None = None, pad: int = 0) -> str:
    doc = {
        "version": 2, "instanceId": "inst-t", "appName": "t", "addedAt": 1,
        "pid": os.getpid() if pid is None else pid, "transport": {"kind": "ws", "url": url},
    }  # fmt: skip
    return json.dumps(doc) + " " * pad


def skip_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == MANIFEST_LOG and r.getMessage().startswith(f"skipping manifest {name}:")
    ]


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 60_000,  # RecursionError in the parser
        b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
        b"\xff\xfe not utf-8",
        b'{"version": 2, "pid": ' + b"9" * 5000 + b"}",  # int too long to convert
        b"[]",
        b"",
    ],
    ids=["brackets", "objects", "bad-utf8", "huge-int", "list", "empty"],
)
async def test_a_manifest_that_fails_to_parse_is_skipped_with_one_log_line(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, MANIFEST_LOG)
    (tmp_path / "bad.json").write_bytes(content)
    app = TesseronApp("found", "Found")
    with trio.fail_after(20):
        async with app.listen(manifest_dir=tmp_path), Gateway() as gw:
            sessions = await gw.discover(tmp_path)
            assert [s.app.id for s in sessions] == ["found"]
            for _ in range(3):  # polled again: the unchanged file is not read again
                assert await gw.discover(tmp_path) == []
    assert len(skip_lines(caplog, "bad.json")) == 1, caplog.text


async def test_a_symlink_or_a_directory_is_never_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, MANIFEST_LOG)
    elsewhere = tmp_path / "elsewhere"
    instances = tmp_path / "instances"
    instances.mkdir()
    (instances / "dir.json").mkdir()
    hidden = TesseronApp("hidden", "Not in the directory")
    found = TesseronApp("found", "Found")
    with trio.fail_after(20):
        async with (
            hidden.listen(manifest_dir=elsewhere) as other,
            found.listen(manifest_dir=instances),
            Gateway() as gw,
        ):
            assert other.manifest_path is not None
            (instances / "link.json").symlink_to(other.manifest_path)
            sessions = await gw.discover(instances)
            assert [s.app.id for s in sessions] == ["found"]
    assert len(skip_lines(caplog, "link.json")) == 1
    assert len(skip_lines(caplog, "dir.json")) == 1


def test_an_oversized_manifest_is_skipped_without_being_read(tmp_path: Path) -> None:
    sparse = tmp_path / "big.json"
    with sparse.open("wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: no disk, but 64 MiB to whoever reads it
    # A valid manifest just over the 64 KiB cap (whitespace is valid JSON) is skipped too.
    (tmp_path / "padded.json").write_text(manifest("ws://127.0.0.1:1/", pad=64 * 1024))
    tracemalloc.start()
    try:
        urls = read_manifest_urls(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert urls == []
    assert peak < 1024 * 1024, peak  # the cap, not the file, bounds what is read


def test_a_manifest_at_the_cap_is_read(tmp_path: Path) -> None:
    text = manifest("ws://127.0.0.1:1/")
    (tmp_path / "full.json").write_text(text + " " * (64 * 1024 - len(text)))
    assert read_manifest_urls(tmp_path) == ["ws://127.0.0.1:1/"]


def test_a_manifest_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    from toolnexus_trio.tesseron._manifest import ManifestScanner

    path = tmp_path / "inst-t.json"
    path.write_text(manifest("ws://127.0.0.1:1111/"))
    scanner = ManifestScanner(tmp_path)
    assert scanner.scan() == ["ws://127.0.0.1:1111/"]
    before = os.stat(path)
    # Same inode, size and mtime: the content is not looked at again.
    with path.open("r+") as f:
        f.write(manifest("ws://127.0.0.1:2222/"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert scanner.scan() == ["ws://127.0.0.1:1111/"]
    # A new mtime is a change: read again.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert scanner.scan() == ["ws://127.0.0.1:2222/"]
    # Still polled for liveness on every scan: a dead pid drops it without a read.
    path.write_text(manifest("ws://127.0.0.1:3333/", pid=2**22 + 12345))
    assert scanner.scan() == []
    path.unlink()
    assert scanner.scan() == []
