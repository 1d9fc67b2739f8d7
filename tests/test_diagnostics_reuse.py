"""Findings computed once reused: the store's findings of a trace (computed alone, at
insert) stand in for every detector that does not read the session's other turns.

``diagnose(trace, session_traces=..., alone=diagnose(trace))`` must be exactly
``diagnose(trace, session_traces=...)``; a detector must never look at the other turns
where ``reads_other_turns`` says it does not; and the fingerprint that says "computed by
this code" must change with the code.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ctxcore.diagnostics import (
    DETECTORS,
    INGEST_OPTIONS,
    READS_OTHER_TURNS,
    SESSION_DETECTORS,
    diagnose,
    fingerprint,
    reads_other_turns,
    source_fingerprint,
)
from ctxcore.diagnostics.context import TraceView
from ctxcore.loading import parse_json, trace_from_obj
from ctxcore.models import Trace

DEMO = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"


def _sessions() -> list[list[Trace]]:
    out = []
    for path in sorted(DEMO.glob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        traces = [trace_from_obj(parse_json(ln, str(path)), str(path)) for ln in lines if ln]
        out.append(sorted(traces, key=lambda t: (t.turn, t.created_at)))
    return out


@pytest.fixture(scope="module")
def sessions() -> list[list[Trace]]:
    return _sessions()


def test_findings_computed_alone_stand_in_for_the_detectors_that_see_one_trace(
    sessions: list[list[Trace]],
) -> None:
    compared = differed = 0
    for session in sessions:
        for i, t in enumerate(session[::2]):
            earlier = session[: 2 * i]
            alone = diagnose(t, options=INGEST_OPTIONS)
            whole = diagnose(t, session_traces=earlier, options=INGEST_OPTIONS)
            again = diagnose(t, session_traces=earlier, options=INGEST_OPTIONS, alone=alone)
            assert again == whole, (t.session_id, t.turn)
            compared += 1
            differed += alone != whole  # the session's turns do change some findings
    assert compared > 50 and differed > 5


class _Untouchable(list):  # type: ignore[type-arg]
    """Other turns a detector must not read."""

    def _refuse(self, *_: Any) -> Any:
        raise AssertionError("a detector outside SESSION_DETECTORS read the other turns")

    __iter__ = __len__ = __getitem__ = __bool__ = __contains__ = _refuse  # type: ignore[assignment]


def test_detectors_outside_session_detectors_never_read_other_turns(
    sessions: list[list[Trace]],
) -> None:
    assert SESSION_DETECTORS < set(DETECTORS)
    assert set(READS_OTHER_TURNS) <= SESSION_DETECTORS
    ran = conditional = 0
    for session in sessions:
        for t in session[1::3]:
            view = TraceView(t, INGEST_OPTIONS, [], None)
            view.session_traces = _Untouchable(session)
            for det_id, (fn, _) in DETECTORS.items():
                if not reads_other_turns(det_id, view):
                    fn(view)
                    ran += 1
                    conditional += det_id in SESSION_DETECTORS
    assert ran > 100 and conditional > 10  # summary_coverage without a summary citing packets
    # and the session detectors do read them (else they need not be run again):
    # summary_coverage where a summary in the prompt names the packets it covers
    session = next(s for s in sessions if s[0].config.preset == "ctxscope" and len(s) > 3)
    t = session[-1]
    assert t.result is not None
    ids = {p.id for p in t.input.packets}
    kept = next(
        d.packet_id for d in t.result.decisions if d.status.value == "kept" and d.packet_id in ids
    )
    packets = [
        p.model_copy(update={"metadata": {**p.metadata, "covers": ["tool:earlier"]}})
        if p.id == kept
        else p
        for p in t.input.packets
    ]
    t = t.model_copy(update={"input": t.input.model_copy(update={"packets": packets})})
    for det_id in SESSION_DETECTORS:
        view = TraceView(t, INGEST_OPTIONS, [], None)
        view.session_traces = _Untouchable(session[:-1])
        assert reads_other_turns(det_id, view)
        with pytest.raises(AssertionError, match="read the other turns"):
            DETECTORS[det_id][0](view)


def test_the_fingerprint_follows_the_code(tmp_path: Path) -> None:
    import ctxcore

    assert fingerprint() == fingerprint() and len(fingerprint()) == 20
    src = Path(ctxcore.__file__).parent / "diagnostics"
    copy = tmp_path / "pkg"
    shutil.copytree(src, copy / "diagnostics")
    first = source_fingerprint(copy)
    assert first != fingerprint()
    target = copy / "diagnostics" / "detectors.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    source_fingerprint.cache_clear()
    assert source_fingerprint(copy) != first


def test_an_imported_prompt_is_diagnosed_without_a_pipeline_rerun(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another system assembled an imported prompt, so the re-run comparisons (optimal fill,
    uncompressed prompt) never apply to it: it is not re-run, and its findings are the ones
    a re-run would have led to."""
    from ctxcore.diagnostics import counterfactual
    from ctxcore.formats.load import load_file

    fixtures = Path(__file__).resolve().parent / "fixtures" / "imports"
    traces = [
        t
        for name in ("claude-code/ccviewer-task-sidechain-session.jsonl", "codex")
        for path in sorted((fixtures / name).glob("*.jsonl")) or [fixtures / name]
        for t in load_file(path)
    ]
    assert len(traces) > 10 and all(t.builder.name.startswith("import/") for t in traces)
    with monkeypatch.context() as m:  # as before: imported prompts re-run, never reproduced
        m.setattr(TraceView, "imported", property(lambda _: False))
        reran = [diagnose(t, options=INGEST_OPTIONS) for t in traces]
        assert not any(TraceView(t, INGEST_OPTIONS, [], None).reproduces for t in traces)

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("an imported prompt was re-run")

    monkeypatch.setattr(counterfactual, "rerun_outcome", refuse)
    assert [diagnose(t, options=INGEST_OPTIONS) for t in traces] == reran


def test_greedy_waste_skips_its_rerun_only_where_no_fill_could_add_a_packet(
    sessions: list[list[Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nothing was left out, cut or summarized for room, greedy_waste answers without
    re-running the optimal fill: on the demo and on variants that leave more or less room,
    its findings are the ones of the re-run (or the knapsack) every time."""
    from ctxcore.diagnostics import detectors
    from ctxcore.errors import CtxscopeError
    from ctxcore.replay.variants import _variant

    builds: list[Trace] = []
    for session in sessions:
        for t in session[::4]:
            builds.append(t)
            for settings in ({"max_tokens": 64_000}, {"min_relevance": 0.3}, {"fill": "break"}):
                try:
                    builds.append(_variant(t, settings, reasons=True))
                except CtxscopeError:  # a knob the preset does not have
                    continue
    views = [TraceView(t, INGEST_OPTIONS, [], None) for t in builds]
    short = [detectors.greedy_waste(v) for v in views]
    skipped = sum(all(d.reason in detectors._NOT_FOR_ROOM for d in v.decisions) for v in views)
    monkeypatch.setattr(detectors, "_NOT_FOR_ROOM", frozenset())
    full = [detectors.greedy_waste(TraceView(t, INGEST_OPTIONS, [], None)) for t in builds]
    assert short == full
    assert skipped > 40 and sum(map(bool, full)) > 20  # both kinds of build were compared
