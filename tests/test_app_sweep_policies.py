"""The Sweep page on an imported agent session (AppTest, a real DuckDB store): it offers the
policy presets with their knobs, sweeps one over every call of the session (the grid is
``sweep_session``'s, whose cells are ``build()``'s), and a cell opens the Playground with
the policy and that cell's knobs."""

from __future__ import annotations

from pathlib import Path

import app_support as data
import pytest

from ctxcore.formats.load import load_file
from ctxcore.models import Config, Trace
from ctxcore.pipeline import build
from ctxcore.pipeline.sweep import sweep_session

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "corpus" / "a01_sweagent_marshmallow-1867_function-calling.traj.json"


@pytest.fixture(scope="module")
def calls() -> list[Trace]:
    return sorted(load_file(RUN), key=lambda t: t.turn)


@pytest.fixture
def db(calls: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, calls)
    return path


def _axis(at, axis: str, name: str, lo: int, hi: int, steps: int):  # type: ignore[no-untyped-def]
    at.selectbox(key=f"sw_{axis}_param").set_value(name).run()
    at.number_input(key=f"sw_{axis}_from").set_value(lo).run()
    at.number_input(key=f"sw_{axis}_to").set_value(hi).run()
    at.number_input(key=f"sw_{axis}_steps").set_value(steps).run()
    return at


def test_a_policy_swept_over_the_session_opens_in_the_playground(
    db: Path, calls: list[Trace]
) -> None:
    t = calls[-1]
    at = data.open_page("sweep", timeout=120, trace=t.trace_id)
    presets = at.selectbox(key="sw_preset").options
    assert presets[0] == t.config.preset and "swe-agent-masking" in presets
    at.selectbox(key="sw_preset").set_value("masking-summary-hybrid").run()
    assert at.selectbox(key="sw_x_param").options == [
        "n",
        "polling",
        "summarize_every_n_turns",
        "keep_last_m_turns",
    ]
    _axis(at, "x", "n", 1, 9, 3)
    _axis(at, "y", "summarize_every_n_turns", 1, 3, 2)
    assert at.checkbox(key="sw_session").value  # over the session's calls by default
    at.button(key="sw_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cells = at.selectbox(key="sw_cell").options
    assert len(cells) == 6
    want = sweep_session(
        [c.input for c in calls],
        Config(preset="masking-summary-hybrid", tokenizer=t.config.tokenizer),
        "n",
        [1, 5, 9],
        "summarize_every_n_turns",
        [1, 3],
    )
    assert cells == [
        f"n = {x}, summarize_every_n_turns = {y} → {int(want.tokens[j, i]):,} tokens"
        for j, y in enumerate([1, 3])
        for i, x in enumerate([1, 5, 9])
    ]
    # the grid moves: masking n and the checkpoints change the session's tokens
    assert len({int(v) for v in want.tokens.ravel()}) > 1
    cfg = Config(preset="masking-summary-hybrid", n=1, summarize_every_n_turns=3)
    assert int(want.tokens[1, 0]) == sum(build(c.input, cfg).totals.used for c in calls)
    at.selectbox(key="sw_cell").set_value((0, 1)).run()
    at.button(key="sw_open").click().run()
    assert at.title[0].value == "Playground"
    assert at.query_params["preset"] == "masking-summary-hybrid"
    assert at.query_params["n"] == "1"
    assert at.query_params["summarize_every_n_turns"] == "3"
