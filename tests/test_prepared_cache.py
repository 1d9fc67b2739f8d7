"""The prepared-input cache never hands one input's preparation to another.

A content-equal copy of an input is served the first input's preparation and cached under the
copy's id. If the copy died and a different input took its memory (CPython reuses addresses),
the cache used to return the stale preparation: a build of one input made from another's items
(seen as a missing history summary and as a BudgetError naming packets the input never had).
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime

import pytest

from ctxcore.models import CapturedInput, Message, Packet
from ctxcore.pipeline.gather import PREPARED
from ctxcore.tokens import get_counter

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _input(tag: str) -> CapturedInput:
    return CapturedInput(
        query=f"why does {tag} fail?",
        now=NOW,
        packets=[Packet(id=f"tool:{tag}", kind="tool_result", content=f"FAILED {tag}")],
    )


def test_a_reused_id_never_gets_another_inputs_preparation() -> None:
    counter = get_counter("cl100k_base")
    PREPARED.clear()
    a = _input("a")
    PREPARED.get(a, counter)
    copy = a.model_copy(deep=True)
    assert PREPARED.get(copy, counter).input is a  # served by content, cached under id(copy)
    stale = id(copy)
    del copy
    gc.collect()
    reused = None
    keep = []
    for k in range(5000):  # allocate until CPython hands out the freed address again
        c = _input(f"other-{k}")
        if id(c) == stale:
            reused = c
            break
        keep.append(c)
    if reused is None:
        pytest.skip("the allocator did not reuse the freed address this time")
    prep = PREPARED.get(reused, counter)
    assert prep.input.query == reused.query
    assert [it.id for it in prep.items if it.id.startswith("tool:")] == [reused.packets[0].id]


def _sized(tag: str, n: int) -> CapturedInput:
    return CapturedInput(
        query=f"why does {tag} fail?",
        now=NOW,
        packets=[
            Packet(id=f"tool:{tag}:{i}", kind="tool_result", content=f"FAILED {tag} {i}")
            for i in range(n)
        ],
    )


def test_the_cache_is_bounded_by_inputs_and_by_packets() -> None:
    from ctxcore.pipeline.gather import _PreparedCache

    counter = get_counter("cl100k_base")
    cache = _PreparedCache(size=4, max_packets=100)
    small = [_sized(f"s{i}", 5) for i in range(6)]
    for inp in small:
        cache.get(inp, counter)
    # the 4 most recent are held, each served by identity (the same object back)
    held = [inp for inp in small if cache.get(inp, counter).input is inp]
    assert len(cache._recent) == 4 and len(cache._data) == 4
    assert held[-4:] == small[-4:]
    big = _sized("big", 80)  # 81 counted: 4 small ones (6 each) and it would be 105
    prepared = cache.get(big, counter)
    assert prepared.input is big
    assert sum(len(p.input.packets) + 1 for _, p in cache._recent.values()) <= 100
    assert [p.input for _, p in cache._recent.values()] == [*small[-3:], big]
    huge = _sized("huge", 150)  # over the bound alone: kept, as the most recent entry
    assert cache.get(huge, counter).input is huge
    assert [p.input for _, p in cache._recent.values()] == [huge]
    assert [inp for inp, _ in cache._data.values()] == [huge]


def test_the_cache_is_bounded_by_characters_of_text() -> None:
    from ctxcore.pipeline.gather import _PreparedCache

    counter = get_counter("cl100k_base")
    cache = _PreparedCache(size=64, max_packets=10_000, max_chars=3_000)
    wide = [
        CapturedInput(
            query="q",
            now=NOW,
            packets=[Packet(id=f"tool:{i}", kind="tool_result", content=f"{i} " + "x" * 998)],
        )
        for i in range(5)
    ]
    for inp in wide:
        cache.get(inp, counter)
    # 1,000+ characters each: three fit under 3,000, the newest kept
    assert [p.input for _, p in cache._recent.values()] == wide[-3:]


def test_history_text_counts_against_the_character_bound() -> None:
    """An imported session log's turn is mostly history: its text is bounded like packets'."""
    from ctxcore.pipeline.gather import _PreparedCache

    counter = get_counter("cl100k_base")
    cache = _PreparedCache(size=64, max_packets=10_000, max_chars=3_000)
    talks = [
        CapturedInput(
            query=f"q{i}",
            now=NOW,
            history=[
                Message(role="user", content=f"{i} " + "y" * 998),
                Message(role="assistant", content="ok"),
            ],
        )
        for i in range(5)
    ]
    for inp in talks:
        cache.get(inp, counter)
    assert [p.input for _, p in cache._recent.values()] == talks[-2:]
