"""Sphinx configuration for toolnexus-trio."""

from __future__ import annotations

import os
import sys
from typing import Any

import attrs

sys.path.insert(0, os.path.abspath(".."))

project = "toolnexus-trio"
author = "toolnexus-trio developers"
copyright = "2026, toolnexus-trio developers"  # noqa: A001

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxcontrib_trio",
]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True
nitpicky = False
exclude_patterns = ["_build", "examples"]
html_theme = "furo"  # room for the wide tables (the benchmark report, the builtins)
html_title = "toolnexus-trio"
html_static_path = ["_static"]
html_css_files = ["wide.css"]


def _attrs_default(field: Any) -> str:
    """How the signature shows one attrs field's default: its value, or what its factory makes."""
    default = field.default
    if isinstance(default, attrs.Factory):
        factory = default.factory
        if not default.takes_self and factory in (list, dict, set, tuple, frozenset):
            return repr(factory())
        made = getattr(factory, "__name__", "")
        return "<generated>" if made.startswith(("_", "<")) or not made else f"{made}()"
    return object.__repr__(default) if type(default).__repr__ is object.__repr__ else repr(default)


def _attrs_signature(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: Any, return_annotation: Any
) -> tuple[str, Any] | None:
    """Give an attrs class the signature its users call: real defaults, no attrs internals.

    autodoc reads the generated ``__init__``, whose defaults are ``attr_dict['x'].default``
    expressions (with ``autodoc_preserve_defaults``) or ``NOTHING`` (a factory). The fields
    themselves know the truth, so the signature is rebuilt from ``attrs.fields``.
    """
    if what != "class" or not isinstance(obj, type) or not attrs.has(obj):
        return None
    parts: list[str] = []
    star = False
    for field in attrs.fields(obj):
        if not field.init:
            continue
        if field.kw_only and not star:
            parts.append("*")
            star = True
        alias = field.alias or field.name
        if field.default is attrs.NOTHING:
            parts.append(alias)
        else:
            parts.append(f"{alias}={_attrs_default(field)}")
    return f"({', '.join(parts)})", return_annotation


def setup(app: Any) -> None:
    """Hook the attrs signatures into autodoc."""
    app.connect("autodoc-process-signature", _attrs_signature)
