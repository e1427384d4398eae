"""The optional ``mcp`` SDK: one place that says how to get it when it is missing."""

from __future__ import annotations

from typing import Final

EXTRA_HINT: Final = "pip install -e '.[mcp]' in the toolnexus-trio checkout"


def require_sdk(feature: str) -> None:
    """Raise :class:`ImportError` naming the ``mcp`` extra when the SDK is not installed."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"{feature} needs the optional MCP support (the mcp SDK and hypercorn): {EXTRA_HINT}"
        ) from exc


def sdk_present() -> bool:
    """Whether the ``mcp`` SDK we use (2.x, which brings ``mcp_types``) is installed; a
    1.x SDK (another package's pin) does not count."""
    try:
        import mcp  # noqa: F401
        import mcp_types  # noqa: F401
    except ImportError:
        return False
    return True
