"""The builtins of SPEC §4A: ``bash``, ``read``, ``write``, ``edit``, ``grep``, ``glob``,
``webfetch``, ``question``, ``apply_patch`` and ``todowrite``.

Names and input schemas are byte-identical to the SPEC and the released ports, and so
are the output strings. Each tool stops its work at once when its call is cancelled
(``bash`` reaps its whole process group first). :class:`BuiltinsConfig` picks the
tools and may confine the file tools to a ``base_dir``; ``create_toolkit`` adds them.
"""

import attrs as _attrs

from ._config import BUILTIN_ORDER as BUILTIN_ORDER
from ._config import DEFAULT_SHELL as DEFAULT_SHELL
from ._config import BuiltinsConfig as BuiltinsConfig
from ._config import builtin_shell as builtin_shell
from ._files import MAX_FILE_BYTES as MAX_FILE_BYTES
from ._question import render_questions as render_questions
from ._registry import builtin_tools as builtin_tools
from ._shell import KILL_GRACE_SECONDS as KILL_GRACE_SECONDS
from ._shell import OUTPUT_LIMIT as OUTPUT_LIMIT
from ._shell import truncation_marker as truncation_marker
from ._web import MAX_FETCH_BYTES as MAX_FETCH_BYTES
from ._web import strip_html as strip_html

__all__ = [
    "BUILTIN_ORDER",
    "DEFAULT_SHELL",
    "KILL_GRACE_SECONDS",
    "MAX_FETCH_BYTES",
    "MAX_FILE_BYTES",
    "OUTPUT_LIMIT",
    "BuiltinsConfig",
    "builtin_shell",
    "builtin_tools",
    "render_questions",
    "strip_html",
    "truncation_marker",
]

# Tracebacks and docs show this package, not the private module (as the facade does);
# annotations are resolved first, while the defining module is still known.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _attrs.has(_obj):
        _attrs.resolve_types(_obj)
    if getattr(_obj, "__module__", "").startswith("toolnexus_trio.builtins._"):
        _obj.__module__ = __name__
del _name, _obj
