"""ACP (the Agent Client Protocol, by Zed Industries) both ways.

- An ACP agent as the loop's model: :class:`ACPOptions`, :func:`open_acp`
  (``acp.generate`` goes to :class:`~toolnexus_trio.InProcessOptions`), :class:`ACPError`.
- Our agent as an ACP agent, for editors: ``python -m toolnexus_trio acp`` (:func:`serve_acp`).

Not imported by ``import toolnexus_trio``: load it with ``import toolnexus_trio.acp``.
"""

from ._agent import serve_acp as serve_acp
from ._rpc import ACPError as ACPError
from ._source import ACPModel as ACPModel
from ._source import ACPOptions as ACPOptions
from ._source import ACPPermissionTimeoutError as ACPPermissionTimeoutError
from ._source import open_acp as open_acp

__all__ = [
    "ACPError",
    "ACPModel",
    "ACPOptions",
    "ACPPermissionTimeoutError",
    "open_acp",
    "serve_acp",
]
