"""Sweep: a grid over two knobs — where does the behaviour change? A cell opens the Playground.

On a recorded trace (an imported or captured agent's call) the page also offers the policy
presets on ``recorded`` with their knobs, over the trace alone or over every call of its
session (``pipeline.sweep.sweep_session``: input tokens summed over the calls).
"""

from __future__ import annotations

import streamlit as st

from ctxapp.ui import knobs, state, views, widgets
from ctxcore import figures
from ctxcore.knobs import BY_NAME, KNOBS, honoured
from ctxcore.models import Config, Trace
from ctxcore.pipeline import resolve_config
from ctxcore.pipeline.recorded import NAME as RECORDED
from ctxcore.pipeline.recorded import RECORDED_BASED, carried_knobs
from ctxcore.pipeline.sweep import SessionSweep, SweepGrid, sweep_session
from ctxcore.replay.variants import INPUT_FACTS
from ctxcore.settings import IMPORT_BUILDER_PREFIX, PRESET_NAMES

#: knobs a sweep can vary and their kind (``Knob.sweep`` in ``ctxcore.knobs``)
NUMERIC = {k.name: k.kind for k in KNOBS if k.sweep}
#: every numeric knob's kind: a policy preset offers all of its numeric knobs
KINDS = {k.name: k.kind for k in KNOBS if k.numeric}
#: the policy presets on ``recorded``, in the presets' order
POLICIES = [p for p in PRESET_NAMES if p in RECORDED_BASED and p != RECORDED]


def _default_range(name: str, v: float) -> tuple[float, float]:
    """The range offered when the trace's value is ``v``: a share's whole range, else
    half to twice the value."""
    if KINDS[name] == "ratio":
        spec = BY_NAME[name]
        return (float(spec.low_value() or 0.0), float(spec.top_value() or 1.0))
    return (max(1.0, round(v / 2)), max(2.0, round(v * 2)))


def _axis(axis: str, cfg: Config, params: list[str], default: str) -> tuple[str, list[float]]:
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    k = f"sw_{axis}_param"
    if state.ss_get(k) not in params:
        state.ss_set(k, default)
    name: str = c1.selectbox(f"{axis.upper()} parameter", params, key=k)
    cur = getattr(cfg, name)
    lo, hi = _default_range(name, float(cur if cur is not None else 1.0))
    whole = KINDS[name] == "int"
    if state.ss_get(f"sw_{axis}_for") != name:  # a new parameter: its own default range
        # an integer knob gets integer bounds: the widget then shows 3000, not 3000.00
        state.ss_set(f"sw_{axis}_from", int(lo) if whole else lo)
        state.ss_set(f"sw_{axis}_to", int(hi) if whole else hi)
        state.ss_set(f"sw_{axis}_for", name)
    step: int | float = 1 if whole else 0.05
    start = c2.number_input("from", key=f"sw_{axis}_from", step=step)
    stop = c3.number_input("to", key=f"sw_{axis}_to", step=step)
    state.ss_default(f"sw_{axis}_steps", 6)
    steps = int(c4.number_input("steps", min_value=2, max_value=25, key=f"sw_{axis}_steps"))
    values = [start + (stop - start) * i / (steps - 1) for i in range(steps)]
    if whole:
        values = list(dict.fromkeys(int(round(v)) for v in values))
    else:
        values = [round(v, 4) for v in values]
    return name, values


def _label(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _clicked_cell(event: object, xv: list[float], yv: list[float]) -> tuple[int, int] | None:
    """The (i, j) of a heatmap cell the user clicked, if any."""
    points = getattr(getattr(event, "selection", None), "points", None) or []
    if not points:
        return None
    xs, ys = [_label(v) for v in xv], [_label(v) for v in yv]
    x, y = str(points[0].get("x")), str(points[0].get("y"))
    if x in xs and y in ys:
        return xs.index(x), ys.index(y)
    return None


def _pick_preset(t: Trace) -> Config:
    """The config the sweep varies: the trace's own, or on a recorded trace (imported, or
    built by a preset on ``recorded``) a policy preset picked here (with the recording's
    tokenizer, as a replay carries it)."""
    own = t.config.preset
    recorded = own in RECORDED_BASED or t.builder.name.startswith(IMPORT_BUILDER_PREFIX)
    options = [own, *(p for p in POLICIES if p != own)] if recorded else [own]
    if len(options) == 1:
        return t.config
    preset: str = st.selectbox(
        "Preset (a policy on the recorded request)", options, key="sw_preset"
    )
    if preset == own:
        return t.config
    return Config.model_validate({"preset": preset, **carried_knobs(t.config, preset)})


def _params(cfg: Config, t: Trace) -> list[str]:
    """The knobs offered as axes: a policy preset's numeric knobs (not the input's window
    and reserve), else the sweepable knobs the config sets."""
    if cfg.preset in POLICIES:
        return [n for n in honoured(cfg.preset) if n in KINDS and n not in INPUT_FACTS]
    return [p for p in NUMERIC if getattr(t.config, p) is not None]


def _pick_axes(t: Trace, cfg: Config) -> tuple[str, list[float], str, list[float]] | None:
    """The two knobs to sweep and their values; None (with a warning) when the preset has
    fewer than two."""
    params = _params(cfg, t)
    if len(params) < 2:
        st.warning(f"The {cfg.preset} preset has fewer than two numeric knobs to sweep.")
        return None
    st.caption(f"Preset `{cfg.preset}`; every other knob stays as recorded.")
    shown = resolve_config(cfg, t.input)  # the preset's defaults, to centre the ranges on
    x_name, xs = _axis("x", shown, params, params[0])
    y_name, ys = _axis("y", shown, params, views.sweep_y_default(params, x_name))
    return x_name, xs, y_name, ys


def _draw_grid(grid: SweepGrid, gx: str, gy: str, gw: str | None) -> object:
    """Tokens used and items kept over the grid (and whether the watched packet is in the
    window); returns the tokens map's selection event (a clicked cell)."""
    z_tokens, z_items, z_watch = views.sweep_arrays(grid)
    xv, yv = list(grid.x_values), list(grid.y_values)
    c1, c2 = st.columns(2)
    with c1:
        event = st.plotly_chart(
            figures.sweep_heatmap(
                z_tokens, xv, yv, x_label=gx, y_label=gy, title="Tokens used", value_label="tokens"
            ),
            key="sw_tokens",
            on_select="rerun",
            selection_mode="points",
        )
    with c2:
        st.plotly_chart(
            figures.sweep_heatmap(
                z_items, xv, yv, x_label=gx, y_label=gy, title="Items kept", value_label="items"
            ),
            key="sw_items",
        )
    if gw and z_watch is not None:
        st.plotly_chart(
            figures.sweep_heatmap(
                z_watch,
                xv,
                yv,
                x_label=gx,
                y_label=gy,
                title=f"Is {gw} in the window?",
                binary=True,
            ),
            key="sw_watch_map",
        )
    return event


def _open_cell(t: Trace, grid: SweepGrid, gx: str, gy: str, event: object) -> None:
    """A cell picked from the list, or clicked on the tokens map, opened in the Playground."""
    z_tokens, z_items, _ = views.sweep_arrays(grid)
    xv, yv = list(grid.x_values), list(grid.y_values)
    cells = [(i, j) for j in range(len(yv)) for i in range(len(xv))]
    c1, c2 = st.columns([3, 1])
    cell = c1.selectbox(
        "Cell",
        cells,
        key="sw_cell",
        format_func=lambda c: (
            f"{gx} = {xv[c[0]]:g}, {gy} = {yv[c[1]]:g} → "
            f"{z_tokens[c[1]][c[0]]:,.0f} tokens, {z_items[c[1]][c[0]]:,.0f} items"
        ),
    )
    clicked = _clicked_cell(event, xv, yv)
    if c2.button("Open cell in Playground", key="sw_open", type="primary") or clicked:
        i, j = clicked or cell
        cfg = grid.config_at(i, j)
        state.switch("playground", trace=t.trace_id, **views.config_to_params(cfg))


def _session_calls(t: Trace, cfg: Config) -> list[Trace]:
    """The calls a policy preset is swept over: the trace's session (in turn order) when
    the user keeps "over the session", else the trace alone."""
    if cfg.preset not in POLICIES:
        return [t]
    calls = state.session_traces(t.session_id)
    if len(calls) < 2:
        return [t]
    if st.checkbox(f"Over the session's {len(calls)} calls", value=True, key="sw_session"):
        return calls
    return [t]


def _run(
    t: Trace, cfg: Config, calls: list[Trace], axes: tuple[str, list[float], str, list[float]]
) -> None:
    """The sweep asked for, kept in the session state: a session sweep when ``calls`` are
    several, else the trace's (with a watched packet)."""
    x_name, xs, y_name, ys = axes
    if len(calls) > 1:
        if st.button(
            f"Run {len(xs) * len(ys)} × {len(calls)} builds", key="sw_run", type="primary"
        ):
            with state.guard():
                inputs = [c.input for c in calls]
                found = sweep_session(inputs, cfg, x_name, xs, y_name, ys)
                state.ss_set("sw_grid", (t.trace_id, x_name, y_name, None, found))
        return
    ids = [d.packet_id for d in t.result.decisions] if t.result else [p.id for p in t.input.packets]
    watch = st.selectbox("Watch packet (does it stay in?)", ["(none)", *ids], key="sw_watch")
    watch_id = None if watch == "(none)" else watch
    if st.button(f"Run {len(xs) * len(ys)} builds", key="sw_run", type="primary"):
        with state.guard():
            base = knobs.loosen(cfg, t.input)  # reserve/safety follow max_tokens
            grid = state.sweep(t, base, x_name, tuple(xs), y_name, tuple(ys), watch_id)
            state.ss_set("sw_grid", (t.trace_id, x_name, y_name, watch_id, grid))


def _draw_session(t: Trace, found: SessionSweep) -> None:
    """A session sweep's input tokens over the grid; a cell opens the Playground on the
    trace with that cell's settings."""
    xv, yv = list(found.x_values), list(found.y_values)
    gx, gy = found.x_param, found.y_param
    z = found.tokens.tolist()
    calls = found.per_call.shape[2]
    title = f"Input tokens over the session's {calls} calls ({found.config.preset})"
    event = st.plotly_chart(
        figures.sweep_heatmap(z, xv, yv, x_label=gx, y_label=gy, title=title, value_label="tokens"),
        key="sw_tokens",
        on_select="rerun",
        selection_mode="points",
    )
    cells = [(i, j) for j in range(len(yv)) for i in range(len(xv))]
    c1, c2 = st.columns([3, 1])
    cell = c1.selectbox(
        "Cell",
        cells,
        key="sw_cell",
        format_func=lambda c: (
            f"{gx} = {xv[c[0]]:g}, {gy} = {yv[c[1]]:g} → {z[c[1]][c[0]]:,} tokens"
        ),
    )
    clicked = _clicked_cell(event, xv, yv)
    if c2.button("Open cell in Playground", key="sw_open", type="primary") or clicked:
        i, j = clicked or cell
        cfg = found.config.model_copy(update={gx: xv[i], gy: yv[j]})
        state.switch("playground", trace=t.trace_id, **views.config_to_params(cfg))


def render() -> None:
    st.title("Sweep")
    t = widgets.trace_picker("sw")
    if t is None:
        return
    state.qp_set({"trace": t.trace_id})
    cfg = _pick_preset(t)
    axes = _pick_axes(t, cfg)
    if axes is None:
        return
    if axes[0] == axes[2]:
        st.warning("Pick two different parameters.")
        return
    _run(t, cfg, _session_calls(t, cfg), axes)
    # (trace id, x knob, y knob, watched packet, grid) of the last run
    held: tuple[str, str, str, str | None, SweepGrid | SessionSweep] | None = state.ss_get(
        "sw_grid"
    )
    if not held or held[0] != t.trace_id:
        st.caption("Choose the ranges and run the sweep.")
        return
    _, gx, gy, gw, grid = held
    if isinstance(grid, SessionSweep):
        _draw_session(t, grid)
        return
    event = _draw_grid(grid, gx, gy, gw)
    _open_cell(t, grid, gx, gy, event)


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
