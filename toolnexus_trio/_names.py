"""Tool names from outside (host actions, later MCP tools): sanitized, bounded, distinct.

Providers accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$``, and one bad name makes
them reject the whole tool list. SPEC §0.2 and §1: every other character becomes
``_``. The rule, in full:

1. A name that is already valid (only ``[a-zA-Z0-9_-]``, 1 to 64 characters) is kept.
2. Any other name has each character outside ``[a-zA-Z0-9_-]`` replaced by ``_``; if
   it is then longer than 64 characters it is cut to 55 and ``_`` plus the first 8 hex
   digits of the SHA-256 of the *original* name is appended (so two long names that
   share a prefix stay apart). The empty name becomes ``_``.
3. Collisions (:func:`unique_tool_names`): a valid name always keeps itself. Every
   altered name whose result is also the result of another name gets the hash suffix
   (cut to 55 characters plus ``_`` plus 8 hex digits of the SHA-256 of its original),
   so the outcome does not depend on the order of the names. Should that still be taken
   (only a name crafted to collide can do it), the originals are taken in code-point
   order and each tries ``sha256(original + "\\0" + n)`` for n = 1, 2, ... until free.

The caller keeps the original name for the call itself; only the model sees the
sanitized one.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from typing import Final

TOOL_NAME_MAX: Final = 64
"""The longest tool name providers accept."""

_HASH_DIGITS: Final = 8
_INVALID: Final = re.compile(r"[^a-zA-Z0-9_-]")
_VALID: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def sanitize(text: str) -> str:
    """SPEC §0.2 ``sanitize``: each character outside ``[a-zA-Z0-9_-]`` becomes ``_``."""
    return _INVALID.sub("_", text)


def is_valid_tool_name(name: str) -> bool:
    """Whether *name* is usable as it is (``[a-zA-Z0-9_-]``, 1 to 64 characters)."""
    return _VALID.fullmatch(name) is not None


def _digest(original: str, salt: int = 0) -> str:
    data = original if salt == 0 else f"{original}\0{salt}"
    # surrogatepass: a lone surrogate from a hostile JSON string still hashes.
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_DIGITS]


def _with_hash(original: str, salt: int = 0) -> str:
    keep = TOOL_NAME_MAX - _HASH_DIGITS - 1
    return f"{sanitize(original)[:keep]}_{_digest(original, salt)}"


def sanitize_tool_name(name: str) -> str:
    """*name* as a provider-safe tool name (rules 1 and 2 of the module docs)."""
    if is_valid_tool_name(name):
        return name
    cleaned = sanitize(name)
    if not cleaned:
        return "_"
    if len(cleaned) > TOOL_NAME_MAX:
        return _with_hash(name)
    return cleaned


def unique_tool_names(names: Iterable[str]) -> dict[str, str]:
    """Map each distinct original in *names* to a distinct provider-safe tool name.

    Deterministic: the result depends only on the set of names, never on their order
    (rule 3 of the module docs).
    """
    originals = sorted(set(names))
    base = {o: sanitize_tool_name(o) for o in originals}
    shared = Counter(base.values())
    out = {o: o for o in originals if base[o] == o}  # valid names keep themselves
    taken = set(out.values())
    for original in originals:
        if original in out:
            continue
        candidate = base[original] if shared[base[original]] == 1 else _with_hash(original)
        salt = 0
        while candidate in taken:
            salt += 1
            candidate = _with_hash(original, salt)
        out[original] = candidate
        taken.add(candidate)
    return out
