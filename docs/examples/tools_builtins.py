"""The builtins that come along with every toolkit, and how to turn them off or keep
only the read-only ones.

Run it: ``python docs/examples/tools_builtins.py``.
"""

import tempfile

import trio

from toolnexus_trio import BuiltinsConfig, ToolkitOptions, create_toolkit, tool


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


async def main() -> None:
    # --- builtins: start ---
    # By default the ten builtins come along with your tools (SPEC §4A).
    async with create_toolkit(ToolkitOptions(extra_tools=[shout])) as toolkit:
        print("default:  ", [t.name for t in toolkit.tools()])

    # Off: only your own tools.
    async with create_toolkit(ToolkitOptions(builtins=False, extra_tools=[shout])) as toolkit:
        print("off:      ", [t.name for t in toolkit.tools()])

    # Read-only: read, grep, glob and todowrite; no shell, no writes, no web. With a
    # base_dir the file tools cannot reach outside it.
    with tempfile.TemporaryDirectory() as folder:
        await trio.Path(folder, "notes.txt").write_text("buy milk\n")
        options = ToolkitOptions(
            builtins=BuiltinsConfig.read_only(base_dir=folder), extra_tools=[shout]
        )
        async with create_toolkit(options) as toolkit:
            print("read-only:", [t.name for t in toolkit.tools()])
            for name, args in [
                ("read", {"path": "notes.txt"}),
                ("read", {"path": "/etc/passwd"}),
                ("bash", {"command": "rm -rf ~"}),
            ]:
                result = await toolkit.execute(name, args)
                first_line = result.output.splitlines()[0]
                print(f"  <- {name} [{'error' if result.is_error else 'ok'}]: {first_line}")
    # --- builtins: end ---


if __name__ == "__main__":
    trio.run(main)
