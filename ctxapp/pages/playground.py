"""Playground: change any knob, re-run the builder on the captured input, see what flipped."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from ctxapp.ui import knobs, state, views, widgets
from ctxcore import figures
from ctxcore.errors import CtxscopeError
from ctxcore.loading import config_from_obj
from ctxcore.models import BuildResult, Config, Trace
from ctxcore.pipeline import build_trace, resolve_config


def _url_config(t: Trace) -> Config | None:
    """The settings a permalink (or the Sweep page) put into the URL for this trace."""
    params = {k: v for k, v in state.qp_all().items() if k != "trace"}
    if not params or state.qp_get("trace") != t.trace_id:
        return None
    data = views.params_to_config_dict(params)
    preset = data.get("preset", t.config.preset)
    base = t.config.model_dump(exclude_none=True) if preset == t.config.preset else {}
    base.update(data)
    base["preset"] = preset
    return resolve_config(config_from_obj(base, "link parameters"), t.input)


def _ensure_loaded(t: Trace) -> None:
    url = state.qp_all()
    fresh = (
        state.ss_get("pg_loaded") != t.trace_id
        or not state.ss_has("pg_preset")
        or (url.get("trace") == t.trace_id and url != state.ss_get("pg_qp_written"))
    )
    if not fresh:
        return
    cfg = None
    try:
        cfg = _url_config(t)
    except CtxscopeError as exc:
        st.error(
            views.md(f"{exc} — showing the recorded settings instead."), icon=":material/error:"
        )
    knobs.load(cfg or t.config, t.input)
    state.ss_set("pg_loaded", t.trace_id)


def _save(t: Trace, cfg: Config) -> None:
    variant = build_trace(
        t.input,
        cfg,
        session_id=t.session_id,
        turn=t.turn,
        tags=sorted({*t.tags, "variant"}),
        metadata={"variant_of": t.trace_id},
        source_trace_id=t.trace_id,
    )
    state.add_traces([variant], source="playground")
    state.ss_set("pg_saved", variant.trace_id)


CONFIG_FILE_KEY = "pg_config_file"
_CONFIG_NOTE = "pg_config_note"


def _load_config_file(t: Trace) -> None:
    """The uploader's callback: the file's settings into the knobs (before the page reruns,
    as the reset button does), or one line saying why not."""
    up = state.ss_get(CONFIG_FILE_KEY)
    if up is None:
        state.ss_pop(_CONFIG_NOTE)
        return
    try:
        cfg = resolve_config(views.config_from_file(up.getvalue(), up.name, t.config), t.input)
    except CtxscopeError as exc:
        state.ss_set(_CONFIG_NOTE, ("error", str(exc)))
        return
    knobs.load(cfg, t.input)
    state.ss_set(_CONFIG_NOTE, ("ok", f"{up.name}: its settings are in the knobs"))


def _config_file(t: Trace) -> None:
    """Load a config file into the knobs: what ``ctxscope tune -o`` writes, or any file
    ``ctxscope build --config`` takes (its knobs over the recorded ones, as build does)."""
    st.file_uploader(
        "Load a config file",
        type=["json"],
        key=CONFIG_FILE_KEY,
        on_change=_load_config_file,
        args=(t,),
        max_upload_size=1,
        help="A config written by `ctxscope tune -o FILE` or read by `ctxscope build "
        "--config FILE`: its settings replace the recorded ones they name.",
    )
    note = state.ss_get(_CONFIG_NOTE)
    if note is not None:
        kind, text = note
        if kind == "error":
            st.error(views.md(text), icon=":material/error:")
        else:
            st.caption(views.md(text))


RECORDED = "recorded build"
PREVIOUS = "previous run"
#: widths in pixels for every column (as ``widgets.DECISION_CONFIG``: unsized columns are measured
#: cell by cell in the browser at every knob move). One line a row: wrapped reasons broke words
#: and were cut after three lines; the selected row shows them whole (``widgets.readable_table``).
FLIP_CONFIG = {
    "packet_id": st.column_config.TextColumn("packet id", width=170),
    "status_before": st.column_config.TextColumn("before", width=widgets.STATUS_PX),
    "status_now": st.column_config.TextColumn("now", width=widgets.STATUS_PX),
    "reason_before": st.column_config.TextColumn("reason before", width=widgets.REASON_PX),
    "reason_now": st.column_config.TextColumn("reason now", width=widgets.REASON_PX),
    "change": st.column_config.TextColumn("change", width=150),
    "kind": st.column_config.TextColumn("kind", width=90),
    "tokens_before": st.column_config.TextColumn("tokens before", width=100),
    "tokens_now": st.column_config.TextColumn("tokens now", width=90),
    "rank_before": st.column_config.TextColumn("rank before", width=90),
    "rank_now": st.column_config.TextColumn("rank now", width=80),
    "id_now": st.column_config.TextColumn("id now (other preset)", width=170),
}
#: what flipped and why now at the left, where the ~560 px a 1024-px screen leaves the result
#: shows them; the reason before follows
FLIP_ORDER = [
    "packet_id",
    "status_before",
    "status_now",
    "reason_now",
    "reason_before",
    "change",
    "kind",
    "tokens_before",
    "tokens_now",
    "rank_before",
    "rank_now",
    "id_now",
]
FLIP_WHOLE = ["packet_id", "status_before", "status_now", "reason_before", "reason_now", "change"]


def _baseline(t: Trace, cfg: Config, mode: str) -> tuple[Config, BuildResult | None]:
    """What the diff compares with: the recorded build, or the run before the last change.

    The page remembers the last two distinct configs of this trace; a rerun with the same
    settings (a tab switch) keeps them, so "previous" stays the run before the last move.
    """
    now = views.config_json(cfg)
    runs = state.ss_get("pg_runs")
    if not runs or runs[0] != t.trace_id:
        runs = (t.trace_id, None, cfg)
    elif views.config_json(runs[2]) != now:
        runs = (t.trace_id, runs[2], cfg)
    state.ss_set("pg_runs", runs)
    prev: Config | None = runs[1]
    if mode == RECORDED or prev is None:
        return t.config, t.result if mode == RECORDED else None
    return prev, state.rebuild(t, prev, views.config_json(prev))


#: The fragments a knob move reruns (docs/design.md, "The app"): the summary above the tabs
#: and the open tab's body. The page (picker, caption, knobs, sidebar) and the tab bar stay.
#: Widgets inside them rerun them alone too (the decisions filters rerun the body).
SUMMARY = "pg_summary"
BODY = "pg_body"
MOVED = [SUMMARY, BODY]
#: below 1,200 px of window (a 1024-px screen, the sidebar open), a settings column beside the
#: result left the result ~370 px: its tables showed three columns. There the settings go
#: above the result, in rows of three knobs, and the result takes the page's width. Our own
#: fixed CSS (no trace text), on the keyed containers ``pg_layout`` and ``pg_settings``.
NARROW_CSS = """<style>
@media (max-width: 1199px) {
  .st-key-pg_layout > div > [data-testid="stHorizontalBlock"] { flex-direction: column; }
  .st-key-pg_layout > div > [data-testid="stHorizontalBlock"] > [data-testid="stColumn"] {
    width: 100% !important; flex: 1 1 auto !important; min-width: 100% !important;
  }
  .st-key-pg_settings {
    display: grid !important; grid-template-columns: repeat(3, minmax(0, 1fr));
    column-gap: 1.5rem;
  }
  .st-key-pg_settings > div:first-child { grid-column: 1 / -1; }
}
</style>"""
SECTIONS = ["Decisions", "Prompt", "Prompt diff", "Scores", "Permalink & save"]


def render() -> None:
    st.title("Playground")
    t = widgets.trace_picker("pg")
    if t is None:
        return
    _ensure_loaded(t)
    widgets.trace_caption(t)
    # wide enough for "hello-agents-book" and "cl100k_base" at 1024 px; under NARROW_CSS's
    # width the settings go above the result, three knobs a row
    st.html(NARROW_CSS)
    left, right = st.container(key="pg_layout").columns([1.4, 3], gap="medium")
    with left.container(key="pg_settings"):
        st.subheader("Settings")
        with state.guard():
            # A value knob reruns only the MOVED fragments; a knob that changes the panel
            # itself (preset, tied weights, auto toggles) reruns the page.
            knobs.panel(t.input, t.config, rerun=MOVED)
        st.button(
            "Reset to recorded settings",
            key="pg_reset",
            on_click=knobs.load,
            args=(t.config, t.input),
        )
        _config_file(t)
    with right:
        _result(t)


@dataclass(frozen=True)
class _Run:
    """The re-run the knobs describe and what its diff compares with."""

    cfg: Config
    cfg_json: str
    result: BuildResult
    mode: str
    base_cfg: Config
    base: BuildResult | None


def _current(t: Trace) -> _Run:
    """Both fragments start here; the re-run and the baseline come from caches after the
    first (raises ``CtxscopeError`` when the knobs do not make a valid config)."""
    cfg = resolve_config(knobs.current(t.input), t.input)
    cfg_json = views.config_json(cfg)
    result = state.rebuild(t, cfg, cfg_json)
    mode = str(state.ss_get("pg_diff_mode") or RECORDED)
    base_cfg, base = _baseline(t, cfg, mode)
    return _Run(cfg, cfg_json, result, mode, base_cfg, base)


def _result(t: Trace) -> None:
    """The result column. The diff switch and the tabs are drawn here, outside the MOVED
    fragments: switching either reruns the page, as a knob move never needs them redrawn."""
    with state.guard():
        st.radio(
            "Differences against",
            [RECORDED, PREVIOUS],
            key="pg_diff_mode",
            horizontal=True,
            help="the recorded build, or the run before your last change",
        )
        _summary(t)
        part, box = widgets.section(SECTIONS, "pg_section")
        with box:
            if part == "Decisions":
                _table_controls(t)
            _body(t, part)


def _table_controls(t: Trace) -> None:
    """The decisions table's filters, sort and pager, drawn by the page, not by the BODY
    fragment: a knob move redraws the rows, not the eight controls (docs/design.md, "The
    app"). A control reruns the BODY fragment alone."""
    try:
        run = _current(t)
    except CtxscopeError:
        return  # the summary shows the error
    widgets.decision_controls(_frame(t, run), "pg", changed=True, rerun=[BODY])


@st.fragment(key=SUMMARY)
def _summary(t: Trace) -> None:
    """Metrics, what flipped and the window bar of the re-run."""
    with state.guard():  # a fragment rerun runs outside app.py's error handling
        try:
            run = _current(t)
        except CtxscopeError as exc:
            st.error(views.md(exc), icon=":material/error:")
            return
        state.qp_set(_params(t, run.cfg))
        state.ss_set("pg_qp_written", state.qp_all())
        _draw_summary(t, run)


def _params(t: Trace, cfg: Config) -> dict[str, str]:
    return {"trace": t.trace_id, **views.config_to_params(cfg)}


def _against(run: _Run) -> str:
    """What the diff compares with, as a cache key."""
    if run.base is None:
        return "nothing"
    return "recorded" if run.mode == RECORDED else views.config_json(run.base_cfg)


def _flips(t: Trace, run: _Run) -> pd.DataFrame:
    # Tables derived from a re-run are kept per (trace, config): moving a knob back to a
    # value seen before redraws from memory (docs/design.md, "The app").
    return state.derived(
        "pg_flipped",
        t.trace_id,
        f"{run.cfg_json}\n{_against(run)}",
        lambda: views.flipped(run.base, run.result, t.input.history),
    )


def _draw_summary(t: Trace, run: _Run) -> None:
    # Everything is computed before the first element is drawn: the browser gets the
    # summary in one go rather than in pieces, each of which it would render on its own.
    flips = _flips(t, run)
    if (state.ss_get("pg_section") or SECTIONS[0]) == "Decisions":
        _rows(t, run)  # the body's table, ready before the first element is drawn
    note = None
    if flips.empty:
        # which knobs moved means something within one preset only: another preset (a policy
        # on an imported trace's request) has other knobs, not moved ones
        same = run.base is not None and run.base_cfg.preset == run.cfg.preset
        note = (
            views.no_effect_note(run.base_cfg, run.cfg, run.base, run.result)
            if same and run.base
            else None
        ) or (
            "Nothing changed against the recorded build."
            if run.mode == RECORDED
            else "No earlier run yet: move a knob to compare with the run before."
        )
    variant = t.model_copy(update={"config": run.cfg, "result": run.result})
    bar = figures.window_bar(variant)
    summary = views.flip_summary(flips)
    # one element for the numbers, not fourteen metric cards and columns (docs/design.md,
    # "The app")
    widgets.metrics_changes(run.result, run.base)
    st.subheader(f"Flipped ({len(flips)})")
    if note is not None:
        st.caption(note)
    else:
        widgets.readable_table(
            flips,
            "pg_flipped",
            column_config=FLIP_CONFIG,
            column_order=FLIP_ORDER,
            whole=[*FLIP_WHOLE, *(["id_now"] if flips["id_now"].any() else [])],
        )
    # The flip count goes under the bar, not into the figure: Streamlit redraws a plotly
    # chart from scratch whenever its figure changes, and most moves (a filter, a weight)
    # leave the window's usage as it was, so the bar's figure stays the same and is not
    # redrawn. The empty slot keeps the elements after it in place when there is no note.
    st.plotly_chart(bar, key="pg_window")
    slot = st.empty()
    if summary:
        slot.caption(summary)


@st.fragment(key=BODY)
def _body(t: Trace, part: str) -> None:
    """The open tab's content."""
    with state.guard():
        try:
            run = _current(t)
        except CtxscopeError:
            return  # the summary above shows the error
        _draw_body(t, run, part)


def _changed(flips: pd.DataFrame) -> dict[str, str]:
    """Each packet of the re-run that changed -> its status in the build compared with, in
    the flipped table's order (a packet the other build names otherwise: by its id now)."""
    ids = [now or pid for pid, now in zip(flips["packet_id"], flips["id_now"], strict=True)]
    return {
        pid: before
        for pid, before, now in zip(ids, flips["status_before"], flips["status_now"], strict=True)
        if now != "—"
    }


def _frame(t: Trace, run: _Run) -> pd.DataFrame:
    return state.derived(
        "pg_decisions",
        t.trace_id,
        run.cfg_json,
        lambda: views.decisions_frame(run.result.decisions),
    )


def _rows(t: Trace, run: _Run) -> widgets.DecisionPage:
    """The page of the decisions table the controls ask for, kept per (trace, config,
    baseline, controls): the summary computes it before it draws, so the body's run only
    draws and both fragments' elements reach the browser together."""
    return state.derived(
        "pg_rows",
        t.trace_id,
        f"{run.cfg_json}\n{_against(run)}\n{widgets.decision_view_key('pg')}",
        lambda: widgets.decision_page(_frame(t, run), "pg", changed=_changed(_flips(t, run))),
    )


def _draw_body(t: Trace, run: _Run, part: str) -> None:
    result, base = run.result, run.base
    if part == "Decisions":
        widgets.show_decision_page(_rows(t, run), "pg")
    elif part == "Prompt":
        widgets.prompt_view(result.prompt, "pg")
    elif part == "Prompt diff":
        diff = views.prompt_diff(
            base.prompt if base else "",
            result.prompt,
            "recorded" if run.mode == RECORDED else "previous",
            "variant",
        )
        st.code(diff or "(the prompts are identical)", language="diff", height=520)
    elif part == "Scores":
        variant = t.model_copy(update={"config": run.cfg, "result": result})
        widgets.score_chart(variant, "pg")
    else:
        st.caption("Permalink: opens this trace with exactly these settings.")
        page_url = (st.context.url or "").split("?")[0]
        st.code(f"{page_url}?{urlencode(_params(t, run.cfg))}", language=None, wrap_lines=True)
        if st.button("Save variant as a new trace", key="pg_save", type="primary"):
            with state.guard():
                _save(t, run.cfg)
        saved = state.ss_get("pg_saved")
        if saved:
            st.success(f"Saved as trace {views.code(saved)} (linked to {views.code(t.trace_id)}).")
            if st.button("Open the saved variant", key="pg_open_saved"):
                state.switch("inspect", trace=saved)


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
