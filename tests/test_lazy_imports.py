"""What ``import toolnexus_trio`` leaves for first use: the sub-agent runtime, the judge
(SPEC §8B, imported as ``toolnexus_trio.judge``), PyYAML
(``SKILL.md`` frontmatter) and RE2 (``grep``/``glob``), none of which a process that only
runs a loop needs; each name still works the moment it is used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import toolnexus_trio
import toolnexus_trio.agents

DEFERRED = ("toolnexus_trio.agents", "toolnexus_trio.judge", "yaml", "re2")


def loaded_after(code: str) -> list[str]:
    """Which of :data:`DEFERRED` a fresh interpreter has loaded after running *code*."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {DEFERRED!r} if m in sys.modules]))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_importing_the_package_loads_none_of_them() -> None:
    assert loaded_after("import toolnexus_trio") == []
    assert loaded_after("from toolnexus_trio import create_client, open_toolkit") == []


def test_an_agent_name_loads_the_runtime_on_first_use() -> None:
    assert loaded_after("from toolnexus_trio import Agent") == ["toolnexus_trio.agents"]


@pytest.mark.parametrize(
    "name", ["Agent", "AgentDef", "Budget", "TaskResult", "agent", "open_agent_runtime"]
)
def test_the_lazy_names_are_the_runtimes_own(name: str) -> None:
    assert getattr(toolnexus_trio, name) is getattr(toolnexus_trio.agents, name)
    assert name in dir(toolnexus_trio)
    assert name in toolnexus_trio.__all__


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Agnet'"):
        _ = toolnexus_trio.Agnet  # type: ignore[attr-defined]


def test_a_skill_and_a_search_load_their_parsers_when_used() -> None:
    code = (
        "from toolnexus_trio.skills._frontmatter import parse\n"
        "assert parse('---\\nname: x\\ndescription: y\\n---\\nbody').name == 'x'\n"
        "from toolnexus_trio.builtins._search import _re2_compile, _re2_options\n"
        "_re2_compile('a+', _re2_options())\n"
    )
    assert sorted(loaded_after(code)) == ["re2", "yaml"]


def test_the_command_line_loads_the_tesseron_family_only_for_its_commands() -> None:
    # ``serve --stdio`` and ``gateway --mcp`` are spawned by an MCP client for every
    # session: the start-up they pay is the command line's imports (issue 39).
    family = ("toolnexus_trio.gateway", "toolnexus_trio.tesseron")
    probe = (
        "import json, sys\nimport toolnexus_trio.cli\n"
        f"print(json.dumps([m for m in {family!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
    from toolnexus_trio.cli import _commands

    assert callable(_commands.run_host) and callable(_commands.run_gateway)


HTTP_STACK = ("httpx2", "httpcore2", "h11", "h2", "toolnexus_trio.models")


def _loaded(code: str, names: tuple[str, ...]) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_the_http_stack_waits_for_a_model_or_a_fetch() -> None:
    # A toolkit, the builtins and the command line's start-up (serve --stdio, gateway
    # --mcp) never load the HTTP stack: only a model client, webfetch, http_tool or an
    # A2A agent do (issue 39).
    code = (
        "import toolnexus_trio, toolnexus_trio.cli\n"
        "from toolnexus_trio import BuiltinsConfig, Toolkit, open_toolkit\n"
        "from toolnexus_trio.builtins import builtin_tools\n"
    )
    assert _loaded(code, HTTP_STACK) == []
    assert _loaded("from toolnexus_trio import create_client", HTTP_STACK) == list(HTTP_STACK)


@pytest.mark.parametrize("name", ["ClientOptions", "ErrorInfo", "create_client", "http_tool"])
def test_the_http_names_are_their_modules_own(name: str) -> None:
    import toolnexus_trio.http_tools
    import toolnexus_trio.models

    home = toolnexus_trio.http_tools if name == "http_tool" else toolnexus_trio.models
    assert getattr(toolnexus_trio, name) is getattr(home, name)
    assert name in dir(toolnexus_trio)
    assert name in toolnexus_trio.__all__
    assert getattr(toolnexus_trio, name).__module__ in (
        "toolnexus_trio",
        "toolnexus_trio.http_tools",
    )


def _loaded(code: str, names: tuple[str, ...]) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {names!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


SERVE_NEVER = ("toolnexus_trio.loop", "toolnexus_trio.stores", "sqlite3")
"""What a process that only serves tools (``serve --stdio``, whose start an MCP client
waits for every session) does not load: the agent loop and the stores (issue 39)."""


def test_the_package_and_the_command_line_leave_the_loop_and_the_stores() -> None:
    assert _loaded("import toolnexus_trio", SERVE_NEVER) == []
    assert _loaded("import toolnexus_trio.cli._main", SERVE_NEVER) == []


def test_a_loop_name_loads_the_loop_and_shows_the_facade_module() -> None:
    code = (
        "from toolnexus_trio import Client, RunResult, SqliteConversationStore\n"
        "assert Client.__module__ == RunResult.__module__ == 'toolnexus_trio'\n"
        "assert SqliteConversationStore.__module__ == 'toolnexus_trio'\n"
    )
    assert _loaded(code, SERVE_NEVER) == list(SERVE_NEVER)
