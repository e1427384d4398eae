"""Content parts across MCP (SPEC §2 mapping, §7C serve), with the real mcp SDK.

Consuming: a real stdio server (tests/mcp_servers/media.py, the SDK's MCPServer) answers
with image, audio, resource-link and embedded items. Serving: a toolkit served over
streamable HTTP, read by the SDK's own client and by our MCP tool source. Each test
names its counterpart in toolnexus 0.21.0's ``tests/test_multimodal.py``.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client

import toolnexus_trio as tn
from toolnexus_trio import ToolkitOptions, ToolResult, define_tool, open_toolkit

MEDIA = pathlib.Path(__file__).parents[1] / "fixtures" / "media"
GOLDEN = (MEDIA / "fixture.png.base64").read_text().strip()
SERVER = pathlib.Path(__file__).parents[1] / "mcp_servers" / "media.py"


def _media_options(**kw: Any) -> ToolkitOptions:
    config = {"mcpServers": {"md": {"command": [sys.executable, str(SERVER)]}}}
    return ToolkitOptions(mcp=config, builtins=False, **kw)


async def test_consumed_media_items_become_parts() -> None:
    async with open_toolkit(_media_options()) as toolkit:
        # peer: test_text_only_mcp_result_is_byte_identical
        only = await toolkit.execute("md_only_text", {})
        assert (only.output, only.parts) == ("a\nb", ())
        # peer: test_mcp_image_entry_becomes_an_image_part
        pic = await toolkit.execute("md_picture", {})
        assert pic.output == "a picture"
        assert [p.to_dict() for p in pic.parts] == [
            {"type": "image", "mimeType": "image/png", "data": GOLDEN}
        ]
        # peer: test_mcp_audio_entry_becomes_an_audio_part
        sound = await toolkit.execute("md_sound", {})
        assert [p.to_dict() for p in sound.parts] == [
            {"type": "audio", "mimeType": "audio/mpeg", "data": GOLDEN}
        ]
        # peer: test_mcp_resource_link_becomes_a_file_part_with_url
        link = await toolkit.execute("md_link", {})
        assert [p.to_dict() for p in link.parts] == [
            {"type": "file", "mimeType": "application/pdf",
             "url": "https://example.test/report.pdf", "name": "report.pdf"}
        ]  # fmt: skip
        # peer: test_mcp_embedded_resource_blob_and_text
        emb = await toolkit.execute("md_embedded", {})
        assert emb.output == "a note"
        assert [p.to_dict() for p in emb.parts] == [
            {"type": "file", "mimeType": "image/png", "data": GOLDEN, "name": "file:///fixture.png"}
        ]
        # What a server sends is checked: data that is not base64 is no part.
        bad = await toolkit.execute("md_bad_image", {})
        assert (bad.output, bad.parts) == ("broken", ())
        # The parts' descriptions (the canonical form) and summaries carry no bytes.
        assert tn.describe_part(pic.parts[0]) == "image (image/png, 82 bytes)"


async def _snap(args: dict[str, Any], ctx: Any) -> ToolResult:
    return ToolResult("took one", parts=(await tn.load_part("image", MEDIA / "fixture.png"),))


async def test_a_served_tools_image_part_is_an_mcp_image_item() -> None:
    # peer: test_served_tool_image_part_becomes_an_mcp_image_block
    options = ToolkitOptions(
        builtins=False, extra_tools=[define_tool("snap", "Snap.", None, _snap)]
    )
    async with (
        open_toolkit(options) as toolkit,
        toolkit.serve() as served,
        Client(served.url) as client,
    ):
        result = await client.call_tool("snap", {})
    text, image = result.content
    assert isinstance(text, types.TextContent) and text.text == "took one"
    assert isinstance(image, types.ImageContent)
    assert (image.data, image.mime_type) == (GOLDEN, "image/png")


async def test_a_part_survives_serve_then_consume() -> None:
    # peer: test_part_survives_a_serve_then_consume_round_trip
    options = ToolkitOptions(
        builtins=False, extra_tools=[define_tool("snap", "Snap.", None, _snap)]
    )
    async with open_toolkit(options) as toolkit, toolkit.serve() as served:
        consumer = ToolkitOptions(builtins=False, mcp={"mcpServers": {"up": {"url": served.url}}})
        async with open_toolkit(consumer) as remote:
            result = await remote.execute("up_snap", {})
    assert result.output == "took one"
    (part,) = result.parts
    assert (part.type, part.mime_type, part.data) == ("image", "image/png", GOLDEN)


async def test_mcp_derived_audio_degrades_for_anthropic() -> None:
    # peer: test_mcp_derived_audio_degrades_instead_of_failing_the_run
    from toolnexus_trio import ClientOptions, create_client
    from toolnexus_trio.testing import open_fake_provider

    script = [{"tool_calls": [{"name": "md_sound", "arguments": {}}]}, {"text": "heard"}]
    async with (
        open_toolkit(_media_options()) as toolkit,
        open_fake_provider(script) as model,
        create_client(
            ClientOptions(base_url=model.base_url, style="anthropic", model="m", api_key="k")
        ) as client,
    ):
        result = await client.run("listen", toolkit)
    assert (result.status, result.text) == ("done", "heard")
    (block,) = model.requests[1].json["messages"][2]["content"]
    assert block["content"][1] == {
        "type": "text",
        "text": "[unsupported audio part (audio/mpeg, 82 bytes)]",
    }
