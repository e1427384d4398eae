"""Gateway sessions: handshake, minting, claiming, resume, discovery, refusals."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from gateway_helpers import FakeGateway, serving, wait_until
from gateway_rig import Probe, fake_host, hello_params, probe_app, until_closed

from toolnexus_trio.tesseron import (
    ActionError,
    Disconnected,
    Gateway,
    GatewayOptions,
    TesseronApp,
)

CODE = re.compile(r"^[ABCDEFGHJKMNPQRSTUVWXYZ23456789]{4}-[ABCDEFGHJKMNPQRSTUVWXYZ23456789]{2}$")


async def test_minted_formats_and_claiming_by_code() -> None:
    app = probe_app(Probe())
    with trio.fail_after(10):
        async with serving(app) as host, Gateway() as gw:
            session = await gw.connect(host.url)
            code = session.claim_code
            assert code is not None and CODE.match(code)
            assert re.fullmatch(r"[A-Za-z0-9_-]{32}", session.resume_token)
            assert session.session_id.startswith("s_")
            assert not session.claimed and session.connected
            assert gw.tools() == []  # unclaimed: no tools
            await wait_until(lambda: host.welcome is not None)
            assert host.welcome is not None and host.welcome.claim_code == code
            assert host.welcome.agent.id == "pending"
            with pytest.raises(ActionError) as wrong:
                gw.claim("AAAA-AA")
            assert wrong.value.code == -32009
            version = gw.version
            assert gw.claim(code.lower()) is session
            assert session.claimed and session.claim_code is None
            assert gw.version > version
            assert "shop__add" in [t.name for t in gw.tools()]
            await wait_until(lambda: host.welcome is not None and host.welcome.claim_code is None)
            assert host.welcome.agent.id == "toolnexus-trio"
            with pytest.raises(ActionError) as spent:
                gw.claim(code)
            assert spent.value.code == -32009


async def test_codes_and_tokens_are_fresh_per_session() -> None:
    async def host_side(peer: FakeGateway) -> None:
        rid = peer.request("tesseron/hello", hello_params())
        welcomes.append((await peer.response(rid))["result"])
        await until_closed(peer)

    welcomes: list[dict[str, Any]] = []
    sessions = []
    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway() as gw:
            for i in range(5):
                sessions.append(await gw.connect(url))
                await wait_until(lambda i=i: len(welcomes) == i + 1)
            for session in sessions:
                await session.disconnect()  # unclaimed: dropped, not kept
            assert gw.sessions() == []
    assert [w["claimCode"] for w in welcomes] == [s.claim_code for s in sessions]
    assert len({w["claimCode"] for w in welcomes}) == 5
    assert len({w["resumeToken"] for w in welcomes}) == 5
    assert len({w["sessionId"] for w in welcomes}) == 5
    assert all(w["agent"] == {"id": "pending", "name": "Awaiting agent"} for w in welcomes)
    assert all(w["protocolVersion"] == "1.2.0" for w in welcomes)


async def test_resume_after_a_drop_rotates_the_token_and_keeps_working() -> None:
    app = probe_app(Probe())
    with trio.fail_after(10):
        async with serving(app) as host, Gateway(GatewayOptions(auto_claim=True)) as gw:
            events = host.events()
            session = await gw.connect(host.url)
            first = session.resume_token
            await wait_until(lambda: host.welcome is not None)
            assert host.welcome is not None and host.welcome.resume_token == first
            await session.disconnect()
            while not isinstance(await events.receive(), Disconnected):
                pass
            assert not session.connected
            assert gw.tools() == []
            assert gw.sessions() == [session]  # a resumable zombie
            again = await gw.connect(host.url)  # the host sends tesseron/resume
            assert again is session
            assert session.connected and session.claimed
            assert session.resume_token != first
            await wait_until(
                lambda: host.welcome is not None and host.welcome.resume_token != first
            )
            assert host.welcome is not None
            assert host.welcome.resume_token == session.resume_token
            assert host.welcome.claim_code is None
            assert await gw.invoke("shop", "add", {"a": 1, "b": 2}) == 3


async def test_every_resume_refusal_is_32011_and_the_host_falls_back_to_hello() -> None:
    """A fake host replays resumes against a real zombie, then hellos."""
    creds: dict[str, str] = {}
    answers: list[dict[str, Any]] = []
    dial = [0]

    def resume(**overrides: Any) -> dict[str, Any]:
        params = hello_params()
        params.update(sessionId=creds["sid"], resumeToken=creds["token"])
        params.update(overrides)
        return params

    async def host_side(peer: FakeGateway) -> None:
        dial[0] += 1
        if dial[0] == 1:
            rid = peer.request("tesseron/hello", hello_params())
            welcome = (await peer.response(rid))["result"]
            creds.update(sid=welcome["sessionId"], token=welcome["resumeToken"])
            await peer.expect_method("tesseron/claimed")
            return  # drop the connection
        attempts = [
            resume(resumeToken="x" * 32),
            resume(resumeToken="short"),
            resume(sessionId="s_unknown"),
            resume(app={"id": "other", "name": "Other"}),
            {"sessionId": creds["sid"]},  # malformed
        ]
        for params in attempts:
            rid = peer.request("tesseron/resume", params)
            answers.append(await peer.response(rid))
        rid = peer.request("tesseron/resume", resume())
        ok = await peer.response(rid)
        answers.append(ok)
        # The old token is spent: a replay on this live channel is refused too.
        rid = peer.request("tesseron/resume", resume())
        answers.append(await peer.response(rid))
        await until_closed(peer)

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            session = await gw.connect(url)
            await wait_until(lambda: not session.connected)
            assert gw.sessions() == [session]
            again = await gw.connect(url)
            assert again is session
            await wait_until(lambda: len(answers) == 7)
    codes = [a.get("error", {}).get("code") for a in answers[:5]]
    assert codes == [-32011] * 5
    assert "Invalid resumeToken" in answers[0]["error"]["message"]
    assert "No resumable session" in answers[2]["error"]["message"]
    assert "owned by app" in answers[3]["error"]["message"]
    welcome = answers[5]["result"]
    assert welcome["sessionId"] == creds["sid"]
    assert welcome["resumeToken"] != creds["token"]
    assert "claimCode" not in welcome
    assert welcome["agent"]["id"] == "toolnexus-trio"
    assert answers[6]["error"]["code"] == -32600  # already established


async def test_unclaimed_sessions_are_not_resumable() -> None:
    creds: dict[str, str] = {}
    answers: list[dict[str, Any]] = []

    async def host_side(peer: FakeGateway) -> None:
        if not creds:
            rid = peer.request("tesseron/hello", hello_params())
            welcome = (await peer.response(rid))["result"]
            creds.update(sid=welcome["sessionId"], token=welcome["resumeToken"])
            return
        params = hello_params(sessionId=creds["sid"], resumeToken=creds["token"])
        answers.append(await peer.response(peer.request("tesseron/resume", params)))
        await peer.response(peer.request("tesseron/hello", hello_params()))
        await until_closed(peer)

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway() as gw:
            session = await gw.connect(url)
            await wait_until(lambda: not session.connected)
            fresh = await gw.connect(url)
    assert fresh is not session
    assert answers[0]["error"]["code"] == -32011


async def test_zombies_expire_after_the_ttl(socket_autojump_clock: trio.testing.MockClock) -> None:
    app = probe_app(Probe())
    with trio.fail_after(300):
        options = GatewayOptions(auto_claim=True, resume_ttl_ms=60_000)
        async with serving(app) as host, Gateway(options) as gw:
            session = await gw.connect(host.url)
            await session.disconnect()
            assert gw.sessions() == [session]
            await trio.sleep(61)
            assert gw.sessions() == []
            fresh = await gw.connect(host.url)  # resume refused, then a fresh hello
            assert fresh is not session


@pytest.mark.parametrize(
    ("params", "code"),
    [
        (hello_params(version="2.0.0"), -32000),
        (hello_params(app_id="Bad-Id"), -32602),
        (hello_params(app_id="tesseron"), -32602),
        ({"protocolVersion": "1.2.0"}, -32602),
    ],
)
async def test_a_refused_hello_fails_connect_and_closes(params: dict[str, Any], code: int) -> None:
    seen: list[Any] = []

    async def host_side(peer: FakeGateway) -> None:
        seen.append(await peer.response(peer.request("tesseron/hello", params)))
        seen.append(await peer.expect_closed())

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway() as gw:
            with pytest.raises(ActionError) as caught:
                await gw.connect(url)
            await wait_until(lambda: len(seen) == 2)
    assert caught.value.code == code
    assert seen[0]["error"]["code"] == code


async def test_a_host_that_never_says_hello_times_out(
    socket_autojump_clock: trio.testing.MockClock,
) -> None:
    async def host_side(peer: FakeGateway) -> None:
        await until_closed(peer)

    with trio.fail_after(60):
        async with (
            fake_host(host_side) as url,
            Gateway(GatewayOptions(handshake_timeout_ms=500)) as gw,
        ):
            with pytest.raises(TimeoutError):
                await gw.connect(url)


async def test_published_schemas_are_sanitised_and_unknown_invocations_refused() -> None:
    actions = [
        {"name": "loose", "description": "no schema", "inputSchema": {}},
        {"name": "broken", "inputSchema": {"type": "object", "properties": {"x": {"type": 7}}}},
        {"name": "array", "inputSchema": {"type": "array"}},
    ]
    answers: list[dict[str, Any]] = []

    async def host_side(peer: FakeGateway) -> None:
        await peer.response(peer.request("tesseron/hello", hello_params(actions=actions)))
        await peer.expect_method("tesseron/claimed")
        stray = {"invocationId": "inv_nope", "prompt": "hi"}
        answers.append(await peer.response(peer.request("sampling/request", stray)))
        answers.append(await peer.response(peer.request("no/such", {})))
        await until_closed(peer)

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway(GatewayOptions(auto_claim=True)) as gw:
            await gw.connect(url)
            tools = {t.name: t for t in gw.tools()}
            await wait_until(lambda: len(answers) == 2)
    assert set(tools) == {"fake__loose", "fake__broken", "fake__array"}
    assert tools["fake__loose"].input_schema == {"type": "object"}
    assert tools["fake__broken"].input_schema == {"type": "object"}
    assert tools["fake__array"].input_schema == {"type": "object"}
    assert tools["fake__loose"].hints is None
    assert answers[0]["error"]["code"] == -32003
    assert answers[1]["error"]["code"] == -32601


@pytest.mark.parametrize(
    "url",
    [
        "ws://example.com:8080/",
        "ws://10.1.2.3:8080/",
        "wss://127.0.0.1:8080/",
        "http://127.0.0.1:8080/",
        "not a url",
    ],
)
async def test_non_loopback_urls_are_refused(url: str) -> None:
    async with Gateway() as gw:
        with pytest.raises(ValueError):
            await gw.connect(url)


async def _dead_pid() -> int:
    process = await trio.lowlevel.open_process([sys.executable, "-c", "pass"])
    await process.wait()  # reaped: the pid no longer exists
    return process.pid


async def test_discovery_dials_live_v2_manifests_only(tmp_path: Path) -> None:
    dead = await _dead_pid()
    with pytest.raises(ProcessLookupError):
        os.kill(dead, 0)
    app = probe_app(Probe())
    other = TesseronApp("other", "Other")
    with trio.fail_after(10):
        async with (
            app.listen(manifest_dir=tmp_path) as host,
            other.listen(manifest_dir=None) as unrelated,
        ):
            ghost = {
                "version": 2,
                "instanceId": "inst-ghost",
                "appName": "Ghost",
                "addedAt": 1,
                "pid": dead,
                "transport": {"kind": "ws", "url": unrelated.url},
            }
            (tmp_path / "inst-ghost.json").write_text(json.dumps(ghost))
            legacy = {"version": 1, "transport": {"kind": "ws", "url": unrelated.url}}
            (tmp_path / "inst-legacy.json").write_text(json.dumps(legacy))
            (tmp_path / "garbage.json").write_text("{not json")
            async with Gateway() as gw:
                found = await gw.discover(tmp_path)
                assert [s.app.id for s in found] == ["shop"]
                assert found[0].url == host.url
                assert await gw.discover(tmp_path) == []  # already connected
                assert not unrelated.connected


async def test_discovery_skips_hosts_that_refuse(tmp_path: Path) -> None:
    async def host_side(peer: FakeGateway) -> None:
        await peer.response(peer.request("tesseron/hello", hello_params(version="9.0.0")))

    with trio.fail_after(10):
        async with fake_host(host_side) as url, Gateway() as gw:
            doc = {"version": 2, "pid": os.getpid(), "transport": {"kind": "ws", "url": url}}
            (tmp_path / "inst-x.json").write_text(json.dumps(doc))
            assert await gw.discover(tmp_path) == []
