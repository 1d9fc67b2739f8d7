"""The ``anthropic-context-editing`` preset (docs/design.md, "anthropic-context-editing") on
real imported sessions: a Claude Code log with 13 tool results in its longest call, a Codex
rollout whose replies carry reasoning parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxcore.formats.load import load_file
from ctxcore.models import BuildResult, Config, Status, Trace
from ctxcore.pipeline import build
from ctxcore.pipeline.anthropic_context_editing import PLACEHOLDER

FIXTURES = Path(__file__).parent / "fixtures" / "imports"


@pytest.fixture(scope="module")
def longest() -> Trace:
    """The longest call of a real Claude Code session with Task side chains."""
    traces = load_file(FIXTURES / "claude-code" / "ccviewer-task-sidechain-session.jsonl")
    return max(traces, key=lambda t: len(t.input.packets))


def _build(t: Trace, **knobs: object) -> BuildResult:
    cfg = Config.model_validate(
        {"preset": "anthropic-context-editing", "tokenizer": t.config.tokenizer, **knobs}
    )
    return build(t.input, cfg)


def _results(r: BuildResult) -> list[str]:
    return [m.content for m in r.messages or [] if m.role == "tool"]


def test_over_the_trigger_all_but_keep_tool_results_are_cleared(longest: Trace) -> None:
    recorded = _results(build(longest.input, Config(preset="recorded")))
    r = _build(longest, trigger=0, keep=2)
    sent = _results(r)
    assert len(sent) == len(recorded) > 3
    assert sent[:-2] == [PLACEHOLDER] * (len(sent) - 2)
    assert sent[-2:] == recorded[-2:]
    assert longest.result is not None and r.totals.used < longest.result.totals.used
    cleared = [d for d in r.decisions if d.status == Status.TRUNCATED]
    assert len(cleared) == len(sent) - 2
    assert all("keep=2" in d.reason_text and "trigger=0" in d.reason_text for d in cleared)


def test_under_the_trigger_the_request_is_the_recorded_one(longest: Trace) -> None:
    recorded = build(longest.input, Config(preset="recorded", tokenizer=longest.config.tokenizer))
    r = _build(longest)  # the API's default trigger, 100,000 input tokens
    assert r.messages == recorded.messages
    assert r.totals.used == recorded.totals.used
    assert "not over trigger=100,000" in r.decisions[-2].reason_text


def test_clear_at_least_applies_the_clearing_only_when_it_reclaims_that_much(
    longest: Trace,
) -> None:
    assert longest.result is not None
    cleared = _build(longest, trigger=0, keep=1)
    reclaimed = longest.result.totals.used - cleared.totals.used
    assert reclaimed > 0
    enough = _build(longest, trigger=0, keep=1, clear_at_least=reclaimed - 20)
    assert _results(enough) == _results(cleared)
    short = _build(longest, trigger=0, keep=1, clear_at_least=reclaimed + 50)
    assert PLACEHOLDER not in _results(short)
    assert short.totals.used == longest.result.totals.used
    assert any("less than clear_at_least" in d.reason_text for d in short.decisions)


def test_exclude_tools_keeps_that_tools_results(longest: Trace) -> None:
    names = [p.metadata.get("name") for p in longest.input.packets if p.kind == "tool_result"]
    assert names.count("TodoWrite") >= 3
    r = _build(longest, trigger=0, keep=0, exclude_tools=["TodoWrite"])
    by_id = {m.id: m.content for m in r.messages or [] if m.role == "tool"}
    for p in longest.input.packets:
        if p.kind != "tool_result":
            continue
        if p.metadata.get("name") == "TodoWrite":
            assert by_id[p.id] == p.content
        else:
            assert by_id[p.id] == PLACEHOLDER


def test_clear_tool_inputs_clears_the_calls_arguments(longest: Trace) -> None:
    def args(r: BuildResult) -> list[str]:
        return [
            str(c.get("arguments"))
            for m in r.messages or []
            if m.role == "assistant"
            for c in m.metadata.get("tool_calls") or []
        ]

    plain = args(_build(longest, trigger=0, keep=1))
    inputs = args(_build(longest, trigger=0, keep=1, clear_tool_inputs=True))
    assert len(plain) == len(inputs) > 3
    assert "{}" not in plain
    assert inputs[:-1] == ["{}"] * (len(inputs) - 1)
    assert inputs[-1] == plain[-1]


def test_clear_thinking_keeps_the_most_recent_thinking_turns() -> None:
    t = load_file(FIXTURES / "codex" / "localpush-rollout-2034.jsonl")[-1]
    thought = [m for m in t.input.history if m.metadata.get("thinking")]
    assert len(thought) >= 3

    def thinking(r: BuildResult) -> list[str | None]:
        return [m.id for m in r.messages or [] if m.metadata.get("thinking")]

    assert thinking(_build(t)) == [thought[-1].id]  # the API's default keep: 1 turn
    assert thinking(_build(t, thinking_keep=2)) == [m.id for m in thought[-2:]]
    assert thinking(_build(t, thinking_keep=0)) == []
    assert len(thinking(_build(t, thinking_keep=len(thought)))) == len(thought)
    said = [d for d in _build(t, thinking_keep=0).decisions if "clear_thinking" in d.reason_text]
    assert len(said) == len(thought)
