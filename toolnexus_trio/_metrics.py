"""PLACEHOLDER (the lead replaces this module with the real registry at merge).

Only the interface is pinned here: :class:`PrometheusRegistry` takes the ``llm`` /
``tool`` / ``run`` event dicts that ``on_metric`` receives and renders Prometheus text.
This stand-in renders the request counter alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PrometheusRegistry:
    """Accumulates metric events; :meth:`render` gives the Prometheus text."""

    def __init__(self) -> None:
        self._llm: dict[tuple[str, str], int] = {}

    def observe(self, event: Mapping[str, Any]) -> None:
        """Count one ``llm`` / ``tool`` / ``run`` event."""
        if event.get("event") == "llm":
            key = (str(event.get("model", "")), str(event.get("status", "")))
            self._llm[key] = self._llm.get(key, 0) + 1

    def render(self) -> str:
        """The Prometheus text exposition of what was observed."""
        lines = [
            "# HELP toolnexus_llm_requests_total LLM requests by model and status.",
            "# TYPE toolnexus_llm_requests_total counter",
        ]
        for (model, status), count in sorted(self._llm.items()):
            series = f'model="{model}",status="{status}"'
            lines.append(f"toolnexus_llm_requests_total{{{series}}} {count}")
        return "\n".join(lines) + "\n"
