"""Which builtins are on, where the file tools may reach, and the shared error shape."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from .._schema import JSONSchema
from .._tools import Tool, ToolContext, ToolResult, ToolSource, describe_exception

BUILTIN_ORDER = (
    "bash",
    "read",
    "write",
    "edit",
    "grep",
    "glob",
    "webfetch",
    "question",
    "apply_patch",
    "todowrite",
)
"""The SPEC's fixed builtin order (SPEC §4A); :func:`builtin_tools` keeps it."""

READ_ONLY_BUILTINS = ("read", "grep", "glob", "todowrite")
"""The builtins :meth:`BuiltinsConfig.read_only` keeps."""


DEFAULT_SHELL: tuple[str, ...] = ("/bin/sh", "-c")
"""The interpreter ``bash`` runs a command with when the host names none."""


def _to_base_dir(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _to_shell(value: Any) -> tuple[str, ...] | None:
    """``shell`` as a tuple of non-empty strings (an argv prefix), checked at once."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(
            f"BuiltinsConfig(shell=...) takes an argv list such as ['/bin/bash', '-c'], "
            f"not {type(value).__name__} {value!r:.60}"
        )
    argv = tuple(value)
    if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
        raise ValueError(
            f"BuiltinsConfig(shell=...) must be non-empty strings without NUL, not {value!r:.80}"
        )
    return argv


@attrs.frozen
class BuiltinsConfig:
    """Which builtins are on (SPEC §4A), and the directory the file tools are confined to.

    ``BuiltinsConfig()`` turns every builtin on; ``BuiltinsConfig.off()`` turns the
    whole source off; ``BuiltinsConfig(tools={"question": False})`` drops one tool on the
    all-on baseline (``True`` keeps a tool on; it never makes an allow-list; unknown
    names are ignored). A whole-source off short-circuits the map.

    ``base_dir`` (default ``None``): with ``None``, relative paths resolve against the
    process's working directory and any path may be used, as the SPEC says. With a
    directory, relative paths resolve against it, and ``read``, ``write``, ``edit``,
    ``glob``, ``grep``, ``apply_patch`` and ``bash``'s ``workdir`` refuse any path whose
    real location (symlinks resolved) lies outside it; ``bash`` also starts there by
    default. It confines paths, not commands: a ``bash`` command can still reach any
    file the process can (turn ``bash`` off for that).
    """

    enabled: bool = True
    tools: Mapping[str, bool] = attrs.field(factory=dict)
    base_dir: str | None = attrs.field(default=None, converter=_to_base_dir)
    shell: tuple[str, ...] | None = attrs.field(default=None, converter=_to_shell)
    """The interpreter ``bash`` runs a command with: an argv prefix used verbatim, the
    command appended as its last argument (``["/bin/bash", "-lc"]``, ``["zsh", "-c"]``);
    ``None``: :data:`DEFAULT_SHELL` (see :func:`builtin_shell`). ``metadata["shell"]``
    of each call shows it joined by spaces."""

    @classmethod
    def off(cls) -> BuiltinsConfig:
        """No builtins at all."""
        return cls(enabled=False)

    @classmethod
    def read_only(cls, base_dir: str | os.PathLike[str] | None = None) -> BuiltinsConfig:
        """Only the builtins that look and never change anything: ``read``, ``grep``,
        ``glob`` and ``todowrite`` (the model's own to-do list, kept in memory).

        No shell (``bash``), no writes (``write``, ``edit``, ``apply_patch``), no web
        (``webfetch``) and no ``question``. *base_dir*, when given, also confines the
        three file tools to that directory (see the class docs).
        """
        off = {name: False for name in BUILTIN_ORDER if name not in READ_ONLY_BUILTINS}
        return cls(tools=off, base_dir=base_dir)

    @classmethod
    def of(cls, value: BuiltinsConfig | bool | Mapping[str, Any] | None) -> BuiltinsConfig:
        """*value* as a config: ``None`` or ``True`` all on, ``False`` off, a config as
        it is, or a config file's ``builtins`` object (toolnexus 0.21's form):
        ``{"enabled": bool, "tools": {name: bool}, "disabled": [names], "baseDir": str,
        "shell": [argv]}``, every key optional; another key is a :class:`ValueError`."""
        if value is None or value is True:
            return cls()
        if value is False:
            return cls.off()
        if isinstance(value, BuiltinsConfig):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"builtins must be a BuiltinsConfig, a bool or an object, not {value!r:.60}"
            )
        known = ("enabled", "tools", "disabled", "baseDir", "base_dir", "shell")
        for key in value:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"builtins: unknown key {key!r}{hint}")
        enabled = value.get("enabled", True)
        tools = value.get("tools", {})
        disabled = value.get("disabled", [])
        if not isinstance(enabled, bool):
            raise ValueError("builtins.enabled must be true or false")
        if not isinstance(tools, Mapping) or not all(
            isinstance(k, str) and isinstance(v, bool) for k, v in tools.items()
        ):
            raise ValueError("builtins.tools must map tool names to true or false")
        if not isinstance(disabled, list) or not all(isinstance(n, str) for n in disabled):
            raise ValueError("builtins.disabled must be an array of tool names")
        base_dir = value.get("baseDir", value.get("base_dir"))
        if base_dir is not None and not isinstance(base_dir, str):
            raise ValueError("builtins.baseDir must be a string")
        merged = {**tools, **dict.fromkeys(disabled, False)}
        return cls(enabled, merged, base_dir, value.get("shell"))

    def shell_argv(self) -> tuple[str, ...]:
        """The argv prefix ``bash`` uses: ``shell``, or :data:`DEFAULT_SHELL`."""
        return self.shell if self.shell is not None else DEFAULT_SHELL

    def is_on(self, name: str) -> bool:
        """Whether builtin *name* is enabled."""
        return self.enabled and self.tools.get(name, True) is not False


class BuiltinError(Exception):
    """A failure a builtin reports as ``"<tool>: <message>"`` (never raised to callers)."""


@attrs.frozen
class Place:
    """Turns the paths a model gives into the paths a builtin opens (see ``base_dir``)."""

    base_dir: str | None

    def resolve(self, path: str) -> str:
        """*path* to open: as given without a base; otherwise real, and inside the base.

        Blocking (it resolves symlinks): call it from a worker thread.
        """
        if self.base_dir is None:
            return path
        base = os.path.realpath(self.base_dir)
        real = os.path.realpath(os.path.join(base, path))
        if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
            raise BuiltinError(f"{path} resolves outside baseDir {self.base_dir}")
        return real

    def display(self, path: str) -> str:
        """How an error names *path*: as given, or joined to the base (as the ports do)."""
        return path if self.base_dir is None else os.path.join(self.base_dir, path)

    async def resolve_async(self, path: str) -> str:
        """:meth:`resolve` off the event loop (only a base needs the file system)."""
        if self.base_dir is None:
            await trio.lowlevel.checkpoint()
            return path
        return await trio.to_thread.run_sync(self.resolve, path)

    def default_dir(self) -> str:
        """The directory used when a tool's ``path``/``workdir`` is absent or empty."""
        return "." if self.base_dir is None else self.base_dir


def required(args: Mapping[str, Any], key: str) -> str:
    """``args[key]``, refusing the empty string the way every port does."""
    value: str = args.get(key) or ""
    if not value:
        raise BuiltinError(f"{key} is required")
    return value


def whole_number(value: Any, key: str) -> int | None:
    """A JSON number argument truncated to an int (``1.9`` -> 1), or ``None`` when absent."""
    if value is None:
        return None
    number = float(value)
    if not math.isfinite(number):
        raise BuiltinError(f"{key} must be a finite number")
    return int(number)


Run = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


def builtin(name: str, description: str, schema: JSONSchema, run: Run) -> Tool:
    """A builtin :class:`Tool` whose failures read ``"<name>: <error>"`` (SPEC §4A)."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            return await run(args, ctx)
        except Exception as exc:
            return ToolResult.error(f"{name}: {describe_exception(exc)}")

    return Tool(
        name=name,
        description=description,
        input_schema=schema,
        source=ToolSource.BUILTIN,
        execute=execute,
    )


def builtin_shell(config: BuiltinsConfig | None = None) -> str:
    """The interpreter the ``bash`` builtin uses under *config* (the default config when
    ``None``), as ``metadata["shell"]`` reports it: ``"/bin/sh -c"`` unless the host
    named its own with ``BuiltinsConfig(shell=[...])``. The default is fixed, never
    sniffed from ``$SHELL``: the SPEC's ``bash`` is a POSIX shell everywhere."""
    return " ".join((config or BuiltinsConfig()).shell_argv())
