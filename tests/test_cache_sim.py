"""The simulated Anthropic prompt cache (ctxcore/cache.py; docs/design.md, "Prompt cache"):
the documented rules on hand-built prompts, and the simulation against the cache reads
Claude Code's logs recorded per call."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxcore.cache import (
    LOOKBACK,
    Block,
    CallCache,
    Prompt,
    agreement,
    min_cacheable,
    simulate,
    simulate_session,
)
from ctxcore.formats.load import load_file
from ctxcore.models import Trace

CC = Path(__file__).parent / "fixtures" / "imports" / "claude-code"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _blocks(sizes: list[int], marks: dict[int, str], tag: str = "") -> tuple[Block, ...]:
    return tuple(
        Block("message", f"m{i}", f"{tag}{i}", n, marks.get(i))  # type: ignore[arg-type]
        for i, n in enumerate(sizes)
    )


def _call(
    i: int, at: timedelta, blocks: tuple[Block, ...], model: str = "claude-sonnet-4-0"
) -> Prompt:
    return Prompt(f"t{i}", T0 + at, model, blocks)


def test_a_second_call_reads_the_marked_prefix_and_writes_the_rest() -> None:
    first = _blocks([1500, 300], {1: "5m"})
    second = _blocks([1500, 300, 200], {2: "5m"})
    a, b = simulate([_call(0, timedelta(0), first), _call(1, timedelta(minutes=1), second)])
    assert (a.cache_read, a.cache_write) == (0, 1800)
    assert (b.cache_read, b.cache_write, b.read_from) == (1800, 200, "t0")


def test_a_prefix_below_the_models_minimum_is_not_cached() -> None:
    assert min_cacheable("claude-3-5-haiku-20241022") == 2048
    assert min_cacheable("claude-haiku-4-5") == 4096
    assert min_cacheable("claude-sonnet-4-20250514") == 1024
    blocks = _blocks([1500], {0: "5m"})
    for model, cached in (("claude-sonnet-4-0", True), ("claude-3-haiku-20240307", False)):
        a, b = simulate(
            [_call(0, timedelta(0), blocks, model), _call(1, timedelta(seconds=30), blocks, model)]
        )
        assert (a.cache_write > 0, b.hit) == (cached, cached)


@pytest.mark.parametrize(
    ("ttl", "gap", "hit"), [("5m", 4, True), ("5m", 6, False), ("1h", 59, True), ("1h", 61, False)]
)
def test_an_entry_expires_after_its_lifetime(ttl: str, gap: int, hit: bool) -> None:
    blocks = _blocks([2000], {0: ttl})
    _, b = simulate([_call(0, timedelta(0), blocks), _call(1, timedelta(minutes=gap), blocks)])
    assert b.hit is hit


def test_a_read_refreshes_the_lifetime() -> None:
    blocks = _blocks([2000], {0: "5m"})
    calls = simulate([_call(i, timedelta(minutes=4 * i), blocks) for i in range(4)])
    assert [c.hit for c in calls] == [False, True, True, True]


def test_the_look_back_reaches_about_20_blocks_before_a_breakpoint() -> None:
    base = [100] * 12
    first = _blocks(base, {11: "5m"})
    for extra, hit in ((LOOKBACK, True), (LOOKBACK + 1, False)):
        later = _blocks(base + [100] * extra, {11 + extra: "5m"})
        _, b = simulate([_call(0, timedelta(0), first), _call(1, timedelta(seconds=10), later)])
        assert b.hit is hit, extra
        if hit:
            assert b.read_upto == 11 and b.cache_read == 1200


def test_a_change_before_the_breakpoint_misses() -> None:
    first = _blocks([1500, 300], {1: "5m"})
    edited = (Block("message", "m0", "changed", 1500), *_blocks([1500, 300], {1: "5m"})[1:])
    _, b = simulate([_call(0, timedelta(0), first), _call(1, timedelta(seconds=10), edited)])
    assert not b.hit and b.cache_write == 1800


def _recorded(t: Trace) -> bool:
    tokens = t.outcome.tokens if t.outcome is not None else None
    return tokens is not None and tokens.cache_read_tokens is not None


def _sessions() -> dict[str, list[Trace]]:
    """Each Claude Code log with recorded cache usage, its side chains with it (they share
    one cache)."""
    out: dict[str, list[Trace]] = {}
    for f in sorted(CC.glob("*.jsonl")):
        traces = list(load_file(f))
        if any(_recorded(t) for t in traces):
            out[f.name] = traces
    return out


def _chains(traces: list[Trace]) -> dict[str, list[Trace]]:
    by: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by[t.session_id or ""].append(t)
    return by


def test_the_fixtures_with_recorded_usage_are_the_three_ccviewer_logs() -> None:
    assert sorted(_sessions()) == [
        "ccviewer-init-session.jsonl",
        "ccviewer-summary-first-calls.subset.jsonl",
        "ccviewer-task-sidechain-session.jsonl",
    ]


@pytest.mark.parametrize("name", sorted(_sessions()))
def test_the_simulation_agrees_with_the_recorded_reads_from_the_second_call(name: str) -> None:
    for chain in _chains(_sessions()[name]).values():
        a = agreement(simulate_session(chain))
        assert a.calls == len(chain) - 1
        pct = a.difference_pct
        assert pct is not None and abs(pct) < 5, (name, a)
        assert a.alike == a.calls, (name, a)


def test_a_first_call_that_reads_an_earlier_sessions_prefix_is_shown_apart() -> None:
    calls = simulate_session(_sessions()["ccviewer-init-session.jsonl"])
    a = agreement(calls)
    assert a.first is calls[0] and a.first.cache_read == 0 and a.first.recorded_read == 4734
    assert a.cached_before == 4734 and a.first.billed_differently
    assert a.first not in a.per_call


def test_a_side_chain_reads_the_system_prompt_an_earlier_side_chain_cached() -> None:
    """Simulated over the whole log (one cache), the second Task agent's first call reads the
    unrecorded system prompt and tools the first one wrote. Billed: 11,454 tokens; simulated:
    more, because the log does not record context Claude Code puts in the agent's first
    message, so the unrecorded block is taken too long: the call is listed as billed
    differently, with both figures."""
    calls = simulate_session(_sessions()["ccviewer-task-sidechain-session.jsonl"])
    second = next(c for c in calls if c.recorded_read == 11454)
    assert second.hit and second.read_upto == 0 and second.blocks[0].kind == "unrecorded"
    assert second.cache_read > 11454 and second in agreement(calls).differing
    first_side = next(c for c in calls if c.trace_id == second.read_from)
    assert first_side.recorded_read == 0 and first_side.cache_write > 0
    a = agreement(calls)
    assert a.alike == a.calls and abs(a.difference_pct or 100) < 5


def test_a_call_billed_differently_is_listed_with_both_figures() -> None:
    calls = simulate_session(_sessions()["ccviewer-task-sidechain-session.jsonl"])
    a = agreement(calls)
    for c in a.differing:
        assert isinstance(c, CallCache) and c.recorded_read is not None
        assert abs(c.cache_read - c.recorded_read) > 0.05 * c.recorded_read
