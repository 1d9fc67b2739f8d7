"""A session's partition usage per turn, against each turn's budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from ctxcore.figures.common import LAYOUT, empty_figure, esc, partition_color
from ctxcore.models import PARTITIONS


@dataclass(frozen=True)
class _Usage:
    """The tokens each partition used per turn, and each turn's budget."""

    turns: list[int]
    #: the preset partitions in their order, then any other in name order
    names: list[str]
    used: dict[tuple[str, int], int]
    budget: dict[int, int]


def _usage(rows: Sequence[Mapping[str, Any]], budgets: Mapping[int, int] | None) -> _Usage:
    """``rows`` summed per (partition, turn); the budget of a turn is ``budgets``' or, without
    it, the sum of the partitions' budgets that turn."""
    names = [p for p in PARTITIONS if any(r["partition"] == p for r in rows)]
    names += sorted({str(r["partition"]) for r in rows} - set(names))
    used: dict[tuple[str, int], int] = {}
    budget: dict[int, int] = {}
    for r in rows:
        key = (str(r["partition"]), int(r["turn"]))
        used[key] = used.get(key, 0) + int(r["used"] or 0)
        if budgets is None and r.get("budget") is not None:
            budget[int(r["turn"])] = budget.get(int(r["turn"]), 0) + int(r["budget"])
    if budgets is not None:
        budget = {int(k): int(v) for k, v in budgets.items()}
    return _Usage(sorted({int(r["turn"]) for r in rows}), names, used, budget)


def _budget_line(turns: Sequence[int], budget: Mapping[int, int]) -> go.Scatter:
    """Each turn's budget as a dashed line over the bars."""
    return go.Scatter(
        x=[str(t) for t in turns],
        y=[budget.get(t) for t in turns],
        mode="lines+markers",
        name="budget",
        line={"color": "#222", "dash": "dash"},
        hovertext=[f"turn {t}: budget {budget[t]:,}" if t in budget else "" for t in turns],
        hoverinfo="text",
    )


def session_usage(
    rows: Sequence[Mapping[str, Any]],
    title: str = "Partition usage per turn",
    budgets: Mapping[int, int] | None = None,
) -> go.Figure:
    """Per-partition tokens used per turn, stacked, with each turn's total budget as a line.

    ``rows``: ``{"turn", "partition", "budget", "used"}`` (``TraceStore.session_partitions``).
    ``budgets``: the budget of each turn's build (what the window left for context); without
    it the line is the sum of the partition budgets (caps, which may add up to more).
    """
    if not rows:
        return empty_figure(title, "No partition usage recorded for this session.")
    usage = _usage(rows, budgets)
    turns = usage.turns
    fig = go.Figure()
    xs = [str(t) for t in turns]
    for i, name in enumerate(usage.names):
        ys = [usage.used.get((name, t), 0) for t in turns]
        fig.add_trace(
            go.Bar(
                x=xs,
                y=ys,
                name=esc(name),
                marker={"color": partition_color(name, i)},
                hovertext=[
                    f"turn {t}: {esc(name)} {y:,} tokens" for t, y in zip(turns, ys, strict=True)
                ],
                hoverinfo="text",
            )
        )
    if usage.budget:
        fig.add_trace(_budget_line(turns, usage.budget))
    fig.update_layout(
        barmode="stack",
        title=esc(title),
        height=360,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        xaxis={"title": "turn", "type": "category"},
        yaxis={"title": "tokens"},
        **LAYOUT,
    )
    return fig
