"""What the Replay page shows, prepared without Streamlit (``ctxapp.ui.views``): real replays
of the demo's hello-agents session, the tables and sentences read against what the replay
found (tests/test_replay.py pins the same turns and packets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_replay import HELLO, load

from ctxapp.ui import views
from ctxcore import figures, settings
from ctxcore.models import Trace
from ctxcore.replay import CHANGED_MEANS, ReplayReport, TurnError, replay


@pytest.fixture(scope="module")
def hello() -> list[Trace]:
    return load(HELLO)


@pytest.fixture(scope="module")
def smaller(hello: list[Trace]) -> ReplayReport:
    """A 2,000-token budget: tool:call_7 is lost at turn 11, tool:call_8 at 12."""
    return replay(hello, {"max_tokens": 2000}, findings=False, workers=1, keep_variants=True)


def test_the_sides_are_the_recording_and_the_variants_turn_by_turn(
    hello: list[Trace], smaller: ReplayReport
) -> None:
    recorded = {t.trace_id: t for t in hello}
    before = views.replay_side(smaller, recorded, "before_id")
    after = views.replay_side(smaller, recorded, "after_id")
    assert [t.trace_id for t in before] == [t.trace_id for t in smaller.turns]
    assert all(before[i] is recorded[t.trace_id] for i, t in enumerate(smaller.turns))
    assert [t.trace_id for t in after] == [t.after_id for t in smaller.turns]
    assert all(t.source_trace_id == r.trace_id for t, r in zip(after, before, strict=True))
    assert all(t.config.max_tokens == 2000 for t in after)


def test_status_rows_draw_the_difference_grid_of_the_lost_packets(
    hello: list[Trace], smaller: ReplayReport
) -> None:
    recorded = {t.trace_id: t for t in hello}
    rows = {
        side: views.replay_status_rows(views.replay_side(smaller, recorded, side))
        for side in ("before_id", "after_id")
    }
    for side, traces in (("before_id", hello), ("after_id", None)):
        built = traces or views.replay_side(smaller, recorded, side)
        assert len(rows[side]) == sum(len(t.result.decisions) for t in built if t.result)
    status = {side: {(r["turn"], r["packet_id"]): r["status"] for r in rows[side]} for side in rows}
    assert status["before_id"][(11, "tool:call_7")] == "kept"
    assert status["after_id"][(11, "tool:call_7")] == "dropped"
    grid = figures.timeline_diff(rows["before_id"], rows["after_id"]).to_plotly_json()["data"][0]
    i = figures.timeline_row(grid, "tool:call_7")
    j = list(grid["x"]).index("11")
    assert grid["z"][i][j] == list(figures.DIFF_COLORS).index("dropped")
    assert "kept → dropped" in figures.cell_hover(grid, i, j)


def test_the_changed_turns_table_names_what_each_turn_lost(smaller: ReplayReport) -> None:
    frame = views.replay_changed_frame(smaller.changed_turns)
    assert list(frame.columns) == views.REPLAY_CHANGED_COLUMNS
    assert list(frame["turn"]) == [t.turn for t in smaller.changed_turns]
    row = frame.set_index("turn").loc[12]
    assert {"tool:call_7", "tool:call_8"} <= set(row["lost"].split(", "))
    assert "warning" in row["losses"] and "error" not in row["losses"]
    assert row["Δ tokens"] == row["used after"] - row["used before"] < 0
    turn12 = next(t for t in smaller.turns if t.turn == 12)
    assert row["budget"] == f"{turn12.budget_before} → {turn12.budget_after}"
    assert row["flips"] == len(turn12.flips)
    assert row["findings +/−"] == "+0 −0"  # not compared
    assert views.replay_changed_frame([]).empty


def test_first_lost_rows_hold_the_items_whose_first_loss_moved(smaller: ReplayReport) -> None:
    rows = {r["item"]: r for r in views.first_lost_rows(smaller)}
    assert rows["tool:call_7"] == {
        "item": "tool:call_7",
        "kind": "packet",
        "before": "never",
        "after": "11",
    }
    assert rows["tool:call_8"]["after"] == "12"
    assert all(r["before"] != r["after"] for r in rows.values())


def test_tokens_per_turn_and_the_changed_caption(smaller: ReplayReport) -> None:
    bars = views.replay_tokens_frame(smaller)
    assert bars.index.name == "turn" and list(bars.index) == [t.turn for t in smaller.turns]
    assert list(bars["before"]) == [t.used_before for t in smaller.turns]
    assert list(bars["after"]) == [t.used_after for t in smaller.turns]
    assert views.replay_changed_caption(smaller, CHANGED_MEANS) == f"Changed: {CHANGED_MEANS}."


def test_nothing_changed_says_what_was_compared_and_the_findings(hello: list[Trace]) -> None:
    report = replay(hello, {}, workers=1)
    assert report.changed_turns == [] and report.findings_compared
    said = views.replay_nothing_changed(report)
    assert said.startswith(
        f"**Nothing changed**: all {len(hello)} turn(s) build the same context with the "
        "recorded settings (no knob set) as with the recording"
    )
    assert said.endswith("The findings are the same too.")
    rows = views.replay_findings_rows(report)
    assert [r["detector"] for r in rows] == sorted(report.findings_before)
    assert all(r["before"] == r["after"] for r in rows)
    assert views.replay_described('{"max_tokens": 2000, "preset": "ctxscope"}') == (
        "max_tokens 2000, preset ctxscope"
    )


def test_findings_by_detector_of_two_settings(hello: list[Trace]) -> None:
    report = replay(hello, {"max_tokens": 8000}, against={"max_tokens": 2000}, workers=1)
    rows = {r["detector"]: r for r in views.replay_findings_rows(report)}
    assert set(rows) == {*report.findings_before, *report.findings_after}
    for det, row in rows.items():
        assert row["before"] == report.findings_before.get(det, 0)
        assert row["after"] == report.findings_after.get(det, 0)
    assert sum(int(r["after"]) for r in rows.values()) < sum(
        int(r["before"]) for r in rows.values()
    )
    changed = views.replay_nothing_changed(report)  # the sides in words, even where changed
    assert "with max_tokens 8000 as with max_tokens 2000" in changed


def test_turns_that_could_not_be_compared(smaller: ReplayReport) -> None:
    failed = [
        TurnError(session_id="s", turn=4, trace_id="t4", side="after", message="no room left"),
        TurnError(session_id="s", turn=9, trace_id="t9", side="read", message="bad line"),
    ]
    report = smaller.model_copy(update={"errors": failed})
    assert views.replay_errors_message(report) == (
        "2 turn(s) could not be compared; 1 of them build only with the settings before: the "
        "new settings lose everything those turns kept"
    )
    frame = views.replay_errors_frame(report)
    assert frame.to_dict("records") == [
        {"turn": 4, "side that failed": "after", "why": "no room left", "trace id": "t4"},
        {"turn": 9, "side that failed": "read", "why": "bad line", "trace id": "t9"},
    ]
    only_read = smaller.model_copy(update={"errors": failed[1:]})
    assert views.replay_errors_message(only_read) == "1 turn(s) could not be compared"


def test_imported_builders_name_the_sessions_an_import_made(hello: list[Trace]) -> None:
    from ctxcore.formats.load import load_file

    log = Path(__file__).parent / "fixtures" / "imports" / "claude-code"
    traces = load_file(log / "ccviewer-task-sidechain-session.jsonl", "auto")
    prefix = settings.IMPORT_BUILDER_PREFIX
    assert views.imported_builders(traces, prefix) == ["import/claude-code"]
    assert views.imported_builders(hello, prefix) == []
    assert views.imported_builders([*hello, *traces], prefix) == ["import/claude-code"]


def test_the_sweep_y_axis_starts_on_the_filter_unless_x_is_it() -> None:
    params = ["max_tokens", "min_relevance", "relevance_weight"]
    assert views.sweep_y_default(params, "max_tokens") == "min_relevance"
    assert views.sweep_y_default(params, "min_relevance") == "max_tokens"
    assert views.sweep_y_default(["max_tokens", "history_limit"], "max_tokens") == ("history_limit")
