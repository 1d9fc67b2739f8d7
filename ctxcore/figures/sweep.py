"""A sweep's grid over two knobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from ctxcore.figures.common import IN_COLOR, LAYOUT, OUT_COLOR, esc, legend_marker


def _hover(
    z: Sequence[Sequence[float | None]],
    xs: Sequence[str],
    ys: Sequence[str],
    labels: tuple[str, str, str],
    binary: bool,
) -> list[list[str]]:
    """Each cell's two knob values and its value (in/out when ``binary``)."""
    x_label, y_label, value_label = labels
    hover = []
    for j, row in enumerate(z):
        line = []
        for i, v in enumerate(row):
            shown = "–" if v is None else ("in" if v else "out") if binary else f"{v:,.0f}"
            line.append(
                f"{esc(x_label)} = {xs[i]}<br>{esc(y_label)} = {ys[j]}<br>"
                f"{esc(value_label)}: {shown}"
            )
        hover.append(line)
    return hover


def sweep_heatmap(
    z: Sequence[Sequence[float | None]],
    x_values: Sequence[Any],
    y_values: Sequence[Any],
    *,
    x_label: str,
    y_label: str,
    title: str,
    colorscale: str = "Viridis",
    value_label: str = "",
    binary: bool = False,
) -> go.Figure:
    """A sweep grid: ``z[j][i]`` is the value at ``x_values[i]``, ``y_values[j]``.

    With ``binary`` the cells read in/out (1/0) with two colours.
    """
    xs = [f"{v:g}" if isinstance(v, float) else esc(v) for v in x_values]
    ys = [f"{v:g}" if isinstance(v, float) else esc(v) for v in y_values]
    heat = go.Heatmap(
        z=[list(r) for r in z],
        x=xs,
        y=ys,
        hovertext=_hover(z, xs, ys, (x_label, y_label, value_label or title), binary),
        hoverinfo="text",
        xgap=1,
        ygap=1,
        colorscale=[[0, OUT_COLOR], [1, IN_COLOR]] if binary else colorscale,
        zmin=0 if binary else None,
        zmax=1 if binary else None,
        showscale=not binary,
        colorbar={"title": esc(value_label)} if not binary else None,
    )
    fig = go.Figure(heat)
    if binary:  # a legend for the two colours (a colour bar would suggest a scale)
        fig.add_trace(legend_marker("in the window", IN_COLOR))
        fig.add_trace(legend_marker("not in the window", OUT_COLOR))
        fig.update_layout(legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"})
    fig.update_layout(
        title=esc(title),
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        xaxis={"title": esc(x_label), "type": "category"},
        yaxis={"title": esc(y_label), "type": "category"},
        **LAYOUT,
    )
    return fig
