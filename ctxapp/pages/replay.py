"""Replay: one session re-run with other settings — every turn before and after, what changed —
and the policy lab, where several policies are scored side by side on it.

Tuning on one turn can starve later ones; this page sets the knobs once and replays the whole
session (``ctxcore.replay``), then draws both timelines, the tokens used per turn, and the
turns that changed. A turn opens in Compare with both builds (the variants are stored, tagged
``replay``, when a turn is opened: Compare reads traces from the store).

The policy lab (docs/design.md, "The app", Replay) evaluates policies — presets with their
knobs from the registry — on the session as ``ctxscope replay --preset A --preset B`` does
(``ctxcore.replay.evaluate``): a table beside the recording as sent, cost against recall, a
grid over two knobs of one policy, and a row or cell opened in the Playground on one turn.
Evaluations run on a button, with a progress bar, never on a rerun.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ctxapp.ui import knobs, policy_lab, state, views, widgets
from ctxcore import figures, settings
from ctxcore import knobs as registry
from ctxcore.cli.tune_policy import grid_from, session_sizes, winner
from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.pipeline import PRESET_NAMES, check_input_facts
from ctxcore.replay import (
    CHANGED_MEANS,
    FIRST_LOST_MEANS,
    REPLAY_TAG,
    ReplayReport,
    TurnReport,
)
from ctxcore.replay.evaluate import PolicyScore
from ctxcore.replay.evaluate import label as policy_label

RECORDED = "the recording"
OTHER = "other settings"
AS_RECORDED = "as recorded"
#: the worked case: the classic "32K vs 64K on the same tasks", at the demo's window sizes
WORKED = {"before": 4000, "after": 8000}


def _pick_session() -> str | None:
    sessions = state.sessions()
    if not sessions:
        st.info("The store holds no sessions yet.")
        return None
    ids = [s.session_id for s in sessions]
    wanted = state.qp_get("session")
    if wanted and state.ss_get("rp_session_from_url") != wanted and wanted in ids:
        state.ss_set("rp_session", wanted)
        state.ss_set("rp_session_from_url", wanted)
    if state.ss_get("rp_session") not in ids:
        state.ss_set("rp_session", ids[0])
    label = {s.session_id: f"{s.session_id}  ({s.traces} traces)" for s in sessions}
    sid: str = st.selectbox("Session", ids, key="rp_session", format_func=lambda i: label[i])
    return sid


def _reads_window(presets: set[str]) -> bool:
    """Do all these presets read the input's window (the hello-agents ones refuse it)?"""
    try:
        for name in presets:
            check_input_facts(name, ["window"], "")
    except InputError:
        return False
    return True


def _worked_case(window: bool) -> None:
    state.ss_set("rp_before_mode", OTHER)
    for side in ("before", "after"):
        # the budget too: the hello-agents presets do not derive it from the window (and
        # refuse a window they would ignore)
        state.ss_set(f"rp_{side}_window", WORKED[side] if window else 0)
        state.ss_set(f"rp_{side}_max_tokens", WORKED[side])
        state.ss_set(f"rp_{side}_preset", AS_RECORDED)


def _knobs(side: str, col: Any) -> dict[str, Any]:
    """One side's settings: a window, a budget and a preset, each "as recorded" by default."""
    with col:
        window = st.number_input(
            "window (tokens; 0 = as recorded)",
            min_value=0,
            step=1000,
            key=f"rp_{side}_window",
        )
        budget = st.number_input(
            "max_tokens (0 = as recorded or from the window)",
            min_value=0,
            step=500,
            key=f"rp_{side}_max_tokens",
        )
        preset = st.selectbox("preset", [AS_RECORDED, *PRESET_NAMES], key=f"rp_{side}_preset")
    out: dict[str, Any] = {}
    if window:
        out["window"] = int(window)
    if budget:
        out["max_tokens"] = int(budget)
    if preset != AS_RECORDED:
        out["preset"] = preset
    return out


def _open_in_compare(report: ReplayReport, turn: TurnReport) -> None:
    # Compare reads both sides from the store: store the variants it needs (ids are stable
    # per recording and settings, so opening the same turn again adds nothing)
    new = []
    for tid in (turn.before_id, turn.after_id):
        v = report.variant(tid)
        if v is not None and state.get_trace(tid) is None:
            new.append(v)
    if new:
        state.add_traces(new, source=REPLAY_TAG)
    state.switch("compare", a=turn.before_id, b=turn.after_id)


def _settings(sid: str) -> tuple[str, dict[str, Any] | None, dict[str, Any], bool]:
    """The worked case, what the before side is, both sides' knobs and the findings switch:
    (mode, before, after, compare findings)."""
    window = _reads_window({t.config.preset for t in state.session_traces(sid)})
    what = "window" if window else "budget"
    st.button(
        f"Worked case: a {WORKED['before'] // 1000}K vs {WORKED['after'] // 1000}K {what}",
        key="rp_worked",
        on_click=_worked_case,
        args=(window,),
        help=f"the same session at two {what} sizes",
    )
    mode = st.radio("Before is", [RECORDED, OTHER], key="rp_before_mode", horizontal=True)
    cb, ca = st.columns(2)
    cb.markdown("**Before**")
    ca.markdown("**After**")
    before: dict[str, Any] | None = None
    if mode == OTHER:
        before = _knobs("before", cb)
    else:
        cb.caption("each turn as it was recorded")
    after = _knobs("after", ca)
    findings = st.checkbox("Compare findings too (slower)", key="rp_findings")
    return mode, before, after, findings


def _imported_note(recorded: Sequence[Trace]) -> None:
    """Against the recording, say that an imported session's turns differ from it anyway."""
    imported = views.imported_builders(recorded, settings.IMPORT_BUILDER_PREFIX)
    if imported:
        # the recording is what another agent sent, not a build of a ctxscope preset: a
        # rebuild differs from it even with nothing changed
        st.info(
            f"These turns were imported ({', '.join(views.code(n) for n in imported)}): the "
            "recording is the prompt that agent sent, and replay rebuilds each turn with a "
            "ctxscope preset, so turns differ from it even with the recorded settings. "
            "Compare two settings with *Before is: other settings*, or score the policies "
            "of agents and frameworks against the recording in the *Policy lab* view.",
            icon=":material/info:",
        )


def _summary(report: ReplayReport) -> None:
    """The four numbers of a replay, and the turns it could not compare."""
    # two a row: four long labels side by side were cut at 1024 px ("turns losing must-k…")
    m1, m2 = st.columns(2)
    m3, m4 = st.columns(2)
    m1.metric(
        "turns changed",
        f"{len(report.changed_turns)} of {len(report.turns)}",
        help=f"turns where {CHANGED_MEANS}",
    )
    delta = report.tokens_delta
    m2.metric("tokens spent" if delta > 0 else "tokens saved", f"{abs(delta):,}")
    m3.metric("turns losing must-keep / error evidence", len(report.turns_losing_must_keep))
    m4.metric("packets lost (turn × packet)", len(report.losses("warning")))
    if report.errors:
        st.error(views.replay_errors_message(report))
        st.dataframe(views.replay_errors_frame(report), hide_index=True, key="rp_errors")


def _timelines(sid: str, report: ReplayReport, recorded: dict[str, Trace]) -> None:
    """Both sides' timelines, as one difference grid or side by side, each drawn once per
    (session, settings of both sides, store version): a knob moved back to a value seen
    before redraws from the cache."""
    draw = st.radio(
        "Timeline",
        ["difference", "side by side"],
        horizontal=True,
        key="rp_draw",
        help="difference: one grid, each cell coloured by its status after where it changed "
        "and pale where it did not (hover: before → after). side by side: both timelines, "
        "each half as wide.",
    )

    def rows(side: str) -> list[dict[str, Any]]:
        return views.replay_status_rows(views.replay_side(report, recorded, side))

    version = state.latest_change()
    if draw == "difference":
        fig = state.derived(
            "replay_diff",
            sid,
            f"{report.before}|{report.after}|{version}",
            lambda: figures.timeline_diff(rows("before_id"), rows("after_id")),
        )
        st.plotly_chart(fig, key="rp_heat_diff")
        return
    h1, h2 = st.columns(2)
    for col, label, side, settings_of in (
        (h1, "Before", "before_id", report.before),
        (h2, "After", "after_id", report.after),
    ):

        def heatmap(side: str = side, label: str = label) -> go.Figure:
            return figures.timeline_heatmap(rows(side), f"{label}: packets across the turns")

        fig = state.derived("replay_heatmap", sid, f"{settings_of}|{version}", heatmap)
        with col:
            st.plotly_chart(fig, key=f"rp_heat_{side}")


def _changed_turns(report: ReplayReport) -> None:
    """The turns that changed, and one of them opened in Compare."""
    changed = report.changed_turns
    st.subheader(f"Turns that changed ({len(changed)})")
    st.dataframe(views.replay_changed_frame(changed), hide_index=True, key="rp_changed")
    by_turn = {t.turn: t for t in changed}
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox(
        "Turn",
        list(by_turn),
        key="rp_turn",
        format_func=lambda n: f"turn {n} · {len(by_turn[n].flips)} flip(s)",
    )
    if c2.button("Open turn in Compare", key="rp_open", type="primary"):
        _open_in_compare(report, by_turn[pick])


def _first_lost(report: ReplayReport) -> None:
    """The items whose first lost turn moved, if any."""
    moved = views.first_lost_rows(report)
    if moved:
        st.markdown("**First turn each item is lost**")
        st.caption(FIRST_LOST_MEANS[0].upper() + FIRST_LOST_MEANS[1:] + ".")
        st.dataframe(moved, hide_index=True, key="rp_first_lost")


def render() -> None:
    st.title("Replay")
    st.caption(
        "Re-run every turn of a session with other settings and see what would change. "
        "Recorded traces are never changed."
    )
    sid = _pick_session()
    if sid is None:
        return
    if _view() == LAB:
        state.qp_set({"session": sid, "view": "lab"})
        _lab(sid)
        return
    state.qp_set({"session": sid})
    mode, before, after, findings = _settings(sid)
    report = state.replay(
        sid,
        json.dumps(after, sort_keys=True),
        None if before is None else json.dumps(before, sort_keys=True),
        findings,
    )
    if report is None:
        st.info("This session has no recorded traces to replay.")
        return
    recorded = {t.trace_id: t for t in state.session_traces(sid)}
    if mode == RECORDED:
        _imported_note(list(recorded.values()))
    _summary(report)
    if not report.changed_turns:
        # an all-pale grid of every packet and turn said "nothing changed" in 70 rows
        st.info(views.replay_nothing_changed(report), icon=":material/check_circle:")
        _findings_table(report)
        return
    st.caption(views.replay_changed_caption(report, CHANGED_MEANS))
    _timelines(sid, report, recorded)
    st.markdown("**Tokens used per turn**")
    st.bar_chart(views.replay_tokens_frame(report), stack=False, height=260)
    _changed_turns(report)
    _first_lost(report)
    _findings_table(report)


def _findings_table(report: ReplayReport) -> None:
    if report.findings_compared:
        st.markdown("**Findings by detector**")
        st.dataframe(views.replay_findings_rows(report), hide_index=True, key="rp_findings_table")


# --------------------------------------------------------------------------- the policy lab

BEFORE_AFTER = "Before / after"
LAB = "Policy lab"
#: the lab's results kept for the browser session: (what was evaluated, session, scores)
LAB_SCORES = "rp_lab_scores"
GRID_SCORES = "rp_grid_scores"
#: the table's columns, each number formatted, none cut at 1024 px
LAB_CONFIG = {
    "policy": st.column_config.TextColumn("policy", width=230),
    "★": st.column_config.TextColumn("★", width=30, help="the cheapest at or above the floor"),
    "$ with the cache": st.column_config.NumberColumn("$ with the cache", format="$%.4f"),
    "recall": st.column_config.NumberColumn("recall", format="percent"),
    "Δ $": st.column_config.NumberColumn("Δ $", format="%+.4f"),
    "input tokens": st.column_config.NumberColumn("input tokens", format="localized"),
    "Δ tokens": st.column_config.NumberColumn("Δ tokens", format="%+d"),
    "cache breaks": st.column_config.NumberColumn("cache breaks"),
    "losses": st.column_config.NumberColumn("losses"),
    "findings introduced": st.column_config.NumberColumn("findings introduced"),
    "turns not replayed": st.column_config.NumberColumn("turns not replayed"),
}
LAB_MEANS = (
    "Each policy rebuilds every recorded turn of this session and is scored beside the "
    "recording as sent (the baseline), as `ctxscope replay --preset A --preset B` does: "
    "input tokens; $ through the simulated prompt cache (a clearing that changes an early "
    "part of the prompt makes the next call write the prefix again: a *cache break*); recall, "
    "the share of what each recorded reply used of its prompt (paths, test names, error lines) "
    "still in the rebuilt prompt; losses (packets taken out or squeezed) and findings "
    "introduced."
)


def _view() -> str:
    """Before / after, or the policy lab (``?view=lab`` opens it)."""
    wanted = state.qp_get("view")
    if wanted and state.ss_get("rp_view_from_url") != wanted:
        state.ss_set("rp_view", LAB if wanted == "lab" else BEFORE_AFTER)
        state.ss_set("rp_view_from_url", wanted)
    state.ss_default("rp_view", BEFORE_AFTER)
    view: str = (
        st.segmented_control(
            "View",
            [BEFORE_AFTER, LAB],
            key="rp_view",
            help="before / after: one other setting, turn by turn. Policy lab: several policies "
            "scored side by side on the session, against the recording as sent.",
        )
        or BEFORE_AFTER
    )
    return view


def _knob_key(preset: str, name: str) -> str:
    return f"rp_lab_{preset}_{name}"


def _control(preset: str, name: str, tools: list[str]) -> Any:
    """One knob of one policy, drawn as its declaration says, starting at the preset's
    default (empty: the preset computes it)."""
    spec = registry.BY_NAME[name]
    raw = spec.defaults[preset]
    d = policy_lab.default_of(preset, name)
    key = _knob_key(preset, name)
    help = spec.help + (f" Empty: {raw.how}." if isinstance(raw, registry.Derived) else "")
    if spec.numeric:
        lo, hi = spec.low_value(), spec.top_value()
        whole = spec.kind == "int"
        num = int if whole else float
        return st.number_input(
            spec.label,
            min_value=None if lo is None else num(lo),
            max_value=None if hi is None else num(hi),
            value=d,
            step=num(spec.step or (1 if whole else 0.01)),
            format=None if whole else "%.2f",
            placeholder="computed",
            key=key,
            help=help,
        )
    if spec.kind == "bool":
        return st.toggle(spec.label, value=bool(d), key=key, help=help)
    if spec.kind == "choice":
        choices = list(spec.choices)
        return st.selectbox(spec.label, choices, index=choices.index(d), key=key, help=help)
    if spec.kind == "list":
        options = list(dict.fromkeys([*(spec.choices or tools), *(d or [])]))
        return st.multiselect(spec.label, options, default=d, key=key, help=help)
    return st.text_input(spec.label, value=d or "", key=key, help=help)


def _policy_knobs(preset: str, tools: list[str]) -> dict[str, Any]:
    """One policy's knobs in an expander named by what is set; its settings patch."""
    names = policy_lab.knob_names(preset)
    held = {
        n: state.ss_get(_knob_key(preset, n))
        if state.ss_has(_knob_key(preset, n))
        else policy_lab.default_of(preset, n)
        for n in names
    }
    title = policy_label(policy_lab.policy(preset, held))
    if not names:
        st.caption(views.md(f"{title}: no knobs (it rebuilds the request as it was sent)"))
        return {"preset": preset}
    values: dict[str, Any] = {}
    # a text knob's value (a placeholder) is typed by the user: a label, not markdown
    with st.expander(views.md(title), expanded=False):
        cols = st.columns(3)
        for k, name in enumerate(names):
            with cols[k % 3]:
                values[name] = _control(preset, name, tools)
    return policy_lab.policy(preset, values)


def _lab_policies(sid: str, traces: list[Trace]) -> list[dict[str, Any]]:
    """The policies picked, each with its knobs (a list knob's choices: the session's tools)."""
    chosen: list[str] = st.multiselect(
        "Policies (the recording as sent is the baseline)",
        list(policy_lab.POLICIES),
        default=list(policy_lab.DEFAULT_POLICIES),
        key="rp_lab_policies",
        help="Presets on the recorded request (the published policies, and `recorded`, which "
        "rebuilds it as sent) and ctxscope's own presets; each with its source's knob names "
        "and defaults. Open one to set its knobs.",
    )
    tools = state.derived(
        "rp_lab_tools",
        sid,
        str(state.latest_change()),
        lambda: knobs.tool_names([t.input for t in traces]),
    )
    return [_policy_knobs(preset, tools) for preset in chosen]


def _evaluate(traces: list[Trace], policies: list[dict[str, Any]], what: str) -> list[PolicyScore]:
    """``policies`` evaluated on the session, a progress bar counting them."""
    bar = st.progress(0.0, text=f"Evaluating {len(policies)} {what} on {len(traces)} turns…")

    def advance(done: int, total: int) -> None:
        bar.progress(done / total, text=f"{done} of {total} {what} evaluated")

    scores = policy_lab.run(traces, policies, state.prices(), progress=advance)
    bar.empty()
    return scores


def _stored(name: str, sid: str, key: str) -> Any:
    """What the last press of a lab button computed for this session (None: nothing yet),
    with a warning when the settings moved since."""
    held = state.ss_get(name)
    if held is None or held[1] != sid:
        return None
    if held[0] != key:
        st.warning(
            "The settings changed since this evaluation: press the button to score them. "
            "Shown below: the last evaluation.",
            icon=":material/update:",
        )
    return held[2]


def _lab_table(sid: str, traces: list[Trace], policies: list[dict[str, Any]], floor: float) -> None:
    """The button, then the policies side by side, cost against recall and the winner opened."""
    key = policy_lab.run_key(sid, state.latest_change(), policies)
    n = len(policies)
    if st.button(
        f"Evaluate {n} polic{'y' if n == 1 else 'ies'} on {len(traces)} turns",
        key="rp_lab_run",
        type="primary",
        disabled=not policies,
    ):
        state.ss_set(LAB_SCORES, (key, sid, _evaluate(traces, policies, "policies")))
    scores: list[PolicyScore] | None = _stored(LAB_SCORES, sid, key)
    if scores is None:
        st.caption("Pick the policies and their knobs, then press *Evaluate*.")
        return
    best = winner(scores[1:], floor)
    _lab_rows(scores, best)
    for s in scores:
        if s.errors:
            st.warning(views.md(f"{s.label}: {len(s.errors)} turn(s) not replayed — {s.errors[0]}"))
    st.plotly_chart(policy_lab.cost_recall_figure(scores), key="rp_lab_chart")
    same = policy_lab.on_the_baseline(scores)
    if same:
        st.caption(views.md("On the recording's spot (same $ and recall): " + ", ".join(same)))
    missing = policy_lab.unplaced(scores)
    if missing:
        st.caption(views.md("Not on the chart (no known $ or no recall): " + ", ".join(missing)))
    options = [(s.label, s) for s in scores[1:]]
    _open_picker("rp_lab", traces, scores[0], options, best)


def _lab_rows(scores: list[PolicyScore], best: int | None) -> None:
    """The table, one row a policy; the row selected is shown whole beneath it (the columns
    to the right scroll at 1024 px) and becomes the policy the Playground opens."""
    frame = policy_lab.scores_frame(scores)
    frame.insert(
        1, "★", ["★" if best is not None and i == best + 1 else "" for i in range(len(scores))]
    )
    # keyed tbl_<key>: the browser's layout checks name the table by it
    event = st.container(key="tbl_rp_lab_table").dataframe(
        frame,
        hide_index=True,
        column_config=LAB_CONFIG,
        key="rp_lab_table",
        on_select="rerun",
        selection_mode="single-row",
    )
    rows = widgets.selected(event, "rows")
    picked = int(rows[0]) if rows and 0 <= int(rows[0]) < len(scores) else None
    if picked is None:
        st.caption("Select a row (the box at its left) to read it whole here and open it below.")
        return
    st.code(policy_lab.row_text(scores[0], scores[picked]), language=None, wrap_lines=True)
    if picked > 0 and state.ss_get("rp_lab_picked") != picked:
        state.ss_set("rp_lab_open_policy", picked - 1)  # the picker below opens this one
    state.ss_set("rp_lab_picked", picked)


def _open_picker(
    prefix: str,
    traces: list[Trace],
    base: PolicyScore,
    options: list[tuple[str, PolicyScore]],
    best: int | None,
) -> None:
    """A policy (or cell) and one of its turns opened in the Playground: the turn where it
    changed the most tokens first."""
    if not options:
        return
    st.markdown("**Open in the Playground**")
    key = f"{prefix}_open_policy"
    # a new evaluation (or floor) preselects its winner; a selected table row sets it too
    marker = (tuple(name for name, _ in options), best)
    if state.ss_get(f"{key}_for") != marker or state.ss_get(key) not in range(len(options)):
        state.ss_set(key, best or 0)
        state.ss_set(f"{key}_for", marker)
    c1, c2 = st.columns([2, 3])
    k = c1.selectbox(
        "Policy",
        range(len(options)),
        format_func=lambda i: options[i][0],
        key=key,
        help="preselected: the cheapest at or above the recall floor (★)",
    )
    score = options[k][1]
    turns = score.turns
    if not turns:
        c2.caption("no turn of it was replayed")
        return
    first = policy_lab.telling_turn(base, score)
    pick = c2.selectbox(
        "Turn",
        range(len(turns)),
        index=turns.index(first) if first is not None else 0,
        format_func=lambda i: policy_lab.turn_label(base, turns[i]),
        key=f"{prefix}_open_turn_{k}",
        help="preselected: the turn where this policy changed the most input tokens",
    )
    if st.button("Open in Playground", key=f"{prefix}_open", type="primary"):
        t = turns[pick]
        trace = next(x for x in traces if (x.session_id, x.turn) == (t.session_id, t.turn))
        state.switch("playground", **policy_lab.playground_params(trace, score.settings or {}))


def _grid_axes(
    policies: list[dict[str, Any]], sizes: list[int]
) -> tuple[dict[str, Any], str, str] | None:
    """The policy and its two knobs the grid sweeps (the policy's other knobs as set above)."""
    chosen = {str(p["preset"]): p for p in policies}
    presets = [p for p in policy_lab.POLICIES if len(policy_lab.grid_knobs(p, sizes)) >= 2]
    offered = [p for p in presets if p in chosen] or presets
    c1, c2, c3 = st.columns([2, 1, 1])
    preset = c1.selectbox("Policy", offered, key="rp_grid_policy")
    knobs = policy_lab.grid_knobs(preset, sizes)
    x = c2.selectbox("x knob", knobs, key=f"rp_grid_x_{preset}")
    y = c3.selectbox("y knob", [k for k in knobs if k != x], key=f"rp_grid_y_{preset}_{x}")
    base = {k: v for k, v in chosen.get(preset, {"preset": preset}).items() if k not in (x, y)}
    return base, x, y


def _lab_grid(sid: str, traces: list[Trace], policies: list[dict[str, Any]], floor: float) -> None:
    """Two knobs of one policy swept into a grid coloured by $, recall in each cell."""
    st.subheader("Two knobs of one policy")
    sizes = session_sizes(traces)
    axes = _grid_axes(policies, sizes)
    if axes is None:
        return
    base, x, y = axes
    preset = str(base["preset"])
    c1, c2 = st.columns(2)
    xs_text = c1.text_input(
        f"{x} values", policy_lab.grid_values(preset, x, sizes), key=f"rp_grid_xs_{preset}_{x}"
    )
    ys_text = c2.text_input(
        f"{y} values", policy_lab.grid_values(preset, y, sizes), key=f"rp_grid_ys_{preset}_{y}"
    )
    empty = [name for name, text in ((x, xs_text), (y, ys_text)) if not text.strip()]
    if empty:
        st.info(f"Give the values of {' and '.join(empty)}, separated by commas.")
        return
    try:
        values = grid_from(preset, [f"{x}={xs_text}", f"{y}={ys_text}"])
    except InputError as exc:
        st.error(views.md(exc), icon=":material/error:")
        return
    grid = policy_lab.Grid(base, x, tuple(values[x]), y, tuple(values[y]))
    cells = len(grid.xs) * len(grid.ys)
    if cells > policy_lab.MAX_CELLS:
        st.error(f"{cells} cells: at most {policy_lab.MAX_CELLS}; give fewer values.")
        return
    others = policy_label(base).removeprefix(preset).strip() or "defaults"
    st.caption(views.md(f"{preset}'s other knobs: {others} (as set above)."))
    key = policy_lab.run_key(sid, state.latest_change(), grid.policies())
    if st.button(f"Evaluate the {cells} cells", key="rp_grid_run", type="primary"):
        scores = _evaluate(traces, grid.policies(), "cells")
        state.ss_set(GRID_SCORES, (key, sid, (grid, scores)))
    held = _stored(GRID_SCORES, sid, key)
    if held is None:
        return
    shown, scores = held
    base_score, cell_scores = scores[0], scores[1:]
    st.plotly_chart(policy_lab.heatmap_figure(shown, cell_scores, floor), key="rp_grid_heat")
    best = winner(cell_scores, floor)
    options = [(policy_lab.cell_label(shown, k, s), s) for k, s in enumerate(cell_scores)]
    _open_picker("rp_grid", traces, base_score, options, best)


def _lab(sid: str) -> None:
    """The policy lab on one session."""
    traces = policy_lab.recorded_turns(state.session_traces(sid))
    if not traces:
        st.info("This session has no recorded turns to evaluate.")
        return
    st.caption(LAB_MEANS)
    policies = _lab_policies(sid, traces)
    floor = st.slider(
        "Recall floor",
        0.0,
        1.0,
        policy_lab.DEFAULT_FLOOR,
        step=0.05,
        key="rp_lab_floor",
        help="★ marks the cheapest policy (or cell) whose recall is at or above it; cells "
        "below it are crossed",
    )
    _lab_table(sid, traces, policies, floor)
    _lab_grid(sid, traces, policies, floor)


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
