"""Tool names from outside: sanitized (SPEC §0.2), at most 64 characters, distinct."""

from __future__ import annotations

import hashlib
import re

from hypothesis import given
from hypothesis import strategies as st

from toolnexus_trio._names import sanitize, sanitize_tool_name, unique_tool_names

VALID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def h(original: str) -> str:
    """The documented suffix: 8 hex digits of the SHA-256 of the original."""
    return hashlib.sha256(original.encode()).hexdigest()[:8]


def test_sanitize_replaces_each_other_character_with_an_underscore() -> None:
    assert sanitize("add item") == "add_item"
    assert sanitize("cart.clear") == "cart_clear"
    assert sanitize("über") == "_ber"
    assert sanitize("a/b") == "a_b"
    assert sanitize("ok_-AZ09") == "ok_-AZ09"
    assert sanitize("shop\n") == "shop_"


def test_a_valid_name_is_kept_and_others_are_sanitized_and_bounded() -> None:
    assert sanitize_tool_name("cart_clear") == "cart_clear"
    assert sanitize_tool_name("cart.clear") == "cart_clear"
    assert sanitize_tool_name("") == "_"
    assert sanitize_tool_name("x" * 64) == "x" * 64
    long = "x" * 65
    assert sanitize_tool_name(long) == "x" * 55 + "_" + h(long)
    assert sanitize_tool_name("\ud800") == "_"  # a lone surrogate from JSON


def test_two_long_names_sharing_a_prefix_stay_apart() -> None:
    a, b = "x" * 70 + "a", "x" * 70 + "b"
    assert unique_tool_names([a, b]) == {a: "x" * 55 + "_" + h(a), b: "x" * 55 + "_" + h(b)}


def test_collisions_are_resolved_by_a_hash_of_each_original() -> None:
    names = unique_tool_names(["cart.clear", "cart clear", "cart_clear", "add item"])
    assert names == {
        "cart_clear": "cart_clear",  # a valid name keeps itself
        "cart.clear": "cart_clear_" + h("cart.clear"),
        "cart clear": "cart_clear_" + h("cart clear"),
        "add item": "add_item",  # no collision: no suffix
    }


def test_a_name_crafted_to_collide_with_a_suffix_still_gets_a_distinct_name() -> None:
    crafted = "cart_clear_" + h("cart.clear")  # valid: keeps itself
    names = unique_tool_names(["cart.clear", "cart clear", crafted])
    assert names[crafted] == crafted
    assert len(set(names.values())) == 3
    assert all(VALID.fullmatch(n) for n in names.values())


@given(st.lists(st.text(max_size=80), max_size=12))
def test_any_names_map_to_distinct_valid_names_whatever_the_order(names: list[str]) -> None:
    out = unique_tool_names(names)
    assert set(out) == set(names)
    assert len(set(out.values())) == len(out)
    assert all(VALID.fullmatch(n) for n in out.values())
    assert unique_tool_names(reversed(names)) == out
