"""Traces: every stored build, filtered and paged by the store; new files show up live."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import get_args

import pandas as pd
import streamlit as st

from ctxapp.ui import costs, live, state, views, widgets
from ctxcore.settings import SortKey
from ctxcore.store import TraceFilter
from ctxcore.store.tracestore import TraceRow

ANY = "(any)"
SORTS: list[SortKey] = list(get_args(SortKey))
#: filter widgets mirrored in the URL: query name -> session key
_QP = {
    "session": "tr_session",
    "preset": "tr_preset",
    "verdict": "tr_verdict",
    "search": "tr_search",
    "finding": "tr_finding",
}


_URL_KEYS = (*_QP, "tags", "lost", "warnings", "view")
#: the two views of the matching traces (``?view=findings`` opens the second)
VIEWS = ["Traces", "Findings"]


def _url_sig() -> tuple[tuple[str, str], ...]:
    return tuple((k, state.qp_get(k) or "") for k in _URL_KEYS)


def _init_from_url() -> None:
    """Apply filters from the URL when it changed under us (a link, another page)."""
    sig = _url_sig()
    if state.ss_get("tr_url_sig") == sig:
        return
    state.ss_set("tr_url_sig", sig)
    if not any(v for _, v in sig) and state.ss_has("tr_session"):
        return  # a bare URL (sidebar navigation) keeps the filters of this session
    for name, key in _QP.items():
        state.ss_set(key, state.qp_get(name) or ("" if name == "search" else ANY))
    state.ss_set("tr_tags", [t for t in (state.qp_get("tags") or "").split(",") if t])
    state.ss_set("tr_lost", state.qp_get("lost") == "1")
    state.ss_set(
        "tr_warnings",
        {"1": "with warnings", "0": "without"}.get(state.qp_get("warnings") or "", ANY),
    )
    state.ss_set("tr_view", VIEWS[1] if state.qp_get("view") == "findings" else VIEWS[0])


def _choice(
    label: str, options: list[str], key: str, col: st.delta_generator.DeltaGenerator
) -> str | None:
    opts = [ANY, *options]
    if state.ss_get(key) not in opts:
        state.ss_set(key, ANY)
    v = col.selectbox(label, opts, key=key)
    return None if v == ANY else v


def _filters() -> TraceFilter:
    facets = state.facets()
    c1, c2, c3, c4 = st.columns(4)
    session = _choice("Session", facets.get("session_id", []), "tr_session", c1)
    preset = _choice("Preset", facets.get("preset", []), "tr_preset", c2)
    verdict = _choice("Verdict", facets.get("verdict", []), "tr_verdict", c3)
    tag_opts = facets.get("tags", [])
    if any(t not in tag_opts for t in state.ss_get("tr_tags", [])):
        state.ss_set("tr_tags", [t for t in state.ss_get("tr_tags", []) if t in tag_opts])
    tags = c4.multiselect("Tags (all of)", tag_opts, key="tr_tags")
    c5, c6, c7, c8 = st.columns(4)
    search = c5.text_input(
        "Search packet content", key="tr_search", placeholder="e.g. AssertionError"
    )
    finding = _choice("Finding", facets.get("finding", []), "tr_finding", c6)
    warn = c7.selectbox("Warnings", [ANY, "with warnings", "without"], key="tr_warnings")
    dates = c8.date_input("Created between", value=[], key="tr_dates", format="YYYY-MM-DD")
    lost = st.checkbox("Only builds that dropped or summarized a must-keep item", key="tr_lost")
    since = until = None
    if isinstance(dates, (list, tuple)) and len(dates) >= 1:
        since = datetime.combine(dates[0], time.min, tzinfo=UTC)
        if len(dates) == 2:
            until = datetime.combine(dates[1], time.max, tzinfo=UTC)
    state.qp_set(
        {
            "session": session,
            "preset": preset,
            "verdict": verdict,
            "search": search.strip() or None,
            "finding": finding,
            "tags": ",".join(tags) or None,
            "lost": "1" if lost else None,
            "warnings": {"with warnings": "1", "without": "0"}.get(warn),
            "view": "findings" if state.ss_get("tr_view") == VIEWS[1] else None,
        }
    )
    state.ss_set("tr_url_sig", _url_sig())  # our own write is not a new link
    return TraceFilter(
        session_id=session,
        preset=preset,
        tags=tuple(tags),
        verdict=verdict,
        since=since,
        until=until,
        has_warnings={"with warnings": True, "without": False}.get(warn),
        lost_must_keep=True if lost else None,
        search=search.strip() or None,
        finding=finding,
    )


def _frame(rows: list[TraceRow]) -> pd.DataFrame:
    # What an engineer scans first sits on the left: which turn, how it went, what it cost,
    # what was lost. Costs come from the rows' usage columns, never from loading the traces.
    table = state.prices()
    spend = costs.session_spend(state.session_usage([r.session_id for r in rows]), table)
    return pd.DataFrame(
        {
            "session": [r.session_id for r in rows],
            "turn": [r.turn for r in rows],
            "verdict": [r.verdict for r in rows],
            "$": [costs.row_usd(r, table) for r in rows],
            "session $": [
                spend[r.session_id].total if r.session_id in spend else None for r in rows
            ],
            "use": [round(100 * r.used / r.budget) if r.budget else None for r in rows],
            "used": [r.used for r in rows],
            "budget": [r.budget for r in rows],
            "kept": [r.n_kept + r.n_truncated for r in rows],
            "summarized": [r.n_summarized for r in rows],
            "dropped": [r.n_dropped + r.n_filtered for r in rows],
            "lost must-keep": [r.lost_must_keep for r in rows],
            "findings": [r.n_findings for r in rows],
            "worst": [r.max_severity or "" for r in rows],
            "warnings": [r.n_warnings for r in rows],
            "preset": [r.preset for r in rows],
            "created": [r.created_at for r in rows],
            "tags": [", ".join(r.tags) for r in rows],
            "trace_id": [r.trace_id for r in rows],
        }
    )


@st.fragment(run_every="1s")
def _live() -> None:
    # New traces (watcher, another tab saving a variant) bump latest_change(): rerun the
    # whole page so the list, facets and counts all move together. Once a second: a call
    # captured live is listed within 2 s of its end (the watcher takes under one).
    with state.guard():  # a fragment's rerun runs outside app.py's error handling
        if state.held() is not None:
            st.caption(f"Read-only copy of {views.code(state.db_path())} · not watching")
            return
        change = state.latest_change()
        seen = state.ss_get("tr_seen_change")
        if seen is None:
            state.ss_set("tr_seen_change", change)
        elif change != seen:
            state.ss_set("tr_seen_change", change)
            st.rerun()
        db = views.code(state.db_shown())
        if state.team_store():
            st.caption(f"Live · team store {db} (its writers ingest; this app reads)")
        else:
            st.caption(f"Live · watching {views.code(state.traces_dir())} · store {db}")
        live.render()


#: findings a page of the findings view shows
FINDINGS_PAGE = 100


def _findings(flt: TraceFilter) -> None:
    """The findings of the matching traces, newest first, a page at a time; each row opens
    its turn in Inspect."""
    page_no = int(state.ss_get("tr_f_page", 1) or 1)
    size = FINDINGS_PAGE
    result = state.list_findings(flt, limit=size, offset=(page_no - 1) * size)
    pages = max(1, -(-result.total // size))
    if page_no > pages:
        state.ss_set("tr_f_page", 1)
        result = state.list_findings(flt, limit=size, offset=0)
    c1, c2 = st.columns([4, 1])
    c2.number_input(f"Page (of {pages:,})", min_value=1, max_value=pages, step=1, key="tr_f_page")
    first, last = result.offset + 1, result.offset + len(result.rows)
    rest = result.total - last
    c1.markdown(
        f"**{result.total:,}** findings in the matching traces, newest first"
        + (f" · showing {first:,}–{last:,}" if result.rows else "")
        + (f" · {rest:,} more on the next pages" if rest > 0 else "")
    )
    if not result.rows:
        st.info("No finding in the traces that match these filters.")
        return
    frame = views.findings_frame(result.rows)
    widgets.findings_table(frame, key="tr_findings", session=flt.session_id is None)


def _session_cost(session_id: str) -> None:
    """One line: what the session cost by its recorded usage, and how much of it is known."""
    spend = costs.session_spend(state.session_usage([session_id]), state.prices())
    found = spend.get(session_id)
    if found is not None:
        st.text(f"Session cost (recorded usage): {found.label()} over {found.calls:,} calls")


def render() -> None:
    st.title("Traces")
    _live()
    widgets.failing_files_banner()
    _init_from_url()
    flt = _filters()
    view, box = widgets.section(VIEWS, "tr_view")
    with box:
        if view == VIEWS[1]:
            _findings(flt)
        else:
            _traces(flt)


#: the traces table's columns (the costs are the recorded usage's, from the store's columns)
TABLE_CONFIG = {
    "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm:ss"),
    "use": st.column_config.ProgressColumn("use", format="%d%%", min_value=0, max_value=100),
    "trace_id": st.column_config.TextColumn("trace id"),
    "$": st.column_config.NumberColumn(
        "$",
        format="$%.4f",
        help="what the call cost by the usage the provider recorded (— unknown: no "
        "usage recorded, or no price for its model)",
    ),
    "session $": st.column_config.NumberColumn(
        "session $",
        format="$%.4f",
        help="the session's calls whose cost is known, summed (— none is known)",
    ),
    # 3,289 like every other count in the app, not 3289
    "used": st.column_config.NumberColumn("used", format="localized"),
    "budget": st.column_config.NumberColumn("budget", format="localized"),
}


def _traces(flt: TraceFilter) -> None:
    c1, c2, c3, c4 = st.columns([1.8, 1.5, 1, 1])
    sort = c1.selectbox("Sort by", SORTS, key="tr_sort")
    # a short label: "Newest / largest first" was cut to "Newest / lar…" at 1024 px
    desc = c2.toggle("Descending", value=True, key="tr_desc", help="newest / largest first")
    size = c3.selectbox("Rows per page", [25, 50, 100, 200], index=1, key="tr_page_size")
    # One query per view: the page asked for (its total sizes the pager); only a page
    # number past the end (after a narrowing filter) costs a second one.
    page_no = int(state.ss_get("tr_page", 1) or 1)
    result = state.list_traces(
        flt, sort=sort, descending=desc, limit=size, offset=(page_no - 1) * size
    )
    pages = max(1, -(-result.total // size))
    if page_no > pages:
        page_no = 1
        state.ss_set("tr_page", 1)
        result = state.list_traces(flt, sort=sort, descending=desc, limit=size, offset=0)
    c4.number_input(f"Page (of {pages:,})", min_value=1, max_value=pages, step=1, key="tr_page")
    st.markdown(
        f"**{result.total:,}** matching traces · showing "
        f"{result.offset + 1 if result.rows else 0:,}–{result.offset + len(result.rows):,}"
    )
    if not result.rows:
        st.info("No trace matches these filters.")
        return
    if flt.session_id is not None:
        _session_cost(flt.session_id)
    frame = _frame(result.rows)
    table = st.container(key="tbl_tr_table")
    event = table.dataframe(
        frame,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key="tr_table",
        column_config=TABLE_CONFIG,
        placeholder=widgets.MISSING,
    )
    chosen = None
    rows = getattr(getattr(event, "selection", None), "rows", None) or []
    if rows:
        chosen = frame.iloc[rows[0]]["trace_id"]
    c0, c1, c2 = st.columns([1.3, 3, 1], vertical_alignment="bottom")
    label = {r.trace_id: widgets.trace_label(r) for r in result.rows}
    # Our own search, not the picker's: its fuzzy match listed turns 12, 14, 11 and 7 for
    # "turn 15" (in-order letters anywhere in the label).
    query = c0.text_input(
        "Find on this page",
        key="tr_open_find",
        placeholder="turn 15, an id, a preset",
        help="“turn 15” finds turn 15 only; a bare number finds that turn first, then ids "
        "and counts holding it; other words must all appear (any case) in the session, "
        "preset, verdict, findings or trace id.",
    )
    ids = views.find_traces([(r.trace_id, r.turn, label[r.trace_id]) for r in result.rows], query)
    if ids:
        if state.ss_get("tr_open_id") not in ids:
            state.ss_set("tr_open_id", ids[0])
        pick = c1.selectbox(
            "Open trace",
            ids,
            key="tr_open_id",
            format_func=label.__getitem__,
            filter_mode=None,
            help="session · turn · preset · verdict · findings · trace id (the box beside "
            "it narrows this list)",
        )
        if c2.button("Open in Inspect", key="tr_open", type="primary"):
            chosen = pick
    else:
        c1.caption(f"No trace on this page matches {views.code(query.strip())}.")
    if chosen:
        state.switch("inspect", trace=str(chosen))


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
