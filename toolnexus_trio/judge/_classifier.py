"""``create_classifier``: typed questions in, a :class:`Decision` out (SPEC §8B).

Four styles. ``systemone`` POSTs the canonical request to a judgment backend over the
models' :class:`~toolnexus_trio.models._http.Poster` (the SPEC §8 retry rules,
``Retry-After``, ``on_error``, cancellation on the socket: one HTTP client for the whole
package). ``llm`` asks a §8 :class:`~toolnexus_trio.Client` and parses the first JSON
object of its answer; ``custom`` calls a host function; ``static`` answers from
recorded decisions (hermetic tests, CI without a key). Creating a classifier touches no
network; its pool opens on the first call and closes with :meth:`Classifier.aclose`.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import httpx2
import trio

from ..loop._results import GenerateError
from ..models._http import OnError, Poster
from ._decision import Decision, parse_decision
from ._questions import (
    ClassifierError,
    Question,
    as_question,
    canonical_json,
    canonical_request,
    check_limits,
    degenerate_reason,
    questions_to_wire,
)

if TYPE_CHECKING:
    from ..loop._client import Client

DEFAULT_BASE_URL = "https://api.typesafe.ai/v1"
DEFAULT_MODEL = "jev-latest"
DEFAULT_API_KEY_ENV = "TYPESAFE_API_KEY"
OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
OPENROUTER_MODEL = "typesafe/jev-1.13"
OPENROUTER_API_KEY_ENV = "OPENROUTER_API_KEY"
CLASSIFIER_RETRYABLE = frozenset({529})
"""Added to the §8 retryable set: 529 is the backend's "overloaded"."""
PERMANENT_STATUSES = frozenset({501, 505})
"""Never retried, even when listed in ``retryable_statuses``: "not implemented" and
"version not supported" do not get better by asking again."""
MAX_BATCH_CONCURRENCY = 8
"""At most this many evaluations of one batch are in flight at once."""

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_AUTH_STATUSES = (401, 403)

Metric = Callable[[dict[str, Any]], object]
CustomEvaluate = Callable[
    [Any, Mapping[str, Question]],
    "Decision | Mapping[str, Any] | Awaitable[Decision | Mapping[str, Any]]",
]


@attrs.frozen
class RecordedDecision:
    """One recorded answer for the ``static`` style: this *state* asked these
    *questions* got this backend *response* (a body as the backend sends it)."""

    state: Any
    questions: Mapping[str, Question | Mapping[str, Any]]
    response: Mapping[str, Any]


def _expand(value: str, secrets: list[str]) -> str:
    def env(match: re.Match[str]) -> str:
        found = os.environ.get(match[1], "")
        if found:
            secrets.append(found)
        return found

    return _ENV.sub(env, value)


def _state_key(model: str, questions: Mapping[str, Question], state: Any) -> bytes:
    # The three guard states of decisions.json share one questions payload: the state
    # must be part of the key, or a recorded corpus cannot tell them apart.
    return canonical_request(model, questions) + b"\n" + canonical_json(state)


class Classifier:
    """Answers typed questions about a state. Make one with :func:`create_classifier`;
    close it (``async with`` or :meth:`aclose`) to release its connections."""

    def __init__(
        self,
        *,
        style: str,
        model: str,
        base_url: str,
        api_key_env: str,
        headers: Mapping[str, str],
        timeout: float,
        poster: Poster | None,
        request_params: Mapping[str, Any] | None,
        body_transform: Callable[[dict[str, Any]], dict[str, Any] | None] | None,
        on_metric: Metric | None,
        client: Client | None,
        evaluate: CustomEvaluate | None,
        decisions: Iterable[RecordedDecision],
    ) -> None:
        self.style = style
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.headers = dict(headers)
        self.timeout = timeout
        self._poster = poster
        self._request_params = dict(request_params or {})
        self._body_transform = body_transform
        self._on_metric = on_metric
        self._client = client
        self._custom = evaluate
        self._warned: set[str] = set()
        self._recorded: dict[bytes, Mapping[str, Any]] = {}
        for d in decisions:
            qs = {k: as_question(q) for k, q in d.questions.items()}
            self._recorded[_state_key(model, qs, d.state)] = d.response

    @property
    def calibrated(self) -> bool:
        """Whether this style's answers are calibrated probabilities by default."""
        return self.style in ("systemone", "static")

    async def __aenter__(self) -> Classifier:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (if one was opened)."""
        if self._poster is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self._poster.aclose()

    def _metric(self, event: dict[str, Any]) -> None:
        if self._on_metric is not None:
            self._on_metric(event)

    async def evaluate(
        self, state: Any, questions: Mapping[str, Question | Mapping[str, Any]]
    ) -> Decision:
        """Ask *questions* (key -> question) about *state*; the answers by key.

        Limits are checked before any request; a failure is a :class:`ClassifierError`
        (and a ``classifier.evaluate`` metric with ``status: "error"``).
        """
        started = trio.current_time()
        try:
            qs = {str(k): as_question(q) for k, q in questions.items()}
            check_limits(qs)
            self._warn_degenerate(qs)
            decision = await self._evaluate(state, qs)
        except ClassifierError as exc:
            self._metric(
                {
                    "event": "classifier.evaluate",
                    "status": "error",
                    "model": self.model,
                    "error": str(exc),
                }
            )
            raise
        self._metric(
            {
                "event": "classifier.evaluate",
                "status": "ok",
                "model": decision.model,
                "prompt_tokens": decision.usage.input_tokens,
                "completion_tokens": decision.usage.output_tokens,
                "ms": int((trio.current_time() - started) * 1000),
            }
        )
        return decision

    async def evaluate_batch(
        self, states: Sequence[Any], questions: Mapping[str, Question | Mapping[str, Any]]
    ) -> list[Decision]:
        """The same questions about each state, concurrently (at most
        :data:`MAX_BATCH_CONCURRENCY` at once); decisions in input order.

        Every evaluation runs to its end, then a failure fails the whole batch naming
        the lowest failing index (``state 1: ...``), whichever finished first: the
        error does not depend on timing. An empty list is an error; nothing is sent.
        """
        if not states:
            raise ClassifierError("classifier: evaluate_batch needs at least one state")
        results: list[Decision | ClassifierError | None] = [None] * len(states)
        limiter = trio.CapacityLimiter(MAX_BATCH_CONCURRENCY)

        async def one(index: int) -> None:
            async with limiter:
                try:
                    results[index] = await self.evaluate(states[index], questions)
                except ClassifierError as exc:
                    results[index] = exc

        async with trio.open_nursery() as nursery:
            for index in range(len(states)):
                nursery.start_soon(one, index)
        out: list[Decision] = []
        for index, result in enumerate(results):
            if not isinstance(result, Decision):
                detail = str(result).removeprefix("classifier: ")
                raise ClassifierError(f"classifier: state {index}: {detail}") from result
            out.append(result)
        return out

    def _warn_degenerate(self, questions: Mapping[str, Question]) -> None:
        for key, q in questions.items():
            reason = degenerate_reason(q)
            if reason is None or key in self._warned:
                continue
            self._warned.add(key)
            self._metric(
                {
                    "event": "classifier.warning",
                    "question": key,
                    "warning": f"classifier: question {key!r} has degenerate criteria ({reason}); "
                    "its options cannot be told apart, so the choice ranks at chance (SPEC.md §8B)",
                }
            )

    async def _evaluate(self, state: Any, questions: Mapping[str, Question]) -> Decision:
        if self.style == "static":
            response = self._recorded.get(_state_key(self.model, questions, state))
            if response is None:
                raise ClassifierError(
                    "classifier: no recorded decision for this model, questions and state"
                )
            return parse_decision(response, model=self.model)
        if self.style == "custom":
            assert self._custom is not None
            try:
                out: Any = self._custom(state, questions)
                if inspect.isawaitable(out):
                    out = await out
            except ClassifierError:
                raise
            except Exception as exc:
                raise ClassifierError(
                    f"classifier: evaluate raised {type(exc).__name__}: {exc}"
                ) from exc
            if isinstance(out, Decision):
                return out
            return parse_decision(out, calibrated_default=False, model=self.model)
        if self.style == "llm":
            return await self._ask_llm(state, questions)
        return await self._post(state, questions)

    async def _post(self, state: Any, questions: Mapping[str, Question]) -> Decision:
        assert self._poster is not None
        secrets: list[str] = []
        headers = {k: _expand(v, secrets) for k, v in self.headers.items()}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise ClassifierError(f"classifier: ${self.api_key_env} is not set")
            secrets.append(key)
            headers.setdefault("Authorization", f"Bearer {key}")
        headers.setdefault("Content-Type", "application/json")
        self._poster.hidden[:] = list(dict.fromkeys([*self._poster.hidden, *secrets]))
        body: dict[str, Any] = json.loads(canonical_request(self.model, questions))
        body["state"] = state
        body.update(self._request_params)
        if self._body_transform is not None:
            changed = self._body_transform(body)
            if changed is not None:
                body = changed
        url = f"{self.base_url}/systemone"
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            with trio.fail_after(self.timeout):
                _, raw = await self._poster.post(url, headers, content, stream=False)
        except trio.TooSlowError:
            raise ClassifierError(
                f"classifier: POST {url} timed out after {self.timeout:g} s"
            ) from None
        except GenerateError as exc:
            status = getattr(exc, "status", None)
            if status in _AUTH_STATUSES:
                # An authentication failure's body can echo the credential or the
                # expanded headers: it is never shown, only the status and endpoint.
                raise ClassifierError(f"classifier: HTTP {status} from POST {url}") from None
            raise ClassifierError(f"classifier: {exc}") from None
        try:
            data = json.loads(raw or b"")
        except ValueError:
            raise ClassifierError(f"classifier: POST {url} answered with invalid JSON") from None
        return parse_decision(data, model=self.model)

    async def _ask_llm(self, state: Any, questions: Mapping[str, Question]) -> Decision:
        assert self._client is not None
        prompt = (
            "Answer the questions about the state. Reply with one JSON object "
            '{"answers": {key: answer}} and nothing else. A noul answer is '
            '{"type":"noul","noul":p} (p the probability that the statement is true); a choice '
            'answer {"type":"choice","choice":option,"confidence":c,"probabilities":{option:p}}; '
            'a score answer {"type":"score","score":s,"confidence":c,"probabilities":{level:p},'
            '"legend":{level:meaning}} with levels "0", "1", ...\n'
            f"STATE: {json.dumps(state, ensure_ascii=False)}\n"
            f"QUESTIONS: {json.dumps(questions_to_wire(questions), ensure_ascii=False)}"
        )
        try:
            result = await self._client.run(prompt)
        except GenerateError as exc:
            raise ClassifierError(f"classifier: the model failed: {exc}") from None
        text = result.text
        start = text.find("{")
        try:
            data, _ = json.JSONDecoder().raw_decode(text, start) if start >= 0 else (None, 0)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ClassifierError("classifier: the model's answer holds no JSON object")
        return parse_decision(data, calibrated_default=False, model=self.model)


def create_classifier(
    style: Literal["systemone", "llm", "custom", "static"] = "systemone",
    *,
    backend: Literal["typesafe", "openrouter"] | None = None,
    base_url: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    retries: int = 2,
    retry_base_ms: int = 500,
    retryable_statuses: Collection[int] = (),
    on_error: OnError | None = None,
    request_params: Mapping[str, Any] | None = None,
    body_transform: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    on_metric: Metric | None = None,
    http_client: httpx2.AsyncClient | None = None,
    client: Client | None = None,
    evaluate: CustomEvaluate | None = None,
    decisions: Iterable[RecordedDecision] = (),
) -> Classifier:
    """A :class:`Classifier` of *style* (SPEC §8B). Constructs nothing on the network.

    ``backend="openrouter"`` sets ``base_url``, ``model`` and ``api_key_env`` as a unit
    (OpenRouter, ``typesafe/jev-1.13``, ``OPENROUTER_API_KEY``); ``"typesafe"`` or none
    gives the defaults (``https://api.typesafe.ai/v1``, ``jev-latest``,
    ``TYPESAFE_API_KEY``); explicit arguments win. The key is read from the
    environment at each call and sent as ``Authorization: Bearer``; an empty
    ``api_key_env`` sends none (a local backend). ``headers`` values may hold
    ``${VAR}``, read at each call. ``timeout`` (seconds) bounds a whole evaluation, its
    retries included. Retries follow SPEC §8 (429, 500, 502, 503, 504 and 529, plus
    ``retryable_statuses``; ``on_error`` has the final say; backoff ``retry_base_ms *
    2**attempt``). ``llm`` needs ``client``, ``custom`` needs ``evaluate``, ``static``
    answers from ``decisions``.
    """
    if style == "llm" and client is None:
        raise ClassifierError("classifier: style 'llm' requires client")
    if style == "custom" and evaluate is None:
        raise ClassifierError("classifier: style 'custom' requires evaluate")
    if style not in ("systemone", "llm", "custom", "static"):
        raise ClassifierError(f"classifier: unknown style {style!r}")
    if backend == "openrouter":
        preset = (OPENROUTER_BASE_URL, OPENROUTER_MODEL, OPENROUTER_API_KEY_ENV)
    elif backend in (None, "typesafe"):
        preset = (DEFAULT_BASE_URL, DEFAULT_MODEL, DEFAULT_API_KEY_ENV)
    else:
        raise ClassifierError(f"classifier: unknown backend {backend!r}")
    url = base_url if base_url is not None else preset[0]
    name = model if model is not None else preset[1]
    if "openrouter.ai" in url and name == DEFAULT_MODEL:
        raise ClassifierError(
            f"classifier: OpenRouter has no model {DEFAULT_MODEL!r}; use {OPENROUTER_MODEL!r}"
        )
    poster = None
    if style == "systemone":
        poster = Poster(
            http_client=http_client,
            retries=retries,
            retry_base_ms=retry_base_ms,
            retryable_statuses=(CLASSIFIER_RETRYABLE | frozenset(retryable_statuses))
            - PERMANENT_STATUSES,
            on_error=on_error,
            secret=None,
        )
    return Classifier(
        style=style,
        model=name,
        base_url=url,
        api_key_env=api_key_env if api_key_env is not None else preset[2],
        headers=headers or {},
        timeout=timeout,
        poster=poster,
        request_params=request_params,
        body_transform=body_transform,
        on_metric=on_metric,
        client=client,
        evaluate=evaluate,
        decisions=decisions,
    )
