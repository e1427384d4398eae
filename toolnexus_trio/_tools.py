"""Tools: the uniform :class:`Tool`, its result and context, and ways to define one."""

from __future__ import annotations

import enum
import inspect
import json
import math
import typing
from collections.abc import Awaitable, Callable
from typing import Any, overload

import attrs
import cattrs
import trio

from ._cancel import CancelToken
from ._content import ContentPart
from ._converter import payloads
from ._schema import JSONSchema, Validator, compile_schema, empty_schema, schema_for_type
from ._wire import Answer, Request


def _part_tuple(parts: typing.Iterable[ContentPart]) -> tuple[ContentPart, ...]:
    return tuple(parts)


@attrs.frozen
class ToolResult:
    """What a tool hands back to the model: text, an error flag and free-form metadata.

    ``parts`` are content parts (an image, a PDF: :func:`~toolnexus_trio.image`...)
    sent to the model after ``output``; the run's saved transcript keeps only the text.
    """

    output: str
    is_error: bool = False
    metadata: dict[str, Any] | None = None
    parts: tuple[ContentPart, ...] = attrs.field(default=(), converter=_part_tuple)

    @classmethod
    def ok(cls, output: str, metadata: dict[str, Any] | None = None) -> ToolResult:
        """A successful result."""
        return cls(output, False, metadata)

    @classmethod
    def error(cls, output: str, metadata: dict[str, Any] | None = None) -> ToolResult:
        """An error result; the model sees *output* and decides what to do."""
        return cls(output, True, metadata)


class ToolSource(enum.Enum):
    """Where a tool comes from."""

    CUSTOM = "custom"
    NATIVE = "native"
    BUILTIN = "builtin"
    SKILL = "skill"
    MCP = "mcp"
    HTTP = "http"
    TESSERON = "tesseron"
    RELAY = "relay"
    A2A = "a2a"


@attrs.frozen
class ToolHints:
    """Behaviour hints a host may use (for approval prompts, retries, caching).

    ``title`` is a human-readable name for display (never sent to a model). An MCP
    tool's ``annotations`` map here, and back when a toolkit is served over MCP.
    """

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False
    title: str | None = None


@attrs.define
class ToolContext:
    """Per-call context handed to ``execute``.

    ``cancel`` is the turn's token inside the client loop (a fresh token by default);
    ``call_id`` is the model's id for this call (``None`` outside the loop);
    ``timeout_ms`` is this call's budget (0 means unset; :meth:`Tool.call` enforces it);
    ``answer`` is set only when the loop re-runs a call after a §10 suspension.
    """

    cancel: CancelToken = attrs.field(factory=CancelToken)
    call_id: str | None = None
    timeout_ms: int = 0
    answer: Answer | None = None


Execute = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
"""The signature of :attr:`Tool.execute`."""


@attrs.frozen
class Tool:
    """The one uniform tool abstraction (SPEC §1).

    ``input_schema`` is compiled once, here; a malformed schema or a remote ``$ref``
    raises :class:`ValueError` when the tool is created. Run a tool with :meth:`call`.
    ``concurrency_safe=False`` makes the client loop run it alone, never overlapping
    another call of the same turn.
    """

    name: str
    description: str
    input_schema: JSONSchema
    source: ToolSource
    execute: Execute = attrs.field(repr=False)
    hints: ToolHints | None = None
    concurrency_safe: bool | None = None
    _validator: Validator = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_validator", compile_schema(self.input_schema))

    async def call(self, args: dict[str, Any] | None, ctx: ToolContext | None = None) -> ToolResult:
        """Validate *args*, run ``execute`` under ``ctx.cancel``, and never raise.

        - arguments failing ``input_schema`` give an error naming each path and rule,
          and ``execute`` does not run;
        - an exception from ``execute`` gives ``ToolResult.error(str(exc))``;
        - a cancelled token gives ``ToolResult.error("cancelled")``;
        - ``ctx.timeout_ms`` elapsing gives ``ToolResult.error("timed out after <N>ms")``.

        Cancellation of an *enclosing* Trio scope propagates as ``trio.Cancelled``.
        """
        return await self._call(args, ToolContext() if ctx is None else ctx, own_scope=True)

    async def _call(
        self, args: dict[str, Any] | None, ctx: ToolContext, *, own_scope: bool
    ) -> ToolResult:
        # The client loop passes own_scope=False: its turn nursery's scope is already
        # bound to ctx.cancel, so a per-call scope is only needed for a timeout.
        if args is None:
            args = {}
        invalid = self._invalid(args)
        if invalid is not None:
            return invalid
        timeout_ms = ctx.timeout_ms
        token = ctx.cancel
        # The catch sits outside the cancel scope: a tool whose own nursery fails while
        # being cancelled raises a group that the scope strips of its Cancelled.
        try:
            if not own_scope and timeout_ms <= 0:
                await trio.lowlevel.checkpoint_if_cancelled()
                result: object = await self.execute(args, ctx)
            else:
                deadline = trio.current_time() + timeout_ms / 1000 if timeout_ms > 0 else math.inf
                with trio.CancelScope(deadline=deadline) as scope:
                    token.attach(scope)
                    try:
                        await trio.lowlevel.checkpoint_if_cancelled()
                        result = await self.execute(args, ctx)
                    finally:
                        token.detach(scope)
                if scope.cancelled_caught:
                    if token.is_cancelled:
                        return ToolResult.error("cancelled")
                    return ToolResult.error(f"timed out after {timeout_ms}ms")
        except Exception as exc:
            return ToolResult.error(describe_exception(exc))
        return self._checked(result)

    def _invalid(self, args: dict[str, Any]) -> ToolResult | None:
        """The error result for *args* failing ``input_schema``, or ``None``."""
        issues = self._validator.issues(args)
        if not issues:
            return None
        detail = "; ".join(f"{i.message} (at {i.location}, rule: {i.rule})" for i in issues)
        return ToolResult.error(f"Invalid arguments for tool '{self.name}': {detail}")

    def _checked(self, result: object) -> ToolResult:
        """*result* if ``execute`` returned a :class:`ToolResult`, else the error saying so."""
        if isinstance(result, ToolResult):
            return result
        return ToolResult.error(
            f"tool '{self.name}' returned {type(result).__name__}, not a ToolResult"
        )

    def _direct(self) -> tuple[Callable[[dict[str, Any], ToolContext], Awaitable[object]], bool]:
        """What the client loop awaits after validation, with no scope and no catch (the
        caller's), and whether that is a :func:`define_tool` function (its value then
        goes through :meth:`_value_result`, as the wrapper would do).

        The loop awaits the function directly, without the wrapper's coroutine nor one
        of this class: in a fan-out each coroutine frame per call counts (it is held
        for the call's whole life and scanned by every collection).
        """
        execute = self.execute
        if type(execute) is _NativeExecute:
            return execute.fn, True
        return execute, False

    def _value_result(self, value: object, native: bool) -> ToolResult:
        """The result for *value* from what :meth:`_direct` returned."""
        if not native:
            return self._checked(value)
        return ToolResult(value) if type(value) is str else _to_result(value)


def describe_exception(exc: BaseException) -> str:
    """The message a model sees for a failure: ``str(exc)``, or each leaf of a group."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_exception(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__


def pending(request: Request) -> ToolResult:
    """A §10 suspension: an error result whose ``metadata["pending"]`` is *request*.

    The output is the prompt, plus a newline and the url when there is one.
    """
    output = request.prompt if request.url is None else f"{request.prompt}\n{request.url}"
    return ToolResult.error(output, {"pending": request})


def pending_of(result: ToolResult) -> Request | None:
    """The :class:`Request` a result is suspended on, or ``None``."""
    if result.metadata is None:
        return None
    found = result.metadata.get("pending")
    if isinstance(found, Request):
        return found
    if isinstance(found, dict) and {"kind", "prompt"} <= found.keys():
        try:
            return Request.from_json(found)
        except (cattrs.BaseValidationError, TypeError, ValueError):
            return None
    return None


def output_text(value: object) -> str:
    """What a model sees for a tool's value: a ``str`` as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(payloads.unstructure(value), separators=(",", ":"))


def is_async_callable(fn: object) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
    )


def _to_result(value: object) -> ToolResult:
    return value if isinstance(value, ToolResult) else ToolResult.ok(output_text(value))


NativeFn = Callable[[dict[str, Any], ToolContext], Awaitable["str | ToolResult"]]


def define_tool(name: str, description: str, input_schema: JSONSchema | None, fn: NativeFn) -> Tool:
    """Make a native tool from ``async fn(args, ctx) -> str | ToolResult``.

    A returned ``str`` becomes ``ToolResult.ok``; other values are sent as JSON; a
    raised ``Exception`` becomes ``ToolResult.error(str(exc))`` (via :meth:`Tool.call`).
    ``input_schema=None`` means :func:`empty_schema`.
    """
    if not is_async_callable(fn):
        raise TypeError(f"define_tool({name!r}): fn must be an async function")
    return Tool(
        name=name,
        description=description,
        input_schema=empty_schema() if input_schema is None else input_schema,
        source=ToolSource.NATIVE,
        execute=_NativeExecute(fn),
    )


class _NativeExecute:
    """:func:`define_tool`'s ``execute``: ``fn``'s value as a :class:`ToolResult`.

    A class rather than a closure so that the loop can see ``fn`` and await it without
    this wrapper's coroutine (:meth:`Tool._execute_direct`).
    """

    __slots__ = ("fn",)

    def __init__(self, fn: NativeFn) -> None:
        self.fn = fn

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        value = await self.fn(args, ctx)
        if type(value) is str:  # the common case, without _to_result's two calls
            return ToolResult(value)
        return _to_result(value)

    def __repr__(self) -> str:
        return f"define_tool({self.fn!r})"


def _signature_tool(
    fn: Callable[..., Awaitable[Any]], name: str | None, description: str | None
) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"@tool needs an async function, got {fn!r}")
    hints = typing.get_type_hints(fn)
    signature = inspect.signature(fn)
    properties: dict[str, JSONSchema] = {}
    required: list[str] = []
    context_params: list[str] = []
    structured: dict[str, Any] = {}
    # A bound method's (or classmethod's) signature already leaves out self / cls; in a
    # plain function a parameter named self or cls is an ordinary argument.
    for param in signature.parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext or ToolContext in typing.get_args(annotation):
            context_params.append(param.name)
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"@tool {fn.__name__}: *args/**kwargs are not supported")
        properties[param.name] = schema_for_type(annotation)
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        if _needs_structuring(annotation):
            structured[param.name] = annotation
    schema: JSONSchema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    doc = inspect.getdoc(fn) or ""
    first_line = doc.strip().splitlines()[0] if doc.strip() else ""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        kwargs = dict(args)
        for key, annotation in structured.items():
            if key in kwargs:
                kwargs[key] = payloads.structure(kwargs[key], annotation)
        for key in context_params:
            kwargs[key] = ctx
        return _to_result(await fn(**kwargs))

    return Tool(
        name=name or fn.__name__,
        description=description if description is not None else first_line,
        input_schema=schema,
        source=ToolSource.NATIVE,
        execute=execute,
    )


_NON_JSON_CONTAINERS = (tuple, set, frozenset)


def _needs_structuring(annotation: Any) -> bool:
    # JSON gives dicts and lists: attrs classes, enums, tuples and sets need cattrs.
    if isinstance(annotation, type) and (
        attrs.has(annotation) or issubclass(annotation, enum.Enum)
    ):
        return True
    if annotation in _NON_JSON_CONTAINERS or typing.get_origin(annotation) in _NON_JSON_CONTAINERS:
        return True
    return any(_needs_structuring(arg) for arg in typing.get_args(annotation))


@overload
def tool(fn: Callable[..., Awaitable[Any]], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]: ...
def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Make a native :class:`Tool` from an async function's signature.

    The name is the function's, the description its docstring's first line, and the
    input schema comes from the annotations: ``str, int, float, bool, list, dict,
    tuple, Optional`` (which also accepts ``null``), ``Literal``, enums and attrs
    classes. A parameter annotated :class:`ToolContext` is injected, not exposed. Use
    as ``@tool`` or ``@tool(name=..., description=...)``.

    - ``int`` maps to ``"integer"`` and ``float`` to ``"number"``. SPEC §6 maps both to
      ``"number"``; this is a deliberate difference: ``"integer"`` is the more precise
      schema, models fill it well, and it keeps ``1.5`` out of an ``int`` parameter.
    - A fixed tuple ``tuple[int, str]`` is an array of exactly those items (draft-07
      ``items: [...]`` with ``minItems``/``maxItems``); only ``tuple[X, ...]`` is an
      array of any length. The function receives a ``tuple``.
    - attrs classes, enums, tuples and sets are structured with cattrs, strictly:
      ``"false"`` is not a ``bool``, ``1.5`` not an ``int``, ``3`` not a ``str``.
    - ``self`` and ``cls`` are left out only where Python binds them (a bound method,
      a classmethod); in a plain function they are ordinary parameters.
    """
    if fn is not None:
        return _signature_tool(fn, name, description)

    def decorate(inner: Callable[..., Awaitable[Any]]) -> Tool:
        return _signature_tool(inner, name, description)

    return decorate
