"""A session diagnosed as a whole gives each turn exactly the findings of that turn
diagnosed alone with the turns before it, and reads each turn once (docs/design.md,
"Diagnostics": ``diagnose_session`` carries what the session detectors gather from the
earlier turns over from one turn to the next, ``SessionFolds``).

The sessions are real imported logs, each holding a finding of a detector that reads the
earlier turns: a prompt-cache break (Codex, compaction), a stuck tool loop (Inspect), an
error carried turn after turn (Gemini CLI, pi), a user constraint from an earlier turn
(aider).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from ctxcore.cache.session import SessionCache
from ctxcore.diagnostics import (
    DETECTORS,
    INGEST_OPTIONS,
    TurnFindings,
    diagnose,
    diagnose_session,
    fingerprint,
)
from ctxcore.diagnostics.context import TraceView
from ctxcore.diagnostics.session import lost_items
from ctxcore.formats.load import load_file
from ctxcore.models import Finding, Trace
from ctxcore.store import TraceStore

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"

#: (file, the findings it must hold: detector id, or "carried" for an error carried turn
#: after turn, "constraint" for an earlier turn's user constraint)
SESSIONS = [
    ("codex/localpush-rollout-compaction-turn.subset.jsonl", "cache_break"),
    ("inspect/message-deduplication-tool-loop.eval", "repeated_tool_call"),
    ("gemini-cli/aim-matrix-pro.json", "carried"),
    ("pi/pi-mono-large-session.subset.jsonl", "cache_break"),
    ("aider-llm-history/friendly-names-diff-edits.subset.aider.llm.history", "constraint"),
]


def _ordered(traces: list[Trace]) -> list[Trace]:
    return sorted(traces, key=lambda t: (t.turn, t.created_at))


def _one_by_one(traces: list[Trace]) -> list[TurnFindings]:
    """Each turn diagnosed on its own with the turns before it (what ``check`` and Inspect
    do)."""
    ordered = _ordered(traces)
    return [
        TurnFindings(
            trace_id=t.trace_id,
            turn=t.turn,
            findings=diagnose(t, session_traces=ordered[:i], options=INGEST_OPTIONS),
        )
        for i, t in enumerate(ordered)
    ]


def _kinds(turns: list[TurnFindings]) -> Counter[str]:
    out: Counter[str] = Counter()
    for tf in turns:
        for f in tf.findings:
            out[f.detector] += 1
            out["carried"] += "turns in a row" in f.message
            out["constraint"] += f.detector == "must_have_lost" and "constraints" in f.evidence
    return out


@pytest.mark.parametrize(("name", "kind"), SESSIONS)
def test_the_whole_session_gives_each_turn_its_own_findings(name: str, kind: str) -> None:
    traces = list(load_file(FIXTURES / name))
    assert len({t.session_id for t in traces}) == 1 and len(traces) >= 2
    alone = _one_by_one(traces)
    assert _kinds(alone)[kind] > 0, f"{name} holds no {kind} finding"
    whole = diagnose_session(traces, options=INGEST_OPTIONS)
    assert whole.turns == alone
    assert whole.lost == lost_items(_ordered(traces), alone)


def _compaction_sent_last(traces: list[Trace]) -> list[Trace]:
    """Turn 6's call (the compaction, where the cache breaks) sent after every other: turn
    7 then meets the cache turn 5 left, and breaks too."""
    last = traces[-1].input.now + timedelta(minutes=1)
    late = traces[6].model_copy(update={"input": traces[6].input.model_copy(update={"now": last})})
    return [*traces[:6], late, *traces[7:]]


def _turn_of_two_traces(traces: list[Trace]) -> list[Trace]:
    """Turn 6 with a second trace: turn 5's prompt again, which breaks nothing."""
    again = traces[5].model_copy(
        update={
            "trace_id": traces[5].trace_id + "-again",
            "turn": 6,
            "created_at": traces[6].created_at + timedelta(seconds=1),
        }
    )
    return [*traces[:7], again, *traces[7:]]


@pytest.mark.parametrize(
    ("change", "broken"), [(_compaction_sent_last, [6, 7]), (_turn_of_two_traces, [6])]
)
def test_calls_out_of_turn_order_or_turns_of_two_traces_keep_their_findings(
    change: Callable[[list[Trace]], list[Trace]], broken: list[int]
) -> None:
    # the session's running cache stands for the calls before a turn only while they were
    # sent in turn order and each turn is one trace
    traces = change(_ordered(list(load_file(FIXTURES / SESSIONS[0][0]))))
    alone = _one_by_one(traces)
    breaks = [
        (t.turn, t.trace_id) for t in alone for f in t.findings if f.detector == "cache_break"
    ]
    assert breaks == [(turn, traces[turn].trace_id) for turn in broken]
    assert diagnose_session(traces, options=INGEST_OPTIONS).turns == alone


def test_an_error_carried_over_a_turn_of_two_traces_is_counted_as_alone() -> None:
    # turn 12 of the Gemini CLI session stored twice: looking back from a later turn, the
    # run of turns holding the same error stops at it (the next trace back is turn 12
    # again, not turn 11), with the session diagnosed whole as turn by turn
    traces = _ordered(list(load_file(FIXTURES / SESSIONS[2][0])))
    again = traces[12].model_copy(
        update={
            "trace_id": traces[12].trace_id + "-again",
            "created_at": traces[12].created_at + timedelta(seconds=1),
        }
    )
    changed = [*traces[:13], again, *traces[13:]]
    alone = _one_by_one(changed)
    since = [
        (tf.turn, f.evidence["since_turn"])
        for tf in alone
        for f in tf.findings
        if "turns in a row" in f.message
    ]
    assert any(turn == 12 and start < 12 for turn, start in since)  # up to turn 12: runs on
    assert all(start >= 12 for turn, start in since if turn > 12)  # after it: not across it
    assert diagnose_session(changed, options=INGEST_OPTIONS).turns == alone


def test_the_session_cache_is_run_once_through_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = list(load_file(FIXTURES / SESSIONS[0][0]))
    fed: list[str] = []
    add = SessionCache.add

    def counted(self: SessionCache, p):  # type: ignore[no-untyped-def]
        fed.append(p.trace_id)
        return add(self, p)

    monkeypatch.setattr(SessionCache, "add", counted)
    found = diagnose_session(traces, options=INGEST_OPTIONS)
    assert any(f.detector == "cache_break" for t in found.turns for f in t.findings)
    # each call once, in the order sent (costing the session again at every turn fed
    # the first call 17 times, 153 calls in all)
    assert fed == [t.trace_id for t in sorted(traces, key=lambda t: (t.input.now, t.turn))]


@pytest.mark.parametrize("name", [SESSIONS[0][0], SESSIONS[2][0]])
def test_the_stores_findings_stand_in_for_the_one_trace_detectors(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the Timeline diagnoses a session with the findings the store computed at insert
    traces = list(load_file(FIXTURES / name))
    with TraceStore(tmp_path / "s.duckdb") as store:
        store.add_traces(traces, source="tests")
        stored = store.stored_findings([t.trace_id for t in traces], fingerprint())
    assert set(stored) == {t.trace_id for t in traces}
    fresh = diagnose_session(traces, options=INGEST_OPTIONS)
    ran: list[str] = []
    fn, about = DETECTORS["greedy_waste"]

    def counted(v: TraceView) -> list[Finding]:
        ran.append(v.trace.trace_id)
        return fn(v)

    monkeypatch.setitem(DETECTORS, "greedy_waste", (counted, about))
    assert diagnose_session(traces, options=INGEST_OPTIONS, alone=stored) == fresh
    assert ran == []  # a detector of one trace: taken from the store
