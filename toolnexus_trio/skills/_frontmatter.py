"""``SKILL.md`` frontmatter: the ``---`` fence, YAML via PyYAML, and a line-wise fallback.

SPEC §3 asks for a standard YAML parser (folded ``>``, literal ``|``, quoting and
multi-line values all resolve) and for scalar values coerced to strings and trimmed.
Two choices here go past the SPEC's text:

- Implicit typing is off except ``null``: ``name: true`` is the string ``"true"``,
  ``007`` stays ``"007"``, a date stays as written. PyYAML's default would give
  ``"True"``, ``"7"`` and a reformatted date, which no other port produces.
- Frontmatter that is not valid YAML (most often ``description: Use when: ...``, a
  colon inside a plain scalar) is read line by line, as toolnexus 0.21 does: top-level
  ``name:`` / ``description:`` lines, values trimmed, one pair of matching quotes
  removed, values that start a YAML construct (``[ { > | * & ! % @ ```) ignored. Only
  when that finds no name is the skill skipped as ``malformed-frontmatter``.
- Any other failure of the parser skips the skill as ``malformed-frontmatter`` with the
  reason, whatever a line-wise reading would find: nesting too deep for PyYAML's
  recursive parser (about 500 brackets, 1 KB, raise ``RecursionError``), or a value
  its explicit tag cannot hold (``!!float abc``, ``!!timestamp 2001-13-14``, an
  ``!!int`` of 5,000 digits raise ``ValueError``). Such a document is not a YAML slip
  to guess around, and discovery must never fail on it (SPEC §3). :func:`parse`
  never raises.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import attrs

_NULL_TAG = "tag:yaml.org,2002:null"


@functools.cache
def _loader() -> Any:
    """A SafeLoader whose only implicit type is ``null``: other scalars stay strings.

    Made (and PyYAML imported, about 18 ms) when the first ``SKILL.md`` is parsed, not
    when the package is: most processes read none.
    """
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag == _NULL_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return _Loader


_FENCE = "---"
_FALLBACK_LINE = re.compile(r"(name|description)[ \t]*:(.*)")
_YAML_CONSTRUCT = tuple("[{>|*&!%@`")
_QUOTES = ("'", '"')


@attrs.frozen
class Frontmatter:
    """What a ``SKILL.md`` says: its name and description (trimmed) and its body.

    ``error`` is the YAML error (whitespace collapsed) when the frontmatter did not
    parse, whether or not the line-wise fallback found a name; after any other failure
    of the parser it is the reason and ``name`` is ``None`` (the skill is skipped).
    """

    name: str | None
    description: str | None
    body: str
    error: str | None = None


def split(text: str) -> tuple[str | None, str]:
    """``(frontmatter, body)``; ``(None, text)`` without a complete ``---`` fence.

    The opening fence is the first line; the closing one is the next line that is
    ``---`` (trailing blanks allowed). The body is everything after it.
    """
    first, sep, rest = text.partition("\n")
    if first.rstrip() != _FENCE or not sep:
        return None, text
    lines = rest.split("\n")
    for i, line in enumerate(lines):
        if line.rstrip() == _FENCE:
            return "\n".join(lines[:i]), "\n".join(lines[i + 1 :])
    return None, text


def _scalar(value: Any) -> str | None:
    """A YAML value as a trimmed string; ``None`` for null, mappings and sequences."""
    if isinstance(value, bool):  # only from an explicit !!bool tag
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value).strip()
    return None


def _fallback(frontmatter: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in frontmatter.split("\n"):
        match = _FALLBACK_LINE.fullmatch(line.rstrip())
        if match is None or match[1] in found:
            continue
        value = match[2].strip()
        if not value or value.startswith(_YAML_CONSTRUCT):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in _QUOTES:
            value = value[1:-1]
        found[match[1]] = value
    return found


def _one_line(text: str, width: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def parse(text: str) -> Frontmatter:
    """Parse a whole ``SKILL.md`` (newlines already normalized to ``\\n``); never raises."""
    raw, body = split(text)
    if raw is None:
        return Frontmatter(None, None, body)
    loader = _loader()
    import yaml  # imported by _loader already

    try:
        data = yaml.load(raw, Loader=loader)  # safe: the loader is a SafeLoader
    except yaml.YAMLError as exc:
        found = _fallback(raw)
        error = " ".join(str(exc).split())
        return Frontmatter(found.get("name"), found.get("description"), body, error)
    except RecursionError:
        return Frontmatter(None, None, body, "nested too deeply for the YAML parser")
    except Exception as exc:  # a tag's constructor failed: ValueError, OverflowError...
        error = _one_line(f"the YAML parser failed: {type(exc).__name__}: {exc}")
        return Frontmatter(None, None, body, error)
    if not isinstance(data, dict):
        return Frontmatter(None, None, body)
    return Frontmatter(_scalar(data.get("name")), _scalar(data.get("description")), body)
