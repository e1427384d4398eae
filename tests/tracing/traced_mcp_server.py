"""The tests' everything MCP server over stdio, with an OpenTelemetry SDK provider that
appends each finished span to a JSON-lines file (argv[1]) as it ends."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import set_tracer_provider

OUT = Path(sys.argv.pop(1))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp_servers"))


class _Lines(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with OUT.open("a") as out:
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


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(_Lines()))
set_tracer_provider(provider)

from everything import main  # noqa: E402

main()
