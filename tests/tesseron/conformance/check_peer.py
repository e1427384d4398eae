"""Opt-in control run: our conformance runner against the PyPI ``tesseron`` 0.2.0 host.

Not part of the test suite (the suite never depends on the peer). It shows that the
runner accepts a known-good host, so a failure against our host is a library bug and
not a runner bug. The peer is used as a black box through its public API only.

Usage (from the repository root, in a venv that has ``tesseron==0.2.0``)::

    python tests/tesseron/conformance/check_peer.py

Each fixture is served by a child process (``check_peer.py --peer-host FIXTURE``)
following the same launch contract as ``conformance/host.py``; ``emits`` are published
when the runner reports the labelled step, via a ``after-step <label>`` stdin line.
Exit status is non-zero if any fixture fails; skips are listed separately.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SELF = Path(__file__).resolve()
HERE = SELF.parent
FIXTURE_ROOT = HERE / "fixtures"
SUPPORTED = frozenset({"actions", "streaming", "elicitation", "subscriptions", "resume"})
URL_PREFIX = "tesseron-conformance-url="


# -- child: the peer host (asyncio) ----------------------------------------------


async def _peer_host(fixture: dict[str, Any]) -> None:
    import fastjsonschema
    import tesseron

    spec = fixture.get("fixture", {})
    app = tesseron.TesseronApp(
        id="conformance",
        name="Conformance fixture app",
        origin="http://127.0.0.1",
        manifest=tesseron.ManifestPublication.disabled(),
    )
    for action in spec.get("actions", []):
        _peer_action(app, action, tesseron, fastjsonschema)
    emits: dict[str, list[tuple[Any, Any]]] = {}
    for resource in spec.get("resources", []):
        value = resource.get("value")

        async def read(value: Any = value) -> Any:
            return value

        handle = app.resource(
            resource["name"],
            read=read,
            description=resource.get("description", ""),
            subscribable=resource.get("subscribable", False),
        )
        for emit in resource.get("emits", []):
            emits.setdefault(emit["afterStep"], []).append((handle, emit["value"]))
    host = await app.listen()
    sys.stdout.write(f"{URL_PREFIX}{host.url}\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command, _, label = line.strip().partition(" ")
            if command == "after-step":
                for handle, value in emits.get(label, []):
                    await handle.publish(value)
    finally:
        await host.shutdown()


def _peer_action(app: Any, spec: dict[str, Any], tesseron: Any, fastjsonschema: Any) -> None:
    validate = None
    schema = spec.get("inputSchema")
    if schema is not None:
        check = fastjsonschema.compile(schema)

        def validate(raw: Any) -> list[Any]:
            try:
                check(raw)
            except fastjsonschema.JsonSchemaValueException as exc:
                return [tesseron.ValidationIssue(message=exc.message, path=list(exc.path))]
            return []

    async def handler(input: object, ctx: Any) -> Any:
        for update in spec.get("progress", []):
            await ctx.progress(percent=update.get("percent"), message=update.get("message"))
        confirmed = None
        if "confirms" in spec:
            confirmed = await ctx.confirm(spec["confirms"])
        if spec.get("blocksUntilCancelled"):
            await asyncio.Event().wait()
        if spec.get("returnsConfirmResult"):
            return {"confirmed": confirmed}
        return spec.get("returns")

    app.action(
        spec["name"],
        description=spec.get("description", ""),
        input_schema=schema,
        validate=validate,
    )(handler)


# -- parent: run every fixture ---------------------------------------------------


async def _check_one(path: Path) -> None:
    import trio
    from runner import load_fixture, run_fixture

    process = await trio.lowlevel.open_process(
        [sys.executable, str(SELF), "--peer-host", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin = process.stdin
    try:
        line = b""
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError("peer host exited before printing its URL")
            line += chunk
        url = line.decode().strip().removeprefix(URL_PREFIX)

        async def after_step(label: str) -> None:
            await stdin.send_all(f"after-step {label}\n".encode())

        with trio.fail_after(60):
            await run_fixture(load_fixture(path), url, after_step=after_step)
    finally:
        await stdin.aclose()
        with trio.move_on_after(5, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()


def main() -> int:
    """Run all fixtures against the peer; return the exit status."""
    if len(sys.argv) == 3 and sys.argv[1] == "--peer-host":
        asyncio.run(_peer_host(json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))))
        return 0
    import trio

    passed, failed, skipped = [], [], []
    for path in sorted(FIXTURE_ROOT.rglob("*.json")):
        fixture = json.loads(path.read_text(encoding="utf-8"))
        missing = [tag for tag in fixture.get("requires", []) if tag not in SUPPORTED]
        if missing:
            skipped.append(f"{fixture['id']} (requires {missing})")
            continue
        try:
            trio.run(_check_one, path)
        except Exception as exc:
            failed.append(f"{fixture['id']}: {exc}")
        else:
            passed.append(fixture["id"])
    for name in passed:
        print(f"PASS {name}")
    for name in skipped:
        print(f"SKIP {name}")
    for text in failed:
        print(f"FAIL {text}")
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
