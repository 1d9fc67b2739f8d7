"""Ingest with redaction on (a team store's default) of shared lines: each trace stored is
the one ``redact_trace`` gives its whole JSON, byte for byte, while the rules read only
what each line brings (docs/design.md, "Capture, import, export, redaction").

The sessions are the public Claude Code fixture imported with ``ctxscope import -o`` (its
calls repeat the messages of the calls before them), with a secret put in one message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.errors import InputError
from ctxcore.formats import redact
from ctxcore.formats.redact import redact_trace
from ctxcore.models import Trace
from ctxcore.sharing import PartTable, expand_lines, is_shared, line_pieces
from ctxcore.store import TraceStore, workers
from ctxcore.store.workers import FileRun

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = ROOT / "tests" / "fixtures" / "imports" / "claude-code" / "ccviewer-init-session.jsonl"
SECRET = "sk-ant-api03-" + "Q7m2Zr8Tx1Vb6Nc3Hd7Kp0aB4eG9jL5sW" * 3 + "AA"
#: a word that makes the redaction check read on (a rule's guard) and is no secret
GUARD = "the password field of the form stays empty"


def _session(tmp_path: Path, where: str | None, text: str = SECRET) -> list[bytes]:
    """The fixture's session imported as shared lines, ``text`` added to its first user
    message (``first``: every later call repeats it), its last one (``last``) or none."""
    rows = [json.loads(ln) for ln in CLAUDE.read_text().splitlines() if ln.strip()]
    users = [i for i, r in enumerate(rows) if r.get("type") == "user"]
    if where is not None:
        at = users[0] if where == "first" else users[-1]
        content = rows[at]["message"]["content"]
        if isinstance(content, str):
            rows[at]["message"]["content"] = f"{content} key={text}"
        else:
            content.append({"type": "text", "text": f"use the key {text}"})
    src = tmp_path / f"log-{where}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"shared-{where}.jsonl"
    assert main(["import", str(src), "-o", str(out)]) == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) >= 3 and all(is_shared(x) for x in lines)
    return lines


def _oracle(lines: list[bytes]) -> list[bytes]:
    """What ingest stored for each line before: ``redact_trace`` of its whole trace, the
    line as expanded when it found nothing, else the redacted trace's JSON."""
    out = []
    for _, raw in expand_lines(enumerate(lines, 1)):
        assert isinstance(raw, bytes)
        trace, found = redact_trace(Trace.model_validate_json(raw), raw)
        out.append(trace.to_json_bytes() if found else raw)
    return out


def _ingested(run: FileRun, lines: list[bytes], first: int = 0) -> list[bytes]:
    run.read_lines(first, lines)
    assert run.errors == []
    return [raw for _, raw in run.items]


@pytest.mark.parametrize("where", [None, "first", "last"])
def test_each_trace_is_what_redact_trace_gives(tmp_path: Path, where: str | None) -> None:
    lines = _session(tmp_path, where)
    want = _oracle(lines)
    got = _ingested(FileRun("f.jsonl", fast=True, redact=True), lines)
    assert got == want
    leaked = [k for k, raw in enumerate(got) if SECRET.encode() in raw]
    assert leaked == []
    if where is not None:
        redacted = [k for k, raw in enumerate(got) if b"[REDACTED:" in raw]
        assert redacted == (list(range(len(lines))) if where == "first" else [len(lines) - 1])


def test_the_check_reads_what_a_line_brings_not_the_whole_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word of a rule's guard in the first message, repeated by every call: each line is
    read by the check (and its pieces by the rules), never a whole trace, and nothing
    is walked; the traces are stored as they were."""
    lines = _session(tmp_path, "first", GUARD)
    whole = [raw for _, raw in expand_lines(enumerate(lines, 1))]
    assert all(redact.may_hold_secret(raw) for raw in whole)  # the old path walked each
    read: list[int] = []
    real = workers.may_hold_secret

    def spy(raw: bytes | str) -> bool:
        read.append(len(raw))
        return real(raw)

    monkeypatch.setattr(workers, "may_hold_secret", spy)
    run = FileRun("f.jsonl", fast=True, redact=True)
    walks: list[Trace] = []
    monkeypatch.setattr(run.redactor, "trace", lambda t: walks.append(t) or (t, {}))
    got = _ingested(run, lines)
    assert got == whole and walks == []
    # the lines as one group (joined by newlines), then each line, then its pieces
    group = sum(len(x) + 1 for x in lines) - 1
    assert read[0] == group and len(lines) < workers.SCAN_LINES
    longest = max(map(len, lines))
    assert max(read[1:]) <= longest < max(map(len, whole))


def test_a_secret_in_a_part_makes_every_later_trace_read_whole(tmp_path: Path) -> None:
    lines = _session(tmp_path, "first")
    run = FileRun("f.jsonl", fast=True, redact=True)
    assert run.shared_clean(lines[0], None) is False
    run.read_lines(0, lines[:1])
    assert run.parts.cleared is False
    # a later line that brings nothing with a secret is still redacted whole
    assert run.shared_clean(lines[-1], True) is False


def test_parts_learned_unread_are_not_cleared(tmp_path: Path) -> None:
    """A resumed read learns the parts of the lines before its offset without the check:
    a later line naming one is redacted whole (its secret is not stored)."""
    lines = _session(tmp_path, "first")
    table = PartTable()
    table.learn(lines[0], "line 1")
    assert table.cleared is False
    run = FileRun("f.jsonl", fast=True, redact=True, parts=table)
    got = _ingested(run, lines[1:], 1)
    assert got == _oracle(lines)[1:]
    assert all(SECRET.encode() not in raw for raw in got)


def test_parts_a_run_without_redaction_defined_are_not_cleared(tmp_path: Path) -> None:
    lines = _session(tmp_path, "first")
    plain = FileRun("f.jsonl", fast=True, redact=False)
    plain.read_lines(0, lines[:1])
    assert plain.parts.cleared is False
    run = FileRun("f.jsonl", fast=True, redact=True, parts=plain.parts)
    got = _ingested(run, lines[1:], 1)
    assert all(SECRET.encode() not in raw for raw in got)


def test_a_refused_line_that_defined_a_secret_part_leaves_it_uncleared(tmp_path: Path) -> None:
    """A line whose parts are defined and whose trace is then refused (it names a part no
    line defined): its secret part, named by the next line, is still redacted there."""
    lines = _session(tmp_path, "first")
    env: dict[str, Any] = json.loads(lines[0])
    history = env["trace"]["input"]["history"]
    assert isinstance(history[0], str)
    history.append("0000000000000000")  # no line defines it
    bad = json.dumps(env).encode()
    assert SECRET.encode() in bad
    table = PartTable()
    with pytest.raises(InputError, match="not defined"):
        table.expand(bad, "line 1", cleared=False)
    run = FileRun("f.jsonl", fast=True, redact=True)
    run.read_lines(0, [bad, *lines[1:]])
    assert [ln for _, ln, _ in run.errors] == [1]
    assert run.parts.cleared is False
    assert all(SECRET.encode() not in raw for _, raw in run.items)
    assert [raw for _, raw in run.items] == _oracle(lines)[1:]


def test_line_pieces_hold_every_string_of_the_line(tmp_path: Path) -> None:
    lines = _session(tmp_path, "first")
    pieces = line_pieces(lines[0])
    assert any(SECRET.encode() in p for p in pieces)
    env = json.loads(lines[0])
    assert len(pieces) == 1 + len(env.get("parts", {})) + len(env.get("made", {}))
    assert json.loads(pieces[0]) == env["trace"]
    assert line_pieces(b'{"not": "shared"}') == [b'{"not": "shared"}']


def test_ingest_into_a_store_keeps_no_secret_a_session_repeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ctxscope ingest`` with redaction on, of the shared session with a secret in its
    first message: every stored trace is redact_trace's, with its counts."""
    lines = _session(tmp_path, "first")
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    db = tmp_path / "s.duckdb"
    monkeypatch.setenv("CTXSCOPE_REDACT_ON_INGEST", "1")
    assert main(["ingest", str(src), "--db", str(db), "--defer-diagnostics"]) == 0
    want = {Trace.model_validate_json(raw).trace_id: raw for raw in _oracle(lines)}
    with TraceStore(db, read_only=True) as store:
        got = dict(store.traces_json(list(want)))
    assert set(got) == set(want)
    for tid, raw in want.items():
        stored = Trace.model_validate_json(got[tid])
        assert stored == Trace.model_validate_json(raw)
        assert SECRET not in got[tid].decode() and stored.redactions


def test_a_move_redacts_each_trace_as_redact_trace_does(tmp_path: Path) -> None:
    """``migrate --move``'s copy (``move_traces``, any engine to any) of a file that kept
    the session's secret: each moved trace is redact_trace's."""
    from ctxcore.store.moving import move_traces

    lines = _session(tmp_path, "first")
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    kept, moved = tmp_path / "kept.duckdb", tmp_path / "moved.duckdb"
    assert main(["ingest", str(src), "--db", str(kept), "--defer-diagnostics"]) == 0
    with TraceStore(kept, read_only=True) as source, TraceStore(moved) as target:
        out = move_traces(source, target, origin=str(kept), redact=True)
        assert out.added == len(lines) and not out.conflicts and not out.refused
    want = {Trace.model_validate_json(raw).trace_id: raw for raw in _oracle(lines)}
    with TraceStore(moved, read_only=True) as store:
        got = dict(store.traces_json(list(want)))
    assert {t: Trace.model_validate_json(r) for t, r in got.items()} == {
        t: Trace.model_validate_json(r) for t, r in want.items()
    }
    assert all(SECRET not in r.decode() for r in got.values())


@pytest.mark.parametrize("redact", [False, True])
def test_a_part_the_fast_decoder_must_not_take_sends_later_traces_to_pydantic(
    tmp_path: Path, redact: bool
) -> None:
    """The fast decoder's patterns are read on what a line brings too: a part with a
    surrogate escape sends every trace naming it to pydantic, including later lines whose
    own bytes hold no escape (the table is no longer ``plain``)."""
    lines = _session(tmp_path, None)
    control = FileRun("f.jsonl", fast=True, redact=redact)
    control.read_lines(0, lines)
    assert not any(isinstance(t, Trace) for t, _ in control.items)
    first = lines[0]
    at = first.index(b"Please analyze")
    lines[0] = first[:at] + b"Please \\ud83d\\ude00 analyze" + first[at + len(b"Please analyze") :]
    assert all(b"\\ud83d" not in x for x in lines[1:])
    run = FileRun("f.jsonl", fast=True, redact=redact)
    got = _ingested(run, lines)
    assert run.parts.plain is False
    named = [k for k, raw in enumerate(got) if "\U0001f600".encode() in raw or b"\\ud83d" in raw]
    assert len(named) == len(lines)  # every call repeats the first message
    assert all(isinstance(t, Trace) for t, _ in run.items)
    assert got == [raw for _, raw in expand_lines(enumerate(lines, 1))]


def test_a_part_nested_too_deep_is_its_lines_error_as_without_redaction(tmp_path: Path) -> None:
    """A hostile part nested past the decoder's stack, holding a word the check reads on:
    the line's error is the one the table gives without redaction (what and where), not
    an unexpected exception."""
    lines = _session(tmp_path, None)
    deep = b"[" * 20000 + b'"password=hunter2"' + b"]" * 20000
    at = lines[0].index(b'{"role":"user"')
    bad = lines[0][: at + 1] + b'"zz":' + deep + b"," + lines[0][at + 1 :]
    errors = []
    for redacting in (False, True):
        run = FileRun("f.jsonl", fast=True, redact=redacting)
        run.read_lines(0, [bad])
        errors.append(run.errors)
    assert errors[0] == errors[1] and len(errors[0]) == 1
    assert "nested too deeply" in errors[1][0][2] and "bug" not in errors[1][0][2]


def test_a_move_writes_at_most_move_bytes_of_json_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long session's calls each hold their whole context: the move prepares them a few
    at a time (by their JSON's size, known before they are unpacked), every one moved, the
    same as stored."""
    from ctxcore.store import moving

    lines = _session(tmp_path, None)
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    kept, moved = tmp_path / "kept.duckdb", tmp_path / "moved.duckdb"
    assert main(["ingest", str(src), "--db", str(kept), "--defer-diagnostics"]) == 0
    whole = [raw for _, raw in expand_lines(enumerate(lines, 1))]
    monkeypatch.setattr(moving, "MOVE_BYTES", 2 * max(map(len, whole)))
    sizes: list[int] = []
    real = moving.prepare

    def counted(items: Any, sources: Any) -> Any:
        sizes.append(sum(len(raw) for _, raw in items))
        return real(items, sources)

    monkeypatch.setattr(moving, "prepare", counted)
    with TraceStore(kept, read_only=True) as source, TraceStore(moved) as target:
        out = moving.move_traces(source, target, origin=str(kept), redact=False)
    assert out.added == len(lines) and len(sizes) > 2
    assert max(sizes) <= moving.MOVE_BYTES and sum(sizes) == sum(map(len, whole))
    with TraceStore(kept, read_only=True) as a, TraceStore(moved, read_only=True) as b:
        ids = [Trace.model_validate_json(raw).trace_id for raw in whole]
        assert b.traces_json(ids) == a.traces_json(ids)
