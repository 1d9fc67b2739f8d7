"""A sweep over a recorded session (``sweep_session``): every cell, call by call, equals
``build()``'s tokens for that cell's config, for every policy preset on ``recorded`` (the
shared path: per-input rebuilds, a policy's outcome counted without a build result) and for
a preset that builds per call; and what the shared path remembers per input changes no
build's result."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ctxcore.errors import InputError
from ctxcore.formats.load import load_file
from ctxcore.models import BuildResult, CapturedInput, Config
from ctxcore.pipeline import build
from ctxcore.pipeline.sweep import sweep_session

ROOT = Path(__file__).resolve().parent.parent
#: a mini-swe-agent run (44 calls; user-message observations) and a SWE-agent one (tool
#: results, a system prompt): the first 24 calls of the one, all of the other
RUNS = (
    ("b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json", 24),
    ("a01_sweagent_marshmallow-1867_function-calling.traj.json", 13),
)

#: each policy preset with two of its knobs and values where it acts on these runs (their
#: calls hold 2k-40k tokens), and where it does not
GRIDS: list[tuple[str, str, list[Any], str, list[Any]]] = [
    ("swe-agent-masking", "n", [2, 10], "polling", [1, 3]),
    ("masking-summary-hybrid", "n", [2, 10], "summarize_every_n_turns", [3, 43]),
    ("openhands-observation-masking", "attention_window", [3, 100], "tokenizer", ["o200k_base"]),
    ("openhands-recent-events", "keep_first", [1, 2], "max_events", [8, 100]),
    ("openhands-summarizing", "keep_first", [1, 3], "max_size", [12, 100]),
    ("openhands-conversation-window", "max_tokens", [3000, 10**6], "tokenizer", ["cl100k_base"]),
    ("langchain-context-editing", "trigger", [2000, 10**6], "keep", [0, 3]),
    ("langchain-summarization", "trigger", [3000, 10**6], "keep", [2, 20]),
    ("langchain-trim", "max_tokens", [2500, 10**6], "strategy", ["last", "first"]),
    ("anthropic-context-editing", "trigger", [2000, 10**6], "clear_at_least", [0, 1500]),
    ("auto-compact", "threshold", [0.1, 0.9], "agent", ["claude-code", "codex"]),
]


@cache
def _inputs(name: str, calls: int) -> tuple[CapturedInput, ...]:
    traces = sorted(load_file(ROOT / "corpus" / name), key=lambda t: t.turn)[:calls]
    # auto-compact compacts at a share of the window, which these runs do not record
    return tuple(t.input.model_copy(update={"window": 40_000}) for t in traces)


def _fresh(inp: CapturedInput) -> CapturedInput:
    """An equal input that is another object: nothing remembered for ``inp`` applies."""
    return CapturedInput.model_validate(inp.model_dump())


def _same(a: BuildResult, b: BuildResult) -> bool:
    return a.model_copy(update={"timings": {}}) == b.model_copy(update={"timings": {}})


@pytest.mark.parametrize("run", RUNS, ids=[r[0].split("_")[0] for r in RUNS])
@pytest.mark.parametrize("grid", GRIDS, ids=[g[0] for g in GRIDS])
def test_every_cell_of_every_call_is_the_build(grid: tuple[Any, ...], run: tuple[str, int]) -> None:
    preset, x, xs, y, ys = grid
    inputs = _inputs(*run)
    got = sweep_session(inputs, Config(preset=preset), x, xs, y, ys)
    assert got.shared
    assert got.per_call.shape == (len(ys), len(xs), len(inputs))
    distinct = set()
    for j, yv in enumerate(ys):
        for i, xv in enumerate(xs):
            cfg = Config.model_validate({"preset": preset, x: xv, y: yv})
            want = [build(inp, cfg).totals.used for inp in inputs]
            assert got.per_call[j, i].tolist() == want, (preset, x, xv, y, yv)
            assert got.tokens[j, i] == sum(want)
            distinct.add(sum(want))
    # the values chosen make the policy act in some cells and not in others
    assert len(distinct) > 1, (preset, distinct)


def test_a_preset_not_on_recorded_builds_per_call() -> None:
    inputs = _inputs(*RUNS[1])[:4]
    got = sweep_session(
        inputs, Config(preset="ctxscope"), "max_tokens", [3000, 8000], "history_limit", [4]
    )
    assert not got.shared
    for i, mt in enumerate([3000, 8000]):
        cfg = Config(preset="ctxscope", max_tokens=mt, history_limit=4)
        assert got.per_call[0, i].tolist() == [build(inp, cfg).totals.used for inp in inputs]


@pytest.mark.parametrize("grid", GRIDS, ids=[g[0] for g in GRIDS])
def test_what_is_remembered_per_input_changes_no_result(grid: tuple[Any, ...]) -> None:
    """A build on an input the sweep has seen (its rebuild, messages and the messages sent
    remembered) equals the build on an equal input seen for the first time."""
    preset, x, xs, y, ys = grid
    inputs = _inputs(*RUNS[0])
    sweep_session(inputs, Config(preset=preset), x, xs, y, ys)
    for inp in (inputs[5], inputs[-1]):
        cfg = Config.model_validate({"preset": preset, x: xs[0], y: ys[-1]})
        assert _same(build(inp, cfg), build(_fresh(inp), cfg)), preset


def test_bad_session_sweeps_are_input_errors() -> None:
    inputs = _inputs(*RUNS[1])
    with pytest.raises(InputError, match="no calls"):
        sweep_session([], Config(preset="swe-agent-masking"), "n", [1], "polling", [1])
    with pytest.raises(InputError, match="both 'n'"):
        sweep_session(inputs, Config(preset="swe-agent-masking"), "n", [1], "n", [2])
    with pytest.raises(InputError, match="not valid"):
        sweep_session(inputs, Config(preset="swe-agent-masking"), "n", [0], "polling", [1])
