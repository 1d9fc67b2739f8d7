"""OpenAI's and Gemini's automatic prompt caches (ctxcore/cache/automatic.py; docs/design.md,
"Prompt cache") against the cache reads recorded in real sessions: Codex rollouts, an Inspect
log of gpt-4o-mini, Gemini CLI sessions; and the importers' cache_control ttl."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from ctxcore.cache import agreement, prompt_of, provider_of, simulate, simulate_session
from ctxcore.cache.automatic import OPENAI_MIN, OPENAI_STEP, minimum
from ctxcore.formats.load import load_file
from ctxcore.models import Trace

IMPORTS = Path(__file__).parent / "fixtures" / "imports"


def _sessions(path: Path) -> dict[str, list[Trace]]:
    by: dict[str, list[Trace]] = defaultdict(list)
    for t in load_file(path):
        by[t.session_id].append(t)
    return by


def test_the_provider_is_found_by_the_model_name() -> None:
    assert provider_of("gpt-5.3-codex") == "openai"
    assert provider_of("openai/gpt-4o-mini") == "openai"
    assert provider_of("o4-mini") == "openai"
    assert provider_of("google/gemini-3-pro-preview") == "gemini"
    assert provider_of("claude-sonnet-4-20250514") == "anthropic"
    assert provider_of("us.anthropic.claude-3-7-sonnet-20250219-v1:0") == "anthropic"
    assert provider_of("mock-model-id") is None
    assert minimum("gemini", "gemini-2.5-pro") == 2048
    assert minimum("gemini", "gemini-3.1-pro-preview") == 4096
    assert minimum("openai", "gpt-4o") == OPENAI_MIN == 1024


@pytest.mark.parametrize(
    "name",
    [
        "codex/localpush-rollout-2034.jsonl",
        "codex/localpush-rollout-compaction-turn.subset.jsonl",
        "codex/wakatime-0119-turn-context-first.subset.jsonl",
        "inspect/browser-gpt-4o-mini-tools.json",
    ],
)
def test_openai_sessions_agree_with_the_recorded_reads_from_the_second_call(name: str) -> None:
    """The issue's target: from the second call, sums within 5 % and hit/miss alike."""
    for traces in _sessions(IMPORTS / name).values():
        calls = simulate_session(traces)
        a = agreement(calls)
        assert a.calls >= 4
        assert a.difference_pct is not None and abs(a.difference_pct) < 5, (name, a)
        assert a.alike == a.calls, (name, a)


def test_openai_reads_are_whole_128_token_steps_and_include_the_previous_reply() -> None:
    """A Codex session: each call reads the previous prompt and the reply it generated, in
    whole 128-token steps, the figure the provider billed."""
    traces = next(iter(_sessions(IMPORTS / "codex/localpush-rollout-2034.jsonl").values()))
    calls = simulate_session(traces)
    prompts = [prompt_of(t) for t in sorted(traces, key=lambda t: (t.input.now, t.turn))]
    for prev, p, c in zip(prompts, prompts[1:], calls[1:], strict=False):
        assert c.cache_read % OPENAI_STEP == 0
        assert prev.recorded is not None and p.recorded is not None
        expected = (prev.tokens + prev.output_tokens) // OPENAI_STEP * OPENAI_STEP
        assert c.cache_read == expected == c.recorded_read


def test_an_openai_prompt_below_the_minimum_is_not_cached() -> None:
    """Inspect's security-guide samples: prompts of ~60-270 tokens, sent twice, read nothing
    (the recorded reads are 0 too)."""
    for traces in _sessions(IMPORTS / "inspect/security-guide-gpt-4o-mini.json").values():
        p = prompt_of(traces[-1])
        assert p.recorded is not None and p.recorded.cache_read_tokens == 0
        assert 0 < p.tokens < OPENAI_MIN
        again = replace(p, at=p.at + timedelta(seconds=5))
        assert [c.cache_read for c in simulate([p, again])] == [0, 0]
    big = prompt_of(_sessions(IMPORTS / "inspect/browser-gpt-4o-mini-tools.json").popitem()[1][-1])
    again = replace(big, at=big.at + timedelta(seconds=5))
    assert simulate([big, again])[1].cache_read > 0


def test_an_openai_entry_expires_after_its_lifetime() -> None:
    traces = next(iter(_sessions(IMPORTS / "codex/localpush-rollout-2034.jsonl").values()))
    prompts = [prompt_of(t) for t in sorted(traces, key=lambda t: (t.input.now, t.turn))]
    late = [
        prompts[0],
        *(
            replace(p, at=p.at + timedelta(minutes=11 * (i + 1)))
            for i, p in enumerate(prompts[1:3])
        ),
    ]
    calls = simulate(late)
    assert [c.hit for c in calls[1:]] == [False, False]
    assert all(c.cache_break is not None and c.cache_break.kind == "expired" for c in calls[1:])


@pytest.mark.parametrize(
    "name", ["gemini-cli/aim-matrix-pro.json", "gemini-cli/ai-sessions-pomodoro-timer.json"]
)
def test_gemini_sessions_agree_on_hit_or_miss(name: str) -> None:
    """Gemini's implicit cache: hit or miss alike on most calls; the sums are not within 5 %
    (implicit caching serves less than the shared prefix: docs/design.md, "Prompt cache")."""
    for traces in _sessions(IMPORTS / name).values():
        calls = simulate_session(traces)
        assert provider_of(calls[0].model) == "gemini"
        a = agreement(calls)
        assert a.calls >= 10 and a.alike_pct is not None and a.alike_pct >= 84, a
        assert a.simulated >= a.recorded > 0


def _with_ttl(node: object, ttl: str) -> None:
    """Every ``cache_control`` mark in a request body given ``ttl``."""
    if isinstance(node, dict):
        if isinstance(node.get("cache_control"), dict):
            node["cache_control"]["ttl"] = ttl
        for v in node.values():
            _with_ttl(v, ttl)
    elif isinstance(node, list):
        for v in node:
            _with_ttl(v, ttl)


def _request_with_ttl(ttl: str | None) -> dict[str, object]:
    """A recorded Anthropic request with a cache_control mark, its ttl set."""
    path = IMPORTS / "anthropic-messages" / "openllmetry-prompt-caching-system-blocks.request.json"
    body: dict[str, object] = json.loads(path.read_text())
    if ttl is not None:
        _with_ttl(body, ttl)
    return body


@pytest.mark.parametrize(
    ("ttl", "gap", "hit"), [(None, 30, False), ("1h", 30, True), ("1h", 61, False)]
)
def test_a_cache_control_ttl_is_kept_and_honoured(
    tmp_path: Path, ttl: str | None, gap: int, hit: bool
) -> None:
    f = tmp_path / "req.json"
    f.write_text(json.dumps(_request_with_ttl(ttl)))
    (trace,) = load_file(f)
    meta = trace.metadata["import"]
    assert meta["cache_control"]
    assert meta.get("cache_control_ttl", {}) == (
        {p: ttl for p in meta["cache_control"]} if ttl else {}
    )
    p = prompt_of(trace)
    marked = [b.breakpoint for b in p.blocks if b.breakpoint]
    assert marked == [ttl or "5m"] * len(marked) and marked
    later = replace(p, at=p.at + timedelta(minutes=gap))
    _, second = simulate([p, later])
    assert second.hit is hit
