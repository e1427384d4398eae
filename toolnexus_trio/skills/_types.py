"""The skill source's data: skills supplied as data, discovered skills, and skips."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal

import attrs


def _resources(value: Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise TypeError("SkillDef.resources is a list of names, not one string")
    out = tuple(value)
    for item in out:
        if not isinstance(item, str):
            raise TypeError(f"SkillDef.resources holds strings, not {type(item).__name__}")
    return out


_str = attrs.validators.instance_of(str)
_opt_str = attrs.validators.optional(_str)


@attrs.frozen
class SkillDef:
    """A skill supplied as data rather than as a ``SKILL.md`` folder (SPEC §3 S1).

    ``content`` is the instructions; ``resources`` are logical names listed in the
    ``skill`` tool's ``<skill_files>`` block (none: the skill is instruction-only and the
    block is left out); ``base`` is the logical base shown to the model (default
    ``skill://<name>/``). No host path is ever shown for a data skill.
    """

    name: str = attrs.field(validator=_str)
    content: str = attrs.field(validator=_str)
    description: str | None = attrs.field(default=None, validator=_opt_str)
    resources: tuple[str, ...] = attrs.field(default=(), converter=_resources)
    base: str | None = attrs.field(default=None, validator=_opt_str)


SkillProvider = Callable[[], Iterable[SkillDef] | Awaitable[Iterable[SkillDef]]]
"""A lazy source of :class:`SkillDef` s, called once when the toolkit is built.

An ``async`` provider is awaited; a plain function runs in a worker thread.
"""


class SkipReason(enum.StrEnum):
    """Why a skill candidate was not loaded (SPEC §3 S3); the values are the SPEC's."""

    MISSING_NAME = "missing-name"
    """No ``name`` (no frontmatter, or a null, empty or non-scalar ``name``)."""
    MALFORMED_FRONTMATTER = "malformed-frontmatter"
    """The frontmatter is not YAML and no name could be read line by line, or the name
    holds a control character."""
    DUPLICATE_NAME = "duplicate-name"
    """An earlier candidate has the same name (first wins)."""
    UNREADABLE = "unreadable"
    """The file could not be read (missing target, not UTF-8, too large, not a regular
    file), or a skill provider failed."""


@attrs.frozen
class SkillSkip:
    """One skipped candidate: where it was, why, and the details (an error message)."""

    location: str
    reason: SkipReason
    detail: str = ""


@attrs.frozen
class SkillInfo:
    """One loaded skill.

    ``location`` is the absolute path of its ``SKILL.md`` (a directory skill) or its
    logical base (a data skill); ``content`` the body after the frontmatter, as written;
    ``origin`` says which source supplied it; ``base`` is what the ``skill`` tool shows
    as the base directory (a ``file://`` URI, or the logical base); ``directory`` is the
    skill's folder (``None`` for data); ``resources`` the logical names of a data skill.
    """

    name: str
    description: str | None
    location: str
    content: str
    origin: Literal["dir", "data", "provider"]
    base: str
    directory: str | None = None
    resources: tuple[str, ...] = ()


@attrs.frozen
class SkillInventory:
    """What :func:`list_skills` found: the loaded ``skills`` and the ``skipped`` ones."""

    skills: tuple[SkillInfo, ...]
    skipped: tuple[SkillSkip, ...]
