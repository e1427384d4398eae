"""toolnexus_trio.testing.FakeProvider on its own: script loading, endpoints, the serve CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import trio

from toolnexus_trio.testing import FakeProvider, Step, load_script, open_fake_provider


def test_scripts_are_read_strictly() -> None:
    steps, cycle = load_script({"steps": [{"text": "hi"}], "cycle": True})
    assert steps == [Step(text="hi")] and cycle
    assert load_script([{"status": 429, "retry_after": "1"}])[0][0].retry_after == "1"
    with pytest.raises(ValueError, match="unknown step keys"):
        load_script([{"txt": "typo"}])
    with pytest.raises(ValueError, match="cycle"):
        load_script({"steps": [], "cycle": "yes"})
    with pytest.raises(ValueError):
        load_script("not a script")


async def test_endpoints_exhaustion_cycle_and_recording() -> None:
    async with (
        open_fake_provider([{"text": "a"}, {"text": "b"}], cycle=True) as provider,
        httpx2.AsyncClient(base_url=provider.base_url) as http,
    ):
        missing = await http.post("/nope", json={})
        texts = []
        for _ in range(3):
            answer = await http.post("/chat/completions", json={"model": "q"},
                                     headers={"X-Probe": "1"})  # fmt: skip
            texts.append(answer.json()["choices"][0]["message"]["content"])
        anthropic = await http.post("/messages", json={"model": "q"})
    assert missing.status_code == 404
    assert texts == ["a", "b", "a"]
    assert anthropic.json()["content"] == [{"type": "text", "text": "b"}]
    first = provider.requests[1]
    assert first.method == "POST" and first.path == "/v1/chat/completions"
    assert first.headers["x-probe"] == "1" and first.json == {"model": "q"}

    async with (
        open_fake_provider() as provider,
        httpx2.AsyncClient(base_url=provider.base_url) as http,
    ):
        provider.add(Step(text="only"))
        await http.post("/messages", json={})
        exhausted = await http.post("/messages", json={})
    assert exhausted.status_code == 500 and "run out" in exhausted.text


async def test_serve_in_your_own_nursery(nursery: trio.Nursery) -> None:
    provider = FakeProvider([{"text": "mine"}])
    assert await nursery.start(provider.serve) is provider
    async with httpx2.AsyncClient() as http:
        answer = await http.post(provider.base_url + "/chat/completions", json={})
    assert answer.json()["choices"][0]["message"]["content"] == "mine"


def test_serve_command_prints_its_url_and_serves(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"text": "from a process"}], "cycle": True}))
    process = subprocess.Popen(
        [sys.executable, "-m", "toolnexus_trio.testing", "serve", "--script", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        for _ in range(2):
            answer = httpx2.post(url + "/chat/completions", json={"model": "m"}, timeout=10)
            assert answer.json()["choices"][0]["message"]["content"] == "from a process"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        process.stdout.close()  # type: ignore[union-attr]
    assert process.returncode is not None


def test_serve_command_refuses_a_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text('[{"nope": 1}]')
    done = subprocess.run(
        [sys.executable, "-m", "toolnexus_trio.testing", "serve", "--script", str(script)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "unknown step keys" in done.stderr
