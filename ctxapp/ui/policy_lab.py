"""The policy lab of the Replay page (docs/design.md, "The app", Replay): what it computes and
draws, apart from the widgets.

Policies are settings patches (a preset and the knobs set away from its defaults, as
``ctxscope replay --preset P --set k=v`` takes them) evaluated on one session's recorded
turns by ``ctxcore.replay.evaluate``; the lab shows its scores side by side, plots cost
against recall, sweeps two knobs of one policy into a grid, and turns a row or a cell into
the Playground's link parameters for one turn. Every figure's text that a user or a trace
typed (a policy's label holds knob values such as ``placeholder``) goes through
``figures.esc``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ctxapp.ui import views
from ctxcore import knobs as registry
from ctxcore.cli.tune_policy import default_grid, winner
from ctxcore.cost import PriceTable
from ctxcore.figures.common import LAYOUT, esc, legend_marker, wrap_words
from ctxcore.models import Trace
from ctxcore.pipeline.recorded import RECORDED_BASED
from ctxcore.replay.evaluate import RECORDED, PolicyScore, TurnScore, evaluate
from ctxcore.replay.variants import INPUT_FACTS, variant
from ctxcore.settings import PRESET_NAMES

#: the policies offered: the presets on the recorded request first
#: (docs/design.md, "recorded"), the ``recorded`` rebuild itself, then ctxscope's own presets
POLICIES: tuple[str, ...] = (
    *(p for p in PRESET_NAMES if p in RECORDED_BASED and p != "recorded"),
    "recorded",
    *(p for p in PRESET_NAMES if p not in RECORDED_BASED),
)
#: three published policies a first visit compares (the issue's "compare three policies")
DEFAULT_POLICIES: tuple[str, ...] = (
    "anthropic-context-editing",
    "swe-agent-masking",
    "openhands-observation-masking",
)
#: the recall floor the heatmap marks by default (``ctxscope tune``'s default)
DEFAULT_FLOOR = 0.9
#: the most cells one grid may have (a grid of every pair of 4-value knobs is 16)
MAX_CELLS = 64
BASELINE_COLOR = "#666666"
POLICY_COLOR = "#0072b2"
BELOW_COLOR = "#d55e00"
STAR_COLOR = "#e69f00"


def knob_names(preset: str) -> list[str]:
    """The knobs the lab offers for ``preset``: every one it honours but the tokenizer (a
    rebuild keeps the recorded one), the input's facts and the per-partition shares."""
    return [
        n
        for n in registry.honoured(preset)
        if n != "tokenizer" and n not in INPUT_FACTS and registry.BY_NAME[n].kind != "shares"
    ]


def default_of(preset: str, name: str) -> Any:
    """A knob's default in ``preset`` as a control holds it (None: the preset computes it)."""
    d = registry.BY_NAME[name].defaults[preset]
    if isinstance(d, registry.Derived):
        return None
    return list(d) if isinstance(d, tuple) else d


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b))
    return bool(a == b)


def policy(preset: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings patch of ``preset`` with the controls' ``values``: only the knobs set
    away from the preset's default (a computed default left empty stays computed)."""
    out: dict[str, Any] = {"preset": preset}
    for name in knob_names(preset):
        v, d = values.get(name), default_of(preset, name)
        if v is None or _same(v, d) or (d is None and v == []):
            continue  # at the default; an empty list whose default is computed: computed
        spec = registry.BY_NAME[name]
        out[name] = int(v) if spec.kind == "int" else round(float(v), 6) if spec.numeric else v
    return out


def run_key(session_id: str, version: int, policies: Sequence[Mapping[str, Any]]) -> str:
    """What an evaluation was of: the session, the store's version and the policies."""
    return json.dumps([session_id, version, list(policies)], sort_keys=True, default=str)


def recorded_turns(traces: Sequence[Trace]) -> list[Trace]:
    """The session's recorded turns (not the replay variants a store may hold beside them)."""
    return [t for t in traces if "replay" not in t.tags and t.result is not None]


def run(
    traces: Sequence[Trace],
    policies: Sequence[Mapping[str, Any]],
    prices: PriceTable,
    progress: Callable[[int, int], None] | None = None,
) -> list[PolicyScore]:
    """The recording as sent, then each policy, scored on the session (``evaluate`` in this
    process: one session is faster here than through a pool)."""
    return evaluate(
        recorded_turns(traces), [dict(p) for p in policies], prices, workers=1, progress=progress
    )


# --------------------------------------------------------------------------- the table


def scores_frame(scores: Sequence[PolicyScore]) -> pd.DataFrame:
    """The policies side by side, the recording as sent first: the figures as ``evaluate``
    computes them (the table's formats round them, the cells hold them whole)."""
    base = scores[0]
    rows = []
    for s in scores:
        usd, base_usd = s.cost_usd, base.cost_usd
        rows.append(
            {
                "policy": s.label,
                "$ with the cache": usd,
                "recall": s.recall,
                "Δ $": None if usd is None or base_usd is None else usd - base_usd,
                "input tokens": s.input_tokens,
                "Δ tokens": s.input_tokens - base.input_tokens,
                "cache breaks": s.cache_breaks,
                "losses": s.losses,
                "findings introduced": s.findings_added,
                "turns not replayed": len(s.errors),
            }
        )
    return pd.DataFrame(rows)


#: the policies' markers: open shapes, each smaller than the one before, so policies that land
#: on the same spot (a policy that changed nothing sits on the baseline) show as nested rings
SYMBOLS = ("circle-open", "square-open", "triangle-up-open", "diamond-open", "star-open")
POLICY_COLORS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9")


def _recall_axis(placed: Sequence[PolicyScore]) -> dict[str, Any]:
    """Recall from a round value below the lowest to 100 % (no tick beyond it)."""
    low = min(100 * (s.recall or 0.0) for s in placed) if placed else 0.0
    start = max(0.0, math.floor((min(low, 99.0) - 1) / 5) * 5)
    step = 1 if 100 - start <= 10 else 5 if 100 - start <= 40 else 10
    return {
        "range": [start, 100.9],
        "tickvals": list(range(int(start), 101, step)),
        "ticksuffix": "%",
    }


def row_text(base: PolicyScore, s: PolicyScore) -> str:
    """A policy's row whole, as plain text: its figures and their change against the
    recording as sent."""
    usd = "$?" if s.cost_usd is None else f"${s.cost_usd:.4f}"
    if s.cost_usd is not None and base.cost_usd is not None and s is not base:
        usd += f" ({s.cost_usd - base.cost_usd:+.4f})"
    rec = "no recall (no reply used its prompt)" if s.recall is None else f"{s.recall:.1%}"
    tokens = f"{s.input_tokens:,}"
    if s is not base:
        tokens += f" ({s.input_tokens - base.input_tokens:+,})"
    return "\n".join(
        [
            s.label,
            f"$ with the cache: {usd}",
            f"recall: {rec}",
            f"input tokens: {tokens}",
            f"cache breaks: {s.cache_breaks} · losses: {s.losses} · findings introduced: "
            f"{s.findings_added} · turns not replayed: {len(s.errors)}",
        ]
    )


def cost_recall_figure(scores: Sequence[PolicyScore]) -> go.Figure:
    """Cost with the cache against recall, one point per policy, the recording as sent
    marked apart (a filled grey diamond): cheaper is lower, more recall is right. Each
    policy is named in the legend (and on hover), not beside its point: points often fall
    together."""
    placed = [s for s in scores if s.cost_usd is not None and s.recall is not None]
    data: list[go.Scatter] = []
    others = 0
    for s in placed:
        base = s.label == RECORDED
        if base:
            marker = {"size": 10, "symbol": "diamond", "color": BASELINE_COLOR}
        else:
            marker = {
                "size": max(12, 24 - 4 * others),
                "symbol": SYMBOLS[others % len(SYMBOLS)],
                "color": POLICY_COLORS[others % len(POLICY_COLORS)],
                "line": {"width": 2},
            }
            others += 1
        data.append(
            go.Scatter(
                x=[100 * (s.recall or 0.0)],
                y=[s.cost_usd],
                mode="markers",
                name=("baseline: " if base else "") + wrap_words(s.label),
                hovertext=[
                    f"{esc(s.label)}<br>${s.cost_usd:.4f} with the cache<br>"
                    f"recall {100 * (s.recall or 0.0):.1f}%<br>{s.input_tokens:,} input tokens"
                ],
                hoverinfo="text",
                cliponaxis=False,
                marker=marker,
            )
        )
    fig = go.Figure(data)
    fig.update_layout(
        title="Cost against recall (%)",
        xaxis=_recall_axis(placed),
        yaxis={"title": "$ with the cache", "tickprefix": "$", "rangemode": "tozero"},
        height=360 + 22 * len(placed),
        legend={"orientation": "h", "yanchor": "top", "y": -0.18},
        margin={"t": 50, "b": 10},
        **LAYOUT,
    )
    return fig


def on_the_baseline(scores: Sequence[PolicyScore]) -> list[str]:
    """The policies the chart draws on the recording's own spot (the same $ and recall)."""
    base = scores[0]
    if base.cost_usd is None or base.recall is None:
        return []
    return [
        s.label
        for s in scores[1:]
        if s.cost_usd is not None
        and s.recall is not None
        and math.isclose(s.cost_usd, base.cost_usd)
        and math.isclose(s.recall, base.recall)
    ]


def unplaced(scores: Sequence[PolicyScore]) -> list[str]:
    """The policies the chart cannot place: no known cost (a model without a price) or no
    recall (no reply used anything of its prompt)."""
    return [s.label for s in scores if s.cost_usd is None or s.recall is None]


def telling_turn(base: PolicyScore, score: PolicyScore) -> TurnScore | None:
    """The turn where ``score``'s policy changed the most input tokens against the
    recording (ties: the later turn); its last turn when it changed none."""
    sent = {(t.session_id, t.turn): t.input_tokens for t in base.turns}
    if not score.turns:
        return None

    def changed(k: int) -> tuple[int, int]:
        t = score.turns[k]
        return abs(sent.get((t.session_id, t.turn), t.input_tokens) - t.input_tokens), k

    return score.turns[max(range(len(score.turns)), key=changed)]


def turn_label(base: PolicyScore, t: TurnScore) -> str:
    """A turn in the "open in Playground" picker: its tokens against the recording, its
    losses and what of the reply's needs it lost."""
    sent = {(b.session_id, b.turn): b.input_tokens for b in base.turns}
    delta = t.input_tokens - sent.get((t.session_id, t.turn), t.input_tokens)
    return f"turn {t.turn} · {delta:+,} tokens · {t.losses} loss(es)" + (
        f" · {len(t.lost)} needed item(s) lost" if t.lost else ""
    )


def playground_params(trace: Trace, settings: Mapping[str, Any]) -> dict[str, str]:
    """The Playground's link parameters that rebuild ``trace`` exactly as the evaluation
    did: the config ``replay`` resolves for it (``variants.variant``: another preset's
    defaults, the recorded tokenizer kept for a preset on the recorded request)."""
    cfg = variant(trace, dict(settings)).config
    return {"trace": trace.trace_id, **views.config_to_params(cfg)}


# --------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class Grid:
    """Two knobs of one policy swept; the policy's other knobs as ``base`` sets them."""

    base: dict[str, Any]
    x: str
    xs: tuple[Any, ...]
    y: str
    ys: tuple[Any, ...]

    @property
    def preset(self) -> str:
        return str(self.base["preset"])

    def policies(self) -> list[dict[str, Any]]:
        """The cells' settings, row by row (``y`` outer, ``x`` inner)."""
        return [{**self.base, self.x: xv, self.y: yv} for yv in self.ys for xv in self.xs]

    def cell(self, k: int) -> tuple[Any, Any]:
        """The (x, y) values of the ``k``-th cell of ``policies``."""
        return self.xs[k % len(self.xs)], self.ys[k // len(self.xs)]


def grid_knobs(preset: str, sizes: Sequence[int] = ()) -> list[str]:
    """The knobs of ``preset`` a grid may sweep: those ``ctxscope tune`` searches by default
    on calls of ``sizes`` input tokens (``default_grid``), then its other numeric knobs with
    a default of their own (a count the preset computes has no values to start from)."""
    tuned = list(default_grid(preset, sizes))
    rest = [
        n
        for n in knob_names(preset)
        if registry.BY_NAME[n].numeric and n not in tuned and default_of(preset, n) is not None
    ]
    return tuned + rest


def grid_values(preset: str, name: str, sizes: Sequence[int] = ()) -> str:
    """The values offered for a grid axis, as text: ``ctxscope tune``'s default grid for the
    knob on calls of ``sizes`` input tokens (a trigger at their quartiles: it fires on the
    larger calls), else its default alone."""
    values = default_grid(preset, sizes).get(name) or [default_of(preset, name)]
    return ", ".join(_shown(v) for v in values if v is not None)


def _shown(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _cell_text(s: PolicyScore, floor: float) -> str:
    usd = "$?" if s.cost_usd is None else f"${s.cost_usd:.4f}"
    rec = "recall –" if s.recall is None else f"{100 * s.recall:.1f}%"
    below = s.recall is None or s.recall < floor
    return f"{usd}<br>{rec}" + (" ✗" if below else "")


def _frames(below: Sequence[int], nx: int) -> list[dict[str, Any]]:
    """A vermillion frame inside each cell below the floor (its colour and text stay
    readable; a mark drawn over the cell hid its text)."""
    pad = 0.06
    return [
        {
            "type": "rect",
            "x0": k % nx - 0.5 + pad,
            "x1": k % nx + 0.5 - pad,
            "y0": k // nx - 0.5 + pad,
            "y1": k // nx + 0.5 - pad,
            "line": {"color": BELOW_COLOR, "width": 3},
            "layer": "above",
        }
        for k in below
    ]


def heatmap_figure(grid: Grid, cells: Sequence[PolicyScore], floor: float) -> go.Figure:
    """The grid coloured by $ with the cache, each cell reading its $ and recall; a cell
    below the recall ``floor`` framed in vermillion and its text marked ✗, the cheapest cell
    at or above it starred in its corner. The axes are the cells' positions, labelled with
    the knobs' values (a mark can then sit in a corner of its cell)."""
    nx = len(grid.xs)
    xs = [_shown(v) for v in grid.xs]
    ys = [_shown(v) for v in grid.ys]
    rows = [cells[j * nx : (j + 1) * nx] for j in range(len(grid.ys))]
    heat = go.Heatmap(
        z=[[s.cost_usd for s in r] for r in rows],
        x=list(range(nx)),
        y=list(range(len(ys))),
        text=[[_cell_text(s, floor) for s in r] for r in rows],
        texttemplate="%{text}",
        hovertext=[
            [
                f"{esc(grid.x)} = {xs[i]}<br>{esc(grid.y)} = {ys[j]}<br>{_cell_text(s, floor)}"
                f"<br>{s.input_tokens:,} input tokens · {s.cache_breaks} cache break(s)"
                for i, s in enumerate(r)
            ]
            for j, r in enumerate(rows)
        ],
        hoverinfo="text",
        colorscale="Blues",
        colorbar={"title": {"text": "$"}, "tickprefix": "$"},
        xgap=2,
        ygap=2,
    )
    below = [k for k, s in enumerate(cells) if s.recall is None or s.recall < floor]
    marks = [
        legend_marker(f"recall below {100 * floor:.0f}% (framed, ✗)", BELOW_COLOR, "square-open")
    ]
    best = winner(cells, floor)
    if best is not None:
        marks.append(
            go.Scatter(
                x=[best % nx + 0.36],
                y=[best // nx + 0.3],
                mode="markers",
                name="cheapest at or above the floor",
                marker={"symbol": "star", "size": 14, "color": STAR_COLOR, "line": {"width": 1}},
                hoverinfo="skip",
            )
        )
    fig = go.Figure([heat, *marks])
    fig.update_layout(
        title=f"{esc(grid.preset)}: $ with the cache (recall in each cell)",
        xaxis={"title": esc(grid.x), "tickvals": list(range(nx)), "ticktext": xs},
        yaxis={"title": esc(grid.y), "tickvals": list(range(len(ys))), "ticktext": ys},
        shapes=_frames(below, nx),
        height=max(320, 90 * len(ys) + 170),
        legend={"orientation": "h", "yanchor": "top", "y": -0.28},
        margin={"t": 50, "b": 10},
        **LAYOUT,
    )
    return fig


def cell_label(grid: Grid, k: int, s: PolicyScore) -> str:
    """A cell in the "open in Playground" picker: its two values, $ and recall."""
    x, y = grid.cell(k)
    usd = "?" if s.cost_usd is None else f"{s.cost_usd:.4f}"
    rec = "–" if s.recall is None else f"{100 * s.recall:.1f}%"
    return f"{grid.x}={_shown(x)} · {grid.y}={_shown(y)} · ${usd} · recall {rec}"


__all__ = [
    "DEFAULT_FLOOR",
    "DEFAULT_POLICIES",
    "MAX_CELLS",
    "POLICIES",
    "Grid",
    "cell_label",
    "cost_recall_figure",
    "default_of",
    "grid_knobs",
    "grid_values",
    "heatmap_figure",
    "knob_names",
    "on_the_baseline",
    "playground_params",
    "policy",
    "recorded_turns",
    "row_text",
    "run",
    "run_key",
    "scores_frame",
    "telling_turn",
    "turn_label",
    "unplaced",
]
