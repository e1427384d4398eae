"""JSON Schema: compiled once, remote ``$ref`` refused, clear issues; schemas from types.

Every schema in the package (tool input schemas, Tesseron action inputs, sample and
elicit answers) goes through :func:`compile_schema`. Compiled validators are cached
by the schema's canonical JSON text, so a schema used by many tools or invocations is
compiled exactly once and nothing is compiled on a hot path.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Union

import attrs
import fastjsonschema

from ._converter import is_pydantic_model

JSONSchema = dict[str, Any]
"""A JSON Schema document (draft-07 subset)."""

# Keywords from drafts after 07 that fastjsonschema would silently ignore.
_UNSUPPORTED_KEYWORDS = frozenset(
    {
        "unevaluatedProperties",
        "unevaluatedItems",
        "prefixItems",
        "dependentSchemas",
        "dependentRequired",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
    }
)


MAX_JSON_DEPTH: Final = 128
"""How deeply JSON values from a model (tool-call arguments) may nest.

Python's ``json`` module, cattrs and recursive schemas recurse once per level, so a
value nested ~1,000 deep would raise :class:`RecursionError` wherever it went next.
128 is far beyond any real argument (and serde_json's default limit too).
"""


def nested_too_deeply(value: Any, limit: int = MAX_JSON_DEPTH, text: str | None = None) -> bool:
    """Whether JSON data *value* nests objects/arrays more than *limit* levels deep.

    Iterative, so any depth is safe to ask about. *text*, the value's JSON text when at
    hand, lets most values skip the walk: nesting N deep needs N opening brackets.
    """
    if text is not None and text.count("[") + text.count("{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class SchemaError(ValueError):
    """A schema that cannot be used: malformed, remote ``$ref``, or unsupported keywords."""


@attrs.frozen
class SchemaIssue:
    """One reason a value does not match a schema."""

    message: str
    """Human-readable, with the JSON path (``$.a must be bigger than ...``)."""
    path: tuple[str | int, ...]
    """Path from the root of the value, e.g. ``("a", 0)``."""
    rule: str
    """The schema keyword that failed, e.g. ``"minimum"`` or ``"required"``."""

    @property
    def location(self) -> str:
        """The path as ``$.a[0]``."""
        return _format_path(self.path)

    def to_json(self) -> dict[str, Any]:
        """``{"message", "path", "rule"}`` for wire error data."""
        return {"message": self.message, "path": list(self.path), "rule": self.rule}


def _format_path(path: Sequence[str | int]) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _refuse_remote(uri: str) -> Any:
    raise SchemaError(f"remote $ref refused: {uri}")


_REFUSING_HANDLERS: Mapping[str, Callable[[str], Any]] = dict.fromkeys(
    ("http", "https", "file", "ftp", "urn", "data"), _refuse_remote
)


def _check_definition(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and not value.startswith("#"):
                raise SchemaError(f"remote $ref refused: {value}")
            if key in _UNSUPPORTED_KEYWORDS:
                raise SchemaError(f"unsupported JSON Schema keyword (draft-07 subset): {key}")
            _check_definition(value)
    elif isinstance(node, list):
        for item in node:
            _check_definition(item)


class Validator:
    """A compiled schema. Create with :func:`compile_schema`."""

    __slots__ = ("_check", "schema")

    def __init__(self, schema: JSONSchema, check: Callable[[Any], Any]) -> None:
        self.schema = schema
        self._check = check

    def issues(self, value: Any) -> list[SchemaIssue]:
        """Every failure of *value* (empty when valid)."""
        try:
            self._check(value)
        except fastjsonschema.JsonSchemaValuesException as exc:
            return [_issue(e) for e in exc.errors]
        except fastjsonschema.JsonSchemaValueException as exc:
            return [_issue(exc)]
        except RecursionError:
            # A recursive schema ($ref to itself) walks the value once per level.
            return [_TOO_DEEP]
        return []


_TOO_DEEP = SchemaIssue(message="$ is nested too deeply to validate", path=(), rule="depth")


def _issue(exc: fastjsonschema.JsonSchemaValueException) -> SchemaIssue:
    raw_path = list(exc.path or [])[1:]  # drop the leading "data"
    path: tuple[str | int, ...] = tuple(
        int(p) if isinstance(p, str) and p.isdigit() else p for p in raw_path
    )
    message = exc.message
    name = exc.name or "data"
    if message.startswith(name):
        message = _format_path(path) + message[len(name) :]
    return SchemaIssue(message=message, path=path, rule=str(exc.rule or "schema"))


@functools.lru_cache(maxsize=2048)
def _compile_canonical(text: str) -> Validator:
    schema = json.loads(text)
    _check_definition(schema)
    try:
        check = fastjsonschema.compile(
            schema, handlers=_REFUSING_HANDLERS, use_default=False, fast_fail=False
        )
    except SchemaError:
        raise
    except Exception as exc:  # definition errors, bad regexes, wrong types inside the schema
        raise SchemaError(f"invalid JSON Schema: {exc}") from exc
    return Validator(schema, check)


def compile_schema(schema: Mapping[str, Any] | None) -> Validator:
    """Compile *schema* (``None`` means :func:`empty_schema`), reusing an earlier compile."""
    if schema is None:
        schema = empty_schema()
    if not isinstance(schema, Mapping):
        raise SchemaError(f"a JSON Schema must be an object, not {type(schema).__name__}")
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"a JSON Schema must be JSON data: {exc}") from exc
    except RecursionError:
        raise SchemaError("a JSON Schema nested too deeply") from None
    try:
        return _compile_canonical(text)
    except RecursionError:
        raise SchemaError("a JSON Schema nested too deeply") from None


def empty_schema() -> JSONSchema:
    """The schema of a tool without parameters: ``{"type": "object", "properties": {}}``."""
    return {"type": "object", "properties": {}}


# ---------------------------------------------------------------------------
# Schemas derived from Python types
# ---------------------------------------------------------------------------

_PRIMITIVES: dict[Any, JSONSchema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


_BARE_TYPING_TUPLE: Any = typing.Tuple  # noqa: UP006 - unparameterized, it means any tuple


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            inner = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
            return True, inner
    return False, tp


def schema_for_type(tp: Any) -> JSONSchema:
    """A JSON Schema for *tp*: primitives, ``list``, ``tuple``, ``dict``, ``Optional``,
    ``Literal``, enums, attrs classes, dataclasses, ``TypedDict`` and (when pydantic is
    in use) pydantic models, nested in any of these.

    ``Optional[T]`` (``T | None``) accepts ``null`` as well as ``T``. A fixed tuple
    ``tuple[int, str]`` is an array of exactly those items (draft-07 ``items: [...]``);
    only ``tuple[X, ...]`` is an array of any length. ``Annotated[T, "text"]`` is ``T``'s
    schema with the first ``str`` metadata as its ``description``. The ``$defs`` of
    pydantic models are gathered at the root. A type that cannot be described raises
    :class:`TypeError` saying which one and where it sits.
    """
    deriver = SchemaDeriver()
    schema = deriver.schema(tp)
    return deriver.rooted(schema)


_ANNOTATED_ORIGIN: Any = typing.Annotated
# TypedDict key qualifiers (ReadOnly is Python 3.13's): the schema is the inner type's.
_WRAPPERS: tuple[Any, ...] = tuple(
    w for w in (typing.Required, typing.NotRequired, getattr(typing, "ReadOnly", None)) if w
)


def annotated_description(tp: Any) -> str | None:
    """The first ``str`` metadata of ``Annotated[T, ...]``, or ``None``."""
    if typing.get_origin(tp) is _ANNOTATED_ORIGIN:
        for meta in tp.__metadata__:
            if isinstance(meta, str):
                return meta
    return None


def strip_annotated(tp: Any) -> Any:
    """*tp* without ``Annotated[...]``, ``Required[...]`` or ``NotRequired[...]`` around it."""
    while True:
        origin = typing.get_origin(tp)
        if origin is _ANNOTATED_ORIGIN:
            tp = tp.__origin__
        elif origin in _WRAPPERS:
            tp = typing.get_args(tp)[0]
        else:
            return tp


class SchemaDeriver:
    """Derives schemas from types, gathering pydantic ``$defs`` for one root document.

    One deriver serves every parameter of a tool, so that their ``$defs`` share the
    tool schema's root (where pydantic's ``#/$defs/...`` references point).
    """

    def __init__(self) -> None:
        self.defs: dict[str, JSONSchema] = {}
        self._open: list[Any] = []  # the classes being described: a path, and a loop guard

    def rooted(self, schema: JSONSchema) -> JSONSchema:
        """*schema* with the gathered ``$defs`` at its root."""
        return {**schema, "$defs": dict(self.defs)} if self.defs else schema

    def _cannot(self, tp: Any, why: str = "") -> TypeError:
        where = " -> ".join(getattr(c, "__qualname__", repr(c)) for c in self._open)
        detail = f" ({why})" if why else ""
        inside = f" inside {where}" if where else ""
        return TypeError(f"cannot derive a JSON Schema from {tp!r}{inside}{detail}")

    def schema(self, tp: Any) -> JSONSchema:
        """The schema of *tp* (see :func:`schema_for_type`)."""
        description = annotated_description(tp)
        tp = strip_annotated(tp)
        schema = self._schema(tp)
        if description is not None:
            schema = {**schema, "description": description}
        return schema

    def _schema(self, tp: Any) -> JSONSchema:
        if tp is Any or tp is object:
            return {}
        optional, inner = _is_optional(tp)
        if optional:
            # None is a value the caller may send: allow null next to the inner type.
            base = self.schema(inner)
            kind = base.get("type")
            if isinstance(kind, str) and set(base) <= {"type", "items", "additionalProperties"}:
                return {**base, "type": [kind, "null"]}
            return {"anyOf": [base, {"type": "null"}]}
        if tp in _PRIMITIVES:
            return dict(_PRIMITIVES[tp])
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is Literal:
            return {"enum": list(args)}
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.schema(a) for a in args]}
        if (
            origin is tuple
            and tp is not _BARE_TYPING_TUPLE
            and not (len(args) == 2 and args[1] is ...)
        ):
            return self._fixed_tuple(args)
        if tp in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, Sequence):
            if args:
                return {"type": "array", "items": self.schema(args[0])}
            return {"type": "array"}
        if tp is dict or origin in (dict, Mapping):
            if len(args) == 2 and args[1] is not Any:
                return {"type": "object", "additionalProperties": self.schema(args[1])}
            return {"type": "object"}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"enum": [m.value for m in tp]}
        if isinstance(tp, type) and (
            attrs.has(tp) or dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)
        ):
            return self._record(tp)
        if is_pydantic_model(tp):
            return self._pydantic(tp)
        raise self._cannot(tp)

    def _fixed_tuple(self, args: tuple[Any, ...]) -> JSONSchema:
        # ``tuple[int, str]``: one schema per position, exactly that many items. Draft-07
        # spells it ``items: [...]`` (``prefixItems`` is 2020-12, which we refuse).
        if args in ((), ((),)):  # tuple[()], the empty tuple (spelled both ways by typing)
            return {"type": "array", "maxItems": 0}
        return {
            "type": "array",
            "items": [self.schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
            "additionalItems": False,
        }

    def _record(self, cls: type[Any]) -> JSONSchema:
        """An object schema: one property per field; fields without a default required."""
        if cls in self._open:
            raise TypeError(
                f"cannot derive a JSON Schema from {cls!r}: it contains itself "
                "(describe it with an explicit input schema)"
            )
        self._open.append(cls)
        try:
            try:
                hints = typing.get_type_hints(cls, include_extras=True)
            except NameError as exc:
                raise self._cannot(cls, f"unresolved annotation: {exc}") from None
            properties: dict[str, JSONSchema] = {}
            required: list[str] = []
            for name, has_default in _record_fields(cls):
                properties[name] = self.schema(hints.get(name, Any))
                if not has_default:
                    required.append(name)
        finally:
            self._open.pop()
        schema: JSONSchema = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema

    def _pydantic(self, model: Any) -> JSONSchema:
        # The model's own schema (its public API); the definitions it refers to move to
        # the root, where its "#/$defs/..." references point.
        schema: JSONSchema = dict(model.model_json_schema())
        for name, definition in schema.pop("$defs", {}).items():
            if self.defs.setdefault(name, definition) != definition:
                raise self._cannot(model, f"two different models are both called {name!r}")
        return schema


def _record_fields(cls: type[Any]) -> list[tuple[str, bool]]:
    """``(name, has a default)`` for each field the class takes when built."""
    if attrs.has(cls):
        return [(f.name, f.default is not attrs.NOTHING) for f in attrs.fields(cls) if f.init]
    if dataclasses.is_dataclass(cls):
        missing = dataclasses.MISSING
        return [
            (f.name, f.default is not missing or f.default_factory is not missing)
            for f in dataclasses.fields(cls)
            if f.init
        ]
    # A TypedDict: its optional keys are those of total=False or NotRequired[...], as
    # Python records them (and cattrs reads them).
    optional: frozenset[str] = cls.__optional_keys__
    return [(name, name in optional) for name in typing.get_type_hints(cls)]
