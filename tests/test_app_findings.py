"""Findings one click from their turns: the Traces page's findings view (the current filter's
findings, newest first) and the Timeline's list and heatmap, each opening the turn in Inspect
on its Findings tab. AppTest on a real store of real builds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page
from streamlit.testing.v1 import AppTest
from test_timeline_legend import entries as legend_entries

from ctxapp.ui import views
from ctxcore import figures
from ctxcore.diagnostics import INGEST_OPTIONS, diagnose_session
from ctxcore.models import Trace
from ctxcore.store import TraceFilter, TraceStore

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")


@pytest.fixture(scope="module")
def built() -> dict[str, list[Trace]]:
    return {
        "book": data.session("sess-book", 3, preset="hello-agents-book"),
        "ha": data.session("sess-ha", 2, preset="hello-agents", first=30),
    }


@pytest.fixture
def db(built: dict[str, list[Trace]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, [t for ts in built.values() for t in ts])
    return path


def stored(db: Path, flt: TraceFilter) -> list[tuple[str, str, int, str, str]]:
    """(trace, session, turn, detector, message) of the filter's traces, newest first."""
    with TraceStore(db) as store:  # the app's own store, in this process
        return [
            (r.trace_id, r.session_id, r.turn, f["detector"], f["message"])
            for r in store.list_traces(flt, limit=1000).rows
            for f in store.findings(r.trace_id)
            if not flt.finding or f["detector"] == flt.finding
        ]


def findings_view(at: AppTest) -> list[tuple[str, str, int, str, str]]:
    frame = next(d.value for d in at.dataframe if "detector" in d.value.columns)
    return list(
        zip(
            frame["trace_id"],
            frame["session"],
            frame["turn"].astype(int),
            frame["detector"],
            frame["message"],
            strict=True,
        )
    )


def shown_columns(at: AppTest) -> list[str]:
    table = next(d for d in at.dataframe if "detector" in d.value.columns)
    return list(table.proto.column_order)


def counted(at: AppTest) -> int:
    line = next(m.value for m in at.markdown if "findings in the matching traces" in m.value)
    found = re.match(r"\*\*([\d,]+)\*\*", line)
    assert found, line
    return int(found.group(1).replace(",", ""))


def select(at: AppTest, key: str, row: int) -> None:
    """What a click on a table row's selection box sends."""
    at.session_state[key] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]


def test_traces_findings_view_follows_the_filters(db: Path, built) -> None:
    at = open_page("traces")
    at.session_state["tr_view"] = "Findings"
    at.run()
    want = stored(db, TraceFilter())
    assert len({w[1] for w in want}) == 2, "both sessions must have findings"
    assert findings_view(at) == want
    assert counted(at) == len(want)
    assert shown_columns(at)[:5] == ["turn", "severity", "detector", "message", "session"]
    at.selectbox(key="tr_session").set_value("sess-ha").run()
    want = stored(db, TraceFilter(session_id="sess-ha"))
    assert findings_view(at) == want and counted(at) == len(want)
    assert "session" not in shown_columns(at)  # one session: its name on every row says nothing
    detector = want[-1][3]
    at.selectbox(key="tr_finding").set_value(detector).run()
    want = stored(db, TraceFilter(session_id="sess-ha", finding=detector))
    assert {w[3] for w in want} == {detector}
    assert findings_view(at) == want and counted(at) == len(want)


def test_a_finding_row_opens_its_turn_on_inspects_findings_tab(db: Path, built) -> None:
    at = open_page("traces")
    at.session_state["tr_view"] = "Findings"
    at.run()
    rows = findings_view(at)
    k = next(i for i, r in enumerate(rows) if r[1] == "sess-book" and r[2] == 1)
    trace_id, _, turn, detector, _ = rows[k]
    select(at, "tr_findings", k)
    assert at.title[0].value == "Inspect"
    assert at.query_params["trace"] == trace_id
    assert at.session_state["in_section"] == "Findings"
    boxes = [e.value for kind in ("error", "warning", "info") for e in getattr(at, kind)]
    assert any(views.md(detector) in b for b in boxes), boxes


def test_timeline_lists_each_finding_with_its_turn_and_opens_it(db: Path, built) -> None:
    traces = built["book"]
    at = open_page("timeline", session="sess-book")
    diag = diagnose_session(traces, options=INGEST_OPTIONS)
    frame = next(d.value for d in at.dataframe if "detector" in d.value.columns)
    want = [(t.turn, f.detector, f.message) for t in reversed(diag.turns) for f in t.findings]
    assert want
    assert list(zip(frame["turn"], frame["detector"], frame["message"], strict=True)) == want
    assert set(frame["trace_id"]) == {t.trace_id for t in traces}
    k = list(frame["turn"]).index(1)
    select(at, "tl_findings_list", k)
    assert at.title[0].value == "Inspect"
    assert at.query_params["trace"] == traces[1].trace_id
    assert at.session_state["in_section"] == "Findings"


def test_timeline_findings_heatmap_cell_opens_its_turn(db: Path, built) -> None:
    traces = built["book"]
    at = open_page("timeline", session="sess-book")
    spec = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "Diagnostics per turn" in c.proto.spec
    )
    heat = spec["data"][0]
    assert heat["x"] == [str(t.turn) for t in traces]
    # what plotly sends for a click on the cell of turn 2
    at.session_state["tl_findings"] = {
        "selection": {"points": [{"x": "2", "y": heat["y"][0]}], "point_indices": [], "box": []}
    }
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Inspect"
    assert at.query_params["trace"] == traces[2].trace_id


def test_timeline_legend_names_the_sessions_statuses(db: Path, built) -> None:
    # one line of HTML over the chart (figures.status_legend); its place on screen (in view
    # while the rows scroll) is tested in the browser
    at = open_page("timeline", session="sess-book")
    (legend,) = [h.proto.body for h in at.get("html") if "status-legend" in h.proto.body]
    statuses = {d.status.value for t in built["book"] if t.result for d in t.result.decisions}
    assert legend_entries(legend) == [
        (figures.STATUS_COLORS[s], s) for s in figures.STATUS_ORDER if s in statuses
    ]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    heat = next(c for c in charts if c["data"][0]["type"] == "heatmap")
    assert heat["layout"].get("showlegend") is False


def test_the_findings_view_has_its_own_link(db: Path, built) -> None:
    at = open_page("traces", view="findings", session="sess-book")
    want = stored(db, TraceFilter(session_id="sess-book"))
    assert findings_view(at) == want
    at.session_state["tr_view"] = "Traces"
    at.run()
    assert "view" not in at.query_params and at.query_params["session"] == "sess-book"
    at.session_state["tr_view"] = "Findings"
    at.run()
    assert at.query_params["view"] == "findings"
