"""``read``, ``write`` and ``edit``: atomic writes, bad input, confinement.

The SPEC strings themselves are pinned against the released port in
test_builtins_differential.py; these cover what a differential cannot show.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from toolnexus_trio import ToolkitOptions, ToolResult, create_toolkit
from toolnexus_trio.builtins import BuiltinsConfig, _files


async def _call(base: Path | None, name: str, args: dict[str, Any]) -> ToolResult:
    config = BuiltinsConfig(base_dir=base)
    toolkit = await create_toolkit(ToolkitOptions(builtins=config))
    return await toolkit.execute(name, args)


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def test_write_creates_parents_and_leaves_no_temporary(tmp_path: Path) -> None:
    result = await _call(tmp_path, "write", {"path": "a/b/c.txt", "content": "héllo"})
    assert result == ToolResult.ok("Wrote 6 bytes to a/b/c.txt", {"bytes": 6})
    assert (tmp_path / "a/b/c.txt").read_text("utf-8") == "héllo"
    assert _listing(tmp_path) == ["a", "a/b", "a/b/c.txt"]


async def test_write_keeps_the_file_mode(tmp_path: Path) -> None:
    target = tmp_path / "script.sh"
    target.write_text("old")
    target.chmod(0o750)
    await _call(tmp_path, "write", {"path": "script.sh", "content": "new"})
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.read_text() == "new"


async def test_a_failed_write_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "keep.txt").write_text("original")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device", dst)

    monkeypatch.setattr(os, "replace", broken_replace)
    replaced = await _call(tmp_path, "write", {"path": "keep.txt", "content": "new"})
    created = await _call(tmp_path, "write", {"path": "new/dir/f.txt", "content": "new"})
    edited = await _call(
        tmp_path, "edit", {"path": "keep.txt", "oldString": "orig", "newString": "x"}
    )
    for result in (replaced, created, edited):
        assert result.is_error and "No space left on device" in result.output
    assert (tmp_path / "keep.txt").read_text() == "original"
    assert _listing(tmp_path) == ["keep.txt"]  # no temporary file, no new directory


async def test_readers_never_see_half_a_file(tmp_path: Path) -> None:
    # The replacement is one rename: a reader racing the writer sees old or new, whole.
    target = tmp_path / "big.txt"
    old, new = "a" * 2_000_000, "b" * 2_000_000
    target.write_text(old)
    seen: set[str] = set()

    def reader(stop: list[bool]) -> None:
        while not stop:
            seen.add(target.read_text()[::100_000])

    stop: list[bool] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, reader, stop)
        for content in (new, old, new):
            await _call(tmp_path, "write", {"path": "big.txt", "content": content})
        stop.append(True)
    assert seen <= {old[::100_000], new[::100_000]}


async def test_write_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("real.txt")
    await _call(None, "write", {"path": str(tmp_path / "link.txt"), "content": "new"})
    assert (tmp_path / "link.txt").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "new"


async def test_read_refuses_fifos_and_huge_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(tmp_path / "fifo")
    with trio.fail_after(5):  # opening a FIFO to read would block forever
        result = await _call(tmp_path, "read", {"path": "fifo"})
    assert result == ToolResult.error(f"read: {tmp_path}/fifo is not a regular file")
    monkeypatch.setattr(_files, "MAX_FILE_BYTES", 10)
    (tmp_path / "big.txt").write_text("x" * 11)
    result = await _call(tmp_path, "read", {"path": "big.txt"})
    assert result == ToolResult.error(f"read: {tmp_path}/big.txt is larger than 10 bytes")
    (tmp_path / "ok.txt").write_text("x" * 10)
    assert (await _call(tmp_path, "read", {"path": "ok.txt"})).output == "x" * 10


async def test_read_without_base_uses_the_path_as_given(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("one\ntwo\n")
    result = await _call(None, "read", {"path": str(tmp_path / "f.txt"), "offset": 2})
    assert result == ToolResult.ok("two\n")
    missing = await _call(None, "read", {"path": "no/such/file.txt"})
    assert missing == ToolResult.error(
        "read: [Errno 2] No such file or directory: 'no/such/file.txt'"
    )


async def test_edit_is_exact_and_counts(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("x = 1\nx = 1\n")
    unique = await _call(
        tmp_path, "edit", {"path": "f.py", "oldString": "x = 1\nx", "newString": "y"}
    )
    assert unique == ToolResult.ok("Edited f.py (1 replacement)", {"replacements": 1})
    assert (tmp_path / "f.py").read_text() == "y = 1\n"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read", {"path": "../outside.txt"}),
        ("write", {"path": "../outside.txt", "content": "x"}),
        ("write", {"path": "link/new.txt", "content": "x"}),
        ("edit", {"path": "link/outside.txt", "oldString": "o", "newString": "x"}),
        ("read", {"path": "/etc/hostname"}),
    ],
)
async def test_confinement(tmp_path: Path, name: str, args: dict[str, Any]) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (tmp_path / "outside.txt").write_text("o")
    (base / "link").symlink_to(tmp_path)  # a directory link leading out of the base
    result = await _call(base, name, args)
    assert result == ToolResult.error(f"{name}: {args['path']} resolves outside baseDir {base}")
    assert (tmp_path / "outside.txt").read_text() == "o"
    assert not (tmp_path / "new.txt").exists()


async def test_base_dir_accepts_a_path_object_and_a_base_that_is_a_symlink(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    result = await _call(tmp_path / "alias", "write", {"path": "f.txt", "content": "x"})
    assert result.output == "Wrote 1 bytes to f.txt"
    assert (real / "f.txt").read_text() == "x"


# -- read of a media file (SPEC §6): a content part, counterparts of toolnexus 0.21.0's
# tests/test_multimodal.py. The fixture is tests/fixtures/media (MIT, credit in its README).

MEDIA = Path(__file__).parents[1] / "fixtures" / "media"


async def test_read_png_gives_an_image_part(tmp_path: Path) -> None:
    # peer: test_read_png_yields_an_image_part
    (tmp_path / "fixture.png").write_bytes((MEDIA / "fixture.png").read_bytes())
    result = await _call(tmp_path, "read", {"path": "fixture.png"})
    golden = (MEDIA / "fixture.png.base64").read_text().strip()
    assert (result.output, result.is_error) == ("fixture.png (image/png, 82 bytes)", False)
    assert [p.to_dict() for p in result.parts] == [
        {"type": "image", "mimeType": "image/png", "data": golden, "name": "fixture.png"}
    ]


async def test_read_text_file_has_no_parts(tmp_path: Path) -> None:
    # peer: test_read_text_file_is_unchanged
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    result = await _call(tmp_path, "read", {"path": "a.txt"})
    assert (result.output, result.parts) == ("one\ntwo\n", ())


async def test_read_undecodable_bytes_is_an_error_result(tmp_path: Path) -> None:
    # peer: test_read_undecodable_bytes_is_an_error_result_not_an_exception
    # peer: test_read_undecodable_bytes_through_the_toolkit_does_not_raise
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00")
    result = await _call(tmp_path, "read", {"path": "bin.dat"})
    assert result.is_error and "bin.dat is not valid UTF-8 text" in result.output


async def test_read_media_over_the_process_cap_is_an_error_result(tmp_path: Path) -> None:
    import toolnexus_trio as tn

    (tmp_path / "fixture.png").write_bytes((MEDIA / "fixture.png").read_bytes())
    tn.set_max_part_bytes(10)
    try:
        result = await _call(tmp_path, "read", {"path": "fixture.png"})
    finally:
        tn.set_max_part_bytes(None)
    assert result.is_error and "over the maxPartBytes limit of 10" in result.output
