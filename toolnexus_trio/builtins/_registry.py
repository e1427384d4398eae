"""Assembles the enabled builtins, in the SPEC's order, for one :class:`BuiltinsConfig`."""

from __future__ import annotations

from collections.abc import Callable

from .._tools import Tool
from ._config import BUILTIN_ORDER, BuiltinsConfig, Place
from ._files import edit_tool, read_tool, write_tool
from ._patch import apply_patch_tool
from ._question import question_tool
from ._search import glob_tool, grep_tool
from ._shell import bash_tool
from ._todo import todowrite_tool
from ._web import webfetch_tool

_MAKERS: dict[str, Callable[[Place], Tool]] = {
    "bash": bash_tool,
    "read": read_tool,
    "write": write_tool,
    "edit": edit_tool,
    "grep": grep_tool,
    "glob": glob_tool,
    "webfetch": lambda place: webfetch_tool(),
    "question": lambda place: question_tool(),
    "apply_patch": apply_patch_tool,
    "todowrite": lambda place: todowrite_tool(),
}


def builtin_tools(config: BuiltinsConfig) -> list[Tool]:
    """The enabled builtins, in the SPEC's order (SPEC §4A)."""
    if not config.enabled:
        return []
    place = Place(config.base_dir)
    makers = _MAKERS
    if config.shell is not None:  # the host's interpreter for bash
        makers = {**_MAKERS, "bash": lambda place: bash_tool(place, config.shell)}
    return [makers[name](place) for name in BUILTIN_ORDER if config.is_on(name)]
