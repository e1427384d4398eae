"""The pure MCP pieces: config parsing, names, tool filters, and the one mapping between
§10 Request/Answer and MCP elicitation (both directions). No SDK needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolnexus_trio import Answer, Request
from toolnexus_trio.mcp import McpConfig, mcp_tool_name, parse_mcp_config, sanitize
from toolnexus_trio.mcp._config import expand_env, filter_tools
from toolnexus_trio.mcp._elicit import (
    answer_from_elicit_result,
    elicit_result_from_answer,
    elicitation_from_request,
    request_from_elicitation,
)

# ---------------------------------------------------------------- config


def test_wrappers_and_reserved_keys() -> None:
    for key in ("mcpServers", "servers", "mcp"):
        cfg = parse_mcp_config({key: {"fs": {"command": ["srv", "--x"]}}})
        assert [s.name for s in cfg.servers] == ["fs"]
        assert cfg.servers[0].command == ("srv", "--x")
    bare = parse_mcp_config(
        {
            "fs": {"command": "srv", "args": ["a"]},
            "builtins": False,
            "agents": {},
            "a2a": {},
            "mcpServer": {"name": "x"},
        }
    )
    assert [s.name for s in bare.servers] == ["fs"]
    assert bare.servers[0].command == ("srv", "a")


def test_type_inference_enabled_env_cwd_timeout() -> None:
    cfg = parse_mcp_config(
        {
            "mcpServers": {
                "a": {"command": "x", "env": {"K": "v"}, "cwd": "/tmp", "timeout": 1500},
                "b": {"url": "https://example.test/mcp", "headers": {"H": "1"}},
                "c": {"command": "x", "disabled": True},
                "d": {"command": "x", "enabled": False},
                "e": {"command": "x", "environment": {"A": "1"}, "enabled": True},
            }
        }
    )
    a, b, c, d, e = cfg.servers
    assert (a.type, a.environment, a.cwd, a.timeout_ms, a.enabled) == (
        "local",
        {"K": "v"},
        "/tmp",
        1500,
        True,
    )
    assert (b.type, b.url, b.timeout_ms) == ("remote", "https://example.test/mcp", 30000)
    assert not c.enabled and not d.enabled and e.enabled
    assert e.environment == {"A": "1"}


def test_headers_expand_env_and_never_show() -> None:
    cfg = parse_mcp_config(
        {
            "r": {
                "url": "http://h/mcp",
                "headers": {"Authorization": "Bearer ${TOK}", "X": "${NOPE}y"},
            }
        }
    )
    server = cfg.servers[0]
    assert server.expanded_headers({"TOK": "s3cr3t"}) == {
        "Authorization": "Bearer s3cr3t",
        "X": "y",
    }
    assert "s3cr3t" not in repr(server) and "Bearer" not in repr(server)
    assert expand_env("${A}-${B}", {"A": "1"}) == "1-"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"s": {"command": "x", "enabled": "false"}}, "enabled must be true or false"),
        ({"s": {"command": "x", "disabled": 0}}, "disabled must be true or false"),
        ({"s": {"command": "x", "timeout": "100"}}, "timeout must be a positive number"),
        ({"s": {"command": "x", "timeout": True}}, "timeout must be a positive number"),
        ({"s": {"command": "x", "timeout": 0}}, "timeout must be a positive number"),
        ({"s": {"command": 5}}, "command must be a string or an array"),
        ({"s": {"command": "x", "env": {"A": 1}}}, "environment must map strings"),
        ({"s": {"url": "ftp://x"}}, "url must be an http\\(s\\) URL"),
        ({"s": {"type": "remote"}}, "url must be an http\\(s\\) URL"),
        ({"s": {"command": "x", "tools": {"a": "yes"}}}, "tools must map tool names"),
        ({"s": {"command": "x", "type": "weird"}}, "type must be"),
        ({"s": "nope"}, "must be an object"),
        ({"mcpServers": []}, "server map must be a JSON object"),
    ],
)
def test_bad_config_names_server_and_field(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_mcp_config(raw)


def test_config_from_a_file_and_bad_json(tmp_path: Path) -> None:
    good = tmp_path / "mcp.json"
    good.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}))
    assert isinstance(parse_mcp_config(good), McpConfig)
    assert parse_mcp_config(str(good)).servers[0].name == "a"
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {')
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_mcp_config(bad)


def test_sanitize_and_names() -> None:
    assert sanitize("my server.v1/\u00e9") == "my_server_v1__"
    assert mcp_tool_name("git hub", "create.issue") == "git_hub_create_issue"
    long_a = mcp_tool_name("s" * 40, "t" * 40 + "a")
    long_b = mcp_tool_name("s" * 40, "t" * 40 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    assert len(sanitize("x" * 100)) == 64


def test_tool_filter_semantics(caplog: pytest.LogCaptureFixture) -> None:
    names = ["a", "b", "c"]
    assert filter_tools(names, {}, "s") == names
    assert filter_tools(names, {"a": True, "b": False}, "s") == ["a"]
    assert filter_tools(names, {"b": False}, "s") == ["a", "c"]
    assert filter_tools(names, {"zzz": True}, "s") == []
    assert "unknown tool 'zzz'" in caplog.text


# ---------------------------------------------------------------- elicitation, source side


def test_form_elicitation_becomes_input_request() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    req = request_from_elicitation(
        {"mode": "form", "message": "Your name?", "requestedSchema": schema}
    )
    assert (req.kind, req.prompt, req.data) == ("input", "Your name?", {"schema": schema})
    assert request_from_elicitation({"message": "m", "requestedSchema": schema}).kind == "input"


def test_url_elicitation_becomes_authorization() -> None:
    req = request_from_elicitation(
        {"mode": "url", "message": "Log in", "url": "https://auth.test/x", "elicitationId": "e1"}
    )
    assert (req.kind, req.url, req.data) == (
        "authorization",
        "https://auth.test/x",
        {"elicitationId": "e1"},
    )


@pytest.mark.parametrize(
    "params",
    [
        {"mode": "form", "message": 3, "requestedSchema": {"type": "object"}},
        {"mode": "form", "message": "m", "requestedSchema": {"type": "string"}},
        {"mode": "form", "message": "m"},
        {"mode": "url", "message": "m", "url": "javascript:alert(1)"},
        {"mode": "url", "message": "m", "url": "https://x", "elicitationId": 5},
        {"mode": "smoke", "message": "m"},
    ],
)
def test_bad_elicitation_is_refused(params: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        request_from_elicitation(params)


def test_answer_maps_to_accept_decline_cancel() -> None:
    assert elicit_result_from_answer(
        Answer("r", True, {"name": "Trio", "n": 2, "l": ["a"]}), url_mode=False
    ) == {
        "action": "accept",
        "content": {"name": "Trio", "n": 2, "l": ["a"]},
    }
    assert elicit_result_from_answer(Answer("r", True, {"x": 1}), url_mode=True) == {
        "action": "accept"
    }
    assert elicit_result_from_answer(Answer("r", False, reason="declined"), url_mode=False) == {
        "action": "decline"
    }
    assert elicit_result_from_answer(Answer("r", False, reason="expired"), url_mode=False) == {
        "action": "cancel"
    }
    assert elicit_result_from_answer(Answer("r", False), url_mode=True) == {"action": "cancel"}
    with pytest.raises(ValueError, match="nested"):
        elicit_result_from_answer(Answer("r", True, {"nested": {"a": 1}}), url_mode=False)
    with pytest.raises(ValueError, match="bad"):
        elicit_result_from_answer(Answer("r", True, {"bad": float("nan")}), url_mode=False)


# ---------------------------------------------------------------- elicitation, serve side


def test_question_request_becomes_a_form_and_back() -> None:
    req = Request(
        kind="question",
        prompt="Color?\nSize?",
        data={
            "questions": [
                {"question": "Color?", "options": ["red", "blue"]},
                {"question": "Size?", "header": "Size"},
                {"question": "Extras?", "options": ["a", "b"], "multiple": True},
            ]
        },
    )
    params = elicitation_from_request(req, url_supported=True)
    assert params["mode"] == "form"
    props = params["requestedSchema"]["properties"]
    assert props["answer_1"] == {
        "type": "string",
        "enum": ["red", "blue"],
        "title": "Question 1",
        "description": "Color?",
    }
    assert props["answer_2"]["title"] == "Size"
    assert props["answer_3"]["type"] == "array"
    answer = answer_from_elicit_result(
        req,
        {"action": "accept", "content": {"answer_1": "red", "answer_2": "L", "answer_3": ["a"]}},
    )
    assert answer == Answer(req.id, True, {"answers": ["red", "L", ["a"]]})


def test_input_approval_authorization_requests() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string"}}}
    inp = Request(kind="input", prompt="Code?", data={"schema": schema})
    assert elicitation_from_request(inp, url_supported=True)["requestedSchema"] == schema
    plain = Request(kind="input", prompt="Anything?")
    assert elicitation_from_request(plain, url_supported=True)["requestedSchema"]["required"] == [
        "value"
    ]
    appr = Request(kind="approval", prompt="Delete?")
    assert elicitation_from_request(appr, url_supported=True)["requestedSchema"] == {
        "type": "object",
        "properties": {},
    }
    auth = Request(kind="authorization", prompt="Log in", url="https://a.test/login")
    assert elicitation_from_request(auth, url_supported=True) == {
        "mode": "url",
        "message": "Log in",
        "url": "https://a.test/login",
        "elicitationId": auth.id,
    }
    assert "elicitationId" not in elicitation_from_request(auth, url_supported=True, with_id=False)
    fallback = elicitation_from_request(auth, url_supported=False)
    assert fallback["mode"] == "form" and fallback["message"] == "Log in\nhttps://a.test/login"


def test_client_result_to_answer_is_strict() -> None:
    req = Request(kind="approval", prompt="ok?")
    assert answer_from_elicit_result(req, {"action": "accept"}) == Answer(req.id, True)
    assert answer_from_elicit_result(req, {"action": "accept", "content": {"v": 1}}) == Answer(
        req.id, True, {"v": 1}
    )
    assert answer_from_elicit_result(req, {"action": "decline"}) == Answer(
        req.id, False, reason="declined"
    )
    assert answer_from_elicit_result(req, {"action": "cancel"}) == Answer(
        req.id, False, reason="cancelled"
    )
    for bad in ({"action": "ACCEPT"}, {"action": True}, {}, {"action": "accept", "content": "x"}):
        with pytest.raises(ValueError):
            answer_from_elicit_result(req, bad)


# ---------------------------------------------------------------- the extra is optional


def test_public_names_are_pinned() -> None:
    import toolnexus_trio.mcp as m

    assert set(m.__all__) == {
        "DEFAULT_TIMEOUT_MS", "CallInfo", "MCPServeConfig", "McpConfig", "McpConfigInput",
        "McpInventory", "McpServerConfig", "McpServing", "McpSource", "McpStatus",
        "McpToolInfo", "OnCall", "list_mcp_tools", "mcp_tool_name", "open_mcp",
        "parse_mcp_config", "sanitize",
    }  # fmt: skip
    assert m.McpStatus.__module__ == "toolnexus_trio.mcp"


def test_package_imports_without_the_mcp_extra() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "import toolnexus_trio, toolnexus_trio.mcp as m\n"
        "m.parse_mcp_config({'a': {'command': 'x'}})\n"
        "try:\n    m.list_mcp_tools\nexcept ImportError as e:\n    print('IMPORT-ERROR', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "IMPORT-ERROR" in done.stdout
    assert "pip install -e '.[mcp]'" in done.stdout
