"""The team store on PostgreSQL under load (issue 35, "Load and faults"): many writer
processes and readers at once, then the app's queries on a big store.

    .venv/bin/python bench/bench_pg.py [--db postgresql://…] [--writers 8] [--per-writer 5000]
        [--readers 2] [--total 1000000] [--packets 20] [--fill clone|ingest]

Without ``--db`` it starts a throwaway cluster (tests/pg_cluster.py: Debian's server, initdb
into a temporary folder, fsync off; ``make postgresql`` installs it). Phase 1: ``--writers``
processes of ``ctxscope ingest --defer-diagnostics`` (``--per-writer`` traces of ``--packets``
packets each, from bench_store's template, in January 2026) while ``--readers`` threads read
the Traces page's first page and a session's Timeline over and over: the traces per second of
all writers together (the bulk ingest rate), the writers' CPU and the server's (per trace:
the figure that counts on a loaded machine), the readers' latency, and that every trace is
stored once; then one writer alone ingests ``--single`` traces (a single process's rate).
Phase 2 fills the store to ``--total`` traces: with ``--fill clone`` (the default) on the
server, by ``INSERT … SELECT`` of the phase-1 traces' stored rows under new ids, sessions
(50 turns each) and times spread over the 24 months before (a partition each:
docs/design.md, "Store"); with ``--fill ingest``, by more writers. Phase 3: the app's queries
on it (median of 11, wall and CPU time of this process and of the server's processes): the
Traces page's first page, a session's Timeline (``session_statuses``), one trace
(``get_trace`` and its decisions). The machine's load average is printed beside each figure.

``--stages N`` prints instead where a team writer's CPU a trace goes, stage by stage, in
this one process on N traces (redaction on, as a team store has it; batches of 500): the
redaction scan, the decode, ``rows.prepare``, ``plan_insert`` (its ``traces`` rows' COPY
inside), ``new_parts`` and each table's COPY, with the CPU of the server's process that
serves the writer's connection in each step (from /proc: a local server only), and the rows
a trace puts in each table.

``--session MB`` prints instead the rate on a real agent's session: bench_import's long
Claude Code session of MB megabytes (the fixtures' real lines and corpus tool output, auto-
compacted at 150,000 tokens), written by ``ctxscope import -o`` as shared lines (a call's
line brings only what is new), then one ``ctxscope ingest`` of them into a fresh database:
with redaction on (a team store's default) and with ``--no-redact``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_store import template  # noqa: E402

from ctxcore.store import pgparts  # noqa: E402
from ctxcore.store.engines import open_store  # noqa: E402

#: the filler's months: the 24 before the phase-1 traces' January 2026
FILL_FROM, FILL_SECONDS = "2024-01-01", 731 * 86_400
#: traces cloned per transaction of the filler
FILL_CHUNK = 50_000


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


class ServerCpu:
    """CPU seconds of a local server's processes (the postmaster, its live children, and
    the children it reaped), read from /proc; None when the server is not ours."""

    def __init__(self, data: Path | None) -> None:
        self.pid: int | None = None
        if data is not None and (data / "postmaster.pid").exists():
            self.pid = int((data / "postmaster.pid").read_text().split()[0])

    @staticmethod
    def _ticks(pid: int, reaped: bool) -> int:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0
        own = int(fields[11]) + int(fields[12])
        return own + (int(fields[13]) + int(fields[14]) if reaped else 0)

    def seconds(self) -> float | None:
        if self.pid is None:
            return None
        kids: list[int] = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            kids += [int(k) for k in (task / "children").read_text().split()]
        ticks = self._ticks(self.pid, True) + sum(self._ticks(k, False) for k in kids)
        return ticks / os.sysconf("SC_CLK_TCK")


class WorkerCpu:
    """CPU seconds of the writers' own worker processes (the forkserver and the ingest
    workers under it: orphaned when their writer exits, so no ``os.times`` of ours counts
    them), sampled every 100 ms from /proc: each process's last figure seen, summed."""

    def __init__(self) -> None:
        self._ticks: dict[tuple[int, str], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _children(pid: int) -> list[int]:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
            return [int(c) for t in tasks for c in Path(f"/proc/{pid}/task/{t}/children")
                    .read_text().split()]  # fmt: skip
        except OSError:
            return []

    def _sample(self) -> None:
        todo = [g for c in self._children(os.getpid()) for g in self._children(c)]
        while todo:
            pid = todo.pop()
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            key = (pid, fields[19])  # (pid, start time): a reused pid is another process
            self._ticks[key] = max(self._ticks.get(key, 0), int(fields[11]) + int(fields[12]))
            todo += self._children(pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.1)

    def __enter__(self) -> WorkerCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def seconds(self) -> float:
        return sum(self._ticks.values()) / os.sysconf("SC_CLK_TCK")


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


def session_rates(url_of: Callable[[], str], work: Path, mb: float, server: ServerCpu) -> None:
    """``--session``: one ingest of an imported long session, redacted and not."""
    from bench_import import build

    log, shared = work / "session.jsonl", work / "session-shared.jsonl"
    built = build(log, int(100 * mb), mb, 150_000)
    subprocess.run([sys.executable, "-m", "ctxcore", "import", str(log), "-o", str(shared)],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT)  # fmt: skip
    n = sum(1 for _ in shared.open("rb"))
    size = shared.stat().st_size
    print(f"a Claude Code session log of {built['bytes'] / 1e6:.1f} MB ({built['events']:,} "
          f"events, {built['compactions']} compactions): {n:,} calls, written shared in "
          f"{size / 1e6:.1f} MB ({size / n / 1000:.1f} KB a call) [{load()}]")  # fmt: skip
    for what, extra in (
        ("redacted (a team store's default)", []),
        ("--no-redact", ["--no-redact"]),
    ):
        url = url_of()
        open_store(url).close()
        srv0 = server.seconds()
        secs, cpu = run_writers(url, [shared], extra)
        srv1 = server.seconds()
        srv = None if srv0 is None or srv1 is None else srv1 - srv0
        print(f"  {_rate(f'one ingest, {what}', n, secs, cpu, srv)} [{load()}]", flush=True)


def run_writers(url: str, files: list[Path], extra: list[str] | None = None) -> tuple[float, float]:
    """Every file ingested by a process of its own, all at once; the seconds it took, and
    the writers' CPU seconds (their processes' and their workers')."""
    start = time.perf_counter()
    before = os.times()
    with WorkerCpu() as workers:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "ctxcore", "ingest", str(f), "--db", url,
                 "--defer-diagnostics", *(extra or [])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for f in files
        ]  # fmt: skip
        for p in procs:
            _, err = p.communicate()
            if p.returncode:
                raise SystemExit(f"a writer failed: {err.strip()}")
    after = os.times()
    own = sum(getattr(after, k) - getattr(before, k) for k in ("children_user", "children_system"))
    return time.perf_counter() - start, own + workers.seconds()


def timed(fn: Callable[[], object], server: ServerCpu, runs: int = 11) -> tuple[float, float, str]:
    """Median wall ms of ``fn``, and the CPU ms per run of this process and the server."""
    times = []
    cpu0, srv0 = time.process_time(), server.seconds()
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    cpu = (time.process_time() - cpu0) * 1000 / runs
    srv1 = server.seconds()
    srv = (
        "" if srv0 is None or srv1 is None else f", server CPU {(srv1 - srv0) * 1000 / runs:.1f} ms"
    )
    return statistics.median(times), cpu, srv


def _rate(what: str, n: int, secs: float, cpu: float, srv: float | None) -> str:
    """A bulk load's figures: traces per second, CPU per trace of the writers and of the
    server, and the rate that CPU allows on 2 cores (the issue's machine)."""
    per = (cpu + (srv or 0.0)) / n * 1000
    server = "" if srv is None else f" + server {srv / n * 1000:.2f}"
    return (f"{what}: {n / secs:,.0f} traces/s ({n:,} in {secs:.1f} s wall); CPU a trace: "
            f"writers {cpu / n * 1000:.2f}{server} = {per:.2f} ms, {2000 / per:,.0f} traces/s "
            f"on 2 cores if CPU-bound")  # fmt: skip


def single_writer(url: str, work: Path, first: int, n: int, tpl: str, server: ServerCpu) -> str:
    """One writer process alone, one ``ctxscope ingest`` of one file (the single command
    for a bulk load): its rate, its CPU and the server's."""
    files = write_files(work, first, 1, n, tpl)
    srv0 = server.seconds()
    secs, cpu = run_writers(url, files)
    srv1 = server.seconds()
    srv = None if srv0 is None or srv1 is None else srv1 - srv0
    files[0].unlink()
    line = f"{_rate(f'one `ctxscope ingest` of a {n:,}-trace file', n, secs, cpu, srv)} [{load()}]"
    print(line, flush=True)
    return line


def phase1(
    url: str, work: Path, args: argparse.Namespace, tpl: str, server: ServerCpu
) -> tuple[int, str]:
    files = write_files(work, 0, args.writers, args.per_writer, tpl)
    srv0 = server.seconds()
    stop = threading.Event()
    lat: dict[str, list[float]] = {"Traces page": [], "Timeline": []}
    failures: list[BaseException] = []

    def read() -> None:
        try:
            with open_store(url, read_only=True) as store:
                while not stop.is_set():
                    t = time.perf_counter()
                    page = store.list_traces(limit=50)
                    lat["Traces page"].append((time.perf_counter() - t) * 1000)
                    if page.rows:
                        t = time.perf_counter()
                        store.session_statuses(page.rows[0].session_id)
                        lat["Timeline"].append((time.perf_counter() - t) * 1000)
        except BaseException as exc:
            failures.append(exc)

    readers = [threading.Thread(target=read) for _ in range(args.readers)]
    for r in readers:
        r.start()
    try:
        secs, cpu = run_writers(url, files)
    finally:
        stop.set()
        for r in readers:
            r.join()
    srv1 = server.seconds()
    n = args.writers * args.per_writer
    with psycopg.connect(url) as con:
        row = con.execute("SELECT count(*), count(DISTINCT trace_id) FROM traces").fetchone()
    stored, distinct = row if row else (0, 0)
    ok = "once each" if stored == distinct == n else "MISMATCH"
    srv = (
        "" if srv0 is None or srv1 is None
        else f", server's CPU {srv1 - srv0:.1f} s ({(srv1 - srv0) / n * 1000:.2f} ms a trace)"
    )  # fmt: skip
    print(f"{args.writers} writers x {args.per_writer:,} traces ({args.packets} packets each), "
          f"{args.readers} readers: {secs:.1f} s wall, {n / secs:,.0f} traces/s; writers' CPU "
          f"{cpu:.1f} s ({cpu / n * 1000:.2f} ms a trace){srv}; stored {stored:,} ({distinct:,} "
          f"ids; expected {n:,}, {ok}) [{load()}]")  # fmt: skip
    if failures:
        print(f"  a reader failed: {failures[0]!r}")
    for what, ms in lat.items():
        if ms:
            ms.sort()
            print(f"  readers' {what} during the writes: {len(ms)} reads, median "
                  f"{statistics.median(ms):.1f} ms, p95 {ms[int(len(ms) * 0.95)]:.1f} ms, "
                  f"max {ms[-1]:.1f} ms")  # fmt: skip
    for f in files:
        f.unlink()
    what = f"{args.writers} `ctxscope ingest` processes at once, {args.readers} readers"
    used = None if srv0 is None or srv1 is None else srv1 - srv0
    return int(stored), f"{_rate(what, n, secs, cpu, used)} [{load()}]"


def fill_ingest(url: str, work: Path, args: argparse.Namespace, tpl: str, have: int) -> int:
    total_secs, added = 0.0, 0
    while have < args.total:
        per = min(args.per_writer * 4, -(-(args.total - have) // args.writers))
        files = write_files(work, have, args.writers, per, tpl)
        total_secs += run_writers(url, files)[0]
        added += per * args.writers
        have += per * args.writers
        for f in files:
            f.unlink()
        print(f"  filled to {have:,} traces ({added / total_secs:,.0f} traces/s)", flush=True)
    return have


def _columns(con: psycopg.Connection, table: str) -> list[str]:
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
        "AND table_schema = current_schema() ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [r[0] for r in rows]


def _clone(con: psycopg.Connection, table: str, new: dict[str, str]) -> None:
    """Copy ``table``'s rows of the template traces for every row of ``fill_map``, the
    columns of ``new`` computed from it (``m.``), the rest as the template's (``o.``)."""
    cols = _columns(con, table)
    picks = ", ".join(new.get(c, f"o.{c}") for c in cols)
    con.execute(
        f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picks} "
        f"FROM fill_map m JOIN {table} o ON o.tseq = m.old_tseq"
    )


def fill_clone(url: str, have: int, total: int, at: Callable[[int], None] = lambda n: None) -> int:
    """Clone the stored traces' rows on the server until ``total`` are stored (see the
    module's docstring); prints the rate. ``at(n)`` runs after each chunk (``--every``)."""
    n = total - have
    if n <= 0:
        return have
    start, cpu0 = time.perf_counter(), time.process_time()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TEMP TABLE tpl AS SELECT row_number() OVER (ORDER BY tseq) - 1 "
                    "AS k, tseq FROM traces")  # fmt: skip
        for y in (2024, 2025):
            for mo in range(1, 13):
                pgparts.create_month(con, y, mo)
        base = con.execute("SELECT setval('trace_tseq', nextval('trace_tseq') + %s)", [n])
        first = int(base.fetchone()[0]) - n  # type: ignore[index]
        ids = {"trace_id": "'fill-' || m.i"}
        for lo in range(0, n, FILL_CHUNK):
            hi = min(n, lo + FILL_CHUNK)
            with con.transaction():
                con.execute(
                    "CREATE TEMP TABLE fill_map ON COMMIT DROP AS SELECT g AS i, "
                    "%s + g AS new_tseq, t.tseq AS old_tseq, %s::timestamp + "
                    "make_interval(secs => (g::float8 * %s / %s)) AS at "
                    "FROM generate_series(%s::bigint, %s::bigint) g "
                    "JOIN tpl t ON t.k = g %% (SELECT count(*) FROM tpl)",
                    [first, FILL_FROM, FILL_SECONDS, n, lo, hi - 1],
                )
                con.execute("INSERT INTO trace_ids SELECT 'fill-' || i, new_tseq FROM fill_map")
                now = {"tseq": "m.new_tseq", "created_at": "m.at", **ids}
                _clone(con, "traces", {**now, "session_id": "'fill-session-' || (m.i / 50)",
                                       "turn": "(m.i % 50)::int"})  # fmt: skip
                _clone(con, "decisions", now)
                _clone(con, "trace_parts", {"tseq": "m.new_tseq"})
                _clone(con, "partitions", {"tseq": "m.new_tseq", **ids})
            con.execute("ANALYZE")
            print(f"  filled to {have + hi:,} traces [{load()}]", flush=True)
            at(have + hi)
    secs = time.perf_counter() - start
    print(f"  cloned {n:,} traces on the server in {secs:.0f} s ({n / secs:,.0f} traces/s; "
          f"this process's CPU {time.process_time() - cpu0:.1f} s) [{load()}]")  # fmt: skip
    return total


def phase3(url: str, have: int, server: ServerCpu) -> None:
    with open_store(url, read_only=True) as store:
        page = store.list_traces(limit=50)
        row = page.rows[len(page.rows) // 2]
        session = row.session_id
        results = {
            "Traces page, first page (50 rows + total)": timed(
                lambda: store.list_traces(limit=50), server
            ),
            "a session's Timeline (session_statuses)": timed(
                lambda: store.session_statuses(session), server
            ),
            "one trace (get_trace)": timed(lambda: store.get_trace(row.trace_id), server),
            "one trace's decisions": timed(lambda: store.decisions(row.trace_id), server),
        }
    print(f"queries on {have:,} traces (median of 11 wall; CPU per run) [{load()}]:", flush=True)
    for what, (ms, cpu, srv) in results.items():
        print(f"  {what:45s} {ms:8.1f} ms (this process's CPU {cpu:.1f} ms{srv})", flush=True)


class _Stages:
    """CPU seconds by stage: this process's, and the server backend's of one connection
    (read from /proc when the server is local; None otherwise)."""

    def __init__(self, backend: int | None) -> None:
        self.backend = backend if backend and Path(f"/proc/{backend}/stat").exists() else None
        self.writer: dict[str, float] = {}
        self.server: dict[str, float] = {}
        self.rows: dict[str, int] = {}

    def _server_now(self) -> float:
        if self.backend is None:
            return 0.0
        fields = Path(f"/proc/{self.backend}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def timed(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, its CPU and the server's added to ``stage``'s."""
        cpu, srv = time.process_time(), self._server_now()
        out = fn(*args)
        self.writer[stage] = self.writer.get(stage, 0.0) + time.process_time() - cpu
        self.server[stage] = self.server.get(stage, 0.0) + self._server_now() - srv
        return out

    def print(self, n: int) -> None:
        local = self.backend is not None
        print(
            f"where a team writer's CPU goes, ms a trace ({n:,} traces of the bench's template, "
            f"in one process; server: its connection's backend) [{load()}]"
        )
        print(f"  {'stage':50s} {'writer':>8s} {'server':>8s}")
        for stage, secs in self.writer.items():
            srv = f"{self.server[stage] / n * 1000:8.3f}" if local else f"{'-':>8s}"
            print(f"  {stage:50s} {secs / n * 1000:8.3f} {srv}")
        total = sum(self.server.values()) / n * 1000 if local else None
        print(f"  {'total':50s} {sum(self.writer.values()) / n * 1000:8.3f} "
              f"{'-' if total is None else f'{total:8.3f}'}")  # fmt: skip
        per = ", ".join(f"{t} {k / n:.2f}" for t, k in self.rows.items())
        print(f"  rows a trace: {per}", flush=True)


def _each(fn: Callable[[bytes], Any], lines: list[bytes]) -> list[Any]:
    return [fn(line) for line in lines]


def stages(url: str, work: Path, n: int, tpl: str) -> None:
    """A team writer's stages, timed one by one on ``n`` traces (see the module's docstring):
    the calls ``ctxscope ingest``'s processes make, here in one process and in order, in
    one transaction on one connection."""
    from ctxcore.store import fastdecode, pgcopy, pginserts, rows
    from ctxcore.store.pgconn import Texts
    from ctxcore.store.workers import clean_lines

    lines = write_files(work, 0, 1, n, tpl)[0].read_bytes().split(b"\n")[:-1]
    memory, texts = Texts(), dict[bytes, int]()
    with psycopg.connect(url, autocommit=True) as con:
        row = con.execute("SELECT pg_backend_pid()").fetchone()
        st = _Stages(int(row[0]) if row else None)
        st.rows["traces"] = n
        con.execute("BEGIN")
        for i in range(0, n, 500):
            batch = lines[i : i + 500]
            st.timed("redaction scan (workers.clean_lines)", clean_lines, batch)
            views = st.timed("decode (fastdecode)", _each, fastdecode.decode, batch)
            items = list(zip(views, batch, strict=True))
            prep = st.timed("rows.prepare (split, pack, rows)", rows.prepare, items,
                            ["bench"] * len(items), False)  # fmt: skip
            _, tables = st.timed("plan_insert (ids, numbering, traces rows, texts)",
                                 pginserts.plan_insert, con, memory, prep, texts)  # fmt: skip
            # what copy_children does, a step at a time
            tables.update(st.timed("new_parts (the new parts packed)", rows.new_parts, prep,
                                   texts, memory.get))  # fmt: skip
            if "shared_parts" in tables:
                tables["shared_parts"] = tables["shared_parts"].sort_by("pid")
            for name in pginserts.CHILD_TABLES:
                if name in tables:
                    st.timed(f"COPY {name}", pgcopy.copy_binary, con, name, tables[name])
                    st.rows[name] = st.rows.get(name, 0) + tables[name].num_rows
        st.timed("COMMIT", con.execute, "COMMIT")
    st.print(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", help="a postgresql:// URL (default: a throwaway cluster)")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--per-writer", type=int, default=5000)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--total", type=int, default=1_000_000)
    ap.add_argument("--packets", type=int, default=20)
    ap.add_argument("--fill", choices=["clone", "ingest"], default="clone")
    ap.add_argument(
        "--single", type=int, default=20_000,
        help="then one writer alone ingests this many traces (a single process's rate; 0: not)",
    )  # fmt: skip
    ap.add_argument(
        "--every", type=int, default=0, help="also run the queries each time the clone filler "
        "has added this many traces (figures along the way on a slow machine)"
    )  # fmt: skip
    ap.add_argument(
        "--stages", type=int, default=0,
        help="only print where a team writer's CPU a trace goes, stage by stage, on this many",
    )  # fmt: skip
    ap.add_argument(
        "--session", type=float, default=0, metavar="MB",
        help="only print the rate on an imported real-shaped session log of this many MB",
    )  # fmt: skip
    args = ap.parse_args()
    tpl = template(args.packets)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url, data = args.db, None
        if url is None:
            from pg_cluster import running

            cluster = stack.enter_context(running())
            url, data = cluster.new_database(), cluster.data
        server = ServerCpu(data)
        if args.session:
            if args.db is not None:
                raise SystemExit("--session makes databases of its own: run it without --db")
            session_rates(cluster.new_database, Path(tmp), args.session, server)
            return
        open_store(url).close()  # migrated before the writers start
        if args.stages:
            stages(url, Path(tmp), args.stages, tpl)
            return
        have, together = phase1(url, Path(tmp), args, tpl, server)
        alone = ""
        if args.single:
            alone = single_writer(url, Path(tmp), have, args.single, tpl, server)
            have += args.single
        print("bulk ingest (issue 35: >= 5,000 traces/s on 2 cores; the figure is the better "
              "of the two, each a whole command's wall time):")  # fmt: skip
        for line in (together, alone):
            if line:
                print(f"  {line}", flush=True)
        if args.fill == "clone":
            step = args.every or args.total

            def along(n: int) -> None:
                if n < args.total and n // step != (n - FILL_CHUNK) // step:
                    phase3(url, n, server)

            have = fill_clone(url, have, args.total, along)
        else:
            have = fill_ingest(url, Path(tmp), args, tpl, have)
        phase3(url, have, server)


if __name__ == "__main__":
    main()
