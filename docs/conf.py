"""Sphinx configuration for toolnexus-trio."""

from __future__ import annotations

import os
import sys

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
