"""Replay's findings are exact although it diagnoses less: they equal a full diagnosis of both
sides, turn by turn; the recorded side is diagnosed once per session and never reused for
traces that changed; a rebuild replay already made stands in for the detectors' own re-run;
sessions handed over as stored JSON replay like traces; a small replay runs in this process.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from test_replay import HELLO, load, with_traceback

from ctxcore.diagnostics import INGEST_OPTIONS, diagnose, diagnose_session, rebuild
from ctxcore.diagnostics.text import Memo, identifiers
from ctxcore.errors import InputError
from ctxcore.models import Finding, Trace
from ctxcore.replay import (
    RECORDED_FINDINGS,
    ReplayReport,
    TraceJson,
    replay,
    replay_sessions,
    variant,
)
from ctxcore.replay.variants import _rebuild_of, _same_build

CTXSCOPE = "toolchat-ctxscope.jsonl"  # the ctxscope preset: its detectors re-run the build


@pytest.fixture(scope="module")
def hello() -> list[Trace]:
    return load(HELLO)


@pytest.fixture(scope="module")
def toolchat() -> list[Trace]:
    return load(CTXSCOPE)


@pytest.fixture(autouse=True)
def _forget_recorded_findings() -> None:
    RECORDED_FINDINGS.clear()


def key(f: Finding) -> str:
    ids = f" [{', '.join(f.packet_ids)}]" if f.packet_ids else ""
    return f"{f.severity} {f.detector}{ids}"


def full_diagnosis(traces: list[Trace]) -> dict[int, list[Finding]]:
    """Every turn diagnosed from scratch, as the Timeline does (no replay shortcuts)."""
    return diagnose_session(traces, options=INGEST_OPTIONS).by_turn()


def assert_exact(report: ReplayReport, before: list[Trace], after: list[Trace]) -> None:
    fb, fa = full_diagnosis(before), full_diagnosis(after)
    assert report.findings_before == dict(
        sorted(Counter(f.detector for x in fb.values() for f in x).items())
    )
    assert report.findings_after == dict(
        sorted(Counter(f.detector for x in fa.values() for f in x).items())
    )
    for t in report.turns:
        kb = {key(f) for f in fb[t.turn]}
        ka = {key(f) for f in fa[t.turn]}
        assert t.findings_added == sorted(ka - kb), t.turn
        assert t.findings_cleared == sorted(kb - ka), t.turn


@pytest.mark.parametrize(
    ("name", "settings", "against"),
    [
        (HELLO, {}, None),
        (HELLO, {"max_tokens": 2000}, None),
        (CTXSCOPE, {"window": 6000}, None),  # hello-agents reads no window (refused)
        (CTXSCOPE, {}, None),
        (CTXSCOPE, {"max_tokens": 2000}, None),
        (CTXSCOPE, {"max_tokens": 3000}, {"max_tokens": 6000}),
    ],
)
def test_findings_equal_a_full_diagnosis_of_both_sides(
    name: str, settings: dict[str, Any], against: dict[str, Any] | None
) -> None:
    traces = load(name)
    report = replay(traces, settings, against=against, workers=1, keep_variants=True)
    by_id = {v.trace_id: v for v in report.variants}
    before = [by_id.get(t.before_id, r) for t, r in zip(report.turns, traces, strict=True)]
    after = [by_id[t.after_id] for t in report.turns]
    assert sum(report.findings_before.values()) > 0
    assert_exact(report, before, after)


def test_the_recorded_side_is_diagnosed_once_and_only_for_the_same_traces(
    hello: list[Trace],
) -> None:
    first = replay(hello, {"max_tokens": 2000}, workers=1)
    known = RECORDED_FINDINGS.get(hello)
    assert known is not None and len(known) == len(hello)
    # equal copies (a cache that hands out copies) find it too, and the report is the same
    copies = [t.model_copy() for t in hello]
    assert RECORDED_FINDINGS.get(copies) is known
    again = replay(copies, {"max_tokens": 2000}, workers=1)
    assert again.turns == first.turns and again.findings_before == first.findings_before
    # the same ids with other content (error evidence added) are diagnosed afresh
    changed = with_traceback(hello, "tool:call_7")
    assert RECORDED_FINDINGS.get(changed) is None
    report = replay(changed, {"max_tokens": 2000}, workers=1, keep_variants=True)
    assert_exact(report, changed, report.variants)
    assert report.findings_before != first.findings_before


def test_the_cache_is_bounded_and_keeps_recent_sessions(hello: list[Trace]) -> None:
    for k in range(5):
        sub = hello[: k + 1]
        replay(sub, {"max_tokens": 2000}, workers=1)
    assert RECORDED_FINDINGS.get(hello[:1]) is None  # the oldest of five went
    assert RECORDED_FINDINGS.get(hello[:5]) is not None


def test_a_build_replay_made_stands_in_for_the_detectors_rerun(toolchat: list[Trace]) -> None:
    rec = toolchat[-1]
    same = variant(rec, {})
    other = variant(rec, {"max_tokens": 2000})
    assert _rebuild_of(rec, same) and _rebuild_of(same, same) and _rebuild_of(other, other)
    assert not _rebuild_of(rec, other)
    assert _same_build(rec, same) and not _same_build(rec, other)
    for t in (rec, other):
        again = rebuild(t)
        assert again is not None
        assert diagnose(t, rebuilt=again) == diagnose(t)
        assert diagnose(t, rebuilt=again, options=INGEST_OPTIONS) == diagnose(
            t, options=INGEST_OPTIONS
        )


def test_same_build_looks_at_what_the_detectors_read(toolchat: list[Trace]) -> None:
    rec = toolchat[-1]
    same = variant(rec, {})
    imported = same.model_copy(update={"metadata": {"import": {"window_known": False}}})
    assert not _same_build(rec, imported)
    assert _same_build(rec, same.model_copy(update={"tags": ["x"], "trace_id": "other"}))
    assert not _same_build(rec, same.model_copy(update={"turn": rec.turn + 1}))


def test_stored_json_replays_like_the_traces(hello: list[Trace]) -> None:
    as_json = [TraceJson(t.trace_id, t.to_json().encode("utf-8")) for t in reversed(hello)]
    from_json = replay_sessions([as_json], {"max_tokens": 2000}, workers=1)
    from_traces = replay(hello, {"max_tokens": 2000}, workers=1)
    assert from_json.turns == from_traces.turns
    assert from_json.first_lost == from_traces.first_lost
    assert from_json.findings_after == from_traces.findings_after
    bad = TraceJson("t-1", b'{"trace_id": "t-1"')
    with pytest.raises(InputError, match="trace_id 't-1': cannot be read"):
        replay_sessions([[bad]], {}, workers=1)


def test_a_small_replay_runs_in_this_process_even_with_workers(hello: list[Trace]) -> None:
    # only a replay run here keeps the recorded findings for next time (a worker would not)
    replay_sessions([hello], {"max_tokens": 2000}, workers=2)
    assert RECORDED_FINDINGS.get(hello) is not None


@pytest.mark.slow
def test_stored_json_through_the_worker_pool(hello: list[Trace]) -> None:
    other = load("zh-opencode-codesummary-ctxscope.jsonl")
    assert len(hello) + len(other) >= 48  # big enough for the pool
    sessions = [
        [TraceJson(t.trace_id, t.to_json().encode("utf-8")) for t in s] for s in (hello, other)
    ]
    pooled = replay_sessions(sessions, {"max_tokens": 3000}, findings=False, workers=2)
    serial = replay([*hello, *other], {"max_tokens": 3000}, findings=False, workers=1)
    assert pooled.turns == serial.turns
    assert pooled.first_lost == serial.first_lost
    assert RECORDED_FINDINGS.get(hello) is None


def test_memo_is_bounded_by_the_size_of_its_keys() -> None:
    calls: list[str] = []

    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    memo = Memo(upper, max_size=12)
    for text in ("abc", "def", "ghi", "abc", "jkl", "mno"):
        assert memo(text) == text.upper()
    assert calls == ["abc", "def", "ghi", "jkl", "mno"]  # "abc" came from memory once
    memo("def")  # the oldest went when "mno" came in (12 characters at most)
    assert calls[-1] == "def"
    memo("x" * 4)  # longer than a quarter of the bound: computed, never kept
    memo("x" * 4)
    assert calls[-2:] == ["xxxx", "xxxx"]


def test_remembered_helpers_hand_out_their_own_lists() -> None:
    text = "see src/_pytest/logging.py line 357 and caplog.set_level"
    first = identifiers(text)
    first.clear()
    assert identifiers(text) == ["src/_pytest/logging.py", "357", "caplog.set_level"]


def _stored(tmp_path: Any, traces: list[Trace]) -> Any:
    from ctxcore.store import TraceStore

    db = tmp_path / "s.duckdb"
    with TraceStore(db) as store:  # findings computed at insert, as ingest does
        store.add_traces(traces, source="test")
    return db


def test_the_store_keeps_who_computed_its_findings(tmp_path: Any, toolchat: list[Trace]) -> None:
    from ctxcore.diagnostics import fingerprint
    from ctxcore.store import TraceStore

    db = _stored(tmp_path, toolchat)
    ids = [t.trace_id for t in toolchat]
    with TraceStore(db) as store:
        found = store.stored_findings(ids, fingerprint())
        assert list(found) == ids  # every trace, those without findings too
        for t in toolchat:
            want = diagnose(t, options=INGEST_OPTIONS)
            assert [key(f) for f in found[t.trace_id]] == [key(f) for f in want]
            assert [f.message for f in found[t.trace_id]] == [f.message for f in want]
        assert store.stored_findings(ids, "other code") == {}
    # deferred findings are nobody's until they are computed
    with TraceStore(tmp_path / "d.duckdb", diagnose=False) as store:
        store.add_traces(toolchat, source="test")
        assert store.stored_findings(ids, fingerprint()) == {}
        assert store.diagnose_pending() == len(toolchat)
        assert set(store.stored_findings(ids, fingerprint())) == set(ids)


@pytest.mark.parametrize("settings", [{"max_tokens": 2000}, {"min_relevance": 0.3}])
def test_a_replay_of_the_store_takes_the_recorded_findings_it_computed(
    tmp_path: Any,
    toolchat: list[Trace],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, Any],
) -> None:
    """The recorded side's one-trace detectors come from the store (greedy_waste, which
    re-runs the build, runs for the new side only) and the report is the one a full
    diagnosis of both sides gives; findings stored by other code are computed again."""
    import json

    import duckdb

    from ctxcore.cli import main
    from ctxcore.diagnostics import DETECTORS

    db = _stored(tmp_path, toolchat)
    expected = replay(toolchat, settings, workers=1).model_dump(exclude={"seconds"})
    calls: list[str] = []
    fn, text = DETECTORS["greedy_waste"]

    def counted(view: Any) -> list[Finding]:
        calls.append(view.trace.trace_id)
        return fn(view)

    monkeypatch.setitem(DETECTORS, "greedy_waste", (counted, text))
    sets = [f"{k}={json.dumps(v)}" for k, v in settings.items()]
    for how in (["--session", toolchat[0].session_id], ["--all", "--workers", "1"]):
        calls.clear()
        RECORDED_FINDINGS.clear()  # a replay in this process keeps them for the next
        args = ["replay", *how, "--db", str(db), "--format", "json", "--fail-on", "never"]
        assert main([*args, *[x for s in sets for x in ("--set", s)]]) == 0
        got = json.loads(capsys.readouterr().out)
        got.pop("seconds")
        assert got == json.loads(json.dumps(expected)), how
        recorded = {t.trace_id for t in toolchat}
        assert calls and not recorded & set(calls), how  # only the new side's builds
    con = duckdb.connect(str(db))
    con.execute("UPDATE traces SET diagnosed_with = 'older code'")
    con.close()
    calls.clear()
    RECORDED_FINDINGS.clear()
    args = ["replay", "--all", "--workers", "1", "--db", str(db), "--format", "json"]
    assert main([*args, "--fail-on", "never", *[x for s in sets for x in ("--set", s)]]) == 0
    got = json.loads(capsys.readouterr().out)
    got.pop("seconds")
    assert got == json.loads(json.dumps(expected))
    assert {t.trace_id for t in toolchat} <= set(calls)
