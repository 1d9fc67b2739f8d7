"""Policies evaluated side by side (docs/design.md, "Evaluating policies") on a real Claude
Code session: input tokens, cost through the simulated prompt cache, context recall, losses
and findings introduced, and ``ctxscope replay FILE --preset A --preset B [--json]``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxcore.cli import main
from ctxcore.cost import price_table
from ctxcore.demo.recall import targets_of
from ctxcore.formats.load import load_file
from ctxcore.models import Trace
from ctxcore.replay import replay
from ctxcore.replay.evaluate import RECORDED, PolicyScore, evaluate

SESSION = (
    Path(__file__).parent
    / "fixtures"
    / "imports"
    / "claude-code"
    / "ccviewer-task-sidechain-session.jsonl"
)
CLEAR = {"preset": "anthropic-context-editing", "trigger": 2000, "keep": 2}
CLEAR_AT_LEAST = {**CLEAR, "clear_at_least": 1500}


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return load_file(SESSION)


@pytest.fixture(scope="module")
def scores(traces: list[Trace]) -> list[PolicyScore]:
    return evaluate(traces, [CLEAR, CLEAR_AT_LEAST], price_table(), workers=1)


def test_the_recording_is_the_baseline(traces: list[Trace], scores: list[PolicyScore]) -> None:
    rec = scores[0]
    assert rec.label == RECORDED
    assert len(rec.turns) == len(traces)
    assert rec.input_tokens == sum(t.result.totals.used for t in traces if t.result)
    assert rec.recall == 1.0 and rec.losses == 0 and rec.findings_added == 0
    assert rec.cost_usd is not None and rec.cost_usd > 0


def test_a_clearing_saves_tokens_but_breaks_the_cached_prefix(scores: list[PolicyScore]) -> None:
    rec, clear, at_least = scores
    assert clear.input_tokens < at_least.input_tokens < rec.input_tokens
    assert rec.cache_breaks == 0
    # every clearing changes an early part of the prompt: the next call writes it again
    assert clear.cache_breaks > at_least.cache_breaks > 0
    assert clear.cost_usd is not None and rec.cost_usd is not None
    assert clear.cost_usd > rec.cost_usd  # fewer tokens, dearer: the cache reads are lost
    assert sum(t.cache_read_tokens for t in clear.turns) < sum(
        t.cache_read_tokens for t in rec.turns
    )


def test_recall_is_what_the_reply_used_that_the_policy_kept(
    traces: list[Trace], scores: list[PolicyScore]
) -> None:
    clear = scores[1]
    assert clear.recall is not None and clear.recall < 1.0
    report = replay(traces, CLEAR, findings=False, workers=1, keep_variants=True)
    rebuilt = {v.source_trace_id: v for v in report.variants}
    for t, s in zip(traces, clear.turns, strict=True):
        assert t.result is not None and t.outcome is not None
        used = targets_of(t.outcome.output or "", t.result.prompt)
        prompt = rebuilt[t.trace_id].result.prompt.lower()  # type: ignore[union-attr]
        assert s.targets == len(used)
        assert s.lost == [x for x in used if x not in prompt]
    assert any(s.lost for s in clear.turns)


def test_losses_and_findings_are_the_replays(
    traces: list[Trace], scores: list[PolicyScore]
) -> None:
    report = replay(traces, CLEAR, workers=1)
    clear = scores[1]
    assert clear.losses == sum(len(t.losses("info")) for t in report.turns) > 0
    assert clear.findings_added == sum(len(t.findings_added) for t in report.turns) > 0


def test_replay_compares_policies_in_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", str(SESSION), "--preset", "anthropic-context-editing", "--preset"]
    argv += ["auto-compact", "--set", "trigger=2000", "--set", "window=5000", "--workers", "1"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [p["policy"] for p in doc["policies"]]
    assert names == [
        RECORDED,
        "anthropic-context-editing trigger=2000 window=5000",
        "auto-compact window=5000",
    ]
    for p in doc["policies"]:
        assert {"input_tokens", "cost_usd", "recall", "losses", "findings_added"} <= set(p)
        turn = p["turns"][0]
        assert {"input_tokens", "cost_usd", "recall", "cache_break", "findings_added"} <= set(turn)
    compact = doc["policies"][2]
    assert compact["input_tokens"] < doc["policies"][0]["input_tokens"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["policy", "input", "tokens"]
    assert [ln.split()[0] for ln in lines[1:]] == [
        "recorded",
        "anthropic-context-editing",
        "auto-compact",
    ]


def test_a_knob_no_compared_preset_takes_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", str(SESSION), "--preset", "recorded", "--preset", "auto-compact"]
    assert main([*argv, "--set", "n=3"]) == 2
    assert "none of the presets recorded, auto-compact takes it" in capsys.readouterr().err
