"""Replay: one session re-run with other settings — every turn before and after, what changed.

Tuning on one turn can starve later ones; this page sets the knobs once and replays the whole
session (``ctxcore.replay``), then draws both timelines, the tokens used per turn, and the
turns that changed. A turn opens in Compare with both builds (the variants are stored, tagged
``replay``, when a turn is opened: Compare reads traces from the store).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ctxapp.ui import state, views
from ctxcore import figures, settings
from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.pipeline import PRESET_NAMES, check_input_facts
from ctxcore.replay import (
    CHANGED_MEANS,
    FIRST_LOST_MEANS,
    REPLAY_TAG,
    ReplayReport,
    TurnReport,
)

RECORDED = "the recording"
OTHER = "other settings"
AS_RECORDED = "as recorded"
#: the worked case: the classic "32K vs 64K on the same tasks", at the demo's window sizes
WORKED = {"before": 4000, "after": 8000}


def _pick_session() -> str | None:
    sessions = state.sessions()
    if not sessions:
        st.info("The store holds no sessions yet.")
        return None
    ids = [s.session_id for s in sessions]
    wanted = state.qp_get("session")
    if wanted and state.ss_get("rp_session_from_url") != wanted and wanted in ids:
        state.ss_set("rp_session", wanted)
        state.ss_set("rp_session_from_url", wanted)
    if state.ss_get("rp_session") not in ids:
        state.ss_set("rp_session", ids[0])
    label = {s.session_id: f"{s.session_id}  ({s.traces} traces)" for s in sessions}
    sid: str = st.selectbox("Session", ids, key="rp_session", format_func=lambda i: label[i])
    return sid


def _reads_window(presets: set[str]) -> bool:
    """Do all these presets read the input's window (the hello-agents ones refuse it)?"""
    try:
        for name in presets:
            check_input_facts(name, ["window"], "")
    except InputError:
        return False
    return True


def _worked_case(window: bool) -> None:
    state.ss_set("rp_before_mode", OTHER)
    for side in ("before", "after"):
        # the budget too: the hello-agents presets do not derive it from the window (and
        # refuse a window they would ignore)
        state.ss_set(f"rp_{side}_window", WORKED[side] if window else 0)
        state.ss_set(f"rp_{side}_max_tokens", WORKED[side])
        state.ss_set(f"rp_{side}_preset", AS_RECORDED)


def _knobs(side: str, col: Any) -> dict[str, Any]:
    """One side's settings: a window, a budget and a preset, each "as recorded" by default."""
    with col:
        window = st.number_input(
            "window (tokens; 0 = as recorded)",
            min_value=0,
            step=1000,
            key=f"rp_{side}_window",
        )
        budget = st.number_input(
            "max_tokens (0 = as recorded or from the window)",
            min_value=0,
            step=500,
            key=f"rp_{side}_max_tokens",
        )
        preset = st.selectbox("preset", [AS_RECORDED, *PRESET_NAMES], key=f"rp_{side}_preset")
    out: dict[str, Any] = {}
    if window:
        out["window"] = int(window)
    if budget:
        out["max_tokens"] = int(budget)
    if preset != AS_RECORDED:
        out["preset"] = preset
    return out


def _open_in_compare(report: ReplayReport, turn: TurnReport) -> None:
    # Compare reads both sides from the store: store the variants it needs (ids are stable
    # per recording and settings, so opening the same turn again adds nothing)
    new = []
    for tid in (turn.before_id, turn.after_id):
        v = report.variant(tid)
        if v is not None and state.get_trace(tid) is None:
            new.append(v)
    if new:
        state.add_traces(new, source=REPLAY_TAG)
    state.switch("compare", a=turn.before_id, b=turn.after_id)


def _settings(sid: str) -> tuple[str, dict[str, Any] | None, dict[str, Any], bool]:
    """The worked case, what the before side is, both sides' knobs and the findings switch:
    (mode, before, after, compare findings)."""
    window = _reads_window({t.config.preset for t in state.session_traces(sid)})
    what = "window" if window else "budget"
    st.button(
        f"Worked case: a {WORKED['before'] // 1000}K vs {WORKED['after'] // 1000}K {what}",
        key="rp_worked",
        on_click=_worked_case,
        args=(window,),
        help=f"the same session at two {what} sizes",
    )
    mode = st.radio("Before is", [RECORDED, OTHER], key="rp_before_mode", horizontal=True)
    cb, ca = st.columns(2)
    cb.markdown("**Before**")
    ca.markdown("**After**")
    before: dict[str, Any] | None = None
    if mode == OTHER:
        before = _knobs("before", cb)
    else:
        cb.caption("each turn as it was recorded")
    after = _knobs("after", ca)
    findings = st.checkbox("Compare findings too (slower)", key="rp_findings")
    return mode, before, after, findings


def _imported_note(recorded: Sequence[Trace]) -> None:
    """Against the recording, say that an imported session's turns differ from it anyway."""
    imported = views.imported_builders(recorded, settings.IMPORT_BUILDER_PREFIX)
    if imported:
        # the recording is what another agent sent, not a build of a ctxscope preset: a
        # rebuild differs from it even with nothing changed
        st.info(
            f"These turns were imported ({', '.join(views.code(n) for n in imported)}): the "
            "recording is the prompt that agent sent, and replay rebuilds each turn with a "
            "ctxscope preset, so turns differ from it even with the recorded settings. "
            "Compare two settings with *Before is: other settings*.",
            icon=":material/info:",
        )


def _summary(report: ReplayReport) -> None:
    """The four numbers of a replay, and the turns it could not compare."""
    # two a row: four long labels side by side were cut at 1024 px ("turns losing must-k…")
    m1, m2 = st.columns(2)
    m3, m4 = st.columns(2)
    m1.metric(
        "turns changed",
        f"{len(report.changed_turns)} of {len(report.turns)}",
        help=f"turns where {CHANGED_MEANS}",
    )
    delta = report.tokens_delta
    m2.metric("tokens spent" if delta > 0 else "tokens saved", f"{abs(delta):,}")
    m3.metric("turns losing must-keep / error evidence", len(report.turns_losing_must_keep))
    m4.metric("packets lost (turn × packet)", len(report.losses("warning")))
    if report.errors:
        st.error(views.replay_errors_message(report))
        st.dataframe(views.replay_errors_frame(report), hide_index=True, key="rp_errors")


def _timelines(sid: str, report: ReplayReport, recorded: dict[str, Trace]) -> None:
    """Both sides' timelines, as one difference grid or side by side, each drawn once per
    (session, settings of both sides, store version): a knob moved back to a value seen
    before redraws from the cache."""
    draw = st.radio(
        "Timeline",
        ["difference", "side by side"],
        horizontal=True,
        key="rp_draw",
        help="difference: one grid, each cell coloured by its status after where it changed "
        "and pale where it did not (hover: before → after). side by side: both timelines, "
        "each half as wide.",
    )

    def rows(side: str) -> list[dict[str, Any]]:
        return views.replay_status_rows(views.replay_side(report, recorded, side))

    version = state.latest_change()
    if draw == "difference":
        fig = state.derived(
            "replay_diff",
            sid,
            f"{report.before}|{report.after}|{version}",
            lambda: figures.timeline_diff(rows("before_id"), rows("after_id")),
        )
        st.plotly_chart(fig, key="rp_heat_diff")
        return
    h1, h2 = st.columns(2)
    for col, label, side, settings_of in (
        (h1, "Before", "before_id", report.before),
        (h2, "After", "after_id", report.after),
    ):

        def heatmap(side: str = side, label: str = label) -> go.Figure:
            return figures.timeline_heatmap(rows(side), f"{label}: packets across the turns")

        fig = state.derived("replay_heatmap", sid, f"{settings_of}|{version}", heatmap)
        with col:
            st.plotly_chart(fig, key=f"rp_heat_{side}")


def _changed_turns(report: ReplayReport) -> None:
    """The turns that changed, and one of them opened in Compare."""
    changed = report.changed_turns
    st.subheader(f"Turns that changed ({len(changed)})")
    st.dataframe(views.replay_changed_frame(changed), hide_index=True, key="rp_changed")
    by_turn = {t.turn: t for t in changed}
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox(
        "Turn",
        list(by_turn),
        key="rp_turn",
        format_func=lambda n: f"turn {n} · {len(by_turn[n].flips)} flip(s)",
    )
    if c2.button("Open turn in Compare", key="rp_open", type="primary"):
        _open_in_compare(report, by_turn[pick])


def _first_lost(report: ReplayReport) -> None:
    """The items whose first lost turn moved, if any."""
    moved = views.first_lost_rows(report)
    if moved:
        st.markdown("**First turn each item is lost**")
        st.caption(FIRST_LOST_MEANS[0].upper() + FIRST_LOST_MEANS[1:] + ".")
        st.dataframe(moved, hide_index=True, key="rp_first_lost")


def render() -> None:
    st.title("Replay")
    st.caption(
        "Re-run every turn of a session with other settings and see what would change. "
        "Recorded traces are never changed."
    )
    sid = _pick_session()
    if sid is None:
        return
    state.qp_set({"session": sid})
    mode, before, after, findings = _settings(sid)
    report = state.replay(
        sid,
        json.dumps(after, sort_keys=True),
        None if before is None else json.dumps(before, sort_keys=True),
        findings,
    )
    if report is None:
        st.info("This session has no recorded traces to replay.")
        return
    recorded = {t.trace_id: t for t in state.session_traces(sid)}
    if mode == RECORDED:
        _imported_note(list(recorded.values()))
    _summary(report)
    if not report.changed_turns:
        # an all-pale grid of every packet and turn said "nothing changed" in 70 rows
        st.info(views.replay_nothing_changed(report), icon=":material/check_circle:")
        _findings_table(report)
        return
    st.caption(views.replay_changed_caption(report, CHANGED_MEANS))
    _timelines(sid, report, recorded)
    st.markdown("**Tokens used per turn**")
    st.bar_chart(views.replay_tokens_frame(report), stack=False, height=260)
    _changed_turns(report)
    _first_lost(report)
    _findings_table(report)


def _findings_table(report: ReplayReport) -> None:
    if report.findings_compared:
        st.markdown("**Findings by detector**")
        st.dataframe(views.replay_findings_rows(report), hide_index=True, key="rp_findings_table")


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
