"""§10 suspension wire data: :class:`Request` and :class:`Answer` (pure data, no trio).

Their keys are fixed across every toolnexus port (``id, kind, prompt, url, data,
expiresAt`` and ``id, ok, data, reason``), because they cross processes and agents.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Final

import attrs

from ._converter import structure_strictly, wire

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
        # cattrs writes defaulted fields after required ones; the SPEC puts id first.
        out: dict[str, Any] = {"id": self.id, **wire.unstructure(self)}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Request:
        """Parse the wire form; a wrong shape or kind (a number for ``prompt``) is a
        :class:`ValueError` saying which field and why."""
        return structure_strictly(wire, data, cls)


def _check_ok(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not True and value is not False:
        kind = type(value).__name__
        raise TypeError(f"Answer.ok must be True or False, not {kind} {value!r:.40}")


@attrs.frozen
class Answer:
    """The resolution of a :class:`Request`; ``id`` echoes ``Request.id``.

    ``reason`` is advisory (``"declined"``, ``"cancelled"``, ``"expired"``) and set only
    when ``ok`` is false; the loop branches on ``ok`` alone.
    """

    id: str
    # Checked here too: an Answer built in code with ok="false" must not approve.
    ok: bool = attrs.field(validator=_check_ok)
    data: dict[str, Any] | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form: keys ``id, ok, data, reason``, ``None`` left out."""
        out: dict[str, Any] = wire.unstructure(self)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        """Parse the wire form. ``ok`` must be JSON ``true`` or ``false``: anything else
        (``"false"``, ``0``, ``[0]``...) is a :class:`ValueError`, never a truthy approval."""
        return structure_strictly(wire, data, cls)


DECLINE_REASONS: Final[tuple[str, ...]] = ("declined", "cancelled", "expired")
"""The reasons an :class:`Answer` with ``ok=False`` may give (SPEC §1)."""


def answer_output(id: str, output: str) -> Answer:
    """The answer that hands a suspended call its output: ``Answer(id, ok=True,
    data={"output": output})`` (toolnexus 0.21). A non-str *output* is a
    :class:`TypeError` (serialise it yourself: the host chooses the form)."""
    if not isinstance(output, str):
        raise TypeError(f"answer_output needs a str output, not {type(output).__name__}")
    return Answer(id, ok=True, data={"output": output})


def answer_declined(id: str, reason: str = "declined") -> Answer:
    """The answer that declines a suspended call: ``Answer(id, ok=False, reason=reason)``;
    *reason* is one of :data:`DECLINE_REASONS`, else a :class:`ValueError`."""
    if reason not in DECLINE_REASONS:
        allowed = ", ".join(DECLINE_REASONS)
        raise ValueError(f"answer_declined: reason must be one of {allowed}, not {reason!r}")
    return Answer(id, ok=False, reason=reason)
