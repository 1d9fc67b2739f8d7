"""Cost and the prompt cache per call and per turn, for the app and the HTML report
(docs/design.md, "The app"): a call's figures as the provider recorded them or as the
simulated cache gives them (``ctxcore.costing.CallCost``), its cost as text (unknown is
``—``, never 0), what broke its cached prefix as plain lines, and a session's turns as one
figure (cached, written and uncached tokens stacked, the cost as a line, each break a mark
whose hover says why, escaped: a reason quotes prompt text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from ctxcore.cache import CALL_TOLERANCE, CacheBreak
from ctxcore.costing import CallCost
from ctxcore.figures.common import LAYOUT, esc, top_title
from ctxcore.models import TokenUsage

#: an unknown figure or cost
MISSING = "—"
#: a call's token figures, in the order the panels and tables give them
FIGURES = ("prompt", "cached (read)", "written", "uncached", "output")
#: the cache's parts of a prompt (colour-blind safe)
CACHE_COLORS = {"cached (read)": "#009E73", "written": "#E69F00", "uncached": "#999999"}
#: the cost line and the break marks
COST_COLOR = "#0072B2"
BREAK_COLOR = "#D55E00"


def usd(value: float | None) -> str:
    """A cost as text: ``$0.0123`` under a dollar, ``$12.35`` from one; ``—`` unknown."""
    if value is None:
        return MISSING
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def recorded_figures(rec: TokenUsage | None) -> list[int | None]:
    """The provider's counts in ``FIGURES`` order (``None`` where it did not say; uncached
    is the prompt less what it read and wrote)."""
    if rec is None:
        return [None] * len(FIGURES)
    uncached = None
    if rec.input_tokens is not None:
        uncached = rec.input_tokens - (rec.cache_read_tokens or 0) - (rec.cache_write_tokens or 0)
    return [
        rec.input_tokens,
        rec.cache_read_tokens,
        rec.cache_write_tokens,
        uncached,
        rec.output_tokens,
    ]


def simulated_figures(call: CallCost) -> list[int | None]:
    """The simulated cache's counts of a call in ``FIGURES`` order."""
    return [
        call.input_tokens,
        call.cache_read_tokens,
        call.cache_write_tokens,
        call.uncached_tokens,
        call.output_tokens,
    ]


def cost_line(call: CallCost) -> str:
    """The call's cost and where it comes from, one line of plain text."""
    if call.cost_usd is None:
        model = call.model or "an unnamed model"
        return f"Cost: unknown ({MISSING}): no price for {model}, or a count it needs is unknown"
    source = (
        "priced from the usage the provider recorded"
        if call.cost_source == "recorded"
        else "priced from the simulation (no usage was recorded)"
    )
    return f"Cost: {usd(call.cost_usd)}, {source} ({call.model})"


def billed_differently(call: CallCost) -> str | None:
    """One line when the provider billed a cache read the simulation does not predict (one
    read and the other not, or the two more than ``CALL_TOLERANCE`` of the recorded apart);
    ``None`` when they agree or nothing was recorded."""
    rec = call.recorded
    if rec is None or rec.cache_read_tokens is None:
        return None
    billed, simulated = rec.cache_read_tokens, call.cache_read_tokens
    if (billed > 0) == (simulated > 0) and abs(billed - simulated) <= CALL_TOLERANCE * billed:
        return None
    return (
        f"Billed differently: the provider read {billed:,} tokens from the cache, the "
        f"simulation {simulated:,}"
    )


def break_lines(brk: CacheBreak) -> list[str]:
    """What broke the cached prefix, what it cost and the fix, as plain lines (the reason
    quotes prompt lines: shown as text, never as markup)."""
    where = brk.block + (f" [{brk.index}]" if brk.index is not None else "")
    if brk.packet:
        where += f" ({brk.packet})"
    lines = [
        f"Cache break: {brk.kind} at {where}",
        f"Why: {brk.reason}",
        f"Re-written: {brk.tokens:,} tokens, {usd(brk.cost_usd)} beyond reading them",
        f"Fix: {brk.fix}",
    ]
    if brk.provider_reason:
        lines.append(f"The provider's reason: {brk.provider_reason}")
    return lines


def cached_share(call: CallCost) -> float:
    """The share of the prompt read from the cache: the provider's figures where recorded,
    else the simulation's."""
    rec = call.recorded
    if rec is not None and rec.input_tokens and rec.cache_read_tokens is not None:
        return max(0.0, min(1.0, rec.cache_read_tokens / rec.input_tokens))
    if call.input_tokens <= 0:
        return 0.0
    return max(0.0, min(1.0, call.cache_read_tokens / call.input_tokens))


@dataclass(frozen=True)
class TurnFigures:
    """One call of a session's figures per turn: the provider's where it recorded usage,
    else the simulated cache's (``source``)."""

    turn: int
    trace_id: str
    cached: int | None
    written: int | None
    uncached: int | None
    output: int | None
    usd: float | None
    source: str
    cache_break: CacheBreak | None


def turn_figures(call: CallCost) -> TurnFigures:
    """``TurnFigures`` of one call."""
    rec = call.recorded
    if rec is not None and rec.input_tokens is not None:
        _, cached, written, uncached, output = recorded_figures(rec)
        source = "recorded"
    else:
        _, cached, written, uncached, output = simulated_figures(call)
        source = "simulated"
    return TurnFigures(
        call.turn, call.trace_id, cached, written, uncached, output, call.cost_usd, source,
        call.cache_break,
    )  # fmt: skip


def session_turns(calls: Sequence[CallCost]) -> list[TurnFigures]:
    """A session's calls as ``TurnFigures``, in turn order (then as sent)."""
    return sorted((turn_figures(c) for c in calls), key=lambda f: f.turn)


def _n(value: int | None) -> str:
    return MISSING if value is None else f"{value:,}"


def _bar(name: str, turns: list[int], values: list[int | None], hover: list[str]) -> go.Bar:
    return go.Bar(
        name=name,
        x=turns,
        y=[v or 0 for v in values],
        marker_color=CACHE_COLORS[name],
        hovertext=hover,
        hoverinfo="text",
    )


def _break_marks(rows: list[TurnFigures]) -> go.Scatter:
    """A mark above each turn whose cached prefix broke, its hover the kind, reason and fix
    (escaped)."""
    top = max((f.cached or 0) + (f.written or 0) + (f.uncached or 0) for f in rows)
    broken = [f for f in rows if f.cache_break is not None]
    return go.Scatter(
        name="cache break",
        x=[f.turn for f in broken],
        y=[top * 1.04] * len(broken),
        mode="markers",
        marker={"symbol": "triangle-down", "size": 11, "color": BREAK_COLOR},
        hovertext=[
            esc(f"turn {f.turn}: cache break ({b.kind}) · {b.reason} · fix: {b.fix}", 600)
            for f in broken
            if (b := f.cache_break) is not None
        ],
        hoverinfo="text",
    )


def turns_figure(
    calls: Sequence[CallCost], title: str = "Prompt cache and cost per turn"
) -> go.Figure:
    """Per turn the prompt's cached, written and uncached tokens stacked, the cost as a
    line (right axis), and each cache break a mark whose hover says why."""
    rows = session_turns(calls)
    turns = [f.turn for f in rows]
    hover = [
        esc(
            f"turn {f.turn} ({f.source}): cached {_n(f.cached)}, written {_n(f.written)}, "
            f"uncached {_n(f.uncached)}, output {_n(f.output)} · {usd(f.usd)}"
        )
        for f in rows
    ]
    data: list[go.Bar | go.Scatter] = [
        _bar(name, turns, [getattr(f, attr) for f in rows], hover)
        for name, attr in (("cached (read)", "cached"), ("written", "written"),
                           ("uncached", "uncached"))
    ]  # fmt: skip
    data.append(
        go.Scatter(
            name="$ per turn",
            x=turns,
            y=[f.usd for f in rows],
            yaxis="y2",
            mode="lines+markers",
            marker={"size": 4},
            line={"color": COST_COLOR, "width": 1.5},
            hovertext=[f"turn {f.turn}: {usd(f.usd)}" for f in rows],
            hoverinfo="text",
        )
    )
    if rows and any(f.cache_break is not None for f in rows):
        data.append(_break_marks(rows))
    subtitle = "per turn · bars: prompt tokens (left) · line: USD (right) · ▼ a cache break"
    fig = go.Figure(data)
    fig.update_layout(
        **LAYOUT,
        title=top_title(esc(title), subtitle),
        barmode="stack",
        height=380,
        # the legend under the turn numbers (no axis title: the subtitle says "per turn")
        margin={"l": 10, "r": 10, "t": 70, "b": 80},
        yaxis={"title": {"text": "prompt tokens"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": "USD"}, "overlaying": "y", "side": "right",
                "rangemode": "tozero", "showgrid": False, "tickprefix": "$",
                "tickformat": ",.3f"},
        legend={"orientation": "h", "y": -0.12, "yanchor": "top", "x": 0,
                "traceorder": "normal"},
        hovermode="closest",
    )  # fmt: skip
    return fig


__all__ = [
    "BREAK_COLOR",
    "CACHE_COLORS",
    "COST_COLOR",
    "FIGURES",
    "MISSING",
    "TurnFigures",
    "billed_differently",
    "break_lines",
    "cached_share",
    "cost_line",
    "recorded_figures",
    "session_turns",
    "simulated_figures",
    "turn_figures",
    "turns_figure",
    "usd",
]
