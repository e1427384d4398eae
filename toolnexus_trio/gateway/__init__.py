"""The gateway: Tesseron host actions as toolnexus tools, and the same over MCP.

:class:`Gateway` dials Tesseron hosts (found through their instance manifests or given
a URL), claims them, and offers each app's actions as tools of a toolkit: progress,
cancellation, sampling and confirm/elicit travel both ways. ``python -m toolnexus_trio
gateway --mcp`` (``_mcp_front``, needs the ``mcp`` extra) serves every claimed app to
any MCP agent. The host side, the app the gateway talks to, is :mod:`toolnexus_trio.tesseron`.
"""

from ._gateway import Gateway as Gateway
from ._session import GatewayOptions as GatewayOptions
from ._session import GatewaySession as GatewaySession
from ._session import Sampler as Sampler

__all__ = ["Gateway", "GatewayOptions", "GatewaySession", "Sampler"]
