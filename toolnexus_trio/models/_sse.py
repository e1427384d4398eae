"""A small Server-Sent Events decoder (WHATWG rules for ``event`` and ``data``).

It is fed bytes as they come off the socket and hands back whole events; it holds at
most one unfinished line and one event's data (the caller bounds the total). Lines end
in LF or CRLF.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class SSEEvent:
    """One dispatched event: its ``event`` name (``"message"`` by default) and data."""

    event: str
    data: str


class SSEDecoder:
    """``feed(bytes) -> [SSEEvent]``; :attr:`pending` says an event was cut off."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._event = ""
        self._data: list[str] = []

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished line or event are held (a truncated stream)."""
        return bool(self._buffer) or bool(self._data)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take *chunk*; return the events it completed, in order."""
        self._buffer += chunk
        events: list[SSEEvent] = []
        start = 0
        buffer = self._buffer
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        del buffer[:start]
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SSEEvent(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None
