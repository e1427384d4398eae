"""Multimodal content parts (SPEC §1B): :class:`ContentPart` and its edge constructors.

A part is flat wire data: ``type`` (an open word: ``text``, ``image``, ``file``,
``audio``), ``text`` for a text part, else ``mimeType`` and exactly one of ``data``
(standard padded base64, no line breaks) or ``url``, and an optional ``name``. Its wire
keys are camelCase (``mimeType``) through the one converter.

The constructors read their source once, at construction: a path, a binary file object
or bytes become base64 there and the part keeps no path and no handle, so a transcript
saved to a store never holds one. Reading a file is blocking I/O: in async code use
:func:`load_part` (it reads in a worker thread) or call a constructor through
``trio.to_thread.run_sync``. The MIME type comes from the caller or from a fixed
extension table, never from sniffing the bytes. The provider block shapes live with
the model styles (``models/_parts.py``), the MCP mapping in ``mcp/``.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import posixpath
import threading
from collections.abc import Mapping
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

import attrs
import trio

from ._converter import structure_strictly, wire

EXTENSIONS: Mapping[str, str] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
}
"""The fixed extension table (SPEC §1B): a file's MIME type when none is given."""

MEDIA_TYPES = ("image", "file", "audio")


class ContentPartError(ValueError):
    """A content part that cannot be made: bad source, unknown extension, too large."""


class UnsupportedPartError(ValueError):
    """A part a model style has no block shape for (audio to Anthropic, a URL file to
    OpenAI). ``part_type``, ``mime_type`` and ``style`` say which."""

    def __init__(self, part_type: str, mime_type: str | None, style: str) -> None:
        super().__init__(f'no "{style}" block shape for a {part_type} part ({mime_type})')
        self.part_type = part_type
        self.mime_type = mime_type
        self.style = style


# The process-wide cap on a part's decoded bytes; None is no cap. A lock, because the
# constructors run in worker threads too.
_cap_lock = threading.Lock()
_max_part_bytes: int | None = None


def set_max_part_bytes(limit: int | None) -> None:
    """Set the process-wide cap on a part's decoded bytes (``None``: no cap)."""
    global _max_part_bytes
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"max_part_bytes must be an int >= 0 or None, not {limit!r}")
    with _cap_lock:
        _max_part_bytes = limit


def get_max_part_bytes() -> int | None:
    """The process-wide cap set by :func:`set_max_part_bytes` (``None``: no cap)."""
    with _cap_lock:
        return _max_part_bytes


def decoded_size(data: str) -> int:
    """How many bytes the padded base64 *data* decodes to (computed, not decoded)."""
    if not data:
        return 0
    return len(data) // 4 * 3 - data[-2:].count("=")


def oversize_message(size: int, limit: int) -> str:
    """The contract's message for a part over the cap."""
    return f"content part is {size} decoded bytes, over the maxPartBytes limit of {limit}"


def check_size(size: int, limit: int | None) -> None:
    """Raise :class:`ContentPartError` when *size* decoded bytes exceed *limit* (or,
    when *limit* is ``None``, the process-wide cap)."""
    cap = get_max_part_bytes() if limit is None else limit
    if cap is not None and size > cap:
        raise ContentPartError(oversize_message(size, cap))


@attrs.frozen(kw_only=True)
class ContentPart:
    """One content part (SPEC §1B); build it with :func:`text`, :func:`image`,
    :func:`file`, :func:`audio` or :func:`part`.

    A text part has ``text``; any other has ``mime_type`` and exactly one of ``data``
    (base64) or ``url``. ``name`` is a display name (a file's basename), never a path.
    """

    type: str
    text: str | None = None
    mime_type: str | None = None
    data: str | None = None
    url: str | None = None
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise ContentPartError("a content part needs a type")
        for key in ("text", "mime_type", "data", "url", "name"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise ContentPartError(f"a part's {key} must be a str, not {type(value).__name__}")
        if self.type == "text":
            if not isinstance(self.text, str):
                raise ContentPartError("a text part needs text")
            return
        if self.data is not None and self.url is not None:
            raise ContentPartError(f"a {self.type} part has both data and url: give one")
        if self.data is None and self.url is None:
            raise ContentPartError(f"a {self.type} part needs data or url")
        if not self.mime_type:
            raise ContentPartError(f"a {self.type} part needs a mimeType")

    @property
    def size(self) -> int:
        """Decoded bytes of ``data`` (0 for a URL part; UTF-8 bytes for a text part)."""
        if self.text is not None:
            return len(self.text.encode())
        return decoded_size(self.data) if self.data is not None else 0

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, only those set, all strings."""
        out: dict[str, Any] = wire.unstructure(self)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContentPart:
        """A part from its wire form; a wrong shape is a :class:`ContentPartError`."""
        return from_dict(data)


def to_dict(p: ContentPart) -> dict[str, Any]:
    """``p.to_dict()``: ``{type, text | mimeType, data | url, name}``, keys that are set."""
    return p.to_dict()


def from_dict(data: Mapping[str, Any]) -> ContentPart:
    """A part from its wire form; a wrong shape is a :class:`ContentPartError`."""
    try:
        p = structure_strictly(wire, dict(data), ContentPart)
    except ContentPartError:
        raise
    except (ValueError, TypeError) as exc:
        raise ContentPartError(f"not a content part: {exc}") from exc
    if p.data is not None:
        check_base64(p.data)
    return p


def view(block: Mapping[str, Any]) -> ContentPart:
    """A part from a transcript block already checked once (:func:`is_part_dict` true):
    its shape is checked again, its base64 is not decoded again."""
    try:
        return ContentPart(
            type=block["type"],
            mime_type=block.get("mimeType"),
            data=block.get("data"),
            url=block.get("url"),
            name=block.get("name"),
        )
    except TypeError as exc:
        raise ContentPartError(f"not a content part: {exc}") from exc


def is_part_dict(value: object) -> bool:
    """Whether *value* looks like a part's wire form of a media type (has ``mimeType``)."""
    return (
        isinstance(value, Mapping)
        and value.get("type") in MEDIA_TYPES
        and isinstance(value.get("mimeType"), str)
        and ("data" in value or "url" in value)
    )


def text(value: str) -> ContentPart:
    """A text part."""
    if not isinstance(value, str):
        raise ContentPartError(f"text() takes a str, not {type(value).__name__}")
    return ContentPart(type="text", text=value)


def part(
    type: str,
    *,
    mime_type: str | None = None,
    data: str | None = None,
    url: str | None = None,
    name: str | None = None,
    text: str | None = None,
    max_part_bytes: int | None = None,
    **wire_keys: str | None,
) -> ContentPart:
    """A part from its fields (the wire's ``mimeType`` is accepted as a keyword too).

    Both ``data`` and ``url``, or neither, is a :class:`ContentPartError`; ``data`` must
    be standard base64 and is held to the size cap.
    """
    extra = set(wire_keys) - {"mimeType"}
    if extra:
        raise ContentPartError(f"part() got unknown keys: {sorted(extra)}")
    mime_type = mime_type or wire_keys.get("mimeType")
    if type != "text":
        if data is not None and url is not None:
            raise ContentPartError(f"a {type} part has both data and url: give one")
        if data is not None:
            check_base64(data)
            check_size(decoded_size(data), max_part_bytes)
    return ContentPart(type=type, text=text, mime_type=mime_type, data=data, url=url, name=name)


Source = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO


def image(
    source: Source, mime_type: str | None = None, max_part_bytes: int | None = None
) -> ContentPart:
    """An image part from a path, ``data:``/``https:`` URL, bytes or binary file object."""
    return _media("image", source, mime_type, max_part_bytes)


def file(
    source: Source, mime_type: str | None = None, max_part_bytes: int | None = None
) -> ContentPart:
    """A file part (a PDF, say), from the same sources as :func:`image`."""
    return _media("file", source, mime_type, max_part_bytes)


def audio(
    source: Source, mime_type: str | None = None, max_part_bytes: int | None = None
) -> ContentPart:
    """An audio part (mp3, wav), from the same sources as :func:`image`."""
    return _media("audio", source, mime_type, max_part_bytes)


async def load_part(
    type: str, source: Source, mime_type: str | None = None, max_part_bytes: int | None = None
) -> ContentPart:
    """:func:`image`/:func:`file`/:func:`audio` (by *type*) with the file read in a
    worker thread, so the event loop never blocks on the disk. Cancellable: a cancel
    abandons the read (the thread finishes on its own) and raises ``Cancelled``."""
    return await trio.to_thread.run_sync(
        lambda: _media(type, source, mime_type, max_part_bytes), abandon_on_cancel=True
    )


def summarize(p: ContentPart) -> dict[str, Any]:
    """``{"type", "mimeType", "bytes"}``: what a part is, never its bytes."""
    mime = "text/plain" if p.type == "text" else p.mime_type
    return {"type": p.type, "mimeType": mime, "bytes": p.size}


def describe_part(p: ContentPart) -> str:
    """The canonical one-line form: ``image (image/png, 82 bytes)``."""
    mime = "text/plain" if p.type == "text" else p.mime_type
    return f"{p.type} ({mime}, {p.size} bytes)"


def describe_parts(parts: tuple[ContentPart, ...] | list[ContentPart]) -> str:
    """:func:`describe_part` of each, joined with ``", "``."""
    return ", ".join(describe_part(p) for p in parts)


def estimate_tokens(p: ContentPart) -> int:
    """A rough token count, from the bytes: text ``len/4`` (at least 1); media
    ``max(85, bytes // 750)``, whatever the MIME type."""
    if p.type == "text":
        return max(1, len(p.text or "") // 4)
    return max(85, p.size // 750)


def placeholder(p: ContentPart) -> str:
    """The text a part degrades to when it cannot be sent."""
    return f"[unsupported {p.type} part ({p.mime_type}, {p.size} bytes)]"


# -- reading sources ------------------------------------------------------------


def check_base64(data: str) -> None:
    """Raise :class:`ContentPartError` unless *data* is standard padded base64."""
    if not isinstance(data, str):
        raise ContentPartError(f"part data must be a base64 str, not {type(data).__name__}")
    try:
        binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise ContentPartError(f"part data is not standard padded base64: {exc}") from exc


def _mime_for(name: str, mime_type: str | None) -> str:
    if mime_type:
        return mime_type
    ext = posixpath.splitext(name)[1].lower()
    found = EXTENSIONS.get(ext)
    if found is None:
        shown = ext or name[-20:]
        raise ContentPartError(f'unknown file extension "{shown}" - pass an explicit mime_type')
    return found


def _media(
    kind: str, source: Source, mime_type: str | None, max_part_bytes: int | None
) -> ContentPart:
    limit = get_max_part_bytes() if max_part_bytes is None else max_part_bytes
    if isinstance(source, str) and source.startswith("data:"):
        return _from_data_url(kind, source, mime_type, limit)
    if isinstance(source, str) and "://" in source[:10]:
        if not source.lower().startswith("https://"):
            raise ContentPartError(f"only https URLs are kept as URLs, not {source[:40]!r}")
        path = unquote(urlsplit(source).path)
        mime = _mime_for(posixpath.basename(path) or path, mime_type)
        return ContentPart(type=kind, mime_type=mime, url=source, name=None)
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise ContentPartError("a path must be a str or str-based os.PathLike")
        name = os.path.basename(path)
        mime = _mime_for(name, mime_type)
        raw = _read_path(path, limit)
        return _encoded(kind, raw, mime, name, limit)
    if isinstance(source, bytes | bytearray | memoryview):
        if not mime_type:
            raise ContentPartError(f"{kind}() of bytes: mime_type is required")
        return _encoded(kind, bytes(source), mime_type, None, limit)
    anything: object = source  # a caller may pass what the annotation does not allow
    if isinstance(anything, io.TextIOBase):
        raise ContentPartError(f"{kind}() needs a file opened in binary mode ('rb')")
    read = getattr(source, "read", None)
    if callable(read):
        handle_name = getattr(source, "name", None)
        base = os.path.basename(handle_name) if isinstance(handle_name, str) else None
        if not mime_type and base is None:
            raise ContentPartError(
                f"{kind}() of a file object without a name: mime_type is required"
            )
        mime = _mime_for(base or "", mime_type)
        # Read at most one byte past the cap: a huge stream is refused, not slurped.
        raw = read(-1 if limit is None else limit + 1)
        if isinstance(raw, str):
            raise ContentPartError(f"{kind}() needs a file opened in binary mode ('rb')")
        if not isinstance(raw, bytes | bytearray):
            raise ContentPartError(f"{kind}(): read() gave {type(raw).__name__}, not bytes")
        if limit is not None and len(raw) > limit:
            # The true size is unknown past the cap; say what was seen.
            raise ContentPartError(oversize_message(_size_of(source, len(raw)), limit))
        return _encoded(kind, bytes(raw), mime, base, limit)
    raise ContentPartError(f"{kind}() cannot read a {type(source).__name__}")


def _size_of(handle: Any, seen: int) -> int:
    try:
        return int(os.fstat(handle.fileno()).st_size)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return seen


def _read_path(path: str, limit: int | None) -> bytes:
    try:
        with open(path, "rb") as handle:
            if limit is not None:
                size = os.fstat(handle.fileno()).st_size
                if size > limit:
                    raise ContentPartError(oversize_message(size, limit))
                raw = handle.read(limit + 1)
                if len(raw) > limit:  # grew since the stat
                    raise ContentPartError(oversize_message(len(raw), limit))
                return raw
            return handle.read()
    except OSError as exc:
        raise ContentPartError(f"cannot read {path!r}: {exc.strerror or exc}") from exc


def _encoded(kind: str, raw: bytes, mime: str, name: str | None, limit: int | None) -> ContentPart:
    if limit is not None and len(raw) > limit:
        raise ContentPartError(oversize_message(len(raw), limit))
    data = base64.b64encode(raw).decode("ascii")
    return ContentPart(type=kind, mime_type=mime, data=data, name=name)


def _from_data_url(kind: str, url: str, mime_type: str | None, limit: int | None) -> ContentPart:
    header, sep, payload = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        raise ContentPartError("a data: URL must be data:<mime>;base64,<data>")
    mime = mime_type or header[: -len(";base64")] or None
    if not mime:
        raise ContentPartError("a data: URL without a MIME type: mime_type is required")
    check_base64(payload)
    size = decoded_size(payload)
    if limit is not None and size > limit:
        raise ContentPartError(oversize_message(size, limit))
    return ContentPart(type=kind, mime_type=mime, data=payload)
