"""Shared traces (docs/design.md, "The trace contract" → "Shared traces"): a trace line
names the parts an earlier line of its file carried. Every reader sees the same traces as
in the whole form, byte for byte; a cut file keeps the traces whose parts it holds; a
reference to a part not defined before is one error naming file, line and field."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ctxcore import sharing
from ctxcore.cli import main
from ctxcore.errors import InputError
from ctxcore.formats.load import iter_traces, load_file, write_jsonl
from ctxcore.models import Trace
from ctxcore.sharing import MARKER, PartTable, ShareWriter, grew, is_shared
from ctxcore.store import TraceStore
from ctxcore.store.ingest import PART_TABLES, ingest_paths

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"
SIDECHAIN = FIXTURES / "claude-code" / "ccviewer-task-sidechain-session.jsonl"
SECRET = "sk-ant-api03-" + "Q7m2Zr8Tx1Vb6Nc3Hd7Kp0aB4eG9jL5sW" * 3 + "AA"


def _sessions() -> list[Path]:
    """Every fixture file whose import is a session of several calls."""
    out = []
    for p in sorted(FIXTURES.glob("*/*")):
        if p.suffix == ".md" and p.name in ("SOURCES.md",):
            continue
        try:
            n = sum(1 for _ in iter_traces(p))
        except Exception:  # noqa: BLE001 - files no format reads alone (e.g. EXPECTED.json)
            continue
        if n > 1:
            out.append(p)
    return out


SESSIONS = _sessions()


def _whole_lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().split(b"\n") if ln]


def test_the_fixtures_hold_many_sessions() -> None:
    assert len(SESSIONS) >= 20
    assert {p.parent.name for p in SESSIONS} >= {"claude-code", "codex", "pi", "gemini-cli"}


@pytest.mark.parametrize("src", SESSIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_import_shared_and_whole_give_the_same_traces(src: Path, tmp_path: Path) -> None:
    shared, whole = tmp_path / "shared.jsonl", tmp_path / "whole.jsonl"
    assert main(["import", str(src), "-o", str(shared)]) == 0
    assert main(["import", str(src), "--whole", "-o", str(whole)]) == 0
    assert all(is_shared(ln) for ln in _whole_lines(shared))
    assert not any(is_shared(ln) for ln in _whole_lines(whole))
    a, b = load_file(shared), load_file(whole)
    assert [_timeless(t) for t in a] == [_timeless(t) for t in b]
    assert shared.stat().st_size <= whole.stat().st_size * 1.1 + 200  # ids cost little
    # byte for byte: each shared line of the same traces expands to its whole line
    traces = list(iter_traces(src))
    writer, table = ShareWriter(), PartTable()
    lines = [writer.line(t).encode() for t in traces]
    expanded = [table.expand(ln, f"line {n}") for n, ln in enumerate(lines, 1)]
    assert expanded == [t.to_json().encode() for t in traces]


def _timeless(t: Trace) -> Trace:
    """A trace less its timings, the one field a build does not repeat (two imports)."""
    if t.result is None:
        return t
    return t.model_copy(update={"result": t.result.model_copy(update={"timings": {}})})


def test_a_long_session_shares_most_of_its_context(tmp_path: Path) -> None:
    shared, whole = tmp_path / "shared.jsonl", tmp_path / "whole.jsonl"
    assert main(["import", str(SIDECHAIN), "-o", str(shared)]) == 0
    assert main(["import", str(SIDECHAIN), "--whole", "-o", str(whole)]) == 0
    assert shared.stat().st_size * 3 < whole.stat().st_size
    # an earlier call's messages are named, not repeated
    lines = _whole_lines(shared)
    last = json.loads(lines[-1])
    assert all(isinstance(m, str) for m in last["trace"]["input"]["history"][:-2])
    assert isinstance(last["trace"]["result"]["prompt"], list)


def _small_session(tmp_path: Path) -> tuple[Path, list[Trace], list[bytes]]:
    """A few calls of a real session, written shared: the file, its traces, its lines."""
    traces = load_file(CLAUDE)[:4]
    path = tmp_path / "small.jsonl"
    w = ShareWriter()
    data = "".join(w.line(t) for t in traces).encode()
    path.write_bytes(data)
    return path, traces, data.split(b"\n")[:-1]


def test_a_cut_file_keeps_every_trace_whose_parts_it_holds(tmp_path: Path) -> None:
    path, traces, lines = _small_session(tmp_path)
    data = path.read_bytes()
    ends = []
    pos = 0
    for ln in lines:
        pos += len(ln)
        ends.append(pos)  # where the line's JSON ends (its newline follows)
        pos += 1
    cut = tmp_path / "cut.jsonl"
    step = max(1, len(data) // 3000)
    offsets = sorted({*range(1, len(data) + 1, step), *ends, *(e + 1 for e in ends)})
    offsets = [k for k in offsets if k <= len(data)]
    for k in offsets:
        cut.write_bytes(data[:k])
        errors: list[str] = []
        got = load_file(cut, "trace", skipped=errors.append)
        whole = sum(1 for e in ends if e <= k)
        assert got == traces[:whole], k
        partial = k > (ends[whole - 1] + 1 if whole else 0)
        assert len(errors) == (1 if partial else 0), (k, errors)
        if partial:
            assert errors[0].startswith(f"{cut}:{whole + 1}:")


def test_a_part_defined_later_or_nowhere_is_one_error_naming_file_line_and_field(
    tmp_path: Path,
) -> None:
    _path, traces, lines = _small_session(tmp_path)
    # line 2 moved after line 3: line 3 (now 2) names parts line 2 (now 3) defines
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_bytes(b"\n".join([lines[0], lines[2], lines[1], lines[3]]) + b"\n")
    errors: list[str] = []
    got = load_file(swapped, "trace", skipped=errors.append)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{swapped}:2: field 'input.history[")
    assert "is not defined on this line or an earlier one of this file" in errors[0]
    # the rest is read: line 3 defines its own parts; line 4 names line 3's (now read)
    assert got == [traces[0], traces[1], traces[3]]
    # a part named and defined nowhere
    gone = tmp_path / "gone.jsonl"
    env = json.loads(lines[1])
    env["trace"]["result"]["prompt"] = ["0123456789abcdef"]
    gone.write_text(lines[0].decode() + "\n" + json.dumps(env) + "\n")
    errors.clear()
    assert load_file(gone, "trace", skipped=errors.append) == [traces[0]]
    assert errors == [
        f"{gone}:2: field 'result.prompt[0]': the part '0123456789abcdef' is not defined on "
        "this line or an earlier one of this file (a shared trace names only parts its file "
        "defined before it: the line that defines it is missing, cut off or later)"
    ]
    # the same line in `ctxscope check` and in ingest
    assert main(["check", str(gone)]) == 2
    with TraceStore(tmp_path / "g.duckdb") as s:
        c = ingest_paths(s, [gone])
        assert c.traces_added == 1
        [row] = c.error_rows
        assert row.line == 2 and "field 'result.prompt[0]'" in row.message


def test_a_part_redefined_with_other_content_is_refused(tmp_path: Path) -> None:
    _path, _traces, lines = _small_session(tmp_path)
    env = json.loads(lines[0])
    pid = next(iter(env["parts"]))
    env2 = json.loads(lines[1])
    env2["parts"][pid] = "other"
    with pytest.raises(InputError, match=f"parts.{pid}'.*other content"):
        t = PartTable()
        t.expand(lines[0])
        t.expand(json.dumps(env2).encode(), "x:2")


def test_a_secret_in_a_new_part_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [json.loads(ln) for ln in CLAUDE.read_text().splitlines() if ln.strip()]
    # the secret appears in a message of the session's last call only
    last = max(i for i, r in enumerate(rows) if r.get("type") == "user")
    content = rows[last]["message"]["content"]
    if isinstance(content, str):
        rows[last]["message"]["content"] = f"{content} key={SECRET}"
    else:
        content.append({"type": "text", "text": f"use the key {SECRET}"})
    src = tmp_path / "leak.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    monkeypatch.setenv("CTXSCOPE_REDACT_ON_INGEST", "1")
    assert main(["import", str(src), "-o", str(out)]) == 0
    text = out.read_text()
    assert SECRET not in text and "[REDACTED:" in text
    got = load_file(out)
    assert any(t.redactions for t in got)
    assert all(SECRET not in t.to_json() for t in got)
    # the earlier calls' parts are still named by the later ones
    assert isinstance(json.loads(text.splitlines()[-1])["trace"]["input"]["history"][0], str)


def _both(tmp_path: Path, src: Path) -> tuple[Path, Path]:
    """The traces of one import of ``src`` written shared and whole (``write_jsonl``, as
    ``ctxscope import -o`` writes them), in two folders under the same name."""
    traces = list(iter_traces(src))
    shared, whole = tmp_path / "a" / "t.jsonl", tmp_path / "b" / "t.jsonl"
    shared.parent.mkdir()
    whole.parent.mkdir()
    write_jsonl(traces, shared, shared=True)
    write_jsonl(traces, whole)
    return shared, whole


def _store_rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table of a store, less where rows came from (the two files' names differ)."""
    out: dict[str, list[tuple[object, ...]]] = {}
    with TraceStore(db, diagnose=False) as s:
        cur = s._cur()
        tables = [r[0] for r in cur.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for name in sorted(tables):
            cols = [
                r[0]
                for r in cur.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                    "ORDER BY column_index",
                    [name],
                ).fetchall()
            ]
            keep = [c for c in cols if c not in ("source_file", "ingested_at")]
            if name in ("file_offsets", "ingest_errors", "schema_migrations") or not keep:
                continue
            sel = ", ".join(f'"{c}"' for c in keep)
            out[name] = sorted(cur.execute(f'SELECT {sel} FROM "{name}"').fetchall(), key=repr)
    return out


def test_ingest_of_a_shared_file_stores_what_the_whole_file_stores(tmp_path: Path) -> None:
    shared, whole = _both(tmp_path, SIDECHAIN)
    for f, db in ((shared, "s.duckdb"), (whole, "w.duckdb")):
        with TraceStore(tmp_path / db) as s:
            c = ingest_paths(s, [f])
            assert c.traces_added == 20 and not c.error_rows
    rows = _store_rows(tmp_path / "s.duckdb")
    assert rows == _store_rows(tmp_path / "w.duckdb")
    assert sum(len(v) for v in rows.values()) > 100


def test_a_big_shared_file_is_read_in_order_not_split_among_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctxcore.store.ingest as ingest_mod

    shared, _ = _both(tmp_path, SIDECHAIN)
    traces = load_file(shared)
    monkeypatch.setattr(ingest_mod, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "CHUNK_BYTES", 20_000)
    monkeypatch.setattr(ingest_mod, "POOL_CHUNK_BYTES", 20_000)
    with TraceStore(tmp_path / "p.duckdb", diagnose=False) as s:
        c = ingest_paths(s, [shared], workers=2)
        assert c.traces_added == 20 and not c.error_rows
        assert [s.get_trace(t.trace_id) for t in traces] == traces


def test_ingest_resumed_without_its_table_reads_the_parts_before_the_offset(
    tmp_path: Path,
) -> None:
    path, traces, lines = _small_session(tmp_path)
    path.write_bytes(b"\n".join(lines[:2]) + b"\n")
    with TraceStore(tmp_path / "r.duckdb") as s:
        assert ingest_paths(s, [path]).traces_added == 2
        PART_TABLES.tables.clear()  # as after a restart: the table is gone
        with path.open("ab") as f:
            f.write(b"\n".join(lines[2:]) + b"\n")
        c = ingest_paths(s, [path])
        assert c.traces_added == 2 and not c.error_rows
        assert [s.get_trace(t.trace_id) for t in traces] == traces


def test_the_watcher_tails_a_shared_file_appended_in_pieces(tmp_path: Path) -> None:
    from ctxcore.store.watch import Watcher

    folder = tmp_path / "traces"
    folder.mkdir()
    traces = load_file(SIDECHAIN)
    writer = ShareWriter()
    lines = [writer.line(t).encode() for t in traces]
    data = b"".join(lines)
    assert data.count(MARKER) == len(traces)
    # a later line alone cannot be read: it names parts of the lines before it
    with pytest.raises(InputError, match="is not defined on this line"):
        PartTable().expand(lines[-1])
    store = TraceStore(folder / "ctxscope.duckdb")
    w = Watcher(store, folder, rescan_every=3600).start()
    try:
        f = folder / "tail.jsonl"
        # pieces that end mid-line: each tail reads the complete lines, the rest waits
        cuts = [0, len(data) // 5 + 17, len(data) // 2 + 3, 4 * len(data) // 5 - 11, len(data)]
        for a, b in zip(cuts, cuts[1:], strict=False):
            with f.open("ab") as fh:
                fh.write(data[a:b])
            complete = data[:b].count(b"\n")
            deadline = time.monotonic() + 20
            while store.count() < complete and time.monotonic() < deadline:
                time.sleep(0.05)
            assert store.count() == complete
        assert store.ingest_errors() == []
        assert [store.get_trace(t.trace_id) for t in traces] == traces
    finally:
        w.stop()
        store.close()


def test_check_reads_a_shared_file_as_the_whole_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared, whole = _both(tmp_path, CLAUDE)
    capsys.readouterr()
    rc_s = main(["check", str(shared), "--fail-on", "error"])
    out_s = capsys.readouterr().out.replace(str(shared), "F")
    rc_w = main(["check", str(whole), "--fail-on", "error"])
    out_w = capsys.readouterr().out.replace(str(whole), "F")
    assert rc_s == rc_w and out_s == out_w and "F:" in out_s


def test_export_writes_the_shared_form_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "none"))
    db = tmp_path / "e.duckdb"
    assert main(["import", str(SIDECHAIN), "--db", str(db)]) == 0
    session = load_file(SIDECHAIN)[0].session_id
    whole, shared = tmp_path / "snap.json", tmp_path / "shared.jsonl"
    assert main(["export", "--session", session, "--db", str(db), "-o", str(whole)]) == 0
    args = ["export", "--session", session, "--db", str(db), "--shared", "-o", str(shared)]
    assert main(args) == 0
    assert json.loads(whole.read_text())["format"] == "ctxscope.snapshot/1"
    assert all(is_shared(ln) for ln in _whole_lines(shared))
    assert load_file(shared) == load_file(whole)
    assert shared.stat().st_size * 3 < whole.stat().st_size
    bad = ["export", "--session", session, "--db", str(db), "--shared", "--format", "html"]
    assert main(bad) == 2


def test_a_resumed_file_without_shared_lines_is_not_read_again_for_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctxcore.sharing as sharing

    traces = load_file(CLAUDE)
    path = tmp_path / "whole.jsonl"
    write_jsonl(traces[:3], path)
    reads: list[str] = []
    real = sharing.iter_lines

    def counted(p: str | Path, *a: object) -> object:
        reads.append(str(p))
        return real(p)

    monkeypatch.setattr(sharing, "iter_lines", counted)
    with TraceStore(tmp_path / "n.duckdb") as s:
        assert ingest_paths(s, [path]).traces_added == 3
        PART_TABLES.tables.clear()
        with path.open("a", encoding="utf-8") as f:
            f.write("".join(t.to_json() + "\n" for t in traces[3:]))
        assert ingest_paths(s, [path]).traces_added == len(traces) - 3
        assert reads == []  # whole lines only: no part to learn, nothing read twice
        # a shared file resumed without its table is read up to the offset for its parts
        shared = tmp_path / "shared.jsonl"
        writer = ShareWriter()
        shared.write_text("".join(writer.line(t) for t in traces[:3]))
        assert ingest_paths(s, [shared]).traces_added == 0  # stored already
        PART_TABLES.tables.clear()
        with shared.open("a", encoding="utf-8") as f:
            f.write("".join(writer.line(t) for t in traces[3:]))
        c = ingest_paths(s, [shared])
        assert not c.error_rows and reads == [str(shared.resolve())]


def test_the_writer_holds_no_item_the_importer_let_go_of() -> None:
    import gc

    from ctxcore.sharing import MAX_SESSIONS

    writer = ShareWriter()
    traces = load_file(SIDECHAIN)
    first = [writer.line(t) for t in traces]
    expected = [t.to_json() for t in traces]
    held = len(writer.known)
    assert held > 50
    # later sessions push this one's lists and texts out; its items then live nowhere
    small = load_file(CLAUDE)[0]
    for i in range(MAX_SESSIONS):
        writer.line(small.model_copy(update={"session_id": f"other-{i}"}))
    assert len(writer.sessions) == MAX_SESSIONS
    assert traces[0].session_id not in writer.sessions
    assert not [k for k in writer.lists if k[0] == traces[0].session_id]
    del traces
    gc.collect()
    assert all(ref() is not None for ref, _ in writer.known.values())
    assert len(writer.known) < held / 2
    # what was written before still names its parts: the file reads back whole
    table = PartTable()
    assert [table.expand(ln.encode()).decode() for ln in first] == expected


def _tiny_session() -> list[Trace]:
    """Three real builds of a session whose history grows by a message a call."""
    from datetime import UTC, datetime

    from ctxcore.models import CapturedInput, Config, Message, Packet
    from ctxcore.pipeline import build_trace

    now = datetime(2026, 1, 1, tzinfo=UTC)
    said = [
        Message(role=("user", "assistant")[i % 2], content=f"message {i}: " + "word " * 30)
        for i in range(4)
    ]
    out = []
    for k in range(1, 4):
        inp = CapturedInput(
            query=f"question {k}",
            now=now,
            system_instructions="You are terse. " * 40,
            history=said[:k],
            packets=[Packet(id=f"file:{k}", kind="file", content="x = 1\n" * 20)],
        )
        out.append(build_trace(inp, Config(), trace_id=f"t{k}", session_id="s"))
    return out


@pytest.mark.slow  # 16,000 cuts (the sampled one above runs in the quick loop)
def test_a_file_cut_at_every_byte_keeps_the_lines_it_holds(tmp_path: Path) -> None:
    from ctxcore.formats.load import BadLine, iter_values

    traces = _tiny_session()
    writer = ShareWriter()
    lines = [writer.line(t).encode() for t in traces]
    data = b"".join(lines)
    with pytest.raises(InputError):  # the later lines name parts of the earlier ones
        PartTable().expand(lines[-1])
    whole = [json.loads(t.to_json()) for t in traces]
    ends = [sum(map(len, lines[: k + 1])) - 1 for k in range(len(lines))]  # each newline
    cut = tmp_path / "cut.jsonl"
    for k in range(1, len(data) + 1):
        cut.write_bytes(data[:k])
        _, values = iter_values(cut)
        got = [v for _, v in values]
        done = sum(1 for e in ends if e <= k)  # a line whose JSON is all there is whole
        assert [v for v in got if not isinstance(v, BadLine)] == whole[:done], k
        bad = [v for v in got if isinstance(v, BadLine)]
        assert len(bad) == (0 if k in (0, *ends, *(e + 1 for e in ends)) else 1), k
        if bad:
            assert bad[0].startswith(f"{cut}:{done + 1}: "), (k, bad)


def test_a_text_that_leaves_the_previous_one_part_way_names_the_pieces_they_share() -> None:
    """A prompt that starts with the previous call's is that text's pieces and one more; one
    that leaves it part-way (a compaction, a rewind) names the leading pieces it still
    starts with and adds the rest; each line reads back as the trace."""
    base = load_file(CLAUDE)[0]
    assert base.result is not None
    head, mid = "H" * 2000, "M" * 1500
    texts = [head, head + mid, head + mid + "tail 1 " * 200, head + "another way " * 200]
    traces = [
        base.model_copy(update={"result": base.result.model_copy(update={"prompt": text})})
        for text in texts
    ]
    writer = ShareWriter()
    lines = [writer.line(t) for t in traces]
    ids = [json.loads(ln)["trace"]["result"]["prompt"] for ln in lines]
    assert ids[1][:1] == ids[0] and len(ids[1]) == 2
    assert ids[2][:2] == ids[1] and len(ids[2]) == 3
    # the fourth leaves the third after its first piece: that piece, then a new one
    assert ids[3][:1] == ids[0] and len(ids[3]) == 2 and ids[3][1] not in ids[2]
    new_parts = json.loads(lines[3])["parts"]
    assert ids[3][1] in new_parts and ids[0][0] not in new_parts
    table = PartTable()
    assert [table.expand(ln.encode()).decode() for ln in lines] == [t.to_json() for t in traces]


def test_a_text_said_to_grow_from_the_previous_one_is_written_as_one_compared() -> None:
    """``sharing.grew``: a text said to be made from the previous one is written as when the
    writer compares them, taken once; a word about another head is not trusted."""
    base = load_file(CLAUDE)[0]
    assert base.result is not None
    head = "H" * 2000
    grown = "\n\n".join((head, "new " * 300))
    other = "X" * 2500

    def lines(said: bool, about: str) -> list[str]:
        first = "".join(["H"] * 2000)  # equal to head, not the same object
        texts = [first, grown if about == "grown" else other]
        if said:
            grew(texts[1], first if about == "grown" else head)
        writer = ShareWriter()
        out = [
            writer.line(
                base.model_copy(update={"result": base.result.model_copy(update={"prompt": t})})
            )
            for t in texts
        ]
        assert id(texts[1]) not in sharing._GREW  # taken (or, when not its head, let go)
        return out

    for about in ("grown", "other"):
        assert lines(True, about) == lines(False, about)
    ids = [json.loads(ln)["trace"]["result"]["prompt"] for ln in lines(True, "grown")]
    assert ids[1][:1] == ids[0] and len(ids[1]) == 2


def test_a_shared_line_nested_past_the_parser_is_its_own_error(tmp_path: Path) -> None:
    """A shared line whose parts nest past the decoder's stack is that line's one-line error
    (not a "bug in ctxscope"); every other trace of the file is stored."""
    path, traces, lines = _small_session(tmp_path)
    bomb = b'{"share":"ctxscope.share/1","parts":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    path.write_bytes(b"".join(ln + b"\n" for ln in [*lines, bomb]))
    with pytest.raises(InputError, match=r"line 9: JSON nested too deeply"):
        PartTable().expand(bomb, "line 9")
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as store:
        counts = ingest_paths(store, [path])
        assert store.count() == len(traces)
    [error] = counts.error_rows
    assert error.line == len(lines) + 1 and "nested too deeply" in error.message
    assert "bug" not in error.message


def test_a_part_is_named_by_the_xxh3_of_its_json_bytes_whoever_writes_it() -> None:
    """design.md: a part's id is XXH3-64 of its JSON bytes as the line holds them (16 hex
    digits), so two writers name the same content alike."""
    import msgspec
    import xxhash

    traces = list(iter_traces(SIDECHAIN))
    one = [ShareWriter().line_bytes(t) for t in traces[:1]]
    both = ShareWriter()
    lines = [both.line_bytes(t) for t in traces]
    assert lines[0] == one[0]  # a second writer writes the first line alike
    checked = 0
    for line in lines:
        parts = msgspec.json.decode(line, type=dict[str, msgspec.Raw])["parts"]
        for pid, raw in msgspec.json.decode(parts, type=dict[str, msgspec.Raw]).items():
            assert len(pid) == 16 and pid == xxhash.xxh3_64_hexdigest(bytes(raw))
            checked += 1
    assert checked > 50
