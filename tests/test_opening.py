"""One way to open things (issue 31): ``async with create_toolkit(...)`` as well as
``await``, and a forgotten ``await`` or ``async with`` that says what to write."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from toolnexus_trio import (
    AgentDef,
    BuiltinsConfig,
    ClientOptions,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    Toolkit,
    ToolkitOptions,
    create_client,
    create_in_process_client,
    create_toolkit,
    open_agent_runtime,
    open_toolkit,
    tool,
)

NO_BUILTINS = ToolkitOptions(builtins=BuiltinsConfig.off())


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


async def test_async_with_create_toolkit_opens_and_closes_it() -> None:
    async with create_toolkit(ToolkitOptions(builtins=False, extra_tools=[echo])) as toolkit:
        assert isinstance(toolkit, Toolkit)
        assert [t.name for t in toolkit.tools()] == ["echo"]
        assert (await toolkit.execute("echo", {"text": "hi"})).output == "hi"
    assert toolkit._closed  # closed at the block's end
    with pytest.raises(RuntimeError, match="the toolkit is closed"):
        await toolkit.add_agent("http://127.0.0.1:9/")


async def test_the_earlier_forms_still_work() -> None:
    toolkit = await create_toolkit(NO_BUILTINS)
    assert isinstance(toolkit, Toolkit)
    await toolkit.aclose()
    async with await create_toolkit(NO_BUILTINS) as entered:
        assert isinstance(entered, Toolkit)
    async with open_toolkit(NO_BUILTINS) as opened:
        assert isinstance(opened, Toolkit)
    async with trio.open_nursery() as nursery:
        given = await create_toolkit(NO_BUILTINS, nursery=nursery)
        await given.aclose()
        async with create_toolkit(NO_BUILTINS, nursery=nursery) as in_given:
            assert isinstance(in_given, Toolkit)


async def test_a_create_toolkit_result_is_used_once() -> None:
    opening = create_toolkit(NO_BUILTINS)
    toolkit = await opening
    with pytest.raises(RuntimeError, match=r"create_toolkit\(\.\.\.\) is used once"):
        await opening
    await toolkit.aclose()


async def test_a_forgotten_await_says_what_to_write() -> None:
    toolkit: Any = create_toolkit(NO_BUILTINS)
    with pytest.raises(AttributeError) as caught:
        toolkit.tools()
    assert str(caught.value) == (
        "create_toolkit(...) was neither awaited nor entered: write "
        "`toolkit = await create_toolkit(...)` or `async with create_toolkit(...) as toolkit:`, "
        "then use toolkit.tools"
    )
    await toolkit  # (used, so it does not warn)

    # Passed to a run without its await, the run says the same.
    async def generate(req: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(content="done")

    client = create_in_process_client(InProcessOptions(model="m", generate=generate))
    forgotten: Any = create_toolkit(NO_BUILTINS)
    with pytest.raises(AttributeError, match=r"create_toolkit\(\.\.\.\) was neither awaited"):
        await client.run("hi", forgotten)
    await (await forgotten).aclose()


def test_a_create_toolkit_never_used_warns_as_a_coroutine_would() -> None:
    unused = [create_toolkit(NO_BUILTINS)]
    with pytest.warns(RuntimeWarning, match=r"create_toolkit\(\.\.\.\) was never awaited"):
        unused.clear()


async def test_awaiting_an_opener_says_to_use_async_with() -> None:
    with pytest.raises(TypeError) as caught:
        await open_toolkit(NO_BUILTINS)  # type: ignore[attr-defined]
    assert str(caught.value) == (
        "open_toolkit(...) is not awaited: write `async with open_toolkit(...) as toolkit:` "
        "and use toolkit inside the block"
    )
    registry = {"a": AgentDef("a", "does a", "you are a", "m")}

    async def generate(req: GenerateRequest) -> InProcessResponse:
        return InProcessResponse(content="done")

    with pytest.raises(TypeError, match=r"^open_agent_runtime\(\.\.\.\) is not awaited: write `async with open_agent_runtime\(\.\.\.\) as runtime:`"):  # fmt: skip
        async with await open_agent_runtime(registry, generate=generate) as rt:  # type: ignore[attr-defined]
            del rt
    not_entered: Any = open_agent_runtime(registry, generate=generate)
    with pytest.raises(AttributeError, match=r"open_agent_runtime\(\.\.\.\) gives a context manager, not the runtime: write `async with open_agent_runtime\(\.\.\.\) as runtime:` and use runtime.spawn inside the block"):  # fmt: skip
        not_entered.spawn("a", "hello")
    async with not_entered as runtime:  # entering it is still fine
        assert runtime.root is not None


async def test_awaiting_a_client_says_to_use_async_with() -> None:
    client: Any = create_client(
        ClientOptions(style="openai", base_url="http://127.0.0.1:9/v1", model="m")
    )
    with pytest.raises(TypeError) as caught:
        await client
    assert str(caught.value) == (
        "a Client is not awaited: write `async with create_client(options) as client:` "
        "(or create_in_process_client), without `await`"
    )
    await client.aclose()


async def test_async_with_create_toolkit_holds_mcp_servers_and_stops_them() -> None:
    pytest.importorskip("mcp")
    from mcp_helpers import group_members, pid_alive, stdio

    options = ToolkitOptions(mcp={"ev": stdio("--child")}, builtins=False)
    async with create_toolkit(options) as toolkit:
        assert toolkit.get("ev_pids") is not None
        pids = (await toolkit.execute("ev_pids", {})).output[11:-2].split()
        server_pid, child_pid = map(int, pids)
        assert pid_alive(server_pid)
    # the block's end stopped the server's whole process tree
    assert group_members(server_pid) == []
    assert not pid_alive(server_pid) and not pid_alive(child_pid)
    # the await form still needs a nursery for them, and says how to get one
    with pytest.raises(TypeError, match=r"async with create_toolkit\(options\) as toolkit:"):
        await create_toolkit(options)
