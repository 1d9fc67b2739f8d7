"""Diagnostics speed on the 1,000-packet corpus input, per preset; prints a table.

    .venv/bin/python bench/bench_diagnostics.py [--repeat N] [--packets N]

Rows per preset (the trace is built once; token counts are warm, as in the app):
- ``diagnose`` with the defaults (re-runs for greedy_waste/compression_damage and up to
  three verified counterfactual fixes);
- ``diagnose`` with ``counterfactuals=False`` (no fixes; still re-runs greedy_waste and
  compression_damage once each) — the suggested setting at ingest time;
- ``diagnose`` with ``rerun=False`` (no re-run at all);
- ``counterfactuals`` for the first dropped or filtered packet, and how many builds it took.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_input import corpus_input  # noqa: E402

from ctxcore.diagnostics import DiagnosticsOptions, counterfactuals, diagnose  # noqa: E402
from ctxcore.models import Config, Status  # noqa: E402
from ctxcore.pipeline import build_trace  # noqa: E402


def _median_ms(fn: object, repeat: int) -> tuple[float, object]:
    times = []
    out: object = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--packets", type=int, default=1000)
    args = ap.parse_args()
    inp = corpus_input(args.packets)
    rows = []
    for preset, cfg in (
        ("ctxscope", Config(max_tokens=16_000)),
        ("hello-agents", Config(preset="hello-agents", max_tokens=16_000)),
        ("hello-agents-book", Config(preset="hello-agents-book", max_tokens=16_000)),
    ):
        t0 = time.perf_counter()
        trace = build_trace(inp, cfg, trace_id=f"bench-{preset}")
        build_ms = (time.perf_counter() - t0) * 1000
        assert trace.result is not None
        full_ms, found = _median_ms(lambda t=trace: diagnose(t), args.repeat)
        nocf = DiagnosticsOptions(counterfactuals=False)
        nocf_ms, _ = _median_ms(lambda t=trace, o=nocf: diagnose(t, options=o), args.repeat)
        fast = DiagnosticsOptions(rerun=False)
        fast_ms, _ = _median_ms(lambda t=trace, o=fast: diagnose(t, options=o), args.repeat)
        lost = next(
            (
                d.packet_id
                for d in trace.result.decisions
                if d.status in (Status.DROPPED, Status.FILTERED)
                and d.reason.value != "HISTORY_LIMIT"
            ),
            None,
        )
        cf_ms, cfs = (
            _median_ms(lambda t=trace, p=lost: counterfactuals(t, p), 1) if lost else (0.0, [])
        )
        builds = max((c.builds for c in cfs), default=0)  # type: ignore[attr-defined]
        rows.append(
            (preset, build_ms, full_ms, nocf_ms, fast_ms, len(found), lost or "-", cf_ms, builds)  # type: ignore[arg-type]
        )
    print(f"diagnostics on corpus_input({args.packets}) — median of {args.repeat} runs, ms")
    head = (
        "preset",
        "build",
        "diagnose",
        "no fixes",
        "no rerun",
        "findings",
        "cf packet",
        "cf ms",
        "builds",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(
            f"| {r[0]} | {r[1]:.0f} | {r[2]:.0f} | {r[3]:.0f} | {r[4]:.0f} | {r[5]} | {r[6]} "
            f"| {r[7]:.0f} | {r[8]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
