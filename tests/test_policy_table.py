"""The README's Complexity Trap comparison is what the code computes (scripts/policy_table.py),
and the bench it comes from measures what ``ctxscope replay`` scores: the same input tokens
and recall as ``ctxcore.replay.evaluate`` for the same policy on the same run."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from scripts_support import readme, script

from ctxcore.cost import price_table
from ctxcore.formats.load import load_file
from ctxcore.replay.evaluate import evaluate

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def policy_table() -> ModuleType:
    return script("policy_table")


@pytest.fixture(scope="module")
def block(policy_table: ModuleType) -> str:
    text: str = policy_table.block()
    return text


def test_the_readme_block_is_the_computed_one(policy_table: ModuleType, block: str) -> None:
    text = readme()
    assert block in text, "run python scripts/policy_table.py"
    assert policy_table.with_block(text, block) == text


def test_the_block_shows_the_paper_beside_the_replay_with_and_without_the_cache(
    block: str,
) -> None:
    assert "arXiv 2508.21433" in block and "halves the cost" in block
    header = next(line for line in block.splitlines() if line.startswith("| policy |"))
    assert "$ nothing cached" in header and "$ with the prompt cache" in header
    assert "recall" in header
    rows = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == [
        "raw (recorded)",
        "masking (n=10)",
        "masking (n=10, polling=10)",
        "summary stand-in (openhands-summarizing)",
        "hybrid (43/10, n=10)",
    ]


def test_the_bench_measures_what_replay_scores(policy_table: ModuleType) -> None:
    """On the pydicom SWE-agent run: masking at n=5 elides observations (the run was recorded
    at n=10), and the bench's tokens and recall are evaluate's."""
    bench = policy_table.bench_policies
    traces = load_file(ROOT / "corpus" / "b03_sweagent_pydicom-1458.traj.json")
    settings = {"preset": "swe-agent-masking", "n": 5}
    got = bench.measure(traces, settings, "claude-sonnet-4-5")
    recorded, scored = evaluate(traces, [settings], price_table(), workers=1)
    assert got["input_tokens"] == scored.input_tokens < recorded.input_tokens
    assert got["recall"] == pytest.approx(scored.recall)
    raw = bench.measure(traces, {"preset": "recorded"}, "claude-sonnet-4-5")
    assert raw["input_tokens"] == recorded.input_tokens
    assert raw["recall"] == pytest.approx(recorded.recall) == 1.0
    # nothing cached costs more than through the cache, for the raw run whose prefix is kept
    assert raw["usd_uncached"] > raw["usd"]
