"""Content parts at the edge (SPEC §1B): constructors, the size cap, summaries.

Each test names its counterpart in toolnexus 0.21.0's ``tests/test_multimodal.py``.
The yardstick is the 82-byte PNG and its committed golden base64 (tests/fixtures/media,
MIT, credit in its README): asserted against the golden, never a re-encoding.
"""

from __future__ import annotations

import gzip
import io
import os
import pathlib

import pytest

import toolnexus_trio as tn
from toolnexus_trio import ContentPartError, content

MEDIA = pathlib.Path(__file__).parent / "fixtures" / "media"
PNG = MEDIA / "fixture.png"
GOLDEN = (MEDIA / "fixture.png.base64").read_text().strip()


@pytest.fixture(autouse=True)
def _no_process_cap():
    tn.set_max_part_bytes(None)
    yield
    tn.set_max_part_bytes(None)


def test_both_data_and_url_is_refused():
    # peer: test_part_with_both_data_and_url_is_rejected
    with pytest.raises(ContentPartError, match="both data and url"):
        tn.part("image", mimeType="image/png", data=GOLDEN, url="https://x/a.png")


def test_neither_data_nor_url_is_refused():
    # peer: test_part_with_neither_data_nor_url_is_rejected
    with pytest.raises(ContentPartError, match="needs data or url"):
        tn.part("image", mime_type="image/png")


def test_path_base64_is_the_golden():
    # peer: test_base64_matches_the_committed_golden
    p = tn.image(str(PNG))
    assert p.data == GOLDEN
    assert (p.type, p.mime_type, p.name, p.url) == ("image", "image/png", "fixture.png", None)


def test_a_path_is_read_at_construction_and_never_stored():
    # peer: test_a_path_is_read_at_the_edge_and_never_stored
    p = tn.image(str(PNG))
    d = p.to_dict()
    assert d == {"type": "image", "mimeType": "image/png", "data": GOLDEN, "name": "fixture.png"}
    assert str(MEDIA) not in repr(d) and str(MEDIA) not in repr(p)


def test_data_url_is_normalised():
    # peer: test_data_url_is_normalised_at_construction
    p = tn.image(f"data:image/png;base64,{GOLDEN}")
    assert (p.mime_type, p.data, p.url) == ("image/png", GOLDEN, None)


def test_https_url_is_kept():
    # peer: test_https_url_is_retained
    p = tn.image("https://example.com/pics/cat.jpeg?x=1")
    assert (p.url, p.data, p.mime_type) == (
        "https://example.com/pics/cat.jpeg?x=1",
        None,
        "image/jpeg",
    )
    with pytest.raises(ContentPartError, match="https"):
        tn.image("http://example.com/cat.png")


def test_unknown_extension_is_refused_by_name(tmp_path):
    # peer: test_unknown_extension_is_refused_by_name
    path = tmp_path / "thing.xyz"
    path.write_bytes(b"abc")
    with pytest.raises(ContentPartError) as info:
        tn.file(str(path))
    assert str(info.value) == 'unknown file extension ".xyz" - pass an explicit mime_type'
    assert tn.file(str(path), mime_type="text/plain").data == "YWJj"


def test_bytes_need_a_mime_type():
    # peer: test_bytes_need_an_explicit_mime_type
    with pytest.raises(ContentPartError, match="mime_type is required"):
        tn.image(PNG.read_bytes())
    assert tn.image(PNG.read_bytes(), mime_type="image/png").data == GOLDEN


def test_oversized_part_is_refused_at_construction():
    # peer: test_oversized_part_is_rejected_at_the_edge
    with pytest.raises(ContentPartError) as info:
        tn.image(str(PNG), max_part_bytes=10)
    assert str(info.value) == "content part is 82 decoded bytes, over the maxPartBytes limit of 10"


def test_process_wide_cap_counts_decoded_bytes():
    # peer: test_process_wide_max_part_bytes_is_enforced_in_decoded_bytes
    tn.set_max_part_bytes(81)
    assert tn.get_max_part_bytes() == 81
    for source in (str(PNG), f"data:image/png;base64,{GOLDEN}"):
        with pytest.raises(ContentPartError, match="82 decoded bytes"):
            tn.image(source)
    with pytest.raises(ContentPartError, match="82 decoded bytes"):
        tn.part("image", mimeType="image/png", data=GOLDEN)
    tn.set_max_part_bytes(82)  # the base64 is 112 chars: decoded bytes are what count
    assert tn.image(str(PNG)).data == GOLDEN


def test_a_pathlib_path_is_accepted():
    # peer: test_a_pathlib_path_is_accepted
    p = tn.image(PNG)
    assert (p.data, p.name) == (GOLDEN, "fixture.png")


def test_an_os_pathlike_is_accepted():
    # peer: test_an_os_pathlike_object_is_accepted
    class Where(os.PathLike[str]):
        def __fspath__(self) -> str:
            return str(PNG)

    assert tn.image(Where()).data == GOLDEN


def test_a_bytesio_is_read_eagerly_and_needs_a_mime_type():
    # peer: test_a_bytesio_is_read_eagerly_and_needs_an_explicit_mime_type
    buf = io.BytesIO(PNG.read_bytes())
    with pytest.raises(ContentPartError, match="mime_type is required"):
        tn.image(buf)
    p = tn.image(buf, mime_type="image/png")
    assert p.data == GOLDEN
    assert not buf.closed and buf.tell() == 82


def test_an_rb_handle_takes_its_mime_from_its_name():
    # peer: test_an_open_rb_handle_takes_its_mime_from_its_name
    with open(PNG, "rb") as handle:
        p = tn.image(handle)
        assert not handle.closed
    assert (p.data, p.mime_type, p.name) == (GOLDEN, "image/png", "fixture.png")


def test_a_handle_with_an_unknown_extension_is_refused_by_name(tmp_path):
    # peer: test_a_handle_with_an_unknown_extension_is_refused_by_name
    path = tmp_path / "blob.xyz"
    path.write_bytes(b"abc")
    with open(path, "rb") as handle, pytest.raises(ContentPartError, match=r'"\.xyz"'):
        tn.file(handle)


def test_a_text_mode_handle_is_a_typed_error():
    # peer: test_a_text_mode_handle_is_a_typed_error
    with open(MEDIA / "README.md") as handle, pytest.raises(ContentPartError, match="binary mode"):
        tn.file(handle, mime_type="text/plain")
    with pytest.raises(ContentPartError, match="binary mode"):
        tn.file(io.StringIO("x"), mime_type="text/plain")


def test_a_gzip_handle_is_accepted(tmp_path):
    # peer: test_a_gzip_handle_is_accepted
    path = tmp_path / "fixture.png.gz"
    path.write_bytes(gzip.compress(PNG.read_bytes()))
    with gzip.open(path, "rb") as handle:
        p = tn.image(handle, mime_type="image/png")
    assert p.data == GOLDEN


def test_bytearray_and_memoryview_are_accepted():
    # peer: test_bytearray_and_memoryview_are_accepted
    raw = PNG.read_bytes()
    assert tn.image(bytearray(raw), mime_type="image/png").data == GOLDEN
    assert tn.image(memoryview(raw), mime_type="image/png").data == GOLDEN


def test_a_file_like_part_carries_no_handle_or_path():
    # peer: test_a_file_like_part_carries_no_handle_or_path
    with open(PNG, "rb") as handle:
        d = tn.image(handle).to_dict()
    assert set(d) <= {"type", "mimeType", "data", "url", "name"}
    assert all(isinstance(v, str) for v in d.values())


def test_the_cap_fails_fast_for_a_file_like_source():
    # peer: test_max_part_bytes_still_fast_fails_for_a_file_like_source
    with open(PNG, "rb") as handle, pytest.raises(ContentPartError, match="limit of 10"):
        tn.image(handle, max_part_bytes=10)

    class Endless(io.RawIOBase):
        name = "endless.png"

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
            b[:] = b"\0" * len(b)
            return len(b)

    # An endless stream is refused after cap+1 bytes, not read to its (absent) end.
    with pytest.raises(ContentPartError, match="limit of 1000"):
        tn.image(io.BufferedReader(Endless()), max_part_bytes=1000)


def test_summarize_never_carries_bytes():
    # peer: test_summarize_never_carries_bytes
    assert tn.summarize(tn.image(PNG)) == {"type": "image", "mimeType": "image/png", "bytes": 82}


def test_token_estimate_is_byte_derived():
    # peer: test_token_estimate_is_byte_derived_not_mime_derived
    big = tn.file(b"\0" * 75_000, mime_type="application/pdf")
    assert content.estimate_tokens(big) >= 75_000 // 750
    assert content.estimate_tokens(tn.image(PNG)) == 85
    assert content.estimate_tokens(tn.text("abcdefgh")) == 2
    assert content.estimate_tokens(tn.text("")) == 1


def test_describe_parts_uses_the_canonical_form():
    # peer: test_describe_parts_uses_the_canonical_form
    assert tn.describe_part(tn.image(PNG)) == "image (image/png, 82 bytes)"


def test_describe_parts_renders_zero_bytes_for_a_url_part():
    # peer: test_describe_parts_renders_zero_bytes_for_a_url_part
    assert tn.describe_part(tn.image("https://x.test/a.png")) == "image (image/png, 0 bytes)"


def test_from_dict_round_trips_and_refuses_bad_base64():
    p = tn.image(PNG)
    assert content.from_dict(p.to_dict()) == p
    with pytest.raises(ContentPartError, match="base64"):
        content.from_dict({"type": "image", "mimeType": "image/png", "data": "not base64!"})


async def test_load_part_reads_in_a_worker_thread():
    # Trio: the disk read happens off the event loop; same part as the sync constructor.
    p = await tn.load_part("image", PNG)
    assert p == tn.image(PNG)
    with pytest.raises(ContentPartError, match="limit of 10"):
        await tn.load_part("image", PNG, max_part_bytes=10)
