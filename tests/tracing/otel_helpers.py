"""An OpenTelemetry SDK provider per test, with the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, Tracer, set_tracer_provider
from opentelemetry.trace import TracerProvider as ApiTracerProvider


class Recorder:
    """A tracer provider whose finished spans a test reads back."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, (
            f"{len(found)} spans named {name!r}: {[s.name for s in self.spans()]}"
        )
        return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in spans if parent_of(s) == parent.context.span_id]


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# -- the global provider, for code that uses it (the agent runtime's in-process model,
# the mcp SDK's own spans) -----------------------------------------------------------
#
# The API lets a process set its global provider once. The tests install one switch
# provider, which hands out tracers that delegate to the provider of the test running
# (none between tests: the API's no-op one, whose spans are invalid and inject nothing).

_target: Any = NoOpTracerProvider()


class _SwitchTracer(Tracer):
    def __init__(self, name: str, version: str | None) -> None:
        self._name, self._version = name, version

    def _now(self) -> Tracer:
        found: Tracer = _target.get_tracer(self._name, self._version)
        return found

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._now().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._now().start_as_current_span(*args, **kwargs)


class _SwitchProvider(ApiTracerProvider):
    def get_tracer(
        self, name: str, version: str | None = None, *args: Any, **kwargs: Any
    ) -> Tracer:
        return _SwitchTracer(name, version)


_installed = False


@contextmanager
def global_recorder() -> Iterator[Recorder]:
    """A :class:`Recorder` behind the global tracer provider for the block."""
    global _target, _installed
    if not _installed:
        set_tracer_provider(_SwitchProvider())
        _installed = True
    rec = Recorder()
    _target = rec.provider
    try:
        yield rec
    finally:
        _target = NoOpTracerProvider()
