"""Tesseron host SDK on Trio.

A Tesseron *host* is the application: it binds a loopback WebSocket, publishes an
instance manifest, and a gateway dials in, completes the handshake and invokes the
app's actions on behalf of an AI agent. Start with :class:`TesseronApp`.
"""

from ..gateway._gateway import Gateway as Gateway
from ..gateway._session import GatewayOptions as GatewayOptions
from ..gateway._session import GatewaySession as GatewaySession
from ..gateway._session import Sampler as Sampler
from ._app import DEFAULT_MANIFEST_DIR as DEFAULT_MANIFEST_DIR
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
from ._wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._wire import Agent as Agent
from ._wire import Capabilities as Capabilities
from ._wire import Claimed as Claimed
from ._wire import Welcome as Welcome
from ._ws import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES

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
