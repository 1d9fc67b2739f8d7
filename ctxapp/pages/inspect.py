"""Inspect: one build — where the window went, how packets scored, what was decided, why."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ctxapp.ui import costs, ledger, state, views, widgets
from ctxcore import figures
from ctxcore.costing import CallCost
from ctxcore.diagnostics import patched_config
from ctxcore.diagnostics.counterfactual import searched_knobs
from ctxcore.models import Trace


@dataclass(frozen=True)
class _Figures:
    """What Inspect draws for one build, made once per trace (a stored trace never changes)."""

    window: go.Figure
    budgets: go.Figure
    drift: go.Figure
    frame: pd.DataFrame


def _figs(t: Trace) -> _Figures:
    assert t.result is not None
    result = t.result
    tok = result.totals.tokenizer

    def make() -> _Figures:
        return _Figures(
            window=figures.window_bar(t),
            budgets=figures.partition_budgets(t),
            drift=figures.tokenizer_drift(
                views.partition_token_rows(result.prompt, tok),
                tok if tok in ("cl100k_base", "o200k_base") else "cl100k_base",
            ),
            frame=views.decisions_frame(result.decisions),
        )

    return state.derived("inspect", t.trace_id, "", make)


#: the two ways to the Playground, told apart: a verified change applied, or the recording
CF_BUTTON = "Open in Playground with this change"
RECORDED_BUTTON = "Open in Playground as recorded"


def _open_fix(t: Trace, patch: dict[str, Any], key: str, label: str) -> None:
    """One click from a verified fix to the Playground with those settings."""
    if st.button(label, key=key):
        cfg = patched_config(t.config, patch)
        state.switch("playground", trace=t.trace_id, **views.config_to_params(cfg))


def _findings(t: Trace) -> None:
    rows = state.trace_findings(t)
    if not rows:
        st.caption("No findings: the diagnostics saw nothing suspicious in this build.")
    for i, f in enumerate(rows):
        sev = f.severity
        box = {"error": st.error, "warning": st.warning}.get(sev, st.info)
        box(views.md(f"{sev.upper()} · {f.detector}"), icon=":material/troubleshoot:")
        st.text(f.message)
        ids = f.packet_ids
        if ids:
            st.text("packets: " + ", ".join(ids[:12]) + (" …" if len(ids) > 12 else ""))
        evidence = f.evidence
        if f.fix:
            st.text("would have kept it: " + str(evidence.get("fix") or json.dumps(f.fix)))
            _open_fix(
                t,
                f.fix,
                f"in_fix_{i}",
                f"Open in Playground with '{views.md(evidence.get('fix_label') or 'the fix')}'",
            )
    _what_would_keep(t)


def _what_would_keep(t: Trace) -> None:
    """Counterfactuals for any packet that did not make it in whole."""
    assert t.result is not None
    lost = [
        d.packet_id
        for d in t.result.decisions
        if d.status.value in ("dropped", "filtered", "summarized", "truncated", "not_rendered")
    ]
    st.subheader("What would have kept it?")
    if not lost:
        st.caption("Every candidate was kept whole.")
        return
    pid = st.selectbox("Packet that was dropped, filtered or cut", lost, key="in_cf_packet")
    knobs = ", ".join(searched_knobs(t)) or "none (the preset has no knobs to change)"
    st.caption(
        f"Searched knobs of the {views.md(t.config.preset)} preset: {views.md(knobs)}; "
        "single changes first, then pairs of changes when no single one keeps it, each "
        "verified by re-running the pipeline."
    )
    if not st.toggle("Search the smallest change (re-runs the pipeline)", key="in_cf_go"):
        return
    found = state.counterfactuals(t, str(pid))
    if not found:
        st.caption(
            "No single change and no pair of changes of these knobs keeps it "
            "(or this trace's preset cannot be re-run to reproduce the recorded build)."
        )
        return
    for k, cf in enumerate(found):
        c1, c2 = st.columns([3, 1])
        c1.text(cf.sentence)
        with c2:
            # says what it opens: the page's own button below opens the recorded settings
            _open_fix(t, cf.patch, f"in_cf_open_{k}", CF_BUTTON)


def render() -> None:
    st.title("Inspect")
    t = widgets.trace_picker("in")
    if t is None:
        return
    state.qp_set({"trace": t.trace_id})
    widgets.trace_caption(t)
    st.text("query: " + t.input.query[:500])
    if t.result is None:
        st.warning(
            "This trace has no build result (captured input only). "
            "Open it in the Playground to build it."
        )
        return
    figs = _figs(t)
    # four a row: seven side by side cut "5,100" to "5,…" at 1024 px
    widgets.metrics(t.result, per_row=4)
    if t.result.warnings:
        for w in t.result.warnings:
            st.warning(views.md(w), icon=":material/warning:")
    call = _call_cost(t)
    window = figs.window
    if call is not None:
        window = costs.mark_cached(window, figures.cached_share(call), t.result.totals.used)
    st.plotly_chart(window, key="in_window")
    if call is not None:
        _cost_panel(call)
    ledger.inspect_panel(t)
    c1, c2 = st.columns(2)
    with c1:
        st.plotly_chart(figs.budgets, key="in_budgets")
    with c2:
        st.plotly_chart(figs.drift, key="in_drift")
    part, box = widgets.section(
        ["Decisions", "Scores", "Prompt", "Debug report", "Findings", "Config"], "in_section"
    )
    with box:
        if part == "Decisions":
            widgets.decisions_table(figs.frame, "in")
        elif part == "Scores":
            # thousands of hoverable markers: drawn when asked for, not on every open
            widgets.score_chart(t, "in", cache=t.trace_id)
            _signals(t)
        elif part == "Prompt":
            widgets.prompt_view(t.result.prompt, "in")
        elif part == "Debug report":
            st.json(t.result.report.model_dump(mode="json"), expanded=1)
            if t.result.timings:
                st.caption(
                    "timings (ms): "
                    + ", ".join(f"{views.md(k)} {v:g}" for k, v in t.result.timings.items())
                )
        elif part == "Findings":
            _findings(t)
        else:
            st.json(t.config.model_dump(mode="json", exclude_none=True))
    # each button as wide as its label: in thirds of the page "Open in Playground as
    # recorded" was cut at 1024 px
    row = st.container(horizontal=True, gap="small")
    if row.button(RECORDED_BUTTON, key="in_to_playground"):
        state.switch("playground", trace=t.trace_id)
    if row.button("Session timeline", key="in_to_timeline"):
        state.switch("timeline", session=t.session_id, trace=t.trace_id)
    if row.button("Compare with…", key="in_to_compare"):
        state.switch("compare", a=t.trace_id)


def _call_cost(t: Trace) -> CallCost | None:
    """This call costed within its session (the simulated cache and the recorded usage);
    None for a trace that names no model and recorded no usage (not a model call)."""
    recorded = t.outcome is not None and t.outcome.tokens is not None
    if not recorded and not t.metadata.get("model"):
        return None
    for c in state.session_call_costs(t.session_id):
        if c.trace_id == t.trace_id:
            return c
    return None


def _cost_panel(call: CallCost) -> None:
    """Cost and cache: the call's tokens as the simulated cache sees them beside the
    provider's figures, its cost, and what broke the cached prefix (as text: a reason
    quotes prompt lines)."""
    share = figures.cached_share(call)
    st.caption(
        f"The dotted outline on the bar marks the cached prefix: {share:.0%} of the prompt "
        f"was read from the cache. A prompt starts with its prefix, so the outline covers "
        f"the first {share:.0%} of the tokens used."
    )
    with st.container(border=True, key="in_cost"):
        st.markdown("**Cost and prompt cache**")
        c1, c2 = st.columns([1.15, 1])  # the table's three columns whole at 1024 px
        # five short rows: no row to open whole (readable_table), just the figures
        c1.container(key="tbl_in_cache").dataframe(
            costs.cache_frame(call),
            hide_index=True,
            key="in_cache",
            column_config=CACHE_CONFIG,
            placeholder=widgets.MISSING,
        )
        with c2:
            st.text(figures.cost_line(call))
            if call.recorded is None:
                st.text("No usage was recorded: the figures are the simulation's only.")
            elif (differs := figures.billed_differently(call)) is not None:
                st.text(differs)
            if call.cache_break is None:
                st.text("No cache break: this call read all the previous call could serve.")
            else:
                st.text("\n".join(figures.break_lines(call.cache_break)))


CACHE_CONFIG = {
    "tokens": st.column_config.TextColumn("tokens", width=100),
    "simulated": st.column_config.NumberColumn("simulated", format="localized", width=85),
    "recorded": st.column_config.NumberColumn(
        "recorded", format="localized", width=85, help="as the provider billed them"
    ),
}


def _signals(t: Trace) -> None:
    """Which signals fired for which packet (the ctxscope preset records them as decision
    notes ``signal:<name>``, strongest first; the reason text says why each fired)."""
    assert t.result is not None
    rows = [
        {
            "packet": d.packet_id,
            "status": d.status.value,
            "score": d.score,
            "strongest signal": figures.SIGNAL_NAMES.get(strongest, strongest),
            "signals": ", ".join(
                figures.SIGNAL_NAMES.get(n[7:], n[7:]) for n in d.notes if n.startswith("signal:")
            ),
        }
        for d in t.result.decisions
        if (strongest := figures.strongest_signal(d)) is not None
    ]
    if not rows:
        st.caption("No signal fired for any packet of this build (or its preset has none).")
        return
    st.caption(
        f"Signals that fired for {len(rows)} packets (marker shape in the scatter = strongest):"
    )
    widgets.readable_table(
        pd.DataFrame(rows),
        "in_signals",
        column_config={
            "packet": st.column_config.TextColumn("packet", width=widgets.ID_PX),
            "status": st.column_config.TextColumn("status", width=widgets.STATUS_PX),
            "score": st.column_config.NumberColumn("score", format="%.3f", width=70),
            "strongest signal": st.column_config.TextColumn("strongest signal", width=200),
            "signals": st.column_config.TextColumn("signals", width=widgets.REASON_PX),
        },
        whole=["packet", "status", "strongest signal", "signals"],
    )


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
