"""No table of the app shows "None", "nan" or "<NA>": every dataframe on every page, in the
states a user reaches (each preset, a preset switch in the Playground, both Compare modes, a
replay with another budget, the Traces findings view), through AppTest on a real store.

A dataframe draws a missing value as the word "None" unless it is given a placeholder, so a
column with gaps passes only with one (``widgets.MISSING``); text cells must not hold the
words themselves either (a ``str(None)`` that slipped into a frame).
"""

from __future__ import annotations

from pathlib import Path

import app_support as data
import pandas as pd
import pytest
from app_support import open_page
from streamlit.testing.v1 import AppTest

from ctxcore.models import Trace

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")
#: what a table must never print for a value
WORDS = {"None", "none", "nan", "NaN", "<NA>", "NaT", "null"}


@pytest.fixture(scope="module")
def built() -> dict[str, list[Trace]]:
    # each preset leaves different gaps: no rank for a filtered packet, no score at all
    # for what the hello-agents presets never scored
    return {
        preset: data.session(f"sess-{preset}", 3, preset=preset)
        for preset in ("ctxscope", "hello-agents", "hello-agents-book")
    }


@pytest.fixture
def db(built: dict[str, list[Trace]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, [t for ts in built.values() for t in ts])
    return path


class Scan:
    """Every dataframe seen so far: what would be drawn as "None", and how many gaps were
    seen at all (so the scan is known to have met the case it guards)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.gaps = 0
        self.tables = 0

    def __call__(self, at: AppTest, where: str) -> None:
        assert not at.exception, (where, [e.value for e in at.exception])
        for d in at.dataframe:
            self.tables += 1
            frame = d.value if isinstance(d.value, pd.DataFrame) else pd.DataFrame(d.value)
            placeholder = d.proto.placeholder if d.proto.HasField("placeholder") else None
            name = f"{where}: table ({', '.join(map(str, frame.columns[:3]))}, …)"
            for col in frame.columns:
                missing = int(frame[col].isna().sum())
                self.gaps += missing
                if missing and (placeholder is None or placeholder.strip() in WORDS):
                    shown = placeholder or "None"
                    self.problems.append(
                        f"{name}, column {col!r}: {missing} missing value(s) drawn as {shown!r}"
                    )
                words = sorted({v for v in frame[col] if isinstance(v, str) and v.strip() in WORDS})
                if words:
                    self.problems.append(f"{name}, column {col!r} holds {words}")


def _each(at: AppTest, key: str, values: list[str], scan: Scan, where: str) -> None:
    for v in values:
        at.session_state[key] = v
        at.run()
        scan(at, f"{where} {v}")


@pytest.mark.slow
def test_no_table_on_any_page_prints_none(db: Path, built: dict[str, list[Trace]]) -> None:
    scan = Scan()
    at = open_page("traces")
    scan(at, "traces")
    _each(at, "tr_view", ["Findings", "Traces"], scan, "traces")
    last = {preset: ts[-1] for preset, ts in built.items()}
    for preset, t in last.items():
        at = open_page("inspect", trace=t.trace_id)
        _each(at, "in_section", ["Decisions", "Scores", "Findings"], scan, f"inspect {preset}")
        scan(open_page("timeline", session=t.session_id), f"timeline {preset}")
    # the Playground after a preset switch: other ids, other gaps, both diff modes
    t = last["ctxscope"]
    at = open_page("playground", trace=t.trace_id)
    scan(at, "playground")
    for preset in ("hello-agents-book", "hello-agents"):
        at.selectbox(key="pg_preset").set_value(preset).run()
        scan(at, f"playground -> {preset}")
        at.radio(key="pg_diff_mode").set_value("previous run").run()
        scan(at, f"playground -> {preset}, against the previous run")
        at.radio(key="pg_diff_mode").set_value("recorded build").run()
    # Compare: another stored trace of another preset, then the same input under another
    at = open_page("compare", a=t.trace_id, b=last["hello-agents-book"].trace_id)
    scan(at, "compare a/b")
    at.radio(key="cmp_b_mode").set_value("same input as A, another preset").run()
    for preset in at.selectbox(key="cmp_b_preset").options:
        at.selectbox(key="cmp_b_preset").set_value(preset).run()
        scan(at, f"compare same input, {preset}")
    scan(open_page("sweep", trace=t.trace_id), "sweep")
    at = open_page("replay", session=t.session_id)
    at.number_input(key="rp_after_max_tokens").set_value(1500).run()
    at.checkbox(key="rp_findings").check().run()
    scan(at, "replay at 1,500 tokens")
    scan(open_page("share", trace=t.trace_id), "share")
    assert scan.problems == []
    # the scan met real gaps (decision ranks and scores no preset gave) and passed them
    assert scan.gaps > 0 and scan.tables >= 20, (scan.gaps, scan.tables)


def test_the_decisions_table_draws_a_gap_as_a_dash(db: Path, built: dict[str, list[Trace]]) -> None:
    t = built["hello-agents-book"][-1]
    at = open_page("inspect", trace=t.trace_id)
    table = next(d for d in at.dataframe if "budget_left" in d.value.columns)
    frame = table.value
    unranked = [d.packet_id for d in t.result.decisions if d.rank is None]
    assert unranked, "this build must hold packets without a rank"
    assert set(frame.loc[frame["rank"].isna(), "packet_id"]) == set(unranked)
    assert table.proto.placeholder == "—"
    # ranks stay integers (sortable as numbers), not text
    assert str(frame["rank"].dtype) == "Int64"


def test_every_decision_column_has_a_width_in_pixels() -> None:
    # a column without a width is sized in the browser by measuring its cells: on a
    # 2,000-packet trace that was a sixth of a Playground knob move
    from ctxapp.ui import views, widgets

    for column in views.DECISION_COLUMNS:
        spec = widgets.DECISION_CONFIG.get(column)
        assert spec is not None, column
        assert isinstance(spec.get("width"), int) and spec["width"] > 0, (column, spec)
    import importlib

    playground = importlib.import_module("ctxapp.pages.playground")
    for column in views.FLIP_COLUMNS:
        spec = playground.FLIP_CONFIG.get(column)
        assert spec is not None and isinstance(spec.get("width"), int), (column, spec)


@pytest.mark.parametrize(
    ("page", "key", "column", "label"),
    [
        ("inspect", "in_decisions", "reason_text", "reason"),
        ("compare", "cmp_decisions", "reason_A", "reason A"),
    ],
)
def test_a_selected_row_is_shown_whole_beneath_its_table(
    db: Path, built: dict[str, list[Trace]], page: str, key: str, column: str, label: str
) -> None:
    """A reason longer than its column (one line a row) is read whole: the row selected is
    shown beneath the table, as text, every column it names on a line of its own."""
    ts = built["hello-agents"]
    params = {"trace": ts[-1].trace_id} if page == "inspect" else {"a": ts[0].trace_id}
    if page == "compare":
        params["b"] = ts[-1].trace_id
    at = open_page(page, **params)
    frame = next(d.value for d in at.dataframe if column in d.value.columns)
    pos = int(frame[column].astype(str).str.len().to_numpy().argmax())
    want = str(frame.iloc[pos][column])
    assert len(want) > 40, "the longest reason here must be longer than its column shows"
    assert not [c for c in at.code if want in c.value]
    at.session_state[key] = {"selection": {"rows": [pos], "columns": [], "cells": []}}
    at.run()
    assert not at.exception
    [shown] = [c.value for c in at.code if want in c.value]
    assert f"{label}: {want}" in shown.splitlines()
