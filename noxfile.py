"""Developer sessions: ``nox -s tests lint typecheck docs`` (the CI set), and ``bench``,
``interop`` and ``newest`` on demand.

``nox -s newest`` installs the package (not editable, as a user would) with the newest
versions of its dependencies that the upper bounds in pyproject.toml allow
(``pip install --upgrade --upgrade-strategy eager``), prints them, imports every module
of the package, runs ``python -m toolnexus_trio demo`` and the model client's tests. It
is not in the CI set: on a fresh clone, ``tests`` resolves the newest allowed versions
too; ``newest`` is the check to run before widening a bound, or in a virtualenv kept
from an older run.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_external_run = True

PACKAGE = "toolnexus_trio"
XBENCH_PEERS = {  # bench scenario 14: virtualenv -> its packages (benchmarks/xframework)
    "xbench-toolnexus": ["toolnexus==0.21.0"],
    "xbench-pydantic-ai": ["pydantic-ai-slim[openai,mcp]"],
    "xbench-openai-agents": ["openai-agents"],
    "xbench-langgraph": ["langgraph", "langchain-mcp-adapters", "langchain-openai"],
}


def install(session: nox.Session, *args: str) -> None:
    """``session.install`` that shows pip's own progress (nox hides it by default, so a
    first run sat silent for a minute while it installed)."""
    session.log("installing " + " ".join(args) + " (pip's output follows)")
    session.install(*args, silent=False)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (pytest-trio, trio_mode), with the ``mcp`` extra so the MCP tests run
    the ``postgres`` extra so the PostgreSQL store tests run (against pgserver's binaries),
    and the ``docs`` extra so tests/test_docs.py can build the pages it checks."""
    install(session, "-e", ".[test,mcp,postgres,docs]")
    session.run("pytest", "-q", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    install(session, "ruff>=0.8")
    paths = [
        PACKAGE,
        "tests",
        "docs/examples",
        "conformance",
        "benchmarks",
        "interop",
        "noxfile.py",
    ]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    install(session, "-e", ".[test,dev,mcp,postgres]")
    session.run("mypy", "--strict", PACKAGE)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the Sphinx docs with warnings as errors (the MCP pages need the extra)."""
    install(session, "-e", ".[docs,mcp]")
    session.run("sphinx-build", "-W", "-q", "-b", "html", "docs", "docs/_build/html")


_IMPORT_EVERY_MODULE = """
import importlib, pkgutil, toolnexus_trio
names = [m.name for m in pkgutil.walk_packages(toolnexus_trio.__path__, "toolnexus_trio.")]
for name in names:
    if not name.endswith("__main__"):
        importlib.import_module(name)
print(f"imported {len(names)} modules of toolnexus_trio {toolnexus_trio.__version__}")
"""


@nox.session
def newest(session: nox.Session) -> None:
    """The package on the newest dependency versions its bounds allow: import every
    module, the demo, the model client's tests (see the module doc)."""
    install(session, "--upgrade", "--upgrade-strategy", "eager", ".[test,mcp,a2a,postgres]")
    session.run("python", "-m", "pip", "list", "--format=freeze")
    session.chdir(session.create_tmp())  # the installed package, not the checkout's
    session.run("python", "-c", _IMPORT_EVERY_MODULE)
    session.run("python", "-m", PACKAGE, "demo")
    root = Path(__file__).resolve().parent
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={root}",
        "-c",
        str(root / "pyproject.toml"),
        str(root / "tests" / "models"),
        str(root / "tests" / "test_no_private.py"),
        *session.posargs,
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against the peers (toolnexus 0.21.0, tesseron 0.2.0; scenario 14 also
    pydantic-ai, the OpenAI Agents SDK, LangGraph); not part of the tests.

    ``nox -s bench`` (about 3 minutes) or ``nox -s bench -- --quick``; one scenario:
    ``nox -s bench -- --only 14 --no-write``; writes
    benchmarks/results/latest.json, docs/performance.rst and docs/_static/bench.png.
    """
    install(session, "-e", ".", "toolnexus==0.21.0", "tesseron==0.2.0")
    install(session, "matplotlib")  # optional chart; the bench runs without it
    # Scenario 22 (tracing overhead): the API (the [otel] extra) and the SDK; scenario 23
    # (the AG-UI endpoint) serves on hypercorn (the [ui] extra).
    install(session, "-e", ".[otel,ui]", "opentelemetry-sdk>=1.30,<2")
    # Scenario 8 (MCP): toolnexus 0.21 pins mcp<2 (it gets 1.30 here, in the session's
    # virtualenv), while our [mcp] extra needs mcp>=2.3. So our MCP side runs from a
    # second virtualenv next to this one (.nox/bench-mcp-ours) and the peer from this one;
    # benchmarks/mcp.py starts each side with its own interpreter.
    ours = Path(session.virtualenv.location).parent / "bench-mcp-ours"
    ours_python = ours / "bin" / "python"
    if not ours_python.exists():
        session.run("python", "-m", "venv", str(ours))
    session.run(str(ours_python), "-m", "pip", "install", "-e", ".[mcp]", external=True)
    # Scenario 17 (end to end against other frameworks): each peer in a virtualenv of its
    # own next to this one (.nox/xbench-*), installed by package name.
    env = {"BENCH_MCP_OURS_PYTHON": str(ours_python)}  # the peer: this session's python
    for name, packages in XBENCH_PEERS.items():
        venv = Path(session.virtualenv.location).parent / name
        if not (venv / "bin" / "python").exists():
            session.run("python", "-m", "venv", str(venv))
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install"]
        session.run(*pip, *packages, external=True)
        env[f"BENCH_XF_{name.upper().replace('-', '_')}_PYTHON"] = str(venv / "bin" / "python")
    # Scenario 18 (store scaling on PostgreSQL and SQLite) needs the driver, and pgserver
    # for the PostgreSQL binaries, as in the tests.
    install(session, "-e", ".[postgres]", "pgserver>=0.1.4")
    # Our package is installed editable, so nothing compiled its bytecode (pip compiles a
    # wheel's, the peers' included); with PYTHONDONTWRITEBYTECODE set, every fresh process
    # of ours would compile it again. The cold figures compare installed packages.
    session.run(str(ours_python), "-m", "compileall", "-q", "toolnexus_trio", external=True)
    session.run("python", "-m", "benchmarks", *session.posargs, env=env)


@nox.session
def interop(session: nox.Session) -> None:
    """Our gateway against the PyPI tesseron 0.2.0 host (asyncio); our MCP source and
    ``serve`` against the npm MCP reference server (skipped without node/npm); our A2A
    against toolnexus 0.21 both ways; our spans over OTLP/HTTP into Arize Phoenix.

    Claim, invoke, cancel, sample, confirm, elicit; see interop/run_interop.py. Sampling
    and relayed elicitation; see interop/run_mcp_everything.py. A2A peer to peer; see
    interop/run_a2a_interop.py.
    """
    install(session, "-e", ".[mcp,a2a]", "tesseron==0.2.0")
    session.run("python", "interop/run_interop.py")
    session.run("python", "interop/run_mcp_everything.py")
    # A2A peer to peer with toolnexus 0.21 (interop/run_a2a_interop.py): the peer pins
    # mcp<2, so it gets a virtualenv of its own next to this one.
    peer = Path(session.virtualenv.location).parent / "interop-a2a-peer"
    peer_python = peer / "bin" / "python"
    if not peer_python.exists():
        session.run("python", "-m", "venv", str(peer))
    session.run(str(peer_python), "-m", "pip", "install", "toolnexus==0.21.0", external=True)
    session.run(
        "python",
        "interop/run_a2a_interop.py",
        env={"TOOLNEXUS_PEER_PYTHON": str(peer_python)},
    )
    # Our spans over OTLP/HTTP into a real collector, Arize Phoenix, read back from it
    # (interop/run_otlp_phoenix.py): Phoenix is large and pins its own dependencies, so
    # it gets a virtualenv of its own next to this one; this one gets the OTel SDK.
    install(session, "-e", ".[otel]", "opentelemetry-sdk>=1.30,<2",
            "opentelemetry-exporter-otlp-proto-http>=1.30,<2")  # fmt: skip
    phoenix = Path(session.virtualenv.location).parent / "interop-phoenix"
    if not (phoenix / "bin" / "phoenix").exists():
        session.run("python", "-m", "venv", str(phoenix))
        session.run(str(phoenix / "bin" / "python"), "-m", "pip", "install", "arize-phoenix",
                    external=True)  # fmt: skip
    session.run(
        "python",
        "interop/run_otlp_phoenix.py",
        env={"TOOLNEXUS_PHOENIX": str(phoenix / "bin" / "phoenix")},
    )
