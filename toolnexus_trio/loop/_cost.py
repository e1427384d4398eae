"""What a model call costs, from the client's price table (issue 38).

Prices are per million tokens, by model: ``{"input", "output", "cache_read",
"cache_write"}``. A model the table does not name costs ``None``: never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Prices = Mapping[str, Mapping[str, float]]
"""``{model: {"input": ..., "output": ..., "cache_read": ..., "cache_write": ...}}``."""

_KINDS = ("input", "output", "cache_read", "cache_write")


def check_prices(prices: object) -> None:
    """Refuse a price table that is not ``{model: {kind: number >= 0}}``, at once."""
    if prices is None:
        return
    if not isinstance(prices, Mapping):
        raise ValueError(
            f"prices must be a mapping of model to prices, not {type(prices).__name__}"
        )
    for model, table in prices.items():
        if not isinstance(model, str) or not isinstance(table, Mapping):
            raise ValueError(f"prices[{model!r}] must be a mapping of kind to price")
        for kind, value in table.items():
            if kind not in _KINDS:
                raise ValueError(f"prices[{model!r}] has unknown kind {kind!r}; known: {_KINDS}")
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"prices[{model!r}][{kind!r}] must be a number >= 0")
        for kind in ("input", "output"):
            if kind not in table:
                raise ValueError(f"prices[{model!r}] needs an {kind!r} price")


def cost_of(prices: Prices | None, model: str, usage: Mapping[str, Any]) -> float | None:
    """The cost of one call's *usage* at *model*'s prices, or ``None`` when unpriced.

    ``prompt_tokens`` counts every input token; the cached ones among them
    (``cache_read_tokens``, ``cache_write_tokens``) are charged at their own prices,
    which default to the input price when the table does not give them.
    """
    if not prices:
        return None
    table = prices.get(model)
    if table is None:
        return None
    read = usage.get("cache_read_tokens", 0)
    write = usage.get("cache_write_tokens", 0)
    fresh = max(usage.get("prompt_tokens", 0) - read - write, 0)
    price_in = float(table["input"])
    total = (
        fresh * price_in
        + read * float(table.get("cache_read", price_in))
        + write * float(table.get("cache_write", price_in))
        + usage.get("completion_tokens", 0) * float(table["output"])
    )
    return float(total) / 1_000_000
