"""The Complexity Trap's comparison on the corpus's SWE-agent and mini-swe-agent runs: raw
(recorded) vs observation masking (also with polling) vs a summary stand-in vs the hybrid.

.venv/bin/python bench/bench_policies.py             # the table and the timed 5 x 5 sweep
.venv/bin/python bench/bench_policies.py --json out.json
.venv/bin/python bench/bench_policies.py --per-build  # also time the sweep one build per call

Each call of each run is rebuilt with the policy (docs/design.md, "Agent policies"); its
input tokens are the build's (counted as ``recorded`` counts them), its $ the prompt-cache
simulation's (``ctxcore.costing.session_costs``) over the session's rebuilt calls in order,
every call priced as ``--model`` (the runs' own models are unpriced or unknown in the
shipped table) with the recorded reply's tokens as output; its recall is evaluate's
(``ctxcore.replay.evaluate``, bench_recall's measure): of what each recorded reply used that
was in its recorded prompt (``summarize.targets_of``), the share still in the rebuilt prompt,
averaged over the calls whose reply used something. The summary stand-in is ctxscope's
deterministic summarizer, not a model: its summaries are shorter and cheaper than a model's.
The sweep times one policy over a 5 x 5 grid of its two knobs on the first 100 calls of the
longest run (``pipeline.sweep.sweep_session``; ``--per-build`` also times one full build per
call and cell), wall and CPU time, with the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxcore.cost import cost, price_table  # noqa: E402
from ctxcore.costing import session_costs  # noqa: E402
from ctxcore.formats.load import load_file  # noqa: E402
from ctxcore.models import Config, TokenUsage, Trace  # noqa: E402
from ctxcore.pipeline import build  # noqa: E402
from ctxcore.pipeline.sweep import sweep_session  # noqa: E402
from ctxcore.summarize import targets_of  # noqa: E402
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


def recall(recorded: list[Trace], calls: list[Trace]) -> float | None:
    """Evaluate's recall (``ctxcore.replay.evaluate``): per call, of what the recorded reply
    used that was in the recorded prompt, the share still in the rebuilt prompt; the mean
    over the calls whose reply used something of its prompt."""
    shares = []
    for t, c in zip(recorded, calls, strict=True):
        reply = t.outcome.output if t.outcome is not None else None
        if not reply or t.result is None or c.result is None:
            continue
        targets = targets_of(reply, t.result.prompt)
        if targets:
            prompt = c.result.prompt.lower()
            shares.append(1 - sum(x not in prompt for x in targets) / len(targets))
    return sum(shares) / len(shares) if shares else None


def measure(traces: list[Trace], settings: dict[str, Any], model: str) -> dict[str, Any]:
    """Input tokens, $ through the simulated cache and with nothing cached, and recall of a
    run under ``settings``."""
    calls = rebuilt(traces, settings, model)
    prices = price_table()
    costs = session_costs(calls, prices)
    usd = [c.cost_usd for c in costs]
    plain = [
        cost(
            model,
            TokenUsage(
                mapping="uncached", input_tokens=c.input_tokens, output_tokens=c.output_tokens
            ),
            prices,
        )
        for c in costs
    ]
    return {
        "input_tokens": sum(c.result.totals.used for c in calls if c.result is not None),
        "cache_read_tokens": sum(c.cache_read_tokens for c in costs),
        "usd": None if any(u is None for u in usd) else sum(u for u in usd if u is not None),
        "usd_uncached": None
        if any(p is None for p in plain)
        else sum(p.total_usd for p in plain if p is not None),
        "recall": recall(traces, calls),
    }


def _pct(new: float, old: float) -> str:
    return f"{(new - old) / old:+.0%}" if old else "—"


def _rec(r: float | None) -> str:
    return "—" if r is None else f"{r:.1%}"


def rows(model: str) -> list[dict[str, Any]]:
    """Every run under every policy: calls, input tokens, cache reads, $ and recall."""
    out: list[dict[str, Any]] = []
    for name in RUNS:
        traces = load_file(ROOT / "corpus" / name)
        run = name.split(".traj")[0]
        for label, settings in POLICIES:
            out.append(
                {
                    "run": run,
                    "calls": len(traces),
                    "policy": label,
                    **measure(traces, settings, model),
                }
            )
    return out


def totals(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each policy over every run: input tokens, $ and the calls' mean recall (weighted by
    the runs' calls with a recall)."""
    out: dict[str, dict[str, Any]] = {}
    for r in found:
        t = out.setdefault(
            r["policy"],
            {"input_tokens": 0, "usd": 0.0, "usd_uncached": 0.0, "recall_sum": 0.0, "n": 0},
        )
        t["input_tokens"] += r["input_tokens"]
        t["usd"] += r["usd"] or 0.0
        t["usd_uncached"] += r["usd_uncached"] or 0.0
        if r["recall"] is not None:
            t["recall_sum"] += r["recall"] * r["calls"]
            t["n"] += r["calls"]
    for t in out.values():
        t["recall"] = t.pop("recall_sum") / t["n"] if t["n"] else None
        del t["n"]
    return out


def table(model: str) -> list[dict[str, Any]]:
    """The comparison, printed as a Markdown table, and its rows."""
    found = rows(model)
    print(
        f"| run | calls | policy | input tokens | vs raw | cache reads | $ ({model}) | vs raw "
        "| recall |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    raw: dict[str, Any] = {}
    for r in found:
        raw = r if r["policy"] == POLICIES[0][0] else raw
        usd = r["usd"]
        print(
            f"| {r['run']} | {r['calls']} | {r['policy']} | {r['input_tokens']:,} | "
            f"{_pct(r['input_tokens'], raw['input_tokens'])} | {r['cache_read_tokens']:,} | "
            f"{'—' if usd is None else f'{usd:.4f}'} | "
            f"{'—' if usd is None or raw['usd'] is None else _pct(usd, raw['usd'])} | "
            f"{_rec(r['recall'])} |"
        )
    all_runs = totals(found)
    base = all_runs[POLICIES[0][0]]
    for label, t in all_runs.items():
        print(
            f"| **all** | | {label} | {t['input_tokens']:,} | "
            f"{_pct(t['input_tokens'], base['input_tokens'])} | | {t['usd']:.4f} | "
            f"{_pct(t['usd'], base['usd'])} | {_rec(t['recall'])} |"
        )
    return found


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(fn: Any) -> tuple[Any, float, float]:
    """``fn()``, its wall and its CPU seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _per_build(traces: list[Trace]) -> list[list[int]]:
    """The sweep one full ``build()`` per call and cell (the path before sweep_session)."""
    counter = get_counter(traces[0].config.tokenizer or "cl100k_base")
    (xk, xs), (yk, ys) = SWEEP_X, SWEEP_Y
    grid = []
    for y in ys:
        row = []
        for x in xs:
            cfg = Config.model_validate({"preset": SWEEP_PRESET, xk: x, yk: y})
            row.append(sum(build(t.input, cfg, counter=counter).totals.used for t in traces))
        grid.append(row)
    return grid


def sweep(per_build: bool = False) -> dict[str, Any]:
    """The 5 x 5 sweep of ``SWEEP_PRESET`` over the first ``SWEEP_CALLS`` calls of the
    longest run, timed (the first run with nothing remembered, then again): input tokens per
    cell."""
    traces = load_file(ROOT / "corpus" / RUNS[-1])[:SWEEP_CALLS]
    (xk, xs), (yk, ys) = SWEEP_X, SWEEP_Y
    base = Config.model_validate({"preset": SWEEP_PRESET, "tokenizer": traces[0].config.tokenizer})
    inputs = [t.input for t in traces]
    times: dict[str, Any] = {}
    for run in ("first", "again"):
        load = _load()
        got, wall, cpu = _timed(lambda: sweep_session(inputs, base, xk, xs, yk, ys))
        times[run] = {"wall": wall, "cpu": cpu, "load": load}
    grid = got.tokens.tolist()
    if per_build:
        load = _load()
        again, wall, cpu = _timed(lambda: _per_build(traces))
        assert again == grid, "the per-build sweep differs from sweep_session"
        times["per build"] = {"wall": wall, "cpu": cpu, "load": load}
    print(
        f"\nsweep: {SWEEP_PRESET} {xk} x {yk}, 5 x 5 over {len(traces)} calls "
        f"({len(traces) * 25:,} call rebuilds)"
    )
    print("| path | wall s | CPU s | load at start |\n|---|---:|---:|---|")
    for run, t in times.items():
        print(f"| {run} | {t['wall']:.2f} | {t['cpu']:.2f} | {t['load']} |")
    print(f"\n| {yk} \\ {xk} | " + " | ".join(str(x) for x in xs) + " |")
    print("|---|" + "---:|" * len(xs))
    for y, row in zip(ys, grid, strict=True):
        print(f"| {y} | " + " | ".join(f"{v:,}" for v in row) + " |")
    return {"preset": SWEEP_PRESET, "x": [xk, xs], "y": [yk, ys], "grid": grid, "times": times}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="claude-sonnet-4-5", help="the price row every call uses")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--per-build", action="store_true", help="also time one build per call")
    args = ap.parse_args(argv)
    load = _load()
    found, wall, cpu = _timed(lambda: table(args.model))
    print(f"\ntable: {wall:.1f} s wall, {cpu:.1f} s CPU ({load} at start)")
    out: dict[str, Any] = {"model": args.model, "rows": found, "table_seconds": [wall, cpu]}
    if not args.no_sweep:
        out["sweep"] = sweep(args.per_build)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
