"""Plotly figure builders for the debugger and the HTML report.

They take a ``Trace`` (or plain rows) and return a ``go.Figure``; nothing here imports
Streamlit, so the app, the offline HTML report and the tests draw the same pictures. The
figures are their own part (docs/design.md, "Parts and allowed imports"): they read the trace
contract and nothing above it. Every name is read from here (``from ctxcore import figures``,
``figures.score_scatter``); the modules split the figures by what they show:

- ``common``: the status and partition palettes, escaping of untrusted text (``esc``), the
  layout, titles and legends every figure shares
- ``budgets``: the window bar, the partitions' budgets, the tokenizers' counts
- ``scatter``: the score scatter and what it reads from a build (weights, cut-off, signals)
- ``timeline``: a session's packets across turns, a replay's difference grid, the legend
- ``session``: a session's partition usage per turn
- ``findings``: a session's findings per detector and turn
- ``sweep``: a sweep's grid over two knobs
- ``cost``: a call's cost and cache figures as text, a session's cache and cost per turn
"""

from __future__ import annotations

from ctxcore.figures.budgets import (
    partition_budgets,
    tokenizer_drift,
    window_bar,
    window_extent,
    window_segments,
)
from ctxcore.figures.common import (
    FREE_COLOR,
    IN_COLOR,
    LINE_CHARS,
    OUT_COLOR,
    OVER_COLOR,
    PARTITION_COLORS,
    RESERVE_COLOR,
    SAFETY_COLOR,
    STATUS_COLORS,
    STATUS_ORDER,
    esc,
)
from ctxcore.figures.cost import (
    BREAK_COLOR,
    CACHE_COLORS,
    COST_COLOR,
    FIGURES,
    MISSING,
    TurnFigures,
    billed_differently,
    break_lines,
    cached_share,
    cost_line,
    recorded_figures,
    session_turns,
    simulated_figures,
    turn_figures,
    turns_figure,
    usd,
)
from ctxcore.figures.findings import SEVERITY_COLORS, findings_heatmap
from ctxcore.figures.scatter import (
    AXES,
    CROWDED,
    SIGNAL_NAMES,
    SIGNAL_SYMBOLS,
    crowding,
    decision_hover,
    score_axes,
    score_cutoff,
    score_scatter,
    score_weights,
    strongest_signal,
)
from ctxcore.figures.session import session_usage
from ctxcore.figures.sweep import sweep_heatmap
from ctxcore.figures.timeline import (
    CELL_HOVER,
    DIFF_COLORS,
    GONE,
    UNCHANGED,
    cell_hover,
    status_legend,
    timeline_diff,
    timeline_heatmap,
    timeline_height,
    timeline_row,
)

__all__ = [
    "AXES",
    "BREAK_COLOR",
    "CACHE_COLORS",
    "CELL_HOVER",
    "COST_COLOR",
    "CROWDED",
    "DIFF_COLORS",
    "FIGURES",
    "FREE_COLOR",
    "GONE",
    "IN_COLOR",
    "LINE_CHARS",
    "MISSING",
    "OUT_COLOR",
    "OVER_COLOR",
    "PARTITION_COLORS",
    "RESERVE_COLOR",
    "SAFETY_COLOR",
    "SEVERITY_COLORS",
    "SIGNAL_NAMES",
    "SIGNAL_SYMBOLS",
    "STATUS_COLORS",
    "STATUS_ORDER",
    "UNCHANGED",
    "TurnFigures",
    "billed_differently",
    "break_lines",
    "cached_share",
    "cost_line",
    "crowding",
    "cell_hover",
    "decision_hover",
    "esc",
    "findings_heatmap",
    "partition_budgets",
    "recorded_figures",
    "score_axes",
    "score_cutoff",
    "score_scatter",
    "score_weights",
    "session_turns",
    "session_usage",
    "simulated_figures",
    "status_legend",
    "strongest_signal",
    "sweep_heatmap",
    "timeline_diff",
    "timeline_heatmap",
    "timeline_height",
    "timeline_row",
    "tokenizer_drift",
    "turn_figures",
    "turns_figure",
    "usd",
    "window_bar",
    "window_extent",
    "window_segments",
]
