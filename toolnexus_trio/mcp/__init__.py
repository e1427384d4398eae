"""MCP both ways on Trio: MCP servers as a tool source (SPEC §2) and a toolkit served
as an MCP server (SPEC §7C), with cancellation that reaches the other side.

Needs the optional extra (from a checkout, ``pip install -e '.[mcp]'``: the official
``mcp`` SDK and hypercorn). The config types below import without it; the names that talk MCP
(:class:`McpSource`, :func:`open_mcp`, :func:`list_mcp_tools`, :class:`McpServing`)
raise an :class:`ImportError` naming the extra when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ._config import DEFAULT_TIMEOUT_MS as DEFAULT_TIMEOUT_MS
from ._config import McpConfig as McpConfig
from ._config import McpConfigInput as McpConfigInput
from ._config import McpServerConfig as McpServerConfig
from ._config import mcp_tool_name as mcp_tool_name
from ._config import parse_mcp_config as parse_mcp_config
from ._config import sanitize as sanitize
from ._sdk import require_sdk
from ._types import CallInfo as CallInfo
from ._types import McpInventory as McpInventory
from ._types import MCPServeConfig as MCPServeConfig
from ._types import McpStatus as McpStatus
from ._types import McpToolInfo as McpToolInfo
from ._types import OnCall as OnCall

if TYPE_CHECKING:
    from ._serving import McpServing as McpServing
    from ._source import McpSource as McpSource
    from ._source import list_mcp_tools as list_mcp_tools
    from ._source import open_mcp as open_mcp

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "CallInfo",
    "MCPServeConfig",
    "McpConfig",
    "McpConfigInput",
    "McpInventory",
    "McpServerConfig",
    "McpServing",
    "McpSource",
    "McpStatus",
    "McpToolInfo",
    "OnCall",
    "list_mcp_tools",
    "mcp_tool_name",
    "open_mcp",
    "parse_mcp_config",
    "sanitize",
]


def __getattr__(name: str) -> Any:
    # The names that need the SDK, imported on first use (plain imports, so that the
    # import graph tests/test_layout.py reads sees them).
    if name not in {"McpSource", "list_mcp_tools", "open_mcp", "McpServing"}:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_sdk(f"toolnexus_trio.mcp.{name}")
    if name == "McpServing":
        from . import _serving

        value = _serving.McpServing
    else:
        from . import _source

        value = getattr(_source, name)
    globals()[name] = value  # later look-ups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


# Docs and tracebacks show the public module; annotations are resolved first, while
# the defining module is still known (as in the package facade).
for _name in __all__:
    _obj = globals().get(_name)
    if isinstance(_obj, type) and attrs.has(_obj):
        attrs.resolve_types(_obj)
    if getattr(_obj, "__module__", "").startswith("toolnexus_trio.mcp._"):
        _obj.__module__ = __name__
del _name, _obj
