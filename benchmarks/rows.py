"""The rows of the benchmark report and their types, shared by the scenario modules (which
build their rows) and :mod:`benchmarks.report` (which renders them), so that neither
imports the other: :class:`Row`, :class:`Stats`, :class:`Target`, the run's
:class:`Config` and :func:`flat`.

A row's ``met`` is always computed from the measured numbers and the row's
:class:`Target`; nothing is typed in.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Raw = dict[str, dict[str, list[dict[str, Any]]]]
"""Every child's JSON, keyed by scenario and side."""

_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge}


@dataclasses.dataclass(frozen=True)
class Config:
    """How much work each scenario does; ``--quick`` shrinks rounds, never N per run."""

    agent_rounds: int = 8
    host_rounds: int = 5
    overhead_runs: int = 300
    overhead_warmup: int = 50
    fanout_runs: int = 20
    fanout_warmup: int = 1  # the first run of the process only: what a user warms
    fanout_cold_rounds: int = 12
    cancel_runs: int = 1
    invoke_sequential: int = 2000
    invoke_total: int = 20000
    stubborn_reps: int = 3
    scale_n: int = 10_000
    storm_n: int = 100_000
    http_rounds: int = 3
    http_overhead_runs: int = 200
    http_overhead_warmup: int = 30
    http_burst_runs: int = 1
    http_cancel_runs: int = 5
    xf_rounds: int = 5  # scenario 17: rounds x sides, one fresh process each
    xf_runs: int = 30
    xf_warmup: int = 5
    store_rounds: int = 3  # scenario 18: whole store runs (1, 2, 4 workers each)
    conv_rounds: int = 3  # scenario 21: fresh processes per side
    conv_n: int = 1000  # scenario 21: conversations in flight at once


@dataclass(frozen=True)
class Target:
    """``subject op value``: *subject* is ``ratio`` (ours/peer median), ``limit`` (ours
    median / the row's measured limit) or ``ours`` (one statistic of our side, e.g.
    ``p95``); *checks* are extra facts that must hold."""

    subject: str
    op: str
    value: float
    stat: str = "median"
    unit: str = ""
    checks: tuple[tuple[str, bool], ...] = ()

    def text(self) -> str:
        if self.subject == "ratio":
            head = f"ratio {self.op} {self.value:g}"
        elif self.subject == "limit":
            head = f"ours/limit {self.op} {self.value:g}"
        else:
            head = f"ours {self.stat} {self.op} {self.value:g} {self.unit}".rstrip()
        return " and ".join([head, *(name for name, _ in self.checks)])


@dataclass
class Stats:
    median: float
    p95: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        s = sorted(samples)
        p95 = s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)]
        return cls(statistics.median(s), p95, s[0], s[-1], len(s))

    def as_dict(self) -> dict[str, float]:
        return {
            "median": self.median,
            "p95": self.p95,
            "min": self.min,
            "max": self.max,
            "n": self.n,
        }


@dataclass
class Row:
    name: str
    metric: str
    unit: str
    ours: Stats
    peer: Stats
    limit: str
    target: Target | None
    notes: list[str] = field(default_factory=list)
    higher_is_better: bool = False
    limit_value: float | None = None
    """The limit in the row's unit, measured in the same run (host scenarios)."""

    @property
    def short(self) -> str:
        return self.name.split(" (")[0]

    @property
    def ratio(self) -> float:
        # An overhead row's peer median can be 0 or below in a noisy run: no ratio then.
        return self.ours.median / self.peer.median if self.peer.median > 0 else math.inf

    @property
    def to_limit(self) -> float | None:
        """Ours (median) over the limit: the distance to it."""
        if not self.limit_value or not math.isfinite(self.limit_value):
            return None
        return self.ours.median / self.limit_value

    @property
    def met(self) -> bool | None:
        t = self.target
        if t is None:
            return None
        if t.subject == "ratio":
            value = self.ratio
        elif t.subject == "limit":
            value = self.to_limit if self.to_limit is not None else math.nan
        else:
            value = getattr(self.ours, t.stat)
        return _OPS[t.op](value, t.value) and all(ok for _, ok in t.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": f"{self.metric} ({self.unit})",
            "ours": self.ours.as_dict(),
            "peer": self.peer.as_dict(),
            "limit": self.limit,
            "limit_value": self.limit_value,
            "ours_to_limit": self.to_limit,
            "ratio": self.ratio,
            "target": self.target.text() if self.target else None,
            "met": self.met,
            "notes": self.notes,
        }


def flat(runs: list[dict[str, Any]], key: str) -> list[float]:
    """The values of *key* in every run, a list value flattened into the samples."""
    out: list[float] = []
    for run in runs:
        value = run[key]
        out.extend(value if isinstance(value, list) else [value])
    return out
