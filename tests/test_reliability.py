"""Reliability (issue 3): broken folders, kill -9 mid-ingest, concurrent writers + watcher."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from helpers_store import make_trace

from ctxcore.store import TraceStore
from ctxcore.store.ingest import ingest_paths
from ctxcore.store.watch import Watcher

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def build_broken_folder(folder: Path) -> tuple[set[str], set[tuple[str, int]]]:
    """1,000 files, about 10% broken in different ways. Returns the ids of the good traces
    and the (file, line) of every bad line, both derived from what was written."""
    rng = random.Random(7)
    good: set[str] = set()
    bad: set[tuple[str, int]] = set()
    n = 0
    kinds = ["truncated", "schema", "utf8", "types", "dup", "empty", "nan", "notobj"]
    broken_at = {i: kinds[i % len(kinds)] for i in rng.sample(range(1000), 99)}
    broken_at[500] = "huge"
    for i in range(1000):
        path = folder / f"f{i:04d}.jsonl"
        key = str(path.resolve())
        lines: list[bytes] = []
        for _ in range(rng.randint(1, 3)):
            t = make_trace(n, n_packets=3, session_id=f"s{i % 17}")
            good.add(t.trace_id)
            lines.append(t.to_json().encode())
            n += 1
        kind = broken_at.get(i)
        if kind == "empty":
            path.write_bytes(b"")
            good -= {json.loads(x)["trace_id"] for x in lines}
            continue
        if kind is not None:
            t = make_trace(n, n_packets=2)
            n += 1
            d = t.to_dict()
            if kind == "truncated":
                bad_line = t.to_json().encode()[:150]
            elif kind == "schema":
                d["schema"] = "ctxscope.trace/9"
                bad_line = json.dumps(d).encode()
            elif kind == "utf8":
                bad_line = t.to_json().encode().replace(b"fix failure", b"fix \xc3\x28failure")
            elif kind == "types":
                d["turn"] = "third"
                d["result"]["decisions"][0]["tokens_before"] = [1]
                bad_line = json.dumps(d).encode()
            elif kind == "dup":
                first = json.loads(lines[0])
                d["trace_id"] = first["trace_id"]  # same id, different content
                bad_line = json.dumps(d).encode()
            elif kind == "nan":
                bad_line = t.to_json().replace('"recency":0.5', '"recency":NaN', 1).encode()
            elif kind == "notobj":
                bad_line = b'["not", "a", "trace"]'
            else:  # a 60 MB line: one packet of 60 MB, over the 10 MB content limit
                d["input"]["packets"][0]["content"] = "x" * (60 * 1024 * 1024)
                bad_line = json.dumps(d).encode()
            # A duplicate is the bad one only after the first: ingest keeps the first.
            pos = rng.randint(1 if kind == "dup" else 0, len(lines))
            lines.insert(pos, bad_line)
            bad.add((key, pos + 1))
        path.write_bytes(b"\n".join(lines) + b"\n")
    return good, bad


@pytest.mark.slow
def test_a_thousand_files_with_ten_percent_broken(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    good, bad = build_broken_folder(folder)
    assert len(bad) >= 85  # ~10% of the files (empty ones have no bad line)
    with TraceStore(tmp_path / "r.duckdb", diagnose=False) as store:
        c = ingest_paths(store, [folder])
        assert c.traces_added == len(good)
        assert {(e.file, e.line) for e in c.error_rows} == bad
        assert c.errors == len(bad)
        stored = {r[0] for r in store._cur().execute("SELECT trace_id FROM traces").fetchall()}
        assert stored == good
        huge = [e for e in c.error_rows if e.file.endswith("f0500.jsonl")]
        assert len(huge) == 1 and "the limit is 10,485,760" in huge[0].message
        assert all(e.message and "Traceback" not in e.message for e in c.error_rows)
        again = ingest_paths(store, [folder])
        assert (again.traces_added, again.errors) == (0, 0)
        assert store.count() == len(good)
        assert len(store.ingest_errors(limit=10_000)) == len(bad)


INGESTER = """
import sys
from ctxcore.store import TraceStore
from ctxcore.store.ingest import ingest_paths
store = TraceStore(sys.argv[1], diagnose=False)
def progress(done, total):
    print(done, total, flush=True)
ingest_paths(store, [sys.argv[2]], progress)
print("done", flush=True)
"""


def consistency(db: Path) -> tuple[int, int]:
    """(traces, decisions) after checking that no trace is stored partially."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        partial = con.execute(
            "SELECT count(*) FROM traces t LEFT JOIN (SELECT tseq, count(*) AS n "
            "FROM decisions GROUP BY tseq) d USING (tseq) WHERE coalesce(d.n, 0) <> t.n_packets"
        ).fetchall()[0][0]
        assert partial == 0
        orphans = con.execute(
            "SELECT count(*) FROM decisions WHERE tseq NOT IN (SELECT tseq FROM traces)"
        ).fetchall()[0][0]
        assert orphans == 0
        n = con.execute("SELECT count(*), sum(n_packets) FROM traces").fetchall()[0]
        return int(n[0]), int(n[1] or 0)
    finally:
        con.close()


@pytest.mark.slow
def test_kill_9_in_the_middle_of_an_ingest(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    n_files, per_file, packets = 12, 120, 20
    for f in range(n_files):
        lines = [make_trace(f * 1000 + i, n_packets=packets).to_json() for i in range(per_file)]
        (folder / f"f{f:02d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "k.duckdb"
    script = tmp_path / "ingester.py"
    script.write_text(INGESTER, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db), str(folder)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    killed_at = None
    for out in proc.stdout:
        parts = out.split()
        if parts[0] == "done":
            break
        done, total = int(parts[0]), int(parts[1])
        if done > total * 0.4:
            killed_at = done / total
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert killed_at is not None, "the ingest finished before it could be killed"
    traces, decisions = consistency(db)
    assert traces < n_files * per_file  # it really was interrupted
    assert traces % per_file == 0  # whole files or nothing (one transaction per file)

    with TraceStore(db, diagnose=False) as store:
        c = ingest_paths(store, [folder])
        assert c.errors == 0
        assert c.traces_added == n_files * per_file - traces
    traces, decisions = consistency(db)
    assert (traces, decisions) == (n_files * per_file, n_files * per_file * packets)


APPENDER = """
import sys, random
sys.path.insert(0, {tests!r})
from helpers_store import make_trace
from ctxcore.capture.recorder import Recorder
wid, n = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(wid)
shared = Recorder({dir!r}, session_id=f"w{{wid}}", file_name="shared.jsonl")
own = Recorder({dir!r}, session_id=f"w{{wid}}")
for i in range(n):
    rec = shared if i % 3 else own
    # 2 to 80 packets: lines from ~1 KB to ~40 KB, on both sides of PIPE_BUF.
    rec.record(make_trace(wid * 100000 + i, n_packets=rng.randint(2, 80),
                          session_id=f"w{{wid}}"))
assert shared.failures == 0 and own.failures == 0
"""


@pytest.mark.slow
def test_four_processes_append_while_the_watcher_ingests(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    script = tmp_path / "appender.py"
    script.write_text(APPENDER.format(tests=str(TESTS), dir=str(folder)), encoding="utf-8")
    per = 60
    store = TraceStore(folder / "ctxscope.duckdb", diagnose=False)
    with Watcher(store, folder, rescan_every=3600):
        procs = [
            subprocess.Popen([sys.executable, str(script), str(w), str(per)], cwd=ROOT)
            for w in range(4)
        ]
        assert [p.wait(timeout=180) for p in procs] == [0, 0, 0, 0]
        deadline = time.monotonic() + 60
        while store.count() < 4 * per and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # anything extra (a duplicate) would show up now
    expected = {f"t{w * 100000 + i:06d}" for w in range(4) for i in range(per)}
    rows = store._cur().execute("SELECT trace_id FROM traces").fetchall()
    assert sorted(r[0] for r in rows) == sorted(expected)
    assert store.ingest_errors() == []
    store.close()
    traces, _ = consistency(folder / "ctxscope.duckdb")
    assert traces == 4 * per
