"""Replay speed (issue 16); prints a table.

    .venv/bin/python bench/bench_replay.py [--traces 1000] [--workers 2] [--skip-store]
        [--skip-demo] [--db PATH]

Rows:
- the demo's 40-turn session (``swe-pytest-7571``, 44 turns) replayed with a smaller
  budget, warm (a second run in the same process: token counts cached, as in the app), with
  and without the diagnostics; target ≤ 1 s. Warm, the recorded side's findings are those of
  the run before (``ctxcore.replay.RECORDED_FINDINGS``); the row "recorded side diagnosed"
  forgets them first, as a one-shot ``ctxscope replay`` pays;
- what the app's Replay view computes after a knob change on that session (the replay
  without findings; the difference grid and both timelines drawn and serialised); target
  ≤ 2 s (the browser test
  measures the real page);
- ``ctxscope replay --all`` over a store of ``--traces`` traces of ~100 packets (sessions of
  20 turns built from the corpus with the default preset), through the real command in a
  child process: the parent reads the store once, ``--workers`` processes replay; with and
  without the diagnostics; target ≤ 20 s on 2 CPUs with peak memory ≤ 1 GB (the child's
  process tree sampled from /proc ten times a second, its PSS once a second: all processes
  together, and the largest). With the
  recorded settings every rebuilt turn equals its recording, so its findings are the
  recording's; the third row sets ``min_relevance=0.3``, which changes most turns, so both
  sides are diagnosed. The store is built as ``ctxscope ingest`` builds it, findings
  computed at insert: the recorded side takes the detectors that read one trace from them
  and runs the three that read other turns. The last row is the same replay of the same
  store without stored findings (as ingested with ``--defer-diagnostics`` and not yet
  diagnosed): every detector runs on both sides.

Times are wall clock with the CPU seconds next to them, and the machine's load (1-minute
average, ``os.getloadavg``) before and after each row: on a shared machine the wall clock
says more about the neighbours than about replay, and the CPU seconds grow with the load too
(two processes on one core's two threads each run slower). Peak memory is the resident size
of the child's process tree summed (what the target is about; pages the forked workers
share with their server count once per process) and, next to it, the proportional size
(PSS: a shared page split among the processes sharing it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
from corpus_input import corpus_input  # noqa: E402

from ctxcore import figures  # noqa: E402
from ctxcore.loading import parse_json, trace_from_obj  # noqa: E402
from ctxcore.models import Config, Trace  # noqa: E402
from ctxcore.pipeline import build_trace  # noqa: E402
from ctxcore.replay import RECORDED_FINDINGS, replay  # noqa: E402

DEMO = ROOT / "ctxcore" / "data" / "demo" / "swe-pytest-7571.jsonl"
CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from ctxcore.cli import main
t0 = time.perf_counter()
rc = main(["replay", "--all", "--db", {db!r}, "--workers", "{workers}", "--format", "json",
           "--fail-on", "never", *{extra!r}])
took = time.perf_counter() - t0
print(json.dumps({{"rc": rc, "seconds": took}}), file=sys.stderr)
"""


def demo_session() -> list[Trace]:
    lines = DEMO.read_text(encoding="utf-8").splitlines()
    return [trace_from_obj(parse_json(ln, str(DEMO)), str(DEMO)) for ln in lines if ln.strip()]


def timed(fn: object, repeat: int = 2) -> str:
    """Wall and CPU time of the last of ``repeat`` runs (the first warms the token counter's
    cache). CPU time is what the run costs on a machine nobody else is using."""
    wall = cpu = 0.0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()  # type: ignore[operator]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return f"{wall:.2f} s ({cpu:.2f} CPU-s)"


def view_update(traces: list[Trace], budget: int) -> None:
    """What the Replay page computes after a knob change: the replay, both sides' rows, the
    difference grid it opens on and the two timelines of its side-by-side view."""
    report = replay(traces, {"max_tokens": budget}, findings=False, workers=1, keep_variants=True)
    sides = []
    for side in (traces, report.variants):
        rows = [
            {
                "turn": t.turn,
                "packet_id": d.packet_id,
                "kind": d.kind,
                "status": d.status.value,
                "reason": d.reason.value,
                "tokens_after": d.tokens_after,
            }
            for t in side
            if t.result is not None
            for d in t.result.decisions
        ]
        sides.append(rows)
        figures.timeline_heatmap(rows, "bench").to_json()
    figures.timeline_diff(*sides).to_json()


def make_store(db: Path, n_traces: int) -> int:
    from ctxcore.store import TraceStore

    turns = 20
    pool = corpus_input(400, seed=0)
    out: list[Trace] = []
    for s in range((n_traces + turns - 1) // turns):
        for k in range(turns):
            if len(out) >= n_traces:
                break
            start = (s * 7) % 200
            inp = pool.model_copy(
                update={
                    "packets": pool.packets[start : start + 90 + k],
                    "now": pool.now + timedelta(minutes=k),
                }
            )
            out.append(
                build_trace(inp, Config(), trace_id=f"b{s}-t{k}", session_id=f"bench-{s}", turn=k)
            )
    with TraceStore(db) as store:  # findings at insert, as ``ctxscope ingest`` computes them
        store.add_traces(out, source="bench")
    return round(sum(len(t.input.packets) for t in out) / len(out))


def _pss(pid: int) -> int:
    """Proportional set size in bytes (0 when /proc does not say)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def _tree(root: int) -> dict[int, tuple[int, int]]:
    """pid -> (resident bytes, CPU ticks) for ``root`` and all its descendants, found
    through ``/proc/PID/task/*/children`` (a few small reads per process of the tree: a
    scan of every process in /proc, 20 times a second, took the 2-CPU machine more than a
    second of a replay's wall time)."""
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict[int, tuple[int, int]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            statm = Path(f"/proc/{pid}/statm").read_text().split()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[pid] = (int(statm[1]) * page, int(fields[11]) + int(fields[12]))
        todo += _children(pid)
    return out


def store_replay(db: Path, workers: int, extra: list[str]) -> dict[str, float]:
    """Run the command in a child; sample its process tree's memory and CPU from /proc."""
    code = CHILD.format(root=str(ROOT), db=str(db), workers=workers, extra=extra)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err, env=env)
        peak_total = peak_one = peak_pss = 0
        ticks: dict[int, int] = {}
        pss_at = 0.0
        while proc.poll() is None:
            tree = _tree(proc.pid)
            total = sum(rss for rss, _ in tree.values())
            if total > peak_total:
                peak_total = total
                # the kernel walks every page of a process for its PSS: once a second
                if time.monotonic() - pss_at >= 1.0:
                    peak_pss = max(peak_pss, sum(_pss(pid) for pid in tree))
                    pss_at = time.monotonic()
            peak_one = max([peak_one, *(rss for rss, _ in tree.values())])
            ticks.update({pid: t for pid, (_, t) in tree.items()})
            time.sleep(0.1)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"ctxscope replay exited {proc.returncode}:\n{err.read()[-3000:]}")
        data: dict[str, float] = json.loads(err.read().strip().splitlines()[-1])
        report = json.loads(out.read())
    data["turns"] = len(report["turns"])
    data["peak_total_mb"] = peak_total / 2**20
    data["peak_one_mb"] = peak_one / 2**20
    data["peak_pss_mb"] = peak_pss / 2**20
    data["cpu_s"] = sum(ticks.values()) / os.sysconf("SC_CLK_TCK")
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-store", action="store_true")
    ap.add_argument("--skip-demo", action="store_true", help="only the stored-traces rows")
    ap.add_argument("--db", help="keep the bench store here (built if missing, else reused)")
    args = ap.parse_args()

    rows: list[tuple[str, str, str, str]] = []  # measure, result, target, load before→after
    if not args.skip_demo:
        traces = demo_session()
        n = len(traces)

        def cold_recorded() -> None:
            RECORDED_FINDINGS.clear()
            replay(traces, {"max_tokens": 3000}, workers=1)

        for label, fn, target in (
            (
                f"{n}-turn session, warm, decisions only",
                lambda: replay(traces, {"max_tokens": 3000}, findings=False, workers=1),
                "≤ 1 s",
            ),
            (
                f"{n}-turn session, warm, with findings",
                lambda: replay(traces, {"max_tokens": 3000}, workers=1),
                "≤ 1 s",
            ),
            (f"{n}-turn session, with findings, recorded side diagnosed", cold_recorded, "≤ 1 s"),
            (f"app view update, {n} turns (compute)", lambda: view_update(traces, 3500), "≤ 2 s"),
        ):
            before = _load()
            rows.append((label, timed(fn), target, f"{before}→{_load()}"))

    if not args.skip_store:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(args.db) if args.db else Path(tmp) / "bench.duckdb"
            if not db.exists():
                t0 = time.perf_counter()
                avg = make_store(db, args.traces)
                setup = time.perf_counter() - t0
                print(f"(store of {args.traces} traces, ~{avg} packets, built in {setup:.0f} s)")
            # the same store as if ingested with --defer-diagnostics and not yet diagnosed
            bare = Path(tmp) / "no-findings.duckdb"
            shutil.copyfile(db, bare)
            con = duckdb.connect(str(bare))
            con.execute("UPDATE traces SET diagnosed_with = NULL")
            con.close()
            for label, extra, store_db in (
                ("decisions only", ["--no-findings"], db),
                ("with findings", [], db),
                ("with findings, min_relevance=0.3", ["--set", "min_relevance=0.3"], db),
                (
                    "with findings, min_relevance=0.3, no stored findings",
                    ["--set", "min_relevance=0.3"],
                    bare,
                ),
            ):
                before = _load()
                r = store_replay(store_db, args.workers, extra)
                load = f"{before}→{_load()}"
                rows.append(
                    (
                        f"{int(r['turns'])} stored traces, {args.workers} workers, {label}",
                        f"{r['seconds']:.1f} s ({r['cpu_s']:.0f} CPU-s)",
                        "≤ 20 s",
                        load,
                    )
                )
                rows.append(
                    (
                        f"  peak memory ({label})",
                        f"{r['peak_total_mb']:.0f} MB all processes "
                        f"({r['peak_pss_mb']:.0f} MB PSS), {r['peak_one_mb']:.0f} MB largest",
                        "≤ 1 GB",
                        "",
                    )
                )

    width = max(len(r[0]) for r in rows)
    vw = max(len(r[1]) for r in rows)
    print(f"({os.cpu_count()} CPUs; load: the 1-minute load average before→after the row)")
    print(f"{'measure':<{width}}  {'result':<{vw}}  {'target':<6}  load")
    for name, value, target, load in rows:
        print(f"{name:<{width}}  {value:<{vw}}  {target:<6}  {load}")


if __name__ == "__main__":
    main()
