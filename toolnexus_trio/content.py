"""Multimodal content parts (SPEC §1B, §8A), as the contract's ``content`` module.

The part type and its constructors (also exported from :mod:`toolnexus_trio`), the
wire form (:func:`to_dict`, :func:`from_dict`), the provider block of a part for a model
style (:func:`encode_part`), the size cap and the summaries that never carry bytes.
"""

from ._content import EXTENSIONS as EXTENSIONS
from ._content import ContentPart as ContentPart
from ._content import ContentPartError as ContentPartError
from ._content import UnsupportedPartError as UnsupportedPartError
from ._content import audio as audio
from ._content import describe_part as describe_part
from ._content import describe_parts as describe_parts
from ._content import estimate_tokens as estimate_tokens
from ._content import file as file
from ._content import from_dict as from_dict
from ._content import get_max_part_bytes as get_max_part_bytes
from ._content import image as image
from ._content import load_part as load_part
from ._content import part as part
from ._content import set_max_part_bytes as set_max_part_bytes
from ._content import summarize as summarize
from ._content import text as text
from ._content import to_dict as to_dict
from .models._parts import encode_part as encode_part

__all__ = [
    "EXTENSIONS",
    "ContentPart",
    "ContentPartError",
    "UnsupportedPartError",
    "audio",
    "describe_part",
    "describe_parts",
    "encode_part",
    "estimate_tokens",
    "file",
    "from_dict",
    "get_max_part_bytes",
    "image",
    "load_part",
    "part",
    "set_max_part_bytes",
    "summarize",
    "text",
    "to_dict",
]
