"""Timeline: one session across turns — which packet was in, out or squeezed at each turn."""

from __future__ import annotations

import streamlit as st

from ctxcore import figures
from ctxcore.diagnostics import DETECTORS
from ctxcore.store import TraceFilter
from ui import state


def _pick_session() -> str | None:
    sessions = state.sessions()
    if not sessions:
        st.info("The store holds no sessions yet.")
        return None
    ids = [s.session_id for s in sessions]
    wanted = state.qp_get("session")
    if wanted and state.ss_get("tl_session_from_url") != wanted and wanted in ids:
        state.ss_set("tl_session", wanted)
        state.ss_set("tl_session_from_url", wanted)
    if state.ss_get("tl_session") not in ids:
        state.ss_set("tl_session", ids[0])
    label = {
        s.session_id: f"{s.session_id}  ({s.traces} traces, turns {s.first_turn}–{s.last_turn})"
        for s in sessions
    }
    sid: str = st.selectbox("Session", ids, key="tl_session", format_func=lambda i: label[i])
    return sid


def _diagnostics(sid: str) -> None:
    """Detector hits per turn, and the first turn each needed item stopped reaching the model."""
    diag = state.session_diagnosis(sid)
    if diag is None:
        return
    turns = [turn.model_dump(mode="json") for turn in diag.turns]
    st.plotly_chart(
        figures.findings_heatmap(turns, list(DETECTORS), "Diagnostics per turn"),
        key="tl_findings",
    )
    lost = diag.lost
    if lost:
        st.markdown("**First turn where it was lost**")
        st.dataframe(
            [
                {
                    "item": x.item[:120],
                    "kind": x.kind,
                    # never in the prompt: "—" (a dataframe would print "None")
                    "first in prompt": "—" if x.first_seen_turn is None else str(x.first_seen_turn),
                    "lost at turn": x.lost_turn,
                    "status": x.status,
                    "reason": x.reason,
                }
                for x in lost
            ],
            hide_index=True,
            key="tl_lost",
        )


def render() -> None:
    st.title("Timeline")
    sid = _pick_session()
    if sid is None:
        return
    state.qp_set({"session": sid})
    statuses = state.session_statuses(sid)
    parts = state.session_partitions(sid)
    turns: dict[int, str] = {}
    for r in statuses + parts:
        turns.setdefault(int(r["turn"]), str(r["trace_id"]))
    # ~190 rows of a long session are too many to read at once: narrow or group them
    c1, c2 = st.columns([3, 1])
    all_kinds = sorted({str(r.get("kind") or "") for r in statuses})
    kinds = c1.multiselect("Rows of kind", all_kinds, key="tl_kinds", placeholder="every kind")
    grouped = c2.toggle("Group rows by kind", key="tl_group")
    shown = [r for r in statuses if not kinds or str(r.get("kind") or "") in kinds]
    heat = state.derived(
        "timeline",
        sid,
        f"{state.latest_change()}|{','.join(kinds)}|{grouped}",
        lambda: figures.timeline_heatmap(
            shown, f"Packets across the turns of {sid}", group_by_kind=grouped
        ),
    )
    st.caption(
        "One colour per status on every page (colour-blind safe; legend at the chart's top "
        "right). A dashed line marks turns missing between two stored turns."
    )
    event = st.plotly_chart(heat, key="tl_heatmap", on_select="rerun", selection_mode="points")
    points = getattr(getattr(event, "selection", None), "points", None) or []
    target = None
    if points:
        x = points[0].get("x")
        if x is not None and int(x) in turns:
            target = turns[int(x)]
    rows = state.list_traces(TraceFilter(session_id=sid), sort="turn", limit=1000).rows
    st.plotly_chart(
        figures.session_usage(parts, budgets={r.turn: r.budget for r in rows}), key="tl_usage"
    )
    _diagnostics(sid)
    c1, c2 = st.columns([3, 1])
    order = sorted(turns)
    turn = c1.selectbox(
        "Turn", order, key="tl_turn", format_func=lambda n: f"turn {n} · {turns[n]}"
    )
    if c2.button("Open turn in Inspect", key="tl_open", type="primary"):
        target = turns[turn]
    if target:
        state.switch("inspect", trace=target)


if __name__ == "__main__":
    from ui.boot import run_page

    run_page(render)
