"""Every script in docs/examples runs and exits 0, and so does the demo command.

Examples that serve (they print a URL and wait for a gateway) carry the marker
``EXAMPLE_SERVES = True`` and are driven by their own end-to-end tests instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolnexus_trio.__main__ as cli

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
SCRIPTS = sorted(
    p for p in EXAMPLES.glob("*.py") if "EXAMPLE_SERVES = True" not in p.read_text("utf-8")
)


def test_the_seed_examples_are_present() -> None:
    names = {p.name for p in SCRIPTS}
    assert {
        "seed_1_cancellation.py",
        "seed_2_timeout.py",
        "seed_3_answer.py",
        "seed_4_call_id.py",
    } <= names


# What each example prints for its reader, checked here: the examples hold no asserts of
# their own, and every example is listed (test_every_example_is_checked).
EXPECTED: dict[str, list[str]] = {
    "durable_recover.py": [
        "process A was killed inside charge(2); the ledger says:\n  charged 1, charged 2\n",
        "process B recovered job-7: done\n",
        "the model saw: invoice 1 charged; in doubt: the call of 'charge' was running",
        "the ledger still says: charged 1, charged 2\n",  # neither charge ran twice
    ],
    "durable_tree_recover.py": [
        "process A was killed inside the payer's charge(2); the ledger says:\n"
        "  charged 1, charged 2\n",
        "process B recovered the tree job-8: done\n",
        "the lead says: the payer reports: invoice 1 charged; in doubt: the call of 'charge'",
        "the ledger still says: charged 1, charged 2\n",  # neither charge ran twice
    ],
    "seed_1_cancellation.py": [
        "calling slow (it waits five seconds)\ncancelling the call's token\n",
        "slow returned 'cancelled' (an error: True)\n",
    ],
    "seed_2_timeout.py": [
        "with a 20 ms budget: 'timed out after 20ms' (an error: True)\n",
        "with no budget: 'finished' (an error: False)\n",
    ],
    "seed_3_answer.py": [
        "wait_for: the tool asks 'Proceed?' (approval); approving\n",
        "tool confirm: confirmed\nmodel: tool said: confirmed\n",
    ],
    "seed_4_call_id.py": [
        "probe running as call call_",
        "tool result for call_a: I was call_a\ntool result for call_b: I was call_b\n",
    ],
    "judge_gate.py": [
        "fixable: p=0.91 band=yes\ncomponent: checkout (confidence 0.88, sure=True)\n",
        "gate: assign -> checkout-team\n",
        'gate: needs_input (uncertain answer "fixable", request gate:0:fixable)\n',
        "tool guard: deny (high risk, risk 2.7)\n",
    ],
    "real_models.py": [
        "run: '2 + 3 = 5.' (done); tools called: add({'a': 2, 'b': 3}) -> 5\n",
        "  usage: {'prompt_tokens': 20, 'completion_tokens': 10, 'total_tokens': 30}\n",
        "stream: 'Streamed word by word.', as deltas ['Streamed ', 'word ', 'by ', ",
        "'streamed.']\n",
        "conversation user-42: 'You are Ada.'; the store keeps 5 messages\n",
        "a Conversation after reset() holds 0 messages\n",
        'metrics: toolnexus_llm_requests_total{model="gpt-4o-mini",status="ok"} 7\n',
        "on_metric saw 7 model calls, 1 tool call, 6 runs\n",
        "the server got POST /v1/chat/completions, model 'gpt-4o-mini',\n",
        "  an Authorization header: True,\n",
        "  first message {'role': 'system', 'content': 'You are terse.'}\n",
        "  request 3 asked to stream: True\n",
        "  the second ask on user-42 sent: ['My name is Ada.', 'Nice to meet you, Ada.', "
        "'Who am I?']\n",
    ],
    "relay_proxy.py": [
        "the caller got the answer: 'Paris is sunny and Oslo is snowing.'\n",
        "the model was offered: ['get_weather']\n",
        "  and got back call_paris: 'sunny, 21C', run by the caller\n"
        "  and got back call_oslo: 'snow, -3C', run by the caller\n",
        "  {'role': 'assistant', 'content': 'Paris is sunny and Oslo is snowing.'}\n",
    ],
    "compaction.py": [
        "  system: 'You are Ava.'\n",
        "  system: '[Summary of earlier conversation]\\n(a summary of ",
    ],
    "real_models_resilience.py": [
        "retries: a 429, a 503, then 'third time lucky' (3 requests)\n",
        "on_error saw [(409, 0, False)] and retried;\n  then 'busy, then fine'\n",
        "a 400 raises GenerateError: HTTP 400 from POST http://127.0.0.1:",
        "max_tokens: too large (key [redacted])",
        "  after 1 request; the transcript so far has 1 message(s)\n",
        "a cancel token fired at 100 ms: the run ends 'cancelled'\n"
        "  the server saw the request's connection closed: True\n"
        "  and the same client answers the next run: 'still here'\n",
        "run_timeout_ms=100: RunTimeout, the partial result's limit 'runTimeout'\n",
        "a Trio scope cancelled the run at 100 ms: True\n"
        "  and the server saw its connection closed: True\n",
    ],
    "real_models_translate.py": [
        "the model said 'Checking.' and stopped for 'tool_calls'\n",
        "its call: toolu_1 get_weather({'city': 'Paris'}); usage {'prompt_tokens': 10, "
        "'completion_tokens': 5, 'total_tokens': 15}\n",
        "what went over the wire: POST /v1/messages, anthropic-version\n"
        "  2023-06-01, system 'Be brief.',\n  max_tokens 256, and the tool as\n",
        '"input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, '
        '"required": ["city"]}}\n',
    ],
    "builtins_agent.py": [
        "the system prompt lists the skill fix-python: True\n"
        'skill [ok]: <skill_content name="fix-python">\n'
        'bash [error]: TypeError: can only concatenate str (not "int") to str\n'
        "edit [ok]: Edited sum.py (1 replacement)\n"
        "bash [ok]: total: 6\n"
        "model: fixed; the script now prints 'total: 6\\n'\n"
        'sum.py now ends with: print(f"total: {total}")\n',
    ],
    "agent_to_app.py": [
        "the gateway connected to the app; its claim code is ",
        "the model calls files__sync\nprogress 10% 1/10\n",
        "progress 50% 5/10\nthe user presses stop: cancelling the turn\n",
        "the app's handler saw the cancel: ctx.is_cancelled() is True\n",
        "model: the sync said: cancelled\n",
    ],
    "real_models_testing.py": [
        "test_summarize_sends_the_text_and_streams_the_answer: passed\n",
        "test_a_stream_cut_off_midway_is_an_error: passed\n",
        "test_a_503_is_retried_once: passed\n",
    ],
    "persona_agent.py": [
        "session 1: I don't know yet.\n",
        "USER.md now ends with: - Prefers dark roast\nsession 3: Dark roast.\n",
        "[14:45] Ava: Your daily sync starts at 15:00.\n12 beats, 1 reported\n",
    ],
    "skills_agent.py": [
        "tools: ['skill', 'issue']\n",
        "- **release-notes**: Write release notes for an issue tracker entry\n",
        '<- skill: <skill_content name="release-notes"> ',
        '<- issue: {"id": 42, "title": "Cancel stops the upload", "state": "closed"} '
        "{'status': 200}\n",
        "answer: ## Cancel stops the upload (closed)\n",
    ],
    "gateway_mcp.py": [
        "the gateway says on stderr: Tesseron app 'Todo list' (todo) is waiting: claim code ",
        "the agent calls tesseron__claim_session with ",
        '"claimed": "todo"',
        "the agent's tools now: tesseron__claim_session, ",
        "todo__add, todo__delete, todo__rename\n",
        'todo__add [ok]: [\n  {\n    "id": 1,\n    "text": "write the docs",',
    ],
    "mcp_roundtrip.py": [
        "loaded: McpStatus(state='connected', error=None, tools=3)\n",
        "tools: inner_add, inner_slow, inner_cancels, shout\n",
        "inner_add(20, 22) through both hops -> 42\nshout('hello') -> HELLO!\n",
        "inner_slow cancelled by the client after 0.5 s: True\n",
        "the innermost server's handler saw the cancel of: call-1\n",
    ],
    "mcp_sampling.py": [
        "one hop, our sampler answered: summary: Trio is a (max 256 tokens)\n",
        "two hops, the outer client's model answered: summary: from the outer client's model\n",
        "the outer client is asked: Who is asking?\n",
        "two hops, the outer client's user answered: hello Ada\n",
    ],
    "a2a_agents.py": [
        "tools: ['translator_translate']\n",
        "the local model called translator_translate({'task': 'hello'}): 'bonjour'\n",
        "local model: The translator says: bonjour\n",
        "slow task, cancelled at 0.5 s: A2A task ",
        " canceled\nremote: task 'hello' ended completed\n"
        "remote: task 'slow work' ended canceled\n",
    ],
    "a2a_serve_agent.py": [
        "tools: ['lead_lead']\n",
        "lead_lead('the nightly backups'): Done. The worker reports: "
        "checked 'the nightly backups': all green\n",
        "slow task, cancelled at 0.5 s: A2A task ",
        " canceled\nserved: task 'the nightly backups' ended completed\n"
        "served: task 'slow rebuild' ended canceled\n",
    ],
    "agents_tree.py": [
        "host: interrupted the researcher in the middle of its tool\n",
        "coordinator: pending, asks 'Deploy v2 to production?'\n"
        "  relayed by root/coordinator.1; this process exits now\n",
        "deploy: v2 is live (this line is printed once, by the second process)\n"
        "coordinator: done: interrupted; deployer-model: v2 is live\n"
        "replay refused: answered\n",
        '"root/coordinator.1/researcher.1": "closed"',
    ],
    "durable_approvals.py": [
        "halted and saved as release-42, asking: Deploy v2?\n"
        "deploy: v2 is live (it runs once, after the approval)\n"
        "approved by a fresh client; the model says: Done: v2 is live\n"
        "the same approval again is refused: the pending run of 'release-42' was already "
        "answered",
        "without a store: halted, kept as ",
        "deploy: v3 is live (it runs once, after the approval)\n"
        "resumed from the JSON; the model says: Done: v3 is live\n",
    ],
    "many_machines.py": [
        "worker A: the run halts (status=pending), asking 'Deploy v2?'\n",
        "worker B: approved; Done: v2 is live (deployed by worker ",
        ") (status=done)\nthe same approval again: refused (answered)\n",
    ],
    "model_world.py": [
        "responses style: from responses\ngemini style: from gemini\n",
        "  the server got POST /v1/responses\n"
        "  the server got POST /v1/models/gemini-2.5-flash:generateContent\n",
        "fallback: 'the backup answered', from gpt-5-mini\n"
        "  and the stalled provider's connection was closed\n",
        "'cache_read_tokens': 1500}\n",
        "cost: $0.003450\n",  # 500 input at $3, 1500 cache reads at $0.30, 100 output at $15
    ],
    "tools_first.py": [
        '"description": "ISO 4217 code of the currency to convert to, e.g. EUR"',
        "  <- convert [ok]: 50 USD = 46.00 EUR\n",
        'weather [ok]: {"city":"Paris","days":1,"sky":"sunny","high_c":22}\n',
        "model: 50 USD is 46 EUR, and Paris is sunny at 22C.\n",
    ],
    "tools_typed.py": [
        "  <- book [error]: Invalid arguments for tool 'book': $.passengers[0].seat must be "
        "one of ['window', 'aisle']",
        "  <- book [ok]: economy LIS->OSL for Ana (window), 120.00 EUR on card *4242\n",
        "TypeError: tool 'where': parameter 'loc': cannot derive a JSON Schema from ",
    ],
    "tools_sync_cancel.py": [
        "<- crunch [ok]: done\n<- crunch [error]: timed out after 50ms\n",
        "<- crunch [error]: cancelled\n   meanwhile: crunch saw the cancel and stopped",
    ],
    "tools_builtins.py": [
        "off:       ['shout']\n",
        "read-only: ['read', 'grep', 'glob', 'todowrite', 'shout']\n",
        "  <- read [ok]: buy milk\n",
        "  <- bash [error]: Unknown tool: bash\n",
    ],
}


def check_output(name: str, out: str) -> None:
    """The facts an example's output must show (see EXPECTED)."""
    for expected in EXPECTED[name]:
        assert expected in out, out
    if name == "seed_1_cancellation.py":  # back long before the tool's five seconds
        ms = int(out.split("after ", 1)[1].split(" ms", 1)[0])
        assert ms < 5000, out
    if name == "real_models_resilience.py":  # the key never shows
        assert "sk-ant-example" not in out
    if name == "compaction.py":  # under the budget, plus the last turn
        tokens = int(out.split("about ", 1)[1].split(" tokens", 1)[0])
        assert tokens <= 400 + 100, out
    if name == "seed_4_call_id.py":  # both calls started before either finished
        lines = out.splitlines()
        assert [line.startswith("probe running") for line in lines[:2]] == [True, True]
    if name == "agents_tree.py":  # the approved deploy ran once
        assert out.count("v2 is live (") == 1, out
    if name == "durable_approvals.py":  # each approved deploy ran once
        assert out.count("deploy: ") == 2, out
    if name == "persona_agent.py":  # one report in the whole afternoon
        assert out.count("] Ava: ") == 1, out


def test_every_example_is_checked() -> None:
    assert sorted(EXPECTED) == [p.name for p in SCRIPTS]


# Examples that need a PostgreSQL database get one through the standard PG* variables.
NEEDS_POSTGRES = {"many_machines.py"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs(script: Path, request: pytest.FixtureRequest) -> None:
    env = None
    if script.name in NEEDS_POSTGRES:
        import psycopg

        params = psycopg.conninfo.conninfo_to_dict(request.getfixturevalue("pg_dsn"))
        names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER"}
        names |= {"password": "PGPASSWORD", "dbname": "PGDATABASE"}
        env = {**os.environ, **{names[k]: str(v) for k, v in params.items() if k in names}}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    check_output(script.name, done.stdout)


def test_many_machines_without_a_database_says_why() -> None:
    """No server: the example stops with the server's own reason, not a bare
    CalledProcessError from a worker after the store's 30 s connection wait."""
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(port), "PGCONNECT_TIMEOUT": "5"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "many_machines.py")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode != 0
    assert "cannot reach PostgreSQL" in done.stderr
    assert "Connection refused" in done.stderr
    assert "docs/many-machines.rst" in done.stderr
    assert "CalledProcessError" not in done.stderr


def test_demo_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "tool[call_export]: cancelled" in out
    assert "tool[call_rm]: deleted build/" in out
    assert "status=done" in out
    # the two tools of the first turn overlapped: both started before either finished
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if "weather(Paris) started" in line or "add(2, 2) started" in line]  # fmt: skip
    first_finish = next(i for i, line in enumerate(lines) if "finished" in line)
    assert len(starts) == 2 and max(starts) < first_finish
    # part two: an agent turn driving a Tesseron app through the gateway
    assert "tools: todo__add, todo__import_todos, todo__delete, todo__rename" in out
    assert "user: stop the import! (cancelling the turn at 40%)" in out
    assert "<- todo__import_todos [error]: cancelled" in out
    assert 'wait_for: Delete "buy milk"? This cannot be undone. -> yes (auto-approved)' in out
    assert '<- todo__rename [ok]: {"id":2,"text":"write the quarterly report","done":false}' in out
    assert "#2 write the quarterly report" in out
    # part three: the same loop over HTTP against an in-process FakeProvider
    third = out.split("=== Real models: the same loop over HTTP", 1)[1]
    assert "model (streamed): Let me check both at once.\n" in third
    assert '  -> add {"a":19,"b":23}\n' in third and "  <- add [ok]: 42\n" in third
    assert "  <- weather [ok]: Paris: sunny, 22C\n" in third
    assert "model (streamed): Paris is sunny at 22C, and 19 + 23 = 42.\n" in third
    assert "173 prompt + 39 completion = 212 tokens over 2 POSTs" in third
    assert "(2 streamed)" in third
    assert 'toolnexus_llm_requests_total{model="demo-model",status="ok"} 2' in third
    # part four: sub-agents, one interrupted mid-tool, one approved by a fresh runtime
    fourth = out.split("=== Sub-agents: a coordinator, one agent interrupted, one approved", 1)[1]
    assert "host: interrupt(root/coordinator.1/researcher.1)" in fourth
    assert "researcher: its tool sees the cancellation and unwinds" in fourth
    assert "run: status=pending, asks 'Deploy v2?'" in fourth
    assert fourth.count("deploying (once)") == 1
    assert "coordinator: status=done: interrupted; deployer: v2 is live" in fourth
    assert "refused (AlreadyAnswered: answered)" in fourth
    assert out.count("status=done") == 4


def test_demo_ask_prompts_on_the_terminal() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolnexus_trio", "demo", "--ask"],
        input="n\nmy renamed report\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "-> no" in done.stdout
    assert '<- todo__delete [ok]: {"deleted":false}' in done.stdout
    assert "#2 my renamed report" in done.stdout


def test_host_and_gateway_commands() -> None:
    host = subprocess.Popen(
        [sys.executable, "-m", "toolnexus_trio", "host", "--no-manifest"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        first = host.stdout.readline()
        assert first.startswith("todo host listening on ws://127.0.0.1:")
        url = first.rsplit(" ", 1)[1].strip()
        listed = subprocess.run(
            [sys.executable, "-m", "toolnexus_trio", "gateway", "--url", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        assert "connected to 'Todo list' (todo)" in listed.stdout
        assert "claim code: " in listed.stdout
        for name in ("todo__add", "todo__import_todos", "todo__delete", "todo__rename"):
            assert f"\n{name}: " in listed.stdout
        assert "resources: todos" in listed.stdout
        refused = subprocess.run(
            [sys.executable, "-m", "toolnexus_trio", "gateway", "--url", "ws://10.1.2.3:9/"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 2
        assert "must be on loopback" in refused.stderr
    finally:
        host.terminate()
        host.wait(timeout=30)
        if host.stdout is not None:
            host.stdout.close()
