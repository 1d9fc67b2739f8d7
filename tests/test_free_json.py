"""``models.check_free_json``: the free JSON of metadata and tool parameters refused where the
store could not give it back (too deep, a number JSON cannot hold, a lone surrogate).

Its loop tests the exact JSON types first; the answers must be those of the plain
``isinstance`` walk it replaced (``reference`` below), on values of every kind, subclasses of
the JSON types included."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from pydantic_core import PydanticCustomError

from ctxcore.models import check_free_json
from ctxcore.settings import MAX_JSON_DEPTH


def reference(value: dict[str, Any]) -> str | None:
    """Why the value is refused (the first reason found depth-first), or None."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(key, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in key):
                return "surrogate"
            if isinstance(child, dict | list):
                if depth >= MAX_JSON_DEPTH:
                    return "deep"
                todo.append((child, depth + 1))
            elif isinstance(child, float) and not math.isfinite(child):
                return "number"
            elif isinstance(child, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in child):
                return "surrogate"
    return None


def verdict(value: dict[str, Any]) -> str | None:
    try:
        check_free_json(value)
    except PydanticCustomError as exc:
        msg = str(exc)
        return "surrogate" if "surrogate" in msg else "deep" if "nested" in msg else "number"
    return None


class S(str):
    pass


class F(float):
    pass


class D(dict):  # type: ignore[type-arg]
    pass


class L(list):  # type: ignore[type-arg]
    pass


def leaf(rng: random.Random) -> Any:
    return rng.choice(
        [
            1,
            True,
            None,
            0.5,
            "plain",
            "ünïcode 中文",
            "cut \ud800 here",
            S("sub"),
            S("sub \udfff"),
            F(2.5),
            F("inf"),
            float("nan"),
            1e308 * 10,
            -7,
        ]
    )


def tree(rng: random.Random, depth: int, budget: list[int]) -> Any:
    """A random value at most ``depth`` containers deep, with at most ``budget[0]`` nodes."""
    budget[0] -= 1
    if depth == 0 or budget[0] <= 0 or rng.random() < 0.03:
        return leaf(rng)
    # mostly one child (deep chains), sometimes a few
    n = 1 if rng.random() < 0.7 else rng.randint(0, 3)
    if rng.random() < 0.5:
        made: dict[Any, Any] = (D if rng.random() < 0.2 else dict)()
        for _ in range(n):
            k = "k\ud834" if rng.random() < 0.005 else rng.choice(["a", "ключ", S("s"), "xyz"])
            made[f"{k}{len(made)}"] = tree(rng, depth - 1, budget)
        return made
    return (L if rng.random() < 0.2 else list)(tree(rng, depth - 1, budget) for _ in range(n))


def chain(rng: random.Random, depth: int) -> Any:
    """Containers (of every kind) nested ``depth`` deep, with clean leaves beside them."""
    value: Any = "end"
    for _ in range(depth):
        kind = rng.choice([dict, D, list, L])
        value = kind({"a": value, "b": 1}) if kind in (dict, D) else kind([value, True, None])
    return value


def test_the_answers_are_the_isinstance_walks_on_random_values() -> None:
    rng = random.Random(7)
    seen: set[str | None] = set()
    for _ in range(3000):
        if rng.random() < 0.1:
            value = {"root": chain(rng, MAX_JSON_DEPTH + rng.randint(-2, 1))}
        else:
            value = {"root": tree(rng, rng.randint(1, MAX_JSON_DEPTH + 2), [200])}
        want = reference(value)
        got = verdict(value)
        # both walk depth-first in the same order: the same first reason
        assert got == want, value
        seen.add(want)
    assert seen == {None, "surrogate", "deep", "number"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"a": S("x\ud800")}, "surrogate"),
        ({S("k\udc00"): 1}, "surrogate"),
        ({"a": F("-inf")}, "number"),
        ({"a": [True, None, 3, "ok", S("fine")]}, None),
    ],
)
def test_subclasses_of_the_json_types_are_checked_like_the_types(
    value: dict[str, Any], why: str | None
) -> None:
    assert verdict(value) == why == reference(value)
