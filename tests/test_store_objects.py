"""Stored traces read as objects that share what they share (``ctxcore/store/objects.py``):
the same traces as a whole read gives, on both engines, each part made once and handed to
every trace that names it, within a bounded memory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.formats.load import iter_traces
from ctxcore.formats.redact import redact_trace
from ctxcore.formats.redact_memo import Redactor
from ctxcore.models import Trace
from ctxcore.store import objects
from ctxcore.store.engines import open_store
from ctxcore.store.objects import SharedTraces
from ctxcore.store.protocol import Store

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "ctxcore" / "data" / "demo" / "toolchat-ctxscope.jsonl"


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Claude Code session that is never compacted (``bench_import``'s generator)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import build

    path = tmp_path_factory.mktemp("objects") / "session.jsonl"
    build(path, 300, 0.5, 10**9)
    return path


def _ids(store: Store) -> list[str]:
    rows = store.list_traces(sort="turn", descending=False, limit=10_000)
    return [r.trace_id for r in rows.rows]


def _check(store: Store, reader: SharedTraces) -> list[Trace]:
    ids = _ids(store)
    got = [reader.trace(p) for p in store.traces_packed(ids)]
    want = [Trace.model_validate_json(raw) for _, raw in store.traces_json(ids)]
    assert got == want
    assert [t.to_json() for t in got] == [t.to_json() for t in want]
    return got


def _shared_items(traces: list[Trace]) -> int:
    """How many history items a trace holds as the very object the trace before held."""
    n = 0
    for before, now in zip(traces, traces[1:], strict=False):
        n += sum(a is b for a, b in zip(before.input.history, now.input.history, strict=False))
    return n


def test_a_session_reads_as_it_does_whole_with_its_items_shared(log: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert main(["import", str(log), "--db", str(db)]) == 0
    with open_store(db, read_only=True) as store:
        got = _check(store, SharedTraces())
    assert len(got) > 50
    assert _shared_items(got) > 10 * len(got)  # every call's context, made once
    last, before = got[-1], got[-2]
    assert last.input.history[0] is before.input.history[0]
    assert last.result is not None and before.result is not None
    assert last.result.decisions[0] is before.result.decisions[0]


def test_its_memory_starts_over_past_its_bound_and_reads_the_same(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.duckdb"
    assert main(["import", str(log), "--db", str(db)]) == 0
    reader = SharedTraces(max_bytes=50_000)
    with open_store(db, read_only=True) as store:
        got = _check(store, reader)
    assert reader.kept_bytes <= 50_000 + max(len(t.to_json()) for t in got)
    assert _shared_items(got) < _shared_items(_again(db))


def _again(db: Path) -> list[Trace]:
    with open_store(db, read_only=True) as store:
        ids = _ids(store)
        reader = SharedTraces()
        return [reader.trace(p) for p in store.traces_packed(ids)]


def test_traces_stored_whole_and_builders_traces_read_too(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    traces = list(iter_traces(DEMO))
    with open_store(db) as store:
        store.add_traces(traces)
        got = _check(store, SharedTraces())
    assert sorted(t.trace_id for t in got) == sorted(t.trace_id for t in traces)


def test_a_team_store_reads_the_same(log: Path, pg_server: Any) -> None:
    url = pg_server.new_database()
    assert main(["migrate", "--db", url]) == 0
    traces = list(iter_traces(log))
    with open_store(url) as store:
        store.add_traces(traces)
    with open_store(url, read_only=True) as store:
        got = _check(store, SharedTraces())
    assert len(got) == len(traces)
    assert _shared_items(got) > 10 * len(got)


def test_the_item_models_are_the_shared_lists_models() -> None:
    from ctxcore.sharing import LIST_FIELDS

    fields = {f for fs in LIST_FIELDS.values() for f in fs}
    assert set(objects.ITEM_MODELS) == fields


#: documented example secrets (AWS's, and GitHub's token format)
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _with_secrets(log: Path, out: Path) -> None:
    """The log with secrets in a tool's output (an item of many calls), in a user's prompt
    (an item, the query and the prompt's text) and in the log's working folder (each call's
    metadata, outside every part)."""
    lines = log.read_text(encoding="utf-8").splitlines()
    result = next(i for i, ln in enumerate(lines) if '"tool_result"' in ln and i > 20)
    prompt = next(
        i
        for i, ln in enumerate(lines)
        if i > len(lines) // 2 and '"type": "user"' in ln and '"tool_result"' not in ln
    )
    for k in range(len(lines)):
        obj = json.loads(lines[k])
        if k == result:
            for block in obj["message"]["content"]:
                if block.get("type") == "tool_result":
                    block["content"] = f"AWS_SECRET_ACCESS_KEY={AWS}"
        if k == prompt:
            obj["message"]["content"] = f"use GITHUB_TOKEN={GITHUB} to push"
        if k > len(lines) * 3 // 4 and "cwd" in obj:
            obj["cwd"] = f"/work/{GITHUB}"
        lines[k] = json.dumps(obj)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_read_redacted_it_gives_what_redact_trace_gives(log: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.jsonl"
    _with_secrets(log, secret)
    db = tmp_path / "s.duckdb"
    assert main(["import", str(secret), "--db", str(db), "--no-redact"]) == 0
    reader = SharedTraces(redactor=Redactor())
    found: dict[str, int] = {}
    with open_store(db, read_only=True) as store:
        ids = _ids(store)
        for packed in store.traces_packed(ids):
            got, counts = reader.read(packed)
            want, want_counts = redact_trace(Trace.model_validate_json(packed.json()))
            assert got == want, packed.trace_id
            assert got.to_json() == want.to_json() and counts == want_counts
            for k, v in counts.items():
                found[k] = found.get(k, 0) + v
    assert set(found) >= {"aws_secret_access_key", "github_token"}
    late = reader.trace(packed)
    assert AWS not in late.to_json() and GITHUB not in late.to_json()
    assert late.redactions  # its record says what was masked
