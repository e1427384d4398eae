"""``glob`` and ``grep``: glob syntax, skipped files, per-line anchors, cancel mid-walk,
hostile patterns (linear time on RE2, clear errors for what RE2 cannot do)."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from toolnexus_trio import ToolContext, ToolkitOptions, ToolResult, create_toolkit
from toolnexus_trio.builtins import BuiltinsConfig, _search
from toolnexus_trio.builtins._search import GlobMatcher


async def _call(
    base: Path, name: str, args: dict[str, Any], ctx: ToolContext | None = None
) -> ToolResult:
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
    return await toolkit.execute(name, args, ctx)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("**/a.py", "xa.py", False),
        ("src/**", "src/x/y", True),
        ("src/**/*.py", "src/a.py", True),
        ("src/*", "src/x/y", False),
        ("*.{ts,tsx}", "deep/a.tsx", True),
        ("*.{ts,tsx}", "a.js", False),
        ("{a,b{c,d}}.txt", "bd.txt", True),
        ("[abc].txt", "b.txt", True),
        ("[!abc].txt", "b.txt", False),
        ("[!abc].txt", "d.txt", True),
        ("[a-c]?.txt", "bz.txt", True),
        ("?", "/", False),
        ("[abc", "[abc", True),  # unterminated: literal
        ("{a,b", "{a,b", True),  # unterminated: literal
        ("a+(b).txt", "a+(b).txt", True),
        ("[&~|]x", "&x", True),  # no FutureWarning from set-operation syntax
        ("*.PY", "a.py", False),
    ],
)
def test_glob_syntax(pattern: str, path: str, expected: bool) -> None:
    assert GlobMatcher(pattern).matches(path, path.rsplit("/", 1)[-1]) is expected


def _naive_grep(pattern: str, files: dict[str, str]) -> list[str]:
    regex = re.compile(pattern)
    out = []
    for rel in sorted(files):
        text = files[rel].replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        out += [f"{rel}:{n}:{line}" for n, line in enumerate(lines, 1) if regex.search(line)]
    return out


PATTERNS = [
    "foo", "^foo", "foo$", "^$", "\\Afoo", "foo\\Z", "foo\\z", "\\bfoo\\b", "\\Bo",
    "o\\s+f", "(?s)o.f", "(?m)^f", "(?-m:^f)", "(?i-m:O$)", "[^x]foo", "[^x]*o", "f\\W",
    "^\\s*$", "o*", "(?i)FOO", "x$|^f", "o{2}", "(?:fo)+", "[$^]", "\\Q^f\\E|f",
]  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="fo x\n\r\t^", max_size=30), min_size=1, max_size=4),
    pattern=st.sampled_from(PATTERNS),
)
def test_grep_matches_a_line_by_line_search(
    tmp_path_factory: pytest.TempPathFactory, texts: list[str], pattern: str
) -> None:
    # One RE2 pass over the whole file gives what Python's re gives line by line, for
    # patterns both dialects read alike (RE2's ^ $ \A \z are made line anchors).
    root = tmp_path_factory.mktemp("grep")
    files = {f"f{i}.txt": text for i, text in enumerate(texts)}
    for rel, text in files.items():
        (root / rel).write_bytes(text.encode())
    found = _search._grep(
        str(root), _search._compile_grep(pattern), None, 10_000, threading.Event()
    )
    python = pattern.replace("\\z", "\\Z").replace("\\Q^f\\E", "\\^f")
    assert found == _naive_grep(python, files)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("\\Afoo", "x\nfoo\n"),  # each line is a whole string
        ("foo\\Z", "foo\nx\n"),
        ("foo\\z", "foo\nx\n"),
        ("(?-m:^f)", "x\nf\n"),
        ("(?i-m:^F)", "x\nf\n"),
        ("x[^y]*z", "x\nz\nxz\n"),  # no match reaches over a newline
        ("(?s)x.z", "x\nz\nx-z\n"),
        ("^$", "a\n\nb\n"),  # an empty line, but not the end after the final newline
    ],
)
def test_grep_anchors_and_classes_stay_within_a_line(
    tmp_path: Path, pattern: str, text: str
) -> None:
    (tmp_path / "f.txt").write_text(text)
    found = _search._grep(
        str(tmp_path), _search._compile_grep(pattern), None, 100, threading.Event()
    )
    assert found == _naive_grep(pattern.replace("\\z", "\\Z"), {"f.txt": text}) != []


async def test_grep_skips_binary_undecodable_and_huge_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.txt").write_text("needle\n")
    (tmp_path / "b.bin").write_bytes(b"needle\x00\x01")
    (tmp_path / "c.latin1").write_bytes("needle café\n".encode("latin-1"))
    (tmp_path / "d.txt").write_text("needle " * 5)
    monkeypatch.setattr(_search, "MAX_FILE_BYTES", 20)
    for pattern in ("needle", "need+le"):  # the literal path and the regex path
        result = await _call(tmp_path, "grep", {"pattern": pattern})
        assert result == ToolResult.ok("a.txt:1:needle", {"count": 1})


async def test_glob_and_grep_never_follow_symlinks_or_enter_skipped_dirs(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "node_modules").mkdir(parents=True)
    (base / "node_modules/x.txt").write_text("hit\n")
    (base / ".git").mkdir()
    (base / ".git/x.txt").write_text("hit\n")
    (base / "ok.txt").write_text("hit\n")
    (tmp_path / "outside.txt").write_text("hit\n")
    (base / "out").symlink_to(tmp_path)
    (base / "link.txt").symlink_to(tmp_path / "outside.txt")
    os.mkfifo(base / "fifo.txt")  # reading it would block: only regular files are searched
    with trio.fail_after(5):
        assert (await _call(base, "glob", {"pattern": "**"})).output == "ok.txt"
        assert (await _call(base, "grep", {"pattern": "hit"})).output == "ok.txt:1:hit"


async def test_grep_stops_at_the_limit_without_reading_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(50):
        (tmp_path / f"{i:02}.txt").write_text("x\nx\n")
    opened: list[str] = []
    real_open = open

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_search, "open", counting_open, raising=False)
    result = await _call(tmp_path, "grep", {"pattern": "x", "limit": 3})
    assert result == ToolResult.ok("00.txt:1:x\n00.txt:2:x\n01.txt:1:x", {"count": 3})
    assert len(opened) == 2


@pytest.fixture
def gated_scandir(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """os.scandir in the search module, blocked until ``gate`` is set; counts calls."""
    state: dict[str, Any] = {"gate": threading.Event(), "calls": 0, "entered": threading.Event()}
    real = os.scandir

    def scandir(path: Any) -> Any:
        state["calls"] += 1
        state["entered"].set()
        state["gate"].wait(10)
        return real(path)

    monkeypatch.setattr(_search.os, "scandir", scandir)
    yield state
    state["gate"].set()


@pytest.mark.parametrize("name", ["glob", "grep"])
async def test_cancel_mid_walk_returns_at_once_and_the_walk_stops(
    tmp_path: Path, gated_scandir: dict[str, Any], name: str
) -> None:
    for i in range(20):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}/f.txt").write_text("x\n")
    ctx = ToolContext()
    result: list[ToolResult] = []

    async def call() -> None:
        result.append(await _call(tmp_path, name, {"pattern": "*" if name == "glob" else "x"}, ctx))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.to_thread.run_sync(gated_scandir["entered"].wait)
            ctx.cancel.cancel()  # the walk is stuck in scandir: the call returns anyway
    assert result == [ToolResult.error("cancelled")]
    calls = gated_scandir["calls"]
    gated_scandir["gate"].set()
    await trio.sleep(0.2)  # let the abandoned thread run on, if it would
    assert gated_scandir["calls"] == calls  # it saw the stop flag: no further directory


async def test_bad_patterns(tmp_path: Path) -> None:
    invalid = await _call(tmp_path, "grep", {"pattern": "a{2,1}"})
    assert invalid == ToolResult.error(
        "grep: invalid regex: invalid repetition size: {2,1} (RE2 allows at most 1000 "
        "repetitions, nesting included)"
    )
    bad_range = ToolResult.error(
        "glob: invalid glob pattern '[z-a]': invalid character class range: z-a"
    )
    assert await _call(tmp_path, "glob", {"pattern": "[z-a]"}) == bad_range
    bad_include = await _call(tmp_path, "grep", {"pattern": "x", "include": "[z-a]"})
    assert bad_include == ToolResult.error(
        "grep: invalid glob pattern '[z-a]': invalid character class range: z-a"
    )


NO_BACKTRACKING = "(grep uses RE2 syntax: no lookaround or backreferences)"


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("(a)\\1", f"invalid escape sequence: \\1 {NO_BACKTRACKING}"),
        ("foo(?=bar)", f"invalid perl operator: (?= {NO_BACKTRACKING}"),
        ("(?<!x)foo", f"invalid perl operator: (?<! {NO_BACKTRACKING}"),
        ("a++", "bad repetition operator: ++ (RE2 allows at most 1000 repetitions, nesting "
                "included)"),
        ("((a{100}){100}){100}", "invalid repetition size: {100} (RE2 allows at most 1000 "
                                 "repetitions, nesting included)"),
        ("\\pL{1000}" * 4, "pattern too large - compile failed (RE2 compiles a pattern "
                             "into at most 8 MiB)"),
        ("x\\Cy", "\\C (any byte) is not supported"),
        ("\udc80", "the pattern is not valid Unicode (a lone surrogate)"),
    ],
)  # fmt: skip
async def test_what_only_backtracking_could_do_is_a_clear_error(
    tmp_path: Path, pattern: str, error: str
) -> None:
    (tmp_path / "f.txt").write_text("foobar\n")
    result = await _call(tmp_path, "grep", {"pattern": pattern})
    assert result == ToolResult.error(f"grep: invalid regex: {error}")


# A pattern or glob that makes a backtracking engine retry exponentially (or with a high
# power of the length) many ways: each of these took longer than this test's guard with
# Python's re, which also held the GIL, so not even a cancel could stop it.
HOSTILE = [
    ("grep", {"pattern": "(a+)+$"}, "a" * 26 + "!\n" + "a" * 100_000 + "!\nxaaa\n", 1),
    ("grep", {"pattern": "^(a|aa)+$"}, "a" * 5_000 + "!\n" + "a" * 64 + "\n", 1),
    ("grep", {"pattern": "(x+x+)+y"}, "x" * 10_000 + "\nxxy\n", 1),
    ("grep", {"pattern": "(.*a){12}b"}, "a" * 10_000 + "\n", 0),
    ("glob", {"pattern": "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b"}, None, 0),
    ("grep", {"pattern": "x", "include": "{*a,*a}{*a,*a}{*a,*a}{*a,*a}*a*a*a*a*a*b"}, None, 0),
]  # fmt: skip

_HOSTILE_CHILD = """
import json, sys, tempfile, trio
from pathlib import Path
from toolnexus_trio import ToolkitOptions, create_toolkit
from toolnexus_trio.builtins import BuiltinsConfig

async def main():
    tool, args, text = json.loads(sys.argv[1])
    base = Path(tempfile.mkdtemp())
    (base / ("a" * 200)).write_text("x\\n")  # a long name for the glob cases
    if text is not None:
        (base / "f.txt").write_text(text)
    toolkit = await create_toolkit(ToolkitOptions(builtins=BuiltinsConfig(base_dir=base)))
    result = await toolkit.execute(tool, args)
    print(json.dumps([result.is_error, result.metadata]))

trio.run(main)
"""


@pytest.mark.parametrize(("tool", "args", "text", "count"), HOSTILE)
async def test_hostile_patterns_finish(
    tool: str, args: dict[str, Any], text: str | None, count: int
) -> None:
    # In a child process: were the matching to backtrack, it would hold the GIL and this
    # test could not even time out; the guard is a hang guard, not a speed check.
    argv = [sys.executable, "-c", _HOSTILE_CHILD, json.dumps([tool, args, text])]
    with trio.fail_after(120):
        done = await trio.run_process(argv, capture_stdout=True, check=False)
    assert done.returncode == 0
    assert json.loads(done.stdout) == [False, {"count": count}]
