"""Content parts on the model wire (SPEC §8A): one part type, a block shape per style.

The transcript keeps parts in their wire form (``{"type": "image", "mimeType", "data"}``)
inside a user message's content list; tool-derived parts are not in the transcript at
all but beside it (``GenerateRequest.parts``, by tool call id). Each request turns them
into the style's blocks here, as a new list that shares the base64 strings with the
transcript (Anthropic) or builds one ``data:`` URL per part (OpenAI), and is dropped
after the request: a part is held once by the run, whatever the number of turns.

A part the caller attached that the style cannot take, or one over the client's
``max_part_bytes``, is an error before any request is sent. A tool-derived one degrades
to a text block ``[unsupported <type> part (<mime>, <n> bytes)]`` unless the client says
``on_unsupported_part="error"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._content import (
    ContentPart,
    UnsupportedPartError,
    check_size,
    from_dict,
    is_part_dict,
    placeholder,
    view,
)
from ..loop._results import Message
from ._shape import note_call_names

ToolParts = Mapping[str, Sequence[ContentPart]]
"""Tool-derived parts by tool call id."""

_AUDIO_FORMATS = {"audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/wav": "wav", "audio/x-wav": "wav"}


def encode_part(part: ContentPart | Mapping[str, Any], style: str) -> dict[str, Any]:
    """The provider block of *part* for *style* (``"openai"``, ``"anthropic"``,
    ``"responses"`` or ``"gemini"``).

    Raises :class:`~toolnexus_trio.UnsupportedPartError` when the style has no shape
    for it: audio to Anthropic or Responses, a URL file or a non-mp3/wav audio to OpenAI.
    """
    p = part if isinstance(part, ContentPart) else from_dict(part)
    if style == "gemini":
        return _gemini(p)
    if style == "responses":
        return _responses(p)
    if p.type == "text":
        return {"type": "text", "text": p.text}
    if style == "openai":
        return _openai(p)
    if style == "anthropic":
        return _anthropic(p)
    raise UnsupportedPartError(p.type, p.mime_type, style)


def _data_url(p: ContentPart) -> str:
    return f"data:{p.mime_type};base64,{p.data}"


def _openai(p: ContentPart) -> dict[str, Any]:
    if p.type == "image":
        return {"type": "image_url", "image_url": {"url": p.url or _data_url(p)}}
    if p.type == "file" and p.data is not None:
        return {"type": "file", "file": {"filename": p.name or "file", "file_data": _data_url(p)}}
    if p.type == "audio" and p.data is not None and p.mime_type in _AUDIO_FORMATS:
        fmt = _AUDIO_FORMATS[p.mime_type]
        return {"type": "input_audio", "input_audio": {"data": p.data, "format": fmt}}
    raise UnsupportedPartError(p.type, p.mime_type, "openai")


def _anthropic(p: ContentPart) -> dict[str, Any]:
    kind = {"image": "image", "file": "document"}.get(p.type)
    if kind is None:
        raise UnsupportedPartError(p.type, p.mime_type, "anthropic")
    if p.url is not None:
        return {"type": kind, "source": {"type": "url", "url": p.url}}
    source = {"type": "base64", "media_type": p.mime_type, "data": p.data}
    return {"type": kind, "source": source}


def _responses(p: ContentPart) -> dict[str, Any]:
    if p.type == "text":
        return {"type": "input_text", "text": p.text}
    if p.type == "image":
        return {"type": "input_image", "image_url": p.url or _data_url(p)}
    if p.type == "file" and p.url is not None:
        return {"type": "input_file", "file_url": p.url}
    if p.type == "file":
        return {"type": "input_file", "filename": p.name or "file", "file_data": _data_url(p)}
    raise UnsupportedPartError(p.type, p.mime_type, "responses")


def _gemini(p: ContentPart) -> dict[str, Any]:
    """Gemini takes every media type, inline (base64) or by URI."""
    if p.type == "text":
        return {"text": p.text}
    if p.url is not None:
        return {"fileData": {"mimeType": p.mime_type, "fileUri": p.url}}
    return {"inlineData": {"mimeType": p.mime_type, "data": p.data}}


def text_block(text: str, style: str) -> dict[str, Any]:
    """A text block of *style*."""
    if style == "gemini":
        return {"text": text}
    return {"type": "input_text" if style == "responses" else "text", "text": text}


def tool_heading(name: str, call_id: str, style: str) -> dict[str, Any]:
    """The text block that introduces a tool's parts outside its own result."""
    return text_block(f"Output of tool {name} ({call_id}):", style)


def has_parts(content: object) -> bool:
    """Whether a message's content is a list holding a media part's wire form."""
    return isinstance(content, list) and any(is_part_dict(b) for b in content)


def user_blocks(content: list[Any], style: str, max_part_bytes: int | None) -> list[Any]:
    """A caller's content list with each media part as the style's block (errors raise)."""
    out: list[Any] = []
    for block in content:
        if is_part_dict(block):
            p = view(block)
            check_size(p.size, max_part_bytes)
            out.append(encode_part(p, style))
        else:
            out.append(block)
    return out


def tool_blocks(
    parts: Sequence[ContentPart], style: str, on_unsupported: str, max_part_bytes: int | None
) -> list[dict[str, Any]]:
    """Tool-derived parts as blocks; one the style cannot take degrades to its
    placeholder text, or raises when *on_unsupported* is ``"error"``."""
    out: list[dict[str, Any]] = []
    for p in parts:
        try:
            if p.type != "text":  # the cap is on media bytes; a text part is the tool's own
                check_size(p.size, max_part_bytes)
            out.append(encode_part(p, style))
        except ValueError:  # UnsupportedPartError, ContentPartError (over the cap)
            if on_unsupported == "error":
                raise
            out.append(text_block(placeholder(p), style))
    return out


def openai_messages(
    messages: Sequence[Message],
    tool_parts: ToolParts | None,
    *,
    on_unsupported: str = "text",
    max_part_bytes: int | None = None,
) -> Sequence[Message]:
    """The transcript for the OpenAI wire: user parts as blocks, and after each run of
    tool messages whose calls gave parts, ONE synthetic user message with them (a tool
    message cannot hold an image): ``"Output of tool <name> (<id>):"`` then its parts,
    per tool in order. *messages* itself is returned when nothing changes."""
    if not tool_parts and not any(has_parts(m.get("content")) for m in messages):
        return messages
    out: list[Message] = []
    names: dict[str, str] = {}
    pending: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role != "tool" and pending:
            out.append({"role": "user", "content": pending})
            pending = []
        if role == "assistant":
            note_call_names(m, names)
        if role == "tool" and tool_parts:
            call_id = str(m.get("tool_call_id") or "")
            parts = tool_parts.get(call_id)
            if parts:
                pending.append(tool_heading(names.get(call_id, ""), call_id, "openai"))
                pending += tool_blocks(parts, "openai", on_unsupported, max_part_bytes)
        content = m.get("content")
        if role != "tool" and has_parts(content):
            assert isinstance(content, list)
            m = {**m, "content": user_blocks(content, "openai", max_part_bytes)}
        out.append(m)
    if pending:
        out.append({"role": "user", "content": pending})
    return out
