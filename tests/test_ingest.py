"""Ingest: formats, offsets, half-written lines, bad lines, duplicates, and the CLI."""

from __future__ import annotations

import functools
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers_store import make_trace, write_jsonl

from ctxcore.store import TraceStore
from ctxcore.store.ingest import ingest_paths

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(tmp_path: Path) -> TraceStore:
    return TraceStore(tmp_path / "i.duckdb")


def line(i: int, **kw: object) -> str:
    return make_trace(i, **kw).to_json() + "\n"  # type: ignore[arg-type]


def test_jsonl_is_ingested_once(tmp_path: Path, store: TraceStore) -> None:
    f = tmp_path / "a.jsonl"
    write_jsonl(f, [make_trace(i) for i in range(12)])
    c = ingest_paths(store, [f])
    assert (c.files, c.traces_added, c.errors) == (1, 12, 0)
    assert store.count() == 12
    again = ingest_paths(store, [tmp_path])
    assert (again.traces_added, again.traces_skipped) == (0, 0)
    assert store.count() == 12


def test_appended_lines_are_read_from_the_offset(tmp_path: Path, store: TraceStore) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text(line(0) + line(1), encoding="utf-8")
    assert ingest_paths(store, [f]).traces_added == 2
    with f.open("a", encoding="utf-8") as fh:
        fh.write(line(2) + "{not json\n" + line(3))
    c = ingest_paths(store, [f])
    # Only the new lines were read (nothing re-read, so nothing skipped as a duplicate),
    # and the bad one is reported with its line number in the whole file.
    assert (c.traces_added, c.traces_skipped, c.errors) == (2, 0, 1)
    assert [(e.line, "malformed JSON" in e.message) for e in c.error_rows] == [(4, True)]
    off = store.file_offset(str(f.resolve()))
    assert off is not None and off.offset == f.stat().st_size and off.line == 5


def test_half_written_last_line_waits(tmp_path: Path, store: TraceStore) -> None:
    f = tmp_path / "a.jsonl"
    full = line(1)
    f.write_text(line(0) + full[:100], encoding="utf-8")
    c = ingest_paths(store, [f])
    assert (c.traces_added, c.errors) == (1, 0)
    assert c.pending == [(str(f.resolve()), 2)]
    with f.open("a", encoding="utf-8") as fh:
        fh.write(full[100:])
    c = ingest_paths(store, [f])
    assert (c.traces_added, c.errors, c.pending) == (1, 0, [])
    assert store.get_trace("t000001") == make_trace(1)


def test_complete_last_line_without_newline(tmp_path: Path, store: TraceStore) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text(line(0) + line(1).rstrip("\n"), encoding="utf-8")
    assert ingest_paths(store, [f]).traces_added == 1  # a writer may still be mid-line
    c = ingest_paths(store, [f], complete_tail=True)  # the one-shot CLI takes it
    assert c.traces_added == 1
    with f.open("a", encoding="utf-8") as fh:
        fh.write("\n" + line(2))
    c = ingest_paths(store, [f])
    assert (c.traces_added, c.errors) == (1, 0)
    assert store.count() == 3


def test_bad_lines_are_reported_and_the_rest_ingested(tmp_path: Path, store: TraceStore) -> None:
    good = [line(i) for i in range(4)]
    wrong_type = make_trace(10).to_dict()
    wrong_type["input"]["packets"][1]["tokens"] = "many"
    schema2 = make_trace(11).to_dict()
    schema2["schema"] = "ctxscope.trace/2"
    nan = make_trace(12).to_json().replace('"recency":0.5', '"recency":NaN', 1)
    f = tmp_path / "mixed.jsonl"
    f.write_bytes(
        (good[0] + "{broken\n" + good[1] + json.dumps(wrong_type) + "\n").encode()
        + b'{"schema": "ctxscope.trace/1", "trace_id": "\xff\xfe"}\n'
        + (good[2] + json.dumps(schema2) + "\n" + nan + "\n" + "[1, 2]\n" + good[3]).encode()
    )
    c = ingest_paths(store, [f])
    assert c.traces_added == 4
    errors = {e.line: e.message for e in c.error_rows}
    assert sorted(errors) == [2, 4, 5, 7, 8, 9]
    assert "malformed JSON" in errors[2]
    assert "packet 'tool:call_1'" in errors[4] and "tokens" in errors[4]
    assert "invalid UTF-8" in errors[5]
    assert "unsupported schema 'ctxscope.trace/2'" in errors[7]
    assert "NaN" in errors[8]
    assert "must be a JSON object" in errors[9]
    stored = {(e.file, e.line) for e in store.ingest_errors()}
    assert stored == {(str(f.resolve()), n) for n in errors}


def test_duplicate_ids(tmp_path: Path, store: TraceStore) -> None:
    f = tmp_path / "a.jsonl"
    other = make_trace(5, n_packets=2).model_copy(update={"trace_id": "t000001"})
    f.write_text(line(1) + line(1) + other.to_json() + "\n", encoding="utf-8")
    c = ingest_paths(store, [f])
    assert (c.traces_added, c.traces_skipped, c.errors) == (1, 1, 1)
    assert c.error_rows[0].line == 3
    assert "trace_id 't000001' is already stored" in c.error_rows[0].message
    assert store.get_trace("t000001") == make_trace(1)
    # The same trace in another file is simply already there.
    g = tmp_path / "b.jsonl"
    g.write_text(line(1), encoding="utf-8")
    c = ingest_paths(store, [g])
    assert (c.traces_added, c.traces_skipped, c.errors) == (0, 1, 0)


def test_json_single_list_and_gzip(tmp_path: Path, store: TraceStore) -> None:
    (tmp_path / "one.json").write_text(make_trace(1).to_json(), encoding="utf-8")
    (tmp_path / "many.json").write_text(
        json.dumps([{"trace_id": 4}] + [make_trace(i).to_dict() for i in (2, 3)]),
        encoding="utf-8",
    )
    with gzip.open(tmp_path / "z.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(line(5) + line(6))
    (tmp_path / "notes.txt").write_text("ignored in folders", encoding="utf-8")
    c = ingest_paths(store, [tmp_path])
    assert (c.files, c.traces_added, c.errors) == (3, 5, 1)
    assert "traces[0]" in c.error_rows[0].message
    assert {r.trace_id for r in store.list_traces(limit=10).rows} == {
        f"t00000{i}" for i in (1, 2, 3, 5, 6)
    }
    # Rewriting a .json file re-reads it; known traces are skipped, errors not repeated.
    (tmp_path / "many.json").write_text(
        json.dumps([{"trace_id": 4}] + [make_trace(i).to_dict() for i in (2, 3, 7)]),
        encoding="utf-8",
    )
    c = ingest_paths(store, [tmp_path])
    assert (c.traces_added, c.traces_skipped) == (1, 2)
    assert len(store.ingest_errors()) == 1


def test_a_file_replaced_by_rename_is_read_again(tmp_path: Path, store: TraceStore) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text(line(0) + line(1), encoding="utf-8")
    ingest_paths(store, [f])
    tmp = tmp_path / ".a.jsonl.tmp"
    tmp.write_text(line(7, n_packets=9) + line(8, n_packets=9) + line(9), encoding="utf-8")
    os.replace(tmp, f)
    c = ingest_paths(store, [f])
    assert (c.traces_added, c.errors) == (3, 0)
    assert store.count() == 5


@pytest.mark.slow
def test_cli_prints_counts_and_file_line_errors(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text(line(0) + "{oops\n" + line(1), encoding="utf-8")
    db = tmp_path / "cli.duckdb"
    cmd = [sys.executable, "-m", "ctxcore", "ingest", str(d), "--db", str(db)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "ingested 2 new traces from 1 files (0 already stored, 1 errors)"
    assert out[1].startswith(f"{(d / 'a.jsonl').resolve()}:2: malformed JSON")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "ingested 0 new traces from 0 files (0 already stored, 0 errors)"
    ]
    missing = subprocess.run(
        [*cmd[:4], str(tmp_path / "nope"), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "nope: no such file or folder" in missing.stderr


def test_cli_can_defer_diagnostics_to_the_app(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [make_trace(i, must_keep_dropped=True) for i in range(3)])
    db = tmp_path / "cli.duckdb"
    cmd = [sys.executable, "-m", "ctxcore", "ingest", str(d), "--db", str(db)]
    r = subprocess.run([*cmd, "--defer-diagnostics"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith("3 traces wait for diagnostics")
    with TraceStore(db) as s:
        assert s.undiagnosed() == 3
        assert s.diagnose_pending() == 3  # what the app's watcher does when idle
        assert s.undiagnosed() == 0
        assert s.findings(make_trace(0).trace_id)  # a dropped must-keep item is a finding


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.slow
def test_worker_processes_store_exactly_what_one_process_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """Workers re-read their byte range of a plain file (a .gz travels as bytes) and hand
    their rows back as Arrow files in a spill folder that is gone afterwards."""
    import tempfile

    import ctxcore.store.ingest as ingest_mod
    import ctxcore.store.workers as workers_mod

    f = tmp_path / f"big{suffix}"
    bad = "{not json\n"
    lines = [line(i, n_packets=30) for i in range(120)]
    lines.insert(57, bad)
    lines.insert(90, line(3, n_packets=4))  # same id, different content: a conflict
    data = "".join(lines).encode()
    f.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    # chunks this process parses itself (while the workers start, when it helps)
    here: list[int] = []
    real = workers_mod._prepare_chunk

    @functools.wraps(real)  # the pool pickles it by name: workers run the real one
    def counted(*args: Any) -> Any:
        here.append(1)
        return real(*args)

    monkeypatch.setattr(workers_mod, "_prepare_chunk", counted)
    results = []
    for workers, helps in ((1, True), (2, False), (2, True)):
        monkeypatch.setattr(workers_mod, "HELP_WHILE_POOL_STARTS", helps)
        monkeypatch.setattr(ingest_mod, "POOL_MIN_BYTES", 0)
        monkeypatch.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)
        monkeypatch.setattr(ingest_mod, "CHUNK_BYTES", 4 * 40_000)  # ~10 chunks
        monkeypatch.setattr(ingest_mod, "POOL_CHUNK_BYTES", 4 * 40_000)
        here.clear()
        with TraceStore(tmp_path / f"w{workers}{helps}.duckdb", diagnose=False) as s:
            c = ingest_paths(s, [f], workers=workers)
        if workers == 2:
            # without help every chunk is a worker's; with it, this process parsed some
            # while the workers were still importing (a process takes far longer to start
            # than finding ten chunk ends does), and the workers the rest
            assert (len(here) > 0) == helps and len(here) < 10
        with TraceStore(tmp_path / f"w{workers}{helps}.duckdb", diagnose=False) as s:
            cur = s._cur()
            dec = cur.execute(
                "SELECT t.trace_id, d.ord, d.packet_id, d.status, (SELECT string_agg(c.text, '' "
                "ORDER BY c.part) FROM contents c WHERE c.cid = d.cid) FROM decisions d "
                "JOIN traces t USING (tseq) ORDER BY t.trace_id, d.ord"
            ).fetchall()
        results.append((c.traces_added, [(e.line, e.message) for e in c.error_rows], dec))
    assert results[0] == results[1] == results[2]
    added, errors, dec = results[0]
    assert added == 120 and [ln for ln, _ in errors] == [58, 91]
    assert len(dec) == 120 * 30
    assert not list(spill_root.glob("ctxscope-ingest-*"))


def test_redaction_on_ingest_when_configured(
    tmp_path: Path, store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    t = make_trace(1)
    pkts = list(t.input.packets)
    pkts[2] = pkts[2].model_copy(update={"content": f"git clone https://x:{secret}@github.com/a/b"})
    t = t.model_copy(update={"input": t.input.model_copy(update={"packets": pkts})})
    (tmp_path / "plain.jsonl").write_text(t.to_json() + "\n", encoding="utf-8")
    monkeypatch.setenv("CTXSCOPE_REDACT_ON_INGEST", "1")
    assert ingest_paths(store, [tmp_path / "plain.jsonl"]).traces_added == 1
    stored = store.get_trace("t000001")
    assert stored is not None and sum(stored.redactions.values()) >= 1
    assert secret not in stored.to_json()
    assert secret not in (store.packet_content("t000001", "tool:call_2") or "")
    assert store.packet_content("t000001", "tool:call_1") == t.input.packets[1].content


def test_a_worker_runs_without_pandas_and_cyclic_gc(tmp_path: Path) -> None:
    """``_worker_init`` (the pool's initializer), in a fresh interpreter: pyarrow works and
    never imports pandas, the collector is off, and a chunk is still parsed and collected
    after."""
    code = f"""
import gc, sys
import pyarrow as pa
from ctxcore.store.workers import _prepare_chunk, _worker_init
_worker_init({os.getpid()})
assert "pandas" not in sys.modules and not gc.isenabled()
try:
    import pandas
except ImportError:
    pass
else:
    raise SystemExit("pandas was importable in a worker")
data = open({str(tmp_path / "t.jsonl")!r}, "rb").read()
chunk = _prepare_chunk({str(tmp_path / "t.jsonl")!r}, data, False, {str(tmp_path)!r})
spilled, errors, lines = chunk.rows, chunk.errors, chunk.lines
assert spilled is not None and lines == [1, 2] and not errors
assert "pandas" not in sys.modules and pa.array([1, 2]).to_pylist() == [1, 2]
print("ok")
"""
    (tmp_path / "t.jsonl").write_text(line(1) + line(2), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_worker_refuses_a_range_whose_bytes_changed(tmp_path: Path) -> None:
    """A file replaced between the owner's read and the worker's re-read is not
    half-ingested: the worker raises, and the file fails (tried again, as it changed)."""
    from ctxcore.errors import InputError
    from ctxcore.store.workers import _prepare_chunk

    f = tmp_path / "t.jsonl"
    text = line(1) + line(2)
    f.write_text(text, encoding="utf-8")
    n = len(text.encode())
    spilled, errors, lines, n_lines, *_ = _prepare_chunk(
        str(f), (0, n, text.encode()[-64:]), False, str(tmp_path)
    )
    assert spilled is not None and errors == [] and lines == [1, 2] and n_lines == 2
    assert spilled.load().ids == [make_trace(1).trace_id, make_trace(2).trace_id]
    with pytest.raises(InputError, match="changed while it was being read"):
        _prepare_chunk(str(f), (0, n, b"something else"), False, str(tmp_path))


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.slow
def test_appended_big_file_resumes_with_true_line_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, suffix: str
) -> None:
    """A big file read in chunks (by workers, or here) and then appended to (a .gz gets a
    new gzip member): the second run starts at the stored offset, numbers lines from the
    file's start, leaves a half-written last line for later, and stores nothing twice."""
    import ctxcore.store.ingest as ingest_mod

    monkeypatch.setattr(ingest_mod, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "CHUNK_BYTES", 30_000)
    monkeypatch.setattr(ingest_mod, "POOL_CHUNK_BYTES", 30_000)
    f = tmp_path / f"grow{suffix}"
    gz = suffix.endswith(".gz")

    def append(text: str) -> None:
        data = text.encode()
        with f.open("ab") as fh:
            fh.write(gzip.compress(data) if gz else data)

    append("".join(line(i, n_packets=20) for i in range(40)))
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as s:
        assert ingest_paths(s, [f], workers=workers).traces_added == 40
        more = [line(i, n_packets=20) for i in range(40, 70)]
        more.insert(10, "{broken\n")  # line 51 of the file
        half = line(70)[:-40]  # a writer still writing
        append("".join(more) + half)
        c = ingest_paths(s, [f], workers=workers)
        assert (c.traces_added, c.traces_skipped) == (30, 0)
        assert [e.line for e in c.error_rows] == [51]
        assert [ln for _, ln in c.pending] == [72]
        append(line(70)[-40:])
        c = ingest_paths(s, [f], workers=workers)
        assert (c.traces_added, c.errors) == (1, 0)
        assert s.count() == 71
        offset = s.file_offset(str(f.resolve()))
        assert offset is not None and offset.line == 72
