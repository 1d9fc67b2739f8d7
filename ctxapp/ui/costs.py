"""What the pages show of cost and the prompt cache, prepared without Streamlit
(docs/design.md, "The app").

Two sources, never mixed up: a stored row's recorded usage (``TraceRow`` / ``UsageRow``,
the store's columns: what the provider billed, costed by ``ctxcore.cost``) for the Traces
page, where reading every trace would be too slow; and ``ctxcore.costing``'s ``CallCost``
per call of a session (the simulated cache beside the recorded usage, the break) for
Inspect and the Timeline, drawn by ``ctxcore.figures`` (``cost``) as the HTML report draws
them. An unknown cost is ``None``, shown as ``—``, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from ctxcore import figures
from ctxcore.cost import PriceTable, cost
from ctxcore.costing import CallCost
from ctxcore.models import TokenUsage
from ctxcore.store.records import TraceRow, UsageRow


def usage_of(row: TraceRow | UsageRow) -> TokenUsage | None:
    """The recorded usage a stored row carries (its usage columns), ``None`` when the call
    recorded none."""
    counts = (row.input_tokens, row.cache_read_tokens, row.cache_write_tokens, row.output_tokens)
    if all(c is None for c in counts):
        return None
    return TokenUsage(
        mapping="store",
        input_tokens=row.input_tokens,
        cache_read_tokens=row.cache_read_tokens,
        cache_write_tokens=row.cache_write_tokens,
        cache_write_5m_tokens=row.cache_write_5m_tokens,
        cache_write_1h_tokens=row.cache_write_1h_tokens,
        output_tokens=row.output_tokens,
        reasoning_tokens=row.reasoning_tokens,
    )


def row_usd(row: TraceRow | UsageRow, table: PriceTable) -> float | None:
    """What the stored call cost by its recorded usage; ``None`` when unknown (no usage, no
    model, no price: ``ctxcore.cost.cost``)."""
    found = cost(row.model, usage_of(row), table)
    return None if found is None else found.total_usd


@dataclass(frozen=True)
class Spend:
    """A session's recorded cost: its calls, how many of them have a known cost, and the
    sum of those."""

    calls: int
    priced: int
    usd: float

    @property
    def total(self) -> float | None:
        """The sum of the priced calls, ``None`` when none is priced."""
        return self.usd if self.priced else None

    def label(self) -> str:
        """``$1.23``, ``$1.23 (4 of 6 calls priced)``, or ``—``."""
        if not self.priced:
            return figures.MISSING
        if self.priced == self.calls:
            return figures.usd(self.usd)
        return f"{figures.usd(self.usd)} ({self.priced:,} of {self.calls:,} calls priced)"


def session_spend(rows: Iterable[UsageRow], table: PriceTable) -> dict[str, Spend]:
    """Each session's ``Spend`` over its stored calls."""
    calls: dict[str, int] = {}
    priced: dict[str, int] = {}
    total: dict[str, float] = {}
    for r in rows:
        sid = r.session_id
        calls[sid] = calls.get(sid, 0) + 1
        value = row_usd(r, table)
        if value is not None:
            priced[sid] = priced.get(sid, 0) + 1
            total[sid] = total.get(sid, 0.0) + value
    return {s: Spend(n, priced.get(s, 0), total.get(s, 0.0)) for s, n in calls.items()}


def cache_frame(call: CallCost) -> pd.DataFrame:
    """A call's tokens as the simulated cache sees them beside the provider's recorded
    figures (a row per figure; a gap where the provider did not say)."""
    return pd.DataFrame(
        {
            "tokens": list(figures.FIGURES),
            "simulated": pd.array(figures.simulated_figures(call), dtype="Int64"),
            "recorded": pd.array(figures.recorded_figures(call.recorded), dtype="Int64"),
        }
    )


def mark_cached(fig: go.Figure, share: float, used: int) -> go.Figure:
    """A copy of the window bar with the cached prefix outlined: the first ``share`` of the
    ``used`` tokens (the prompt starts with its prefix; the bar counts our tokenizer's
    tokens, so the prefix is placed by its share of the prompt)."""
    out = go.Figure(fig)
    if share <= 0 or used <= 0:
        return out
    out.add_shape(
        type="rect",
        x0=0,
        x1=share * used,
        y0=-0.5,
        y1=0.5,
        xref="x",
        yref="y",
        line={"color": "#000000", "width": 3, "dash": "dot"},
        fillcolor="rgba(0,0,0,0)",
    )
    # named above the bar at its right end: on a wide window a prompt's prefix is a sliver
    out.add_annotation(
        x=share * used,
        y=0.5,
        xref="x",
        yref="y",
        text=f"cached {share:.0%}",
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
        font={"size": 12},
    )
    return out


def turns_frame(calls: Sequence[CallCost]) -> pd.DataFrame:
    """A row per call in turn order: the cache's figures, the cost and the break."""
    rows = figures.session_turns(calls)
    return pd.DataFrame(
        {
            "turn": [f.turn for f in rows],
            "$": [f.usd for f in rows],
            "cached": pd.array([f.cached for f in rows], dtype="Int64"),
            "written": pd.array([f.written for f in rows], dtype="Int64"),
            "uncached": pd.array([f.uncached for f in rows], dtype="Int64"),
            "output": pd.array([f.output for f in rows], dtype="Int64"),
            "break": [f.cache_break.kind if f.cache_break else "" for f in rows],
            "break reason": [f.cache_break.reason if f.cache_break else "" for f in rows],
            "figures": [f.source for f in rows],
            "trace_id": [f.trace_id for f in rows],
        }
    )


__all__ = [
    "Spend",
    "cache_frame",
    "mark_cached",
    "row_usd",
    "session_spend",
    "turns_frame",
    "usage_of",
]
