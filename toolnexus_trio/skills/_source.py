"""Gathering skills from folders, data and a provider; the ``skill`` tool; the catalog.

Candidates come in a fixed order, folders first (each root in turn, each in discovery
order), then data skills, then the provider's, and the first of a name wins (SPEC §3
S1). The folder walk and every file read run in one worker thread.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import trio

from .._tools import Tool, ToolContext, ToolHints, ToolResult, ToolSource
from . import _discover
from ._frontmatter import parse
from ._types import SkillDef, SkillInfo, SkillInventory, SkillProvider, SkillSkip, SkipReason

logger = logging.getLogger("toolnexus_trio")

SKILL_TOOL_DESCRIPTION = (
    "Load a specialized skill when the task at hand matches one of the skills listed in "
    "the system prompt.\n\nUse this tool to inject the skill's instructions and resources "
    "into current conversation. The output may contain detailed workflow guidance as well "
    "as references to scripts, files, etc in the same directory as the skill.\n\nThe skill "
    "name must match one of the skills listed in your system prompt."
)
"""The ``skill`` tool's description: opencode's ``skill.txt``, verbatim (SPEC §3)."""

SKILLS_PROMPT_PREAMBLE = (
    "Skills provide specialized instructions and workflows for specific tasks.\n"
    "Use the skill tool to load a skill when a task matches its description."
)
"""The first lines of :meth:`Toolkit.skills_prompt` when a described skill exists."""

NO_SKILLS_PROMPT = "No skills are currently available."
"""The catalog when the skill source has no skill with a description."""

DEFAULT_SAMPLE_LIMIT = 10

_SKILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The name of the skill to load"},
    },
    "required": ["name"],
    "additionalProperties": False,
}

PathArg = str | os.PathLike[str]
Origin = Literal["dir", "data", "provider"]


def _roots(skills_dir: PathArg | Sequence[PathArg] | None) -> list[str]:
    if skills_dir is None:
        return []
    if isinstance(skills_dir, str | os.PathLike):
        return [os.fspath(skills_dir)]
    return [os.fspath(d) for d in skills_dir]


def _bad_name(name: str) -> str | None:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "the name holds a control character"
    return None


def _read_dirs(
    roots: Sequence[str], stop: threading.Event
) -> tuple[list[SkillInfo | SkillSkip], list[str]]:
    """Blocking: every folder skill (or its skip) in order, and the roots not found."""
    out: list[SkillInfo | SkillSkip] = []
    missing: list[str] = []
    for root in roots:
        found = _discover.find_skill_files(root, stop)
        if found is None:
            missing.append(os.path.abspath(root))
            continue
        for path in found:
            if stop.is_set():
                raise _discover.Abandoned
            out.append(_read_one(path))
    return out, missing


def _read_one(path: str) -> SkillInfo | SkillSkip:
    try:
        text = _discover.read_skill_file(path)
    except (OSError, ValueError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return SkillSkip(path, SkipReason.UNREADABLE, detail)
    fm = parse(text)
    if not fm.name:
        if fm.error is not None:
            return SkillSkip(path, SkipReason.MALFORMED_FRONTMATTER, fm.error)
        return SkillSkip(path, SkipReason.MISSING_NAME)
    bad = _bad_name(fm.name)
    if bad is not None:
        return SkillSkip(path, SkipReason.MALFORMED_FRONTMATTER, bad)
    directory = os.path.dirname(path)
    return SkillInfo(
        name=fm.name,
        description=fm.description,
        location=path,
        content=fm.body,
        origin="dir",
        base=Path(directory).as_uri(),
        directory=directory,
    )


def _from_def(d: SkillDef, origin: Origin) -> SkillInfo | SkillSkip:
    name = d.name.strip()
    base = d.base if d.base is not None else f"skill://{name}/"
    if not name:
        return SkillSkip(base, SkipReason.MISSING_NAME)
    bad = _bad_name(name)
    if bad is not None:
        return SkillSkip(base, SkipReason.MALFORMED_FRONTMATTER, bad)
    description = d.description.strip() if d.description is not None else None
    return SkillInfo(
        name=name,
        description=description,
        location=base,
        content=d.content,
        origin=origin,
        base=base,
        resources=d.resources,
    )


async def _provided(provider: SkillProvider) -> list[SkillDef]:
    """The provider's skills; raises what it raised (the caller isolates it)."""
    if inspect.iscoroutinefunction(provider):
        produced: Any = await provider()
    else:
        produced = await trio.to_thread.run_sync(provider, abandon_on_cancel=True)
        if inspect.isawaitable(produced):
            produced = await produced
    if isinstance(produced, str | bytes | Mapping) or not isinstance(produced, Iterable):
        raise TypeError(f"returned {type(produced).__name__}, not a list of SkillDef")
    out: list[SkillDef] = []
    for item in produced:
        if not isinstance(item, SkillDef):
            raise TypeError(f"returned a {type(item).__name__}, not a SkillDef")
        out.append(item)
    return out


async def gather_skills(
    skills_dir: PathArg | Sequence[PathArg] | None,
    skills: Sequence[SkillDef],
    skill_provider: SkillProvider | None,
    *,
    log: bool,
) -> SkillInventory:
    """Every candidate of the three sources, deduplicated first-wins; nothing filtered.

    A provider that raises (or returns something else than SkillDefs) is isolated: the
    other sources still load, and the failure is one ``unreadable`` skip. With *log*,
    each skip and each missing root is logged as a warning.
    """
    roots = _roots(skills_dir)
    found: list[SkillInfo | SkillSkip] = []
    if roots:
        from_dirs, missing = await _discover.in_thread(lambda stop: _read_dirs(roots, stop))
        found.extend(from_dirs)
        for root in missing:
            if log:
                logger.warning(
                    "toolnexus_trio: skills dir not found (or not a directory): %s", root
                )
    found.extend(_from_def(d, "data") for d in skills)
    if skill_provider is not None:
        try:
            provided = await _provided(skill_provider)
        except Exception as exc:
            detail = f"skill provider failed: {type(exc).__name__}: {exc}"
            found.append(SkillSkip("skill_provider", SkipReason.UNREADABLE, detail))
        else:
            found.extend(_from_def(d, "provider") for d in provided)
    loaded: dict[str, SkillInfo] = {}
    skipped: list[SkillSkip] = []
    for item in found:
        if isinstance(item, SkillInfo) and item.name in loaded:
            item = SkillSkip(
                item.location,
                SkipReason.DUPLICATE_NAME,
                f"{item.name!r} is already defined by {loaded[item.name].location}",
            )
        if isinstance(item, SkillSkip):
            skipped.append(item)
            if log:
                detail = f": {item.detail}" if item.detail else ""
                logger.warning(
                    "toolnexus_trio: skill skipped (%s) at %s%s", item.reason, item.location, detail
                )
            continue
        loaded[item.name] = item
    return SkillInventory(tuple(loaded.values()), tuple(skipped))


async def list_skills(
    skills_dir: PathArg | Sequence[PathArg] | None = None,
    *,
    skills: Sequence[SkillDef] = (),
    skill_provider: SkillProvider | None = None,
) -> SkillInventory:
    """Discover and validate skills without building a toolkit (SPEC §3 S3).

    The same sources and rules as :func:`~toolnexus_trio.create_toolkit`, unfiltered
    (it is the list to write a ``skills_filter`` from); each skip carries a
    :class:`SkipReason`. Nothing is logged and nothing stays open. The folder walk runs
    in a worker thread; a cancel abandons it at once.
    """
    return await gather_skills(skills_dir, skills, skill_provider, log=False)


def apply_filter(
    names: Iterable[str], skills_filter: Mapping[str, bool] | None
) -> tuple[set[str], list[str]]:
    """The names a ``name -> bool`` filter keeps, and the filter's unknown names.

    Empty or ``None`` keeps all; one ``True`` makes it an allowlist of the ``True``
    names; only ``False`` values drop those names (SPEC §3 S2).
    """
    present = set(names)
    if not skills_filter:
        return present, []
    unknown = [n for n in skills_filter if n not in present]
    if any(v is True for v in skills_filter.values()):
        kept = {n for n in present if skills_filter.get(n) is True}
    else:
        kept = {n for n in present if skills_filter.get(n) is not False}
    return kept, unknown


class SkillCatalog:
    """The loaded skills of one toolkit, their prompt catalog and their ``skill`` tool."""

    def __init__(self, skills: Iterable[SkillInfo], sample_limit: int = 0) -> None:
        if sample_limit < -1:
            raise ValueError(f"skill_sample_limit must be -1, 0 or positive, not {sample_limit}")
        self.skills: dict[str, SkillInfo] = {s.name: s for s in skills}
        self.sample_limit = DEFAULT_SAMPLE_LIMIT if sample_limit == 0 else sample_limit
        self.tool = Tool(
            name="skill",
            description=SKILL_TOOL_DESCRIPTION,
            input_schema=_SKILL_SCHEMA,
            source=ToolSource.SKILL,
            execute=self._execute,
            hints=ToolHints(read_only=True, idempotent=True),
        )

    def prompt(self) -> str:
        """The preamble and ``## Available Skills`` list, or :data:`NO_SKILLS_PROMPT`.

        Only skills with a description are listed, sorted by name (code point).
        """
        described = sorted(
            (s for s in self.skills.values() if s.description is not None), key=lambda s: s.name
        )
        if not described:
            return NO_SKILLS_PROMPT
        lines = [f"- **{s.name}**: {s.description}" for s in described]
        return SKILLS_PROMPT_PREAMBLE + "\n\n## Available Skills\n" + "\n".join(lines)

    async def _files(self, info: SkillInfo) -> list[str] | None:
        if self.sample_limit == -1:
            return None
        if info.directory is None:
            return list(info.resources[: self.sample_limit]) if info.resources else None
        directory, limit = info.directory, self.sample_limit
        return await _discover.in_thread(
            lambda stop: _discover.sample_files(directory, limit, stop)
        )

    async def _execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        name = args["name"]
        info = self.skills.get(name)
        if info is None:
            available = ", ".join(sorted(self.skills)) or "none"
            return ToolResult.error(f'Skill "{name}" not found. Available skills: {available}')
        files = await self._files(info)
        return ToolResult.ok(
            render(info, files), {"name": info.name, "dir": info.directory or info.base}
        )


def render(info: SkillInfo, files: Sequence[str] | None) -> str:
    """The ``skill`` tool's block (SPEC §0.6); ``files=None`` leaves out the file list."""
    lines = [
        f'<skill_content name="{info.name}">',
        f"# Skill: {info.name}",
        "",
        info.content.strip(),
        "",
        f"Base directory for this skill: {info.base}",
        "Relative paths in this skill (e.g., scripts/, reference/) are relative to this "
        "base directory.",
    ]
    if files is not None:
        lines += [
            "Note: file list is sampled.",
            "",
            "<skill_files>",
            "\n".join(f"<file>{f}</file>" for f in files),
            "</skill_files>",
        ]
    lines.append("</skill_content>")
    return "\n".join(lines)


async def load_catalog(
    *,
    skills_dir: PathArg | Sequence[PathArg] | None,
    skills: Sequence[SkillDef],
    skill_provider: SkillProvider | None,
    skills_filter: Mapping[str, bool] | None,
    disable_skills: Sequence[str],
    sample_limit: int,
) -> SkillCatalog:
    """Gather, filter (``skills_filter`` then ``disable_skills``) and build the catalog."""
    inventory = await gather_skills(skills_dir, skills, skill_provider, log=True)
    kept, unknown = apply_filter((s.name for s in inventory.skills), skills_filter)
    for name in unknown:
        logger.warning("toolnexus_trio: skills_filter name %r matched no skill", name)
    kept.difference_update(disable_skills)
    return SkillCatalog((s for s in inventory.skills if s.name in kept), sample_limit)
