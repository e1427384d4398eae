"""The web UI in a real headless Chromium, served by the real command (``python -m
toolnexus_trio ui`` against a FakeProvider): type a prompt and see the streamed answer,
approve a ``bash`` call, interrupt a sub-agent, and close the tab mid-turn with nothing
left running. Real processes and a real browser: the real clock, with guards.

``TOOLNEXUS_UI_SCREENSHOT=path.png`` saves a screenshot of the page on the way (the
docs' picture)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from agui_helpers import until
from builtin_helpers import live_group_members
from cdp import Page, open_page

from toolnexus_trio.testing import open_fake_provider

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


async def _send(page: Page, text: str) -> None:
    """Type *text* in the textarea and press Enter, as a person would (once the page
    takes a prompt: the last answer's stream is over)."""
    await page.wait_js("!document.getElementById('send').disabled")
    await page.js("document.getElementById('prompt').focus()")
    await page.call("Input.insertText", {"text": text})
    await page.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Enter",
                                               "code": "Enter", "windowsVirtualKeyCode": 13})  # fmt: skip
    await page.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": "Enter",
                                               "code": "Enter", "windowsVirtualKeyCode": 13})  # fmt: skip


def _log_has(text: str) -> str:
    return f"document.getElementById('log').textContent.includes({json.dumps(text)})"


def _has_pre(text: str) -> str:
    return f"[...document.querySelectorAll('.approval pre')].some(p => p.textContent === {json.dumps(text)})"


async def _approve(page: Page) -> None:
    click = (
        "(() => { const b = [...document.querySelectorAll('.approval button')]"
        ".find(b => b.textContent === 'Approve' && !b.disabled); if (b) b.click(); return !!b; })()"
    )
    await page.wait_js(click)


def _children(pid: int) -> list[str]:
    """The live child processes of *pid* (from /proc)."""
    found: list[str] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += f.read().split()
    return found


async def _pid(path: Path) -> int:
    await until(lambda: path.exists() and path.read_text().strip())
    pgid = int(await trio.Path(path).read_text())
    await until(lambda: live_group_members(pgid))
    return pgid


async def test_the_web_ui_in_chromium(chromium: str, tmp_path: Path) -> None:
    pid1, pid2 = tmp_path / "pid1", tmp_path / "pid2"
    script = [
        {"text": "Hello from the agent, streamed word by word"},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo approved-ran"}}]},
        {"text": "bash done"},
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "sleep"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo $$ > {pid1}; sleep 60"}}]},
        {"text": "helper stopped"},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo parked"}}]},
        {"text": "a fresh answer"},
        {"tool_calls": [{"name": "delegate", "arguments": {"prompt": "sleep again"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo $$ > {pid2}; sleep 60"}}]},
    ]
    work = tmp_path / "work"
    work.mkdir()
    with trio.fail_after(120):
        async with open_fake_provider(script) as provider:
            command = [sys.executable, "-m", "toolnexus_trio", "ui", "--base-url",
                       provider.base_url, "--style", "openai", "--model", "m", "--api-key", "k"]  # fmt: skip
            ui = await trio.lowlevel.open_process(
                command, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
            try:
                assert ui.stdout is not None
                first = b""
                while not first.endswith(b"\n"):
                    chunk = await ui.stdout.receive_some(1)
                    assert chunk, "the ui command exited before printing its URL"
                    first += chunk
                url = first.decode().strip()
                assert url.startswith("http://127.0.0.1:") and url.endswith("/")
                async with open_page(chromium, url, tmp_path) as page:
                    # A prompt, its answer streamed into the page.
                    await _send(page, "hello")
                    await page.wait_js(_log_has("Hello from the agent, streamed word by word"))
                    # A bash call asks first: Approve, and it runs.
                    await _send(page, "run echo")
                    await page.wait_js(
                        "document.querySelector('.approval pre')?.textContent === 'echo approved-ran'"
                    )
                    await _approve(page)
                    await page.wait_js(
                        _log_has("approved-ran\n") + " || " + _log_has("→ approved-ran")
                    )
                    await page.wait_js(_log_has("bash done"))
                    # A sub-agent's bash, approved, then the sub-agent interrupted.
                    await _send(page, "delegate")
                    helper_state = "document.querySelector('.agent[data-agent=\"root/helper.1\"] .state')?.textContent"
                    await page.wait_js(f"{helper_state} === 'suspended'")  # asking first
                    await _approve(page)
                    await page.wait_js(f"{helper_state} === 'running'")
                    pgid = await _pid(pid1)
                    await page.wait_js(
                        "!!document.querySelector('.agent[data-agent=\"root/helper.1\"] button')"
                    )
                    shot = os.environ.get("TOOLNEXUS_UI_SCREENSHOT")
                    if shot:
                        data = (await page.call("Page.captureScreenshot", {"format": "png"}))[
                            "data"
                        ]
                        await trio.Path(shot).write_bytes(base64.b64decode(data))
                    await page.js(
                        "document.querySelector('.agent[data-agent=\"root/helper.1\"] button').click()"
                    )
                    await page.wait_js(_log_has("helper stopped"))
                    await until(lambda: not live_group_members(pgid))
                    state = await page.js(
                        "document.querySelector('.agent[data-agent=\"root/helper.1\"] .state').textContent"
                    )
                    assert state == "interrupted"
                    # Stop while the run waits for an approval (no request is open).
                    await _send(page, "park")
                    await page.wait_js(_has_pre("echo parked"))
                    await page.js("document.getElementById('stop').click()")
                    await page.wait_js("document.getElementById('stop').disabled")
                    await _send(page, "after stop")  # the thread is free again
                    await page.wait_js(_log_has("a fresh answer"))
                    # Mid-turn, the tab closes: the run, its sub-agent and its bash end.
                    await _send(page, "again")
                    await _approve(page)
                    pgid = await _pid(pid2)
                    await page.call("Target.closeTarget", {"targetId": page.target}, browser=True)
                    await until(lambda: not live_group_members(pgid))
                    await until(lambda: not _children(ui.pid))  # nothing else either
                assert ui.poll() is None  # still serving
            finally:
                with trio.move_on_after(10, shield=True):
                    ui.send_signal(2)  # Ctrl-C: the command's clean stop
                    await ui.wait()
    assert ui.returncode == 130
