"""``TesseronApp``: the application's identity, its actions and its resources.

Registration happens here, once: schemas are derived and compiled at registration
(never per invoke), and the published manifest entries are built once and cached
until the next change. Changes while listening are pushed to live connections,
which send the full-manifest ``*/list_changed`` once their welcome is applied.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

from .._converter import describe_structure_error
from .._schema import SchemaError, Validator, compile_schema, schema_for_type
from ._context import ActionContext
from ._errors import ActionError, TesseronErrorCode
from ._host import TesseronHost, listen
from ._manifest import DEFAULT_MANIFEST_DIR, _DefaultManifestDir
from ._wire import ActionManifest, AppInfo, ResourceManifest, app_id_problem, payloads

__all__ = ["ResourceHandle", "TesseronApp"]


RAW_INPUT_SCHEMA: Final[dict[str, Any]] = {"type": "object", "additionalProperties": True}
"""Published for an action without a typed input or explicit schema (MCP wants an object)."""

TOOL_NAME_MAX: Final = 64
"""Longest tool name providers accept (``^[a-zA-Z0-9_-]{1,64}$``)."""

_ACTION_NAME: Final = re.compile(r"[A-Za-z0-9_-]+")


def _action_name_problem(app_id: str, name: object) -> str | None:
    """Why *name* cannot be an action of app *app_id*, or ``None`` when it can.

    The protocol publishes each action as the agent's tool ``<app_id>__<action>``
    (``actions.mdx``, "Naming and the MCP tool list"), and providers accept tool names
    of ``[a-zA-Z0-9_-]``, at most 64 characters (SPEC §0.2): a name outside that would
    reach the model renamed by the gateway, or make a provider refuse the tool list.
    """
    if not isinstance(name, str) or not name:
        return "an action needs a non-empty name"
    tool = f"{app_id}__{name}"
    if _ACTION_NAME.fullmatch(name) is None:
        return (
            f"action name {name!r} is not allowed: it becomes the tool name {tool!r}, and "
            "tool names may only use ASCII letters, digits, '_' and '-' ([A-Za-z0-9_-])"
        )
    if len(tool) > TOOL_NAME_MAX:
        return (
            f"action name {name!r} is too long: it becomes the tool name {tool!r} "
            f"({len(tool)} characters), and tool names may have at most {TOOL_NAME_MAX}"
        )
    return None


Handler = Callable[[Any, ActionContext], Awaitable[Any]]
F = TypeVar("F", bound=Handler)


@attrs.frozen(eq=False)
class _Action:
    """A registered action: handler, compiled validator and published manifest entry."""

    name: str
    handler: Handler
    validator: Validator | None
    input_type: type[Any] | None
    timeout_s: float
    manifest: ActionManifest
    task_name: str = attrs.field(init=False)
    """The name of its invocations' tasks (shown by trio's task tree)."""

    @task_name.default
    def _task_name(self) -> str:
        return f"tesseron action {self.name!r}"

    def prepare_input(self, raw: Any) -> Any:
        """Validate and structure *raw*; ``INPUT_VALIDATION`` (-32004) with issues on failure."""
        if self.validator is not None:
            issues = self.validator.issues(raw)
            if issues:
                raise ActionError(
                    TesseronErrorCode.INPUT_VALIDATION,
                    "Invalid input",
                    [issue.to_json() for issue in issues],
                )
        if self.input_type is None:
            return raw
        try:
            return payloads.structure(raw, self.input_type)
        except Exception as exc:
            raise ActionError(
                TesseronErrorCode.INPUT_VALIDATION,
                "Invalid input",
                [{"message": describe_structure_error(exc), "path": [], "rule": "type"}],
            ) from exc


SubscribeHook = Callable[[Callable[[Any], None]], Callable[[], None] | None]
ReadHook = Callable[[], Any]


class ResourceHandle:
    """A registered resource; :meth:`publish` pushes a value to every subscriber."""

    def __init__(
        self,
        app: TesseronApp,
        name: str,
        read: ReadHook,
        description: str,
        subscribable: bool,
        subscribe: SubscribeHook | None,
    ) -> None:
        self._app = app
        self.name = name
        """The resource name."""
        self.description = description
        """The published description."""
        self.subscribable = subscribable
        """Whether ``resources/subscribe`` is accepted."""
        self._read = read
        self._subscribe = subscribe
        self.manifest = ResourceManifest(name, description, subscribable)
        """The published manifest entry."""

    async def read(self) -> Any:
        """Call the resource's read function (sync or async) and return its value."""
        value = self._read()
        if inspect.isawaitable(value):
            value = await value
        return payloads.unstructure(value)

    async def publish(self, value: Any) -> None:
        """Send ``resources/updated`` with *value* to every live subscription of this resource.

        Subscriptions on dropped connections are skipped; this never raises for them.
        """
        data = payloads.unstructure(value)
        for host in list(self._app._hosts):
            await host._publish(self, data)


class TesseronApp:
    """A Tesseron application: identity, actions and resources.

    The *id* must match ``^[a-z][a-z0-9_]*$`` and must not be ``tesseron``, ``mcp`` or
    ``system``; a bad id raises :class:`ValueError` here, before anything binds.
    """

    def __init__(
        self,
        id: str,
        name: str,
        origin: str = "http://127.0.0.1",
        description: str | None = None,
        version: str | None = None,
    ) -> None:
        problem = app_id_problem(id)
        if problem is not None:
            raise ValueError(problem)
        self.info = AppInfo(
            id=id, name=name, origin=origin, description=description, version=version
        )
        """The ``app`` object sent in hello."""
        self._actions: dict[str, _Action] = {}
        self._resources: dict[str, ResourceHandle] = {}
        self._hosts: set[TesseronHost] = set()
        self._action_manifest: list[ActionManifest] | None = None
        self._resource_manifest: list[ResourceManifest] | None = None
        self.actions_version = 0
        """Bumped on every action change (used to detect changes during a handshake)."""
        self.resources_version = 0
        """Bumped on every resource change."""

    @property
    def id(self) -> str:
        """The app id."""
        return self.info.id

    @property
    def name(self) -> str:
        """The app's display name."""
        return self.info.name

    @property
    def origin(self) -> str:
        """The declared origin."""
        return self.info.origin

    # -- actions --------------------------------------------------------------

    def action(
        self,
        name: str,
        description: str = "",
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        timeout_ms: int = 60000,
        annotations: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Register ``async def handler(input, ctx: ActionContext)`` as action *name*.

        *name* may use ASCII letters, digits, ``_`` and ``-`` only, and
        ``<app id>__<name>`` (the tool name gateways publish) may have at most 64
        characters; another name, or a duplicate, raises :class:`ValueError`.

        When ``input`` is annotated with an attrs class, the published ``inputSchema`` is
        derived from it and the input is structured into it (attribute names are the
        JSON keys). Otherwise the input is raw JSON, validated against *input_schema*
        when given. Schemas are compiled here, once. The return value is unstructured
        with cattrs. An ``input`` annotation that cannot be resolved (a class defined
        inside a function under ``from __future__ import annotations``, or imported only
        under ``TYPE_CHECKING``) raises :class:`TypeError`, naming it.
        """

        def register(fn: F) -> F:
            self._add_action(
                name, fn, description, input_schema, output_schema, timeout_ms, annotations
            )
            return fn

        return register

    def _add_action(
        self,
        name: str,
        fn: Handler,
        description: str,
        input_schema: Mapping[str, Any] | None,
        output_schema: Mapping[str, Any] | None,
        timeout_ms: int,
        annotations: Mapping[str, Any] | None,
    ) -> None:
        problem = _action_name_problem(self.id, name)
        if problem is not None:
            raise ValueError(problem)
        if name in self._actions:
            raise ValueError(f"duplicate action name {name!r}")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"action {name!r}: the handler must be an async function")
        params = list(inspect.signature(fn).parameters.values())
        if len(params) != 2:
            raise TypeError(f"action {name!r}: the handler must take (input, ctx)")
        if timeout_ms <= 0:
            raise ValueError(f"action {name!r}: timeout_ms must be positive")
        input_type = _attrs_input_type(name, fn, params[0].name)
        schema: dict[str, Any] | None
        if input_schema is not None:
            schema = dict(input_schema)
        elif input_type is not None:
            try:
                schema = schema_for_type(input_type)
            except (NameError, TypeError) as exc:
                raise TypeError(
                    f"action {name!r}: cannot derive the input schema from attrs class "
                    f"{input_type.__qualname__}: {exc}"
                ) from exc
        else:
            schema = None
        try:
            validator = compile_schema(schema) if schema is not None else None
            if output_schema is not None:
                compile_schema(output_schema)
        except SchemaError as exc:
            raise ValueError(f"action {name!r}: {exc}") from exc
        manifest = ActionManifest(
            name=name,
            description=description,
            input_schema=schema if schema is not None else dict(RAW_INPUT_SCHEMA),
            timeout_ms=timeout_ms,
            output_schema=dict(output_schema) if output_schema is not None else None,
            annotations=dict(annotations) if annotations is not None else None,
        )
        self._actions[name] = _Action(
            name=name,
            handler=fn,
            validator=validator,
            input_type=input_type,
            timeout_s=timeout_ms / 1000,
            manifest=manifest,
        )
        self._actions_changed()

    def remove_action(self, name: str) -> None:
        """Unregister action *name* (:class:`KeyError` if unknown). Running invocations finish."""
        del self._actions[name]
        self._actions_changed()

    def _actions_changed(self) -> None:
        self._action_manifest = None
        self.actions_version += 1
        for host in list(self._hosts):
            host._manifest_changed(actions=True)

    def action_manifest(self) -> list[ActionManifest]:
        """The published action list (built once per change, in registration order)."""
        if self._action_manifest is None:
            self._action_manifest = [a.manifest for a in self._actions.values()]
        return self._action_manifest

    # -- resources ------------------------------------------------------------

    def resource(
        self,
        name: str,
        read: ReadHook,
        description: str = "",
        subscribable: bool = False,
        subscribe: SubscribeHook | None = None,
    ) -> ResourceHandle:
        """Register resource *name* and return its handle.

        *read* (sync or async, no arguments) answers ``resources/read``. A subscribable
        resource accepts ``resources/subscribe``; the optional *subscribe* hook is called
        as ``subscribe(emit)`` right after the subscription is acknowledged and may
        return a cleanup function, called exactly once on unsubscribe, removal or drop.
        ``emit(value)`` and :meth:`ResourceHandle.publish` both send ``resources/updated``.
        The hook runs on the connection's read path: keep it quick and non-blocking.
        """
        if not isinstance(name, str) or not name:
            raise ValueError("a resource needs a non-empty name")
        if name in self._resources:
            raise ValueError(f"duplicate resource name {name!r}")
        if not callable(read):
            raise TypeError(f"resource {name!r}: read must be callable")
        if subscribe is not None and not subscribable:
            raise ValueError(f"resource {name!r}: a subscribe hook needs subscribable=True")
        handle = ResourceHandle(self, name, read, description, subscribable, subscribe)
        self._resources[name] = handle
        self._resources_changed(None)
        return handle

    def remove_resource(self, name: str) -> None:
        """Unregister resource *name* (:class:`KeyError` if unknown); its subscriptions stop."""
        handle = self._resources.pop(name)
        self._resources_changed(handle)

    def _resources_changed(self, removed: ResourceHandle | None) -> None:
        self._resource_manifest = None
        self.resources_version += 1
        for host in list(self._hosts):
            host._manifest_changed(resources=True, removed=removed)

    def resource_manifest(self) -> list[ResourceManifest]:
        """The published resource list (built once per change, in registration order)."""
        if self._resource_manifest is None:
            self._resource_manifest = [r.manifest for r in self._resources.values()]
        return self._resource_manifest

    # -- serving --------------------------------------------------------------

    def listen(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        manifest_dir: Path | str | _DefaultManifestDir | None = DEFAULT_MANIFEST_DIR,
        allowed_origins: Sequence[str] = (),
    ) -> AbstractAsyncContextManager[TesseronHost]:
        """Serve this app: ``async with app.listen() as host:``.

        Binds a loopback WebSocket (a non-loopback *host*, or a *port* outside
        0..65535, raises :class:`ValueError` before binding), publishes the instance
        manifest in *manifest_dir* (``None`` disables it) and accepts one gateway
        connection at a time. A *manifest_dir* that ``listen`` creates gets mode 0700;
        an existing one keeps its mode, but one that is group- or world-writable
        without the sticky bit raises :class:`ValueError`. Gateways send no
        ``Origin`` header; an upgrade from a browser page (which always sends one) is
        refused with HTTP 403 unless its origin is in *allowed_origins*. See
        :class:`TesseronHost`.
        """
        return listen(
            self,
            host=host,
            port=port,
            manifest_dir=manifest_dir,
            allowed_origins=allowed_origins,
        )


def _attrs_input_type(action: str, fn: Callable[..., Any], param: str) -> type[Any] | None:
    """The attrs class *fn*'s *param* is annotated with, or ``None`` (raw JSON input).

    Only that parameter's annotation is resolved: ``ctx`` may well be annotated with a
    name imported under ``TYPE_CHECKING``. An input annotation that cannot be resolved
    raises, since it may name an attrs class whose schema and validation would
    otherwise be lost without a word.
    """
    target = inspect.unwrap(fn)
    raw = getattr(target, "__annotations__", {}).get(param)
    if raw is None:
        return None
    # get_type_hints on a stand-in holding just this annotation, in fn's globals.
    only = types.SimpleNamespace(__annotations__={param: raw})
    try:
        tp = typing.get_type_hints(only, globalns=getattr(target, "__globals__", None))[param]
    except Exception as exc:
        raise TypeError(
            f"action {action!r}: cannot resolve the annotation {raw!r} of the handler's "
            f"input parameter {param!r} ({exc}); define the class at module level, and "
            "import it at run time rather than under TYPE_CHECKING"
        ) from exc
    if isinstance(tp, type) and attrs.has(tp):
        return tp
    return None
