"""``python -m toolnexus_trio host`` and ``... gateway``."""

from __future__ import annotations

import json
import sys

from ._todo import build_todo_app
from .tesseron import DEFAULT_MANIFEST_DIR, Claimed, Disconnected, Gateway, Welcome


async def run_host(port: int, publish: bool) -> int:
    """Serve the todo app until interrupted, printing its URL and claim codes."""
    app = build_todo_app()
    manifest_dir = DEFAULT_MANIFEST_DIR if publish else None
    async with app.listen(port=port, manifest_dir=manifest_dir) as host:
        print(f"todo host listening on {host.url}", flush=True)
        if publish:
            print("instance manifest published for gateways to discover", flush=True)
        print("waiting for a gateway (Ctrl-C to stop)", flush=True)
        async with host.events() as events:
            async for event in events:
                if isinstance(event, Welcome):
                    code = event.claim_code or "(resumed: no code needed)"
                    print(f"gateway connected; claim code: {code}", flush=True)
                elif isinstance(event, Claimed):
                    print(f"claimed by {event.agent.name}", flush=True)
                elif isinstance(event, Disconnected):
                    print("gateway disconnected; waiting for the next dial", flush=True)
    return 0


async def run_gateway(url: str) -> int:
    """Dial *url* and list the tools its actions would become; it does not claim."""
    async with Gateway() as gateway:
        try:
            session = await gateway.connect(url)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except (OSError, TimeoutError) as exc:  # ConnectionError included
            print(f"error: could not reach a Tesseron host at {url}: {exc}", file=sys.stderr)
            return 1
        print(f"connected to '{session.app.name}' ({session.app.id}), session {session.session_id}")
        print(f"claim code: {session.claim_code} (type it into your agent to claim the session)")
        for action in session.actions:
            print(f"\n{session.app.id}__{action.name}: {action.description}")
            print("  input schema: " + json.dumps(action.input_schema))
        resources = ", ".join(r.name for r in session.resources) or "(none)"
        print(f"\nresources: {resources}")
    return 0
