"""Plotly figure builders for the debugger and the HTML report.

They take a ``Trace`` (or plain rows) and return a ``go.Figure``; nothing here imports
Streamlit, so the app, the offline HTML report and the tests draw the same pictures.

Every string that comes from a trace (packet ids, kinds, reason sentences, session ids)
is untrusted: plotly renders hover text, tick labels and annotations as a small subset
of HTML (``<b>``, ``<br>``, ``<a href>``...), so such strings go through ``esc`` before
they reach a figure. Our own fixed labels may use ``<br>``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from ctxcore.models import PARTITIONS, Decision, Status, Trace

#: One colour per decision status, used by every figure so the legend means one thing:
#: the Okabe-Ito palette, told apart with any colour vision (docs/design.md, "The app").
STATUS_COLORS: dict[str, str] = {
    Status.KEPT.value: "#009e73",
    Status.TRUNCATED.value: "#e69f00",
    Status.SUMMARIZED.value: "#0072b2",
    Status.DROPPED.value: "#d55e00",
    Status.FILTERED.value: "#999999",
    Status.NOT_RENDERED.value: "#cc79a7",
}
STATUS_ORDER: tuple[str, ...] = tuple(s.value for s in Status)
#: in / not in the window (Sweep's watch map): the kept and dropped colours
IN_COLOR = STATUS_COLORS[Status.KEPT.value]
OUT_COLOR = STATUS_COLORS[Status.DROPPED.value]

#: Partitions are told apart by lightness within one slate-violet hue that no status uses,
#: so green, orange, blue, vermillion, grey and pink mean a status on every page (red on
#: Inspect meant [Evidence] while it meant "dropped" on the Timeline).
PARTITION_COLORS: dict[str, str] = {
    "[Role & Policies]": "#3f3f74",
    "[Task]": "#5e5e9c",
    "[State]": "#7d7dbf",
    "[Evidence]": "#4a4a4a",
    "[Context]": "#a3a3d6",
    "[Output]": "#6b6b6b",
}
_OTHER_COLORS = ("#c4c4e6", "#8a8aa8", "#b8b8b8", "#2f2f4f")
RESERVE_COLOR = "#b0b0b0"
SAFETY_COLOR = "#d9d9d9"
FREE_COLOR = "#f4f4f4"
OVER_COLOR = "#b22222"

#: hello-agents 0.2.8 has no weights in its config: 0.7 × relevance + 0.3 × recency is fixed.
_FIXED_WEIGHTS = {"hello-agents": (0.7, 0.3)}

_LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "font": {"family": "sans-serif", "size": 13},
    "hoverlabel": {"align": "left"},
}


def esc(text: object, limit: int = 300) -> str:
    """Untrusted text made safe for plotly's pseudo-HTML: shortened, then escaped."""
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=True)


def _partition_color(name: str, i: int) -> str:
    return PARTITION_COLORS.get(name, _OTHER_COLORS[i % len(_OTHER_COLORS)])


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title,
        xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[
            {
                "text": message,
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "font": {"size": 14, "color": "#666"},
            }
        ],
        height=220,
        **_LAYOUT,
    )
    return fig


def _pct(n: int, of: int) -> str:
    return f"{100.0 * n / of:.1f}%" if of else "–"


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
            segs.append((p.name, p.used, _partition_color(p.name, i)))
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


#: plotly templates as plain dicts, by name (``_template``)
_TEMPLATES: dict[str, dict[str, Any]] = {}


def _template(name: str) -> dict[str, Any]:
    """A named plotly template as a plain dict, read once."""
    if name not in _TEMPLATES:
        import plotly.io as pio

        _TEMPLATES[name] = pio.templates[name].to_plotly_json()
    return _TEMPLATES[name]


def _unchecked(data: list[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    """A figure from plain dicts, without plotly.py's property-by-property validation.

    Validating a dozen-trace figure costs ~60 ms, twice what the Playground's re-run of a
    2,000-packet trace costs, on every knob move (docs/design.md, "The app"). The dicts come
    from this module's own code (trace text goes through ``esc``); a test checks that
    plotly's validation returns them unchanged. A template name becomes its dict here, as
    validation would have made it.
    """
    lay = dict(layout)
    if isinstance(lay.get("template"), str):
        lay["template"] = _template(lay["template"])
    return go.Figure({"data": data, "layout": lay}, _validate=False)


#: characters in a line of a title or subtitle: plotly never wraps them, and a half-width
#: chart at 1024 px holds about this many before its edge cuts the line
LINE_CHARS = 40


def _lines(parts: Sequence[str], sep: str = " · ", width: int = LINE_CHARS) -> str:
    """``parts`` (escaped already) joined by ``sep`` in lines of at most ``width`` characters
    where a part allows it, ``<br>`` between the lines."""
    lines: list[str] = []
    for part in parts:
        if lines and len(html.unescape(lines[-1] + sep + part)) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return "<br>".join(lines)


def _top_title(title: str, subtitle: str) -> dict[str, Any]:
    """A title held at the figure's top edge, its subtitle's lines growing downwards into the
    top margin (a title placed by plotly sits in the middle of the margin, and a subtitle of
    several lines then ran into the plot)."""
    return {
        "text": title,
        "subtitle": {"text": subtitle},
        "y": 1,
        "yref": "container",
        "yanchor": "top",
        "pad": {"t": 12},
    }


def _legend_rows(entries: int, per_row: int = 2) -> int:
    """Rows a horizontal legend of ``entries`` takes in the narrowest chart that shows it
    (two entries a row at 300 px)."""
    return -(-entries // per_row)


def window_bar(
    trace: Trace, x_max: int | None = None, note: str | None = None, legend: bool = True
) -> go.Figure:
    """One horizontal bar for the whole context window: where every token went.

    ``x_max`` puts two bars on one scale (Compare); ``note`` is a line under the subtitle
    (the Playground names the packets that flipped); ``legend=False`` for a half-width
    column, where a wrapped legend would cover the bar (segments keep labels and hover)."""
    title = "Context window"
    if trace.result is None:
        return _empty(title, "This trace has no build result (captured input only).")
    t = trace.result.totals
    data = [
        {
            "type": "bar",
            "x": [n],
            "y": ["window"],
            "orientation": "h",
            "name": esc(label),
            "marker": {"color": color, "line": {"color": "#ffffff", "width": 1}},
            "hovertext": [f"{esc(label)}: {n:,} tokens ({_pct(n, t.window)} of the window)"],
            "hoverinfo": "text",
            "text": [esc(label) if t.window and n / t.window > 0.08 else ""],
            "textposition": "inside",
            "insidetextanchor": "middle",
        }
        for label, n, color in window_segments(trace)
    ]
    subtitle = _lines(
        [
            f"window {t.window:,}",
            f"available {t.available:,}",
            f"used {t.used:,} ({_pct(t.used, t.available)})",
            f"tokenizer {esc(t.tokenizer)}",
        ]
    )
    if note:
        subtitle += "<br>" + _lines(esc(note).split(" "), sep=" ")
    lines = subtitle.count("<br>") + 1
    # a bar with its legend is never narrower than ~440 px (Compare's half-width bars have
    # none), where three entries fit a row
    rows = _legend_rows(len(data), per_row=3) if legend else 0
    layout = {
        "barmode": "stack",
        "title": _top_title(title, subtitle),
        # the bar keeps its 70 px whatever the title's and legend's lines take
        "height": 150 + 17 * lines + 20 * rows,
        "margin": {"l": 10, "r": 10, "t": 50 + 17 * lines, "b": 30 + 20 * rows},
        "yaxis": {"visible": False},
        "xaxis": {"range": [0, x_max or window_extent(trace)], "ticksuffix": " tok"},
        # under the tick labels (32 px under the 70 px bar), its top edge anchored: a legend
        # anchored by its bottom grew upwards over the tick labels
        "legend": {"orientation": "h", "y": -0.45, "yanchor": "top", "traceorder": "normal"},
        "showlegend": legend,
        **_LAYOUT,
    }
    return _unchecked(data, layout)


def partition_budgets(trace: Trace) -> go.Figure:
    """Budget vs used per partition (partitions without a budget show used only), one
    horizontal bar a partition: the names read across, never turned or run together in a
    half-width column."""
    title = "Partitions: budget vs used"
    if trace.result is None:
        return _empty(title, "This trace has no build result (captured input only).")
    parts = trace.result.partitions
    names = [esc(p.name) for p in parts]
    budgets = [p.budget if p.budget is not None else None for p in parts]
    used = [p.used for p in parts]
    colors = [
        OVER_COLOR if p.budget is not None and p.used > p.budget else _partition_color(p.name, i)
        for i, p in enumerate(parts)
    ]
    fig = go.Figure()
    if any(b is not None for b in budgets):
        fig.add_trace(
            go.Bar(
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
        )
    fig.add_trace(
        go.Bar(
            y=names,
            x=used,
            orientation="h",
            name="used",
            marker={"color": colors},
            hovertext=[
                f"{n}: used {u:,} tokens in {p.items} item(s)"
                + (f" of a {p.budget:,} budget ({_pct(u, p.budget)})" if p.budget else "")
                for n, u, p in zip(names, used, parts, strict=True)
            ],
            hoverinfo="text",
            text=[f"{u:,}" for u in used],
            textposition="outside",
            cliponaxis=False,
        )
    )
    caps = [b for b in budgets if b is not None]
    avail = trace.result.totals.available
    if not caps:
        note = "this preset sets no budget per partition: used only"
    elif avail > 0 and sum(caps) > avail:
        note = (
            f"the caps add up to {sum(caps):,} tokens, {100 * sum(caps) / avail:.0f}% of the "
            f"{avail:,} available: they overlap, not every partition can reach its cap"
        )
    else:
        note = f"the caps add up to {sum(caps):,} of the {avail:,} tokens available"
    subtitle = _lines(esc(note).split(" "), sep=" ")
    lines = subtitle.count("<br>") + 1
    top = 50 + 17 * lines
    rows = 28 * len(parts)
    reach = max([*used, *caps, 1])
    fig.update_layout(
        barmode="overlay",
        title=_top_title(title, subtitle),
        height=top + rows + 100,
        margin={"l": 10, "r": 10, "t": top, "b": 100},
        # room on the right for the longest bar's number
        xaxis={"title": "tokens", "range": [0, reach * 1.2]},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "y": -72 / rows, "yanchor": "top"},
        **_LAYOUT,
    )
    return fig


# --------------------------------------------------------------------------- scores


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
        return _empty(title, "This trace has no build result (captured input only).")
    if axes not in AXES:
        raise ValueError(f"axes must be one of {AXES}, not {axes!r}")
    decisions = trace.result.decisions
    scored = _scored(trace)
    if not scored:
        return _empty(title, "No packet in this build has both a relevance and a recency.")
    ranked = axes == "ranks"
    rel = [float(d.relevance or 0.0) for d in scored]
    rec = [float(d.recency or 0.0) for d in scored]
    if ranked:
        scores = [float(d.score or 0.0) for d in scored]
        xs, ys = _ranks(rel, scores), _ranks(rec, scores)
    else:
        seen: dict[tuple[float, float], int] = {}
        xs, ys = [], []
        for k, (x, y) in enumerate(zip(rel, rec, strict=True)):
            n = seen.get((x, y), 0)
            seen[(x, y)] = n + 1
            # the first packet on a spot stays on it; the others spread around it
            xs.append(x + (_jitter(k, 0.02) if n else 0.0))
            ys.append(y + (_jitter(k + 7, 0.02) if n else 0.0))
    where = {id(d): (x, y) for d, x, y in zip(scored, xs, ys, strict=True)}
    biggest = max(d.tokens_before for d in scored)
    # many markers: smaller, so the ones under them still show
    size_scale = 1.0 if len(scored) <= 100 else 0.6
    fig = go.Figure()
    index = {id(d): i for i, d in enumerate(decisions)}
    for status in STATUS_ORDER:
        group = [d for d in scored if d.status.value == status]
        if not group:
            continue
        fig.add_trace(
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
    fired = {strongest_signal(d) for d in scored} - {None}
    for name, symbol in SIGNAL_SYMBOLS.items():
        if name in fired:  # a legend entry per marker shape in use (no points of its own)
            fig.add_trace(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    name=f"strongest signal: {SIGNAL_NAMES[name]}",
                    marker={"symbol": symbol, "color": "#777", "size": 10},
                    hoverinfo="skip",
                )
            )
    min_rel = trace.config.min_relevance
    if min_rel is not None:
        # in ranks: between the last packet below the threshold and the first at or above it
        below = sum(1 for v in rel if v < min_rel)
        line_x = (below - 0.5) / max(1, len(rel) - 1) if ranked else min_rel
        if not ranked or 0 < below < len(rel):
            fig.add_vline(
                x=line_x,
                line={"color": "#555", "dash": "dash", "width": 1.5},
                annotation_text=f"min_relevance {min_rel:g}",
                # the label reads away from the nearer edge (at 0.05 it was cut on the left)
                annotation_position="top right" if line_x < 0.5 else "top left",
            )
    cutoff = score_cutoff(decisions)
    weights = score_weights(trace)
    cut_note = ""
    if cutoff is not None:
        cut_note = f"score cut-off {cutoff:.3f}"
        if ranked:
            cut_note += " (no line on rank axes)"
        elif weights is not None and weights[1] > 0 and _is_linear(decisions, *weights):
            w_rel, w_rec = weights
            lx = [i / 50 for i in range(51)]
            ly = [(cutoff - w_rel * x) / w_rec for x in lx]
            pts = [(x, y) for x, y in zip(lx, ly, strict=True) if -0.05 <= y <= 1.05]
            if pts:
                fig.add_trace(
                    go.Scatter(
                        x=[p[0] for p in pts],
                        y=[p[1] for p in pts],
                        mode="lines",
                        name=cut_note,
                        line={"color": "#d64541", "dash": "dot", "width": 1.5},
                        hovertext=[
                            f"{cut_note}: {w_rel:g}·relevance + {w_rec:g}·recency = {cutoff:.3f}"
                        ]
                        * len(pts),
                        hoverinfo="text",
                    )
                )
        else:
            cut_note += " (score is not a plain weighted sum here; line not drawn)"
    hidden = len(decisions) - len(scored)
    sub = [f"{len(scored)} scored packets", "size = tokens"]
    if fired:
        sub.append("marker = strongest signal")
    if ranked:
        sub.append("axes: ranks (ties by score), hover for the values")
    elif any(n > 1 for n in seen.values()):
        sub.append(f"{sum(n - 1 for n in seen.values() if n > 1)} on a shared spot, jittered")
    if hidden:
        sub.append(f"{hidden} without relevance/recency not shown")
    if cut_note:
        sub.append(cut_note)
    subtitle = _lines(sub, width=2 * LINE_CHARS)
    lines = subtitle.count("<br>") + 1
    label = "rank by {}" if ranked else "{}"
    fig.update_layout(
        title=_top_title(title, subtitle),
        height=440 + 17 * lines,
        margin={"l": 10, "r": 10, "t": 55 + 17 * lines, "b": 40},
        xaxis={"title": label.format("relevance"), "range": [-0.05, 1.05]},
        yaxis={"title": label.format("recency"), "range": [-0.05, 1.1]},
        legend={"title": "status"},
        **_LAYOUT,
    )
    return fig


# --------------------------------------------------------------------------- tokenizers


def tokenizer_drift(rows: Sequence[Mapping[str, Any]], exact_name: str) -> go.Figure:
    """Per partition: the exact count and each estimator's count, side by side.

    ``rows``: ``{"partition": str, "exact": int, "estimates": {name: int}}``.
    """
    title = "Estimated vs real tokens"
    if not rows:
        return _empty(title, "No partition text to count.")
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
    # not the status colours: green here would read as "kept" elsewhere
    palette = ("#a6761d", "#6f8fa8", "#b07aa1", "#8c8c5a")
    for i, est in enumerate(estimators):
        vals = [int(r["estimates"].get(est, 0)) for r in rows]
        hover = []
        for n, r, v in zip(names, rows, vals, strict=True):
            ex = int(r["exact"])
            err = f"{100.0 * (v - ex) / ex:+.0f}%" if ex else "–"
            hover.append(f"{n}: {v:,} by {esc(est)} ({err} vs {esc(exact_name)})")
        fig.add_trace(
            go.Bar(
                y=names,
                x=vals,
                orientation="h",
                name=esc(est),
                marker={"color": palette[i % len(palette)]},
                hovertext=hover,
                hoverinfo="text",
            )
        )
    # one horizontal group a partition (names read across in a half-width column); the
    # exact count is the reference, each estimator's error against it in the hover
    series = 1 + len(estimators)
    rows_px = len(rows) * max(28, 9 * series + 10)
    subtitle = f"each estimator against {esc(exact_name)}"
    top = 50 + 17
    # room under the axis for the legend one entry a row, as a half-width column at 1024 px
    # draws it (short of room, plotly takes it from the plot and the legend rises into the
    # axis title)
    bottom = 90 + 20 * _legend_rows(series, per_row=1)
    fig.update_layout(
        barmode="group",
        title=_top_title(title, subtitle),
        height=top + rows_px + bottom,
        margin={"l": 10, "r": 10, "t": top, "b": bottom},
        xaxis={"title": "tokens"},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "y": -72 / rows_px, "yanchor": "top"},
        **_LAYOUT,
    )
    return fig


# --------------------------------------------------------------------------- sessions


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
        return _empty(title, "No decisions recorded for this session.")
    order = tuple(colors)
    code = {s: i for i, s in enumerate(order)}
    turns = sorted({int(r["turn"]) for r in rows})
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
    pidx = {p: i for i, p in enumerate(packets)}
    tidx = {t: i for i, t in enumerate(turns)}
    z: list[list[float | None]] = [[None] * len(turns) for _ in packets]
    hover: list[list[str]] = [[""] * len(turns) for _ in packets]
    for r in rows:
        i, j = pidx[str(r["packet_id"])], tidx[int(r["turn"])]
        status = str(r["status"])
        # The centre of colour band k, so that the band edges never decide the colour.
        z[i][j] = code.get(status, len(order) - 1) + 0.5
        hover[i][j] = (
            f"<b>{esc(r['packet_id'], 120)}</b><br>turn {r['turn']} · {esc(r.get('kind', ''))}"
            f"<br>{esc(status)} · {esc(r.get('reason', ''))} · {int(r.get('tokens_after') or 0):,}"
            " tokens"
        )
    n = len(order)
    scale: list[list[Any]] = []
    for k, s in enumerate(order):
        scale.append([k / n, colors[s]])
        scale.append([(k + 1) / n, colors[s]])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(t) for t in turns],
            y=[
                f"{esc(kinds[p], 20)} · {esc(p, 50)}" if group_by_kind else esc(p, 60)
                for p in packets
            ],
            zmin=0,
            zmax=n,
            colorscale=scale,
            hovertext=hover,
            hoverinfo="text",
            xgap=1,
            ygap=1,
            showscale=False,
        )
    )
    if legend:
        _add_status_legend(fig, order, colors)
    tall = len(packets) > _TALL_ROWS
    if tall:  # the turns again under the last rows, where a long chart is read
        fig.add_trace(
            go.Scatter(
                x=[str(t) for t in turns],
                y=[fig.data[0].y[-1]] * len(turns),
                xaxis="x2",
                mode="markers",
                marker={"opacity": 0},
                hoverinfo="skip",
                showlegend=False,
            )
        )
    level, last_gap = 0, -99
    # a label is ~65 px wide: in a half-width chart (~100-250 px of cells) that is up to half
    # the columns, however many there are
    near = max(5, len(turns) // 2)
    for j in range(1, len(turns)):
        if turns[j] != turns[j - 1] + 1:
            fig.add_vline(x=j - 0.5, line={"color": "#222", "width": 2, "dash": "dash"})
            # gaps closer than a label's width take turns on three lines, so their labels
            # never overlap
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
    # 22 px a row keeps ~190 labels apart. The title goes to the very top (the "turn" axis
    # title under it would otherwise run into a long session id at 1024 px) and the legend,
    # where there is one, on lines of its own under it (beside the title, it wrapped over it
    # in a half-width chart)
    height = timeline_height(len(packets)) + (_TIMELINE_LEGEND if legend else 0)
    fig.update_layout(
        title={
            "text": esc(title),
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 10},
        },
        height=height,
        margin={
            "l": 10,
            "r": 10,
            "t": 95 + (_TIMELINE_LEGEND if legend else 0),
            "b": 90 if tall else 60,
        },
        # exact ranges: one column a turn, one row a packet, no padding after the last
        xaxis={
            "title": "turn",
            "type": "category",
            "side": "top",
            "range": [-0.5, len(turns) - 0.5],
        },
        yaxis={
            "range": [len(packets) - 0.5, -0.5],  # the first packet on top
            "type": "category",
            "dtick": 1,
            "tickfont": {"size": 11},
        },
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 1 - 36 / height,
            "yanchor": "top",
            "yref": "container",
        },
        showlegend=legend,
        **_LAYOUT,
    )
    if tall:
        fig.update_layout(
            xaxis2={
                "type": "category",
                "side": "bottom",
                "overlaying": "x",
                "matches": "x",
                "showgrid": False,
            }
        )
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


#: a timeline with more rows than this also labels the turns under its last row
_TALL_ROWS = 25
#: pixels ``timeline_heatmap`` adds on top for its legend (three lines at ~280 px)
_TIMELINE_LEGEND = 60


def timeline_height(rows: int) -> int:
    """The pixel height ``timeline_heatmap`` gives a chart of ``rows`` packet rows."""
    return max(300, min(4400, 22 * rows + 170))


def _add_status_legend(
    fig: go.Figure, statuses: Sequence[str], colors: Mapping[str, str] = STATUS_COLORS
) -> None:
    for s in statuses:  # a legend made of invisible markers
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=s,
                marker={"color": colors[s], "size": 10, "symbol": "square"},
            )
        )


#: ``status_legend``'s height: one line of legend, whole
LEGEND_HEIGHT = 60


def status_legend(statuses: Collection[str] = STATUS_ORDER) -> go.Figure:
    """The status colours alone, one line high: a page shows it above a tall chart that
    scrolls in a box of its own, so what each colour means stays in view."""
    fig = go.Figure()
    _add_status_legend(fig, [s for s in STATUS_ORDER if s in statuses])
    fig.update_layout(
        height=LEGEND_HEIGHT,
        margin={"l": 0, "r": 0, "t": 0, "b": 0},
        xaxis={"visible": False},
        yaxis={"visible": False},
        showlegend=True,
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 0.5,
            "yanchor": "middle",
            "title": {"text": "status", "side": "left"},
            "itemclick": False,
            "itemdoubleclick": False,
        },
        **_LAYOUT,
    )
    return fig


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
        return _empty(title, "No partition usage recorded for this session.")
    turns = sorted({int(r["turn"]) for r in rows})
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
    fig = go.Figure()
    xs = [str(t) for t in turns]
    for i, name in enumerate(names):
        ys = [used.get((name, t), 0) for t in turns]
        fig.add_trace(
            go.Bar(
                x=xs,
                y=ys,
                name=esc(name),
                marker={"color": _partition_color(name, i)},
                hovertext=[
                    f"turn {t}: {esc(name)} {y:,} tokens" for t, y in zip(turns, ys, strict=True)
                ],
                hoverinfo="text",
            )
        )
    if budget:
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[budget.get(t) for t in turns],
                mode="lines+markers",
                name="budget",
                line={"color": "#222", "dash": "dash"},
                hovertext=[f"turn {t}: budget {budget[t]:,}" if t in budget else "" for t in turns],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        barmode="stack",
        title=esc(title),
        height=360,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        xaxis={"title": "turn", "type": "category"},
        yaxis={"title": "tokens"},
        **_LAYOUT,
    )
    return fig


# --------------------------------------------------------------------------- sweep


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
    hover = []
    for j, row in enumerate(z):
        line = []
        for i, v in enumerate(row):
            shown = "–" if v is None else ("in" if v else "out") if binary else f"{v:,.0f}"
            line.append(
                f"{esc(x_label)} = {xs[i]}<br>{esc(y_label)} = {ys[j]}<br>"
                f"{esc(value_label or title)}: {shown}"
            )
        hover.append(line)
    heat = go.Heatmap(
        z=[list(r) for r in z],
        x=xs,
        y=ys,
        hovertext=hover,
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
        for name, color in (("in the window", IN_COLOR), ("not in the window", OUT_COLOR)):
            fig.add_trace(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    name=name,
                    marker={"color": color, "size": 10, "symbol": "square"},
                )
            )
        fig.update_layout(legend={"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"})
    fig.update_layout(
        title=esc(title),
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        xaxis={"title": esc(x_label), "type": "category"},
        yaxis={"title": esc(y_label), "type": "category"},
        **_LAYOUT,
    )
    return fig


__all__ = [
    "PARTITION_COLORS",
    "SIGNAL_NAMES",
    "SIGNAL_SYMBOLS",
    "STATUS_COLORS",
    "decision_hover",
    "esc",
    "partition_budgets",
    "score_cutoff",
    "score_scatter",
    "score_weights",
    "strongest_signal",
    "session_usage",
    "status_legend",
    "sweep_heatmap",
    "timeline_heatmap",
    "tokenizer_drift",
    "window_bar",
    "window_segments",
]


SEVERITY_COLORS: dict[str, str] = {"info": "#8fb3d9", "warning": "#e3a33b", "error": "#c0392b"}
_SEVERITY_LEVEL = {"info": 1, "warning": 2, "error": 3}


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
        return _empty(title, "No turns to diagnose.")
    order = [int(t["turn"]) for t in turns]
    dets = [d for d in detectors if any(f["detector"] == d for t in turns for f in t["findings"])]
    if not dets:
        return _empty(title, "No detector fired in this session.")
    z: list[list[float | None]] = [[None] * len(order) for _ in dets]
    text: list[list[str]] = [[""] * len(order) for _ in dets]
    hover: list[list[str]] = [[""] * len(order) for _ in dets]
    for j, t in enumerate(turns):
        for i, d in enumerate(dets):
            hits = [f for f in t["findings"] if f["detector"] == d]
            if not hits:
                continue
            worst = max(hits, key=lambda f: _SEVERITY_LEVEL.get(str(f["severity"]), 0))
            z[i][j] = _SEVERITY_LEVEL.get(str(worst["severity"]), 1) - 0.5
            text[i][j] = str(len(hits))
            hover[i][j] = f"<b>{esc(d)}</b> · turn {t['turn']}<br>" + "<br>".join(
                f"{esc(f['severity'])}: {esc(f['message'], 160)}" for f in hits[:4]
            )
    scale: list[list[Any]] = []
    for k, sev in enumerate(("info", "warning", "error")):
        scale.append([k / 3, SEVERITY_COLORS[sev]])
        scale.append([(k + 1) / 3, SEVERITY_COLORS[sev]])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(t) for t in order],
            y=[esc(d) for d in dets],
            zmin=0,
            zmax=3,
            colorscale=scale,
            text=text,
            texttemplate="%{text}",
            hovertext=hover,
            hoverinfo="text",
            xgap=1,
            ygap=1,
            showscale=False,
        )
    )
    for sev in ("info", "warning", "error"):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=sev,
                marker={"color": SEVERITY_COLORS[sev], "size": 10, "symbol": "square"},
            )
        )
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
