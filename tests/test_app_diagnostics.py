"""Issue 5 in the app: findings on Inspect with one-click verified fixes, detector hits per
turn and "first turn where it was lost" on the Timeline, the finding filter on Traces."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from app_support import open_page
from streamlit.testing.v1 import AppTest

from ctxcore.diagnostics import diagnose
from ctxcore.models import CapturedInput, Config, Message, Packet, Status, Trace
from ctxcore.pipeline import build, build_trace
from ctxcore.store import TraceStore

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")
CORPUS = Path(__file__).resolve().parent.parent / "corpus"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CONSTRAINT = "Never change the public API of marshmallow fields; keep backwards compatibility."


def session() -> list[Trace]:
    """Two turns under hello-agents: the constraint (must_keep, no word overlap with the
    query) is filtered by min_relevance 0.3 in the second turn — a must-keep item lost."""
    pip_log = (CORPUS / "d05_pip_install_editable_marshmallow.log").read_text()
    out = []
    for turn in range(2):
        packets = [
            Packet(
                id="tool:call_pip",
                kind="tool_result",
                content=pip_log,
                timestamp=T0 + timedelta(minutes=turn),
            ),
        ]
        if turn == 1:
            packets.append(
                Packet(
                    id="note:constraint-api",
                    kind="task_state",
                    content=CONSTRAINT,
                    must_keep=True,
                )
            )
        inp = CapturedInput(
            query="why does the TimeDelta field serialization round wrongly?",
            now=T0 + timedelta(minutes=turn + 1),
            system_instructions="You are a careful coding agent.",
            history=[Message(role="user", content=CONSTRAINT, timestamp=T0)],
            packets=packets,
        )
        out.append(
            build_trace(
                inp,
                Config(preset="hello-agents", max_tokens=6000),
                trace_id=f"diag-t{turn}",
                session_id="diag",
                turn=turn,
            )
        )
    return out


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Trace]:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    traces = session()
    with TraceStore(tmp_path / "ctxscope.duckdb") as store:
        store.add_traces(traces, source="tests")
    return traces


@pytest.mark.slow
def test_lost_constraint_has_a_verified_fix_one_click_from_the_playground(
    db: list[Trace],
) -> None:
    t = db[1]
    decision = next(d for d in t.result.decisions if d.packet_id == "note:constraint-api")
    assert decision.status == Status.FILTERED
    at = open_page("inspect", trace=t.trace_id)
    at.session_state["in_section"] = "Findings"
    at.run()
    assert not at.exception
    texts = [x.value for x in at.text]
    assert any("note:constraint-api" in x for x in texts)
    fix_buttons = [b for b in at.button if b.key and b.key.startswith("in_fix_")]
    assert fix_buttons, "the lost must-keep finding offers its fix"
    fix_buttons[0].click().run()
    assert not at.exception
    assert at.title[0].value == "Playground"
    params = dict(at.query_params)
    assert params["trace"] == t.trace_id
    # the verified fix: re-running with the Playground's settings keeps the packet
    found = next(f for f in diagnose(t) if f.packet_ids == ["note:constraint-api"])
    assert found.fix is not None
    cfg = Config.model_validate({**t.config.model_dump(exclude_none=True), **found.fix})
    for knob, value in found.fix.items():
        assert float(params[knob]) == pytest.approx(float(value))
    again = build(t.input, cfg)
    kept = next(d for d in again.decisions if d.packet_id == "note:constraint-api")
    assert kept.status == Status.KEPT


def test_counterfactuals_for_any_dropped_packet(db: list[Trace]) -> None:
    t = db[1]
    at = open_page("inspect", trace=t.trace_id)
    at.session_state["in_section"] = "Findings"
    at.run()
    at.selectbox(key="in_cf_packet").set_value("note:constraint-api").run()
    at.toggle(key="in_cf_go").set_value(True).run()
    assert not at.exception
    lines = [x.value for x in at.text if x.value.startswith("min_relevance")]
    assert lines, [x.value for x in at.text]
    at.button(key="in_cf_open_0").click().run()
    assert at.title[0].value == "Playground"


def test_after_a_counterfactual_one_button_says_it_applies_the_change(db: list[Trace]) -> None:
    """Two buttons both named "Open in Playground" stood side by side after a counterfactual:
    one applied the change, the other opened the recording. Each now says which it does."""
    t = db[1]
    at = open_page("inspect", trace=t.trace_id)
    at.session_state["in_section"] = "Findings"
    at.run()
    at.selectbox(key="in_cf_packet").set_value("note:constraint-api").run()
    at.toggle(key="in_cf_go").set_value(True).run()
    to_playground = [b for b in at.button if "Playground" in b.label]
    labels = [b.label for b in to_playground]
    applying = [b for b in to_playground if b.key.startswith("in_cf_open_")]
    assert applying and all(b.label == "Open in Playground with this change" for b in applying)
    [recorded] = [b for b in to_playground if b.key == "in_to_playground"]
    assert recorded.label == "Open in Playground as recorded"
    assert not [b for b in to_playground if b.label == "Open in Playground"], labels
    applying[0].click().run()
    assert at.title[0].value == "Playground"
    assert at.query_params["min_relevance"] != str(t.config.min_relevance)
    assert at.slider(key="pg_min_relevance").value != t.config.min_relevance


def test_timeline_shows_detector_hits_per_turn_and_first_lost_turn(db: list[Trace]) -> None:
    at = open_page("timeline", session="diag")
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    diag = next(
        s for s in specs if s["layout"].get("title", {}).get("text") == "Diagnostics per turn"
    )
    heat = diag["data"][0]
    assert "must_have_lost" in heat["y"]
    row = heat["y"].index("must_have_lost")
    assert heat["x"] == ["0", "1"]
    expected = [
        sum(f.detector == "must_have_lost" for f in diagnose(t, session_traces=db[:k]))
        for k, t in enumerate(db)
    ]
    assert expected[1] >= 1
    assert [int(x) if x else 0 for x in heat["text"][row]] == expected
    lost = next(d.value for d in at.dataframe if "lost at turn" in d.value.columns)
    first = lost[lost["item"] == "note:constraint-api"]
    assert list(first["lost at turn"]) == [1]


def test_traces_filter_by_finding(db: list[Trace]) -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    options = at.selectbox(key="tr_finding").options
    assert "must_have_lost" in options
    from ctxcore.diagnostics import INGEST_OPTIONS

    for detector in options:
        if detector == "(any)":
            continue
        expected = {
            t.turn
            for t in db
            if any(f.detector == detector for f in diagnose(t, options=INGEST_OPTIONS))
        }
        at.selectbox(key="tr_finding").set_value(detector).run()
        frame = next(d.value for d in at.dataframe if "session" in d.value.columns)
        assert set(frame["turn"]) == expected, detector
