"""Sweep: a grid over two knobs — where does the behaviour change? A cell opens the Playground."""

from __future__ import annotations

import streamlit as st

from ctxapp.ui import knobs, state, views, widgets
from ctxcore import figures
from ctxcore.knobs import BY_NAME, KNOBS
from ctxcore.models import Trace
from ctxcore.pipeline.sweep import SweepGrid

#: knobs a sweep can vary and their kind (``Knob.sweep`` in ``ctxcore.knobs``)
NUMERIC = {k.name: k.kind for k in KNOBS if k.sweep}


def _default_range(name: str, v: float) -> tuple[float, float]:
    """The range offered when the trace's value is ``v``: a share's whole range, else
    half to twice the value."""
    if NUMERIC[name] == "ratio":
        spec = BY_NAME[name]
        return (float(spec.low_value() or 0.0), float(spec.top_value() or 1.0))
    return (max(1.0, round(v / 2)), max(2.0, round(v * 2)))


def _axis(axis: str, t: Trace, params: list[str], default: str) -> tuple[str, list[float]]:
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    k = f"sw_{axis}_param"
    state.ss_default(k, default)
    name: str = c1.selectbox(f"{axis.upper()} parameter", params, key=k)
    cur = getattr(t.config, name)
    lo, hi = _default_range(name, float(cur if cur is not None else 1.0))
    whole = NUMERIC[name] == "int"
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
    if NUMERIC[name] == "int":
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


def _pick_axes(t: Trace) -> tuple[str, list[float], str, list[float]] | None:
    """The two knobs to sweep and their values; None (with a warning) when the preset has
    fewer than two."""
    params = [p for p in NUMERIC if getattr(t.config, p) is not None]
    if len(params) < 2:
        st.warning(f"The {t.config.preset} preset has fewer than two numeric knobs to sweep.")
        return None
    st.caption(f"Preset `{t.config.preset}`; every other knob stays as recorded.")
    x_name, xs = _axis("x", t, params, params[0])
    y_name, ys = _axis("y", t, params, views.sweep_y_default(params, x_name))
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


def render() -> None:
    st.title("Sweep")
    t = widgets.trace_picker("sw")
    if t is None:
        return
    state.qp_set({"trace": t.trace_id})
    axes = _pick_axes(t)
    if axes is None:
        return
    x_name, xs, y_name, ys = axes
    ids = [d.packet_id for d in t.result.decisions] if t.result else [p.id for p in t.input.packets]
    watch = st.selectbox("Watch packet (does it stay in?)", ["(none)", *ids], key="sw_watch")
    watch_id = None if watch == "(none)" else watch
    if x_name == y_name:
        st.warning("Pick two different parameters.")
        return
    if st.button(f"Run {len(xs) * len(ys)} builds", key="sw_run", type="primary"):
        with state.guard():
            base = knobs.loosen(t.config, t.input)  # reserve/safety follow max_tokens
            grid = state.sweep(t, base, x_name, tuple(xs), y_name, tuple(ys), watch_id)
            state.ss_set("sw_grid", (t.trace_id, x_name, y_name, watch_id, grid))
    # (trace id, x knob, y knob, watched packet, grid) of the last run
    held: tuple[str, str, str, str | None, SweepGrid] | None = state.ss_get("sw_grid")
    if not held or held[0] != t.trace_id:
        st.caption("Choose the ranges and run the sweep.")
        return
    _, gx, gy, gw, grid = held
    event = _draw_grid(grid, gx, gy, gw)
    _open_cell(t, grid, gx, gy, event)


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
