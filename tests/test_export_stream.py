"""``ctxscope export --session ID --shared`` from a store, streamed (docs/design.md, "Shared
traces"): the session's traces are read a few at a time (what they share read once), redacted
and written as they come, so neither the traces nor the output are held whole; the file
reads back to the traces the snapshot export gives, and says the same of its secrets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ctxcore.cli import exchange, main
from ctxcore.formats.load import iter_traces, load_file
from ctxcore.models import Trace
from ctxcore.sharing import is_shared
from ctxcore.store.engines import open_store

ROOT = Path(__file__).resolve().parent.parent
SIDECHAIN = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
SIDECHAIN = SIDECHAIN / "ccviewer-task-sidechain-session.jsonl"
#: AWS's documented example secret key
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[Trace]]:
    """A store holding a long Claude Code session (``bench_import``'s generator over the
    corpus, compacted now and then) with a secret in one of its tool results."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import build

    where = tmp_path_factory.mktemp("export")
    log = where / "session.jsonl"
    build(log, 200, 0.5, 60_000)
    lines = log.read_text(encoding="utf-8").splitlines()
    k = next(i for i, ln in enumerate(lines) if '"tool_result"' in ln and i > len(lines) // 2)
    obj = json.loads(lines[k])
    for block in obj["message"]["content"]:
        if block.get("type") == "tool_result":
            block["content"] = f"export AWS_SECRET_ACCESS_KEY={SECRET}"
    lines[k] = json.dumps(obj)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = where / "s.duckdb"
    assert main(["import", str(log), "--db", str(db)]) == 0
    traces = list(iter_traces(log))
    return db, traces[0].session_id, traces


def _export(db: Path, session: str, out: Path, *flags: str) -> None:
    assert main(["export", "--session", session, "--db", str(db), "-o", str(out), *flags]) == 0


def test_the_streamed_file_reads_back_as_the_snapshot_and_says_the_same(
    stored: tuple[Path, str, list[Trace]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, session, traces = stored
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "none"))
    monkeypatch.setattr(exchange, "EXPORT_TOKENS", 50_000)  # many reads, one trace or a few
    reads: list[list[str]] = []
    real = exchange._traces

    def recorded(store: object, ids: list[str], objects: object) -> list[tuple[Trace, object]]:
        reads.append(ids)
        return real(store, ids, objects)  # type: ignore[arg-type]

    monkeypatch.setattr(exchange, "_traces", recorded)
    snapshot, shared = tmp_path / "snap.json", tmp_path / "shared.jsonl"
    _export(db, session, snapshot)
    said_snapshot = capsys.readouterr().err.replace(str(snapshot), "OUT")
    reads.clear()
    _export(db, session, shared, "--shared")
    said_shared = capsys.readouterr().err.replace(str(shared), "OUT")
    assert said_shared == said_snapshot  # the same count of traces and of secrets
    assert "(aws_secret_access_key: " in said_shared  # in each trace after the call
    got = load_file(shared)
    assert got == load_file(snapshot)
    assert [t.trace_id for t in got] == [t.trace_id for t in traces]
    assert SECRET not in shared.read_text(encoding="utf-8")
    assert all(is_shared(ln) for ln in shared.read_bytes().splitlines())
    # read a few at a time, in turn order, each read bounded by its tokens of context
    assert [i for ids in reads for i in ids] == [t.trace_id for t in traces]
    used = {t.trace_id: t.result.totals.used for t in traces if t.result is not None}
    assert len(reads) > 5
    assert all(len(ids) == 1 or sum(used[i] for i in ids) <= 50_000 for ids in reads)


def test_the_streamed_export_to_standard_output_is_the_file(
    stored: tuple[Path, str, list[Trace]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, session, _ = stored
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "none"))
    out = tmp_path / "shared.jsonl"
    _export(db, session, out, "--shared", "--no-redact")
    capsys.readouterr()
    args = ["export", "--session", session, "--db", str(db), "--shared", "--no-redact"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out == out.read_text(encoding="utf-8")
    assert "warning: not redacted" in captured.err


def test_a_session_the_store_lacks_is_looked_for_and_said_as_before(
    stored: tuple[Path, str, list[Trace]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, _, _ = stored
    folder = tmp_path / "watched"
    folder.mkdir()
    monkeypatch.setenv("CTXSCOPE_TRACES", str(folder))
    out = tmp_path / "x.jsonl"
    args = ["export", "--session", "nosuch", "--db", str(db), "--shared", "-o", str(out)]
    assert main(args) == 2
    assert "session 'nosuch' not found in" in capsys.readouterr().err
    assert not out.exists()
    # a session only in the watched folder is read from there, as before
    fixture = list(iter_traces(SIDECHAIN))
    (folder / "side.jsonl").write_text(
        "".join(t.to_json() + "\n" for t in fixture), encoding="utf-8"
    )
    session = fixture[0].session_id
    assert main(["export", "--session", session, "--db", str(db), "--shared", "-o", str(out)]) == 0
    assert "read from" in capsys.readouterr().err
    assert len(load_file(out)) == len([t for t in fixture if t.session_id == session])


def test_a_store_that_cannot_be_read_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "none"))
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"not a database" * 100)
    out = tmp_path / "x.jsonl"
    args = ["export", "--session", "s", "--db", str(bad), "--shared", "-o", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.duckdb" in err[0]
    assert not out.exists()
    with open_store(tmp_path / "empty.duckdb"):
        pass
