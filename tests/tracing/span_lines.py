"""For a test's subprocess: a global OpenTelemetry SDK provider that appends each finished
span to a JSON-lines file as it ends (the test reads it back)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import set_tracer_provider


class _Lines(SpanExporter):
    def __init__(self, out: Path) -> None:
        self.out = out

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.out.open("a") as out:
            for s in spans:
                assert s.context is not None
                record = {
                    "name": s.name,
                    "kind": s.kind.name,
                    "trace_id": s.context.trace_id,
                    "span_id": s.context.span_id,
                    "parent": s.parent.span_id if s.parent is not None else None,
                    "attributes": dict(s.attributes or {}),
                }
                out.write(json.dumps(record) + "\n")
        return SpanExportResult.SUCCESS


def install(out: Path) -> None:
    """Make the global provider one that writes its spans to *out*."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_Lines(out)))
    set_tracer_provider(provider)
