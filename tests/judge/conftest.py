"""Every judge test has a backend key in the environment (a systemone call needs one)."""

from __future__ import annotations

import pytest
from judge_helpers import KEY


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPESAFE_API_KEY", KEY)
