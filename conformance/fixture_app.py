"""Build the app a Tesseron conformance fixture asks the host to stand up.

Shared by ``conformance/host.py`` (the official host launch contract) and the
pytest conformance suite, so both serve exactly the same app. Only the public API
of :mod:`toolnexus_trio.tesseron` is used. Any fixture member this builder does not
understand is refused with :class:`UnsupportedFixture`, never silently ignored.

Fixture vocabulary (from the suite's README, CC BY 4.0, Tesseron / Kenny Vaneetvelde):

- actions: ``name``, ``description``, ``returns``, ``inputSchema``,
  ``assertHandlerNotCalled``, ``blocksUntilCancelled``, ``progress``,
  ``confirms`` + ``returnsConfirmResult``;
- resources: ``name``, ``description``, ``value``, ``subscribable``, ``emits``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import trio

from toolnexus_trio.tesseron import ActionContext, TesseronApp

__all__ = [
    "SUPPORTED_CAPABILITIES",
    "FixtureApp",
    "UnsupportedFixture",
    "build_fixture_app",
    "missing_capabilities",
]

SUPPORTED_CAPABILITIES = frozenset(
    {"actions", "streaming", "elicitation", "subscriptions", "resume"}
)
"""Capability tags of ``requires`` this host implements (not ``uds``)."""

_FIXTURE_KEYS = frozenset({"actions", "resources"})
_ACTION_KEYS = frozenset(
    {
        "name",
        "description",
        "returns",
        "inputSchema",
        "assertHandlerNotCalled",
        "blocksUntilCancelled",
        "progress",
        "confirms",
        "returnsConfirmResult",
    }
)
_PROGRESS_KEYS = frozenset({"percent", "message"})
_RESOURCE_KEYS = frozenset({"name", "description", "value", "subscribable", "emits"})
_EMIT_KEYS = frozenset({"afterStep", "value"})


class UnsupportedFixture(Exception):
    """The fixture asks for something this host cannot serve."""


class FixtureApp:
    """The built app plus the call log that ``assertHandlerNotCalled`` is checked against."""

    def __init__(self, app: TesseronApp, fixture_id: str) -> None:
        self.app = app
        """The app to serve."""
        self.fixture_id = fixture_id
        """The fixture's ``id``."""
        self.calls: dict[str, int] = {}
        """How often each action's handler ran."""
        self.must_not_run: set[str] = set()
        """Actions whose handler must never run (``assertHandlerNotCalled``)."""

    def check(self) -> None:
        """Raise :class:`AssertionError` if a handler ran that the fixture forbids."""
        ran = sorted(name for name in self.must_not_run if self.calls.get(name))
        if ran:
            raise AssertionError(
                f"{self.fixture_id}: handler(s) {ran} ran, but the fixture says "
                "assertHandlerNotCalled (input validation must happen first)"
            )


def missing_capabilities(fixture: Mapping[str, Any]) -> list[str]:
    """The fixture's ``requires`` tags this host lacks (report as skipped, never passed)."""
    return [tag for tag in fixture.get("requires", []) if tag not in SUPPORTED_CAPABILITIES]


def _refuse(fixture_id: str, what: str) -> UnsupportedFixture:
    return UnsupportedFixture(f"{fixture_id}: cannot serve {what}")


def _check_keys(fixture_id: str, where: str, member: Any, allowed: frozenset[str]) -> None:
    if not isinstance(member, Mapping):
        raise _refuse(fixture_id, f"{where}: expected an object, got {member!r}")
    unknown = sorted(set(member) - allowed)
    if unknown:
        raise _refuse(fixture_id, f"{where}: unknown member(s) {unknown}")


def build_fixture_app(fixture: Mapping[str, Any]) -> FixtureApp:
    """Turn a whole fixture document into a :class:`FixtureApp`.

    Raises :class:`UnsupportedFixture` naming the first member it cannot serve.
    """
    fixture_id = str(fixture.get("id", "<no id>"))
    spec = fixture.get("fixture", {})
    _check_keys(fixture_id, "fixture", spec, _FIXTURE_KEYS)
    result = FixtureApp(TesseronApp("conformance", "Conformance fixture app"), fixture_id)
    for index, action in enumerate(spec.get("actions", [])):
        _add_action(result, f"fixture.actions[{index}]", action)
    steps = fixture.get("steps", [])
    for index, resource in enumerate(spec.get("resources", [])):
        _add_resource(result, f"fixture.resources[{index}]", resource, steps)
    return result


def _add_action(result: FixtureApp, where: str, spec: Any) -> None:
    fid = result.fixture_id
    _check_keys(fid, where, spec, _ACTION_KEYS)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise _refuse(fid, f"{where}: an action needs a string name")
    returns = spec.get("returns")
    blocks = spec.get("blocksUntilCancelled", False)
    question = spec.get("confirms")
    confirm_result = spec.get("returnsConfirmResult", False)
    progress = spec.get("progress", [])
    if not isinstance(blocks, bool) or not isinstance(confirm_result, bool):
        raise _refuse(fid, f"{where}: blocksUntilCancelled/returnsConfirmResult must be booleans")
    if question is not None and not isinstance(question, str):
        raise _refuse(fid, f"{where}: confirms must be a question string")
    if confirm_result and question is None:
        raise _refuse(fid, f"{where}: returnsConfirmResult without confirms")
    if not isinstance(progress, list):
        raise _refuse(fid, f"{where}: progress must be a list")
    for step_index, update in enumerate(progress):
        _check_keys(fid, f"{where}.progress[{step_index}]", update, _PROGRESS_KEYS)
    if spec.get("assertHandlerNotCalled", False):
        result.must_not_run.add(name)
    schema = spec.get("inputSchema")
    if schema is not None and not isinstance(schema, Mapping):
        raise _refuse(fid, f"{where}: inputSchema must be an object")

    async def handler(input: Any, ctx: ActionContext) -> Any:
        result.calls[name] = result.calls.get(name, 0) + 1
        for update in progress:
            await ctx.progress(percent=update.get("percent"), message=update.get("message"))
        confirmed: bool | None = None
        if question is not None:
            confirmed = await ctx.confirm(question)
        if blocks:
            # The host cancels this task on actions/cancel and answers -32001 itself.
            await trio.sleep_forever()
        if confirm_result:
            return {"confirmed": confirmed}
        return returns

    try:
        result.app.action(name, description=spec.get("description", ""), input_schema=schema)(
            handler
        )
    except (TypeError, ValueError) as exc:
        raise _refuse(fid, f"{where}: {exc}") from exc


def _add_resource(result: FixtureApp, where: str, spec: Any, steps: Sequence[Any]) -> None:
    fid = result.fixture_id
    _check_keys(fid, where, spec, _RESOURCE_KEYS)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise _refuse(fid, f"{where}: a resource needs a string name")
    subscribable = spec.get("subscribable", False)
    if not isinstance(subscribable, bool):
        raise _refuse(fid, f"{where}: subscribable must be a boolean")
    value = spec.get("value")
    emits = spec.get("emits", [])
    if not isinstance(emits, list):
        raise _refuse(fid, f"{where}: emits must be a list")
    if emits and not subscribable:
        raise _refuse(fid, f"{where}: emits on a resource that is not subscribable")
    values: list[Any] = []
    for index, emit in enumerate(emits):
        _check_keys(fid, f"{where}.emits[{index}]", emit, _EMIT_KEYS)
        _check_emit_label(fid, f"{where}.emits[{index}]", emit.get("afterStep"), name, steps)
        values.append(emit.get("value"))

    def read() -> Any:
        return value

    subscribe: Callable[[Callable[[Any], None]], None] | None = None
    if values:

        def subscribe_hook(emit: Callable[[Any], None]) -> None:
            # Called right after the subscription is acknowledged, which is exactly
            # the labelled step the emits name (checked at build time).
            for update in values:
                emit(update)

        subscribe = subscribe_hook

    try:
        result.app.resource(
            name,
            read,
            description=spec.get("description", ""),
            subscribable=subscribable,
            subscribe=subscribe,
        )
    except (TypeError, ValueError) as exc:
        raise _refuse(fid, f"{where}: {exc}") from exc


def _check_emit_label(
    fid: str, where: str, label: Any, resource: str, steps: Sequence[Any]
) -> None:
    """Accept only ``afterStep`` labels this host can honour: a subscribe's ack.

    This host publishes ``emits`` from the subscribe hook, i.e. right after the
    subscription is acknowledged; any other trigger point is refused.
    """
    for index, step in enumerate(steps):
        if isinstance(step, Mapping) and step.get("label") == label and index > 0:
            previous = steps[index - 1]
            sent = previous.get("send") if isinstance(previous, Mapping) else None
            if (
                "recv" in step
                and isinstance(sent, Mapping)
                and sent.get("method") == "resources/subscribe"
                and isinstance(sent.get("params"), Mapping)
                and sent["params"].get("name") == resource
            ):
                return
    raise _refuse(
        fid,
        f"{where}: afterStep {label!r} is not the acknowledgement of a resources/subscribe "
        f"of {resource!r} (emits are published right after that acknowledgement)",
    )
