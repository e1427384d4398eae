"""The one cattrs converter for wire types (no trio import: pure data).

Wire classes are frozen attrs classes with snake_case fields; on the wire their keys
are camelCase and ``None`` fields are left out. Every wire type in the package goes
through :data:`wire` so the rule lives in exactly one place; user data goes through
:data:`payloads`, which keeps names as they are.

Both converters are *strict* about JSON kinds: cattrs' defaults would call ``bool()``,
``int()``, ``float()`` and ``str()`` on whatever arrived, so ``"false"`` became
``True`` and ``1.9`` became ``1``. Here a ``bool`` field takes only ``true``/``false``,
an ``int`` field only an integer (``2.0`` counts, as in JSON Schema; ``true`` does not),
a ``float`` field only a number, a ``str`` field only a string, an enum or
``Literal`` only one of its values of the same kind (``true`` is not ``1``), a list
only an array (a string is not a list of characters) and a mapping only an object.
"""

from __future__ import annotations

import enum
import math
import re
import reprlib
import sys
import types
import typing
from typing import Any, Literal, TypeVar, Union

import attrs
import cattrs
from cattrs.cols import is_mapping, is_sequence, list_structure_factory, mapping_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.json import JsonConverter, make_converter

T = TypeVar("T")

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40
_short.maxlevel = 2  # a hostile value may nest deeply: never recurse far to describe it


class StrictTypeError(ValueError):
    """A value of the wrong JSON kind for its field (``"false"`` for a boolean, ...)."""


def _got(value: object) -> str:
    return f"got {type(value).__name__} {_short.repr(value)}"


def _structure_bool(value: Any, _: type[Any]) -> bool:
    if value is True or value is False:
        return value
    raise StrictTypeError(f"expected a boolean (true or false), {_got(value)}")


def _structure_int(value: Any, cls: type[Any]) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)  # JSON has one number type: 2.0 is the integer 2
    else:
        raise StrictTypeError(f"expected an integer, {_got(value)}")
    if cls is int:
        return number
    return _enum_member(cls, number) if issubclass(cls, enum.Enum) else cls(number)


def _structure_float(value: Any, cls: type[Any]) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if cls is float else cls(value)
    raise StrictTypeError(f"expected a number, {_got(value)}")


def _structure_str(value: Any, cls: type[Any]) -> Any:
    if isinstance(value, str):
        return value if cls is str else cls(value)  # StrEnum and other str subclasses
    raise StrictTypeError(f"expected a string, {_got(value)}")


def _same_kind(a: object, b: object) -> bool:
    # == says True == 1 and 1 == 1.0; JSON says a boolean is not a number.
    return isinstance(a, bool) is isinstance(b, bool) and isinstance(a, str) is isinstance(b, str)


def _enum_member(cls: type[enum.Enum], value: Any) -> Any:
    for member in cls:
        if _same_kind(member.value, value) and member.value == value:
            return member
    allowed = ", ".join(_short.repr(m.value) for m in cls)
    raise StrictTypeError(f"expected one of {allowed}, {_got(value)}")


def _structure_enum(value: Any, cls: type[enum.Enum]) -> Any:
    return _enum_member(cls, value)


def _is_plain_literal(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal and not any(
        isinstance(arg, enum.Enum) for arg in typing.get_args(tp)
    )


def _structure_literal(value: Any, tp: Any) -> Any:
    for allowed in typing.get_args(tp):
        if _same_kind(allowed, value) and allowed == value:
            return allowed
    choices = ", ".join(_short.repr(a) for a in typing.get_args(tp))
    raise StrictTypeError(f"expected one of {choices}, {_got(value)}")


_SCALARS = (str, int, float, bool, type(None))


def _is_scalar_union(tp: Any) -> bool:
    # cattrs' own union hook lets True through for ``int | str`` (bool subclasses int).
    return typing.get_origin(tp) in (Union, types.UnionType) and any(
        arg in _SCALARS[:4] or _is_plain_literal(arg) for arg in typing.get_args(tp)
    )


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if _is_plain_literal(tp):
        return " or ".join(_short.repr(v) for v in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _scalar_union_hook(tp: Any, converter: JsonConverter) -> Any:
    args = typing.get_args(tp)
    scalars = frozenset(a for a in args if a in _SCALARS)
    literals = [v for a in args if _is_plain_literal(a) for v in typing.get_args(a)]
    others = [a for a in args if a not in scalars and not _is_plain_literal(a)]
    rest: Any = None
    if others:
        rest = others[0] if len(others) == 1 else Union[tuple(others)]  # noqa: UP007
    names = " or ".join(_type_name(a) for a in args)

    def structure(value: Any, _: Any) -> Any:
        kind = type(value)
        if kind in scalars:
            return value
        for allowed in literals:
            if _same_kind(allowed, value) and allowed == value:
                return allowed
        if kind is int and float in scalars:
            return float(value)
        if kind is float and int in scalars and math.isfinite(value) and value.is_integer():
            return int(value)
        if rest is not None:
            return converter.structure(value, rest)
        raise StrictTypeError(f"expected {names}, {_got(value)}")

    return structure


def _is_list_like(tp: Any) -> bool:
    # Tuples have their own hooks (fixed tuples are schema-checked); lists and sequences here.
    return is_sequence(tp) and tp is not tuple and typing.get_origin(tp) is not tuple


def _is_plain_mapping(tp: Any) -> bool:
    # A TypedDict is a mapping too, but cattrs' own hook builds it key by key.
    return is_mapping(tp) and not typing.is_typeddict(tp)


def _kind_checked(inner: Any, kinds: tuple[type, ...], expected: str) -> Any:
    def structure(value: Any, tp: Any) -> Any:
        # cattrs would iterate a string into characters or a dict into its keys.
        if not isinstance(value, kinds):
            raise StrictTypeError(f"expected {expected}, {_got(value)}")
        return inner(value, tp)

    return structure


def _structure_pydantic(value: Any, model: Any) -> Any:
    try:
        return model.model_validate(value)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        errors = getattr(exc, "errors", None)
        if errors is None:
            raise
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}".lstrip(": ")
            for e in errors()
        ]
        raise StrictTypeError("; ".join(parts)) from None


def _unstructure_pydantic(value: Any) -> Any:
    return value.model_dump(mode="json")


def is_pydantic_model(tp: Any) -> bool:
    """Whether *tp* is a pydantic model class.

    Never imports pydantic: a model class can only exist once its user has imported it.
    """
    module = sys.modules.get("pydantic")
    return module is not None and isinstance(tp, type) and issubclass(tp, module.BaseModel)


def make_strict(converter: JsonConverter) -> JsonConverter:
    """Register the strict scalar, union, enum and ``Literal`` hooks on *converter*."""
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook(enum.Enum, _structure_enum)
    converter.register_structure_hook_func(_is_plain_literal, _structure_literal)
    converter.register_structure_hook_factory(
        _is_scalar_union, lambda tp: _scalar_union_hook(tp, converter)
    )
    converter.register_structure_hook_factory(
        _is_list_like,
        lambda tp: _kind_checked(list_structure_factory(tp, converter), (list, tuple), "an array"),
    )
    converter.register_structure_hook_factory(
        _is_plain_mapping,
        lambda tp: _kind_checked(mapping_structure_factory(tp, converter), (dict,), "an object"),
    )
    return converter


def make_wire_converter(*, strict: bool = False) -> JsonConverter:
    """Build a converter: camelCase keys, ``None`` omitted, extra keys allowed unless *strict*.

    Value kinds are always strict (see the module docs); *strict* is about extra keys.
    """
    converter = make_strict(make_converter(omit_if_default=True, forbid_extra_keys=strict))

    def renames(cls: type[Any]) -> dict[str, Any]:
        return {a.name: override(rename=camel(a.name)) for a in attrs.fields(cls)}

    def unstructure_factory(cls: type[Any]) -> Any:
        # cattrs does not read the converter's omit setting here: pass it explicitly.
        return make_dict_unstructure_fn(
            cls, converter, _cattrs_omit_if_default=True, **renames(cls)
        )

    def structure_factory(cls: type[Any]) -> Any:
        return make_dict_structure_fn(cls, converter, **renames(cls))

    converter.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    converter.register_structure_hook_factory(attrs.has, structure_factory)
    return converter


def camel(name: str) -> str:
    """``expires_at`` -> ``expiresAt``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _format_leaf(exc: BaseException, tp: Any) -> str:
    if isinstance(exc, StrictTypeError):
        return str(exc)
    if type(exc) is ValueError and str(exc):
        return str(exc)  # a class's own check (__post_init__, an attrs validator) says why
    if isinstance(exc, KeyError):
        return "required field missing"
    return cattrs.v.format_exception(exc, tp)


_PATH_NAME = re.compile(r"(?<=\.)[A-Za-z0-9_]+")


def _camel_path(line: str) -> str:
    head, at, path = line.rpartition(" @ ")
    return f"{head}{at}{_PATH_NAME.sub(lambda m: camel(m[0]), path)}" if at else line


def describe_structure_error(
    exc: BaseException, *, camel_paths: bool = False, root: str | None = None
) -> str:
    """One line for a cattrs failure: each problem with its path (``... @ $.ok``).

    cattrs names attributes; *camel_paths* turns them into wire keys (``$.expiresAt``).
    *root* is the path of the structured value (``$.where`` for a tool's parameter
    ``where``); a failure of the value itself is then said to be there too.
    """
    if not isinstance(exc, cattrs.BaseValidationError):
        leaf = _format_leaf(exc, None)
        return leaf if root is None else f"{leaf} @ {root}"
    lines = cattrs.transform_error(exc, path=root or "$", format_exception=_format_leaf)
    if camel_paths:
        lines = [_camel_path(line) for line in lines]
    return "; ".join(lines)


def structure_strictly(converter: JsonConverter, data: Any, cls: type[T]) -> T:
    """``converter.structure(data, cls)``, any failure a :class:`ValueError` that says why."""
    if not isinstance(data, dict):
        raise ValueError(f"invalid {cls.__name__}: expected a JSON object, {_got(data)}")
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        why = describe_structure_error(exc, camel_paths=converter is wire)
        raise ValueError(f"invalid {cls.__name__}: {why}") from exc


wire: JsonConverter = make_wire_converter()
"""The shared converter for protocol types: extra keys allowed (newer peers may add
fields), value kinds strict."""

payloads: JsonConverter = make_strict(make_converter())
# pydantic models inside user data are pydantic's to check and build (model_validate,
# model_dump): nested in a list, a dataclass or a tool parameter alike.
payloads.register_structure_hook_func(is_pydantic_model, _structure_pydantic)
payloads.register_unstructure_hook_func(is_pydantic_model, _unstructure_pydantic)
"""The converter for *user* data: tool arguments and results, action inputs and outputs,
sample and elicit answers (value kinds strict, as for :data:`wire`).

Unlike :data:`wire` it keeps attribute names as they are, because the JSON Schemas
derived from attrs classes and dataclasses (:func:`toolnexus_trio._schema.schema_for_type`)
use the attribute names too: what the schema promises is what cattrs reads and writes.
"""
