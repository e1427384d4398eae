"""Shared pieces of the judge tests: the shared fixtures (tests/fixtures/judge, MIT,
from toolnexus 0.21: see the README there) and a classifier served by a FakeProvider."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from toolnexus_trio.judge import Classifier, create_classifier
from toolnexus_trio.testing import FakeProvider, open_fake_provider

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "judge"
KEY = "sk-judge-test-0123456789"


def load(name: str) -> Any:
    """A fixture file (``base``, ``adapters/gate-cases``...) as JSON."""
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def answer(response: Mapping[str, Any]) -> dict[str, Any]:
    """A FakeProvider step that answers ``/systemone`` with *response*."""
    return {"text": json.dumps(response)}


@asynccontextmanager
async def served(
    script: Sequence[Mapping[str, Any]] = (), **options: Any
) -> AsyncIterator[tuple[FakeProvider, Classifier]]:
    """A ``systemone`` classifier pointed at a FakeProvider playing *script*."""
    async with open_fake_provider(script) as provider:
        options.setdefault("model", "typesafe/jev-1.13")
        async with create_classifier(base_url=provider.base_url, **options) as classifier:
            yield provider, classifier
