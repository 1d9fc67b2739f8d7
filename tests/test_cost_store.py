"""``ctxscope cost --session/--all`` on a store costs the calls from the cost summaries the
store keeps with each trace, not from its traces (docs/design.md, "Cost and prices",
Summaries), and gives what costing the session's files gives."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import ctxcore.fingerprints
from ctxcore.cli import main
from ctxcore.formats.load import iter_traces
from ctxcore.models import Trace
from ctxcore.store.engines import open_store
from ctxcore.store.records import PackedTrace
from ctxcore.store.tracestore import TraceStore

CC = Path(__file__).resolve().parent / "fixtures" / "imports" / "claude-code"
INIT = CC / "ccviewer-init-session.jsonl"
SIDE = CC / "ccviewer-task-sidechain-session.jsonl"


def run(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(args))
    assert rc == 0, err.getvalue()
    return out.getvalue()


def calls(*args: str) -> dict[str, dict[str, Any]]:
    got = [json.loads(line) for line in run("cost", *args, "--json").splitlines()]
    return {c["trace_id"]: c for c in got}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    with open_store(path) as store:
        store.add_traces(iter_traces(SIDE))
        store.add_traces(iter_traces(INIT))
    return path


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the traces the store is asked for from now on (one by one or many:
    ``traces_json`` reads through ``traces_packed``)."""
    read: list[str] = []
    one, many = TraceStore.get_trace, TraceStore.traces_packed

    def get_trace(self: TraceStore, trace_id: str) -> Trace | None:
        read.append(trace_id)
        return one(self, trace_id)

    def traces_packed(self: TraceStore, trace_ids: Sequence[str]) -> list[PackedTrace]:
        read.extend(trace_ids)
        return many(self, trace_ids)

    monkeypatch.setattr(TraceStore, "get_trace", get_trace)
    monkeypatch.setattr(TraceStore, "traces_packed", traces_packed)
    return read


def test_json_from_the_store_reads_no_trace(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from_files = calls(str(INIT), str(SIDE))
    read = _counting_reads(monkeypatch)
    assert calls("--all", "--db", str(db)) == from_files
    parent = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
    one = calls("--session", parent, "--db", str(db))
    assert one == calls(str(SIDE))
    assert read == []


def test_summaries_of_other_code_are_made_again_from_the_traces(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written by other code (another fingerprint) has summaries this code does
    not trust: each trace is read and summarized, with the same costs."""
    from_files = calls(str(INIT), str(SIDE))
    monkeypatch.setattr(ctxcore.fingerprints, "source_fingerprint", lambda *_: "other-code")
    read = _counting_reads(monkeypatch)
    assert calls("--all", "--db", str(db)) == from_files
    assert sorted(read) == sorted(from_files)


def test_the_tables_from_the_store_are_those_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One session's tables and waste from the store are the file's, byte for byte; the
    traces are read once each, for the waste (tool definitions, thinking) alone."""
    db = tmp_path / "one.duckdb"
    with open_store(db) as store:
        store.add_traces(iter_traces(INIT))
    from_file = run("cost", str(INIT))
    read = _counting_reads(monkeypatch)
    assert run("cost", "--all", "--db", str(db)) == from_file
    assert len(read) == len(calls(str(INIT))) == len(set(read))
