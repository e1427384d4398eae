"""Content parts across MCP (SPEC §2 mapping, §7C serve), both ways.

Consuming: an ``image`` or ``audio`` item becomes that part (its base64 kept as sent),
a ``resource_link`` a file part with its ``uri`` as the URL, an embedded ``resource``
with a ``blob`` a file part named by its ``uri``. Text items keep their old mapping
(joined into the output, no parts). Serving: a tool's parts follow its text item as
MCP ``image``/``audio``/``resource_link``/``resource`` content; serve then consume gives
back the same base64, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp import types

from .._content import ContentPart, ContentPartError, check_base64

McpContent = (
    types.TextContent
    | types.ImageContent
    | types.AudioContent
    | types.ResourceLink
    | types.EmbeddedResource
)


def parts_of(content: Sequence[object]) -> tuple[ContentPart, ...]:
    """The media parts of an MCP result's content (text is the output's, not a part).

    An item our part cannot hold (base64 that is not, an empty MIME type) is left out:
    what a server sends is checked once here, never forwarded as it came."""
    out: list[ContentPart] = []
    for item in content:
        try:
            p = _part(item)
            if p is not None and p.data is not None:
                check_base64(p.data)
        except ContentPartError:
            continue
        if p is not None:
            out.append(p)
    return tuple(out)


def _part(item: object) -> ContentPart | None:
    if isinstance(item, types.ImageContent):
        return ContentPart(type="image", mime_type=item.mime_type, data=item.data)
    if isinstance(item, types.AudioContent):
        return ContentPart(type="audio", mime_type=item.mime_type, data=item.data)
    if isinstance(item, types.ResourceLink):
        mime = item.mime_type or "application/octet-stream"
        return ContentPart(type="file", mime_type=mime, url=str(item.uri), name=item.name)
    if isinstance(item, types.EmbeddedResource) and isinstance(
        item.resource, types.BlobResourceContents
    ):
        resource = item.resource
        mime = resource.mime_type or "application/octet-stream"
        return ContentPart(type="file", mime_type=mime, data=resource.blob, name=str(resource.uri))
    return None


def mcp_content(output: str, parts: Sequence[ContentPart]) -> list[McpContent]:
    """A served tool's result as MCP content: the text item, then each part."""
    out: list[McpContent] = [types.TextContent(text=output)]
    for p in parts:
        if p.type == "text":
            out.append(types.TextContent(text=p.text or ""))
        elif p.type == "image" and p.data is not None:
            out.append(types.ImageContent(data=p.data, mime_type=p.mime_type or ""))
        elif p.type == "audio" and p.data is not None:
            out.append(types.AudioContent(data=p.data, mime_type=p.mime_type or ""))
        elif p.data is not None:
            uri = p.name if p.name and ":" in p.name else f"part:{p.name or p.type}"
            blob = types.BlobResourceContents(uri=uri, mime_type=p.mime_type, blob=p.data)
            out.append(types.EmbeddedResource(type="resource", resource=blob))
        else:
            out.append(
                types.ResourceLink(
                    name=p.name or p.type,
                    uri=p.url or "",
                    mime_type=p.mime_type,
                    type="resource_link",
                )
            )
    return out
