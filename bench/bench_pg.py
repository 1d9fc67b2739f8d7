"""The team store on PostgreSQL under load (issue 35, "Load and faults"): many writer
processes and readers at once, then the app's queries on a big store.

    .venv/bin/python bench/bench_pg.py [--db postgresql://…] [--writers 8] [--per-writer 5000]
        [--readers 2] [--total 1000000] [--packets 20]

Without ``--db`` it starts a throwaway cluster (tests/pg_cluster.py: Debian's server, initdb
into a temporary folder; ``make postgresql`` installs it). Phase 1: ``--writers`` processes
of ``ctxscope ingest --defer-diagnostics`` (``--per-writer`` traces of ``--packets`` packets
each, from bench_store's template) while ``--readers`` threads read the Traces page's first
page over and over: the traces per second of all writers together, the readers' latency, and
that every trace is stored once. Phase 2: more writers until the store holds ``--total``
traces. Phase 3: the app's queries on it (median of 11): the Traces page's first page, a
session's Timeline (``session_statuses``), one trace (``get_trace`` and its decisions).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_store import template  # noqa: E402

from ctxcore.store.engines import open_store  # noqa: E402


def write_files(folder: Path, first: int, writers: int, per: int, tpl: str) -> list[Path]:
    """A file of ``per`` traces per writer, numbered from ``first`` (50 traces a session)."""
    files = []
    i = first
    for w in range(writers):
        path = folder / f"w{first}-{w}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for _ in range(per):
                ts = f"2026-01-{1 + (i // 86_400) % 28:02d}T{(i // 3600) % 24:02d}:" + (
                    f"{(i // 60) % 60:02d}:{i % 60:02d}Z"
                )
                fh.write(
                    tpl.replace("#TID#", f"pg-{i:08d}")
                    .replace("#SID#", f"session-{i // 50}")
                    .replace("#TURN#", str(i % 50))
                    .replace("#USED#", str(1000 + (i * 37) % 7000))
                    .replace("#N#", str(i))
                    .replace('"2026-01-01T00:00:00Z"', f'"{ts}"')
                    + "\n"
                )
                i += 1
        files.append(path)
    return files


def run_writers(url: str, files: list[Path]) -> float:
    """Every file ingested by a process of its own, all at once; the seconds it took."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ctxcore", "ingest", str(f), "--db", url, "--defer-diagnostics"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for f in files
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"a writer failed: {err.strip()}")
    return time.perf_counter() - start


def median_ms(fn: Callable[[], object], runs: int = 11) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def phase1(url: str, work: Path, args: argparse.Namespace, tpl: str) -> int:
    files = write_files(work, 0, args.writers, args.per_writer, tpl)
    stop = threading.Event()
    lat: list[float] = []

    def read() -> None:
        with open_store(url, read_only=True) as store:
            while not stop.is_set():
                t = time.perf_counter()
                store.list_traces(limit=50)
                lat.append((time.perf_counter() - t) * 1000)

    readers = [threading.Thread(target=read) for _ in range(args.readers)]
    for r in readers:
        r.start()
    try:
        secs = run_writers(url, files)
    finally:
        stop.set()
        for r in readers:
            r.join()
    n = args.writers * args.per_writer
    with open_store(url, read_only=True) as store:
        stored = store.count()
    print(f"{args.writers} writers x {args.per_writer:,} traces ({args.packets} packets each), "
          f"{args.readers} readers: {secs:.1f} s, {n / secs:,.0f} traces/s; stored {stored:,} "
          f"(expected {n:,}, {'once each' if stored == n else 'MISMATCH'})")  # fmt: skip
    if lat:
        lat.sort()
        print(f"  readers' Traces page during the writes: {len(lat)} reads, median "
              f"{statistics.median(lat):.1f} ms, p95 {lat[int(len(lat) * 0.95)]:.1f} ms, "
              f"max {lat[-1]:.1f} ms")  # fmt: skip
    for f in files:
        f.unlink()
    return stored


def phase2(url: str, work: Path, args: argparse.Namespace, tpl: str, have: int) -> int:
    total_secs, added = 0.0, 0
    while have < args.total:
        per = min(args.per_writer * 4, -(-(args.total - have) // args.writers))
        files = write_files(work, have, args.writers, per, tpl)
        total_secs += run_writers(url, files)
        added += per * args.writers
        have += per * args.writers
        for f in files:
            f.unlink()
        print(f"  filled to {have:,} traces ({added / total_secs:,.0f} traces/s)", flush=True)
    return have


def phase3(url: str, have: int) -> None:
    with open_store(url, read_only=True) as store:
        page = store.list_traces(limit=50)
        row = page.rows[len(page.rows) // 2]
        session = row.session_id
        results = {
            "Traces page, first page (50 rows + total)": median_ms(
                lambda: store.list_traces(limit=50)
            ),
            "a session's Timeline (session_statuses)": median_ms(
                lambda: store.session_statuses(session)
            ),
            "one trace (get_trace)": median_ms(lambda: store.get_trace(row.trace_id)),
            "one trace's decisions": median_ms(lambda: store.decisions(row.trace_id)),
        }
    print(f"queries on {have:,} traces (median of 11):")
    for what, ms in results.items():
        print(f"  {what:45s} {ms:8.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", help="a postgresql:// URL (default: a throwaway cluster)")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--per-writer", type=int, default=5000)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--total", type=int, default=1_000_000)
    ap.add_argument("--packets", type=int, default=20)
    args = ap.parse_args()
    tpl = template(args.packets)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = args.db
        if url is None:
            from pg_cluster import running

            url = stack.enter_context(running()).new_database()
        open_store(url).close()  # migrated before the writers start
        have = phase1(url, Path(tmp), args, tpl)
        have = phase2(url, Path(tmp), args, tpl, have)
        phase3(url, have)


if __name__ == "__main__":
    main()
