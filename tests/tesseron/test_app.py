"""Registration rules, binding rules and the instance manifest."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import toolnexus_trio.tesseron as tesseron
from toolnexus_trio.tesseron import ActionContext, TesseronApp


@pytest.mark.parametrize("bad", ["", "Shop", "1shop", "shop-app", "tesseron", "mcp", "system"])
def test_app_id_is_checked(bad: str) -> None:
    with pytest.raises(ValueError):
        TesseronApp(bad, "X")


def test_good_app_id() -> None:
    assert TesseronApp("shop_2", "X").id == "shop_2"


def test_duplicate_and_malformed_actions_are_refused() -> None:
    app = TesseronApp("t", "T")

    @app.action("a")
    async def a(input: Any, ctx: ActionContext) -> Any:
        return None

    with pytest.raises(ValueError):
        app.action("a")(a)

    def not_async(input: Any, ctx: ActionContext) -> Any:
        return None

    with pytest.raises(TypeError):
        app.action("b")(not_async)

    async def one_arg(input: Any) -> Any:
        return None

    with pytest.raises(TypeError):
        app.action("c")(one_arg)  # type: ignore[type-var]
    with pytest.raises(ValueError):
        app.action("d", input_schema={"$ref": "http://example.com/s.json"})(a)
    app.resource("r", lambda: 1)
    with pytest.raises(ValueError):
        app.resource("r", lambda: 2)


@pytest.mark.parametrize(
    "bad",
    ["add item", "cart.clear", "\u00fcber", "a/b", "hold\u2603", "x" * 62, "", "tab\t"],
)
def test_action_names_the_protocol_does_not_allow_are_refused(bad: str) -> None:
    app = TesseronApp("t", "T")

    async def handler(input: Any, ctx: ActionContext) -> Any:
        return None

    with pytest.raises(ValueError) as caught:
        app.action(bad)(handler)
    message = str(caught.value)
    if bad:
        assert repr(bad) in message
        assert "[A-Za-z0-9_-]" in message or "at most 64" in message
    assert not app._actions


def test_action_names_up_to_the_tool_name_limit_are_accepted() -> None:
    app = TesseronApp("shop", "Shop")

    async def handler(input: Any, ctx: ActionContext) -> Any:
        return None

    longest = "a" * (64 - len("shop__"))
    for name in ("addItem", "add_item", "add-item", "A1", longest):
        app.action(name)(handler)
    with pytest.raises(ValueError, match=r"'shop__a+' \(65 characters\)"):
        app.action(longest + "a")(handler)


@attrs.frozen
class Inner:
    n: int


@attrs.frozen
class HasMissing:
    inner: Inner
    other: Missing  # type: ignore[name-defined]  # noqa: F821


def test_unresolvable_attrs_input_annotation_is_refused() -> None:
    app = TesseronApp("t", "T")

    @attrs.frozen
    class Local:  # not visible from the handler's globals
        n: int

    async def handler(input: Local, ctx: ActionContext) -> Any:
        return input.n

    with pytest.raises(TypeError) as caught:
        app.action("typed")(handler)
    message = str(caught.value)
    assert "'Local'" in message and "'input'" in message and "typed" in message
    assert not app._actions

    async def nested(input: HasMissing, ctx: ActionContext) -> Any:
        return None

    with pytest.raises(TypeError, match=r"HasMissing.*'Missing'"):
        app.action("nested")(nested)


def test_ctx_annotation_needs_no_resolving() -> None:
    app = TesseronApp("t", "T")

    async def handler(input: Inner, ctx: OnlyForTypeCheckers) -> Any:  # type: ignore[name-defined]  # noqa: F821
        return input.n

    app.action("typed")(handler)
    assert app._actions["typed"].input_type is Inner
    assert app.action_manifest()[0].input_schema["required"] == ["n"]


def test_schema_is_compiled_at_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    import toolnexus_trio.tesseron._app as app_module

    calls: list[Any] = []
    real = app_module.compile_schema  # type: ignore[attr-defined]

    def counting(schema: Any) -> Any:
        calls.append(schema)
        return real(schema)

    monkeypatch.setattr(app_module, "compile_schema", counting)
    app = TesseronApp("t", "T")

    @app.action("a", input_schema={"type": "object"})
    async def a(input: Any, ctx: ActionContext) -> Any:
        return None

    assert len(calls) == 1
    action = app._actions["a"]
    for _ in range(3):
        action.prepare_input({})
    assert len(calls) == 1


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com", "::"])
async def test_non_loopback_host_is_refused_before_binding(host: str) -> None:
    app = TesseronApp("t", "T")
    with pytest.raises(ValueError, match="loopback"):
        async with app.listen(host=host, manifest_dir=None):
            pytest.fail("must not bind")


async def test_manifest_is_private_atomic_and_removed(tmp_path: Path) -> None:
    app = TesseronApp("shop", "Acme Shop")
    directory = tmp_path / "instances"
    with trio.fail_after(10):
        async with app.listen(manifest_dir=directory) as host:
            path = host.manifest_path
            assert path is not None
            assert path == directory / f"{host.instance_id}.json"
            assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            doc = json.loads(path.read_text())
            assert doc == {
                "version": 2,
                "instanceId": host.instance_id,
                "appName": "Acme Shop",
                "addedAt": doc["addedAt"],
                "pid": os.getpid(),
                "transport": {"kind": "ws", "url": host.url},
            }
            assert isinstance(doc["addedAt"], int)
            assert [p.name for p in directory.iterdir()] == [path.name]  # no temp left
    assert not path.exists()


@pytest.mark.parametrize("port", [65536, 70000, -1])
async def test_out_of_range_port_is_refused_before_binding(port: int) -> None:
    app = TesseronApp("t", "T")
    with pytest.raises(ValueError, match=r"outside 0\.\.65535"):
        async with app.listen(port=port, manifest_dir=None):
            pytest.fail("must not bind")


@pytest.mark.parametrize("mode", [0o1777, 0o755, 0o700, 0o1770], ids=oct)
async def test_an_existing_manifest_dir_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, mode)
    app = TesseronApp("shop", "Acme Shop")
    with trio.fail_after(10):
        async with app.listen(manifest_dir=directory) as host:
            assert host.manifest_path is not None and host.manifest_path.exists()
            assert stat.S_IMODE(os.stat(host.manifest_path).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(directory).st_mode) == mode
    assert stat.S_IMODE(os.stat(directory).st_mode) == mode


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722], ids=oct)
async def test_a_writable_manifest_dir_without_sticky_bit_is_refused(
    tmp_path: Path, mode: int
) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    os.chmod(directory, mode)
    app = TesseronApp("shop", "Acme Shop")
    with trio.fail_after(10), pytest.raises(ValueError, match="sticky bit"):
        async with app.listen(manifest_dir=directory):
            pytest.fail("must not serve")
    assert list(directory.iterdir()) == []
    assert stat.S_IMODE(os.stat(directory).st_mode) == mode


async def test_default_manifest_dir_is_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    app = TesseronApp("shop", "Acme Shop")
    with trio.fail_after(10):
        async with app.listen() as host:
            assert host.manifest_path is not None
            assert host.manifest_path.parent == tmp_path / ".tesseron" / "instances"
            assert host.manifest_path.exists()
    assert not host.manifest_path.exists()


def test_public_names() -> None:
    assert set(tesseron.__all__) == {
        "DEFAULT_MANIFEST_DIR",
        "MAX_MESSAGE_BYTES",
        "PROTOCOL_VERSION",
        "ActionContext",
        "ActionError",
        "Agent",
        "Capabilities",
        "Claimed",
        "Disconnected",
        "ElicitRequest",
        "Gateway",
        "GatewayOptions",
        "GatewaySession",
        "HandshakeFailed",
        "HostEvent",
        "LogEntry",
        "ResourceHandle",
        "SampleRequest",
        "Sampler",
        "TesseronApp",
        "TesseronErrorCode",
        "TesseronHost",
        "Welcome",
    }
    for name in tesseron.__all__:
        obj = getattr(tesseron, name)
        if isinstance(obj, type):
            assert obj.__doc__, name
