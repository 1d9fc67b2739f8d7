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

from ctxcore.models import CapturedInput, Packet
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
