"""Content parts on the model wire (SPEC §8A), both styles, against a real FakeProvider.

Each test names its counterpart in toolnexus 0.21.0's ``tests/test_multimodal.py``.
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import pytest
from http_helpers import served

import toolnexus_trio as tn
from toolnexus_trio import (
    BuiltinsConfig,
    ContentPartError,
    ToolkitOptions,
    ToolResult,
    UnsupportedPartError,
    create_toolkit,
    tool,
)
from toolnexus_trio.content import encode_part

MEDIA = pathlib.Path(__file__).parents[1] / "fixtures" / "media"
PNG = MEDIA / "fixture.png"
GOLDEN = (MEDIA / "fixture.png.base64").read_text().strip()
PNG_URL = f"data:image/png;base64,{GOLDEN}"
IMAGE_BLOCK = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": GOLDEN}}  # fmt: skip


# Read at import, off the event loop: an async test never does blocking file I/O.
PNG_BYTES = PNG.read_bytes()
PICTURE = tn.image(PNG)


def _mp3() -> tn.ContentPart:
    return tn.audio(PNG_BYTES, mime_type="audio/mpeg")  # 82 bytes, labelled mp3


@tool
async def snap() -> ToolResult:
    """Take a picture."""
    # In async code a path is read in a worker thread.
    return ToolResult("took one", parts=(await tn.load_part("image", PNG),))


@tool
async def listen() -> ToolResult:
    """Record a sound."""
    return ToolResult("recorded", parts=(_mp3(),))


async def _toolkit() -> tn.Toolkit:
    return await create_toolkit(
        ToolkitOptions(extra_tools=[snap, listen], builtins=BuiltinsConfig.off())
    )


def _calls(*names: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": {}} for n in names]}


def test_block_shapes_per_style():
    # peer: test_allowlist_block_shapes
    png = tn.image(PNG)
    assert encode_part(png, "openai") == {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert encode_part(png, "anthropic") == IMAGE_BLOCK
    url = tn.image("https://x.test/a.png")
    assert encode_part(url, "anthropic") == {
        "type": "image",
        "source": {"type": "url", "url": "https://x.test/a.png"},
    }
    pdf = tn.file(PNG_BYTES, mime_type="application/pdf")
    assert encode_part(pdf, "openai") == {
        "type": "file",
        "file": {"filename": "file", "file_data": f"data:application/pdf;base64,{GOLDEN}"},
    }
    assert encode_part(pdf, "anthropic")["type"] == "document"
    assert encode_part(_mp3(), "openai") == {
        "type": "input_audio",
        "input_audio": {"data": GOLDEN, "format": "mp3"},
    }
    assert encode_part(tn.text("hi"), "anthropic") == {"type": "text", "text": "hi"}


def test_named_refusals():
    # peer: test_named_refusals
    with pytest.raises(UnsupportedPartError) as info:
        encode_part(_mp3(), "anthropic")
    assert str(info.value) == 'no "anthropic" block shape for a audio part (audio/mpeg)'
    assert (info.value.part_type, info.value.mime_type, info.value.style) == (
        "audio",
        "audio/mpeg",
        "anthropic",
    )
    with pytest.raises(UnsupportedPartError, match="openai"):
        encode_part(tn.file("https://x.test/a.pdf"), "openai")


async def test_string_prompt_stays_byte_identical():
    # peer: test_string_prompt_path_is_byte_identical
    async with served("openai", [{"text": "ok"}]) as (provider, client):
        result = await client.run("hello")
    assert provider.requests[0].json["messages"] == [{"role": "user", "content": "hello"}]
    assert result.messages[0] == {"role": "user", "content": "hello"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_parts_keep_their_order(style: str, stream: bool):
    # peer: test_parts_ordering_is_preserved
    picture = tn.image(PNG_BYTES, mime_type="image/png")
    async with served(style, [{"text": "ok"}]) as (provider, client):
        if stream:
            async with client.stream([tn.text("before"), picture, "after"]) as events:
                result = [e async for e in events][-1]["result"]
        else:
            result = await client.run([tn.text("before"), picture, "after"])
    sent = provider.requests[0].json["messages"][0]["content"]
    kinds = [b["type"] for b in sent]
    assert kinds == (
        ["text", "image_url", "text"] if style == "openai" else ["text", "image", "text"]
    )
    assert sent[0] == {"type": "text", "text": "before"} and sent[2]["text"] == "after"
    # The transcript holds the part's wire form (no path), the base64 shared, not copied.
    stored = result.messages[0]["content"]
    assert stored[1] == picture.to_dict()
    # A large part is not copied into the transcript: the same string object.
    assert stored[1]["data"] is picture.data
    assert str(MEDIA) not in json.dumps(result.messages)


async def test_text_only_parts_concatenate_for_anthropic_translate():
    # peer: test_text_only_parts_array_still_concatenates_for_anthropic_translate
    # peer (test_translate.py): test_content_parts_are_flattened
    async with served("anthropic", [{"text": "ok"}]) as (provider, client):
        await client.translate(
            [{"role": "user", "content": [{"type": "text", "text": "a"},
                                          {"type": "text", "text": "b"}]}]
        )  # fmt: skip
    assert provider.requests[0].json["messages"] == [{"role": "user", "content": "ab"}]


async def test_an_image_part_survives_translation():
    # peer: test_image_part_in_content_survives_translation
    part = {"type": "image", "mimeType": "image/png", "data": GOLDEN}
    async with served("anthropic", [{"text": "ok"}]) as (provider, client):
        await client.translate(
            [{"role": "user", "content": [{"type": "text", "text": "see"}, part]}]
        )
    content = provider.requests[0].json["messages"][0]["content"]
    assert content == [{"type": "text", "text": "see"}, IMAGE_BLOCK]


async def test_attached_audio_to_anthropic_fails_before_any_request():
    # peer: test_attached_audio_to_anthropic_errors_before_any_http_call
    async with served("anthropic", [{"text": "ok"}]) as (provider, client):
        with pytest.raises(UnsupportedPartError, match="audio"):
            await client.run([tn.text("hear"), _mp3()])
    assert provider.requests == []


async def test_attached_oversize_part_fails_before_any_request():
    # peer: test_attached_oversize_part_errors_before_any_http_call
    async with served("openai", [{"text": "ok"}], max_part_bytes=10) as (provider, client):
        with pytest.raises(ContentPartError) as info:
            await client.run([PICTURE])
    assert str(info.value) == "content part is 82 decoded bytes, over the maxPartBytes limit of 10"
    assert provider.requests == []


async def test_openai_moves_tool_parts_into_one_synthetic_user_message():
    # peer: test_openai_relocates_tool_result_parts_into_one_synthetic_user_message
    script = [_calls("snap", "snap"), {"text": "a picture"}]
    async with served("openai", script) as (provider, client):
        result = await client.run("look", await _toolkit())
    assert result.status == "done"
    sent = provider.requests[1].json["messages"]
    _user, assistant, tool1, tool2, synthetic = sent
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert tool1 == {"role": "tool", "tool_call_id": ids[0], "content": "took one"}
    assert tool2 == {"role": "tool", "tool_call_id": ids[1], "content": "took one"}
    image = {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert synthetic == {"role": "user", "content": [
        {"type": "text", "text": f"Output of tool snap ({ids[0]}):"}, image,
        {"type": "text", "text": f"Output of tool snap ({ids[1]}):"}, image,
    ]}  # fmt: skip
    # Wire-only: the transcript has no synthetic message and no base64.
    assert [m["role"] for m in result.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert GOLDEN not in json.dumps(result.messages)


async def test_anthropic_puts_the_image_inside_the_tool_result():
    # peer: test_anthropic_emits_the_image_inside_the_tool_result
    async with served("anthropic", [_calls("snap"), {"text": "a picture"}]) as (provider, client):
        result = await client.run("look", await _toolkit())
    sent = provider.requests[1].json["messages"]
    assert len(sent) == 3
    (block,) = sent[2]["content"]
    assert block["type"] == "tool_result"
    assert block["content"] == [{"type": "text", "text": "took one"}, IMAGE_BLOCK]
    assert GOLDEN not in json.dumps(result.messages)


async def test_a_tools_audio_degrades_for_anthropic_and_the_run_completes():
    # peer: test_mcp_derived_audio_degrades_instead_of_failing_the_run
    async with served("anthropic", [_calls("listen"), {"text": "heard"}]) as (provider, client):
        result = await client.run("hear", await _toolkit())
    assert result.status == "done" and result.text == "heard"
    block = provider.requests[1].json["messages"][2]["content"][0]
    assert block["content"][1] == {
        "type": "text",
        "text": "[unsupported audio part (audio/mpeg, 82 bytes)]",
    }


async def test_a_tools_oversize_part_degrades_and_warns_once(caplog):
    # peer: test_tool_derived_oversize_part_degrades_and_the_run_completes
    # peer: test_tool_derived_oversize_part_warns_once
    script = [_calls("snap", "snap"), _calls("snap"), {"text": "done"}]
    with caplog.at_level(logging.WARNING, logger="toolnexus_trio"):
        async with served("openai", script, max_part_bytes=10) as (provider, client):
            result = await client.run("look", await _toolkit())
    assert result.status == "done"
    last = provider.requests[2].json["messages"][-1]
    assert last["role"] == "user"
    assert {"type": "text", "text": "[unsupported image part (image/png, 82 bytes)]"} in last[
        "content"
    ]
    assert GOLDEN not in json.dumps(provider.requests[2].json)
    warned = [r for r in caplog.records if "over the maxPartBytes limit of 10" in r.getMessage()]
    assert len(warned) == 1


@pytest.mark.parametrize(("style", "name", "kw"), [
    ("anthropic", "listen", {}),
    ("openai", "snap", {"max_part_bytes": 10}),
])  # fmt: skip
async def test_on_unsupported_part_error_is_uniformly_strict(style: str, name: str, kw: Any):
    # peer: test_on_unsupported_part_error_forces_uniform_strictness
    async with served(
        style, [_calls(name), {"text": "never"}], on_unsupported_part="error", **kw
    ) as (provider, client):
        with pytest.raises((UnsupportedPartError, ContentPartError)):
            await client.run("go", await _toolkit())
    assert len(provider.requests) == 1  # the second request was never sent


async def test_llm_event_describes_parts_without_their_bytes():
    # peer: test_llm_event_describes_parts_without_their_bytes
    events: list[dict[str, Any]] = []
    script = [_calls("snap"), {"text": "ok"}]
    async with served("openai", script, on_metric=events.append) as (_, client):
        await client.run([tn.text("see"), PICTURE], await _toolkit())
    llm = [e for e in events if e["event"] == "llm"]
    summary = {"type": "image", "mimeType": "image/png", "bytes": 82}
    assert llm[0]["parts"] == [summary]
    assert llm[1]["parts"] == [summary, summary]
    assert GOLDEN not in json.dumps(events, default=str)
    assert "parts" not in next(e for e in events if e["event"] == "run")


async def test_a_stored_transcript_holds_no_path_and_tool_parts_stay_out():
    # The §1B rule that a saved transcript never holds a path; tool parts are wire-only.
    script = [_calls("snap"), {"text": "one"}, {"text": "two"}]
    async with served("openai", script) as (provider, client):
        toolkit = await _toolkit()
        await client.ask([tn.text("look"), PICTURE], toolkit, id="t1")
        await client.ask("again", toolkit, id="t1")
        saved = await client.store.get("t1")
    dumped = json.dumps(saved)
    assert str(MEDIA) not in dumped
    assert dumped.count(GOLDEN) == 1  # the prompt's part, once; the tool's part not at all
    # The third request re-sends the prompt's image from the transcript, nothing else.
    assert json.dumps(provider.requests[2].json).count(GOLDEN) == 1


def test_block_shapes_of_the_responses_and_gemini_styles():
    png = tn.image(PNG)
    assert encode_part(png, "responses") == {"type": "input_image", "image_url": PNG_URL}
    assert encode_part(tn.text("hi"), "responses") == {"type": "input_text", "text": "hi"}
    pdf = tn.file(PNG_BYTES, mime_type="application/pdf")
    assert encode_part(pdf, "responses") == {
        "type": "input_file",
        "filename": "file",
        "file_data": f"data:application/pdf;base64,{GOLDEN}",
    }
    with pytest.raises(UnsupportedPartError, match="responses"):
        encode_part(_mp3(), "responses")
    inline = {"inlineData": {"mimeType": "image/png", "data": GOLDEN}}
    assert encode_part(png, "gemini") == inline
    assert encode_part(_mp3(), "gemini") == {"inlineData": {"mimeType": "audio/mpeg",
                                                            "data": GOLDEN}}  # fmt: skip
    assert encode_part(tn.image("https://x.test/a.png"), "gemini") == {
        "fileData": {"mimeType": "image/png", "fileUri": "https://x.test/a.png"}
    }


async def test_responses_sends_prompt_and_tool_parts():
    async with served("responses", [_calls("snap"), {"text": "seen"}]) as (provider, client):
        result = await client.run([tn.text("look"), PICTURE], await _toolkit())
    assert result.status == "done" and result.text == "seen"
    first, second = provider.requests
    image = {"type": "input_image", "image_url": PNG_URL}
    assert first.json["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "look"}, image]}
    ]
    call_id = result.messages[1]["tool_calls"][0]["id"]
    output, synthetic = second.json["input"][-2:]
    assert output == {"type": "function_call_output", "call_id": call_id, "output": "took one"}
    assert synthetic == {"role": "user", "content": [
        {"type": "input_text", "text": f"Output of tool snap ({call_id}):"}, image,
    ]}  # fmt: skip
    assert GOLDEN not in json.dumps(result.messages[1:])


async def test_responses_degrades_a_tools_audio_and_refuses_an_attached_one():
    async with served("responses", [_calls("listen"), {"text": "heard"}]) as (provider, client):
        result = await client.run("hear", await _toolkit())
        assert result.status == "done"
        assert provider.requests[1].json["input"][-1]["content"][1] == {
            "type": "input_text",
            "text": "[unsupported audio part (audio/mpeg, 82 bytes)]",
        }
        with pytest.raises(UnsupportedPartError, match="responses"):
            await client.run([tn.text("hear"), _mp3()])
    assert len(provider.requests) == 2


async def test_gemini_sends_prompt_and_tool_parts():
    script = [_calls("snap", "listen"), {"text": "seen"}]
    async with served("gemini", script) as (provider, client):
        result = await client.run([tn.text("look"), PICTURE], await _toolkit())
    assert result.status == "done" and result.text == "seen"
    first, second = provider.requests
    image = {"inlineData": {"mimeType": "image/png", "data": GOLDEN}}
    assert first.json["contents"] == [{"role": "user", "parts": [{"text": "look"}, image]}]
    ids = [c["id"] for c in result.messages[1]["tool_calls"]]
    (results,) = second.json["contents"][2:]
    assert results["role"] == "user"
    parts = results["parts"]
    assert ["functionResponse" in p for p in parts] == [True, False, False, True, False, False]
    assert parts[1:3] == [{"text": f"Output of tool snap ({ids[0]}):"}, image]
    assert parts[4:] == [
        {"text": f"Output of tool listen ({ids[1]}):"},
        {"inlineData": {"mimeType": "audio/mpeg", "data": GOLDEN}},
    ]
