"""MCP tool annotations <-> our :class:`~toolnexus_trio.ToolHints`, both ways.

MCP's defaults differ from ours: an annotated tool that leaves ``destructiveHint`` or
``openWorldHint`` out is, per the MCP spec, destructive and open-world (the cautious
reading), so a present-but-partial annotation maps to those. ``destructiveHint`` only
means something for a tool that is not read-only. A tool with no annotations at all
has no hints (``None``): unknown stays distinct from "all false".
"""

from __future__ import annotations

import re
from typing import Final

import mcp_types as types

from .._tools import ToolHints

MAX_TITLE: Final = 200
"""Characters of a server's tool title kept (a title is for display, never for a model)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _title(raw: str | None) -> str | None:
    if raw is None:
        return None
    # A hostile server's title must not smuggle newlines or escapes into a display.
    title = _CONTROL.sub(" ", raw).strip()[:MAX_TITLE]
    return title or None


def hints_from_annotations(annotations: types.ToolAnnotations | None) -> ToolHints | None:
    """The :class:`ToolHints` of an MCP tool's ``annotations`` (``None`` for none)."""
    if annotations is None:
        return None
    read_only = annotations.read_only_hint is True
    return ToolHints(
        read_only=read_only,
        destructive=not read_only and annotations.destructive_hint is not False,
        idempotent=annotations.idempotent_hint is True,
        open_world=annotations.open_world_hint is not False,
        title=_title(annotations.title),
    )


def annotations_from_hints(hints: ToolHints | None) -> types.ToolAnnotations | None:
    """The MCP ``annotations`` a served tool advertises for its hints (every hint
    explicit, since our defaults are not MCP's); ``None`` for a tool without hints."""
    if hints is None:
        return None
    return types.ToolAnnotations(
        title=hints.title,
        read_only_hint=hints.read_only,
        destructive_hint=hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=hints.open_world,
    )
