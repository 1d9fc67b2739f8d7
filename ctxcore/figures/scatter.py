"""The score scatter: each packet's relevance against its recency, and what decided its fate
(the ``min_relevance`` threshold, the score cut-off, the strongest signal)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from ctxcore.figures.common import (
    LAYOUT,
    LINE_CHARS,
    NO_RESULT,
    STATUS_COLORS,
    STATUS_ORDER,
    empty_figure,
    esc,
    line_count,
    top_title,
    wrap_lines,
)
from ctxcore.models import Decision, Status, Trace

#: hello-agents 0.2.8 has no weights in its config: 0.7 × relevance + 0.3 × recency is fixed.
_FIXED_WEIGHTS = {"hello-agents": (0.7, 0.3)}


def score_weights(trace: Trace) -> tuple[float, float] | None:
    """(relevance weight, recency weight) of the build, if the preset has them."""
    cfg = trace.config
    if cfg.relevance_weight is not None and cfg.recency_weight is not None:
        return cfg.relevance_weight, cfg.recency_weight
    return _FIXED_WEIGHTS.get(cfg.preset)


def score_cutoff(decisions: Sequence[Decision]) -> float | None:
    """The lowest score that was still let in by the fill (must-keep items aside).

    Packets scoring below it were left out for lack of room or after the fill stopped;
    ``None`` when no scored packet was kept by the fill.
    """
    kept = [
        d.score
        for d in decisions
        if d.score is not None
        and d.status in (Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED, Status.NOT_RENDERED)
        and d.reason.value != "MUST_KEEP"
    ]
    return min(kept) if kept else None


def _is_linear(decisions: Sequence[Decision], w_rel: float, w_rec: float) -> bool:
    """Whether score == w_rel·relevance + w_rec·recency for every scored packet.

    Only then is the cut-off a straight line in the relevance × recency plane.
    """
    seen = False
    for d in decisions:
        if d.score is None or d.relevance is None or d.recency is None:
            continue
        seen = True
        if abs(d.score - (w_rel * d.relevance + w_rec * d.recency)) > 1e-6:
            return False
    return seen


def _marker_size(tokens: int, biggest: int) -> float:
    return 7.0 + 33.0 * math.sqrt(tokens / biggest) if biggest > 0 else 7.0


def decision_hover(d: Decision) -> str:
    """Hover text for one decision: id, kind, tokens, status and the reason sentence."""
    lines = [
        f"<b>{esc(d.packet_id, 120)}</b>",
        f"kind: {esc(d.kind, 60)} · status: {esc(d.status.value)}",
        f"tokens: {d.tokens_before:,} → {d.tokens_after:,}",
    ]
    if d.score is not None:
        lines.append(
            f"score {d.score:.3f} · relevance {d.relevance if d.relevance is not None else '–'}"
            f" · recency {d.recency if d.recency is not None else '–'}"
            + (f" · rank {d.rank}" if d.rank is not None else "")
        )
    lines.append(f"{esc(d.reason.value)}: {esc(d.reason_text, 240)}")
    return "<br>".join(lines)


#: marker symbol per signal of the ctxscope preset (a decision note ``signal:<name>``, the
#: strongest first); a packet no signal fired for is a circle
SIGNAL_SYMBOLS: dict[str, str] = {
    "error": "x",
    "current_turn": "star",
    "mention": "diamond",
    "reference": "triangle-up",
    "metadata": "square",
    "lexical": "cross",
}
SIGNAL_NAMES: dict[str, str] = {
    "error": "error evidence",
    "current_turn": "current turn",
    "mention": "mentioned by the user",
    "reference": "referenced by the last step",
    "metadata": "metadata",
    "lexical": "word match",
}


def strongest_signal(d: Decision) -> str | None:
    """The strongest signal recorded in a decision's notes (``signal:<name>``, first)."""
    for note in d.notes:
        if note.startswith("signal:"):
            return note[7:]
    return None


#: ``score_scatter``'s axes: the signals' own values, or each packet's rank by them
AXES = ("values", "ranks")
#: share of scored packets that sit on another's spot (to ``_SPOT`` decimals) past which
#: ``score_axes`` picks ranks: a 187-packet turn had all but 12 at relevance 0 with recency
#: 0 or 1, and its summarized and dropped packets hid under each other
CROWDED = 0.25
_SPOT = 2


def _scored(trace: Trace) -> list[Decision]:
    if trace.result is None:
        return []
    return [d for d in trace.result.decisions if d.relevance is not None and d.recency is not None]


def crowding(trace: Trace) -> float:
    """The share of scored packets that share their (relevance, recency) spot, rounded to
    two decimals, with another packet."""
    spots: dict[tuple[float, float], int] = {}
    scored = _scored(trace)
    for d in scored:
        key = (round(d.relevance or 0.0, _SPOT), round(d.recency or 0.0, _SPOT))
        spots[key] = spots.get(key, 0) + 1
    shared = sum(n for n in spots.values() if n > 1)
    return shared / len(scored) if scored else 0.0


def score_axes(trace: Trace) -> str:
    """The axes ``score_scatter`` reads best with for this build: ``ranks`` when more than
    ``CROWDED`` of its packets pile up on shared spots, else ``values``."""
    return "ranks" if crowding(trace) > CROWDED else "values"


def _ranks(values: Sequence[float], ties: Sequence[float]) -> list[float]:
    """Each value's rank among ``values``, 0 (lowest) to 1 (highest); equal values ordered by
    ``ties`` (the score), then by position, so no two packets share a rank."""
    order = sorted(range(len(values)), key=lambda i: (values[i], ties[i], i))
    top = max(1, len(values) - 1)
    out = [0.0] * len(values)
    for r, i in enumerate(order):
        out[i] = r / top
    return out


def _jitter(key: int, scale: float) -> float:
    """A fixed offset in [-scale, scale] for the ``key``-th point (the same on every draw)."""
    return scale * (((key * 2654435761) % 1000) / 500.0 - 1.0)


@dataclass(frozen=True)
class _Points:
    """Where ``score_scatter`` puts the scored packets, in their order."""

    xs: list[float]
    ys: list[float]
    #: packets moved off a spot another packet holds (value axes only)
    jittered: int


def _place(scored: Sequence[Decision], ranked: bool) -> _Points:
    """Rank axes: each packet's rank by relevance and by recency (ties by score). Value axes:
    the values themselves, the first packet on a spot on it and the others spread around it."""
    rel = [float(d.relevance or 0.0) for d in scored]
    rec = [float(d.recency or 0.0) for d in scored]
    if ranked:
        scores = [float(d.score or 0.0) for d in scored]
        return _Points(_ranks(rel, scores), _ranks(rec, scores), 0)
    seen: dict[tuple[float, float], int] = {}
    xs, ys = [], []
    for k, (x, y) in enumerate(zip(rel, rec, strict=True)):
        n = seen.get((x, y), 0)
        seen[(x, y)] = n + 1
        xs.append(x + (_jitter(k, 0.02) if n else 0.0))
        ys.append(y + (_jitter(k + 7, 0.02) if n else 0.0))
    return _Points(xs, ys, sum(n - 1 for n in seen.values() if n > 1))


def _status_markers(
    scored: Sequence[Decision], decisions: Sequence[Decision], points: _Points
) -> list[go.Scatter]:
    """One trace of markers a status: size = tokens, symbol = the strongest signal."""
    where = {id(d): (x, y) for d, x, y in zip(scored, points.xs, points.ys, strict=True)}
    biggest = max(d.tokens_before for d in scored)
    # many markers: smaller, so the ones under them still show
    size_scale = 1.0 if len(scored) <= 100 else 0.6
    index = {id(d): i for i, d in enumerate(decisions)}
    out = []
    for status in STATUS_ORDER:
        group = [d for d in scored if d.status.value == status]
        if not group:
            continue
        out.append(
            go.Scatter(
                x=[where[id(d)][0] for d in group],
                y=[where[id(d)][1] for d in group],
                mode="markers",
                name=f"{status} ({len(group)})",
                marker={
                    "size": [size_scale * _marker_size(d.tokens_before, biggest) for d in group],
                    "symbol": [
                        SIGNAL_SYMBOLS.get(strongest_signal(d) or "", "circle") for d in group
                    ],
                    "color": STATUS_COLORS[status],
                    "opacity": 0.75,
                    "line": {"color": "#ffffff", "width": 0.5},
                },
                hovertext=[decision_hover(d) for d in group],
                hoverinfo="text",
                # The decision's index, not its id: raw packet text never enters a figure.
                customdata=[index[id(d)] for d in group],
            )
        )
    return out


def _signal_legend(fired: set[str | None]) -> list[go.Scatter]:
    """A legend entry per marker shape in use (no points of its own)."""
    return [
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            name=f"strongest signal: {SIGNAL_NAMES[name]}",
            marker={"symbol": symbol, "color": "#777", "size": 10},
            hoverinfo="skip",
        )
        for name, symbol in SIGNAL_SYMBOLS.items()
        if name in fired
    ]


def _add_threshold(fig: go.Figure, min_rel: float, rel: Sequence[float], ranked: bool) -> None:
    """``min_relevance`` as a dashed vertical line; on rank axes between the last packet below
    it and the first at or above it, and none when all are on one side."""
    below = sum(1 for v in rel if v < min_rel)
    line_x = (below - 0.5) / max(1, len(rel) - 1) if ranked else min_rel
    if ranked and not 0 < below < len(rel):
        return
    fig.add_vline(
        x=line_x,
        line={"color": "#555", "dash": "dash", "width": 1.5},
        annotation_text=f"min_relevance {min_rel:g}",
        # the label reads away from the nearer edge (at 0.05 it was cut on the left)
        annotation_position="top right" if line_x < 0.5 else "top left",
    )


def _cutoff_line(cutoff: float, weights: tuple[float, float], note: str) -> go.Scatter | None:
    """The iso-score line ``w_rel·relevance + w_rec·recency = cutoff`` where it crosses the
    plot; None when it passes outside."""
    w_rel, w_rec = weights
    lx = [i / 50 for i in range(51)]
    ly = [(cutoff - w_rel * x) / w_rec for x in lx]
    pts = [(x, y) for x, y in zip(lx, ly, strict=True) if -0.05 <= y <= 1.05]
    if not pts:
        return None
    return go.Scatter(
        x=[p[0] for p in pts],
        y=[p[1] for p in pts],
        mode="lines",
        name=note,
        line={"color": "#d64541", "dash": "dot", "width": 1.5},
        hovertext=[f"{note}: {w_rel:g}·relevance + {w_rec:g}·recency = {cutoff:.3f}"] * len(pts),
        hoverinfo="text",
    )


def _add_cutoff(fig: go.Figure, trace: Trace, ranked: bool) -> str:
    """The score cut-off: drawn as its line when the score is a plain weighted sum of the two
    value axes; returns what the subtitle says of it ("" when the fill let no scored packet
    in)."""
    decisions = trace.result.decisions if trace.result is not None else []
    cutoff = score_cutoff(decisions)
    if cutoff is None:
        return ""
    note = f"score cut-off {cutoff:.3f}"
    if ranked:
        return note + " (no line on rank axes)"
    weights = score_weights(trace)
    if weights is None or weights[1] <= 0 or not _is_linear(decisions, *weights):
        return note + " (score is not a plain weighted sum here; line not drawn)"
    line = _cutoff_line(cutoff, weights, note)
    if line is not None:
        fig.add_trace(line)
    return note


def _scatter_subtitle(
    scored: int, hidden: int, fired: bool, ranked: bool, jittered: int, cut_note: str
) -> str:
    """What the chart shows and leaves out, in lines of twice ``LINE_CHARS``."""
    sub = [f"{scored} scored packets", "size = tokens"]
    if fired:
        sub.append("marker = strongest signal")
    if ranked:
        sub.append("axes: ranks (ties by score), hover for the values")
    elif jittered:
        sub.append(f"{jittered} on a shared spot, jittered")
    if hidden:
        sub.append(f"{hidden} without relevance/recency not shown")
    if cut_note:
        sub.append(cut_note)
    return wrap_lines(sub, width=2 * LINE_CHARS)


def score_scatter(trace: Trace, axes: str = "values") -> go.Figure:
    """Relevance × recency per packet; size = tokens, colour = status, marker = the
    strongest signal that fired for it (ctxscope preset).

    ``axes="values"`` plots the signals' values, packets on the very same spot spread by a
    small fixed jitter, with the ``min_relevance`` threshold as a vertical line and the score
    cut-off (the lowest score the fill still let in) as the iso-score line when the score is
    a plain weighted sum of the two axes. ``axes="ranks"`` plots each packet's rank by
    relevance against its rank by recency (ties ordered by score): every packet gets a place
    of its own however many share a value (``score_axes`` picks it for crowded builds); the
    threshold is then where the ranks cross it, and the hover keeps the real values.
    """
    title = "Packet scores"
    if trace.result is None:
        return empty_figure(title, NO_RESULT)
    if axes not in AXES:
        raise ValueError(f"axes must be one of {AXES}, not {axes!r}")
    decisions = trace.result.decisions
    scored = _scored(trace)
    if not scored:
        return empty_figure(title, "No packet in this build has both a relevance and a recency.")
    ranked = axes == "ranks"
    points = _place(scored, ranked)
    fig = go.Figure()
    fig.add_traces(_status_markers(scored, decisions, points))
    fired = {strongest_signal(d) for d in scored} - {None}
    fig.add_traces(_signal_legend(fired))
    if trace.config.min_relevance is not None:
        rel = [float(d.relevance or 0.0) for d in scored]
        _add_threshold(fig, trace.config.min_relevance, rel, ranked)
    cut_note = _add_cutoff(fig, trace, ranked)
    subtitle = _scatter_subtitle(
        len(scored), len(decisions) - len(scored), bool(fired), ranked, points.jittered, cut_note
    )
    lines = line_count(subtitle)
    label = "rank by {}" if ranked else "{}"
    fig.update_layout(
        title=top_title(title, subtitle),
        height=440 + 17 * lines,
        margin={"l": 10, "r": 10, "t": 55 + 17 * lines, "b": 40},
        xaxis={"title": label.format("relevance"), "range": [-0.05, 1.05]},
        yaxis={"title": label.format("recency"), "range": [-0.05, 1.1]},
        legend={"title": "status"},
        **LAYOUT,
    )
    return fig
