"""A replay diagnoses each side of a session turn after turn, each turn's session detectors
carrying on from the turn before's (``SessionFolds`` grown one build at a time, as
``diagnose_session`` has them; docs/design.md, "Diagnostics", "Evaluating policies"). The
findings it compares must be the ones each build gets diagnosed from scratch with the
builds before it, also where a policy's clearing edits the middle of the prompt.

The sessions are every multi-call session of the import fixtures (real logs of real agents)
and a corpus session (a SWE-agent trajectory whose prompts pass ``text.Grown``'s shortest
text), under four policies at two knob settings each.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_diagnostics_grown import _sessions

from ctxcore.diagnostics import INGEST_OPTIONS, diagnose
from ctxcore.diagnostics.context import SessionFolds
from ctxcore.diagnostics.text import clear_memos
from ctxcore.formats.load import load_file
from ctxcore.models import Finding, Trace
from ctxcore.replay import replay
from ctxcore.replay.compare import _finding_key
from ctxcore.replay.jobs import RECORDED_FINDINGS
from ctxcore.replay.run import POOL_MIN_TRACES

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
#: 12 calls, prompts up to ~60 kB
CORPUS_SESSION = CORPUS / "b03_sweagent_pydicom-1458.traj.json"
#: a session whose traces repeat ids
REPEATS = "c02_llamafactory_glaive_toolcall_zh_demo.json"

#: four policies at two knob settings each, small enough to fire on a few calls
POLICIES: tuple[dict[str, Any], ...] = (
    {"preset": "swe-agent-masking", "n": 1},
    {"preset": "swe-agent-masking", "n": 3},
    {
        "preset": "masking-summary-hybrid",
        "n": 1,
        "summarize_every_n_turns": 2,
        "keep_last_m_turns": 1,
    },
    {
        "preset": "masking-summary-hybrid",
        "n": 2,
        "summarize_every_n_turns": 4,
        "keep_last_m_turns": 2,
    },
    {"preset": "openhands-observation-masking", "attention_window": 1},
    {"preset": "openhands-observation-masking", "attention_window": 4},
    {"preset": "anthropic-context-editing", "trigger": 0, "keep": 1},
    {"preset": "anthropic-context-editing", "trigger": 1_000, "keep": 2},
)


def _from_scratch(side: list[Trace]) -> list[list[Finding]]:
    """Each build of a side diagnosed alone with the builds before it, nothing remembered
    from another diagnosis (no folds, no per-text memo)."""
    out = []
    for i, t in enumerate(side):
        clear_memos()
        out.append(diagnose(t, session_traces=side[:i], options=INGEST_OPTIONS))
    return out


def _keys(found: list[Finding]) -> set[str]:
    return {_finding_key(f) for f in found}


#: a turn of a side: its recorded trace's id and its turn (a session may repeat an id)
Key = tuple[str, int]


def _check(traces: list[Trace], recorded: dict[Key, list[Finding]]) -> int:
    """Every policy's replay of ``traces`` against the findings from scratch; ``recorded``:
    the recording's from scratch by ``Key``. The number of turns whose findings differ
    between the sides (the comparison must have something to compare)."""
    differ = 0
    for settings in POLICIES:
        RECORDED_FINDINGS.clear()
        clear_memos()
        report = replay(traces, settings, findings=True, workers=1, keep_variants=True)
        built = {(v.source_trace_id or "", v.turn): v for v in report.variants}
        side = [built[k] for t in traces if (k := (t.trace_id, t.turn)) in built]
        scratch = dict(zip(_keys_of(side), _from_scratch(side), strict=True))
        where = f"{traces[0].session_id} under {settings}"
        assert report.turns, where
        for turn in report.turns:
            key = (turn.trace_id, turn.turn)
            ka, kb = _keys(recorded[key]), _keys(scratch[key])
            assert turn.findings_added == sorted(kb - ka), f"{where}, turn {turn.turn}"
            assert turn.findings_cleared == sorted(ka - kb), f"{where}, turn {turn.turn}"
            differ += turn.findings_changed
        after = Counter(f.detector for found in scratch.values() for f in found)
        assert report.findings_after == dict(sorted(after.items())), where
    return differ


def _keys_of(side: list[Trace]) -> list[Key]:
    """Each trace's ``Key`` (a rebuilt one's by the recorded trace it rebuilds)."""
    return [(t.source_trace_id or t.trace_id, t.turn) for t in side]


def _replayed_order(traces: list[Trace]) -> list[Trace]:
    return sorted(traces, key=lambda t: (t.turn, t.created_at, t.trace_id))


def test_fixture_sessions_replayed_give_the_findings_from_scratch() -> None:
    sessions = _sessions()
    assert len(sessions) >= 30
    differ = 0
    for traces in sessions:
        ordered = _replayed_order(traces)
        recorded = dict(zip(_keys_of(ordered), _from_scratch(ordered), strict=True))
        differ += _check(ordered, recorded)
    # the policies change findings on many turns: the comparison is not of empty sets
    assert differ >= 50


@pytest.mark.slow
def test_a_corpus_session_replayed_gives_the_findings_from_scratch() -> None:
    traces = _replayed_order([t for t in load_file(CORPUS_SESSION) if t.result is not None])
    assert len(traces) >= 10
    assert max(len(t.result.prompt) for t in traces if t.result) > 16_384
    recorded = dict(zip(_keys_of(traces), _from_scratch(traces), strict=True))
    assert _check(traces, recorded) >= 5


@pytest.mark.slow
def test_a_session_that_repeats_trace_ids_replayed_gives_the_findings_from_scratch() -> None:
    """corpus c02 (a tool-call chat demo imported as one session) repeats trace ids: a
    repeated id's trace is diagnosed without the folds (``SessionFolds.earlier`` is None),
    the traces after it with them."""
    every = [t for t in load_file(CORPUS / REPEATS) if t.result is not None]
    traces = _replayed_order(every)[:90]
    ids = [t.trace_id for t in traces]
    assert len(set(ids)) < len(ids)
    recorded = dict(zip(_keys_of(traces), _from_scratch(traces), strict=True))
    assert _check(traces, recorded) >= 1


def test_the_recording_is_diagnosed_once_for_every_policy() -> None:
    """``evaluate``'s replays share the recording's findings (``replay(recorded=...)``), in
    worker processes too: a second policy's replay takes them as the first left them, and
    its turns compare as a replay that diagnosed the recording itself."""
    traces: list[Trace] = []
    for ts in _sessions():  # enough for the worker processes (``run.POOL_MIN_TRACES``)
        if len(traces) >= 2 * POOL_MIN_TRACES:
            break
        traces += ts
    first, second = POLICIES[0], POLICIES[6]
    shared: dict[tuple[str, ...], Any] = {}
    replay(traces, first, findings=True, workers=2, recorded=shared)
    sessions = {t.session_id for t in traces}
    assert len(shared) == len(sessions) >= 5
    for ids, found in shared.values():
        assert len(ids) == len(found)
    RECORDED_FINDINGS.clear()
    alone = replay(traces, second, findings=True, workers=2)
    with_shared = replay(traces, second, findings=True, workers=2, recorded=shared)
    assert with_shared.turns == alone.turns
    assert with_shared.findings_before == alone.findings_before != {}
    # taken as they are, not diagnosed again: emptied, the recording has no findings
    emptied = {k: (ids, [[] for _ in ids]) for k, (ids, _) in shared.items()}
    blank = replay(traces, second, findings=True, workers=2, recorded=emptied)
    assert blank.findings_before == {}
    assert sum(len(t.findings_added) for t in blank.turns) > sum(
        len(t.findings_added) for t in alone.turns
    )


def test_folds_grown_one_trace_at_a_time() -> None:
    """``SessionFolds.append``: the prefix of earlier turns as the whole session's folds
    have it; a repeated id has none (its detectors leave the other trace of its id out of
    its earlier turns, which is then no prefix); a trace out of turn order is refused."""
    traces = _replayed_order([t for t in load_file(CORPUS_SESSION) if t.result is not None])
    grown = SessionFolds([])
    for t in traces:
        assert grown.append(t)
    whole = SessionFolds(traces)
    assert [grown.earlier(t) for t in traces] == [whole.earlier(t) for t in traces]
    assert [grown.earlier(t) for t in traces] == list(range(len(traces)))
    again = traces[0].model_copy(update={"turn": traces[-1].turn + 1})
    assert grown.append(again)
    assert grown.earlier(again) is None
    assert not grown.append(traces[1])  # turn 1 after the last turn
    assert len(grown.traces) == len(traces) + 1
