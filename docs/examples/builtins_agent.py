"""The builtins at work: a scripted model loads a skill, then fixes a failing script
with ``bash`` and ``edit``.

Everything happens in a temporary directory that ``BuiltinsConfig(base_dir=...)``
confines the file tools to; a ``skills/`` folder in it holds one ``SKILL.md``. The
scripted ``generate`` plays the model: it loads the skill its system prompt lists, runs
the script, reads the error, edits the bug away, runs the script again and reports.
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

SKILL = """\
---
name: fix-python
description: How to fix a crashing Python script
---
Run the script with bash, read the traceback, fix the line with edit, run it again.
"""

# The model's moves, one per turn; each sees the previous tool result.
STEPS = [
    InProcessToolCall(name="skill", arguments={"name": "fix-python"}),
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
        (Path(tmp) / "skills" / "fix-python").mkdir(parents=True)
        (Path(tmp) / "skills" / "fix-python" / "SKILL.md").write_text(SKILL)
        options = ToolkitOptions(
            builtins=BuiltinsConfig(base_dir=tmp), skills_dir=str(Path(tmp) / "skills")
        )
        async with await create_toolkit(options) as toolkit:
            catalog = toolkit.skills_prompt()  # goes into the model's system prompt
            print(f"the system prompt lists the skill fix-python: {'fix-python' in catalog}")
            client = create_in_process_client(InProcessOptions(model="scripted", generate=generate))
            result = await client.run("sum.py crashes; fix it", toolkit)
        for call in result.tool_calls:
            lines = [line for line in call.output.splitlines() if line.strip()]
            if call.is_error:  # the error itself, above the exit status line
                shown = lines[-2] if len(lines) > 1 else lines[-1]
            else:
                shown = lines[0] if call.name == "skill" else lines[-1]
            print(f"{call.name} [{'error' if call.is_error else 'ok'}]: {shown}")
        print(f"model: {result.text}")
        print(f"sum.py now ends with: {(Path(tmp) / 'sum.py').read_text().splitlines()[-1]}")


if __name__ == "__main__":
    trio.run(main)
