"""The README's table of recorded against simulated cache reads is what the code computes
(scripts/cost_table.py), and its figures are the fixtures' own."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from scripts_support import readme, script

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"


@pytest.fixture(scope="module")
def cost_table() -> ModuleType:
    return script("cost_table")


@pytest.fixture(scope="module")
def table(cost_table: ModuleType) -> str:
    text: str = cost_table.readme_table()
    return text


def _row(table: str, fixture: str) -> list[str]:
    line = next(x for x in table.splitlines() if x.startswith(f"| `{fixture}` |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_readme_table_is_the_computed_one(cost_table: ModuleType, table: str) -> None:
    text = readme()
    assert table in text
    assert cost_table.with_table(text, table) == text, "run python scripts/cost_table.py"


def test_billed_reads_are_the_logs_own_from_the_second_call(table: str) -> None:
    """The /init session's billed reads, summed here from the log's usage lines (one per
    reply: Claude Code writes a reply's usage on each of its lines)."""
    log = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"
    usage: dict[str, int] = {}
    for line in log.read_text().splitlines():
        obj = json.loads(line)
        msg = obj.get("message") or {}
        if obj.get("type") == "assistant" and "usage" in msg:
            usage.setdefault(msg["id"], msg["usage"]["cache_read_input_tokens"])
    reads = list(usage.values())
    cells = _row(table, "claude-code/ccviewer-init-session.jsonl")
    assert cells[2] == str(len(reads))
    assert cells[3] == f"{sum(reads[1:]):,}"
    assert cells[7] == f"{reads[0]:,}"  # the first call's read: cached before the recording


def test_every_session_with_recorded_reads_has_a_row(table: str) -> None:
    rows = [x for x in table.splitlines()[2:] if x.startswith("| `")]
    assert len(rows) >= 20
    named = {_row(table, r.split("`")[1])[0] for r in rows}
    for fixture in (
        "claude-code/ccviewer-task-sidechain-session.jsonl",
        "codex/localpush-rollout-2034.jsonl",
        "gemini-cli/aim-matrix-pro.json",
        "pi/pi-mono-large-session.subset.jsonl",
    ):
        assert f"`{fixture}`" in named
    # a side chain shares its parent's row (one cache)
    assert "(+2 side chains)" in _row(table, "claude-code/ccviewer-task-sidechain-session.jsonl")[1]
