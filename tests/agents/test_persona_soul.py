"""SPEC §7E: the persona home composed into a soul (compose_soul)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolnexus_trio.agents import BOOTSTRAP_ORDER, HEARTBEAT_OK, compose_soul
from toolnexus_trio.agents._soul import (
    MAX_BOOTSTRAP_BYTES,
    TRUNCATION_NOTICE,
    compose_soul_async,
)

CAP = 2_097_152


def test_constants() -> None:
    assert BOOTSTRAP_ORDER == (
        "AGENTS.md",
        "SOUL.md",
        "IDENTITY.md",
        "USER.md",
        "TOOLS.md",
        "HEARTBEAT.md",
        "MEMORY.md",
    )
    assert HEARTBEAT_OK == "HEARTBEAT_OK"
    assert MAX_BOOTSTRAP_BYTES == CAP


def test_all_seven_in_order_whatever_the_write_order(tmp_path: Path) -> None:
    for name in reversed(BOOTSTRAP_ORDER):
        (tmp_path / name).write_text(f"\n  body of {name}  \n\n", encoding="utf-8")
    (tmp_path / "NOTES.md").write_text("not a bootstrap file", encoding="utf-8")
    soul, loaded = compose_soul(tmp_path)
    assert loaded == list(BOOTSTRAP_ORDER)
    assert soul == "\n\n".join(f"## {name}\n\nbody of {name}" for name in BOOTSTRAP_ORDER)


def test_absent_files_are_skipped_and_an_empty_home_gives_nothing(tmp_path: Path) -> None:
    assert compose_soul(tmp_path) == ("", [])
    assert compose_soul(tmp_path / "missing") == ("", [])
    (tmp_path / "MEMORY.md").write_text("- a\n", encoding="utf-8")
    (tmp_path / "SOUL.md").write_text("me", encoding="utf-8")
    assert compose_soul(str(tmp_path)) == (
        "## SOUL.md\n\nme\n\n## MEMORY.md\n\n- a",
        ["SOUL.md", "MEMORY.md"],
    )


def test_text_is_kept_byte_for_byte_inside(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_bytes("line one\r\n  indented — ✓\n".encode())
    soul, _ = compose_soul(tmp_path)
    assert soul == "## SOUL.md\n\nline one\r\n  indented — ✓"


def test_exactly_the_cap_is_not_truncated(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_bytes(b"a" * CAP)
    soul, _ = compose_soul(tmp_path)
    assert TRUNCATION_NOTICE not in soul
    assert soul == "## MEMORY.md\n\n" + "a" * CAP


def test_over_the_cap_is_cut_in_bytes_with_the_notice(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    # 2 bytes short of the cap, then a 2-byte character that ends exactly at the cap.
    original = b"a" * (CAP - 2) + "é".encode() + b"tail beyond the cap\n"
    path.write_bytes(original)
    soul, loaded = compose_soul(tmp_path)
    assert loaded == ["MEMORY.md"]
    assert soul == "## MEMORY.md\n\n" + "a" * (CAP - 2) + "é\n" + TRUNCATION_NOTICE
    assert TRUNCATION_NOTICE == "[truncated: exceeds 2 MB bootstrap cap]"
    assert path.read_bytes() == original  # the file on disk is untouched


def test_a_cut_through_a_character_drops_its_broken_half(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_bytes(b"a" * (CAP - 1) + "é".encode() + b"xyz")
    soul, _ = compose_soul(tmp_path)
    assert soul == "## USER.md\n\n" + "a" * (CAP - 1) + "\n" + TRUNCATION_NOTICE


def test_only_the_over_cap_file_is_cut(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("small", encoding="utf-8")
    (tmp_path / "MEMORY.md").write_bytes(b"m" * (CAP + 10))
    soul, _ = compose_soul(tmp_path)
    assert soul.startswith("## SOUL.md\n\nsmall\n\n## MEMORY.md\n\nmmm")
    assert soul.count(TRUNCATION_NOTICE) == 1
    assert len(soul.encode()) == len("## SOUL.md\n\nsmall\n\n## MEMORY.md\n\n") + CAP + 1 + len(
        TRUNCATION_NOTICE
    )


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "TOOLS.md").mkdir()
    with pytest.raises(ValueError, match=r"TOOLS\.md is not a regular file"):
        compose_soul(tmp_path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "HEARTBEAT.md")
    with pytest.raises(ValueError, match=r"HEARTBEAT\.md is not a regular file"):
        compose_soul(tmp_path)


def test_a_symlink_inside_the_home_is_followed(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "soul.txt").write_text("linked", encoding="utf-8")
    (tmp_path / "SOUL.md").symlink_to(tmp_path / "shared" / "soul.txt")
    assert compose_soul(tmp_path) == ("## SOUL.md\n\nlinked", ["SOUL.md"])


def test_a_symlink_out_of_the_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "secret").write_text("outside", encoding="utf-8")
    (home / "USER.md").symlink_to(tmp_path / "secret")
    with pytest.raises(ValueError, match="leads outside the agent home"):
        compose_soul(home)


def test_a_dangling_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match="dangling"):
        compose_soul(tmp_path)


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_bytes(b"\xff\xfeab")
    with pytest.raises(ValueError, match=r"SOUL\.md is not valid UTF-8 text"):
        compose_soul(tmp_path)


async def test_async_composition_runs_off_the_event_loop(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("async", encoding="utf-8")
    assert await compose_soul_async(tmp_path) == ("## SOUL.md\n\nasync", ["SOUL.md"])


def test_a_home_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("not a folder", encoding="utf-8")
    with pytest.raises(ValueError, match="is not a directory"):
        compose_soul(tmp_path / "home")
