"""Compare: two builds side by side — budgets, which packets changed fate, the prompt diff."""

from __future__ import annotations

import streamlit as st

from ctxapp.ui import state, views, widgets
from ctxcore import figures
from ctxcore.models import Config, Trace
from ctxcore.pipeline import PRESET_NAMES, resolve_config
from ctxcore.store import TraceFilter

SAME_INPUT = "same input as A, another preset"
OTHER = "another stored trace"


def _b_side(a: Trace) -> Trace | None:
    mode = st.radio("B is", [OTHER, SAME_INPUT], key="cmp_b_mode", horizontal=True)
    if mode == OTHER:
        # By default B is the turn before A in the same session: "what changed?"
        rows = state.list_traces(TraceFilter(session_id=a.session_id), sort="turn", limit=500).rows
        earlier = [r for r in rows if r.turn < a.turn]
        default = max(earlier, key=lambda r: r.turn).trace_id if earlier else None
        return widgets.trace_picker("cmp_b", "Trace B", qp_name="b", default=default)
    presets = [p for p in PRESET_NAMES if p != a.config.preset] or list(PRESET_NAMES)
    c1, c2 = st.columns([2, 1])
    preset = c1.selectbox("Preset for B", presets, key="cmp_b_preset")
    # Fair by default: B gets A's window; another preset's default budget would make
    # "which pipeline is better" a question of size. Changing it is a visible choice.
    budget = int(
        c2.number_input(
            "max_tokens for B",
            min_value=100,
            max_value=2_000_000,
            value=int(a.config.max_tokens or 8000),
            step=500,
            key="cmp_b_max_tokens",
            help="the same as A unless you change it",
        )
    )
    cfg = resolve_config(Config(preset=preset, max_tokens=budget), a.input)
    result = state.rebuild(a, cfg, views.config_json(cfg))
    return a.model_copy(
        update={"config": cfg, "result": result, "trace_id": f"{a.trace_id} ({preset})"}
    )


#: which packet, its two statuses and B's reason at the left (the A/B twin of the Playground's
#: flipped table), every column sized: "reason_A" ran past the edge at 1024 px
DIFF_CONFIG = {
    "packet_id": st.column_config.TextColumn("packet id", width=170),
    "status_A": st.column_config.TextColumn("A", width=widgets.STATUS_PX),
    "status_B": st.column_config.TextColumn("B", width=widgets.STATUS_PX),
    "reason_B": st.column_config.TextColumn("reason B", width=widgets.REASON_PX),
    "reason_A": st.column_config.TextColumn("reason A", width=widgets.REASON_PX),
    "change": st.column_config.TextColumn("change", width=150),
    "kind": st.column_config.TextColumn("kind", width=90),
    "tokens_A": st.column_config.TextColumn("tokens A", width=80),
    "tokens_B": st.column_config.TextColumn("tokens B", width=80),
    "rank_A": st.column_config.TextColumn("rank A", width=70),
    "rank_B": st.column_config.TextColumn("rank B", width=70),
    "id_B": st.column_config.TextColumn("id B (other preset)", width=170),
}
DIFF_ORDER = list(DIFF_CONFIG)


def render() -> None:
    st.title("Compare")
    a = widgets.trace_picker("cmp_a", "Trace A", qp_name="a")
    if a is None:
        return
    with state.guard():
        b = _b_side(a)
        if b is None:
            return
        state.qp_set(
            {"a": a.trace_id, "b": b.trace_id if state.ss_get("cmp_b_mode") == OTHER else None}
        )
        if a.result is None or b.result is None:
            st.warning(
                "Both sides need a build result; open a captured input in the Playground first."
            )
            return
        wa, wb = a.result.totals, b.result.totals
        # presets reserve differently, so "available" may differ on the same window
        if wa.window != wb.window:
            st.info(
                f"The two builds had different windows: A {wa.window:,} tokens "
                f"({wa.available:,} available), B {wb.window:,} ({wb.available:,} "
                "available). Differences below are partly a question of size.",
                icon=":material/straighten:",
            )
        # one x scale for both bars, so equal lengths mean equal tokens
        x_max = max(figures.window_extent(a), figures.window_extent(b))
        ca, cb = st.columns(2)
        for col, label, t, result in ((ca, "A", a, a.result), (cb, "B", b, b.result)):
            with col:
                st.subheader(f"{label} · preset {t.config.preset}")
                widgets.trace_caption(t)
                widgets.metrics_line(result)
                fig = figures.window_bar(t, x_max=x_max, legend=False)
                # half a page wide, a narrow segment's name ("output reserve") was turned on
                # its side and unreadable: names stay level, and one that does not fit at a
                # readable size is left to the segment's hover
                fig.update_traces(textangle=0, selector={"type": "bar"})
                fig.update_layout(uniformtext={"minsize": 10, "mode": "hide"})
                st.plotly_chart(fig, key=f"cmp_window_{label}")
        st.subheader("Budgets per partition")
        with st.container(key="tbl_cmp_budgets"):
            st.dataframe(views.budgets_frame({"A": a, "B": b}), hide_index=True, key="cmp_budgets")
        diff = views.decision_diff(a, b)
        st.subheader(f"Decision diff ({len(diff)} packets)")
        if diff.empty:
            st.caption("Every packet had the same fate in both builds.")
        else:
            widgets.readable_table(
                diff,
                "cmp_decisions",
                column_config=DIFF_CONFIG,
                column_order=DIFF_ORDER,
                whole=["packet_id", "status_A", "status_B", "reason_A", "reason_B", "change"],
            )
        st.subheader("Prompt diff")
        text = views.prompt_diff(a.result.prompt, b.result.prompt, "A", "B")
        lines = (text or "").count("\n") + 1
        st.code(
            text or "(the prompts are identical)",
            language="diff",
            height=480 if lines > 20 else "content",
        )


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
