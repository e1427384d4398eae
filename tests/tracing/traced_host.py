"""A Tesseron host on our SDK whose action ``traced`` makes a span of its own; its spans
are appended to argv[1] (JSON lines). ``python traced_host.py SPANS INSTANCES_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from span_lines import install

install(Path(sys.argv[1]))

from opentelemetry import trace  # noqa: E402

from toolnexus_trio.tesseron import ActionContext, TesseronApp  # noqa: E402


async def main(directory: str) -> None:
    app = TesseronApp("ours", "A traced host")

    @app.action("traced", "Makes a span of its own")
    async def traced(input: Any, ctx: ActionContext) -> str:
        with trace.get_tracer("shop-app").start_as_current_span("handler work"):
            await trio.sleep(0.01)
            return "traced"

    async with app.listen(manifest_dir=directory) as host:
        print(f"url={host.url}", flush=True)
        await trio.sleep_forever()


trio.run(main, sys.argv[2])
