"""§10 suspension wire data: :class:`Request` and :class:`Answer` (pure data, no trio).

Their keys are fixed across every toolnexus port (``id, kind, prompt, url, data,
expiresAt`` and ``id, ok, data, reason``), because they cross processes and agents.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import attrs

from ._converter import wire

_sequence = itertools.count(1)


def _new_request_id() -> str:
    return f"pnd-{int(time.time() * 1000):x}-{next(_sequence)}"


@attrs.frozen(kw_only=True)
class Request:
    """What a suspended tool is waiting for (SPEC §10).

    ``kind`` is an open vocabulary: ``"authorization"``, ``"approval"``, ``"input"``,
    ``"question"``... ``expires_at`` is an RFC 3339 timestamp.
    """

    id: str = attrs.field(factory=_new_request_id)
    kind: str
    prompt: str
    url: str | None = None
    data: dict[str, Any] | None = None
    expires_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form: keys ``id, kind, prompt, url, data, expiresAt``, ``None`` left out."""
        out: dict[str, Any] = wire.unstructure(self)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Request:
        """Parse the wire form."""
        return wire.structure(data, cls)


@attrs.frozen
class Answer:
    """The resolution of a :class:`Request`; ``id`` echoes ``Request.id``.

    ``reason`` is advisory (``"declined"``, ``"cancelled"``, ``"expired"``) and set only
    when ``ok`` is false; the loop branches on ``ok`` alone.
    """

    id: str
    ok: bool
    data: dict[str, Any] | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form: keys ``id, ok, data, reason``, ``None`` left out."""
        out: dict[str, Any] = wire.unstructure(self)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        """Parse the wire form."""
        return wire.structure(data, cls)
