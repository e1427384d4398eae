"""The built-in Prometheus registry behind ``client.metrics()`` (SPEC §8 "Observability").

:meth:`PrometheusRegistry.observe` takes the same event dicts that ``on_metric``
receives and only bumps numbers in dicts keyed by raw label values; all string work
happens in :meth:`PrometheusRegistry.render`, which runs per scrape, not per call.

The text matches the released toolnexus ports byte for byte (checked against
toolnexus 0.21.0 as a black box, pinned in ``tests/metrics_golden.prom``). Where the
SPEC's prose and the ports differ, we follow the ports: ``toolnexus_tool_calls_total``
carries a fourth label, ``pending``, so a suspended call is told apart from a finished
one.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Any, Final

logger = logging.getLogger("toolnexus_trio")

_BOUNDS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_LE: Final = ("0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf")
_INF_SLOT: Final = len(_BOUNDS)
_BOOL: Final = {True: "true", False: "false"}

DEFAULT_MAX_SERIES: Final = 1000
"""Default cap on distinct label sets per metric (tool names come from the model)."""


def _num(value: float) -> str:
    """A sample value as the ports print it: integral values without a fraction."""
    if isinstance(value, int):
        return str(int(value))  # int() also turns a bool into 0/1
    if math.isfinite(value):
        return str(int(value)) if value == int(value) else repr(value)
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def _escape(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Histogram:
    """Non-cumulative bucket counts (the last slot is ``+Inf`` only) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (_INF_SLOT + 1)
        self.total: float = 0

    def observe(self, seconds: float) -> None:
        # bisect_left finds the first bound >= seconds: `le` is inclusive. NaN fits
        # no finite bucket, only +Inf.
        self.counts[bisect_left(_BOUNDS, seconds) if seconds == seconds else _INF_SLOT] += 1
        self.total += seconds


class PrometheusRegistry:
    """Accumulates ``on_metric`` events and renders them as Prometheus text.

    Feed it with :meth:`observe` (for example ``on_metric=registry.observe``) and scrape
    :meth:`render`. Metrics, in this order: ``toolnexus_llm_requests_total{model,status}``,
    ``toolnexus_llm_tokens_total{type}``, ``toolnexus_llm_request_duration_seconds{model}``,
    ``toolnexus_tool_calls_total{tool,source,is_error,pending}``,
    ``toolnexus_tool_duration_seconds{tool}`` and ``toolnexus_run_errors_total{model}``;
    then, once an MCP server has asked for sampling (``sample`` events),
    ``toolnexus_mcp_sampling_requests_total{server,status}`` and
    ``toolnexus_mcp_sampling_tokens_total{server}``.

    Each metric keeps at most *max_series* label sets (tool names are chosen by the
    model, so a hostile one could otherwise grow memory without bound); observations
    for a new label set beyond that are dropped, counted in :attr:`dropped` and logged
    once per metric. Not thread-safe: observe and render from the Trio thread.
    """

    def __init__(self, *, max_series: int = DEFAULT_MAX_SERIES) -> None:
        if max_series < 1:
            raise ValueError("max_series must be at least 1")
        self.max_series = max_series
        self.dropped = 0
        """Observations dropped because their metric already had *max_series* series."""
        self._llm_requests: dict[tuple[Any, Any], int] = {}
        self._tokens: list[float] | None = None  # [prompt, completion] once an ok call is seen
        self._llm_seconds: dict[Any, _Histogram] = {}
        self._tool_calls: dict[tuple[Any, Any, bool, bool], int] = {}
        self._tool_seconds: dict[Any, _Histogram] = {}
        self._run_errors: dict[Any, int] = {}
        self._warned: set[str] = set()
        self._handlers: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "llm": self._observe_llm,
            "tool": self._observe_tool,
            "run": self._observe_run,
            "sample": self._observe_sample,
        }
        self._samples: dict[tuple[Any, Any], int] = {}
        self._sample_tokens: dict[Any, float] = {}
        # Issue 38: cache tokens, cost and fallback attempts; rendered only once seen,
        # so the pinned text of a client without them is unchanged.
        self._cache_tokens: list[float] | None = None  # [read, write]
        self._cost: dict[Any, float] = {}
        self._attempts: dict[tuple[Any, Any], int] = {}
        self._handlers["attempt"] = self._observe_attempt

    def observe(self, event: Mapping[str, Any]) -> None:
        """Record one ``on_metric`` event; other kinds (``progress``, ``log``) are ignored.

        - ``llm`` (``model``, ``status``, ``ms``, ``prompt_tokens``,
          ``completion_tokens``): one request, its duration, and, when ``status`` is
          ``"ok"``, its tokens (a failed call has no usage, so it adds no token series).
        - ``tool`` (``tool``, ``source``, ``is_error``, ``ms``, optional ``pending``):
          one call and its duration; ``is_error`` and ``pending`` count only when they
          are ``True`` itself.
        - ``run`` (``model``, optional ``error``): a run error when ``error`` is present
          and not ``None``. A run that ended ``cancelled``, ``pending`` or at
          ``max_turns`` carries no ``error``; a run timeout does (``"timeout"``).

        ``ms`` must be a real number (milliseconds); histograms observe ``ms / 1000``.
        """
        handler = self._handlers.get(event.get("event"))  # type: ignore[arg-type]
        if handler is not None:
            handler(event)

    def _observe_llm(self, event: Mapping[str, Any]) -> None:
        model = event.get("model")
        status = event.get("status")
        key = (model, status)
        requests = self._llm_requests
        if key in requests:
            requests[key] += 1
        elif self._room(requests, "toolnexus_llm_requests_total"):
            requests[key] = 1
        histogram = self._llm_seconds.get(model)
        if histogram is None:
            if not self._room(self._llm_seconds, "toolnexus_llm_request_duration_seconds"):
                return
            histogram = self._llm_seconds[model] = _Histogram()
        histogram.observe(event.get("ms", 0) / 1000)
        if status == "ok":
            tokens = self._tokens
            if tokens is None:
                tokens = self._tokens = [0, 0]
            tokens[0] += event.get("prompt_tokens") or 0
            tokens[1] += event.get("completion_tokens") or 0
            if "cache_read_tokens" in event or "cache_write_tokens" in event:
                cache = self._cache_tokens
                if cache is None:
                    cache = self._cache_tokens = [0, 0]
                cache[0] += event.get("cache_read_tokens") or 0
                cache[1] += event.get("cache_write_tokens") or 0
            cost = event.get("cost")
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                spent = self._cost
                if model in spent:
                    spent[model] += cost
                elif self._room(spent, "toolnexus_llm_cost_total"):
                    spent[model] = cost

    def observe_llm_ok(
        self, model: Any, ms: float, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """One successful ``llm`` event without cache counts nor cost, given as values:
        the loop's path when nobody else wants the event (no dict built per model call).
        Counts what :meth:`observe` counts for the same event."""
        key = (model, "ok")
        requests = self._llm_requests
        if key in requests:
            requests[key] += 1
        elif self._room(requests, "toolnexus_llm_requests_total"):
            requests[key] = 1
        histogram = self._llm_seconds.get(model)
        if histogram is None:
            if not self._room(self._llm_seconds, "toolnexus_llm_request_duration_seconds"):
                return
            histogram = self._llm_seconds[model] = _Histogram()
        histogram.observe(ms / 1000)
        tokens = self._tokens
        if tokens is None:
            tokens = self._tokens = [0, 0]
        tokens[0] += prompt_tokens or 0
        tokens[1] += completion_tokens or 0

    def _observe_attempt(self, event: Mapping[str, Any]) -> None:
        key = (event.get("model"), event.get("status"))
        attempts = self._attempts
        if key in attempts:
            attempts[key] += 1
        elif self._room(attempts, "toolnexus_llm_attempts_total"):
            attempts[key] = 1

    def _observe_tool(self, event: Mapping[str, Any]) -> None:
        self.observe_tool(
            event.get("tool"),
            event.get("source"),
            event.get("is_error") is True,
            event.get("pending") is True,
            event.get("ms", 0),
        )

    def observe_tool(
        self, name: Any, source: Any, is_error: bool, pending: bool, ms: float
    ) -> None:
        """One ``tool`` event given as values: the loop's path when nobody else wants the
        event (no dict is built per tool call)."""
        key = (name, source, is_error, pending)
        calls = self._tool_calls
        if key in calls:
            calls[key] += 1
        elif self._room(calls, "toolnexus_tool_calls_total"):
            calls[key] = 1
        histogram = self._tool_seconds.get(name)
        if histogram is None:
            if not self._room(self._tool_seconds, "toolnexus_tool_duration_seconds"):
                return
            histogram = self._tool_seconds[name] = _Histogram()
        histogram.observe(ms / 1000)

    def _observe_run(self, event: Mapping[str, Any]) -> None:
        if event.get("error") is None:
            return
        model = event.get("model")
        errors = self._run_errors
        if model in errors:
            errors[model] += 1
        elif self._room(errors, "toolnexus_run_errors_total"):
            errors[model] = 1

    def _observe_sample(self, event: Mapping[str, Any]) -> None:
        server = event.get("server")
        key = (server, event.get("status"))
        samples = self._samples
        if key in samples:
            samples[key] += 1
        elif self._room(samples, "toolnexus_mcp_sampling_requests_total"):
            samples[key] = 1
        tokens = event.get("tokens")
        if isinstance(tokens, int | float) and not isinstance(tokens, bool):
            spent = self._sample_tokens
            if server in spent:
                spent[server] += tokens
            elif self._room(spent, "toolnexus_mcp_sampling_tokens_total"):
                spent[server] = tokens

    def _render_samples(self, out: list[str]) -> None:
        name = "toolnexus_mcp_sampling_requests_total"
        _header(out, name, "MCP servers' sampling requests, by server and status.", "counter")
        _counter(
            out,
            name,
            [
                (f'server="{_escape(s)}",status="{_escape(st)}"', n)
                for (s, st), n in self._samples.items()
            ],
        )
        name = "toolnexus_mcp_sampling_tokens_total"
        _header(out, name, "Tokens answered to MCP servers' sampling requests.", "counter")
        _counter(out, name, [(f'server="{_escape(s)}"', n) for s, n in self._sample_tokens.items()])

    def _room(self, series: Mapping[Any, Any], metric: str) -> bool:
        """Whether *series* may take one more label set (the slow path of a new one)."""
        if len(series) < self.max_series:
            return True
        self.dropped += 1
        if metric not in self._warned:
            self._warned.add(metric)
            logger.warning(
                "toolnexus_trio: %s reached %d series; new label sets are dropped",
                metric,
                self.max_series,
            )
        return False

    def render(self) -> str:
        """The Prometheus text exposition (SPEC §8 pin), ending with a newline.

        Series within a metric are sorted by their rendered label string; before any
        activity only the ``# HELP`` / ``# TYPE`` lines appear.
        """
        out: list[str] = []
        _header(out, "toolnexus_llm_requests_total", "Total LLM requests.", "counter")
        _counter(
            out,
            "toolnexus_llm_requests_total",
            [
                (f'model="{_escape(m)}",status="{_escape(s)}"', n)
                for (m, s), n in self._llm_requests.items()
            ],
        )
        _header(out, "toolnexus_llm_tokens_total", "Total tokens, by type.", "counter")
        if self._tokens is not None:
            prompt, completion = self._tokens
            series: list[tuple[str, float]] = [
                ('type="prompt"', prompt),
                ('type="completion"', completion),
            ]
            if self._cache_tokens is not None:
                series += [
                    ('type="cache_read"', self._cache_tokens[0]),
                    ('type="cache_write"', self._cache_tokens[1]),
                ]
            _counter(out, "toolnexus_llm_tokens_total", series)
        _histogram(
            out,
            "toolnexus_llm_request_duration_seconds",
            "LLM request duration in seconds.",
            "model",
            self._llm_seconds,
        )
        _header(out, "toolnexus_tool_calls_total", "Total tool calls.", "counter")
        _counter(
            out,
            "toolnexus_tool_calls_total",
            [
                (
                    f'tool="{_escape(t)}",source="{_escape(s)}",'
                    f'is_error="{_BOOL[e]}",pending="{_BOOL[p]}"',
                    n,
                )
                for (t, s, e, p), n in self._tool_calls.items()
            ],
        )
        _histogram(
            out,
            "toolnexus_tool_duration_seconds",
            "Tool execution duration in seconds.",
            "tool",
            self._tool_seconds,
        )
        _header(out, "toolnexus_run_errors_total", "Total run errors.", "counter")
        _counter(
            out,
            "toolnexus_run_errors_total",
            [(f'model="{_escape(m)}"', n) for m, n in self._run_errors.items()],
        )
        if self._samples:  # only once an MCP server has sampled: the pinned text is unchanged
            self._render_samples(out)
        if self._cost:
            name = "toolnexus_llm_cost_total"
            _header(out, name, "Cost of LLM requests at the client's prices, by model.", "counter")
            _counter(out, name, [(f'model="{_escape(m)}"', c) for m, c in self._cost.items()])
        if self._attempts:
            name = "toolnexus_llm_attempts_total"
            _header(out, name, "Provider attempts of fallback and hedging, by model and status.",
                    "counter")  # fmt: skip
            _counter(
                out,
                name,
                [(f'model="{_escape(m)}",status="{_escape(st)}"', n)
                 for (m, st), n in self._attempts.items()],
            )  # fmt: skip
        out.append("")
        return "\n".join(out)


def _header(out: list[str], name: str, help_text: str, kind: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _counter(out: list[str], name: str, series: list[tuple[str, float]]) -> None:
    for labels, value in sorted(series, key=_first):
        out.append(f"{name}{{{labels}}} {_num(value)}")


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _histogram(
    out: list[str], name: str, help_text: str, label: str, series: Mapping[Any, _Histogram]
) -> None:
    _header(out, name, help_text, "histogram")
    rendered = sorted(((f'{label}="{_escape(v)}"', h) for v, h in series.items()), key=_first)
    for labels, histogram in rendered:
        cumulative = 0
        for le, count in zip(_LE, histogram.counts, strict=True):
            cumulative += count
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {cumulative}')
        out.append(f"{name}_sum{{{labels}}} {_num(histogram.total)}")
        out.append(f"{name}_count{{{labels}}} {cumulative}")
