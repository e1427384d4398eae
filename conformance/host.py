"""Conformance host: serve one Tesseron conformance fixture's app with toolnexus_trio.

Launch contract (as the official runner expects of a host command):

- the fixture path comes from the environment variable ``TESSERON_CONFORMANCE_FIXTURE``;
- the fixture's actions and resources are registered through the public
  :mod:`toolnexus_trio.tesseron` API (see ``fixture_app.py``); anything that cannot be
  served is refused at launch: exit status 2 and a message on stderr;
- the host listens on ``127.0.0.1:0`` without publishing an instance manifest and
  prints exactly one stdout line, ``tesseron-conformance-url=ws://127.0.0.1:<port>/``,
  before anything else; diagnostics go to stderr only;
- it exits (status 0) when its stdin closes.

Run: ``TESSERON_CONFORMANCE_FIXTURE=path/to/fixture.json python conformance/host.py``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import trio

# Sibling module: the script's directory is on sys.path when run as a script.
from fixture_app import FixtureApp, UnsupportedFixture, build_fixture_app, missing_capabilities

ENV_FIXTURE = "TESSERON_CONFORMANCE_FIXTURE"
URL_PREFIX = "tesseron-conformance-url="

_log = logging.getLogger("conformance.host")


async def _wait_for_stdin_eof() -> None:
    # A dup so closing our stream leaves the process's fd 0 alone.
    async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stdin:
        while await stdin.receive_some(4096):
            pass


async def serve(fixture_app: FixtureApp) -> None:
    """Serve the fixture's app until stdin closes."""
    async with fixture_app.app.listen(host="127.0.0.1", port=0, manifest_dir=None) as host:
        sys.stdout.write(f"{URL_PREFIX}{host.url}\n")
        sys.stdout.flush()
        _log.info("serving %s at %s", fixture_app.fixture_id, host.url)
        await _wait_for_stdin_eof()
    # Report (not enforce: the runner owns the verdict) a forbidden handler call.
    try:
        fixture_app.check()
    except AssertionError as exc:
        _log.error("%s", exc)


def main() -> int:
    """Entry point; returns the process exit status."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    path = os.environ.get(ENV_FIXTURE)
    if not path:
        print(f"conformance host: set {ENV_FIXTURE} to a fixture file", file=sys.stderr)
        return 2
    try:
        fixture = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(fixture, dict):
            raise UnsupportedFixture(f"{path}: a fixture is a JSON object")
        missing = missing_capabilities(fixture)
        if missing:
            raise UnsupportedFixture(f"{fixture.get('id', path)}: unsupported capability {missing}")
        fixture_app = build_fixture_app(fixture)  # refuses before anything binds
    except (OSError, ValueError, UnsupportedFixture) as exc:
        print(f"conformance host: refusing fixture: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(serve, fixture_app)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
