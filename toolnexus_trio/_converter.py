"""The one cattrs converter for wire types (no trio import: pure data).

Wire classes are frozen attrs classes with snake_case fields; on the wire their keys
are camelCase and ``None`` fields are left out. Every wire type in the package goes
through :data:`wire` so the rule lives in exactly one place; user data goes through
:data:`payloads`, which keeps names as they are.
"""

from __future__ import annotations

from typing import Any

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.json import JsonConverter, make_converter


def camel(name: str) -> str:
    """``expires_at`` -> ``expiresAt``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def make_wire_converter(*, strict: bool = False) -> JsonConverter:
    """Build a converter: camelCase keys, ``None`` omitted, extra keys allowed unless *strict*."""
    converter = make_converter(omit_if_default=True, forbid_extra_keys=strict)

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


wire: JsonConverter = make_wire_converter()
"""The shared converter for protocol types (lenient on inbound traffic)."""

payloads: JsonConverter = make_converter()
"""The converter for *user* data: tool arguments and results, action inputs and outputs,
sample and elicit answers.

Unlike :data:`wire` it keeps attribute names as they are, because the JSON Schemas
derived from attrs classes (:func:`toolnexus_trio._schema.schema_for_attrs`) use the
attribute names too: what the schema promises is what cattrs reads and writes.
"""
