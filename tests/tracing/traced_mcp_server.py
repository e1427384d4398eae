"""The tests' everything MCP server over stdio, its spans appended to argv[1] (JSON lines)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp_servers"))

from span_lines import install

install(Path(sys.argv.pop(1)))

from everything import main  # noqa: E402

main()
