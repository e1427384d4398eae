"""HTTP/1.1 message framing for :mod:`._transport`: request heads out, response heads in.

Strict where it guards the peer and the pool (header names are tokens; no CR, LF or NUL
inside a line; one well-formed ``Content-Length``; ``chunked`` the only transfer coding)
and lenient where real servers are (bare LF line ends, an empty reason phrase, folded
header lines, which a client must unfold). One regular expression checks a whole head,
so the per-request cost is a few C calls.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import httpx2

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_VALUE = rb"[\t\x20-\x7e\x80-\xff]*"  # no CR, LF, NUL or other control characters
_REQUEST_HEAD = re.compile(
    _TOKEN + rb" [\x21-\x7e]+ HTTP/1\.1\r\n(?:" + _TOKEN + rb": " + _VALUE + rb"\r\n)*\r\n"
)
_RESPONSE_HEAD = re.compile(
    rb"HTTP/1\.[01] [0-9]{3}(?: " + _VALUE + rb")?(?:\n" + _TOKEN + rb":" + _VALUE + rb")*"
)
_OBS_FOLD = re.compile(rb"\n[ \t]+")
_CONNECTION_CLOSE = re.compile(rb"\nconnection:[^\r]*\bclose\b", re.IGNORECASE)
_MAX_LENGTH_DIGITS = 18

# Body framings: a known length, chunked, or until the server closes.
LENGTH, CHUNKED, UNTIL_CLOSE = 0, 1, 2


class Head(NamedTuple):
    """A parsed response head; header names as received, values stripped."""

    version: bytes
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]


def serialize_head(request: httpx2.Request, body: bytes) -> tuple[bytes, bool]:
    """The request line, headers and *body*, joined once (a bad header is refused), and
    whether the request asks to close the connection after its answer.

    httpx2 has already added ``Host`` and ``Content-Length`` (or ``Transfer-Encoding``).
    """
    headers = request.headers.raw
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    parts.append(body)
    data = b"".join(parts)
    end = len(data) - len(body)
    # The pattern checks every line; the count, that no name or value brought a line of
    # its own (a value "a\r\nX-B: b" would otherwise pass as two good lines).
    lines = len(headers) + 2
    if data.count(b"\n", 0, end) != lines or _REQUEST_HEAD.fullmatch(data, 0, end) is None:
        raise httpx2.LocalProtocolError(
            "the request line or a header is malformed (a control character, or a name "
            "that is not a token)"
        )
    return data, _CONNECTION_CLOSE.search(data, 0, end) is not None


def chunk_frame(part: bytes) -> bytes:
    """*part* as one chunk of a chunked request body."""
    return b"%x\r\n%s\r\n" % (len(part), part)


def find_head_end(data: bytes | bytearray, start: int = 0) -> tuple[int, int] | None:
    """Where the head in *data* ends and the body starts, or ``None`` if not yet (the
    blank line is looked for from *start* on)."""
    start = max(start, 0)
    crlf = data.find(b"\r\n\r\n", start)
    lf = data.find(b"\n\n", start, crlf if crlf >= 0 else len(data))
    if lf >= 0:
        return lf, lf + 2
    if crlf >= 0:
        return crlf, crlf + 4
    return None


def parse_head(head: bytes) -> Head:
    """The status line and headers of *head* (without its blank line)."""
    head = head.replace(b"\r\n", b"\n")
    if head.endswith(b"\r"):  # a CRLF line end before a bare LF blank line
        head = head[:-1]
    if b"\n " in head or b"\n\t" in head:
        head = _OBS_FOLD.sub(b" ", head)
    if _RESPONSE_HEAD.fullmatch(head) is None:
        raise httpx2.RemoteProtocolError(f"a malformed response head: {head[:200]!r}")
    lines = head.split(b"\n")
    status_line = lines[0]
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name, value.strip(b" \t")))
    return Head(status_line[:8], int(status_line[9:12]), status_line[13:], headers)


def body_framing(head: Head, method: str, close: bool) -> tuple[int, int, bool]:
    """``(framing, length, keep_alive)`` of the response body (RFC 9112 §6.3) to a
    *method* request (*close*: the request said ``Connection: close``)."""
    keep_alive = head.version == b"HTTP/1.1" and not close
    length: int | None = None
    codings: list[bytes] = []
    for name, value in head.headers:
        if len(name) not in (10, 14, 17):  # connection, content-length, transfer-encoding
            continue
        lname = name.lower()
        if lname == b"content-length":
            for item in value.split(b","):
                item = item.strip(b" \t")
                if not item.isdigit() or len(item) > _MAX_LENGTH_DIGITS:
                    raise httpx2.RemoteProtocolError(f"a bad Content-Length: {value[:40]!r}")
                if length is not None and int(item) != length:
                    raise httpx2.RemoteProtocolError("conflicting Content-Length values")
                length = int(item)
        elif lname == b"transfer-encoding":
            codings += (c.strip(b" \t").lower() for c in value.split(b","))
        elif lname == b"connection" and b"close" in value.lower():
            keep_alive = False
    status = head.status
    if method == "HEAD" or status in (204, 304):
        return LENGTH, 0, keep_alive
    if codings:
        if codings != [b"chunked"]:
            raise httpx2.RemoteProtocolError(f"unsupported Transfer-Encoding: {codings!r}")
        # With a Content-Length too, chunked wins (RFC 9112 §6.3) but the connection is
        # not trusted with another request.
        return CHUNKED, 0, keep_alive and length is None
    if length is not None:
        return LENGTH, length, keep_alive
    return UNTIL_CLOSE, 0, False
