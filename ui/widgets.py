"""Rendering pieces several pages share: the trace picker, metrics, decisions, the prompt.

Packet text is untrusted: it is drawn with ``st.code``, ``st.text`` and dataframes only.
``st.markdown``/``st.caption`` are used for our own fixed strings and numbers; an id, tag
or name inside them goes through ``views.code`` (or ``views.md`` inside a sentence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from ctxcore import figures
from ctxcore.models import BuildResult, Trace
from ctxcore.store.tracestore import TraceRow
from ui import state, views

STATUS_LIST = list(figures.STATUS_ORDER)
#: What a table shows for a missing value (a rank the builder never gave, no score): the
#: dataframe's own default is the word "None" (docs/design.md, "The app").
MISSING = "—"


def trace_label(row: TraceRow) -> str:
    """How a trace is named in every picker: what an engineer recognises first (session,
    turn, preset, verdict, findings), the id last; the picker searches all of it."""
    findings = f"{row.n_findings} finding{'' if row.n_findings == 1 else 's'}"
    if row.max_severity:
        findings += f" ({row.max_severity})"
    return (
        f"{row.session_id} · turn {row.turn} · {row.preset} · {row.verdict} · {findings}"
        f" · {row.trace_id}"
    )


def _label_of(trace_id: str, rows: dict[str, TraceRow]) -> str:
    row = rows.get(trace_id)
    if row is not None:
        return trace_label(row)
    t = state.get_trace(trace_id)  # a linked trace outside the recent list
    if t is None:
        return f"{trace_id} (not in the store)"
    return f"{t.session_id} · turn {t.turn} · {t.config.preset} · {t.trace_id}"


def trace_picker(
    prefix: str, label: str = "Trace", qp_name: str = "trace", default: str | None = None
) -> Trace | None:
    """Choose a trace: the one in the URL (``?trace=``) or one of the most recent ones,
    each shown as session · turn · preset · verdict · findings · id (type to search)."""
    wanted = state.qp_get(qp_name)
    rows = {r.trace_id: r for r in state.recent_trace_rows()}
    ids = list(rows)
    for extra in (default, wanted):
        if extra and extra not in ids:
            ids = [extra, *ids]
    if default and not wanted:
        state.ss_default(f"{prefix}_trace", default)
    if not ids:
        st.info(
            "The store holds no traces yet. Drop `.jsonl` trace files into the watched "
            "folder, or import one on the **Share / Import** page."
        )
        return None
    key = f"{prefix}_trace"
    if wanted and state.ss_get(f"{key}_from_url") != wanted:
        # A link (or another page) asked for this trace: it wins over the last choice.
        state.ss_set(key, wanted)
        state.ss_set(f"{key}_from_url", wanted)
    state.ss_default(key, ids[0])
    if state.ss_get(key) not in ids:
        state.ss_set(key, ids[0])
    trace_id: str = st.selectbox(
        label,
        ids,
        key=key,
        format_func=lambda i: _label_of(i, rows),
        help="session · turn · preset · verdict · findings · trace id; type to search",
    )
    t = state.get_trace(trace_id)
    if t is None:
        db = views.code(state.db_path())
        st.warning(f"No trace with id {views.code(trace_id)} in the store at {db}.")
    return t


def failing_files_banner() -> None:
    """A warning naming the watched files ingest could not read, and why (as text: paths
    and reasons come from the files). They are retried when they change."""
    failing = state.failing_files()
    if not failing:
        return
    st.warning(
        f"{len(failing)} file(s) in the watched folder could not be read; they are retried "
        "when they change, and every other file is ingested as usual."
    )
    st.text("\n".join(f"{f.file}: {f.reason}" for f in failing[:10]))
    if len(failing) > 10:
        st.caption(f"… and {len(failing) - 10} more (Share / Import lists every ingest error).")


def trace_caption(t: Trace) -> None:
    """Where a trace comes from, on one line; its ids and tags as code spans (inert)."""
    c = views.code
    st.caption(
        f"session {c(t.session_id)} · turn {t.turn} · {t.created_at:%Y-%m-%d %H:%M:%S %Z} · "
        f"trace {c(t.trace_id)} · "
        f"preset {t.config.preset} · builder {c(f'{t.builder.name} {t.builder.version}')}"
        + (f" · variant of {c(t.source_trace_id)}" if t.source_trace_id else "")
        + (f" · tags: {', '.join(c(tag) for tag in t.tags)}" if t.tags else "")
    )


def metrics_line(result: BuildResult) -> None:
    """The same numbers as ``metrics`` on one line, for narrow columns."""
    st.markdown(" · ".join(f"{k} **{v:,}**" for k, v in _summary(result).items()))


def metrics(result: BuildResult, before: BuildResult | None = None, per_row: int = 7) -> None:
    """Budget, used and counts; with ``before``, each shows its change."""
    now = _summary(result)
    old = _summary(before) if before is not None else None
    # narrow columns take fewer per row, so five-digit numbers with deltas stay readable
    items = list(now.items())
    cols = [c for i in range(0, len(items), per_row) for c in st.columns(per_row)]
    for col, (label, value) in zip(cols, items, strict=False):
        delta = None
        if old is not None and value is not None and old[label] is not None:
            d = value - old[label]
            delta = f"{d:+,}" if d else None
        col.metric(
            label, f"{value:,}" if value is not None else "–", delta=delta, delta_color="off"
        )


def _summary(r: BuildResult) -> dict[str, int]:
    counts = views.status_counts(r.decisions)
    return {
        "budget": r.totals.available,
        "used": r.totals.used,
        "kept": counts.get("kept", 0),
        "truncated": counts.get("truncated", 0),
        "summarized": counts.get("summarized", 0),
        "dropped": counts.get("dropped", 0),
        "filtered": counts.get("filtered", 0),
    }


#: Every column has a width in pixels: a column without one is sized in the browser by measuring
#: its cells, which on a 2,000-packet trace cost a sixth of a Playground knob move's time.
DECISION_CONFIG = {
    "rank": st.column_config.NumberColumn("rank", width=60),
    "packet_id": st.column_config.TextColumn("packet id", width=150),
    "kind": st.column_config.TextColumn("kind", width=80),
    "status": st.column_config.TextColumn("status", width=70),
    "reason": st.column_config.TextColumn("code", width=110),
    "reason_text": st.column_config.TextColumn("reason", width=400),
    "partition": st.column_config.TextColumn("partition", width=100),
    "tokens_before": st.column_config.NumberColumn("tokens_before", width=90),
    "tokens_after": st.column_config.NumberColumn("tokens_after", width=90),
    "relevance": st.column_config.NumberColumn("relevance", format="%.3f", width=80),
    "recency": st.column_config.NumberColumn("recency", format="%.3f", width=80),
    "score": st.column_config.NumberColumn("score", format="%.3f", width=80),
    "budget_left": st.column_config.NumberColumn("budget_left", width=90),
    "notes": st.column_config.TextColumn("notes", width=200),
}


def decisions_table(frame: pd.DataFrame, prefix: str) -> None:
    """The decisions, filterable by status, kind, partition and text; sortable by column."""
    c1, c2, c3, c4 = st.columns([2, 2, 2, 3])
    statuses = c1.multiselect("Status", STATUS_LIST, key=f"{prefix}_f_status")
    kinds = c2.multiselect("Kind", sorted(frame["kind"].unique()), key=f"{prefix}_f_kind")
    parts = c3.multiselect(
        "Partition", sorted(p for p in frame["partition"].unique() if p), key=f"{prefix}_f_part"
    )
    text = c4.text_input("Search id or reason", key=f"{prefix}_f_text")
    shown = views.filter_decisions(
        frame, statuses=statuses, kinds=kinds, partitions=parts, text=text
    )
    st.caption(f"{len(shown):,} of {len(frame):,} decisions · click a column header to sort")
    st.dataframe(
        shown,
        hide_index=True,
        column_config=DECISION_CONFIG,
        key=f"{prefix}_decisions",
        height=min(38 + 35 * len(shown), 560),
        placeholder=MISSING,
    )


FINDING_CONFIG = {
    "turn": st.column_config.NumberColumn("turn", width="small"),
    "severity": st.column_config.TextColumn("severity", width="small"),
    "message": st.column_config.TextColumn("message", width="large"),
    "trace_id": st.column_config.TextColumn("trace id", width="small"),
}


def open_in_inspect(trace_id: str, section: str | None = None) -> None:
    """Open a turn in Inspect, on ``section`` (one of its tabs) when given."""
    if section:
        state.ss_set("in_section", section)
    state.switch("inspect", trace=trace_id)


def selected(event: object, part: str) -> list[Any]:
    """The selected ``rows`` (a dataframe) or ``points`` (a chart) of a widget's event: an
    attribute-style state from the browser, a plain dict when set through session state."""
    sel = (
        event.get("selection") if isinstance(event, Mapping) else getattr(event, "selection", None)
    )
    got = sel.get(part) if isinstance(sel, Mapping) else getattr(sel, part, None)
    return list(got or [])


def clicked_turn(event: object) -> int | None:
    """The turn (the x of a chart whose x axis is turns) of the first clicked point."""
    points = selected(event, "points")
    x = points[0].get("x") if points and isinstance(points[0], Mapping) else None
    try:
        return int(str(x))
    except ValueError:
        return None


def findings_table(frame: pd.DataFrame, key: str, *, session: bool = True) -> None:
    """Findings (``views.findings_frame``), one row each; selecting a row opens its turn in
    Inspect on the Findings tab. ``session=False`` leaves out the session column (all rows
    are of one session)."""
    st.caption("Select a row (the box at its left) to open that turn in Inspect.")
    event = st.dataframe(
        frame,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key=key,
        column_config=FINDING_CONFIG,
        column_order=[c for c in frame.columns if session or c != "session"],
        height=min(38 + 35 * len(frame), 560),
        placeholder=MISSING,
    )
    rows = selected(event, "rows")
    if rows:
        open_in_inspect(str(frame.iloc[rows[0]]["trace_id"]), section="Findings")


def section(options: list[str], key: str) -> tuple[str, DeltaGenerator]:
    """Tabs that run lazily: only the open tab's content is computed and sent (a 2,000-packet
    prompt, JSON or scatter costs nothing while unseen). Returns (label, container)."""
    tabs = st.tabs(options, key=key, on_change="rerun")
    for label, tab in zip(options, tabs, strict=True):
        if tab.open:
            return label, tab
    return options[0], tabs[0]


def prompt_view(prompt: str, prefix: str) -> None:
    """The final prompt as text, with partition rulers and cut points marked."""
    segs = views.prompt_segments(prompt)
    cuts = sum(len(s.cuts) for s in segs)
    st.caption(
        f"{len(prompt):,} characters · {len(segs)} partition(s) · {cuts} cut point(s) "
        "· rulers `────────` mark partitions, `✂────────` marks a cut"
    )
    marked = st.toggle("Mark partitions and cuts", value=True, key=f"{prefix}_prompt_marks")
    st.code(
        views.marked_prompt(prompt) if marked else prompt,
        language=None,
        line_numbers=not marked,
        height=480,
    )
