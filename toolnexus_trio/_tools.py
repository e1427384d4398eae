"""Tools: the uniform :class:`Tool`, its result and context, and ways to define one."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
import math
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Union, overload

import attrs
import cattrs
import trio

from ._cancel import CancelToken
from ._content import ContentPart
from ._converter import describe_structure_error, is_pydantic_model, payloads
from ._schema import (
    JSONSchema,
    SchemaDeriver,
    SchemaError,
    Validator,
    annotated_description,
    compile_schema,
    empty_schema,
    strip_annotated,
)
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

    ``cancelled_result`` is for the tool to set: the result recorded for this call if
    it is cancelled (the turn's token, a run timeout, an enclosing scope), instead of
    ``ToolResult.error("cancelled")``. The tool sets it, typically in an
    ``except trio.Cancelled:`` block that re-raises, so the cancel still propagates
    (the A2A tools declare SPEC §7A's ``"A2A task <id> canceled"`` this way).
    """

    cancel: CancelToken = attrs.field(factory=CancelToken)
    call_id: str | None = None
    timeout_ms: int = 0
    answer: Answer | None = None
    cancelled_result: ToolResult | None = None


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
    retries: int = 1
    """How often per run the tool may raise :class:`RetryTool` to ask the model to call
    again; past it the result says the retries are spent."""
    output_schema: JSONSchema | None = None
    """The JSON Schema (an object) of the tool's value, when it returns a typed one (a
    :func:`tool` function annotated with a class, a list...): served over MCP as
    ``outputSchema``, its value as ``structuredContent``. A value that is not an object
    is wrapped as ``{"result": value}`` (``output_wrapped``)."""
    output_wrapped: bool = False
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
                        declared = ctx.cancelled_result
                        return declared if declared is not None else ToolResult.error("cancelled")
                    return ToolResult.error(f"timed out after {timeout_ms}ms")
        except Exception as exc:
            return error_result(exc)
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


class RetryTool(Exception):
    """Raised by a tool: its message goes to the model as the call's result, asking it to
    call again differently, instead of a failure of the tool.

    A tool may do so :attr:`Tool.retries` times per run (``@tool(retries=...)``,
    default 1); past that, the result says the tool's retries are spent.
    """


def error_result(exc: BaseException) -> ToolResult:
    """The error result of a tool that raised *exc* (a :class:`RetryTool` is marked so
    that the loop can bound it: ``metadata={"retry": True}``)."""
    if isinstance(exc, RetryTool):
        return ToolResult.error(str(exc) or "the tool asked to be called again", {"retry": True})
    return ToolResult.error(describe_exception(exc))


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
SyncNativeFn = Callable[[dict[str, Any], ToolContext], Any]


def define_tool(
    name: str, description: str, input_schema: JSONSchema | None, fn: NativeFn | SyncNativeFn
) -> Tool:
    """Make a native tool from ``fn(args, ctx) -> str | ToolResult``, async or not.

    A returned ``str`` becomes ``ToolResult.ok``; other values are sent as JSON; a
    raised ``Exception`` becomes ``ToolResult.error(str(exc))`` (via :meth:`Tool.call`).
    ``input_schema=None`` means :func:`empty_schema`. A plain (sync) *fn* runs in a
    worker thread, as with :func:`tool` (see there for what a cancel does to it).
    """
    if not is_async_callable(fn):
        _check_plain_callable(fn, f"define_tool({name!r})")
        fn = _InThread(fn)
    return Tool(
        name=name,
        description=description,
        input_schema=empty_schema() if input_schema is None else input_schema,
        source=ToolSource.NATIVE,
        execute=_NativeExecute(typing.cast(NativeFn, fn)),
    )


def _check_plain_callable(fn: object, who: str) -> None:
    if not callable(fn):
        raise TypeError(f"{who}: expected a function, got {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"{who}: a generator cannot be a tool; return the value instead")


class _InThread:
    """A sync function as an async one: each call runs in a Trio worker thread.

    A cancel returns at once (``abandon_on_cancel``); Python cannot stop a thread, so
    the function runs on to its end and its value is dropped. The thread still counts
    against Trio's default thread limiter until then.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(self.fn, *args, **kwargs)
        value = await trio.to_thread.run_sync(call, abandon_on_cancel=True)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: close it rather than leave a warning
            raise TypeError(
                f"{self.fn!r} returned an awaitable from a worker thread: make it `async def`"
            )
        return value

    def __repr__(self) -> str:
        return f"in_thread({self.fn!r})"


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


def _param_docs(doc: str) -> tuple[str, dict[str, str]]:
    """The summary line and each parameter's text from a Google, NumPy or reST docstring."""
    if not doc.strip():
        return "", {}
    import docstring_parser  # here: only a @tool function's definition needs it

    try:
        parsed = docstring_parser.parse(doc)  # the style is detected
    except docstring_parser.ParseError:  # not one of the three: the first line, no params
        return doc.strip().splitlines()[0].strip(), {}
    params = {p.arg_name: " ".join(p.description.split()) for p in parsed.params if p.description}
    return (parsed.short_description or "").strip(), params


_UNTYPED_RETURNS: tuple[Any, ...] = (str, ToolResult, Any, object, type(None), None)


def _output_schema(annotation: Any) -> tuple[JSONSchema | None, bool]:
    """``(schema, wrapped)`` of a typed return annotation; ``(None, False)`` for text,
    a ``ToolResult``, no annotation, or a type no schema describes (never an error: the
    return type only adds a description of the value)."""
    bare = strip_annotated(annotation) if annotation is not None else None
    if bare in _UNTYPED_RETURNS or (
        typing.get_origin(bare) in (Union, types.UnionType)
        and any(a in (str, ToolResult) for a in typing.get_args(bare))
    ):
        return None, False
    try:
        schema = SchemaDeriver().schema(bare)
        if "$defs" in schema or "$ref" in json.dumps(schema):
            return None, False  # references would need their root: not worth it here
        compile_schema(schema)
    except (TypeError, SchemaError):
        return None, False
    if schema.get("type") == "object":
        return schema, False
    wrapper: JSONSchema = {"type": "object", "properties": {"result": schema},
                           "required": ["result"]}  # fmt: skip
    return wrapper, True


def _signature_tool(fn: Callable[..., Any], name: str | None, description: str | None) -> Tool:
    tool_name = name or getattr(fn, "__name__", None) or type(fn).__name__
    who = f"tool {tool_name!r}"
    is_async = is_async_callable(fn)
    if not is_async:
        _check_plain_callable(fn, who)
    # A callable object's annotations are on its class's __call__.
    annotated = fn if inspect.isroutine(fn) else getattr(type(fn), "__call__", fn)  # noqa: B004
    try:
        hints = typing.get_type_hints(annotated, include_extras=True)
    except NameError as exc:
        raise TypeError(f"{who}: unresolved annotation: {exc}") from None
    except TypeError:  # an object typing cannot read (a functools.partial): no annotations
        hints = {}
    signature = inspect.signature(fn)
    summary, param_docs = _param_docs(inspect.getdoc(fn) or "")
    deriver = SchemaDeriver()
    properties: dict[str, JSONSchema] = {}
    required: list[str] = []
    context_params: list[str] = []
    structured: dict[str, Any] = {}
    # A bound method's (or classmethod's) signature already leaves out self / cls; in a
    # plain function a parameter named self or cls is an ordinary argument.
    for param in signature.parameters.values():
        annotation = hints.get(param.name, Any)
        bare = strip_annotated(annotation)
        if bare is ToolContext or ToolContext in typing.get_args(bare):
            context_params.append(param.name)
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{who}: *args/**kwargs are not supported")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{who}: parameter {param.name!r} is positional-only")
        try:
            prop = deriver.schema(annotation)
        except TypeError as exc:
            raise TypeError(f"{who}: parameter {param.name!r}: {exc}") from None
        text = annotated_description(annotation) or param_docs.get(param.name)
        if text and "description" not in prop:
            prop = {**prop, "description": text}
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        if _needs_structuring(bare):
            structured[param.name] = bare
    schema: JSONSchema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    schema = deriver.rooted(schema)
    run: Callable[..., Awaitable[Any]] = fn if is_async else _InThread(fn)

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        kwargs = dict(args)
        for key, annotation in structured.items():
            if key in kwargs:
                try:
                    kwargs[key] = payloads.structure(kwargs[key], annotation)
                except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
                    why = describe_structure_error(exc, root=f"$.{key}")
                    return ToolResult.error(f"Invalid arguments for tool '{tool_name}': {why}")
        for key in context_params:
            kwargs[key] = ctx
        return _to_result(await run(**kwargs))

    output_schema, wrapped = _output_schema(hints.get("return"))
    try:
        return Tool(
            name=tool_name,
            description=description if description is not None else summary,
            input_schema=schema,
            source=ToolSource.NATIVE,
            execute=execute,
            output_schema=output_schema,
            output_wrapped=wrapped,
        )
    except SchemaError as exc:
        raise TypeError(f"{who}: {exc}") from None


_NON_JSON_CONTAINERS = (tuple, set, frozenset)


def _needs_structuring(annotation: Any) -> bool:
    # JSON gives dicts and lists: classes, enums, tuples and sets need cattrs (or pydantic).
    if isinstance(annotation, type) and (
        attrs.has(annotation)
        or dataclasses.is_dataclass(annotation)
        or typing.is_typeddict(annotation)
        or issubclass(annotation, enum.Enum)
        or is_pydantic_model(annotation)
    ):
        return True
    if annotation in _NON_JSON_CONTAINERS or typing.get_origin(annotation) in _NON_JSON_CONTAINERS:
        return True
    return any(_needs_structuring(arg) for arg in typing.get_args(annotation))


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, retries: int = 1
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    retries: int = 1,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a native :class:`Tool` from a function's signature, ``async def`` or plain.

    The name is the function's and the description its docstring's first line. Each
    parameter's description comes from ``Annotated[T, "text"]`` (the first ``str``
    metadata) or else from the docstring's parameter section, in the Google
    (``Args:``), NumPy (``Parameters``) or reST (``:param x:``) style. The input schema
    comes from the annotations: ``str, int, float, bool, list, dict, tuple, Optional``
    (which also accepts ``null``), ``Literal``, enums, attrs classes, dataclasses,
    ``TypedDict`` and pydantic models, nested in one another; the function receives
    instances. A type that cannot be described raises :class:`TypeError` here, naming
    the tool and the parameter. A parameter annotated :class:`ToolContext` is injected,
    not exposed. Use as ``@tool`` or ``@tool(name=..., description=...)``.

    - A plain (sync) function runs in a Trio worker thread, so it may block. A cancel
      (the turn's, a timeout, an enclosing scope) returns at once; Python cannot stop a
      thread, so the function runs on to its end in the background and its value is
      dropped. A long one can look at ``ctx.cancel.is_cancelled`` to stop early.
    - ``int`` maps to ``"integer"`` and ``float`` to ``"number"``. SPEC §6 maps both to
      ``"number"``; this is a deliberate difference: ``"integer"`` is the more precise
      schema, models fill it well, and it keeps ``1.5`` out of an ``int`` parameter.
    - A fixed tuple ``tuple[int, str]`` is an array of exactly those items (draft-07
      ``items: [...]`` with ``minItems``/``maxItems``); only ``tuple[X, ...]`` is an
      array of any length. The function receives a ``tuple``.
    - Classes, enums, tuples and sets are structured with cattrs, strictly (pydantic
      models by pydantic): ``"false"`` is not a ``bool``, ``1.5`` not an ``int``, ``3``
      not a ``str``. Arguments that fail are an error result naming the field, sent back
      to the model; the function does not run.
    - ``self`` and ``cls`` are left out only where Python binds them (a bound method,
      a classmethod); in a plain function they are ordinary parameters.
    - Raising :class:`RetryTool` sends its message to the model as the result, asking
      for another call; *retries* bounds how often per run (:attr:`Tool.retries`).
    """
    if fn is not None:
        return _signature_tool(fn, name, description)

    def decorate(inner: Callable[..., Any]) -> Tool:
        made = _signature_tool(inner, name, description)
        return made if retries == 1 else attrs.evolve(made, retries=retries)

    return decorate
