"""Every corpus session under six policies: input tokens, $ through the simulated prompt cache
and recall, timed (issue 33, "Anchor and speed": <= 60 s on 2 cores).

.venv/bin/python bench/bench_policy_corpus.py              # the table and the time
.venv/bin/python bench/bench_policy_corpus.py --evaluate   # also ctxcore.replay.evaluate's
.venv/bin/python bench/bench_policy_corpus.py --evaluate --workers 1 --b02
.venv/bin/python bench/bench_policy_corpus.py --json out.json

A session is every call of a corpus file that imports as a session of two or more calls (as
tests/test_oracle_langchain.py reads them). Each call is rebuilt with the policy and measured
as bench/bench_policies.py measures (``measure``: every call priced as ``--model``, recall as
evaluate's). ``--evaluate`` also times what ``ctxscope replay FILE... --preset A ... --preset
F`` runs (``ctxcore.replay.evaluate``: a replay per policy, the recording's own models'
prices), with the findings introduced and without them, on ``--workers`` processes (CPU
time: this process's and its workers'); ``--b02`` the one policy and session the findings
were slowest on (masking-summary-hybrid on b02's 145 calls, 102 s before the replay's
turns were diagnosed incrementally; docs/design.md, "Evaluating policies"). Wall and CPU
time, with the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_policies import _load, _timed, measure  # noqa: E402

from ctxcore.cost import price_table  # noqa: E402
from ctxcore.formats.load import load_file  # noqa: E402
from ctxcore.models import Trace  # noqa: E402
from ctxcore.replay.evaluate import evaluate  # noqa: E402

#: six policies at their sources' defaults (auto-compact needs a window the corpus lacks)
POLICIES: tuple[dict[str, Any], ...] = (
    {"preset": "swe-agent-masking"},
    {"preset": "masking-summary-hybrid"},
    {"preset": "openhands-observation-masking", "attention_window": 10},
    {"preset": "openhands-summarizing"},
    {"preset": "langchain-context-editing", "trigger": 20_000},
    {"preset": "anthropic-context-editing", "trigger": 20_000},
)
#: the corpus session the findings were slowest on
B02 = "b02_mswea_gemini3pro_django__django-16560"
#: corpus files that are no session log
NOT_SESSIONS = {"SOURCES.md"}


def sessions() -> list[tuple[str, list[Trace]]]:
    """Every session of two or more calls the corpus imports, its calls in turn order."""
    out = []
    for path in sorted((ROOT / "corpus").iterdir()):
        if path.name in NOT_SESSIONS:
            continue
        try:
            traces = load_file(path)
        except Exception:  # noqa: BLE001 - a file no format reads is not a session
            continue
        by_session: dict[str, list[Trace]] = defaultdict(list)
        for t in traces:
            if t.result is not None:
                by_session[t.session_id].append(t)
        for sid, ts in sorted(by_session.items()):
            if len(ts) >= 2:
                out.append((f"{path.name}#{sid}", sorted(ts, key=lambda t: t.turn)))
    return out


def _name(settings: dict[str, Any]) -> str:
    rest = " ".join(f"{k}={v}" for k, v in settings.items() if k != "preset")
    return f"{settings['preset']} {rest}".strip()


def table(found: list[tuple[str, list[Trace]]], model: str) -> dict[str, dict[str, Any]]:
    """Each policy over every session: input tokens, $ and recall (mean over sessions)."""
    out: dict[str, dict[str, Any]] = {}
    for settings in POLICIES:
        tot: dict[str, Any] = {"input_tokens": 0, "usd": 0.0, "recalls": []}
        for _, traces in found:
            m = measure(traces, settings, model)
            tot["input_tokens"] += m["input_tokens"]
            tot["usd"] += m["usd"] or 0.0
            if m["recall"] is not None:
                tot["recalls"].append(m["recall"])
        recalls = tot.pop("recalls")
        tot["recall"] = sum(recalls) / len(recalls) if recalls else None
        out[_name(settings)] = tot
    return out


def _cpu() -> float:
    """CPU seconds of this process and every process under it (the replay's fork server,
    its workers, and those that ended and were waited for), from /proc."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue  # it ended meanwhile
            stats[int(entry.name)] = text.rsplit(")", 1)[1].split()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, fields in stats.items():
        children[int(fields[1])].append(pid)  # the field after the state is the parent
    todo, ticks = [os.getpid()], 0
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if pid in stats:  # utime, stime, cutime, cstime
            ticks += sum(int(x) for x in stats[pid][11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _evaluated(
    traces: list[Trace], policies: list[dict[str, Any]], workers: int, findings: bool
) -> dict[str, Any]:
    """``evaluate`` timed: wall, CPU (with its workers'), the load as it started, and the
    findings introduced in all."""
    load = _load()
    wall0, cpu0 = time.perf_counter(), _cpu()
    scores = evaluate(traces, policies, price_table(), workers=workers, findings=findings)
    wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
    added = sum(s.findings_added for s in scores)
    print(
        f"evaluate {len(policies)} policies, {workers} worker(s), findings "
        f"{'on' if findings else 'off'}: {wall:.1f} s wall, {cpu:.1f} s CPU ({load}); "
        f"findings introduced {added:,}",
        flush=True,
    )
    return {"wall": wall, "cpu": cpu, "load": load, "findings_added": added}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="claude-sonnet-4-5", help="the price row every call uses")
    ap.add_argument("--evaluate", action="store_true", help="also time replay's evaluate")
    ap.add_argument("--workers", type=int, default=2, help="evaluate's worker processes")
    ap.add_argument("--b02", action="store_true", help="also time the hybrid on b02 alone")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    load = _load()
    found, wall, cpu = _timed(sessions)
    calls = sum(len(ts) for _, ts in found)
    print(
        f"{len(found)} sessions, {calls:,} calls; loaded in {wall:.1f} s ({cpu:.1f} s CPU)",
        flush=True,
    )
    times: dict[str, Any] = {"load": {"wall": wall, "cpu": cpu, "load": load}}
    load = _load()
    scores, wall, cpu = _timed(lambda: table(found, args.model))
    times["measure"] = {"wall": wall, "cpu": cpu, "load": load}
    print(f"| policy | input tokens | $ ({args.model}) | recall |\n|---|---:|---:|---:|")
    for name, t in scores.items():
        rec = "—" if t["recall"] is None else f"{t['recall']:.1%}"
        print(f"| {name} | {t['input_tokens']:,} | {t['usd']:.4f} | {rec} |")
    if args.evaluate:
        traces = [t for _, ts in found for t in ts]
        for findings in (False, True):
            times[f"evaluate, findings {'on' if findings else 'off'}"] = _evaluated(
                traces, list(POLICIES), args.workers, findings
            )
    if args.b02:
        b02 = next(ts for name, ts in found if name.startswith(B02))
        times["b02, masking-summary-hybrid, findings on"] = _evaluated(
            b02, [{"preset": "masking-summary-hybrid"}], 1, True
        )
    print(f"\n{len(found)} sessions x {len(POLICIES)} policies")
    print("| path | wall s | CPU s | load at start |\n|---|---:|---:|---|")
    for path, t in times.items():
        print(f"| {path} | {t['wall']:.1f} | {t['cpu']:.1f} | {t['load']} |")
    if args.json:
        doc = {"sessions": len(found), "calls": calls, "scores": scores, "times": times}
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
