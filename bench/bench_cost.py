"""``ctxscope cost`` on the long Claude Code session of bench_import.py (issue 32, Speed).

    .venv/bin/python bench/bench_cost.py [--events 20000] [--mb 170] [--compact-at 150000]
    .venv/bin/python bench/bench_cost.py --log /tmp/session.jsonl   # a log made before

Makes the session log as bench/bench_import.py does (the real lines of the Claude Code
fixtures repeated with new ids, tool outputs from the corpus, an auto-compaction whenever
the context fills: 20,002 lines, 5,593 model calls with the defaults), then runs, each in a
child process of its own (wall and CPU time, peak memory):

- reading the log's traces alone (what ``ctxscope import`` does before it writes anything),
  the baseline every command on the log pays;
- ``ctxscope cost LOG --json`` (one JSON line per call, to /dev/null);
- ``ctxscope cost LOG`` (the tables and the waste sections, to /dev/null).

Each with the load as it started (wall time on a loaded machine is mostly waiting: read
the CPU time beside it). Target: ``ctxscope cost`` on the 5,593-call session in 10 s or less.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TARGET_S = 10.0


def _read_only(path: str) -> dict[str, Any]:
    """The child: the log's traces read and dropped."""
    from ctxcore.formats.load import iter_traces

    calls = sum(1 for _ in iter_traces(path))
    return {"calls": calls}


#: runs its arguments with stdout to /dev/null, then prints their peak memory (KB)
_WRAP = (
    "import os, resource, subprocess, sys\n"
    "with open(os.devnull, 'w') as sink:\n"
    "    rc = subprocess.run(sys.argv[1:], stdout=sink).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(rc)\n"
)


def _timed(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` (output to /dev/null): wall, CPU and peak memory of that process alone,
    and the machine's load (1-minute average) as it started."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _WRAP, *argv], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    peak_kb = int(proc.stdout.strip().splitlines()[-1])
    return {"wall": wall, "cpu": cpu, "peak_mb": peak_kb / 1024, "load": load}


def _calls(log: Path) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "ctxcore", "cost", str(log), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(1 for line in out.splitlines() if json.loads(line))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--mb", type=float, default=170.0)
    ap.add_argument("--compact-at", type=int, default=150_000, help="tokens; 0: never")
    ap.add_argument("--log", type=Path, help="a session log made before (not deleted)")
    ap.add_argument("--read-only", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read_only:  # the child process of the baseline
        print(json.dumps(_read_only(args.read_only)))
        return
    work = None
    log = args.log
    made = ""
    if log is None:
        import bench_import

        work = Path(tempfile.mkdtemp(prefix="ctxscope-bench-cost-"))
        log = work / "session.jsonl"
        t0 = time.perf_counter()
        info = bench_import.build(log, args.events, args.mb, args.compact_at)
        made = f"{info['events']:,} lines, {info['compactions']} compactions"
        made += f", made in {time.perf_counter() - t0:.1f} s"
    try:
        calls = _calls(log)
        read = _timed([sys.executable, __file__, "--read-only", str(log)])
        as_json = _timed([sys.executable, "-m", "ctxcore", "cost", str(log), "--json"])
        table = _timed([sys.executable, "-m", "ctxcore", "cost", str(log)])
    finally:
        if work is not None:
            log.unlink()
            work.rmdir()
    size = f"{log.stat().st_size / 1e6:,.1f} MB" if log.exists() else f"{args.mb:.0f} MB (deleted)"
    rows = [
        ("session log", f"{calls:,} model calls, {size}" + (f"; {made}" if made else ""), ""),
        ("read the traces only", _line(read), "baseline"),
        ("ctxscope cost --json", _line(as_json), _target(as_json)),
        ("ctxscope cost (tables)", _line(table), _target(table)),
        ("machine", f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end", ""),
    ]
    w0 = max(len(a) for a, _, _ in rows)
    w1 = max(len(b) for _, b, _ in rows)
    print(f"{'measure':<{w0}}  {'result':<{w1}}  target")
    print(f"{'-' * w0}  {'-' * w1}  ------")
    for a, b, c in rows:
        print(f"{a:<{w0}}  {b:<{w1}}  {c}")


def _line(m: dict[str, Any]) -> str:
    wall, cpu, peak = m["wall"], m["cpu"], m["peak_mb"]
    return f"{wall:.1f} s wall, {cpu:.1f} s CPU, peak {peak:,.0f} MB, load {m['load']:.1f}"


def _target(m: dict[str, Any]) -> str:
    return f"<= {TARGET_S:.0f} s {'ok' if m['wall'] <= TARGET_S else 'MISSED'}"


if __name__ == "__main__":
    main()
