"""The Playground's knob panel: one widget per config knob the chosen preset has, drawn as
its declaration says (kind, label, help, range), docs/design.md, "Knobs".

Widget keys are stable (``pg_<knob>``, ``pg_pb_<partition>``, ``pg_preset``) so the
browser tests, permalinks and the Sweep page can address them. Values live in session
state; ``load`` fills them from a config (the recorded one, or a permalink's), and
``current`` reads them back into a ``Config``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import streamlit as st

from ctxapp.ui import state, views
from ctxcore import knobs as registry
from ctxcore.errors import CtxscopeError
from ctxcore.knobs import Knob
from ctxcore.loading import config_from_obj
from ctxcore.models import PARTITIONS, CapturedInput, Config
from ctxcore.pipeline import PRESET_NAMES, resolve_config
from ctxcore.pipeline.recorded import carried_knobs, conversation

PREFIX = "pg_"
#: knobs a preset derives from max_tokens when they are None; "auto" keeps them derived
AUTO = tuple(k.name for k in registry.KNOBS if k.auto)


def _controls() -> list[Knob]:
    """The knobs drawn one control each, in order, as declared now (the per-partition
    shares are a group of sliders of their own)."""
    return [k for k in registry.KNOBS if k.kind != "shares"]


def auto_knobs(cfg: Config, inp: CapturedInput) -> set[str]:
    """The knobs of a resolved config whose value is exactly what the preset derives."""
    out = set()
    for name in AUTO:
        v = getattr(cfg, name)
        if v is None:
            continue
        try:
            again = resolve_config(cfg.model_copy(update={name: None}), inp)
        except CtxscopeError:
            continue
        if getattr(again, name) == v:
            out.add(name)
    return out


def loosen(cfg: Config, inp: CapturedInput) -> Config:
    """``cfg`` with its derived knobs set back to None, so they follow max_tokens."""
    return cfg.model_copy(update={n: None for n in auto_knobs(cfg, inp)})


def key(name: str) -> str:
    if name in PARTITIONS:
        return PREFIX + views.PARTITION_SLUGS[name]
    return PREFIX + name


def _all_keys() -> list[str]:
    return (
        [key(k.name) for k in _controls()]
        + [key(p) for p in PARTITIONS]
        + [PREFIX + "preset"]
        + [PREFIX + "auto_" + n for n in AUTO]
    )


def preset_defaults(preset: str, inp: CapturedInput) -> Config:
    return resolve_config(Config(preset=preset), inp)


def load(cfg: Config, inp: CapturedInput) -> None:
    """Put every knob of a resolved config into session state (others are removed)."""
    for k in _all_keys():
        state.ss_pop(k)
    auto = auto_knobs(cfg, inp)
    for name in AUTO:
        state.ss_set(PREFIX + "auto_" + name, name in auto)
    state.ss_set(PREFIX + "preset", cfg.preset)
    data = cfg.model_dump(exclude_none=True)
    for name in (k.name for k in _controls()):
        if name in data:
            v = data[name]
            state.ss_set(key(name), list(v) if isinstance(v, list) else v)
    for part, ratio in (cfg.partition_budgets or {}).items():
        state.ss_set(key(part), float(ratio))
    rw, cw = cfg.relevance_weight, cfg.recency_weight
    state.ss_set(
        PREFIX + "tie_weights", rw is not None and cw is not None and math.isclose(rw + cw, 1.0)
    )


def switched_to(preset: str, recorded: Config, inp: CapturedInput) -> Config:
    """The config the panel starts from when ``preset`` is chosen: the recorded one for the
    recorded preset, else ``preset``'s defaults with what a replay carries over (a preset on
    the recorded request keeps the recorded tokenizer, ``recorded.carried_knobs``), so the
    Playground rebuilds what ``ctxscope replay --preset`` does."""
    if preset == recorded.preset:
        return recorded
    patch = {"preset": preset, **carried_knobs(recorded, preset)}
    return resolve_config(config_from_obj(patch, "Playground preset"), inp)


def tool_names(inputs: Sequence[CapturedInput]) -> list[str]:
    """The tool names these requests offer or call (``exclude_tools``' choices)."""
    names: set[str] = set()
    for inp in inputs:
        names.update(d.name for d in inp.tools)
        for m in conversation(inp).messages():
            calls = m.metadata.get("tool_calls")
            for c in calls if isinstance(calls, list) else []:
                name = c.get("name") if isinstance(c, dict) else None
                if isinstance(name, str) and name:
                    names.add(name)
    return sorted(names)


def _on_preset(inp: CapturedInput, recorded: Config) -> None:
    # Another preset's resolved knobs do not carry over (but for what replay carries).
    load(switched_to(str(state.ss_get(PREFIX + "preset")), recorded, inp), inp)


def _moved(rerun: Sequence[str]) -> None:
    """A value knob moved: rerun only the fragments that draw the result (their keys), not
    the page; the panel itself looks the same (docs/design.md, "The app")."""
    if rerun:
        st.rerun(list(rerun))


def _tie(changed: str, rerun: Sequence[str]) -> None:
    if not state.ss_get(PREFIX + "tie_weights"):
        _moved(rerun)
        return
    # the other weight's slider moves too: the whole page reruns (the panel redraws)
    other = "recency_weight" if changed == "relevance_weight" else "relevance_weight"
    v = float(state.ss_get(key(changed), 0.0))
    state.ss_set(key(other), round(1.0 - v, 6))


def panel(inp: CapturedInput, recorded: Config, rerun: Sequence[str] = ()) -> None:
    """Draw the widgets of the current preset's knobs (values come from session state).

    ``rerun`` names the fragments that draw the result: a knob holding a value reruns only
    them. The preset, the tied weights and the auto toggles change the panel and rerun the
    page (so does every knob without ``rerun``).
    """
    st.selectbox(
        "Preset",
        list(PRESET_NAMES),
        key=PREFIX + "preset",
        on_change=_on_preset,
        args=(inp, recorded),
    )
    preset = str(state.ss_get(PREFIX + "preset"))
    defaults = preset_defaults(preset, inp).model_dump(exclude_none=True)
    has = [k.name for k in _controls() if k.name in defaults]
    for name in has:  # a knob the loaded config lacked: the preset's default
        state.ss_default(key(name), defaults[name])
    weights = "relevance_weight" in has and "recency_weight" in has
    if weights:
        st.toggle(
            "Weights sum to 1",
            key=PREFIX + "tie_weights",
            help="Moving one weight moves the other (the tutorial's rule).",
        )
    # Slider ranges must not depend on the slider's own value: a range that moves with
    # the value re-creates the widget and it snaps back. Size them from the trace.
    top = max(32_000, 2 * int(recorded.max_tokens or 0), 2 * int(inp.window or 0))
    top = -(-top // 1000) * 1000
    tools = tool_names([inp])
    for name in has:
        _widget(name, defaults[name], top, rerun, tools)
    if "partition_budgets" in defaults:
        with st.expander(registry.BY_NAME["partition_budgets"].label, expanded=False):
            for part in PARTITIONS:
                state.ss_default(key(part), float(defaults["partition_budgets"].get(part, 0.0)))
                st.slider(part, 0.0, 1.0, step=0.01, key=key(part), on_change=_moved, args=(rerun,))


def _widget(
    name: str, default: Any, max_tokens_top: int, rerun: Sequence[str], tools: Sequence[str]
) -> None:
    """The control of one knob, as its declaration says (kind, label, help, range, step); a
    list of names without fixed choices (``exclude_tools``) offers the input's tool names."""
    spec = registry.BY_NAME[name]
    k = key(name)
    label = spec.label
    moved: dict[str, Any] = {"on_change": _moved, "args": (rerun,), "help": spec.help}
    if spec.kind == "ratio":
        lo, hi, step = float(spec.low_value() or 0.0), float(spec.top_value() or 1.0), spec.step
        if name in ("relevance_weight", "recency_weight"):
            st.slider(
                label, lo, hi, step=step, key=k, on_change=_tie, args=(name, rerun), help=spec.help
            )
        else:
            st.slider(label, lo, hi, step=step, key=k, **moved)
    elif spec.kind == "int":
        _int_widget(spec, default, max_tokens_top, moved)
    elif spec.kind == "float":
        st.number_input(label, min_value=spec.low_value(), step=spec.step, key=k, **moved)
    elif spec.kind == "bool":
        st.toggle(label, key=k, **moved)
    elif spec.kind == "choice":
        st.selectbox(label, list(spec.choices), key=k, **moved)
    elif spec.kind == "list":
        extra = () if spec.choices else tools
        opts = list(dict.fromkeys([*default, *extra, *state.ss_get(k, [])]))
        st.multiselect(label, opts, key=k, **moved)
    elif spec.kind == "text":
        st.text_input(label, key=k, **moved)


def _int_widget(spec: Knob, default: Any, max_tokens_top: int, moved: dict[str, Any]) -> None:
    """An integer knob: the budget as a slider sized from the trace, a derived one behind
    its "auto" switch, any other as a number."""
    name, k = spec.name, key(spec.name)
    if spec.auto:
        auto = st.toggle(
            f"auto {name.split('_')[0]}",
            key=PREFIX + "auto_" + name,
            help=f"{name} follows max_tokens: derived by the preset from max_tokens "
            "(and reserve_ratio). Turn off to set it by hand.",
        )
        if auto:
            return
    step = int(spec.step or 1)
    if name == "max_tokens":
        if int(state.ss_get(k, default)) > max_tokens_top:  # a link beyond the range
            state.ss_set(k, max_tokens_top)
        low = int(spec.low_value() or step)
        st.slider(spec.label, low, max_tokens_top, step=step, key=k, **moved)
    else:
        st.number_input(spec.label, min_value=int(spec.low_value() or 0), step=step, key=k, **moved)


def current(inp: CapturedInput) -> Config:
    """The config the widgets describe (validated; errors name the knob)."""
    preset = str(state.ss_get(PREFIX + "preset"))
    defaults = preset_defaults(preset, inp).model_dump(exclude_none=True)
    data: dict[str, object] = {"preset": preset}
    for spec in _controls():
        name = spec.name
        if name in AUTO and state.ss_get(PREFIX + "auto_" + name):
            continue  # None: the preset derives it from max_tokens
        if name in defaults and state.ss_has(key(name)):
            v = state.ss_get(key(name))
            if spec.kind == "int":
                v = int(v)
            elif spec.kind in ("ratio", "float"):
                v = round(float(v), 6)
            data[name] = v
    if "partition_budgets" in defaults:
        data["partition_budgets"] = {
            p: round(float(state.ss_get(key(p), 0.0)), 6) for p in PARTITIONS
        }
    return config_from_obj(data, "Playground settings")
