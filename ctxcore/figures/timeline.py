"""A session's packets across its turns: the status grid, the grid of what a replay changed,
and the status legend a page keeps above a tall grid."""

from __future__ import annotations

import html
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ctxcore.figures.common import (
    LAYOUT,
    STATUS_COLORS,
    STATUS_ORDER,
    banded_scale,
    empty_figure,
    esc,
    legend_marker,
    text_px,
)

#: a timeline with more rows than this also labels the turns under its last row
_TALL_ROWS = 25
#: pixels ``timeline_heatmap`` adds on top for its legend (three lines at ~280 px)
_TIMELINE_LEGEND = 60


def timeline_height(rows: int) -> int:
    """The pixel height ``timeline_heatmap`` gives a chart of ``rows`` packet rows."""
    return max(300, min(4400, 22 * rows + 170))


def _row_order(
    rows: Sequence[Mapping[str, Any]], group_by_kind: bool
) -> tuple[list[str], dict[str, str]]:
    """The packet ids in order of first appearance (by turn, then by row), or by kind first;
    and each packet's kind."""
    first_seen: dict[str, tuple[int, int]] = {}
    for i, r in enumerate(rows):
        pid = str(r["packet_id"])
        key = (int(r["turn"]), i)
        if pid not in first_seen or key < first_seen[pid]:
            first_seen[pid] = key
    kinds = {str(r["packet_id"]): str(r.get("kind") or "") for r in rows}
    if group_by_kind:
        packets = sorted(first_seen, key=lambda p: (kinds[p], first_seen[p]))
    else:
        packets = sorted(first_seen, key=lambda p: first_seen[p])
    return packets, kinds


#: a cell's hover (``timeline_heatmap``): its row's head (``_heads``: the packet, with its
#: whole id where the row's label cuts it short, and its kind), the turn, then the cell's own
#: status, reason and tokens. The row and turn are the chart's (a row's head is its category
#: on the y axis, its tick showing the label alone), the rest the cell's ``customdata``, so
#: the browser receives ~25 characters a cell where one hover text a cell was ~150 (6.4 MB of
#: JSON for a 500-turn session) and the kind and id in each cell's values ~40 (1.9 MB)
CELL_HOVER = (
    "%{y} · turn %{x}<br>%{customdata[0]} · %{customdata[1]} · %{customdata[2]:,} tokens"
    "<extra></extra>"
)
#: the most turns whose columns keep a 1 px gap between them: ~260 px of cells at 1024 px
#: leave a 500-turn column half a pixel, which the gap blanked whole (an empty chart)
GAPPED_TURNS = 100
#: the longest packet id a row's label shows whole (grouped by kind, after the kind)
_LABEL_ID = 60
_GROUPED_ID = 50


def _labels(packets: Sequence[str], kinds: Mapping[str, str], group_by_kind: bool) -> list[str]:
    """Each row's label: its packet id, or its kind and packet id, shortened and escaped."""
    if group_by_kind:
        return [f"{esc(kinds[p], 20)} · {esc(p, _GROUPED_ID)}" for p in packets]
    return [esc(p, _LABEL_ID) for p in packets]


def _heads(
    packets: Sequence[str], labels: Sequence[str], kinds: Mapping[str, str], group_by_kind: bool
) -> list[str]:
    """Each row's head, what a hover over any of its cells starts with: its label in bold, the
    whole packet id under it where the label cuts it, and the packet's kind. It is the row's
    category on the y axis (the row's tick shows its label: ``_timeline_layout``), so the
    hover reads it once a row where each cell carried the id and kind among its values."""
    cut = _GROUPED_ID if group_by_kind else _LABEL_ID
    return [
        f"<b>{label}</b>{f'<br>{esc(p, 120)}' if len(p) > cut else ''}<br>{esc(kinds[p])}"
        for p, label in zip(packets, labels, strict=True)
    ]


def _cells(
    rows: Sequence[Mapping[str, Any]],
    packets: Sequence[str],
    turns: Sequence[int],
    order: Sequence[str],
) -> tuple[np.ndarray, np.ndarray]:
    """The grid's values (the index of the status's colour band: ``zmin`` -0.5 puts each at
    its band's centre, so that the band edges never decide the colour) and each cell's hover
    values (``CELL_HOVER``: status, reason, tokens), a row a packet and a column a turn; blank
    (``None``) where a packet was not a candidate. Object arrays, which plotly takes whole
    where it walks nested lists value by value; each distinct text is escaped once and alike
    cells share their values (a long session repeats its reasons, and a kept packet its
    tokens). Not a typed array (plotly's base64 ``bdata``): float32 takes 5.3 characters a
    cell where a list of small integers and nulls takes ~2.2, and a blank cell needs NaN (an
    integer type has no gap)."""
    code = {s: i for i, s in enumerate(order)}
    pidx = {p: i for i, p in enumerate(packets)}
    tidx = {t: i for i, t in enumerate(turns)}
    z = np.full((len(packets), len(turns)), None, dtype=object)
    custom = np.full((len(packets), len(turns)), None, dtype=object)
    shown: dict[object, str] = {}
    alike: dict[tuple[str, str, int], list[str | int]] = {}

    def once(text: object) -> str:
        got = shown.get(text)
        if got is None:
            got = shown[text] = esc(text)
        return got

    for r in rows:
        i, j = pidx[str(r["packet_id"])], tidx[int(r["turn"])]
        status = str(r["status"])
        z[i, j] = code.get(status, len(order) - 1)
        values = (once(status), once(r.get("reason", "")), int(r.get("tokens_after") or 0))
        # alike cells share one list: plotly and Streamlit deep-copy the grid, and a copy
        # takes each shared object once
        custom[i, j] = alike.setdefault(values, list(values))
    return z, custom


def cell_hover(grid: Mapping[str, Any] | go.Heatmap, i: int, j: int) -> str:
    """What the browser shows on hovering cell (row ``i``, column ``j``) of a
    ``timeline_heatmap``'s grid (its trace, as a figure or as JSON): ``CELL_HOVER`` filled
    in as plotly fills it; ``""`` for a blank cell, which has no hover."""
    values = grid["customdata"][i][j]
    if values is None:
        return ""
    status, reason, tokens = values
    return f"{grid['y'][i]} · turn {grid['x'][j]}<br>{status} · {reason} · {int(tokens):,} tokens"


def timeline_row(grid: Mapping[str, Any] | go.Heatmap, label: str) -> int:
    """The index of the row of a ``timeline_heatmap``'s grid whose tick shows ``label`` (an
    escaped packet id, or "kind · id" grouped by kind): its head (``_heads``) starts with
    it in bold."""
    bold = f"<b>{label}</b>"
    return next(i for i, head in enumerate(grid["y"]) if str(head).startswith(f"{bold}<br>"))


def _add_turns_below(fig: go.Figure, turns: Sequence[int]) -> None:
    """The turns again under the last rows, where a long chart is read (a trace of no points
    on a second x axis at the bottom: its turns make the axis' categories; an invisible
    marker a turn drew 500 nodes in the browser)."""
    fig.add_trace(
        go.Scatter(
            x=[str(t) for t in turns],
            y=[None] * len(turns),
            xaxis="x2",
            mode="lines",
            hoverinfo="skip",
            showlegend=False,
        )
    )


def _add_row_lines(fig: go.Figure, packets: int, turns: int) -> None:
    """A white line between the rows, all in one path over the grid, for a grid drawn
    without gaps: plotly paints a gapless grid of even columns as one pixel a cell, scaled
    (its "fast" image), where a gap had it fill every cell's rectangle into a canvas of the
    chart's size and encode that as a PNG (~0.4 s of a 500-turn open; docs/design.md,
    "The app"). Positions on a category axis are the categories' indices."""
    if packets < 2:
        return
    path = "".join(f"M-0.5,{i + 0.5}H{turns - 0.5}" for i in range(packets - 1))
    fig.add_shape(type="path", path=path, xref="x", yref="y", line={"color": "white", "width": 1})


def _add_gaps(fig: go.Figure, turns: Sequence[int], tall: bool) -> None:
    """A dashed line between non-consecutive turns, labelled with the turns missing."""
    level, last_gap = 0, -99
    # a label is ~65 px wide: in a half-width chart (~100-250 px of cells) that is up to half
    # the columns, however many there are
    near = max(5, len(turns) // 2)
    for j in range(1, len(turns)):
        if turns[j] == turns[j - 1] + 1:
            continue
        fig.add_vline(x=j - 0.5, line={"color": "#222", "width": 2, "dash": "dash"})
        # gaps closer than a label's width take turns on three lines, so their labels never
        # overlap
        level = (level + 1) % 3 if j - last_gap < near else 0
        last_gap = j
        fig.add_annotation(
            x=j - 0.5,
            y=0,
            yref="paper",
            yanchor="top",
            # the label reads inwards from its line, towards the wider side: centred, one
            # near an edge of a narrow chart was cut
            xanchor="right" if j > len(turns) / 2 else "left",
            text=f"gap: {turns[j] - turns[j - 1] - 1} turn(s)",
            showarrow=False,
            font={"size": 10},
            yshift=(-24 if tall else 0) - 15 * level,  # under the turn labels
        )


#: the rows' labels' font size, and the pixels between a label and the grid (the tick
#: labels' standoff and the 8 px pad of Streamlit's theme) with a few to spare
_LABEL_PX = 11
_LABEL_PAD = 24


def label_margin(labels: Sequence[str]) -> int:
    """The left margin that holds the longest of the rows' ``labels`` whole: placed from
    their width (``text_px``), where plotly's ``automargin`` alone started from a narrow
    margin, measured every label in the browser and drew the chart a second time with the
    margin it found (docs/design.md, "The app"). ``automargin`` stays on: it grows the
    margin only for a font wider than Arial's metrics."""
    return _LABEL_PAD + int(max((text_px(x, _LABEL_PX) for x in labels), default=0) + 0.999)


def _timeline_layout(
    title: str, labels: Sequence[str], heads: Sequence[str], turns: int, legend: bool
) -> dict[str, Any]:
    """The grid's layout: the title at the very top (the "turn" axis title under it would
    otherwise run into a long session id at 1024 px) and the legend, where there is one, on
    lines of its own under it (beside the title, it wrapped over it in a half-width chart);
    22 px a row keeps ~190 labels apart. The left margin holds the rows' labels
    (``label_margin``) and the others the turns' labels, so plotly's automatic margins find
    nothing to grow and the chart is drawn once. A row's category is its head (``_heads``),
    its tick its label."""
    packets = len(labels)
    tall = packets > _TALL_ROWS
    height = timeline_height(packets) + (_TIMELINE_LEGEND if legend else 0)
    return {
        "title": {
            "text": esc(title),
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 10},
        },
        "height": height,
        "margin": {
            "l": label_margin(labels),
            "r": 10,
            "t": 95 + (_TIMELINE_LEGEND if legend else 0),
            "b": 90 if tall else 60,
        },
        # exact ranges: one column a turn, one row a packet, no padding after the last
        "xaxis": {
            "title": "turn",
            "type": "category",
            "side": "top",
            "range": [-0.5, turns - 0.5],
        },
        "yaxis": {
            "range": [packets - 0.5, -0.5],  # the first packet on top
            "type": "category",
            "tickmode": "array",
            "tickvals": list(heads),
            "ticktext": list(labels),
            "tickfont": {"size": _LABEL_PX},
        },
        "legend": {
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 1 - 36 / height,
            "yanchor": "top",
            "yref": "container",
        },
        "showlegend": legend,
        **LAYOUT,
    }


#: the second x axis of a tall timeline: the turns under its last row
_TURNS_BELOW = {
    "type": "category",
    "side": "bottom",
    "overlaying": "x",
    "matches": "x",
    "showgrid": False,
}


def timeline_heatmap(
    rows: Sequence[Mapping[str, Any]],
    title: str = "Packets across turns",
    group_by_kind: bool = False,
    legend: bool = True,
    colors: Mapping[str, str] = STATUS_COLORS,
) -> go.Figure:
    """Packet id × turn, one cell per decision, coloured by status.

    ``rows``: ``{"turn", "packet_id", "kind", "status", "reason", "tokens_after"}`` as
    ``TraceStore.session_statuses`` returns them. Cells where a packet was not a candidate
    stay blank. Rows are in order of first appearance (``group_by_kind``: by kind first,
    each row labelled with it). The legend sits at the top, where a tall chart opens
    (``legend=False``: none, for a page that keeps ``status_legend`` in view instead), the
    turns are labelled above and, on a tall chart, below the rows too, and a dashed line
    marks a gap between non-consecutive turns (turn 16, then 37).
    """
    if not rows:
        return empty_figure(title, "No decisions recorded for this session.")
    order = tuple(colors)
    turns = sorted({int(r["turn"]) for r in rows})
    packets, kinds = _row_order(rows, group_by_kind)
    z, custom = _cells(rows, packets, turns, order)
    labels = _labels(packets, kinds, group_by_kind)
    heads = _heads(packets, labels, kinds, group_by_kind)
    gapped = len(turns) <= GAPPED_TURNS
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(t) for t in turns],
            y=heads,
            zmin=-0.5,
            zmax=len(order) - 0.5,
            colorscale=banded_scale([colors[s] for s in order]),
            customdata=custom,
            hovertemplate=CELL_HOVER,
            hoverongaps=False,
            xgap=1 if gapped else 0,
            ygap=1 if gapped else 0,
            showscale=False,
        )
    )
    if legend:
        _add_status_legend(fig, order, colors)
    tall = len(packets) > _TALL_ROWS
    if tall:
        _add_turns_below(fig, turns)
    if not gapped:
        _add_row_lines(fig, len(packets), len(turns))
    _add_gaps(fig, turns, tall)
    fig.update_layout(**_timeline_layout(title, labels, heads, len(turns), legend))
    if tall:
        fig.update_layout(xaxis2=_TURNS_BELOW)
    return fig


#: ``timeline_diff``'s cells: a status after the change where it differs from before, pale
#: where it is the same, "not a candidate" where a packet is one on the before side only
UNCHANGED = "unchanged"
GONE = "not a candidate"
DIFF_COLORS: dict[str, str] = {**STATUS_COLORS, UNCHANGED: "#e8e8e8", GONE: "#4d4d4d"}


def timeline_diff(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    title: str = "What changed: each packet's status after, where it differs from before",
) -> go.Figure:
    """Both sides of a replay in one grid (rows as ``timeline_heatmap`` reads them): a cell
    whose status changed takes the colour of its status after, one that stayed the same is
    pale, and the hover says before -> after. What a settings change did across a session
    reads at a glance, at any width (two grids side by side leave a half-width column
    each)."""
    old = {(int(r["turn"]), str(r["packet_id"])): r for r in before}
    new = {(int(r["turn"]), str(r["packet_id"])): r for r in after}
    rows: list[dict[str, Any]] = []
    for key, r in new.items():
        was = old.get(key)
        was_status = str(was["status"]) if was is not None else "not a candidate"
        rows.append(
            {
                **r,
                "status": UNCHANGED if was_status == str(r["status"]) else str(r["status"]),
                "reason": f"{was_status} → {r['status']} · {r.get('reason', '')}",
            }
        )
    rows += [
        {**r, "status": GONE, "reason": f"{r['status']} → not a candidate"}
        for key, r in old.items()
        if key not in new
    ]
    return timeline_heatmap(rows, title, colors=DIFF_COLORS)


def _add_status_legend(
    fig: go.Figure, statuses: Sequence[str], colors: Mapping[str, str] = STATUS_COLORS
) -> None:
    for s in statuses:  # a legend made of invisible markers
        fig.add_trace(legend_marker(s, colors[s]))


#: ``status_legend``'s entry: a square of the status's colour, then its name
_LEGEND_ENTRY = (
    '<span class="status-entry" style="margin-right:14px;white-space:nowrap">'
    '<span class="status-swatch" style="display:inline-block;width:11px;height:11px;'
    'margin-right:5px;vertical-align:-1px;background:{color}"></span>'
    '<span class="status-name">{name}</span></span>'
)


def status_legend(
    statuses: Collection[str] = STATUS_ORDER, colors: Mapping[str, str] = STATUS_COLORS
) -> str:
    """The status colours alone, one line of HTML in the order of ``STATUS_ORDER``: a page
    shows it above a tall chart that scrolls in a box of its own, so what each colour means
    stays in view. Plain HTML, not a chart: a second plotly chart cost the page's open as
    much as a small grid (docs/design.md, "The app", the Timeline). Names and colours are
    ours, escaped all the same."""
    entries = "".join(
        _LEGEND_ENTRY.format(color=html.escape(colors[s]), name=html.escape(s))
        for s in STATUS_ORDER
        if s in statuses
    )
    return (
        '<div class="status-legend" style="font-size:14px;line-height:24px">'
        f'<span style="margin-right:12px">status</span>{entries}</div>'
    )
