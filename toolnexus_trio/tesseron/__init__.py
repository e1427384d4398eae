"""Tesseron host SDK on Trio.

A Tesseron *host* is the application: it binds a loopback WebSocket, publishes an
instance manifest, and a gateway dials in, completes the handshake and invokes the
app's actions on behalf of an AI agent. Start with :class:`TesseronApp`.

The gateway side lives in :mod:`toolnexus_trio.gateway`; its four names
(:class:`Gateway`, :class:`GatewayOptions`, :class:`GatewaySession`, :class:`Sampler`)
are re-exported here too, loaded on first use so that the host never imports the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._app import ResourceHandle as ResourceHandle
from ._app import TesseronApp as TesseronApp
from ._context import ActionContext as ActionContext
from ._context import ElicitRequest as ElicitRequest
from ._context import LogEntry as LogEntry
from ._context import SampleRequest as SampleRequest
from ._errors import ActionError as ActionError
from ._errors import TesseronErrorCode as TesseronErrorCode
from ._host import Disconnected as Disconnected
from ._host import HandshakeFailed as HandshakeFailed
from ._host import HostEvent as HostEvent
from ._host import TesseronHost as TesseronHost
from ._manifest import DEFAULT_MANIFEST_DIR as DEFAULT_MANIFEST_DIR
from ._wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._wire import Agent as Agent
from ._wire import Capabilities as Capabilities
from ._wire import Claimed as Claimed
from ._wire import Welcome as Welcome
from ._ws import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from ..gateway import Gateway as Gateway
    from ..gateway import GatewayOptions as GatewayOptions
    from ..gateway import GatewaySession as GatewaySession
    from ..gateway import Sampler as Sampler

__all__ = [
    "DEFAULT_MANIFEST_DIR",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "ActionContext",
    "ActionError",
    "Agent",
    "Capabilities",
    "Claimed",
    "Disconnected",
    "ElicitRequest",
    "Gateway",
    "GatewayOptions",
    "GatewaySession",
    "HandshakeFailed",
    "HostEvent",
    "LogEntry",
    "ResourceHandle",
    "SampleRequest",
    "Sampler",
    "TesseronApp",
    "TesseronErrorCode",
    "TesseronHost",
    "Welcome",
]


def __getattr__(name: str) -> Any:
    # The gateway's names, re-exported for old imports; loaded lazily because the
    # gateway imports the host's wire modules (this package), never the other way.
    if name in {"Gateway", "GatewayOptions", "GatewaySession", "Sampler"}:
        from .. import gateway

        value = getattr(gateway, name)
        globals()[name] = value  # later look-ups skip this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
