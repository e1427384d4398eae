"""The documentation keeps its promises: every Python snippet on every page runs, and
the API reference shows what a user types (real defaults, no attrs internals).

A page shows Python in one of two ways: ``.. literalinclude:: examples/NAME.py``, a
script that ``tests/test_examples.py`` runs, or ``.. code-block:: python``, a complete
program that this file extracts and runs as it is written. Literal blocks (``::``) are
for JSON, shell and the like; one that holds Python statements fails here.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.rst"))


def _blocks(text: str, opener: re.Pattern[str]) -> Iterator[tuple[int, dict[str, str], str]]:
    """The body after each line matching *opener*: (line number, options, dedented code)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not opener.search(line):
            continue
        indent = len(line) - len(line.lstrip())
        options: dict[str, str] = {}
        j = i + 1
        while j < len(lines) and lines[j].startswith(" ") and lines[j].strip().startswith(":"):
            _, key, value = lines[j].strip().split(":", 2)
            options[key] = value.strip()
            j += 1
        body: list[str] = []
        for follow in lines[j:]:
            if follow.strip() and len(follow) - len(follow.lstrip()) <= indent:
                break
            body.append(follow)
        width = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        code = "\n".join(b[width:] for b in body).strip("\n") + "\n"
        yield i + 1, options, code


CODE_BLOCK = re.compile(r"^\s*\.\. code-block:: python\s*$")
ANY_BLOCK = re.compile(r"^\s*\.\. code-block:: \w+\s*$")
LITERAL = re.compile(r"(?<!:)::\s*$")
FILE_NAME = re.compile(r"^[\w.-]+\.\w+$")


def _files(page: Path) -> dict[str, str]:
    """The files a page shows (a code-block captioned with a file name), by name."""
    blocks = _blocks(page.read_text("utf-8"), ANY_BLOCK)
    return {o["caption"]: code for _, o, code in blocks if FILE_NAME.match(o.get("caption", ""))}


# A captioned python block is a file another snippet uses (an MCP server, say), run by it.
SNIPPETS = [
    pytest.param(page, line, code, id=f"{page.name}:{line}")
    for page in PAGES
    for line, options, code in _blocks(page.read_text("utf-8"), CODE_BLOCK)
    if not FILE_NAME.match(options.get("caption", ""))
]

# What the FakeProvider that stands in for "a real model" answers: snippets that talk to
# a model read its URL from BASE_URL, as the quick start's program does.
MODEL_SCRIPT = [
    {"tool_calls": [{"name": "add", "arguments": {"a": 19, "b": 23}}]},
    {"text": "19 + 23 = 42"},
]


@pytest.fixture(scope="module")
def model_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A FakeProvider process (``python -m toolnexus_trio.testing serve``), cycling."""
    script = tmp_path_factory.mktemp("model") / "script.json"
    script.write_text(json.dumps(MODEL_SCRIPT), "utf-8")
    command = [sys.executable, "-m", "toolnexus_trio.testing", "serve", "--cycle"]
    server = subprocess.Popen(
        [*command, "--script", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


def _env(**extra: str) -> dict[str, str]:
    """This interpreter's environment, the checkout first on the path and its bin on PATH
    (a config's ``"command": ["python", ...]`` finds this interpreter)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    pythonpath = os.pathsep.join([str(ROOT), *sys.path])
    return {**os.environ, "PYTHONPATH": pythonpath, "PATH": path, **extra}


def test_there_are_snippets() -> None:
    pages = {page.name for page, *_ in (p.values for p in SNIPPETS)}
    assert {"index.rst", "quickstart.rst", "agents.rst"} <= pages


@pytest.mark.parametrize(("page", "line", "code"), SNIPPETS)
def test_snippet_runs(page: Path, line: int, code: str, tmp_path: Path, model_url: str) -> None:
    """The snippet, as written, is a program that exits 0, in a directory holding the
    files its page shows, and with BASE_URL naming a (fake) model."""
    for name, content in _files(page).items():
        (tmp_path / name).write_text(content, "utf-8")
    script = tmp_path / "snippet.py"
    script.write_text(code, "utf-8")
    env = _env(BASE_URL=model_url)
    done = subprocess.run(
        [sys.executable, str(script)],
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"{page.name}:{line}\n{done.stdout}\n{done.stderr}"
    # nor did anything it started fail (an MCP server's crash is only logged)
    assert "Traceback" not in done.stderr, f"{page.name}:{line}\n{done.stderr}"
    shown = _printed_after(page, line)
    if shown is not None:  # the page says what it prints: it does
        assert done.stdout == shown, f"{page.name}:{line}\n{done.stdout}"


def _printed_after(page: Path, line: int) -> str | None:
    """The output a page shows for the snippet at *line*: a literal block introduced by
    a paragraph ending in "prints::" right after the snippet, if there is one."""
    text = page.read_text("utf-8")
    lines = text.splitlines()
    for number, _, code in _blocks(text, CODE_BLOCK):
        if number != line:
            continue
        after = line + len(code.splitlines())
        rest = [x for x in lines[after:] if x.strip()]
        while rest and rest[0].startswith(" "):  # the rest of the snippet's body
            rest.pop(0)
        if rest and rest[0].rstrip().endswith("prints::"):
            start = lines.index(rest[0], after) + 1
            return next(code for n, _, code in _blocks(text, LITERAL) if n == start)
    return None


def _is_python(code: str) -> bool:
    """Whether a literal block holds Python statements (JSON parses as one expression)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(
        not isinstance(node, ast.Expr) or isinstance(node.value, (ast.Call, ast.Await))
        for node in tree.body
    )


def test_literal_blocks_hold_no_python() -> None:
    found = []
    for page in PAGES:
        text = page.read_text("utf-8")
        for line, _, code in _blocks(text, LITERAL):
            if text.splitlines()[line - 1].lstrip().startswith(".. "):
                continue  # a directive, not a literal block
            if _is_python(code):
                found.append(f"{page.name}:{line}")
    assert found == [], "Python in a literal block: make it a code-block that runs"


def test_included_python_is_a_tested_example() -> None:
    """Every ``literalinclude`` of Python names a script under docs/examples."""
    include = re.compile(r"^\s*\.\. literalinclude:: (\S+)")
    for page in PAGES:
        for match in map(include.match, page.read_text("utf-8").splitlines()):
            if match and match.group(1).endswith(".py"):
                target = (DOCS / match.group(1)).resolve()
                assert target.parent == DOCS / "examples" and target.is_file(), match.group(1)


@pytest.fixture(scope="module")
def built_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs built once with Sphinx (the ``docs`` extra), as ``nox -s docs`` does."""
    pytest.importorskip("sphinx")
    pytest.importorskip("furo")
    out = tmp_path_factory.mktemp("html")
    env = _env()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_reference_shows_real_defaults(built_html: Path) -> None:
    """attrs classes render with their real defaults, not ``attr_dict[...]`` or ``NOTHING``."""
    pages = sorted(built_html.glob("*.html"))
    assert any(p.name == "reference.html" for p in pages)
    leaks = [p.name for p in pages if re.search(r"attr_dict|\bNOTHING\b", p.read_text("utf-8"))]
    assert leaks == []
    reference = re.sub(r"<[^>]+>", "", (built_html / "reference.html").read_text("utf-8"))
    # a plain default, a factory's value, and keyword-only fields after a star
    assert "ToolHints(read_only=False" in reference
    assert "BuiltinsConfig(enabled=True, tools={}, base_dir=None, shell=None)" in reference


def test_one_install_story() -> None:
    """The package is installed from a checkout (``pip install -e '.[extra]'``): no page,
    example, error message or README names an index package that does not exist."""
    places = [ROOT / "README.md", *PAGES, *(DOCS / "examples").glob("*.py")]
    places += [*(ROOT / "toolnexus_trio").rglob("*.py"), *(ROOT / "interop").glob("*.py")]
    wrong = [str(p.relative_to(ROOT)) for p in places if "toolnexus-trio[" in p.read_text("utf-8")]
    assert wrong == []


def test_dir_of_the_package_shows_only_what_it_offers() -> None:
    """``dir(toolnexus_trio)``, a newcomer's first look, holds no typing helper."""
    import toolnexus_trio

    public = {name for name in dir(toolnexus_trio) if not name.startswith("_")}
    assert "TYPE_CHECKING" not in public
    assert {"tool", "create_toolkit", "create_client"} <= public


def test_performance_table_has_one_number_per_cell(tmp_path: Path) -> None:
    """The generated page (benchmarks/report.py) puts each figure in its own cell, and
    is what the generator makes of benchmarks/results/latest.json."""
    page = (DOCS / "performance.rst").read_text("utf-8")
    packed = re.compile(r"^\s+- -?[\d.,]+ / -?[\d.,]+ /", re.MULTILINE)
    assert packed.search(page) is None
    assert "Ours (median)" in page and "Ours p95" in page
    from benchmarks.report import refresh_tables

    copy = tmp_path / "performance.rst"
    copy.write_text(page, "utf-8")
    refresh_tables(ROOT / "benchmarks" / "results" / "latest.json", copy)
    assert copy.read_text("utf-8") == page


def test_readme_example_runs(tmp_path: Path) -> None:
    """The README's "A taste" program runs as written."""
    readme = (ROOT / "README.md").read_text("utf-8")
    code = readme.split("## A taste", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "taste.py"
    script.write_text(code, "utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The sum is 5\n"


def test_readme_and_docs_agree_on_the_jobs() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    index = (DOCS / "index.rst").read_text("utf-8")
    assert "three jobs" in readme and "three jobs" in index
    assert "two jobs" not in readme + index


def test_quickstart_run_session_against_its_script(tmp_path: Path) -> None:
    """The quick start's offline ``run``: its script.json served by the FakeProvider
    process, and ``run`` pointed at it, in a directory holding that script."""
    script = _files(DOCS / "quickstart.rst")["script.json"]
    (tmp_path / "script.json").write_text(script, "utf-8")
    command = [sys.executable, "-m", "toolnexus_trio.testing", "serve", "--cycle"]
    server = subprocess.Popen(
        [*command, "--script", "script.json"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        run = [sys.executable, "-m", "toolnexus_trio", "run", "--base-url", url]
        done = subprocess.run(
            [*run, "--style", "openai", "--model", "fake", "--once", "which JSON files?"],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=_env(),
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()
    assert done.returncode == 0, done.stderr
    assert "Let me look." in done.stdout
    assert "There is one JSON file here: script.json." in done.stdout
    assert "<- glob [ok]: script.json" in done.stderr
