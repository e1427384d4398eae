"""Tesseron error codes and :class:`ActionError`, the one exception that crosses the wire.

This module imports nothing else from the package and does not import trio.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

__all__ = ["ActionError", "TesseronErrorCode"]

_log = logging.getLogger("toolnexus_trio.tesseron")


class TesseronErrorCode(enum.IntEnum):
    """Every JSON-RPC error code the Tesseron protocol defines (protocol 1.2.0)."""

    PARSE_ERROR = -32700
    """The frame is not valid JSON."""
    INVALID_REQUEST = -32600
    """Valid JSON, but not a valid JSON-RPC envelope."""
    METHOD_NOT_FOUND = -32601
    """The method is not part of the protocol."""
    INVALID_PARAMS = -32602
    """The params do not have the expected shape (also: an unsupported elicitation schema)."""
    INTERNAL_ERROR = -32603
    """An unexpected exception; the cause stays local."""
    PROTOCOL_MISMATCH = -32000
    """The peers speak different major protocol versions."""
    CANCELLED = -32001
    """The gateway cancelled the invocation (``actions/cancel``)."""
    TIMEOUT = -32002
    """The invocation ran past its action's ``timeoutMs``."""
    ACTION_NOT_FOUND = -32003
    """Unknown action, or a resource that cannot be read or subscribed."""
    INPUT_VALIDATION = -32004
    """The input failed the action's schema; ``data`` lists the issues."""
    HANDLER_ERROR = -32005
    """A domain error raised by a handler, or a sample/elicit answer that failed to decode."""
    SAMPLING_NOT_AVAILABLE = -32006
    """The agent did not negotiate sampling."""
    ELICITATION_NOT_AVAILABLE = -32007
    """The agent did not negotiate elicitation."""
    SAMPLING_DEPTH_EXCEEDED = -32008
    """Nested sampling went too deep (``data`` is ``{depth, max}``)."""
    UNAUTHORIZED = -32009
    """Wrong claim code, unclaimed session, or a refused bind."""
    TRANSPORT_CLOSED = -32010
    """The connection closed while a request was pending, or before it was sent."""
    RESUME_FAILED = -32011
    """The gateway refused ``tesseron/resume``."""


def _as_code(code: int) -> TesseronErrorCode | int:
    try:
        return TesseronErrorCode(code)
    except ValueError:
        return code  # a peer may send a code outside the catalogue: keep it exactly


class ActionError(Exception):
    """An error with a Tesseron code, a message and optional JSON ``data``.

    It is the only exception whose details reach the wire: when a handler raises it,
    the invocation is answered with exactly this ``code``, ``message`` and ``data``.
    Any other exception becomes ``-32603 "Internal error"`` and its cause is only logged.
    Errors returned by the gateway (for example ``-32008 {depth, max}`` on a sample)
    reach the handler as an :class:`ActionError` with their ``data`` intact.
    """

    code: TesseronErrorCode | int
    """The error code; a :class:`TesseronErrorCode` unless the peer sent an unknown one."""
    message: str
    """The human-readable message sent on the wire."""
    data: Any
    """Optional JSON data sent as ``error.data`` (``None`` leaves it out)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = _as_code(code)
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"ActionError(code={int(self.code)}, message={self.message!r}, data={self.data!r})"

    def __str__(self) -> str:
        return f"[{int(self.code)}] {self.message}"

    @classmethod
    def handler(cls, message: str, data: Any = None) -> ActionError:
        """A domain error from a handler: ``HANDLER_ERROR`` (-32005)."""
        return cls(TesseronErrorCode.HANDLER_ERROR, message, data)

    @classmethod
    def protocol(cls, code: int, message: str, data: Any = None) -> ActionError:
        """An error with an explicit protocol *code*."""
        return cls(code, message, data)

    @classmethod
    def internal(cls, exc: BaseException | None = None) -> ActionError:
        """``INTERNAL_ERROR`` (-32603) with the fixed message ``"Internal error"``.

        The cause *exc* is logged here and chained as ``__cause__``; it is never sent.
        """
        if exc is not None:
            _log.error("internal error in a Tesseron handler", exc_info=exc)
        err = cls(TesseronErrorCode.INTERNAL_ERROR, "Internal error")
        err.__cause__ = exc
        return err

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object: ``{code, message, data?}``."""
        out: dict[str, Any] = {"code": int(self.code), "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


def invalid_params(message: str) -> ActionError:
    """An ``INVALID_PARAMS`` (-32602) error."""
    return ActionError(TesseronErrorCode.INVALID_PARAMS, message)


def method_not_found(method: str) -> ActionError:
    """The ``METHOD_NOT_FOUND`` (-32601) answer to an unknown request method."""
    return ActionError(TesseronErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")


def transport_closed() -> ActionError:
    """The ``TRANSPORT_CLOSED`` error a request gets when the connection is gone."""
    return ActionError(TesseronErrorCode.TRANSPORT_CLOSED, "Transport closed")
