"""The knobs' one declaration (``ctxcore/knobs.py``, docs/design.md "Knobs") and its readers.

``Config`` must agree with it field for field (names, types, bounds, the refusal of true/false
and NaN), every preset must resolve exactly the knobs it is declared to honour to the declared
defaults and refuse the rest, the README's table must be the one the declarations give, and
the readers — the Playground's controls, the Sweep page's axes, ``--set``'s errors, ``tune``'s
grid, the counterfactual search, ``ctxcore.testing``'s summary line — must follow a change
made to the declarations alone (the tests patch the registry and look at the real consumer).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from scripts_support import readme, script

from ctxcore import knobs
from ctxcore.cli import main
from ctxcore.diagnostics import counterfactual
from ctxcore.errors import InputError
from ctxcore.knobs import BY_NAME, KNOBS, NAMES, Derived, Knob
from ctxcore.models import CapturedInput, Config, FillMode, Packet
from ctxcore.pipeline import knobs as preset_knobs
from ctxcore.pipeline import resolve_config
from ctxcore.replay.variants import INPUT_FACTS
from ctxcore.settings import PRESET_NAMES

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 1, 16, 12, 0, tzinfo=UTC)
INPUT = CapturedInput(
    query="why does test_login fail?",
    now=NOW,
    packets=[Packet(id="tool:pytest", kind="tool_result", content="FAILED test_login")],
)


def patch_knobs(monkeypatch: pytest.MonkeyPatch, **changes: Mapping[str, Any]) -> None:
    """Change the declarations of some knobs for one test (``name={field: value}``)."""
    new = tuple(dataclasses.replace(k, **changes.get(k.name, {})) for k in KNOBS)
    monkeypatch.setattr(knobs, "KNOBS", new)
    monkeypatch.setattr(knobs, "BY_NAME", {k.name: k for k in new})


# --------------------------------------------------------------------------- Config


def test_config_has_a_field_for_every_knob_and_no_other() -> None:
    fields = [n for n in Config.model_fields if n != "preset"]
    assert sorted(fields) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_config_field_has_the_declared_type_and_bounds(name: str) -> None:
    k = BY_NAME[name]
    f = Config.model_fields[name]
    args = typing.get_args(f.annotation)
    assert type(None) in args and f.default is None
    [declared] = [a for a in args if a is not type(None)]
    if typing.get_origin(declared) is typing.Literal:
        assert k.kind == "choice" and set(typing.get_args(declared)) == set(k.choices)
    else:
        assert declared == k.python_type
    bounds = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in f.metadata}
    assert bounds == {b: v for b, v in k.bounds().items() if v is not None}


def test_fill_choices_are_the_contract_s() -> None:
    assert BY_NAME["fill"].choices == typing.get_args(FillMode)


@pytest.mark.parametrize("name", knobs.names(numeric=True))
def test_a_numeric_knob_refuses_true(name: str) -> None:
    with pytest.raises(ValidationError, match="must be a number, not true"):
        Config.model_validate({name: True})


@pytest.mark.parametrize("name", knobs.names(finite=True))
def test_a_float_knob_refuses_nan(name: str) -> None:
    with pytest.raises(ValidationError):
        Config.model_validate({name: float("nan")})


# --------------------------------------------------------------------------- presets


def _plain(v: object) -> object:
    return list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_a_preset_resolves_the_knobs_it_honours_to_their_declared_defaults(preset: str) -> None:
    cfg = resolve_config(Config(preset=preset), INPUT)  # type: ignore[arg-type]
    for k in KNOBS:
        value = getattr(cfg, k.name)
        if preset not in k.defaults:
            assert value is None, k.name
        elif isinstance(k.defaults[preset], Derived):
            assert value is not None, k.name
        else:
            assert value == _plain(k.defaults[preset]), k.name
    assert preset_knobs(preset) == [k.name for k in KNOBS if preset in k.defaults]


def _valid(k: Knob) -> object:
    if k.kind == "bool":
        return True
    if k.kind == "choice":
        return k.choices[0]
    if k.kind == "list":
        return ["noise"]
    if k.kind == "shares":
        return {"[Task]": 0.5}
    if k.kind == "text":
        return "x"
    return k.low_value()


@pytest.mark.parametrize(
    ("preset", "name"),
    [(p, k.name) for p in PRESET_NAMES for k in KNOBS if p not in k.defaults],
)
def test_a_preset_refuses_a_knob_it_is_not_declared_to_have(preset: str, name: str) -> None:
    cfg = Config.model_validate({"preset": preset, name: _valid(BY_NAME[name])})
    with pytest.raises(InputError, match=name):
        resolve_config(cfg, INPUT)


# --------------------------------------------------------------------------- README


def test_readme_table_of_knobs_is_the_declared_one() -> None:
    text = readme()
    assert knobs.readme_table() in text
    assert script("knob_table").with_table(text) == text, "run python scripts/knob_table.py"


def test_readme_table_shows_a_changed_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_knobs(monkeypatch, fill={"help": "Fills the window.", "defaults": {"ctxscope": "break"}})
    row = next(r for r in knobs.readme_table().splitlines() if r.startswith("| `fill`"))
    # only ctxscope has it: the other presets are not named (they refuse it)
    assert row == "| `fill` | one of skip, break, optimal | `ctxscope`: break | Fills the window. |"


def test_readme_table_names_each_preset_with_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Presets with one default are said together; a knob every preset has says the common
    default once and the exceptions by name."""
    fills = {"ctxscope": "break", "hello-agents": "skip", "hello-agents-book": "break"}
    encodings = {p: ("len/4" if p == "recorded" else "o200k_base") for p in PRESET_NAMES}
    patch_knobs(monkeypatch, fill={"defaults": fills}, tokenizer={"defaults": encodings})
    rows = {r.split(" | ")[0]: r.split(" | ")[2] for r in knobs.readme_table().splitlines()[2:]}
    assert rows["| `fill`"] == "`ctxscope`, `hello-agents-book`: break; `hello-agents`: skip"
    assert rows["| `tokenizer`"] == "every preset: o200k_base, but `recorded`: len/4"


# --------------------------------------------------------------------------- --set


def _beyond(k: Knob) -> float:
    """A value just outside the knob's bounds (below the lower one when it has one)."""
    if k.ge is not None:
        return k.ge - 1
    if k.gt is not None:
        return k.gt
    assert k.le is not None
    return k.le + 1


@pytest.mark.parametrize(
    # --set output_reserve=N changes the captured input (docs/design.md, "Presets")
    "name",
    [n for n in knobs.names(numeric=True) if n not in INPUT_FACTS],
)
def test_set_beyond_a_bound_is_refused_naming_the_knob_and_its_bounds(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    k = BY_NAME[name]
    path = tmp_path / "input.json"
    path.write_text(INPUT.model_dump_json())
    value = _beyond(k)
    shown = str(int(value)) if k.kind == "int" else repr(float(value))
    assert main(["build", str(path), "--set", f"{name}={shown}"]) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert not out and f"'{name}'" in line and f"({name} is {k.describe()})" in line
    Config.model_validate({name: k.low_value()})  # the lowest value offered is accepted


def test_set_of_no_knob_names_the_close_ones_and_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "input.json"
    path.write_text(INPUT.model_dump_json())
    assert main(["build", str(path), "--set", "min_relevanse=0.1"]) == 2
    err = capsys.readouterr().err
    assert "did you mean min_relevance?" in err and f"the knobs: {', '.join(NAMES)}" in err


def test_set_error_follows_the_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds in the message are the declared ones, read when the error is worded."""
    from ctxcore.loading import config_from_obj

    patch_knobs(monkeypatch, history_limit={"kind": "float"})
    with pytest.raises(InputError, match=r"\(history_limit is a number from 0 to 2,147,483,647\)"):
        config_from_obj({"history_limit": -1}, "--set")


# --------------------------------------------------------------------------- tune, search


def test_tune_searches_the_knobs_declared_with_a_grid(
    monkeypatch: pytest.MonkeyPatch, corpus: Path
) -> None:
    from ctxcore.cli.tune import tune
    from ctxcore.demo.recall import turns_of

    turns = turns_of(corpus / "a02_sweagent_function_calling_simple.traj.json", 2)
    grids = {k.name: {"tune": ()} for k in KNOBS if k.tune}
    patch_knobs(monkeypatch, **grids, priority_weight={"tune": (0.0, 1.0)})
    best, _, _ = tune(turns, 4000, rounds=1)
    assert list(best) == ["priority_weight"]
    assert best["priority_weight"] in (0.0, 0.1, 1.0)


def test_counterfactuals_search_the_declared_knobs_in_their_order() -> None:
    ranked = sorted((k for k in KNOBS if k.search), key=lambda k: k.search.rank)  # type: ignore[union-attr]
    quick = [k.name for k in ranked if k.search and k.search.quick]
    assert counterfactual.KNOBS == tuple(quick)
    assert counterfactual.ALL_KNOBS == (*quick, *(k.name for k in ranked if k.name not in quick))
    # every knob declared searchable has a search
    with pytest.raises(InputError, match="unknown knob"):
        counterfactual.counterfactuals(_dropped_trace(), "tool:big", knobs=["fill"])
    for name in counterfactual.ALL_KNOBS:
        counterfactual.counterfactuals(_dropped_trace(), "tool:big", knobs=[name], max_builds=4)


def _dropped_trace() -> Any:
    from ctxcore.pipeline import build_trace

    inp = CapturedInput(
        query="why does test_login fail?",
        now=NOW,
        packets=[
            Packet(id="tool:small", kind="tool_result", content="FAILED test_login " * 5),
            Packet(id="tool:big", kind="tool_result", content="test_login log line\n" * 400),
        ],
    )
    return build_trace(inp, Config(max_tokens=900))


def test_testing_summary_line_shows_the_declared_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxcore.testing import assert_kept

    patch_knobs(monkeypatch, history_limit={"summary": 8}, fill={"summary": None})
    with pytest.raises(AssertionError) as exc:
        assert_kept(_dropped_trace(), "tool:big")
    [line] = [x for x in str(exc.value).splitlines() if x.strip().startswith("config:")]
    assert line.strip().startswith("config: preset=ctxscope, max_tokens=900, reserve_ratio=")
    assert line.endswith(", tokenizer=cl100k_base, history_limit=20") and "fill=" not in line


# --------------------------------------------------------------------------- the app


@pytest.fixture
def app_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import app_support as data

    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(
        path, data.session("sess-k", 1) + data.session("sess-b", 1, preset="hello-agents-book")
    )
    monkeypatch.setenv("CTXSCOPE_DB", str(path))
    return path


def _control(at: Any, k: Knob) -> Any:
    """The Playground's control of knob ``k`` (the kind of widget its declaration gives)."""
    key = f"pg_{k.name}"
    if k.kind == "ratio" or k.name == "max_tokens":
        return at.slider(key=key)
    if k.kind in ("int", "float"):
        return at.number_input(key=key)
    if k.kind == "bool":
        return at.toggle(key=key)
    if k.kind == "choice":
        return at.selectbox(key=key)
    if k.kind == "text":
        return at.text_input(key=key)
    return at.multiselect(key=key)


@pytest.mark.parametrize("session", ["sess-k", "sess-b"])
def test_playground_draws_each_knob_of_the_preset_as_declared(app_db: Path, session: str) -> None:
    from app_support import open_page

    at = open_page("playground", trace=f"{session}-t0")
    preset = "ctxscope" if session == "sess-k" else "hello-agents-book"
    for k in KNOBS:
        if k.kind == "shares" or k.auto or preset not in k.defaults:
            continue
        control = _control(at, k)
        assert control.label == k.label and control.help == k.help, k.name
    kinds = ("slider", "number_input", "toggle", "selectbox", "multiselect")
    keys = {w.key for kind in kinds for w in getattr(at, kind)}
    assert {f"pg_{k.name}" for k in KNOBS if preset not in k.defaults}.isdisjoint(keys)


def test_playground_follows_a_changed_declaration(
    app_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app_support import open_page

    patch_knobs(
        monkeypatch,
        min_relevance={"label": "relevance floor", "help": "From the registry.", "top": 0.5},
        priority_weight={"kind": "shares"},  # no longer a control of its own
    )
    at = open_page("playground", trace="sess-k-t0")
    slider = at.slider(key="pg_min_relevance")
    assert (slider.label, slider.help, slider.max) == ("relevance floor", "From the registry.", 0.5)
    assert "pg_priority_weight" not in [s.key for s in at.slider]


def test_sweep_offers_the_knobs_declared_sweepable(
    app_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app_support import open_page

    at = open_page("sweep", trace="sess-k-t0")
    offered = at.selectbox(key="sw_x_param").options
    assert offered == [k.name for k in KNOBS if k.sweep]
    patch_knobs(monkeypatch, recency_tau_hours={"sweep": True}, history_limit={"sweep": False})
    at = open_page("sweep", trace="sess-k-t0")
    offered = at.selectbox(key="sw_x_param").options
    assert "recency_tau_hours" in offered and "history_limit" not in offered
