"""Where a build's tokens went: the window bar, the partitions' budgets and the tokenizers'
counts per partition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from ctxcore.figures.common import (
    FREE_COLOR,
    LAYOUT,
    NO_RESULT,
    OVER_COLOR,
    RESERVE_COLOR,
    SAFETY_COLOR,
    empty_figure,
    esc,
    legend_rows,
    line_count,
    partition_color,
    pct,
    top_title,
    unchecked,
    wrap_lines,
    wrap_words,
)
from ctxcore.models import PartitionUsage, Trace

# --------------------------------------------------------------------------- window


def window_segments(trace: Trace) -> list[tuple[str, int, str]]:
    """The whole window as (label, tokens, colour), in drawing order.

    Partitions' own tokens, then whatever the builder used outside any partition
    (headers, separators), the free space of the budget, the safety margin and the
    output reserve. When the build used more than it had, an ``over budget`` segment
    shows by how much (and free space is 0).
    """
    if trace.result is None:
        return []
    res = trace.result
    t = res.totals
    segs: list[tuple[str, int, str]] = []
    part_sum = 0
    for i, p in enumerate(res.partitions):
        if p.used > 0:
            segs.append((p.name, p.used, partition_color(p.name, i)))
            part_sum += p.used
    unattributed = t.used - part_sum
    if unattributed > 0:
        segs.append(("headers & separators", unattributed, "#c7c7c7"))
    free = t.available - t.used
    if free > 0:
        segs.append(("free", free, FREE_COLOR))
    elif free < 0:
        segs.append(("over budget", -free, OVER_COLOR))
    if t.safety_margin > 0:
        segs.append(("safety margin", t.safety_margin, SAFETY_COLOR))
    if t.output_reserve > 0:
        segs.append(("output reserve", t.output_reserve, RESERVE_COLOR))
    return segs


def window_extent(trace: Trace) -> int:
    """The x range ``window_bar`` needs for this trace (two bars share the larger one)."""
    if trace.result is None:
        return 0
    t = trace.result.totals
    return max(t.window, t.used + t.output_reserve)


def window_bar(
    trace: Trace, x_max: int | None = None, note: str | None = None, legend: bool = True
) -> go.Figure:
    """One horizontal bar for the whole context window: where every token went.

    ``x_max`` puts two bars on one scale (Compare); ``note`` is a line under the subtitle
    (the Playground names the packets that flipped); ``legend=False`` for a half-width
    column, where a wrapped legend would cover the bar (segments keep labels and hover)."""
    title = "Context window"
    if trace.result is None:
        return empty_figure(title, NO_RESULT)
    t = trace.result.totals
    data = [
        {
            "type": "bar",
            "x": [n],
            "y": ["window"],
            "orientation": "h",
            "name": esc(label),
            "marker": {"color": color, "line": {"color": "#ffffff", "width": 1}},
            "hovertext": [f"{esc(label)}: {n:,} tokens ({pct(n, t.window)} of the window)"],
            "hoverinfo": "text",
            "text": [esc(label) if t.window and n / t.window > 0.08 else ""],
            "textposition": "inside",
            "insidetextanchor": "middle",
        }
        for label, n, color in window_segments(trace)
    ]
    subtitle = wrap_lines(
        [
            f"window {t.window:,}",
            f"available {t.available:,}",
            f"used {t.used:,} ({pct(t.used, t.available)})",
            f"tokenizer {esc(t.tokenizer)}",
        ]
    )
    if note:
        subtitle += "<br>" + wrap_words(note)
    lines = line_count(subtitle)
    # a bar with its legend is never narrower than ~440 px (Compare's half-width bars have
    # none), where three entries fit a row
    rows = legend_rows(len(data), per_row=3) if legend else 0
    layout = {
        "barmode": "stack",
        "title": top_title(title, subtitle),
        # the bar keeps its 70 px whatever the title's and legend's lines take
        "height": 150 + 17 * lines + 20 * rows,
        "margin": {"l": 10, "r": 10, "t": 50 + 17 * lines, "b": 30 + 20 * rows},
        "yaxis": {"visible": False},
        "xaxis": {"range": [0, x_max or window_extent(trace)], "ticksuffix": " tok"},
        # under the tick labels (32 px under the 70 px bar), its top edge anchored: a legend
        # anchored by its bottom grew upwards over the tick labels
        "legend": {"orientation": "h", "y": -0.45, "yanchor": "top", "traceorder": "normal"},
        "showlegend": legend,
        **LAYOUT,
    }
    return unchecked(data, layout)


# --------------------------------------------------------------------------- partitions


def _budget_outlines(names: Sequence[str], budgets: Sequence[int | None]) -> go.Bar:
    """Each partition's budget as an empty outlined bar (0 where it has none)."""
    return go.Bar(
        y=names,
        x=[b if b is not None else 0 for b in budgets],
        orientation="h",
        name="budget",
        marker={"color": "rgba(0,0,0,0)", "line": {"color": "#555", "width": 1.5}},
        hovertext=[
            f"{n}: budget {b:,} tokens" if b is not None else f"{n}: no budget of its own"
            for n, b in zip(names, budgets, strict=True)
        ],
        hoverinfo="text",
    )


def _used_bars(names: Sequence[str], parts: Sequence[PartitionUsage]) -> go.Bar:
    """Each partition's tokens used, in its colour (the over-budget colour past its cap),
    the count beside the bar."""
    used = [p.used for p in parts]
    colors = [
        OVER_COLOR if p.budget is not None and p.used > p.budget else partition_color(p.name, i)
        for i, p in enumerate(parts)
    ]
    return go.Bar(
        y=names,
        x=used,
        orientation="h",
        name="used",
        marker={"color": colors},
        hovertext=[
            f"{n}: used {u:,} tokens in {p.items} item(s)"
            + (f" of a {p.budget:,} budget ({pct(u, p.budget)})" if p.budget else "")
            for n, u, p in zip(names, used, parts, strict=True)
        ],
        hoverinfo="text",
        text=[f"{u:,}" for u in used],
        textposition="outside",
        cliponaxis=False,
    )


def _caps_note(caps: Sequence[int], avail: int) -> str:
    """What the partitions' caps add up to against the tokens available."""
    if not caps:
        return "this preset sets no budget per partition: used only"
    if avail > 0 and sum(caps) > avail:
        return (
            f"the caps add up to {sum(caps):,} tokens, {100 * sum(caps) / avail:.0f}% of the "
            f"{avail:,} available: they overlap, not every partition can reach its cap"
        )
    return f"the caps add up to {sum(caps):,} of the {avail:,} tokens available"


def partition_budgets(trace: Trace) -> go.Figure:
    """Budget vs used per partition (partitions without a budget show used only), one
    horizontal bar a partition: the names read across, never turned or run together in a
    half-width column."""
    title = "Partitions: budget vs used"
    if trace.result is None:
        return empty_figure(title, NO_RESULT)
    parts = trace.result.partitions
    names = [esc(p.name) for p in parts]
    budgets = [p.budget for p in parts]
    fig = go.Figure()
    if any(b is not None for b in budgets):
        fig.add_trace(_budget_outlines(names, budgets))
    fig.add_trace(_used_bars(names, parts))
    caps = [b for b in budgets if b is not None]
    subtitle = wrap_words(_caps_note(caps, trace.result.totals.available))
    top = 50 + 17 * line_count(subtitle)
    rows = 28 * len(parts)
    reach = max([*(p.used for p in parts), *caps, 1])
    fig.update_layout(
        barmode="overlay",
        title=top_title(title, subtitle),
        height=top + rows + 100,
        margin={"l": 10, "r": 10, "t": top, "b": 100},
        # room on the right for the longest bar's number
        xaxis={"title": "tokens", "range": [0, reach * 1.2]},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "y": -72 / rows, "yanchor": "top"},
        **LAYOUT,
    )
    return fig


# --------------------------------------------------------------------------- tokenizers


#: the estimators' colours: not the status colours (green here would read as "kept" elsewhere)
_ESTIMATOR_COLORS = ("#a6761d", "#6f8fa8", "#b07aa1", "#8c8c5a")


def _estimator_bars(
    names: Sequence[str], rows: Sequence[Mapping[str, Any]], est: str, exact_name: str, i: int
) -> go.Bar:
    """One estimator's count per partition, its error against the exact count in the hover."""
    vals = [int(r["estimates"].get(est, 0)) for r in rows]
    hover = []
    for n, r, v in zip(names, rows, vals, strict=True):
        ex = int(r["exact"])
        err = f"{100.0 * (v - ex) / ex:+.0f}%" if ex else "–"
        hover.append(f"{n}: {v:,} by {esc(est)} ({err} vs {esc(exact_name)})")
    return go.Bar(
        y=names,
        x=vals,
        orientation="h",
        name=esc(est),
        marker={"color": _ESTIMATOR_COLORS[i % len(_ESTIMATOR_COLORS)]},
        hovertext=hover,
        hoverinfo="text",
    )


def tokenizer_drift(rows: Sequence[Mapping[str, Any]], exact_name: str) -> go.Figure:
    """Per partition: the exact count and each estimator's count, side by side.

    ``rows``: ``{"partition": str, "exact": int, "estimates": {name: int}}``.
    """
    title = "Estimated vs real tokens"
    if not rows:
        return empty_figure(title, "No partition text to count.")
    names = [esc(r["partition"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            y=names,
            x=[r["exact"] for r in rows],
            orientation="h",
            name=esc(exact_name),
            marker={"color": "#333"},
            hovertext=[
                f"{n}: {r['exact']:,} tokens ({esc(exact_name)})"
                for n, r in zip(names, rows, strict=True)
            ],
            hoverinfo="text",
        )
    )
    estimators = sorted({k for r in rows for k in r["estimates"]})
    for i, est in enumerate(estimators):
        fig.add_trace(_estimator_bars(names, rows, est, exact_name, i))
    # one horizontal group a partition (names read across in a half-width column); the
    # exact count is the reference, each estimator's error against it in the hover
    series = 1 + len(estimators)
    rows_px = len(rows) * max(28, 9 * series + 10)
    subtitle = f"each estimator against {esc(exact_name)}"
    top = 50 + 17
    # room under the axis for the legend one entry a row, as a half-width column at 1024 px
    # draws it (short of room, plotly takes it from the plot and the legend rises into the
    # axis title)
    bottom = 90 + 20 * legend_rows(series, per_row=1)
    fig.update_layout(
        barmode="group",
        title=top_title(title, subtitle),
        height=top + rows_px + bottom,
        margin={"l": 10, "r": 10, "t": top, "b": bottom},
        xaxis={"title": "tokens"},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "y": -72 / rows_px, "yanchor": "top"},
        **LAYOUT,
    )
    return fig
