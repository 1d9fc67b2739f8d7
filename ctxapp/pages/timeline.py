"""Timeline: one session across turns — which packet was in, out or squeezed at each turn."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ctxapp.ui import costs, ledger, state, views, widgets
from ctxcore import figures
from ctxcore.costing import CallCost
from ctxcore.diagnostics import DETECTORS
from ctxcore.store import TraceFilter
from ctxcore.store.records import TraceRow

#: The packet chart's box: a taller chart scrolls inside it, under a legend that stays put
#: (~190 rows of a long session are ~4,000 px; the page's own legend would scroll away).
CHART_BOX = 560


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


#: a longer session is diagnosed when asked, not at every open: diagnosing takes some 20 ms
#: a turn (docs/design.md, "The app"), and the page draws the rest in well under that
AUTO_DIAGNOSE_TURNS = 60


def _asked_to_diagnose(sid: str, turns: int) -> bool:
    """Whether to diagnose the session now: a short one always, a long one once asked (a
    button; the answer stays for the session's later reruns, the diagnosis is cached)."""
    asked = f"tl_diagnosed:{sid}"
    if turns <= AUTO_DIAGNOSE_TURNS or state.ss_get(asked):
        return True
    st.markdown("**Diagnostics**")
    st.caption(
        f"The detectors over all {turns:,} turns take a while (some 20 ms a turn), so they "
        "run when asked; each turn's own findings are on Inspect."
    )
    if not st.button(f"Diagnose the {turns:,} turns", key="tl_diagnose"):
        return False
    state.ss_set(asked, True)
    return True


def _diagnostics(sid: str, n_turns: int) -> None:
    """Detector hits per turn (a cell opens its turn), each finding with its turn (a row
    opens it), and the first turn each needed item stopped reaching the model."""
    if not _asked_to_diagnose(sid, n_turns):
        return
    diag = state.session_diagnosis(sid)
    if diag is None:
        return
    turns = [turn.model_dump(mode="json") for turn in diag.turns]
    event = st.plotly_chart(
        figures.findings_heatmap(turns, list(DETECTORS), "Diagnostics per turn"),
        key="tl_findings",
        on_select="rerun",
        selection_mode="points",
    )
    by_turn = {t.turn: t.trace_id for t in diag.turns}
    turn = widgets.clicked_turn(event)
    if turn in by_turn:
        widgets.open_in_inspect(by_turn[turn], section="Findings")
    frame = views.session_findings_frame(sid, diag.turns)
    if not frame.empty:
        st.markdown(f"**Findings of this session ({len(frame):,})**, latest turn first")
        widgets.findings_table(frame, key="tl_findings_list", session=False)
    lost = diag.lost
    if lost:
        st.markdown("**First turn where it was lost**")
        # the item and when and why it was lost at the left: with the item's text as wide
        # as its longest, "lost at turn" was off-screen at 1024 px
        frame = pd.DataFrame(
            {
                "item": [x.item for x in lost],
                "lost at turn": [x.lost_turn for x in lost],
                "status": [x.status for x in lost],
                "reason": [x.reason for x in lost],
                # a turn number, or a gap (never in the prompt) drawn as widgets.MISSING
                "first in prompt": pd.array([x.first_seen_turn for x in lost], dtype="Int64"),
                "kind": [x.kind for x in lost],
            }
        )
        widgets.readable_table(
            frame,
            "tl_lost",
            column_config=LOST_CONFIG,
            whole=["item", "lost at turn", "status", "reason", "first in prompt", "kind"],
        )


def _session_cost(sid: str) -> list[CallCost] | None:
    """The session's cost in one line over the charts (the total, the breaks), read from the
    store's cost summaries; ``None`` for a session of no model calls (no model named, no
    usage recorded), which has no cost view."""
    calls = state.session_call_costs(sid)
    if not any(c.model or c.recorded is not None for c in calls):
        return None
    known = [c.cost_usd for c in calls if c.cost_usd is not None]
    breaks = sum(1 for c in calls if c.cache_break is not None)
    total = figures.usd(sum(known)) if known else figures.MISSING
    unknown = len(calls) - len(known)
    st.markdown(f"**Cost and prompt cache** · {total} over {len(calls):,} calls")
    st.caption(
        (f"{unknown:,} calls of unknown cost (—) are not in the total. " if unknown else "")
        + (
            f"{breaks:,} cache breaks (▼ on the cost chart: hover one for its reason and fix). "
            if breaks
            else "No cache break in this session. "
        )
        + "Per turn the provider's figures where it recorded usage, else the simulated "
        "cache's."
    )
    return calls


def _costs(sid: str, calls: list[CallCost]) -> None:
    """Per turn the prompt's cached, written and uncached tokens and the cost, each cache
    break marked (its reason on hover and in the table)."""
    st.plotly_chart(
        state.derived(
            "timeline_cost",
            sid,
            str(state.latest_change()),
            lambda: figures.turns_figure(calls, f"Prompt cache and cost per turn of {sid}"),
        ),
        key="tl_cost_chart",
    )
    widgets.readable_table(
        costs.turns_frame(calls),
        "tl_cost",
        column_config=COST_CONFIG,
        whole=["turn", "$", "break", "break reason", "figures", "trace_id"],
    )


COST_CONFIG = {
    "turn": st.column_config.NumberColumn("turn", width=60),
    "$": st.column_config.NumberColumn("$", format="$%.4f", width=90),
    "cached": st.column_config.NumberColumn("cached", format="localized", width=90),
    "written": st.column_config.NumberColumn("written", format="localized", width=90),
    "uncached": st.column_config.NumberColumn("uncached", format="localized", width=90),
    "output": st.column_config.NumberColumn("output", format="localized", width=80),
    "break": st.column_config.TextColumn("break", width=widgets.STATUS_PX),
    "break reason": st.column_config.TextColumn("break reason", width=widgets.REASON_PX),
    "figures": st.column_config.TextColumn("figures", width=90),
    "trace_id": st.column_config.TextColumn("trace id", width=widgets.ID_PX),
}


LOST_CONFIG = {
    "item": st.column_config.TextColumn("item", width=widgets.ID_PX),
    "lost at turn": st.column_config.NumberColumn("lost at turn", width=95),
    "status": st.column_config.TextColumn("status", width=widgets.STATUS_PX),
    "reason": st.column_config.TextColumn("reason", width=widgets.REASON_PX),
    "first in prompt": st.column_config.NumberColumn("first in prompt", width=110),
    "kind": st.column_config.TextColumn("kind", width=90),
}


#: the Timeline's views, one chart (and its table) each: only the open one is read, built and
#: drawn (``widgets.section``), so a long session opens on its packets without paying for
#: the 500-turn charts under them (docs/design.md, "The app", the Timeline)
VIEWS = ["Packets", "Partition usage", "Cost and cache"]


#: the layout Streamlit gives a chart drawn with ``selection_mode="points"``
SELECTING = {"clickmode": "event+select", "hovermode": "closest", "dragmode": "pan"}


@dataclass(frozen=True)
class _Grid:
    """The packet chart of one session, kind filter and grouping, as the page draws it."""

    figure: go.Figure
    rows: int
    statuses: frozenset[str]


def _grid(sid: str, kinds: list[str], grouped: bool) -> _Grid:
    """The session's packet chart for these kinds (all when none), built once per store
    version, kinds and grouping."""

    def make() -> _Grid:
        shown = [
            r for r in state.session_statuses(sid) if not kinds or str(r.get("kind") or "") in kinds
        ]
        fig = figures.timeline_heatmap(
            shown, f"Packets across the turns of {sid}", group_by_kind=grouped, legend=False
        )
        # what Streamlit sets on a chart that selects points, set here: left to Streamlit,
        # it came after the first draw, and a new click mode has plotly draw the chart again
        fig.update_layout(SELECTING)
        return _Grid(
            fig,
            len({str(r["packet_id"]) for r in shown}),
            frozenset(str(r["status"]) for r in shown),
        )

    key = f"{state.latest_change()}|{','.join(kinds)}|{grouped}"
    return state.derived("timeline", sid, key, make)


def _packets(sid: str, turns: dict[int, str]) -> str | None:
    """The packet chart (status per packet and turn) with its kind filter and grouping, its
    legend kept in view over a tall chart; the trace of a clicked cell's turn, if any."""
    # ~190 rows of a long session are too many to read at once: narrow or group them
    c1, c2 = st.columns([2, 1])  # "Group rows by kind" whole at 1024 px
    all_kinds = state.derived(
        "timeline_kinds",
        sid,
        str(state.latest_change()),
        lambda: sorted({str(r.get("kind") or "") for r in state.session_statuses(sid)}),
    )
    kinds = c1.multiselect("Rows of kind", all_kinds, key="tl_kinds", placeholder="every kind")
    grouped = c2.toggle("Group rows by kind", key="tl_group")
    grid = _grid(sid, kinds, grouped)
    tall = figures.timeline_height(grid.rows) > CHART_BOX
    scrolls = f" The {grid.rows:,} rows scroll in the box below; the legend stays put."
    st.caption(
        "One colour per status on every page (colour-blind safe); a blank cell: not a "
        "candidate at that turn. A dashed line marks turns missing between two stored turns. "
        "Click a cell to open its turn in Inspect." + (scrolls if tall else "")
    )
    with st.container(key="tl_legend"):
        st.html(figures.status_legend(grid.statuses or figures.STATUS_ORDER))
    box = st.container(height=CHART_BOX, key="tl_chart_box") if tall else st.container()
    with box:
        event = st.plotly_chart(
            grid.figure, key="tl_heatmap", on_select="rerun", selection_mode="points"
        )
    clicked = widgets.clicked_turn(event)
    return turns.get(clicked) if clicked is not None else None


def _usage(sid: str, rows: list[TraceRow]) -> None:
    """Each partition's tokens per turn against the turn's budget."""
    st.plotly_chart(
        state.derived(
            "timeline_usage",
            sid,
            str(state.latest_change()),
            lambda: figures.session_usage(
                state.session_partitions(sid), budgets={r.turn: r.budget for r in rows}
            ),
        ),
        key="tl_usage",
    )


def _turns(sid: str) -> dict[int, str]:
    """Each turn of the session that recorded decisions or partitions, and its trace (the
    first stored of a turn), once per store version."""

    def make() -> dict[int, str]:
        turns: dict[int, str] = {}
        for r in state.session_statuses(sid) + state.session_partitions(sid):
            turns.setdefault(int(r["turn"]), str(r["trace_id"]))
        return turns

    return state.derived("timeline_turns", sid, str(state.latest_change()), make)


def render() -> None:
    st.title("Timeline")
    sid = _pick_session()
    if sid is None:
        return
    state.qp_set({"session": sid})
    turns = _turns(sid)
    rows = state.list_traces(TraceFilter(session_id=sid), sort="turn", limit=1000).rows
    calls = _session_cost(sid)
    ledger.timeline_marks(sid, turns)
    # the cost view only where the session made model calls
    view, box = widgets.section(VIEWS if calls is not None else VIEWS[:2], "tl_view")
    target = None
    with box:
        if view == "Packets":
            target = _packets(sid, turns)
        elif view == "Partition usage":
            _usage(sid, rows)
        elif calls is not None:
            _costs(sid, calls)
    _diagnostics(sid, len(rows))
    c1, c2 = st.columns([2, 1])  # "Open turn in Inspect" whole at 1024 px
    order = sorted(turns)
    turn = c1.selectbox(
        "Turn", order, key="tl_turn", format_func=lambda n: f"turn {n} · {turns[n]}"
    )
    if c2.button("Open turn in Inspect", key="tl_open", type="primary"):
        target = turns[turn]
    if target:
        state.switch("inspect", trace=target)


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
