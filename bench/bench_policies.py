"""The Complexity Trap's comparison on the corpus's SWE-agent and mini-swe-agent runs: raw
(recorded) vs observation masking (also with polling) vs a summary stand-in vs the hybrid.

.venv/bin/python bench/bench_policies.py             # the table and the timed 5 x 5 sweep
.venv/bin/python bench/bench_policies.py --json out.json

Each call of each run is rebuilt with the policy (docs/design.md, "Agent policies"); its
input tokens are the build's (counted as ``recorded`` counts them), its $ the prompt-cache
simulation's (``ctxcore.costing.session_costs``) over the session's rebuilt calls in order,
every call priced as ``--model`` (the runs' own models are unpriced or unknown in the
shipped table) with the recorded reply's tokens as output. The summary stand-in is ctxscope's
deterministic summarizer, not a model: its summaries are shorter and cheaper than a model's.
The sweep times one policy over a 5 x 5 grid of its two knobs on the first 100 calls of the
longest run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxcore.cost import price_table  # noqa: E402
from ctxcore.costing import session_costs  # noqa: E402
from ctxcore.formats.load import load_file  # noqa: E402
from ctxcore.models import Config, Trace  # noqa: E402
from ctxcore.pipeline import build  # noqa: E402
from ctxcore.tokens import get_counter  # noqa: E402

#: the corpus's SWE-agent and mini-swe-agent trajectories
RUNS = (
    "a01_sweagent_marshmallow-1867_function-calling.traj.json",
    "a02_sweagent_function_calling_simple.traj.json",
    "b03_sweagent_pydicom-1458.traj.json",
    "a03_mini-swe-agent_github_issue.traj.json",
    "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json",
    "b02_mswea_gemini3pro_django__django-16560.traj.json",
)
#: the paper's four settings, as presets
POLICIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("raw (recorded)", {"preset": "recorded"}),
    ("masking (n=10)", {"preset": "swe-agent-masking", "n": 10}),
    # SWE-agent's own remedy for the cache: elide only every `polling` observations
    ("masking (n=10, polling=10)", {"preset": "swe-agent-masking", "n": 10, "polling": 10}),
    ("summary stand-in (openhands-summarizing)", {"preset": "openhands-summarizing"}),
    ("hybrid (43/10, n=10)", {"preset": "masking-summary-hybrid"}),
)
#: the sweep: one policy, two knobs, five values each
SWEEP_PRESET = "masking-summary-hybrid"
SWEEP_X = ("n", (2, 5, 10, 20, 40))
SWEEP_Y = ("summarize_every_n_turns", (5, 10, 21, 43, 80))
SWEEP_CALLS = 100


def rebuilt(traces: list[Trace], settings: dict[str, Any], model: str) -> list[Trace]:
    """Each recorded call rebuilt with ``settings`` (the recording's tokenizer), as a trace
    the cost simulation reads: the new result, priced as ``model``, the recorded usage
    dropped (it was billed for the recorded prompt) and the reply's output tokens kept."""
    out = []
    for t in traces:
        cfg = Config.model_validate({**settings, "tokenizer": t.config.tokenizer})
        result = build(t.input, cfg, counter=get_counter(t.config.tokenizer or "cl100k_base"))
        # the recorded usage was billed for the recorded prompt: the output is counted from
        # the reply's text instead
        outcome = t.outcome.model_copy(update={"tokens": None}) if t.outcome is not None else None
        out.append(
            t.model_copy(
                update={
                    "config": cfg,
                    "result": result,
                    "outcome": outcome,
                    "metadata": {**t.metadata, "model": model},
                }
            )
        )
    return out


def measure(traces: list[Trace], settings: dict[str, Any], model: str) -> dict[str, Any]:
    """Input tokens and cached $ of a run under ``settings``."""
    calls = rebuilt(traces, settings, model)
    costs = session_costs(calls, price_table())
    usd = [c.cost_usd for c in costs]
    return {
        "input_tokens": sum(c.result.totals.used for c in calls if c.result is not None),
        "cache_read_tokens": sum(c.cache_read_tokens for c in costs),
        "usd": None if any(u is None for u in usd) else sum(u for u in usd if u is not None),
    }


def _pct(new: float, old: float) -> str:
    return f"{(new - old) / old:+.0%}" if old else "—"


def table(model: str) -> list[dict[str, Any]]:
    """The comparison, printed as a Markdown table, and its rows."""
    rows: list[dict[str, Any]] = []
    print(f"| run | calls | policy | input tokens | vs raw | cache reads | $ ({model}) | vs raw |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    totals: dict[str, dict[str, float]] = {}
    for name in RUNS:
        traces = load_file(ROOT / "corpus" / name)
        raw: dict[str, Any] = {}
        for label, settings in POLICIES:
            m = measure(traces, settings, model)
            raw = raw or m
            run = name.split(".traj")[0]
            rows.append({"run": run, "calls": len(traces), "policy": label, **m})
            usd = m["usd"]
            print(
                f"| {run} | {len(traces)} | {label} | {m['input_tokens']:,} | "
                f"{_pct(m['input_tokens'], raw['input_tokens'])} | {m['cache_read_tokens']:,} | "
                f"{'—' if usd is None else f'{usd:.4f}'} | "
                f"{'—' if usd is None or raw['usd'] is None else _pct(usd, raw['usd'])} |"
            )
            t = totals.setdefault(label, {"input_tokens": 0, "usd": 0.0})
            t["input_tokens"] += m["input_tokens"]
            t["usd"] += usd or 0.0
    base = totals[POLICIES[0][0]]
    for label, t in totals.items():
        print(
            f"| **all** | | {label} | {t['input_tokens']:,} | "
            f"{_pct(t['input_tokens'], base['input_tokens'])} | | {t['usd']:.4f} | "
            f"{_pct(t['usd'], base['usd'])} |"
        )
    return rows


def sweep() -> dict[str, Any]:
    """The 5 x 5 sweep of ``SWEEP_PRESET`` over the first ``SWEEP_CALLS`` calls of the
    longest run, timed: input tokens per cell."""
    traces = load_file(ROOT / "corpus" / RUNS[-1])[:SWEEP_CALLS]
    counter = get_counter(traces[0].config.tokenizer or "cl100k_base")
    (xk, xs), (yk, ys) = SWEEP_X, SWEEP_Y
    grid: list[list[int]] = []
    t0 = time.perf_counter()
    for y in ys:
        row = []
        for x in xs:
            cfg = Config.model_validate({"preset": SWEEP_PRESET, xk: x, yk: y})
            row.append(sum(build(t.input, cfg, counter=counter).totals.used for t in traces))
        grid.append(row)
    seconds = time.perf_counter() - t0
    print(
        f"\nsweep: {SWEEP_PRESET} {xk} x {yk}, 5 x 5 over {len(traces)} calls "
        f"({len(traces) * 25:,} builds): {seconds:.2f} s"
    )
    print(f"| {yk} \\ {xk} | " + " | ".join(str(x) for x in xs) + " |")
    print("|---|" + "---:|" * len(xs))
    for y, row in zip(ys, grid, strict=True):
        print(f"| {y} | " + " | ".join(f"{v:,}" for v in row) + " |")
    return {"preset": SWEEP_PRESET, "x": [xk, xs], "y": [yk, ys], "grid": grid, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="claude-sonnet-4-5", help="the price row every call uses")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = table(args.model)
    print(f"\ntable: {time.perf_counter() - t0:.1f} s")
    out: dict[str, Any] = {"model": args.model, "rows": rows}
    if not args.no_sweep:
        out["sweep"] = sweep()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
