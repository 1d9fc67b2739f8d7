"""A local store brings findings and cost summaries made by other code (an upgrade) up to date
while the watcher idles: ``TraceStore.diagnose_pending`` takes them after the undiagnosed
traces, newest first, each once per process (docs/design.md, "Diagnostics")."""

from __future__ import annotations

from pathlib import Path

import duckdb
from helpers_store import make_trace

from ctxcore.diagnostics import fingerprint
from ctxcore.models import Trace
from ctxcore.store import TraceStore


def _stored(db: Path, n: int) -> tuple[list[Trace], dict[str, object], dict[str, bytes]]:
    """``n`` traces stored with their findings; each one's findings and cost summary."""
    traces = [make_trace(i, 8, must_keep_dropped=True) for i in range(n)]
    with TraceStore(db) as s:
        s.add_traces(traces)
        ids = [t.trace_id for t in traces]
        findings = {t: s.findings(t) for t in ids}
        summaries = s.cost_summaries(ids)
    assert all(findings.values()) and len(summaries) == n
    return traces, findings, summaries


def _as_older_code(db: Path, where: str = "true") -> None:
    """What an upgrade leaves: rows made by other code (their findings and summaries gone
    here, so that only a refresh can bring them back)."""
    con = duckdb.connect(str(db))
    sel = f"SELECT tseq FROM traces WHERE {where}"
    con.execute(f"DELETE FROM findings WHERE tseq IN ({sel})")
    con.execute(f"DELETE FROM cost_parts WHERE tseq IN ({sel})")
    con.execute(f"UPDATE traces SET diagnosed_with = 'older code' WHERE {where}")
    con.close()


def _made_with(db: Path) -> list[str | None]:
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT diagnosed_with FROM traces ORDER BY tseq").fetchall()
    con.close()
    return [r[0] for r in rows]


def test_findings_and_summaries_of_other_code_are_made_again(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    traces, findings, summaries = _stored(db, 5)
    _as_older_code(db)
    ids = [t.trace_id for t in traces]
    with TraceStore(db) as s:
        assert s.cost_summaries(ids) == {} and all(s.findings(t) == [] for t in ids)
        assert s.undiagnosed() == 0  # nothing waits: these are stale, not pending
        assert s.diagnose_pending(2) == 2
        # newest first: the two last stored are done
        assert _made_with_open(s) == ["older code"] * 3 + [fingerprint()] * 2
        assert s.diagnose_pending(2) == 2
        assert s.diagnose_pending(2) == 1
        assert s.diagnose_pending(2) == 0
        assert {t: s.findings(t) for t in ids} == findings
        assert s.cost_summaries(ids) == summaries
    assert _made_with(db) == [fingerprint()] * 5


def _made_with_open(s: TraceStore) -> list[str | None]:
    return [
        r[0] for r in s._cur().execute("SELECT diagnosed_with FROM traces ORDER BY tseq").fetchall()
    ]


def test_pending_traces_come_before_stale_ones(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    _stored(db, 3)
    _as_older_code(db)
    later = [make_trace(i, 8, must_keep_dropped=True) for i in range(10, 12)]
    with TraceStore(db, diagnose=False) as s:
        s.add_traces(later)
        assert s.undiagnosed() == 2
        assert s.diagnose_pending(3) == 3  # the two pending, then the newest stale one
        assert s.undiagnosed() == 0
        assert _made_with_open(s) == [
            "older code",
            "older code",
            fingerprint(),
            fingerprint(),
            fingerprint(),
        ]


def test_a_trace_whose_diagnosis_failed_is_not_taken_again(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    _stored(db, 3)
    _as_older_code(db)
    con = duckdb.connect(str(db))  # as ``diagnosed`` leaves a trace the detectors threw on
    con.execute(
        "UPDATE traces SET diagnosed_with = NULL, n_findings = 0 "
        "WHERE tseq = (SELECT min(tseq) FROM traces)"
    )
    con.close()
    with TraceStore(db) as s:
        assert s.diagnose_pending() == 2
        assert s.diagnose_pending() == 0
    assert _made_with(db) == [None, fingerprint(), fingerprint()]


def test_each_stale_trace_is_taken_once_per_process(tmp_path: Path) -> None:
    """Once a process has found none left, it does not look again (the watcher asks every
    idle moment); traces made stale after that wait for the next process."""
    db = tmp_path / "s.duckdb"
    _stored(db, 2)
    with TraceStore(db) as s:
        assert s.diagnose_pending() == 0
        s._cur().execute("UPDATE traces SET diagnosed_with = 'older code'")
        assert s.diagnose_pending() == 0
    with TraceStore(db) as s:
        assert s.diagnose_pending() == 2


def test_a_read_only_store_refreshes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    _stored(db, 2)
    _as_older_code(db)
    with TraceStore(db, read_only=True) as s:
        assert s.diagnose_pending() == 0
    assert _made_with(db) == ["older code"] * 2
