"""Skills (SPEC §3): discovery, the ``skill`` tool, the prompt catalog, S1-S5, bad input,
the toolkit's assembly order, and discovery off the event loop."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from toolnexus_trio import (
    BuiltinsConfig,
    SkillDef,
    SkillSkip,
    SkipReason,
    ToolkitOptions,
    ToolResult,
    ToolSource,
    create_toolkit,
    define_tool,
    list_skills,
)
from toolnexus_trio.builtins import BUILTIN_ORDER
from toolnexus_trio.skills import (
    NO_SKILLS_PROMPT,
    SKILL_TOOL_DESCRIPTION,
    SKILLS_PROMPT_PREAMBLE,
    _discover,
)

OFF = BuiltinsConfig.off()


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def skill_md(name: str, description: str | None = None, body: str = "Body.\n") -> str:
    lines = ["---", f"name: {name}"]
    if description is not None:
        lines.append(f"description: {description}")
    return "\n".join([*lines, "---", body])


async def toolkit(**kw: Any) -> Any:
    kw.setdefault("builtins", OFF)
    return await create_toolkit(ToolkitOptions(**kw))


async def load(tk: Any, name: str) -> ToolResult:
    return await tk.execute("skill", {"name": name})


# -- the golden block ---------------------------------------------------------


async def test_the_hello_world_block_is_byte_exact(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write(
        root / "hello-world" / "SKILL.md",
        "---\nname: hello-world\ndescription: Greets the user\n---\n\n# Hello\n\nRun it.\n",
    )
    write(root / "hello-world" / "scripts" / "greet.sh", "echo hi\n")
    tk = await toolkit(skills_dir=root)
    result = await load(tk, "hello-world")
    d = root / "hello-world"
    assert result.output == (
        '<skill_content name="hello-world">\n'
        "# Skill: hello-world\n"
        "\n"
        "# Hello\n\nRun it.\n"
        "\n"
        f"Base directory for this skill: file://{d}\n"
        "Relative paths in this skill (e.g., scripts/, reference/) are relative to this "
        "base directory.\n"
        "Note: file list is sampled.\n"
        "\n"
        "<skill_files>\n"
        f"<file>{d}/scripts/greet.sh</file>\n"
        "</skill_files>\n"
        "</skill_content>"
    )
    assert not result.is_error
    assert result.metadata == {"name": "hello-world", "dir": str(d)}


async def test_the_skill_tool_declaration() -> None:
    tk = await toolkit(skills=[SkillDef(name="a", content="x")])
    t = tk.get("skill")
    assert t.source is ToolSource.SKILL
    assert t.description == (
        "Load a specialized skill when the task at hand matches one of the skills listed in "
        "the system prompt.\n\nUse this tool to inject the skill's instructions and resources "
        "into current conversation. The output may contain detailed workflow guidance as well "
        "as references to scripts, files, etc in the same directory as the skill.\n\nThe skill "
        "name must match one of the skills listed in your system prompt."
    )
    assert t.description == SKILL_TOOL_DESCRIPTION
    assert t.input_schema == {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The name of the skill to load"}},
        "required": ["name"],
        "additionalProperties": False,
    }


async def test_not_found_lists_the_available_names(tmp_path: Path) -> None:
    tk = await toolkit(skills=[SkillDef(name="zed", content=""), SkillDef(name="abc", content="")])
    missing = await load(tk, "nope")
    assert missing.is_error
    assert missing.output == 'Skill "nope" not found. Available skills: abc, zed'
    empty = await toolkit(skills_dir=tmp_path)
    assert (await load(empty, "x")).output == 'Skill "x" not found. Available skills: none'


async def test_a_relative_skills_dir_gives_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "sk" / "a" / "SKILL.md", skill_md("a", "d"))
    monkeypatch.chdir(tmp_path)
    tk = await toolkit(skills_dir="sk")
    result = await load(tk, "a")
    assert f"Base directory for this skill: file://{tmp_path}/sk/a\n" in result.output


# -- the prompt catalog ---------------------------------------------------------


async def test_skills_prompt_lists_described_skills_sorted(tmp_path: Path) -> None:
    write(tmp_path / "b" / "SKILL.md", skill_md("zeta", "Last"))
    write(tmp_path / "a" / "SKILL.md", skill_md("Alpha", "Upper case sorts first"))
    write(tmp_path / "c" / "SKILL.md", skill_md("mid"))  # no description: not listed
    tk = await toolkit(
        skills_dir=tmp_path, skills=[SkillDef(name="data", content="", description="D")]
    )
    assert tk.skills_prompt() == (
        "Skills provide specialized instructions and workflows for specific tasks.\n"
        "Use the skill tool to load a skill when a task matches its description.\n"
        "\n"
        "## Available Skills\n"
        "- **Alpha**: Upper case sorts first\n"
        "- **data**: D\n"
        "- **zeta**: Last"
    )
    assert tk.skills_prompt().startswith(SKILLS_PROMPT_PREAMBLE)


async def test_skills_prompt_without_described_skills_or_source(tmp_path: Path) -> None:
    write(tmp_path / "a" / "SKILL.md", skill_md("plain"))
    assert (await toolkit(skills_dir=tmp_path)).skills_prompt() == NO_SKILLS_PROMPT
    assert NO_SKILLS_PROMPT == "No skills are currently available."
    none = await toolkit()
    assert none.skills_prompt() == ""
    assert none.get("skill") is None


async def test_a_dropped_skill_tool_takes_the_catalog_with_it(tmp_path: Path) -> None:
    # toolnexus 0.21 keeps telling the model about a skill tool it no longer has.
    write(tmp_path / "a" / "SKILL.md", skill_md("a", "d"))
    tk = await toolkit(skills_dir=tmp_path, disable_tools=["skill"])
    assert tk.get("skill") is None
    assert tk.skills_prompt() == ""


# -- frontmatter ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("frontmatter", "name", "description"),
    [
        ("name: folded\ndescription: >\n  one\n  two\n", "folded", "one two"),
        ("name: literal\ndescription: |\n  one\n  two\n\n", "literal", "one\ntwo"),
        ("name: '  quoted  '\ndescription: \"a: b\"", "quoted", "a: b"),
        ("name: true\ndescription: 007", "true", "007"),  # scalars as written
        ("name: n\ndescription: 2024-01-01", "n", "2024-01-01"),
        ("name: n\ndescription: null", "n", None),
        ("name: n\ndescription: [1, 2]", "n", None),
        ("name: n\ndescription: !!int 12", "n", "12"),
        # not YAML (a colon in a plain scalar): read line by line, like toolnexus 0.21
        ("name: colon\ndescription: Use when: you need x", "colon", "Use when: you need x"),
        ("name: 'q: x'\ndescription: a: b\n  more: c", "q: x", "a: b"),
        ("name: n\ndescription: {bad\nx: a: b", "n", None),
    ],
)
async def test_frontmatter_values(
    tmp_path: Path, frontmatter: str, name: str, description: str | None
) -> None:
    write(tmp_path / "s" / "SKILL.md", f"---\n{frontmatter}\n---\nbody\n")
    inventory = await list_skills(tmp_path)
    assert inventory.skipped == ()
    (info,) = inventory.skills
    assert (info.name, info.description, info.content) == (name, description, "body\n")


async def test_crlf_and_a_bom_are_read(tmp_path: Path) -> None:
    write(
        tmp_path / "s" / "SKILL.md",
        b"\xef\xbb\xbf---\r\nname: crlf\r\ndescription: >\r\n  folded\r\n  text\r\n---\r\nbody\r\n",
    )
    (info,) = (await list_skills(tmp_path)).skills
    assert (info.name, info.description, info.content) == ("crlf", "folded text", "body\n")


async def test_bad_skill_files_are_skipped_with_typed_reasons(tmp_path: Path) -> None:
    write(tmp_path / "a-ok" / "SKILL.md", skill_md("ok", "fine"))
    write(tmp_path / "b-noname" / "SKILL.md", "---\ndescription: no name\n---\nx")
    write(tmp_path / "c-nofm" / "SKILL.md", "just text")
    write(tmp_path / "d-unclosed" / "SKILL.md", "---\nname: never closed\n")
    write(tmp_path / "e-malformed" / "SKILL.md", "---\nname: [unclosed\n---\nx")
    write(tmp_path / "f-list" / "SKILL.md", "---\n- a\n- b\n---\nx")
    write(tmp_path / "g-emptyname" / "SKILL.md", "---\nname: '  '\n---\nx")
    write(tmp_path / "h-latin1" / "SKILL.md", b"---\nname: caf\xe9\n---\n")
    write(tmp_path / "i-huge" / "SKILL.md", skill_md("huge", "d", "x" * _discover.MAX_SKILL_BYTES))
    write(tmp_path / "j-ctrl" / "SKILL.md", '---\nname: "a\\nb"\n---\n')
    (tmp_path / "k-dangling").mkdir()
    (tmp_path / "k-dangling" / "SKILL.md").symlink_to(tmp_path / "nowhere")
    (tmp_path / "l-fifo").mkdir()
    os.mkfifo(tmp_path / "l-fifo" / "SKILL.md")
    inventory = await list_skills(tmp_path)
    assert [s.name for s in inventory.skills] == ["ok"]
    reasons = {Path(s.location).parent.name: (s.reason, s.detail) for s in inventory.skipped}
    assert reasons["b-noname"] == (SkipReason.MISSING_NAME, "")
    assert reasons["c-nofm"] == (SkipReason.MISSING_NAME, "")
    assert reasons["d-unclosed"] == (SkipReason.MISSING_NAME, "")
    assert reasons["e-malformed"][0] is SkipReason.MALFORMED_FRONTMATTER
    assert "expected ',' or ']'" in reasons["e-malformed"][1]
    assert reasons["f-list"] == (SkipReason.MISSING_NAME, "")
    assert reasons["g-emptyname"] == (SkipReason.MISSING_NAME, "")
    assert reasons["h-latin1"] == (
        SkipReason.UNREADABLE,
        "not UTF-8 (invalid continuation byte at byte 13)",
    )
    assert reasons["i-huge"] == (
        SkipReason.UNREADABLE,
        f"larger than {_discover.MAX_SKILL_BYTES} bytes",
    )
    assert reasons["j-ctrl"] == (
        SkipReason.MALFORMED_FRONTMATTER,
        "the name holds a control character",
    )
    assert reasons["k-dangling"] == (SkipReason.UNREADABLE, "No such file or directory")
    assert reasons["l-fifo"] == (SkipReason.UNREADABLE, "not a regular file")
    assert len(inventory.skipped) == 11
    assert SkipReason.MISSING_NAME == "missing-name"  # the SPEC's wire strings


async def test_a_toolkit_logs_each_skip(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "a" / "SKILL.md", "---\ndescription: no name\n---\n")
    write(tmp_path / "b" / "SKILL.md", skill_md("x", "d"))
    write(tmp_path / "c" / "SKILL.md", skill_md("x", "again"))
    with caplog.at_level(logging.WARNING, "toolnexus_trio"):
        tk = await toolkit(skills_dir=[tmp_path, tmp_path / "missing"])
    assert f"skill skipped (missing-name) at {tmp_path}/a/SKILL.md" in caplog.text
    assert f"skill skipped (duplicate-name) at {tmp_path}/c/SKILL.md" in caplog.text
    assert f"skills dir not found (or not a directory): {tmp_path}/missing" in caplog.text
    assert "- **x**: d" in tk.skills_prompt()


DEEP = 2_000  # PyYAML's recursive parser gives up near 500 levels (1 KB of brackets)


@pytest.mark.parametrize(
    "frontmatter",
    [
        "name: deep\ndescription: " + "[" * DEEP + "]" * DEEP,
        "name: deep\nmeta: " + "{a: " * DEEP + "b" + "}" * DEEP,
        "name: deep\nsteps:\n  " + "- " * DEEP + "x",
        "name: " + "[" * DEEP,  # no closing bracket either: the parser fails first
    ],
    ids=["flow-list", "flow-map", "block-list", "unclosed"],
)
async def test_frontmatter_nested_too_deeply_skips_that_skill_only(
    frontmatter: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: RecursionError out of list_skills and create_toolkit.
    deep = write(tmp_path / "a-deep" / "SKILL.md", f"---\n{frontmatter}\n---\nbody")
    write(tmp_path / "b-ok" / "SKILL.md", skill_md("ok", "fine"))
    inventory = await list_skills(tmp_path)
    assert [s.name for s in inventory.skills] == ["ok"]
    (skip,) = inventory.skipped
    assert skip == SkillSkip(
        str(deep), SkipReason.MALFORMED_FRONTMATTER, "nested too deeply for the YAML parser"
    )
    with caplog.at_level(logging.WARNING, "toolnexus_trio"):
        tk = await toolkit(skills_dir=tmp_path)
    assert (
        f"skill skipped (malformed-frontmatter) at {deep}: nested too deeply for the YAML parser"
        in caplog.text
    )
    assert "- **ok**: fine" in tk.skills_prompt()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("!!float abc", "ValueError: could not convert string to float: 'abc'"),
        ("!!timestamp 2001-13-14", "ValueError: month must be in 1..12"),
        ("!!int " + "1" * 5_000, "ValueError: Exceeds the limit (4300 digits)"),
        ("!!int 0b2", "ValueError: invalid literal for int() with base 2: '2'"),
    ],
)
async def test_a_value_its_tag_cannot_hold_skips_that_skill_only(
    value: str, reason: str, tmp_path: Path
) -> None:
    # Before: the constructor's ValueError came out of list_skills and create_toolkit.
    bad = write(tmp_path / "a-bad" / "SKILL.md", f"---\nname: bad\nwhen: {value}\n---\n")
    write(tmp_path / "b-ok" / "SKILL.md", skill_md("ok", "fine"))
    inventory = await list_skills(tmp_path)
    assert [s.name for s in inventory.skills] == ["ok"]
    (skip,) = inventory.skipped
    assert (skip.location, skip.reason) == (str(bad), SkipReason.MALFORMED_FRONTMATTER)
    assert skip.detail.startswith("the YAML parser failed: " + reason), skip.detail
    assert len(skip.detail) <= 300  # one readable line, not the 5,000 digits
    tk = await toolkit(skills_dir=tmp_path)
    assert "- **ok**: fine" in tk.skills_prompt()


# -- discovery ------------------------------------------------------------------


async def test_first_name_wins_shallowest_then_by_path(tmp_path: Path) -> None:
    write(tmp_path / "a" / "deep" / "SKILL.md", skill_md("dup", "deep"))
    write(tmp_path / "z" / "SKILL.md", skill_md("dup", "shallow"))
    write(tmp_path / "b" / "SKILL.md", skill_md("dup", "b wins over z"))
    second = tmp_path.parent / f"{tmp_path.name}-second"
    write(second / "s" / "SKILL.md", skill_md("dup", "second root"))
    inventory = await list_skills(
        [tmp_path, second], skills=[SkillDef(name="dup", content="", description="data")]
    )
    (info,) = inventory.skills
    assert info.description == "b wins over z"
    assert [(s.reason, s.location) for s in inventory.skipped] == [
        (SkipReason.DUPLICATE_NAME, f"{tmp_path}/z/SKILL.md"),
        (SkipReason.DUPLICATE_NAME, f"{tmp_path}/a/deep/SKILL.md"),
        (SkipReason.DUPLICATE_NAME, f"{second}/s/SKILL.md"),
        (SkipReason.DUPLICATE_NAME, "skill://dup/"),
    ]


async def test_symlinks_are_followed_and_cycles_end(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    write(outside / "linked" / "SKILL.md", skill_md("linked", "via a dir link"))
    write(outside / "linked" / "ref" / "notes.md", "n")
    write(outside / "file-target.md", skill_md("file-linked", "via a file link"))
    root.mkdir()
    (root / "to-linked").symlink_to(outside / "linked")
    (root / "f").mkdir()
    (root / "f" / "SKILL.md").symlink_to(outside / "file-target.md")
    (root / "loop").symlink_to(root)  # a cycle back to the root
    (outside / "linked" / "up").symlink_to(tmp_path)  # and one through the outside tree
    write(root / "node_modules" / "pkg" / "SKILL.md", skill_md("ignored", "d"))
    write(root / ".git" / "SKILL.md", skill_md("ignored-too", "d"))
    with trio.fail_after(10):
        inventory = await list_skills(root)
    assert sorted(s.name for s in inventory.skills) == ["file-linked", "linked"]
    assert inventory.skipped == ()
    tk = await toolkit(skills_dir=root)
    linked = await load(tk, "linked")
    # Paths keep the link's name, the sample follows links and skips SKILL.md.
    assert f"<file>{root}/to-linked/ref/notes.md</file>" in linked.output
    assert f"Base directory for this skill: file://{root}/to-linked\n" in linked.output


async def test_the_sample_is_sorted_capped_and_skips_skill_files(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write(d / "SKILL.md", skill_md("s", "d"))
    names = ["a-c", "a/b", "Z", "z", "0", ".hidden", "é", "sub/SKILL.md", "node_modules/m.js"]
    names += [f"many/{i:02d}" for i in range(20)]
    for n in names:
        write(d / n, "x")
    expected = [".hidden", "0", "Z", "a-c", "a/b", *[f"many/{i:02d}" for i in range(20)]]
    expected += ["z", "é"]

    async def sample(limit: int) -> str:
        return (
            await load(await toolkit(skills_dir=tmp_path, skill_sample_limit=limit), "s")
        ).output

    def block(files: list[str]) -> str:
        inner = "\n".join(f"<file>{d}/{f}</file>" for f in files)
        return f"Note: file list is sampled.\n\n<skill_files>\n{inner}\n</skill_files>\n"

    assert block(expected[:10]) in await sample(0)
    assert block(expected[:3]) in await sample(3)
    assert block(expected) in await sample(100)
    omitted = await sample(-1)
    assert "<skill_files>" not in omitted and "sampled" not in omitted
    assert omitted.endswith("relative to this base directory.\n</skill_content>")


async def test_an_empty_sample_keeps_the_block(tmp_path: Path) -> None:
    write(tmp_path / "s" / "SKILL.md", skill_md("s", "d"))
    result = await load(await toolkit(skills_dir=tmp_path), "s")
    assert result.output.endswith("<skill_files>\n\n</skill_files>\n</skill_content>")


def test_the_sampler_stops_early_and_on_request(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path / f"d{i:02d}" / "f", "x")
    listed: list[str] = []
    real = _discover._entries

    def counting(path: str) -> list[os.DirEntry[str]]:
        listed.append(path)
        return real(path)

    stop = threading.Event()
    _discover._entries = counting
    try:
        files = _discover.sample_files(str(tmp_path), 2, stop)
        assert files == [f"{tmp_path}/d00/f", f"{tmp_path}/d01/f"]
        assert len(listed) == 3  # the root and two directories, not thirty
        stop.set()
        with pytest.raises(_discover.Abandoned):
            _discover.sample_files(str(tmp_path), 10, stop)
        with pytest.raises(_discover.Abandoned):
            _discover.find_skill_files(str(tmp_path), stop)
    finally:
        _discover._entries = real


# -- S1 data and provider skills ---------------------------------------------------


async def test_data_skills_use_a_logical_base_and_their_resources() -> None:
    tk = await toolkit(
        skills=[
            SkillDef(
                name="data", content="  Steps.\n", description="A", resources=["b.md", "a.md"]
            ),
            SkillDef(name="bare", content="Only words."),
            SkillDef(name="based", content="x", base="mem://kb/", resources=["r"]),
        ],
        skill_sample_limit=1,
    )
    data = await load(tk, "data")
    assert data.output == (
        '<skill_content name="data">\n# Skill: data\n\nSteps.\n\n'
        "Base directory for this skill: skill://data/\n"
        "Relative paths in this skill (e.g., scripts/, reference/) are relative to this "
        "base directory.\nNote: file list is sampled.\n\n"
        "<skill_files>\n<file>b.md</file>\n</skill_files>\n</skill_content>"
    )
    assert data.metadata == {"name": "data", "dir": "skill://data/"}
    bare = await load(tk, "bare")
    assert bare.output == (
        '<skill_content name="bare">\n# Skill: bare\n\nOnly words.\n\n'
        "Base directory for this skill: skill://bare/\n"
        "Relative paths in this skill (e.g., scripts/, reference/) are relative to this "
        "base directory.\n</skill_content>"
    )
    based = await load(tk, "based")
    assert "Base directory for this skill: mem://kb/\n" in based.output
    assert "<file>r</file>" in based.output


async def test_providers_sync_and_async_and_a_failing_one_is_isolated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "a" / "SKILL.md", skill_md("disk", "from disk"))
    called_in: list[bool] = []

    def sync_provider() -> list[SkillDef]:
        called_in.append(threading.current_thread() is threading.main_thread())
        return [SkillDef(name="sync", content="s", description="S")]

    async def async_provider() -> list[SkillDef]:
        await trio.lowlevel.checkpoint()
        return [SkillDef(name="async", content="a", description="A")]

    def failing() -> list[SkillDef]:
        raise RuntimeError("database down")

    tk = await toolkit(skills_dir=tmp_path, skill_provider=sync_provider)
    assert "- **sync**: S" in tk.skills_prompt() and "- **disk**" in tk.skills_prompt()
    assert called_in == [False]  # a plain function runs in a worker thread
    tk = await toolkit(skill_provider=async_provider)
    assert "- **async**: A" in tk.skills_prompt()
    with caplog.at_level(logging.WARNING, "toolnexus_trio"):
        tk = await toolkit(
            skills_dir=tmp_path, skills=[SkillDef(name="d", content="")], skill_provider=failing
        )
    listed = (await load(tk, "zz")).output.split("Available skills: ")[1]
    assert listed == "d, disk"  # the other two sources still loaded
    assert "skill provider failed: RuntimeError: database down" in caplog.text
    inventory = await list_skills(tmp_path, skill_provider=failing)
    assert [s.name for s in inventory.skills] == ["disk"]
    assert inventory.skipped == (
        SkillSkip(
            "skill_provider",
            SkipReason.UNREADABLE,
            "skill provider failed: RuntimeError: database down",
        ),
    )


async def test_a_provider_returning_junk_is_isolated() -> None:
    async def junk() -> Any:
        return ["not a SkillDef"]

    async def text() -> Any:
        return "a string"

    for provider in (junk, text):
        inventory = await list_skills(skill_provider=provider)
        assert inventory.skills == ()
        assert inventory.skipped[0].reason is SkipReason.UNREADABLE


def test_skill_def_checks_its_types() -> None:
    with pytest.raises(TypeError):
        SkillDef(name="a", content="x", resources="one.md")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SkillDef(name=1, content="x")  # type: ignore[arg-type]
    assert SkillDef(name="a", content="x", resources=["r"]).resources == ("r",)


async def test_data_skills_with_bad_names_are_skipped() -> None:
    inventory = await list_skills(
        skills=[
            SkillDef(name=" ", content=""),
            SkillDef(name="a\tb", content=""),
            SkillDef(name=" ok ", content=""),
        ]
    )
    assert [s.name for s in inventory.skills] == ["ok"]
    assert [s.reason for s in inventory.skipped] == [
        SkipReason.MISSING_NAME,
        SkipReason.MALFORMED_FRONTMATTER,
    ]


# -- S2 filter, disable_skills, S3 unfiltered inventory -------------------------------


@pytest.mark.parametrize(
    ("skills_filter", "kept"),
    [
        (None, ["a", "b", "c"]),
        ({}, ["a", "b", "c"]),
        ({"a": True}, ["a"]),
        ({"a": True, "b": False}, ["a"]),
        ({"b": False}, ["a", "c"]),
        ({"nosuch": False}, ["a", "b", "c"]),
        ({"nosuch": True}, []),
    ],
)
async def test_skills_filter(skills_filter: dict[str, bool] | None, kept: list[str]) -> None:
    defs = [SkillDef(name=n, content="", description=n.upper()) for n in ("a", "b", "c")]
    tk = await toolkit(skills=defs, skills_filter=skills_filter)
    listed = (await load(tk, "?")).output.split("Available skills: ")[1]
    assert listed == (", ".join(kept) or "none")
    assert tk.get("skill") is not None  # the tool stays, even with nothing to load


async def test_unknown_filter_names_are_warned_and_disable_skills_drops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    defs = [SkillDef(name=n, content="", description=n) for n in ("a", "b")]
    with caplog.at_level(logging.WARNING, "toolnexus_trio"):
        tk = await toolkit(skills=defs, skills_filter={"ghost": False}, disable_skills=["b"])
    assert "skills_filter name 'ghost' matched no skill" in caplog.text
    assert tk.skills_prompt().endswith("## Available Skills\n- **a**: a")
    inventory = await list_skills(skills=defs)  # unfiltered
    assert [s.name for s in inventory.skills] == ["a", "b"]


# -- options and assembly -------------------------------------------------------------


def test_skill_options_are_checked() -> None:
    with pytest.raises(TypeError, match="skills_dir"):
        ToolkitOptions(skills="./skills")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolkitOptions(skills=["./skills"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        ToolkitOptions(skills_dir=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        ToolkitOptions(skills_filter={"a": "false"})  # type: ignore[dict-item]
    for bad in (-2, True, 1.5):
        with pytest.raises(ValueError):
            ToolkitOptions(skill_sample_limit=bad)  # type: ignore[arg-type]


async def _noop(args: dict[str, Any], ctx: Any) -> str:
    return "extra"


async def test_assembly_order_skill_then_builtins_then_extras(
    caplog: pytest.LogCaptureFixture,
) -> None:
    extra = define_tool("mine", "", None, _noop)
    fake_skill = define_tool("skill", "an extra named skill", None, _noop)
    shadow = define_tool("question", "a host's own question tool", None, _noop)
    with caplog.at_level(logging.WARNING, "toolnexus_trio"):
        tk = await create_toolkit(
            ToolkitOptions(
                skills=[SkillDef(name="s", content="")], extra_tools=[extra, fake_skill, shadow]
            )
        )
    names = [t.name for t in tk.tools()]
    builtins = [n for n in BUILTIN_ORDER if n != "question"]
    assert names == ["skill", *builtins, "mine", "question"]
    assert tk.get("skill").source is ToolSource.SKILL  # skill beats an extra tool
    assert tk.get("question") is shadow  # an extra beats a builtin
    assert "duplicate tool name 'skill'" in caplog.text
    assert tk.skills_prompt() == NO_SKILLS_PROMPT


# -- off the event loop ----------------------------------------------------------------


async def test_discovery_runs_in_a_thread_and_a_cancel_abandons_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    finished = threading.Event()

    def slow_disk(root: str, stop: threading.Event) -> list[str] | None:
        # A disk that answers only when the caller gives up: it blocks until stop.
        started.set()
        stop.wait(30)
        finished.set()
        raise _discover.Abandoned

    monkeypatch.setattr(_discover, "find_skill_files", slow_disk)
    ticks = 0
    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:

            async def loop_stays_free() -> None:
                nonlocal ticks
                await trio.to_thread.run_sync(started.wait, 10)
                for _ in range(3):
                    await trio.lowlevel.checkpoint()
                    ticks += 1
                scope.cancel()

            nursery.start_soon(loop_stays_free)
            await toolkit(skills_dir=tmp_path)
            pytest.fail("the build should have been cancelled")  # pragma: no cover
    assert scope.cancelled_caught
    assert ticks == 3  # the event loop ran while the walk was blocked
    assert await trio.to_thread.run_sync(finished.wait, 10)  # the thread saw stop and ended


async def test_loading_a_skill_samples_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "s" / "SKILL.md", skill_md("s", "d"))
    tk = await toolkit(skills_dir=tmp_path)
    threads: list[bool] = []
    real = _discover.sample_files

    def spy(directory: str, limit: int, stop: threading.Event) -> list[str]:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(directory, limit, stop)

    monkeypatch.setattr(_discover, "sample_files", spy)
    assert not (await load(tk, "s")).is_error
    assert threads == [False]
