"""The start-up warm-up pays a first Timeline open's one-time costs (issue 32, Speed: the
Timeline of a 500-turn session opens in 1.5 s, cold too): after it, the page's imports and
the figures of a long session import nothing more. Checked in a fresh interpreter, where
nothing else has imported them first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "ctxapp" / "pages" / "timeline.py"

#: run in a fresh interpreter: the warm-up's body, then the page's own import statements
#: and the figures of a long session with costs (another shape than the warm-up's own);
#: prints the modules imported after the warm-up
_AFTER_WARM_UP = """
import ast, json, logging, sys
logging.disable(logging.WARNING)
from ctxapp.ui import state
state._warm_figures()
before = set(sys.modules)
page = {page!r}
tree = ast.parse(open(page).read())
for node in tree.body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        exec(compile(ast.Module([node], []), page, "exec"), {{}})
from datetime import UTC, datetime
import plotly.io as pio
from ctxcore import figures
from ctxcore.costing import cost_calls, summarize
from ctxcore.cost import price_table
from ctxcore.models import CapturedInput, Config, Outcome, Packet, TokenUsage
from ctxcore.pipeline import build_trace
rows = [
    {{"turn": t, "packet_id": f"p{{k}}", "kind": "history", "status": s, "reason": "NO_ROOM",
      "tokens_after": 7 * k}}
    for t in range(3, 160) if t % 40
    for k, s in enumerate(["kept", "dropped", "summarized", "filtered"] * 12)
]
now = datetime(2026, 5, 1, tzinfo=UTC)
inp = CapturedInput(query="q", now=now, packets=[Packet(id="m", kind="history", content="x " * 50)])
trace = build_trace(inp, Config(max_tokens=300), trace_id="t", created_at=now)
usage = TokenUsage(mapping="anthropic", input_tokens=90, cache_read_tokens=10, output_tokens=5)
trace = trace.model_copy(update={{"metadata": {{"model": "claude-sonnet-4-20250514"}},
                                  "outcome": Outcome(tokens=usage)}})
calls = cost_calls([summarize(trace)], price_table())
for fig in (figures.timeline_heatmap(rows, "grouped", group_by_kind=True, legend=False),
            figures.turns_figure(calls, "cost")):
    pio.to_json(fig.to_dict(), validate=False)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _imported_after_warm_up() -> list[str]:
    res = subprocess.run(
        [sys.executable, "-c", _AFTER_WARM_UP.format(page=str(PAGE))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got: list[str] = json.loads(res.stdout.strip().splitlines()[-1])
    return got


def test_after_the_warm_up_a_timeline_open_imports_nothing() -> None:
    """The page's modules (the ledger, the cost tables) and the validators plotly imports
    for a long grid (the rows' line, the turns below, a gap's line and label) and for the
    cost chart are all imported by the warm-up, so a first open pays none of them."""
    assert _imported_after_warm_up() == []
