"""A real MCP server (the SDK's MCPServer, over stdio) whose tools answer with media
content: the 82-byte PNG fixture (tests/fixtures/media, MIT, credit in its README) as an
image, as audio, as a resource link and as embedded blob and text resources."""

from __future__ import annotations

import base64
import pathlib

from mcp import types
from mcp.server.mcpserver import MCPServer

PNG = pathlib.Path(__file__).parents[1] / "fixtures" / "media" / "fixture.png"
GOLDEN = (PNG.parent / "fixture.png.base64").read_text().strip()


def build() -> MCPServer:
    server = MCPServer("media")

    @server.tool(structured_output=False)
    def only_text() -> list[types.TextContent]:
        """Two text items."""
        return [types.TextContent(text="a"), types.TextContent(text="b")]

    @server.tool(structured_output=False)
    def picture() -> list[types.TextContent | types.ImageContent]:
        """A caption and the image."""
        return [
            types.TextContent(text="a picture"),
            types.ImageContent(data=GOLDEN, mime_type="image/png"),
        ]

    @server.tool(structured_output=False)
    def sound() -> list[types.AudioContent]:
        """An audio item."""
        return [types.AudioContent(data=GOLDEN, mime_type="audio/mpeg")]

    @server.tool(structured_output=False)
    def link() -> list[types.ResourceLink]:
        """A resource link."""
        return [
            types.ResourceLink(
                name="report.pdf",
                uri="https://example.test/report.pdf",
                mime_type="application/pdf",
            )
        ]

    @server.tool(structured_output=False)
    def embedded() -> list[types.EmbeddedResource]:
        """An embedded blob and an embedded text resource."""
        blob = types.BlobResourceContents(
            uri="file:///fixture.png",
            mime_type="image/png",
            blob=base64.b64encode(PNG.read_bytes()).decode(),
        )
        note = types.TextResourceContents(
            uri="file:///note.txt", mime_type="text/plain", text="a note"
        )
        return [
            types.EmbeddedResource(type="resource", resource=blob),
            types.EmbeddedResource(type="resource", resource=note),
        ]

    @server.tool(structured_output=False)
    def bad_image() -> list[types.TextContent | types.ImageContent]:
        """An image whose data is not base64."""
        return [
            types.TextContent(text="broken"),
            types.ImageContent(data="not base64!", mime_type="image/png"),
        ]

    return server


if __name__ == "__main__":
    build().run("stdio")
