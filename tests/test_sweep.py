"""Every sweep cell equals what ``build()`` gives for that cell's config."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Reason, Status
from ctxcore.pipeline import build, resolve_config
from ctxcore.pipeline.sweep import sweep

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from corpus_input import corpus_input  # noqa: E402

IN = (Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED)


@pytest.fixture(scope="module")
def inp() -> CapturedInput:
    return corpus_input(120, seed=3)


def _check_cell(grid, inp: CapturedInput, i: int, j: int, watch: str | None) -> bool:  # type: ignore[no-untyped-def]
    cfg = grid.config_at(i, j)
    assert getattr(cfg, grid.x_param) == grid.x_values[i]
    assert getattr(cfg, grid.y_param) == grid.y_values[j]
    r = build(inp, cfg)
    assert grid.tokens_used[j, i] == r.totals.used
    assert grid.items_kept[j, i] == sum(d.status == Status.KEPT for d in r.decisions)
    assert grid.items_included[j, i] == sum(d.status in IN for d in r.decisions)
    if watch is not None:
        assert grid.watch_in is not None
        want = any(d.packet_id == watch and d.status in IN for d in r.decisions)
        assert bool(grid.watch_in[j, i]) == want
    return any(d.reason == Reason.DEGRADED for d in r.decisions)


def test_cells_equal_build_including_degraded_ones(inp: CapturedInput) -> None:
    watch = "tool:latest_failure"
    xs = [0.0, 0.3, 0.6, 1.0]
    ys = [4200, 6000, 9000, 16000]
    grid = sweep(inp, Config(), "relevance_weight", xs, "max_tokens", ys, watch_packet=watch)
    assert grid.vectorized and grid.shape == (4, 4)
    degraded = [_check_cell(grid, inp, i, j, watch) for j in range(4) for i in range(4)]
    assert any(degraded)  # some cells needed the ladder
    assert grid.tokens_used[0, 0] < grid.tokens_used[3, 0]  # more window, more used
    assert grid.watch_in is not None and grid.watch_in.dtype == np.bool_


def test_history_limit_and_min_relevance_cells(inp: CapturedInput) -> None:
    watch = "builder:history:summary"
    grid = sweep(
        inp, Config(max_tokens=12000), "history_limit", [0, 5, 30], "min_relevance", [0.0, 0.3],
        watch_packet=watch,
    )  # fmt: skip
    for j in range(2):
        for i in range(3):
            _check_cell(grid, inp, i, j, watch)
    assert grid.watch_in is not None and not grid.watch_in[:, 2].any()  # limit 30: no summary


def test_fill_modes_and_weights_cells(inp: CapturedInput) -> None:
    grid = sweep(inp, Config(max_tokens=7000), "fill", ["skip", "break", "optimal"],
                 "recency_weight", [0.1, 0.9])  # fmt: skip
    for j in range(2):
        for i in range(3):
            _check_cell(grid, inp, i, j, None)
    assert grid.watch_in is None


def test_reserve_ratio_sweep_moves_the_reserve_of_a_recorded_config(inp: CapturedInput) -> None:
    recorded = resolve_config(Config(max_tokens=10000), inp)  # output_reserve is now fixed
    grid = sweep(inp, recorded, "reserve_ratio", [0.1, 0.4], "min_relevance", [0.05])
    a, b = grid.config_at(0, 0), grid.config_at(1, 0)
    assert (a.output_reserve, b.output_reserve) == (1000, 4000)
    assert grid.tokens_used[0, 1] < grid.tokens_used[0, 0]
    for i in range(2):
        _check_cell(grid, inp, i, 0, None)


def test_other_presets_fall_back_to_build_per_cell(inp: CapturedInput) -> None:
    grid = sweep(inp, Config(preset="hello-agents"), "max_tokens", [3000, 8000],
                 "min_relevance", [0.0, 0.3], watch_packet="task:issue-1867")  # fmt: skip
    assert not grid.vectorized
    for j in range(2):
        for i in range(2):
            _check_cell(grid, inp, i, j, "task:issue-1867")


def test_estimator_tokenizer_falls_back_and_matches(inp: CapturedInput) -> None:
    grid = sweep(inp, Config(tokenizer="len/4"), "max_tokens", [6000, 9000],
                 "relevance_weight", [0.5])  # fmt: skip
    assert not grid.vectorized
    for i in range(2):
        _check_cell(grid, inp, i, 0, None)


@pytest.mark.parametrize(
    ("x", "xs", "match"),
    [("colour", [1], "not a config knob"), ("min_relevance", [0.1], "both"),
     ("max_tokens", [-5], "max_tokens")],
)  # fmt: skip
def test_bad_sweeps_are_input_errors(inp: CapturedInput, x: str, xs: list, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError, match=match):
        sweep(inp, Config(), x, xs, "min_relevance", [0.1])
