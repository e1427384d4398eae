"""The builtins at work: a scripted model fixes a failing script with ``bash`` and ``edit``.

Everything happens in a temporary directory that ``BuiltinsConfig(base_dir=...)``
confines the file tools to. The scripted ``generate`` plays the model: it runs the
script, reads the error, edits the bug away, runs the script again and reports.
"""

import tempfile
from pathlib import Path

import trio

from toolnexus_trio import (
    BuiltinsConfig,
    GenerateRequest,
    InProcessOptions,
    InProcessResponse,
    InProcessToolCall,
    ToolkitOptions,
    create_in_process_client,
    create_toolkit,
)

SCRIPT = 'total = sum([1, 2, 3])\nprint("total: " + total)\n'

# The model's moves, one per turn; each sees the previous tool result.
STEPS = [
    InProcessToolCall(name="bash", arguments={"command": "python3 sum.py"}),
    InProcessToolCall(
        name="edit",
        arguments={
            "path": "sum.py",
            "oldString": '"total: " + total',
            "newString": 'f"total: {total}"',
        },
    ),
    InProcessToolCall(name="bash", arguments={"command": "python3 sum.py"}),
]


async def generate(req: GenerateRequest) -> InProcessResponse:
    """Scripted model: one step per turn, then a summary of the last tool result."""
    if req.turn < len(STEPS):
        return InProcessResponse(tool_calls=[STEPS[req.turn]])
    last_output = req.messages[-1]["content"]
    return InProcessResponse(content=f"fixed; the script now prints {last_output!r}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sum.py").write_text(SCRIPT)
        options = ToolkitOptions(builtins=BuiltinsConfig(base_dir=tmp))
        async with await create_toolkit(options) as toolkit:
            client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
            result = await client.run("sum.py crashes; fix it", toolkit)
        for call in result.tool_calls:
            print(f"{call.name}: {call.output.splitlines()[-1]}")
        assert result.tool_calls[0].is_error  # TypeError: can only concatenate str...
        assert result.tool_calls[1].output == "Edited sum.py (1 replacement)"
        assert result.tool_calls[2].output == "total: 6\n"
        assert (Path(tmp) / "sum.py").read_text().endswith('print(f"total: {total}")\n')
    # Skills: a skill folder next to the script would add a `skill` step here (see
    # the "Skills" section of docs/builtins.rst).
    print(f"ok: {result.text}")


if __name__ == "__main__":
    trio.run(main)
