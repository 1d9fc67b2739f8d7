"""The ``auto-compact`` preset (docs/design.md, "auto-compact") on real Claude Code and Codex
logs: its thresholds are where those logs' compactions fired, and it compacts as each agent
does."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxcore.errors import InputError
from ctxcore.formats.load import load_file
from ctxcore.models import BuildResult, Config, Status, Trace
from ctxcore.pipeline import build, preset
from ctxcore.pipeline.auto_compact import CALIBRATED, CODEX_USER_TOKENS, SUMMARY_PREFIX
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude-code"
CODEX = FIXTURES / "codex"


def _compaction(t: Trace) -> dict[str, object] | None:
    c = t.metadata.get("import", {}).get("compaction")
    return c if isinstance(c, dict) else None


def test_the_default_thresholds_are_where_the_logs_compactions_fired() -> None:
    claude = load_file(CLAUDE / "claude-code-log-compact-after-rewind.jsonl")
    after = next(t for t in claude if _compaction(t))
    comp = _compaction(after)
    assert comp is not None and after.input.window
    claude_share = int(str(comp["preTokens"])) / after.input.window
    codex = sorted(
        load_file(CODEX / "localpush-rollout-compaction-turn.subset.jsonl"), key=lambda t: t.turn
    )
    first = next(k for k, t in enumerate(codex) if _compaction(t))
    before = codex[first - 1]
    assert before.outcome is not None and before.outcome.tokens is not None and before.input.window
    codex_share = (before.outcome.tokens.input_tokens or 0) / before.input.window
    assert round(claude_share, 2) == CALIBRATED["claude-code"]
    assert round(codex_share, 2) == CALIBRATED["codex"]
    mod = preset("auto-compact")
    for agent in CALIBRATED:
        cfg = mod.resolve(Config(preset="auto-compact", agent=agent), after.input)
        assert cfg.threshold == CALIBRATED[agent]


@pytest.fixture(scope="module")
def longest() -> Trace:
    traces = load_file(CLAUDE / "ccviewer-task-sidechain-session.jsonl")
    return max(traces, key=lambda t: len(t.input.packets))


def _build(t: Trace, window: int | None, **knobs: object) -> BuildResult:
    inp = t.input.model_copy(update={"window": window})
    cfg = Config.model_validate(
        {"preset": "auto-compact", "tokenizer": t.config.tokenizer, **knobs}
    )
    return build(inp, cfg)


def _used(t: Trace) -> int:
    assert t.result is not None
    return t.result.totals.used


def test_under_the_threshold_the_request_is_the_recorded_one(longest: Trace) -> None:
    recorded = build(longest.input, Config(preset="recorded", tokenizer=longest.config.tokenizer))
    r = _build(longest, window=int(_used(longest) / 0.74))
    assert r.messages == recorded.messages
    assert "no compaction" in r.decisions[-2].reason_text


def test_claude_code_compaction_leaves_the_summary_and_the_current_message(longest: Trace) -> None:
    r = _build(longest, window=int(_used(longest) / 0.76))
    sent = [m for m in r.messages or [] if m.role != "system"]
    assert [m.id for m in sent][:1] == [HISTORY_SUMMARY_ID]
    assert sent[0].content.startswith(SUMMARY_PREFIX["claude-code"])
    assert [m.content for m in sent[1:]] == [longest.input.query]
    assert r.totals.used < _used(longest)
    gone = [d for d in r.decisions if d.status == Status.SUMMARIZED]
    assert len(gone) == len(longest.input.history) + len(longest.input.packets)
    assert all("stand-in" in d.reason_text and "threshold=0.75" in d.reason_text for d in gone)


def test_codex_compaction_keeps_the_recent_user_messages() -> None:
    codex = sorted(
        load_file(CODEX / "localpush-rollout-compaction-turn.subset.jsonl"), key=lambda t: t.turn
    )
    t = codex[-1]  # 56 messages after the rollout's own compaction
    users = [m.content for m in t.input.history if m.role == "user"]
    assert len(users) >= 3
    r = _build(t, window=_used(t), agent="codex")
    sent = [m for m in r.messages or [] if m.role != "system"]
    summary = next(k for k, m in enumerate(sent) if m.id == HISTORY_SUMMARY_ID)
    assert sent[summary].content.startswith(SUMMARY_PREFIX["codex"])
    assert all(m.role == "user" for m in sent)
    assert [m.content for m in sent if m.id != HISTORY_SUMMARY_ID][: len(users)] == users
    assert sum(len(u) for u in users) < CODEX_USER_TOKENS  # all fit codex's 20,000 tokens
    claude = _build(t, window=_used(t), agent="claude-code")
    assert [m.role for m in claude.messages or [] if m.role != "system"] == ["user", "user"]


def test_the_logs_own_compaction_summary_is_kept_as_recorded() -> None:
    claude = load_file(CLAUDE / "claude-code-log-compact-after-rewind.jsonl")
    t = next(t for t in claude if _compaction(t))
    real = next(m for m in t.input.history if m.metadata.get("compaction_replaced"))
    r = _build(t, window=_used(t))
    assert real.content in [m.content for m in r.messages or []]
    kept = next(d for d in r.decisions if d.packet_id == real.id)
    assert kept.status == Status.KEPT and "real summary" in kept.reason_text


def test_a_window_is_needed(longest: Trace) -> None:
    with pytest.raises(InputError, match="window"):
        _build(longest, window=None)
