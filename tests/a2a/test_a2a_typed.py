"""A served agent with a typed result answers with a data part beside its text (issue 33)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx2
import pytest
import trio

from toolnexus_trio.agents import agent
from toolnexus_trio.loop import GenerateRequest, InProcessResponse, InProcessToolCall

pytest.importorskip("hypercorn")


@attrs.frozen
class Verdict:
    ok: bool
    reason: str


async def model(request: GenerateRequest) -> InProcessResponse:
    await trio.lowlevel.checkpoint()
    arguments: dict[str, Any] = {"ok": True, "reason": "fine"}
    return InProcessResponse(tool_calls=[InProcessToolCall("f", "final_result", arguments)])


async def rpc(http: httpx2.AsyncClient, url: str, method: str, params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": "1", "method": method, "params": params}
    return (await http.post(url, content=json.dumps(body).encode())).json()["result"]


async def test_a_served_typed_agent_returns_a_data_part() -> None:
    judge = agent("judge", does="judges", model="j", output_type=Verdict)
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "ok?"}]}
    with trio.fail_after(30):
        async with judge.serve(generate=model) as served, httpx2.AsyncClient() as http:
            url = served.base_url + "/"
            params = {"message": message, "configuration": {"blocking": False}}
            task = await rpc(http, url, "SendMessage", params)
            while True:
                got = await rpc(http, url, "GetTask", {"id": task["id"]})
                if got["status"]["state"] in ("completed", "failed"):
                    break
                await trio.sleep(0.01)
    assert got["status"] == {"state": "completed"}
    [artifact] = got["artifacts"]
    assert artifact["parts"] == [
        {"kind": "text", "text": '{"ok":true,"reason":"fine"}'},
        {"kind": "data", "data": {"ok": True, "reason": "fine"}},
    ]


def test_the_1_0_shape_keeps_the_data_part() -> None:
    from toolnexus_trio.a2a._wire import task_v1

    parts = [{"kind": "text", "text": "[1]"}, {"kind": "data", "data": {"result": [1]}}]
    task = {
        "id": "t",
        "status": {"state": "completed"},
        "artifacts": [{"artifactId": "a", "parts": parts}],
    }
    [artifact] = task_v1(task)["artifacts"]
    assert artifact["parts"] == [{"text": "[1]"}, {"data": {"result": [1]}}]
