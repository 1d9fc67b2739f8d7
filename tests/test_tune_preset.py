"""``ctxscope tune --preset P FILE...`` (docs/design.md, "Evaluating policies") on a real
Claude Code session: the winner is the cheapest setting evaluate scores at or above the
recall floor, a floor none reaches is one line, a knob the preset lacks is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxcore.cli import main
from ctxcore.cost import price_table
from ctxcore.formats.load import load_file
from ctxcore.replay.evaluate import evaluate

SESSION = str(
    Path(__file__).parent
    / "fixtures"
    / "imports"
    / "claude-code"
    / "ccviewer-task-sidechain-session.jsonl"
)
PRESET = "anthropic-context-editing"
TRIGGERS = (0, 2000, 5000)
KEEPS = (0, 1, 3)
GRID = ["--grid", "trigger=" + ",".join(map(str, TRIGGERS)), "--grid", "keep=0,1,3"]
ARGS = ["tune", "--preset", PRESET, SESSION, *GRID, "--workers", "1"]


def test_the_winner_is_evaluates_cheapest_above_the_floor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    policies = [{"preset": PRESET, "trigger": t, "keep": k} for t in TRIGGERS for k in KEEPS]
    scores = evaluate(load_file(SESSION), policies, price_table(), workers=1)[1:]
    recalls = sorted({s.recall for s in scores if s.recall is not None})
    floor = recalls[1]  # a floor some settings miss: the cheapest overall may not win
    above = [s for s in scores if s.recall is not None and s.recall >= floor]
    assert 0 < len(above) < len(scores)
    cheapest = min(above, key=lambda s: s.cost_usd or 0.0)
    assert cheapest.cost_usd != min(s.cost_usd or 0.0 for s in scores)

    assert main([*ARGS, "--recall-floor", str(floor), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["settings"]) == len(policies)
    won = doc["settings"][doc["winner"]]
    assert won["settings"] == cheapest.settings
    assert won["cost_usd"] == pytest.approx(cheapest.cost_usd)
    assert won["recall"] >= floor
    sets = [f"--set {k}={v}" for k, v in cheapest.settings.items() if k != "preset"]
    assert doc["replay"].startswith(f"ctxscope replay {SESSION} --preset {PRESET}")
    assert all(s in doc["replay"] for s in sets)

    # the table: every setting tried, the winner marked, the --set line to reproduce it
    assert main([*ARGS, "--recall-floor", str(floor)]) == 0
    text = capsys.readouterr().out
    marked = [line for line in text.splitlines() if line.startswith("* ")]
    assert marked == [line for line in text.splitlines() if cheapest.label in line][:1]
    assert f"{cheapest.input_tokens:,}" in marked[0] and f"{cheapest.cost_usd:.4f}" in marked[0]
    assert sum(f"{PRESET} keep=" in line for line in text.splitlines()) == len(policies) + 1
    assert doc["replay"] in text


def test_a_floor_no_setting_meets_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--recall-floor", "1.0"]) == 1
    text = capsys.readouterr().out
    assert not any(line.startswith("* ") for line in text.splitlines())
    assert text.splitlines()[-1] == "no setting reaches recall 100.0% on these sessions"
    assert "ctxscope replay" not in text
    assert main([*ARGS, "--recall-floor", "1.0", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["winner"] is None and doc["replay"] is None
    assert all(s["recall"] < 1.0 for s in doc["settings"])


def test_a_knob_the_preset_lacks_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["tune", "--preset", PRESET, SESSION, "--grid", "n=5,10"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"--grid n: preset {PRESET} has no knob n" in err and "trigger" in err


def test_the_default_grid_comes_from_the_knob_registry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ctxcore.cli.tune_policy import default_grid

    grid = default_grid("swe-agent-masking")
    assert grid["n"] == [1, 5, 10, 20]  # lowest, half the default 10, the default, twice it
    assert main(["tune", "--preset", "swe-agent-masking", SESSION, "--workers", "1"]) in (0, 1)
    text = capsys.readouterr().out
    assert "12 settings from the default grid" in text.splitlines()[0]


def test_the_default_grid_of_a_token_knob_is_sized_to_the_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On this session of 110-5,703-token calls, the trigger's default grid lies inside the
    calls' sizes (each value fires on some calls and not on others), not at 50k-200k."""
    from ctxcore.cli.tune_policy import default_grid, session_sizes

    sizes = session_sizes(load_file(SESSION))
    assert (min(sizes), max(sizes)) == (110, 5703)
    grid = default_grid(PRESET, sizes)
    assert len(grid["trigger"]) == 3
    for v in grid["trigger"]:
        assert any(s > v for s in sizes) and any(s <= v for s in sizes), v
    assert grid["clear_at_least"][0] == 0 and max(grid["clear_at_least"]) < max(sizes)
    # without the session, the registry's grid around the preset's default
    assert default_grid(PRESET)["trigger"] == [0, 50_000, 100_000, 200_000]
    # a limit the preset computes from the window gets a sized grid too
    assert default_grid("langchain-trim", sizes)["max_tokens"] == grid["trigger"]
    assert main(["tune", "--preset", "langchain-trim", SESSION, "--workers", "1"]) in (0, 1)
    first = capsys.readouterr().out.splitlines()[0]
    assert "3 settings from the default grid" in first and "110-5,703 tokens" in first
