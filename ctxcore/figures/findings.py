"""A session's diagnostics: how many findings each detector raised per turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from ctxcore.figures.common import banded_scale, empty_figure, esc, legend_marker

SEVERITY_COLORS: dict[str, str] = {"info": "#8fb3d9", "warning": "#e3a33b", "error": "#c0392b"}
_SEVERITY_LEVEL = {"info": 1, "warning": 2, "error": 3}


def _cell(detector: str, turn: Mapping[str, Any]) -> tuple[float, str, str] | None:
    """One detector's cell in one turn: its value (the centre of the worst severity's colour
    band), the count of findings and the hover (the first four messages); None if it found
    nothing."""
    hits = [f for f in turn["findings"] if f["detector"] == detector]
    if not hits:
        return None
    worst = max(hits, key=lambda f: _SEVERITY_LEVEL.get(str(f["severity"]), 0))
    hover = f"<b>{esc(detector)}</b> · turn {turn['turn']}<br>" + "<br>".join(
        f"{esc(f['severity'])}: {esc(f['message'], 160)}" for f in hits[:4]
    )
    return _SEVERITY_LEVEL.get(str(worst["severity"]), 1) - 0.5, str(len(hits)), hover


def findings_heatmap(
    turns: Sequence[Mapping[str, Any]],
    detectors: Sequence[str],
    title: str = "Diagnostics per turn",
) -> go.Figure:
    """Detector × turn: how many findings each detector raised, coloured by worst severity.

    ``turns``: ``{"turn", "trace_id", "findings": [{"detector", "severity", "message"}]}``
    as ``SessionDiagnosis.turns`` dumps them. Cells without findings stay blank.
    """
    if not turns:
        return empty_figure(title, "No turns to diagnose.")
    order = [int(t["turn"]) for t in turns]
    dets = [d for d in detectors if any(f["detector"] == d for t in turns for f in t["findings"])]
    if not dets:
        return empty_figure(title, "No detector fired in this session.")
    z: list[list[float | None]] = [[None] * len(order) for _ in dets]
    text: list[list[str]] = [[""] * len(order) for _ in dets]
    hover: list[list[str]] = [[""] * len(order) for _ in dets]
    for j, t in enumerate(turns):
        for i, d in enumerate(dets):
            cell = _cell(d, t)
            if cell is not None:
                z[i][j], text[i][j], hover[i][j] = cell
    severities = ("info", "warning", "error")
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(t) for t in order],
            y=[esc(d) for d in dets],
            zmin=0,
            zmax=3,
            colorscale=banded_scale([SEVERITY_COLORS[s] for s in severities]),
            text=text,
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
            xgap=1,
            ygap=1,
            showscale=False,
        )
    )
    for sev in severities:
        fig.add_trace(legend_marker(sev, SEVERITY_COLORS[sev]))
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=max(220, 110 + 26 * len(dets)),
        margin={"l": 10, "r": 10, "t": 50, "b": 50},
        xaxis={"title": "turn", "type": "category"},
        yaxis={"autorange": "reversed"},
        # top right, by the title: under the plot it sat on the "turn" axis title
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1, "yanchor": "bottom"},
        plot_bgcolor="white",
    )
    return fig
