"""``ctxscope import --db`` with its findings computed in a second process
(``ctxcore.cli.import_findings``): the same rows as computed in one process, and each way
the two can part (a bad line, a conflict, a child that dies) says its error and keeps what
it should."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ctxcore.cli import import_findings, main
from ctxcore.cli.import_findings import FindingsJob, FindingsProcess, _diagnosed, with_findings
from ctxcore.formats.load import iter_traces, load_file
from ctxcore.models import Trace
from ctxcore.store import rows as rows_mod

ROOT = Path(__file__).resolve().parent.parent
SESSION = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
LOG = SESSION / "ccviewer-task-sidechain-session.jsonl"


@pytest.fixture(autouse=True)
def _child_for_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixtures are small: the findings get their child whatever the size."""
    monkeypatch.setattr(import_findings, "CHILD_FROM_BYTES", 0)


def _findings_rows(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT t.trace_id, f.ord, f.detector, f.severity, f.packet_ids, f.message, "
            "f.evidence_json, f.fix_json FROM findings f JOIN traces t USING (tseq) "
            "ORDER BY t.trace_id, f.ord"
        ).fetchall()
    finally:
        con.close()


def _trace_cols(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(
            "SELECT trace_id, n_findings, max_severity, diagnosed_with FROM traces "
            "ORDER BY trace_id"
        ).fetchall()
    finally:
        con.close()


def _expected(traces: list[Trace]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The findings rows and trace columns ``prepare`` computes in this process."""
    found: list[tuple[Any, ...]] = []
    cols: list[tuple[Any, ...]] = []
    severity = {"info": 0, "warning": 1, "error": 2}
    for t in traces:
        fs, made_by = rows_mod.diagnose_trace(t, b"")
        for k, f in enumerate(fs):
            found.append(
                (
                    t.trace_id,
                    k,
                    f.detector,
                    f.severity,
                    list(f.packet_ids),
                    f.message,
                    json.dumps(f.evidence, default=str),
                    None if f.fix is None else json.dumps(f.fix, default=str),
                )
            )
        worst = max((f.severity for f in fs), key=severity.__getitem__, default=None)
        cols.append((t.trace_id, len(fs), worst, made_by))
    return sorted(found, key=lambda r: (r[0], r[1])), sorted(cols)


def test_with_findings_gives_the_rows_prepare_computes() -> None:
    """A batch prepared without findings, then given the child's: every table equal to the
    one ``prepare`` makes with them (but the ingest time)."""
    traces = load_file(LOG)
    items = [(t, t.to_json_bytes()) for t in traces]
    sources = ["s"] * len(items)
    whole = rows_mod.prepare(items, sources, True)
    split = with_findings(rows_mod.prepare(items, sources, False), [_diagnosed(t) for t in traces])
    assert whole.tables.keys() == split.tables.keys()
    assert whole.tables["findings"].num_rows > 0
    for name, table in whole.tables.items():
        other = split.tables[name]
        if name == "traces":
            keep = [c for c in table.column_names if c != "ingested_at"]
            table, other = table.select(keep), other.select(keep)
        assert table.equals(other), name
    assert split.rejected == []


def test_a_trace_whose_detectors_raised_is_rejected_with_its_error() -> None:
    traces = load_file(LOG)[:3]
    items = [(t, t.to_json_bytes()) for t in traces]
    found = [_diagnosed(t) for t in traces]
    found[1] = (traces[1].trace_id, [], None, "could not be stored (ValueError: boom)", [])
    rows = with_findings(rows_mod.prepare(items, ["s"] * 3, False), found)
    assert rows.rejected == [(1, "could not be stored (ValueError: boom)")]
    counts = rows.tables["traces"].column("n_findings").to_pylist()
    assert counts[0] == len(found[0][1]) and counts[2] == len(found[2][1])


def test_the_child_holds_at_most_AHEAD_and_gives_every_trace_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(import_findings, "AHEAD", 3)
    traces = list(iter_traces(LOG))
    stage = FindingsProcess(FindingsJob([str(LOG)], "auto", None, None, False))
    try:
        got = [stage.take(traces[0].trace_id)]
        # the child has run ahead (it has the whole log's findings by now): only 3 held
        for _ in range(50):
            stage.poll()
            if len(stage._ready) == 3:
                break
            stage.proc.join(0.1)
        assert len(stage._ready) == 3
        got += [stage.take(t.trace_id) for t in traces[1:]]
    finally:
        stage.close()
    assert [got[:3] for got in got] == [_diagnosed(t)[:3] for t in traces]
    assert not multiprocessing.active_children()


def test_a_bad_line_mid_file_is_said_once_and_the_rest_keep_their_findings(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A session log's bad line is noted in the call it broke; a trace file's is said, once
    (the child reads it too, silently), and the traces after it are stored: both with the
    findings this process computes."""
    lines = LOG.read_text(encoding="utf-8").splitlines(keepends=True)
    log = tmp_path / "bad.jsonl"
    log.write_text("".join(lines[:20] + ["{this is not json\n"] + lines[20:]), encoding="utf-8")
    traces = [t.model_copy(update={"trace_id": f"t-{k}"}) for k, t in enumerate(load_file(LOG))]
    file = tmp_path / "traces.jsonl"
    file.write_text(
        "".join([t.to_json() + "\n" for t in traces[:9]] + ["{this is not json\n"])
        + "".join(t.to_json() + "\n" for t in traces[9:])
    )
    for src, rc in ((log, 0), (file, 1)):
        db = tmp_path / f"{src.stem}.duckdb"
        assert main(["import", str(src), "--db", str(db)]) == rc
        err = capfd.readouterr().err
        said = [x for x in err.splitlines() if x.startswith("ctxscope import: error:")]
        assert len(said) == rc, err
        if rc:
            assert f"{src}:10" in said[0]
        got = list(iter_traces(src, skipped=lambda _: None))
        assert len(got) == len(traces)
        found, cols = _expected(got)
        assert found and _findings_rows(db) == found
        assert _trace_cols(db) == cols
    assert not multiprocessing.active_children()


def test_a_conflict_names_the_trace_and_ends_the_child(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = load_file(LOG)
    db = tmp_path / "s.duckdb"
    assert main(["import", str(LOG), "--db", str(db)]) == 0
    other = traces[4].model_copy(update={"metadata": {**traces[4].metadata, "n": 1}})
    fresh = [t.model_copy(update={"trace_id": f"fresh-{k}"}) for k, t in enumerate(traces)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(t.to_json() + "\n" for t in [*fresh[:6], other, *fresh[6:]]))
    capsys.readouterr()
    assert main(["import", str(bad), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"trace_id {traces[4].trace_id!r} is already stored" in err
    assert "nothing was stored" in err
    assert not multiprocessing.active_children()
    assert len(_trace_cols(db)) == len(traces)


def test_a_killed_child_is_noted_and_the_findings_are_computed_here(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child killed before its first findings arrive: a note says so, and this process
    computes every trace's findings, the same as one process computes them."""
    take = FindingsProcess.take

    def killed_first(self: FindingsProcess, trace_id: str) -> Any:
        if self.proc.is_alive() and self.proc.pid is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join()
        return take(self, trace_id)

    monkeypatch.setattr(FindingsProcess, "take", killed_first)
    db = tmp_path / "s.duckdb"
    assert main(["import", str(LOG), "--db", str(db)]) == 0
    err = capfd.readouterr().err.strip().splitlines()
    notes = [x for x in err if "the findings process stopped (exit code -9)" in x]
    assert len(notes) == 1 and notes[0].startswith("note: "), err
    assert "are computed in this process" in notes[0]
    found, cols = _expected(load_file(LOG))
    assert found and _findings_rows(db) == found
    assert _trace_cols(db) == cols
    assert not multiprocessing.active_children()


def test_a_child_reading_other_traces_is_noted_and_the_findings_are_computed_here(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a log written to while it is imported does (the child and this process read it
    at different times): the child's traces are not this process's. Here the child reads
    the same session with its first 3 traces cut: this process takes 0 findings from it."""
    traces = load_file(LOG)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(t.to_json() + "\n" for t in traces[3:]), encoding="utf-8")
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(t.to_json() + "\n" for t in traces), encoding="utf-8")
    job = import_findings.findings_job
    monkeypatch.setattr(
        import_findings,
        "findings_job",
        lambda sources, args, redact: job([other], args, redact),
    )
    db = tmp_path / "s.duckdb"
    assert main(["import", str(mine), "--db", str(db)]) == 0
    err = capfd.readouterr().err
    assert f"read trace_id {traces[3].trace_id!r} where this import read" in err
    found, cols = _expected(traces)
    assert found and _findings_rows(db) == found
    assert _trace_cols(db) == cols
    assert not multiprocessing.active_children()


def test_what_the_detectors_log_in_the_child_is_logged_by_the_import(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A trace the detectors skip is said by the import's process, as it was when the
    findings were computed there (the child's own output goes nowhere)."""
    from ctxcore import diagnostics
    from ctxcore.errors import InputError

    traces = load_file(LOG)

    def refuse(trace: Trace, **_: Any) -> Any:
        raise InputError("the preset cannot build this input")

    with monkeypatch.context() as m:
        m.setattr(diagnostics, "diagnose", refuse)
        skipped = _diagnosed(traces[1])
    assert skipped[1:4] == ([], None, None)
    assert skipped[4] == [
        f"diagnostics skipped trace {traces[1].trace_id}: the preset cannot build this input"
    ]
    stage = FindingsProcess(FindingsJob([str(LOG)], "auto", None, None, False))
    try:
        stage.take(traces[0].trace_id)
        while not stage._ready:
            stage.poll()
            stage.proc.join(0.05)
        stage._ready[0] = skipped
        caplog.clear()
        with caplog.at_level("WARNING", logger="ctxscope.store"):
            assert stage.take(traces[1].trace_id) == skipped
    finally:
        stage.close()
    assert [r.getMessage() for r in caplog.records] == skipped[4]


def test_a_small_import_or_a_source_read_once_keeps_the_findings_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(import_findings, "CHILD_FROM_BYTES", LOG.stat().st_size + 1)
    assert not import_findings.worth_a_child([LOG])
    assert import_findings.worth_a_child([LOG, LOG])
    monkeypatch.setattr(import_findings, "CHILD_FROM_BYTES", 0)
    assert import_findings.worth_a_child([LOG])
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert not import_findings.worth_a_child([LOG, fifo])
    assert not import_findings.worth_a_child([tmp_path / "missing.jsonl"])
    started: list[FindingsJob] = []
    monkeypatch.setattr(FindingsProcess, "__init__", lambda self, job: started.append(job))
    monkeypatch.setattr(import_findings, "CHILD_FROM_BYTES", LOG.stat().st_size + 1)
    db = tmp_path / "s.duckdb"
    assert main(["import", str(LOG), "--db", str(db)]) == 0
    assert started == []
    found, cols = _expected(load_file(LOG))
    assert _findings_rows(db) == found and _trace_cols(db) == cols
