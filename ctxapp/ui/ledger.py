"""The compaction ledger in the app (docs/design.md, "Compaction ledger"): the Timeline's
marks of a session's recorded compactions and Inspect's ledger of the compaction a call
took effect at (or the one right after it)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ctxapp.ui import state, widgets
from ctxcore.costing import CallSummary
from ctxcore.figures.common import LAYOUT, esc
from ctxcore.ledger import Entry, Item, ledger
from ctxcore.models import Trace
from ctxcore.store import TraceFilter

#: the compaction marks' colour (the status palette's "summarized" family, darker)
MARK_COLOR = "#6a3d9a"
#: lost items a mark's hover lists (the rest counted)
HOVER_ITEMS = 12


def _compacted(call: CallSummary) -> bool:
    """Whether a call's cost summary shows a compaction: the one a session log marks its
    context as following, or a compaction summary among the messages it sent."""
    p = call.prompt
    return p.compaction is not None or any(
        b.packet is not None and b.packet.startswith("compaction:") for b in p.blocks
    )


def ledger_trace_ids(session_id: str) -> list[str]:
    """The traces a stored session's ledger reads, in turn order (its replay variants
    aside), found from its cost summaries: none when no call shows a compaction; else from
    the call before the first one to the last call (a lost item is searched for in every
    call after its compaction). No call before the first compaction carries a mark or a
    compaction summary, so the ledger of these traces is the whole session's."""
    rows = state.list_traces(
        TraceFilter(session_id=session_id), sort="turn", descending=False, limit=500
    ).rows
    summaries = {c.prompt.trace_id: c for c in state.session_summaries(session_id)}
    ids = [r.trace_id for r in rows if "replay" not in r.tags]
    for k, trace_id in enumerate(ids):
        call = summaries.get(trace_id)
        if call is None or _compacted(call):  # no summary: its trace is read
            return ids[max(k - 1, 0) :]
    return []


def session_ledger(session_id: str) -> list[Entry]:
    """The ledger of a stored session's recorded compactions (its replay variants aside),
    made once per session and store version from the traces it needs alone
    (``ledger_trace_ids``: none for a session without a compaction)."""

    def make() -> list[Entry]:
        ids = ledger_trace_ids(session_id)
        if not ids:
            return []
        stored = state.store().traces_json(ids)
        return ledger(Trace.model_validate_json(raw) for _, raw in stored)

    return state.derived("ledger", session_id, str(state.latest_change()), make)


def _needed(i: Item) -> str:
    if i.needed_turn is None:
        return "not needed again"
    return f"next needed at turn {i.needed_turn} (its {i.needed_in})"


def _hover(e: Entry) -> str:
    """A mark's hover: the compaction, its counts and the lost items, each line escaped."""
    lines = [f"turn {e.turn}: {e.label}", f"{len(e.kept)} item(s) kept, {len(e.lost)} lost"]
    lines += [f"lost {i.kind}: {i.text[:80]} · {_needed(i)}" for i in e.lost[:HOVER_ITEMS]]
    if len(e.lost) > HOVER_ITEMS:
        lines.append(f"… and {len(e.lost) - HOVER_ITEMS} more (Inspect lists them all)")
    return "<br>".join(esc(x, 200) for x in lines)


def marks_figure(entries: list[Entry], turns: list[int]) -> go.Figure:
    """A strip over the session's turns with a mark at each compaction (the first call
    after it), its hover what it kept and lost."""
    lo, hi = (min(turns), max(turns)) if turns else (0, 0)
    fig = go.Figure(
        go.Scatter(
            name="compaction",
            x=[e.turn for e in entries],
            y=[0] * len(entries),
            mode="markers",
            marker={"symbol": "diamond", "size": 14, "color": MARK_COLOR},
            hovertext=[_hover(e) for e in entries],
            hoverinfo="text",
        )
    )
    fig.update_layout(
        title={"text": "Compactions (◆ the first call after one: hover for what it lost)"},
        xaxis={
            "title": "turn",
            "range": [lo - 0.5, hi + 0.5],
            "dtick": 1 if hi - lo < 30 else None,
        },
        yaxis={"visible": False, "range": [-1, 1]},
        height=170,
        margin={"t": 40, "b": 40, "l": 20, "r": 20},
        showlegend=False,
        hovermode="closest",
        **LAYOUT,
    )
    return fig


def timeline_marks(session_id: str, turns: dict[int, str]) -> None:
    """The Timeline's compaction marks (nothing for a session with none); a click on one
    opens its turn in Inspect, where the ledger is listed."""
    entries = session_ledger(session_id)
    if not entries:
        return
    lost = sum(len(e.lost) for e in entries)
    st.caption(
        f"{len(entries)} compaction(s) recorded in this session, {lost} item(s) lost in all "
        "(paths, identifiers, error lines, the user's constraints). Click a ◆ to open that "
        "turn in Inspect."
    )
    event = st.plotly_chart(
        marks_figure(entries, sorted(turns)),
        key="tl_compactions",
        on_select="rerun",
        selection_mode="points",
    )
    clicked = widgets.clicked_turn(event)
    if clicked is not None and clicked in turns:
        state.switch("inspect", trace=turns[clicked])


def _next(i: Item) -> str | None:
    """Where a lost item was next needed, as Inspect's table says it (None: never)."""
    return None if i.needed_turn is None else f"turn {i.needed_turn} ({i.needed_in})"


def items_frame(e: Entry) -> pd.DataFrame:
    """One row per item: kind, text, kept or lost, and where a lost one was next needed."""
    return pd.DataFrame(
        {
            "kind": [i.kind for i in e.items],
            "item": [i.text for i in e.items],
            "fate": ["kept" if i.kept else "lost" for i in e.items],
            "next needed": [_next(i) for i in e.items],
        }
    )


#: ~500 px with the row's box: whole in Inspect's column at 1024 px (an item is read whole
#: by selecting its row)
ITEMS_CONFIG = {
    "kind": st.column_config.TextColumn("kind", width=80),
    "item": st.column_config.TextColumn("item", width=220),
    "fate": st.column_config.TextColumn("kept/lost", width=65),
    "next needed": st.column_config.TextColumn(
        "next needed", width=115, help="the turn whose reply or prompt next held a lost item"
    ),
}


def _entry_panel(e: Entry, t: Trace, k: int) -> None:
    """One compaction's ledger on Inspect."""
    where = "took effect at this call" if e.turn == t.turn else "came right after this call"
    before = "no call" if e.before_turn is None else f"turn {e.before_turn}"
    with st.container(border=True, key=f"in_ledger_{k}"):
        st.markdown("**Compaction ledger**")
        st.text(
            f"{e.label}: between {before} and turn {e.turn} (it {where}). "
            f"{len(e.kept)} item(s) kept, {len(e.lost)} lost."
        )
        if not e.items:
            st.caption(
                "What came before it names no path, identifier, error line or constraint: "
                "nothing to keep or lose."
            )
            return
        widgets.readable_table(
            items_frame(e),
            f"in_ledger_items_{k}",
            column_config=ITEMS_CONFIG,
            whole=["kind", "item", "fate", "next needed"],
        )


def inspect_panel(t: Trace) -> None:
    """Inspect's ledger of each compaction that took effect at ``t`` or right after it."""
    entries = [e for e in session_ledger(t.session_id) if t.turn in (e.turn, e.before_turn)]
    for k, e in enumerate(entries):
        _entry_panel(e, t, k)


__all__ = [
    "inspect_panel",
    "items_frame",
    "ledger_trace_ids",
    "marks_figure",
    "session_ledger",
    "timeline_marks",
]
