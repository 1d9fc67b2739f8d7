"""The ``recorded`` preset (docs/design.md, "recorded"): every imported fixture session,
replayed with it, changes no turn, and the request it rebuilds is the one the agent sent."""

from __future__ import annotations

from typing import Any

import pytest
from test_import_expected import EXPECTED, _traces

from ctxcore.errors import ImportFormatError, InputError
from ctxcore.models import Config, Message, Trace
from ctxcore.pipeline import build, knobs
from ctxcore.pipeline.recorded import conversation
from ctxcore.replay import replay, variant


def _importable() -> list[str]:
    names = []
    for name, exp in EXPECTED.items():
        try:
            _traces(name, exp)
        except ImportFormatError:
            continue  # a file the importers refuse (no call content): nothing to replay
        names.append(name)
    return names


IMPORTABLE = _importable()


def _sent(messages: list[Message]) -> list[tuple[str, str]]:
    """The conversation as sent: role and text, in order (system parts and what a
    compaction replaced aside)."""
    return [
        (m.role, m.content)
        for m in messages
        if m.role not in ("system", "developer") and not m.metadata.get("replaced_by")
    ]


def test_every_kind_of_import_is_replayed() -> None:
    folders = {name.split("/")[0] for name in IMPORTABLE}
    assert len(IMPORTABLE) > 80
    assert {"claude-code", "codex", "openhands", "pi", "otlp-logs", "otlp-protobuf"} <= folders


@pytest.mark.parametrize("name", IMPORTABLE)
def test_recorded_changes_no_turn_of_an_imported_session(name: str) -> None:
    traces = _traces(name, EXPECTED[name])
    report = replay(traces, {"preset": "recorded"}, findings=False, workers=1)
    assert report.errors == []
    assert len(report.turns) == len(traces)
    changed = [(t.turn, t.used_before, t.used_after, t.flips) for t in report.turns if t.changed]
    assert changed == []


@pytest.mark.parametrize("name", IMPORTABLE)
def test_the_rebuilt_request_is_the_one_sent(name: str) -> None:
    for t in _traces(name, EXPECTED[name]):
        assert t.result is not None and t.result.messages is not None
        rebuilt = variant(t, {"preset": "recorded"})
        assert rebuilt.result is not None and rebuilt.result.messages is not None
        assert _sent(rebuilt.result.messages) == _sent(t.result.messages)
        assert rebuilt.result.totals == t.result.totals


def _sessions_with(what: str) -> list[Trace]:
    out = []
    for name in IMPORTABLE:
        for t in _traces(name, EXPECTED[name]):
            assert t.result is not None
            if what == "compaction" and any(
                d.status.value == "summarized" for d in t.result.decisions
            ):
                out.append(t)
            if what == "query-inside" and _sent(t.result.messages or [])[-1:] != [
                ("user", t.input.query)
            ]:
                out.append(t)
    return out


#: session logs whose parts the rebuild orders as the log does (Codex puts developer messages
#: between user messages, which the rebuild sends with the system text; an OpenCode log may
#: place the query after the tool results it asked for)
IN_LOG_ORDER = [n for n in IMPORTABLE if n.split("/")[0] in ("claude-code", "pi", "gemini-cli")]


@pytest.mark.parametrize("name", IN_LOG_ORDER)
def test_the_rebuild_ranks_parts_as_the_session_log_importer_does(name: str) -> None:
    """Every part's rank and the budget left after it are the import's: a policy compared
    with the import (the Playground's "what flipped") differs in what it changed only."""
    for t in _traces(name, EXPECTED[name]):
        assert t.result is not None
        rebuilt = build(t.input, Config(preset="recorded", tokenizer=t.config.tokenizer))
        fields = ("packet_id", "status", "rank", "tokens_after", "budget_left")
        sent = [tuple(getattr(d, f) for f in fields) for d in t.result.decisions]
        assert [tuple(getattr(d, f) for f in fields) for d in rebuilt.decisions] == sent


def test_the_marks_carry_what_the_input_alone_does_not_say() -> None:
    # calls whose query is not last (an agent loop's calls and results after it) and calls
    # showing what a compaction replaced are among the fixtures, and rebuild exactly
    inside = _sessions_with("query-inside")
    compacted = _sessions_with("compaction")
    assert len(inside) > 50
    assert len(compacted) >= 3
    for t in [*inside, *compacted]:
        assert t.result is not None
        conv = conversation(t.input)
        assert _sent(conv.messages()) == _sent(t.result.messages or [])
        summarized = {d.packet_id for d in t.result.decisions if d.status.value == "summarized"}
        assert set(conv.replaced) == summarized


def test_the_recorded_tokenizer_is_kept_and_other_knobs_refused() -> None:
    t = next(
        t
        for name in IMPORTABLE
        for t in _traces(name, EXPECTED[name])
        if t.config.tokenizer == "o200k_base" and t.input.history
    )
    rebuilt = variant(t, {"preset": "recorded"})
    assert rebuilt.config.tokenizer == "o200k_base"
    assert rebuilt.result is not None and t.result is not None
    assert rebuilt.result.totals.used == t.result.totals.used
    assert knobs("recorded") == ["tokenizer"]
    bad: dict[str, Any] = {"preset": "recorded", "max_tokens": 1000}
    with pytest.raises(InputError, match="preset recorded has no max_tokens"):
        build(t.input, Config(**bad))
