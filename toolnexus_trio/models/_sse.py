"""A small Server-Sent Events decoder (WHATWG rules for ``event`` and ``data``).

It is fed bytes as they come off the socket and hands back whole events. The work is
linear in the bytes fed: each byte is looked at once, so a line cut into many chunks
is never rescanned. The memory is about one copy of the current event's data: a
``data`` value goes into the event's data buffer as its bytes arrive (no separate
line buffer, no object per line), other fields are dropped as they arrive, and only
a field name (a few bytes) or an ``event`` name is held on its own. At dispatch the
data is decoded once (UTF-8, invalid bytes replaced), so the peak is the raw data
plus its text (one to four bytes per character). The caller bounds the total. Lines
end in LF or CRLF.
"""

from __future__ import annotations

import attrs

_FIELD, _DATA, _EVENT, _SKIP = range(4)
"""Where the decoder is in the current line: the field name, a ``data`` value, an
``event`` value, or a line it ignores (a comment, another field)."""

_NAME_MAX = len(b"event\r")
"""A longer field name is neither ``data`` nor ``event`` (with a CR before the LF)."""

_WHOLE_LINE = 4096
"""A line wholly inside one chunk and no longer than this is parsed in one go (the
common case: fewer steps per line); a longer one goes through the incremental path,
which never copies it whole."""

_CR = 0x0D
_SPACE = 0x20


@attrs.frozen
class SSEEvent:
    """One dispatched event: its ``event`` name (``"message"`` by default) and data."""

    event: str
    data: str


class SSEDecoder:
    """``feed(bytes) -> [SSEEvent]``; :attr:`pending` says an event was cut off.

    :attr:`scanned` counts the bytes examined for line ends: the input's size, never
    more (the work stays linear however the lines are cut).
    """

    def __init__(self) -> None:
        self._mode = _FIELD
        self._name = bytearray()  # the current line's field name, so far (_FIELD)
        self._at_value = False  # the value's first byte (maybe one space to drop) is next
        self._value_start = 0  # where the current data line's value starts in _data
        self._data = bytearray()  # this event's data lines, joined by LF
        self._lines = 0  # how many data lines this event has
        self._event_name = bytearray()  # the current ``event`` line's value (_EVENT)
        self._event = ""
        self.scanned = 0

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished line or event are held (a truncated stream)."""
        return self._mode != _FIELD or bool(self._name) or self._lines > 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take *chunk*; return the events it completed, in order."""
        events: list[SSEEvent] = []
        pos = 0
        size = len(chunk)
        while pos < size:
            end = chunk.find(b"\n", pos)
            if end < 0:
                self.scanned += size - pos
                self._take(chunk, pos, size)
                break
            self.scanned += end + 1 - pos
            if self._mode == _FIELD and not self._name and end - pos <= _WHOLE_LINE:
                event = self._whole_line(chunk[pos:end])
            else:
                if pos < end:
                    self._take(chunk, pos, end)
                event = self._end_line()
            if event is not None:
                events.append(event)
            pos = end + 1
        return events

    # -- a short line that is all in one chunk ---------------------------------

    def _whole_line(self, line: bytes) -> SSEEvent | None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" a comment
            return None
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            if self._lines:
                self._data += b"\n"
            self._data += value
            self._lines += 1
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        return None

    # -- the incremental path -------------------------------------------------

    def _take(self, chunk: bytes, start: int, stop: int) -> None:
        """Take ``chunk[start:stop]``, a piece of the current line (no LF in it)."""
        if self._mode == _FIELD:
            room = _NAME_MAX + 1 - len(self._name)
            colon = chunk.find(b":", start, min(stop, start + room))
            head = stop if colon < 0 else colon
            if colon < 0 and head - start >= room:
                self._mode = _SKIP  # too long a name: a field this decoder ignores
                self._name.clear()
                return
            self._name += chunk[start:head]
            if colon < 0:
                return
            self._begin_value()
            start = colon + 1
        if start >= stop or self._mode == _SKIP:
            return
        if self._at_value:
            self._at_value = False
            if chunk[start] == _SPACE:
                start += 1
                if start >= stop:
                    return
        piece = memoryview(chunk)[start:stop]
        if self._mode == _DATA:
            self._data += piece
        else:
            self._event_name += piece

    def _begin_value(self) -> None:
        """The field name ended at a colon: start reading its value."""
        name = bytes(self._name)
        self._name.clear()
        self._at_value = True
        if name == b"data":
            self._mode = _DATA
            if self._lines:
                self._data += b"\n"
            self._lines += 1
            self._value_start = len(self._data)
        elif name == b"event":
            self._mode = _EVENT
            self._event_name.clear()
        else:  # a comment (empty name) or a field that is neither data nor event
            self._mode = _SKIP

    def _end_line(self) -> SSEEvent | None:
        """The current line ended (at an LF): finish it; a blank line dispatches."""
        mode, self._mode = self._mode, _FIELD
        if mode == _DATA:
            if len(self._data) > self._value_start and self._data[-1] == _CR:
                del self._data[-1]
        elif mode == _EVENT:
            if self._event_name.endswith(b"\r"):
                del self._event_name[-1]
            self._event = self._event_name.decode("utf-8", "replace")
            self._event_name.clear()
        elif mode == _FIELD:
            name = bytes(self._name)
            self._name.clear()
            if name.endswith(b"\r"):
                name = name[:-1]
            if not name:
                return self._dispatch()
            if name == b"data":  # a ``data`` line without a colon: an empty value
                if self._lines:
                    self._data += b"\n"
                self._lines += 1
            elif name == b"event":
                self._event = ""
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._lines:
            self._event = ""
            return None
        data = self._data.decode("utf-8", "replace")
        event = SSEEvent(self._event or "message", data)
        self._data = bytearray()
        self._lines = 0
        self._event = ""
        return event
