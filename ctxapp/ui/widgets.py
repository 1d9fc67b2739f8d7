"""Rendering pieces several pages share: the trace picker, metrics, decisions, the prompt.

Packet text is untrusted: it is drawn with ``st.code``, ``st.text`` and dataframes only.
``st.markdown``/``st.caption`` are used for our own fixed strings and numbers; an id, tag
or name inside them goes through ``views.code`` (or ``views.md`` inside a sentence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from ctxapp.ui import state, views
from ctxcore import figures
from ctxcore.models import BuildResult, Trace
from ctxcore.store.tracestore import TraceRow

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
        db = views.code(state.db_shown())
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


def metrics_changes(result: BuildResult, before: BuildResult | None = None) -> None:
    """The numbers of ``metrics`` on one line that wraps, each with its change against
    ``before``: one element where the metric cards are fourteen (seven and their columns),
    for a view that every Playground knob move redraws (docs/design.md, "The app")."""
    now = _summary(result)
    old = _summary(before) if before is not None else None
    parts = []
    for label, value in now.items():
        d = value - old[label] if old is not None else 0
        parts.append(f"{label} **{value:,}**" + (f" ({d:+,})" if d else ""))
    st.markdown(" · ".join(parts))


def metrics_per_row(values: Sequence[int | None], per_row: int) -> int:
    """How many metric cards a row holds: ``per_row``, fewer when a number is long (an
    imported session's "used 2,108,385" was cut at 1024 px four a row): three for 9 or 10
    characters, two past that."""
    longest = max((len(f"{v:,}") for v in values if v is not None), default=0)
    if longest <= 8:
        return per_row
    return min(per_row, 3 if longest <= 10 else 2)


def metrics(result: BuildResult, before: BuildResult | None = None, per_row: int = 7) -> None:
    """Budget, used and counts; with ``before``, each shows its change."""
    now = _summary(result)
    old = _summary(before) if before is not None else None
    # narrow columns take fewer per row, so five-digit numbers with deltas stay readable
    items = list(now.items())
    per_row = metrics_per_row([v for _, v in items], per_row)
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


#: How wide a column of statuses and of reason codes is: "not_rendered" and
#: "TRUNCATED_BY_COMPRESS" whole, with the cell's padding (they were cut to "not_rende" and
#: "BELOW_MIN_REL").
STATUS_PX = 100
CODE_PX = 180
#: A packet id: most whole; a longer one, and a reason past its column, are read whole in the
#: selected row beneath the table (``readable_table``).
ID_PX = 200
REASON_PX = 400

BEFORE_COLUMN = "before"
#: Every column has a width in pixels: a column without one is sized in the browser by measuring
#: its cells, which on a 2,000-packet trace cost a sixth of a Playground knob move's time.
DECISION_CONFIG = {
    "rank": st.column_config.NumberColumn("rank", width=60),
    "packet_id": st.column_config.TextColumn("packet id", width=ID_PX),
    "kind": st.column_config.TextColumn("kind", width=90),
    "status": st.column_config.TextColumn("status", width=STATUS_PX),
    # the Playground's: the status a changed packet had in the build compared with
    BEFORE_COLUMN: st.column_config.TextColumn(
        "before",
        width=STATUS_PX,
        help="status in the build compared with, for the packets that changed (empty: unchanged)",
    ),
    "reason": st.column_config.TextColumn("code", width=CODE_PX),
    "reason_text": st.column_config.TextColumn("reason", width=REASON_PX),
    "partition": st.column_config.TextColumn("partition", width=100),
    "tokens_before": st.column_config.NumberColumn("tokens_before", width=90),
    "tokens_after": st.column_config.NumberColumn("tokens_after", width=90),
    "relevance": st.column_config.NumberColumn("relevance", format="%.3f", width=80),
    "recency": st.column_config.NumberColumn("recency", format="%.3f", width=80),
    "score": st.column_config.NumberColumn("score", format="%.3f", width=80),
    "budget_left": st.column_config.NumberColumn("budget_left", width=90),
    "notes": st.column_config.TextColumn("notes", width=200),
}


SORT_LABELS = {
    views.BUILDER_ORDER: "builder order",
    views.CHANGED_FIRST: "changed first",
    **{c: str(DECISION_CONFIG[c]["label"]) for c in views.DECISION_COLUMNS},
}
PAGE_SIZES = [50, views.PAGE_ROWS, 250, 1000]


def _rerun_only(keys: Sequence[str]) -> None:
    """A callback that reruns only the fragments ``keys`` (none given: the page, as usual)."""
    if keys:
        st.rerun(list(keys))


def decision_controls(
    frame: pd.DataFrame, prefix: str, *, changed: bool = False, rerun: Sequence[str] = ()
) -> None:
    """The filters (status, kind, partition, text), the sort over all rows, the page size and
    the page of a decisions table; ``decision_page`` reads them back. ``changed`` offers (and
    starts on) "changed first". A control reruns the fragments ``rerun`` when given (the
    Playground's table), else the page."""
    moved: dict[str, Any] = {"on_change": _rerun_only, "args": (tuple(rerun),)}
    # one wrapping row, not two rows of columns: nine elements where columns made eighteen
    box = st.container(horizontal=True, gap="small")
    box.multiselect("Status", STATUS_LIST, key=f"{prefix}_f_status", width=170, **moved)
    box.multiselect(
        "Kind", sorted(frame["kind"].unique()), key=f"{prefix}_f_kind", width=170, **moved
    )
    box.multiselect(
        "Partition",
        sorted(p for p in frame["partition"].unique() if p),
        key=f"{prefix}_f_part",
        width=170,
        **moved,
    )
    box.text_input("Search id or reason", key=f"{prefix}_f_text", width=220, **moved)
    sorts = _sorts(changed)
    box.selectbox(
        "Sort by",
        sorts,
        index=sorts.index(_default_sort(changed)),
        key=f"{prefix}_sort",
        format_func=SORT_LABELS.__getitem__,
        help="sorts every matching decision; a column header sorts the rows shown",
        width=170,
        **moved,
    )
    box.toggle("Descending", key=f"{prefix}_desc", **moved)
    box.selectbox(
        "Rows per page", PAGE_SIZES, index=1, key=f"{prefix}_page_size", width=120, **moved
    )
    box.number_input("Page", min_value=1, step=1, key=f"{prefix}_page", width=130, **moved)


def _sorts(changed: bool) -> list[str]:
    return [s for s in views.DECISION_SORTS if changed or s != views.CHANGED_FIRST]


def _default_sort(changed: bool) -> str:
    return views.CHANGED_FIRST if changed else views.BUILDER_ORDER


@dataclass(frozen=True)
class DecisionPage:
    """The rows a decisions table shows and the line above them (``decision_page``)."""

    rows: pd.DataFrame
    caption: str


def decision_view_key(prefix: str) -> str:
    """What the controls of ``prefix`` ask for, as one string (a cache key)."""
    names = ("f_status", "f_kind", "f_part", "f_text", "sort", "desc", "page_size", "page")
    return repr([state.ss_get(f"{prefix}_{n}") for n in names])


def decision_page(
    frame: pd.DataFrame, prefix: str, changed: Mapping[str, str] | None = None
) -> DecisionPage:
    """The page of decisions the controls of ``prefix`` ask for, with a line saying which.

    ``changed`` (the Playground) maps each packet that changed against the build compared
    with to its status there, in the order the flipped table lists them: "changed first"
    puts them first, and a ``before`` column shows that status.
    """
    by = str(state.ss_get(f"{prefix}_sort") or _default_sort(changed is not None))
    if by not in _sorts(changed is not None):
        by = _default_sort(changed is not None)
    desc = bool(state.ss_get(f"{prefix}_desc", False))
    size = int(state.ss_get(f"{prefix}_page_size") or views.PAGE_ROWS)
    shown = views.filter_decisions(
        frame,
        statuses=state.ss_get(f"{prefix}_f_status") or (),
        kinds=state.ss_get(f"{prefix}_f_kind") or (),
        partitions=state.ss_get(f"{prefix}_f_part") or (),
        text=str(state.ss_get(f"{prefix}_f_text") or ""),
    )
    shown = views.sort_decisions(shown, by, descending=desc, first=list(changed or ()))
    pages = views.page_count(len(shown), size)
    # a page past the end (a narrowing filter, a move): the last one
    page = min(max(int(state.ss_get(f"{prefix}_page") or 1), 1), pages)
    rows = views.page_of(shown, page, size)
    first = (page - 1) * size
    where = (
        f" · page {page:,} of {pages:,}: {first + 1:,}–{first + len(rows):,}" if pages > 1 else ""
    )
    n_changed = f" · {len(changed):,} changed" if changed else ""
    if changed is not None:
        rows = rows.copy()
        rows.insert(
            rows.columns.get_loc("status") + 1,
            BEFORE_COLUMN,
            [changed.get(p, "") for p in rows["packet_id"]],
        )
    return DecisionPage(
        rows,
        f"{len(shown):,} of {len(frame):,} decisions{where}{n_changed} · sorted by "
        f"{SORT_LABELS[by]}{' (descending)' if desc else ''}",
    )


#: The why first: which packet, what happened to it and the reason sit at the left, where a
#: 1024-px screen shows them (the reason was off-screen there, right of rank, kind and code).
DECISION_ORDER = [
    "packet_id",
    "status",
    "reason_text",
    BEFORE_COLUMN,
    "reason",
    "kind",
    "rank",
    "partition",
    "tokens_before",
    "tokens_after",
    "relevance",
    "recency",
    "score",
    "budget_left",
    "notes",
]
#: what the selected decision shows whole beneath the table
DECISION_WHOLE = ["packet_id", "status", BEFORE_COLUMN, "reason", "reason_text", "notes"]


def show_decision_page(page: DecisionPage, prefix: str) -> None:
    st.caption(page.caption)
    readable_table(
        page.rows,
        f"{prefix}_decisions",
        column_config=DECISION_CONFIG,
        column_order=[c for c in DECISION_ORDER if c in page.rows.columns],
        whole=[c for c in DECISION_WHOLE if c in page.rows.columns],
        height=min(38 + 35 * len(page.rows), 560),
    )


def _label(column: str, config: Mapping[str, Any]) -> str:
    cfg = config.get(column)
    label = cfg.get("label") if isinstance(cfg, Mapping) else None
    return str(label or column)


def readable_table(
    frame: pd.DataFrame,
    key: str,
    *,
    whole: Sequence[str],
    column_config: Mapping[str, Any] | None = None,
    column_order: Sequence[str] | None = None,
    height: int | Literal["auto"] = "auto",
) -> None:
    """A table whose long cells (a reason, an id) can always be read whole: the row selected
    (the box at its left) is shown beneath it, the ``whole`` columns one a line, as text. A
    cell is one line in the table; wrapping in the grid broke words ("summari/zed") and cut
    after three lines with no sign of it (docs/design.md, "The app").

    The table sits in a container keyed ``tbl_<key>``: the browser's layout checks name it
    by that (``tests/browser``, ``table_cuts``)."""
    config = dict(column_config or {})
    with st.container(key=f"tbl_{key}"):
        event = st.dataframe(
            frame,
            hide_index=True,
            key=key,
            column_config=config,
            column_order=list(column_order) if column_order is not None else None,
            height=height,
            on_select="rerun",
            selection_mode="single-row",
            placeholder=MISSING,
        )
        rows = selected(event, "rows")
        if not rows or not 0 <= int(rows[0]) < len(frame):
            st.caption("Select a row (the box at its left) to read it whole here.")
            return
        row = frame.iloc[int(rows[0])]
        lines = []
        for c in whole:
            v = row[c]
            shown = MISSING if v is None or v is pd.NA or pd.isna(v) is True or v == "" else v
            lines.append(f"{_label(c, config)}: {shown}")
        st.code("\n".join(lines), language=None, wrap_lines=True)


def decisions_table(
    frame: pd.DataFrame, prefix: str, changed: Mapping[str, str] | None = None
) -> None:
    """The decisions, filterable by status, kind, partition and text, sorted over all rows and
    sent a page at a time (docs/design.md, "The app"): ``decision_controls``, then the page
    they ask for (``decision_page``, ``show_decision_page``)."""
    decision_controls(frame, prefix, changed=changed is not None)
    show_decision_page(decision_page(frame, prefix, changed), prefix)


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
    st.caption(
        "Select a row (the box at its left) to open that turn in Inspect, where each finding "
        "is shown whole."
    )
    with st.container(key=f"tbl_{key}"):
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


def score_chart(t: Trace, prefix: str, cache: str | None = None) -> None:
    """The score scatter with its axes switch: values, or ranks, which give every packet a
    place of its own; a build whose packets pile up on shared spots opens on ranks
    (``figures.score_axes``). ``cache`` names the build for the figure cache (Inspect: the
    trace; the Playground draws its re-run fresh)."""
    best = figures.score_axes(t)
    axes = st.radio(
        "Axes",
        figures.AXES,
        index=figures.AXES.index(best),
        horizontal=True,
        # a key per build, so another build opens on the axes that suit it
        key=f"{prefix}_axes_{t.trace_id}",
        help="values: relevance and recency as the builder computed them (packets on the "
        "same spot spread a little). ranks: each packet's rank by relevance and by recency, "
        "ties ordered by score, so none hides under another; the hover gives the values.",
    )
    if cache is None:
        fig = figures.score_scatter(t, axes)
    else:
        fig = state.derived("score_scatter", cache, axes, lambda: figures.score_scatter(t, axes))
    st.plotly_chart(fig, key=f"{prefix}_scatter")
