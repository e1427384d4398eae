"""``agent(..., uses=...)``: the agent's own tools, read once at definition time.

A list (or tuple) of :class:`~toolnexus_trio.Tool`, or toolnexus's ``{"tools": [...]}``.
Anything else is refused here with the reason, not later in a turn (a dict was once
taken as the list of its keys and failed mid-run with ``'str' object has no attribute
'execute'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._tools import Tool


def tools_of(uses: Any) -> list[Tool] | None:
    """The tools *uses* names, checked; ``None`` when it is ``None``."""
    if uses is None:
        return None
    if isinstance(uses, Mapping):
        unknown = sorted(str(k) for k in uses if k != "tools")
        if unknown:
            raise ValueError(
                f"agent uses= takes a list of tools or {{'tools': [...]}}; unknown keys: "
                f"{', '.join(unknown)}"
            )
        uses = uses.get("tools", [])
        where = "uses['tools']"
    else:
        where = "uses"
    if isinstance(uses, str | bytes) or not isinstance(uses, Sequence):
        raise TypeError(
            f"agent {where} must be a list of tools or {{'tools': [...]}}, "
            f"not {type(uses).__name__}"
        )
    tools = list(uses)
    for i, tool in enumerate(tools):
        if not isinstance(tool, Tool):
            raise TypeError(f"agent {where}[{i}] is a {type(tool).__name__}, not a Tool")
    return tools
