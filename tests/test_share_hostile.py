"""Shared trace lines (docs/design.md, "Shared traces") written by hand, as an attacker or a
broken tool would: each bad line is refused on its own with one line naming the file, the
line, the field and why, every other line of the file is read, a line never costs more than
the whole trace it stands for, and a store (DuckDB, and PostgreSQL through
``tests/pg_cluster.py``) holds exactly what it holds without the bad lines. Real parts: a
real session log's import, ``ctxscope check``/``ingest``/``export``, real stores."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ctxcore import settings
from ctxcore.cli import main
from ctxcore.errors import InputError
from ctxcore.formats.load import load_file
from ctxcore.loading import holds_shared
from ctxcore.models import Trace
from ctxcore.settings import MAX_LINE_BYTES
from ctxcore.sharing import SHARE_SCHEMA, PartTable, PartTables, ShareWriter
from ctxcore.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = ROOT / "tests" / "fixtures" / "imports" / "claude-code" / "ccviewer-init-session.jsonl"
Env = dict[str, Any]


@pytest.fixture(scope="module")
def session() -> tuple[list[Trace], list[bytes]]:
    """Four calls of a real Claude Code session and their shared lines, as import -o writes."""
    traces = load_file(CLAUDE)[:4]
    w = ShareWriter()
    return traces, [w.line_bytes(t).rstrip(b"\n") for t in traces]


def _env(line: bytes) -> Env:
    return dict(json.loads(line))


def _line(env: Env) -> bytes:
    return json.dumps(env, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _read(path: Path) -> tuple[list[Trace], list[str]]:
    errors: list[str] = []
    return load_file(path, "trace", skipped=errors.append), errors


def _write(path: Path, lines: list[bytes], end: bytes = b"\n") -> Path:
    path.write_bytes(b"".join(ln + end for ln in lines))
    return path


def _with_extra(tmp_path: Path, lines: list[bytes], bad: bytes, at: int = 2) -> Path:
    """The session's lines with ``bad`` as line ``at`` (1-based): a line no other names."""
    return _write(tmp_path / "bad.jsonl", [*lines[: at - 1], bad, *lines[at - 1 :]])


# --------------------------------------------------------------------------- one bad line


def _parts(value: Any) -> Callable[[Env], None]:
    def edit(env: Env) -> None:
        env["parts"] = value

    return edit


def _no_trace(env: Env) -> None:
    del env["trace"]


def _extra_key(env: Env) -> None:
    env["extra"] = 1


def _share_number(env: Env) -> None:
    env["share"] = 1


def _trace_list(env: Env) -> None:
    env["trace"] = [env["trace"]]


def _prompt_with_number(env: Env) -> None:
    env["trace"]["result"]["prompt"] = [env["trace"]["result"]["prompt"][0], 7]


ENVELOPES = [
    (_parts([1, 2]), "field 'parts': expected an object, not an array"),
    (_parts("x"), "field 'parts': expected an object, not a string"),
    (_parts(5), "field 'parts': expected an object, not a number"),
    (_parts(None), "field 'parts': expected an object, not a null"),
    (_share_number, "field 'share': expected a string, not a number"),
    (_no_trace, "field 'trace': missing"),
    (_extra_key, "field 'extra': unknown"),
    (_trace_list, "field 'trace': a trace must be a JSON object"),
    (
        _prompt_with_number,
        "field 'result.prompt[1]': a shared text is a list of part ids (strings), not a number",
    ),
]


IDS = ["parts-array", "parts-string", "parts-number", "parts-null", "share-number"]
IDS += ["no-trace", "extra-key", "trace-list", "prompt-id-number"]


@pytest.mark.parametrize("edit,said", ENVELOPES, ids=IDS)
def test_a_line_that_is_no_shared_line_is_its_own_error_naming_the_field(
    edit: Callable[[Env], None],
    said: str,
    session: tuple[list[Trace], list[bytes]],
    tmp_path: Path,
) -> None:
    traces, lines = session
    env = _env(lines[1])
    env["parts"] = {}  # (defined by the line before, as it wrote them)
    env.pop("made", None)
    edit(env)
    path = _with_extra(tmp_path, lines, _line(env), at=3)
    got, errors = _read(path)
    assert got == traces
    assert len(errors) == 1 and errors[0].startswith(f"{path}:3: {said}"), errors


def test_a_part_that_is_no_item_is_refused_by_the_traces_own_check(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    """Parts do not nest: a part holding its own id is a string like any other, and a
    history item that is a number, or a part that is no message, is the trace's error."""
    traces, lines = session
    env = _env(lines[0])
    env["parts"] = {"self": "self"}
    env["trace"]["input"]["history"] = ["self", 3]
    path = _with_extra(tmp_path, lines, _line(env))
    got, errors = _read(path)
    assert got == traces
    [error] = errors
    assert error.startswith(f"{path}:2: ") and "input.history[0]" in error, error


def test_ids_are_any_strings_not_hex_or_a_megabyte_long(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    """ctxscope names a part by a hash, but a part's id is any string: one renamed to an id
    that is not hex, or is 1 MB long, reads to the same trace."""
    traces, lines = session
    env = _env(lines[0])
    names = iter(['not hex: ü " \\', "x" * 1_000_000, "", "0"])
    rename = {pid: next(names, pid) for pid in env["parts"]}
    env["parts"] = {rename[pid]: v for pid, v in env["parts"].items()}
    text = json.dumps([env["trace"], env.get("made", {})])  # made parts name parts too
    for old, new in rename.items():
        text = text.replace(json.dumps(old), json.dumps(new))
    env["trace"], env["made"] = json.loads(text)
    got, errors = _read(_write(tmp_path / "ids.jsonl", [_line(env)]))
    assert errors == [] and got == traces[:1]


def test_a_part_defined_again_with_other_bytes_is_refused_and_the_first_stands(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    traces, lines = session
    env = _env(lines[0])
    pid = next(iter(env["parts"]))
    # a new part first, then the contradiction: the line defines neither
    env["parts"] = {"new": "new", pid: {"role": "user", "content": "other"}}
    naming = _env(lines[0])
    naming["parts"] = {}
    naming["trace"]["result"]["prompt"] = ["new"]
    path = _with_extra(tmp_path, [*lines, _line(naming)], _line(env))
    got, errors = _read(path)
    assert got == traces
    assert errors == [
        f"{path}:2: field 'parts.{pid}': the part {pid!r} was defined on an earlier line "
        "with other content; a part's id names one content",
        f"{path}:6: field 'result.prompt[0]': the part 'new' is not defined on this line or an "
        "earlier one of this file (a shared trace names only parts its file defined before "
        "it: the line that defines it is missing, cut off or later)",
    ]
    # the same bytes again (two files of one import concatenated) are no redefinition
    twice = _write(tmp_path / "twice.jsonl", lines + lines)
    assert _read(twice) == (traces + traces, [])
    # an id given twice in one line is read as a JSON object's key is: the last
    one = _env(lines[0])
    one["parts"]["dup"] = "first"
    one["trace"]["input"]["query"] = ["dup"]
    line = _line(one).replace(b'"dup": "first"', b'"dup": "first", "dup": "last"')
    [got], errors = _read(_write(tmp_path / "dup.jsonl", [line]))
    assert errors == [] and got.input.query == "last"


def test_a_line_naming_one_big_part_again_and_again_is_refused_unmade(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    """A 1 MB line that names a 1 MB part 200 times stands for a 200 MB trace: refused as
    a whole line over MAX_LINE_BYTES would be, before it is made, naming the field."""
    traces, lines = session
    env = _env(lines[0])
    env["parts"] = {"big": "x" * 1_000_000, "msg": {"role": "user", "content": "y" * 1_000_000}}
    for field, key in (("result.prompt", "big"), ("input.history", "msg")):
        bomb = json.loads(json.dumps(env))
        name, sub = field.split(".")
        bomb["trace"][name][sub] = [key] * 200
        line = _line(bomb)
        table = PartTable()
        table.expand(lines[0])
        with pytest.raises(InputError) as e:
            table.expand(line, "line 2")
        assert str(e.value) == (
            f"line 2: field '{field}': the whole trace would be over {MAX_LINE_BYTES:,} bytes, "
            "the limit for one trace line (the parts it names, with what it holds itself)"
        )
        path = _with_extra(tmp_path, lines, line)
        got, errors = _read(path)
        assert got == traces and len(errors) == 1 and "the whole trace would be over" in errors[0]


def test_millions_of_tiny_parts_are_read_and_held_at_their_size(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of 300,000 parts of one byte reads; the table counts what they take in
    memory (ids and its own slots), so the tables ingest keeps between runs let it go."""
    traces, lines = session
    n = 300_000
    env = _env(lines[0])
    tiny = b",".join(b'"%x":0' % i for i in range(n))
    line = _line(env).replace(b'"parts": {', b'"parts": {' + tiny + b",", 1)
    path = _write(tmp_path / "tiny.jsonl", [line, *lines[1:]])
    got, errors = _read(path)
    assert errors == [] and got == traces
    table = PartTable()
    table.expand(line)
    assert len(table.parts) > n and table.size > n * 100
    monkeypatch.setattr(PartTables, "MAX_HELD", 20 * 1024 * 1024)
    held = PartTables()
    held.keep(str(path), 1, len(line) + 1, table)
    assert held.tables == {}


def test_a_files_parts_are_held_up_to_a_limit_and_a_line_past_it_is_its_error(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any later line may name any part, so a file's parts are all held while it is read:
    up to MAX_SHARED_PARTS_BYTES. A line whose parts would pass it is that line's error
    (its parts not kept); a line naming only parts held is still read."""
    traces, lines = session
    first = PartTable()
    first.expand(lines[0])
    monkeypatch.setattr(settings, "MAX_SHARED_PARTS_BYTES", first.size + 10)
    path = _write(tmp_path / "big.jsonl", [lines[0], lines[1], lines[0]])
    got, errors = _read(path)
    assert got == [traces[0], traces[0]]
    [error] = errors
    assert error.startswith(f"{path}:2: field 'parts': ") and "MAX_SHARED_PARTS_BYTES" in error
    table = PartTable()
    table.expand(lines[0])
    with pytest.raises(InputError, match="MAX_SHARED_PARTS_BYTES"):
        table.expand(lines[1], "big.jsonl:2")
    assert table.size == first.size and table.parts == first.parts


def test_nesting_past_the_parser_in_a_trace_or_an_item_is_that_lines_error(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    traces, lines = session
    deep = "[" * 100_000 + "]" * 100_000
    for where in ("metadata", "item"):
        text = lines[0].decode()
        if where == "metadata":
            text = text.replace('"metadata":{', '"metadata":{"deep":' + deep + ",", 1)
        else:
            text = text.replace('"history":[', '"history":[' + deep + ",", 1)
        path = _with_extra(tmp_path, lines, text.encode())
        got, errors = _read(path)
        assert got == traces
        assert len(errors) == 1 and errors[0].startswith(f"{path}:2: JSON nested too deeply")


def test_nul_reads_back_and_a_lone_surrogate_is_named_as_one(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    traces, lines = session
    env = _env(lines[0])
    env["parts"]["nul"] = "a\x00b" * 200
    env["trace"]["input"]["query"] = ["nul"]
    path = _write(tmp_path / "nul.jsonl", [json.dumps(env).encode()])
    got, errors = _read(path)
    assert errors == [] and got[0].input.query == "a\x00b" * 200
    for lone in ("a\ud800b", "ab\udc00"):
        env = _env(lines[0])
        env["parts"]["lone"] = lone
        env["trace"]["input"]["query"] = ["lone"]
        path = _with_extra(tmp_path, lines, json.dumps(env).encode())  # \ud800 as written
        got, errors = _read(path)
        assert got == traces and len(errors) == 1, errors
        assert errors[0].startswith(f"{path}:2: malformed JSON (byte ")
        assert "(a lone surrogate), which is no character a text can hold" in errors[0]


# --------------------------------------------------------------------------- whole files


def test_a_bom_and_crlf_line_ends_read_as_the_plain_file(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, lines = session
    plain = _write(tmp_path / "plain.jsonl", lines)
    windows = _write(tmp_path / "windows.jsonl", [b"\xef\xbb\xbf" + lines[0], *lines[1:]], b"\r\n")
    assert _read(windows) == (traces, [])
    capsys.readouterr()
    outs = []
    for f in (plain, windows):
        assert main(["check", str(f)]) == 0
        outs.append(capsys.readouterr().out.replace(str(f), "F"))
        with TraceStore(tmp_path / f"{f.stem}.duckdb") as s:
            from ctxcore.store.ingest import ingest_paths

            c = ingest_paths(s, [f])
            assert c.traces_added == len(traces) and not c.error_rows
            assert [s.get_trace(t.trace_id) for t in traces] == traces
    assert outs[0] == outs[1]


def _ten_bad(lines: list[bytes]) -> list[bytes]:
    """Ten lines each refused for its own reason; none defines a part another line names."""
    first = _env(lines[0])
    pid = next(iter(first["parts"]))
    later = _env(lines[1])
    later_part = next(p for p in later["parts"] if p not in first["parts"])
    out = []
    for edit, _ in ENVELOPES[:6]:
        env = _env(lines[0])
        edit(env)
        out.append(_line(env))
    redefined = _env(lines[0])
    redefined["parts"] = {pid: "other", "marker": "REFUSED-LINE-MARKER"}
    out.append(_line(redefined))
    early = _env(lines[0])
    early["parts"] = {"marker2": "REFUSED-LINE-MARKER"}
    early["trace"]["input"]["history"] = ["marker2", later_part]  # defined on a later line
    out.append(_line(early))
    lone = _env(lines[0])
    lone["parts"] = {"marker3": "REFUSED-LINE-MARKER \ud800"}
    out.append(json.dumps(lone).encode())
    out.append(lines[0][: len(lines[0]) // 2])  # cut
    return out


def test_a_valid_line_after_ten_bad_ones_is_read(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    traces, lines = session
    path = _write(tmp_path / "ten.jsonl", [lines[0], *_ten_bad(lines), *lines[1:]])
    got, errors = _read(path)
    assert got == traces
    assert [e.split(": ")[0] for e in errors] == [f"{path}:{n}" for n in range(2, 12)]
    assert all("field '" in e or "JSON" in e for e in errors), errors


def _store_rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table of a DuckDB store, less where rows came from and the errors."""
    out: dict[str, list[tuple[object, ...]]] = {}
    with TraceStore(db, diagnose=False) as s:
        cur = s._cur()
        for (name,) in cur.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            cols = [
                c
                for (c,) in cur.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                    "ORDER BY column_index",
                    [name],
                ).fetchall()
                if c not in ("source_file", "ingested_at")
            ]
            if name in ("file_offsets", "ingest_errors", "schema_migrations") or not cols:
                continue
            sel = ", ".join(f'"{c}"' for c in cols)
            out[name] = sorted(cur.execute(f'SELECT {sel} FROM "{name}"').fetchall(), key=repr)
    return out


def test_a_store_holds_nothing_of_a_refused_line_duckdb(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, lines = session
    (tmp_path / "bad").mkdir()
    (tmp_path / "clean").mkdir()  # one name in both: the rows do not differ by it
    bad = _write(tmp_path / "bad" / "t.jsonl", [lines[0], *_ten_bad(lines), *lines[1:]])
    clean = _write(tmp_path / "clean" / "t.jsonl", lines)
    assert main(["ingest", str(bad), "--db", str(tmp_path / "bad.duckdb")]) == 1
    out = capsys.readouterr().out
    assert f"ingested {len(traces)} new traces" in out, out
    for n in range(2, 12):
        assert f"{bad}:{n}: " in out, (n, out)
    assert main(["ingest", str(clean), "--db", str(tmp_path / "clean.duckdb")]) == 0
    rows = _store_rows(tmp_path / "bad.duckdb")
    assert rows == _store_rows(tmp_path / "clean.duckdb")
    assert "REFUSED-LINE-MARKER" not in repr(rows)
    with TraceStore(tmp_path / "bad.duckdb", diagnose=False) as s:
        assert [s.get_trace(t.trace_id) for t in traces] == traces
        assert len(s.ingest_errors()) == 10


def test_a_store_holds_nothing_of_a_refused_line_postgresql(
    session: tuple[list[Trace], list[bytes]],
    tmp_path: Path,
    pg_server: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ctxcore.store.engines import read_store

    traces, lines = session
    bad = _write(tmp_path / "bad.jsonl", [lines[0], *_ten_bad(lines), *lines[1:]])
    clean = _write(tmp_path / "clean.jsonl", lines)
    urls = {"bad": str(pg_server.new_database()), "clean": str(pg_server.new_database())}
    assert main(["ingest", str(bad), "--db", urls["bad"]]) == 1
    out = capsys.readouterr().out
    assert f"ingested {len(traces)} new traces" in out, out
    assert main(["ingest", str(clean), "--db", urls["clean"]]) == 0
    parts = {}
    for name, url in urls.items():
        with psycopg.connect(url) as con:
            parts[name] = (
                con.execute("SELECT pid, size FROM shared_parts ORDER BY pid").fetchall(),
                con.execute("SELECT count(*), sum(length(data)) FROM part_packs").fetchall(),
            )
        with read_store(url) as store:
            assert store.count() == len(traces)
            assert [store.get_trace(t.trace_id) for t in traces] == traces
            assert len(store.ingest_errors()) == (10 if name == "bad" else 0)
    assert parts["bad"] == parts["clean"] and parts["bad"][0]


# --------------------------------------------------------------------------- readers


def test_check_reads_shared_lines_whatever_the_files_name(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared file saved as .json or .ndjson (or one shared line as .json) is JSON lines
    to `check` and `replay` as it is to import: its first line says so."""
    _traces, lines = session
    capsys.readouterr()
    for body in ([lines[0]], lines):
        want = None
        for name in ("t.jsonl", "t.json", "t.ndjson", "t.json.gz"):
            f = tmp_path / name
            data = b"".join(ln + b"\n" for ln in body)
            f.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
            rc = main(["check", str(f)])
            out = capsys.readouterr()
            assert rc == 0, (name, out.err)
            got = (out.out.replace(str(f), "F"), out.err)
            assert want is None or got == want, name
            want = got
            assert f"{len(body)} trace(s)" in out.err


def test_a_shared_parts_script_is_escaped_in_the_html_report(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Untrusted text from a part reaches the HTML report escaped, as a whole line's does."""
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "none"))
    _traces, lines = session
    env = _env(lines[0])
    env["parts"]["xss"] = {"role": "user", "content": "<script>alert(1)</script><img src=x>"}
    env["trace"]["input"]["history"] = [*env["trace"]["input"]["history"], "xss"]
    path = _write(tmp_path / "xss.jsonl", [_line(env)])
    db, html = tmp_path / "x.duckdb", tmp_path / "x.html"
    assert main(["ingest", str(path), "--db", str(db)]) == 0
    tid = env["trace"]["trace_id"]
    assert main(["export", tid, "--db", str(db), "--format", "html", "-o", str(html)]) == 0
    text = html.read_text()
    assert "<script>alert(1)" not in text and "<img src=x>" not in text
    assert "alert(1)" in text


def test_a_file_whose_keys_were_sorted_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`jq -S` (or sort_keys) puts `parts` before `share`: every reader still takes the
    lines as shared, and ingest reads the file in order rather than split among workers."""
    import ctxcore.store.ingest as ingest_mod
    from ctxcore.store.ingest import ingest_paths

    sidechain = CLAUDE.parent / "ccviewer-task-sidechain-session.jsonl"
    traces = load_file(sidechain)
    w = ShareWriter()
    lines = [json.dumps(json.loads(w.line(t)), sort_keys=True).encode() for t in traces]
    assert all(ln.startswith((b'{"made": {', b'{"parts": {')) for ln in lines)
    path = _write(tmp_path / "sorted.jsonl", lines)
    assert _read(path) == (traces, [])
    for name in (path, _write(tmp_path / "sorted.json", lines)):
        assert main(["check", str(name)]) == 0
        assert f"{len(traces)} trace(s)" in capsys.readouterr().err
    for name in ("POOL_MIN_BYTES", "SMALL_FILE_BYTES"):
        monkeypatch.setattr(ingest_mod, name, 0)
    for name in ("CHUNK_BYTES", "POOL_CHUNK_BYTES"):
        monkeypatch.setattr(ingest_mod, name, 20_000)
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as s:
        c = ingest_paths(s, [path], workers=2)
        assert c.traces_added == len(traces) and not c.error_rows, c.error_rows[:1]
        assert [s.get_trace(t.trace_id) for t in traces] == traces


def test_a_one_line_sorted_keys_file_named_json_is_one_shared_trace(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    """A single sorted-keys shared line saved as ``.json`` (one document) is read as the
    trace it names by every reader of one document, not only ``check``: its schema is found
    past the first bytes (``sharing.starts_shared``)."""
    traces, lines = session
    line = json.dumps(json.loads(lines[0]), sort_keys=True)
    assert line.startswith(('{"made": {', '{"parts": {')) and f'"{SHARE_SCHEMA}"' not in line[:64]
    path = tmp_path / "one.json"
    path.write_text(line + "\n", encoding="utf-8")
    assert _read(path) == ([traces[0]], [])
    assert holds_shared(line)
    assert not holds_shared(line.replace(SHARE_SCHEMA, "ctxscope.other/1"))


def test_a_resumed_read_learns_the_parts_a_first_read_defined_and_no_others(
    session: tuple[list[Trace], list[bytes]], tmp_path: Path
) -> None:
    """An ingest resuming a file without its table learns the parts of the lines before
    its offset again: exactly those a reading of every line defined, bad lines included
    (a line with an unknown key, or another schema, defines none either way)."""
    traces, lines = session
    bad = _ten_bad(lines)
    extra = _env(lines[0])
    extra["parts"] = {"extra": "x"}
    extra["unknown"] = 1
    other = _env(lines[0])
    other["parts"] = {"other": "x"}
    other["share"] = "ctxscope.share/9"
    body = [lines[0], *bad, _line(extra), _line(other), *lines[1:]]
    path = _write(tmp_path / "resume.jsonl", body)
    read = PartTable()
    for n, raw in enumerate(body, 1):
        try:
            read.expand(raw, f"line {n}")
        except InputError:
            pass
    learnt = PartTables().get(str(path), 1, path.stat().st_size, gz=False)
    assert learnt.parts == read.parts and learnt.size == read.size
    assert "extra" not in learnt.parts and "other" not in learnt.parts
