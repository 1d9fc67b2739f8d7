"""Hostile input and faults in the store, ingest and the watcher (issue 11, the store half).

Every hostile file is generated here, stores are real DuckDB files in tmp_path, and faults
about processes use real processes. The rules under test: one bad record never costs a good
one (any exception while one line is processed is that line's error); memory stays bounded
on any input; nothing is lost or skipped without a word.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_store import make_trace, write_jsonl

from ctxcore import models as m
from ctxcore import settings
from ctxcore.errors import CtxscopeError, InputError, StoreError, StoreLockedError
from ctxcore.loading import too_long
from ctxcore.store import TraceStore, fastdecode
from ctxcore.store.ingest import ingest_paths
from ctxcore.store.watch import Watcher

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30


def line_of(d: dict[str, Any]) -> bytes:
    return json.dumps(d, ensure_ascii=False).encode()


def edited(i: int, path: tuple[Any, ...], value: Any) -> bytes:
    d = copy.deepcopy(make_trace(i).to_dict())
    node: Any = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return line_of(d)


def nested(depth: int) -> str:
    """A JSON object nested ``depth`` levels deep (built as text: json.dumps would recurse)."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def with_metadata(i: int, where: str, depth: int) -> bytes:
    """Trace ``i`` whose free JSON at ``where`` nests ``depth`` levels."""
    raw = make_trace(i).to_json()
    if where == "trace":
        return raw.replace('"metadata":{}', f'"metadata":{nested(depth)}', 1).encode()
    if where == "packet":
        at = raw.index('"metadata":{}', raw.index('"must_keep":true'))
        return (raw[:at] + f'"metadata":{nested(depth)}' + raw[at + 13 :]).encode()
    d = make_trace(i).to_dict()
    d["input"]["tools"] = [{"name": "t", "parameters": {"x": "PARAMS"}}]
    return line_of(d).replace(b'{"x": "PARAMS"}', nested(depth).encode())


#: Values that passed validation and broke the store (or could not be read back).
HOSTILE: dict[str, Callable[[int], bytes]] = {
    "created_at year 1 at +01:00": lambda i: edited(
        i, ("created_at",), "0001-01-01T00:30:00+01:00"
    ),
    "created_at year 9999 at -01:00": lambda i: edited(
        i, ("created_at",), "9999-12-31T23:30:00-01:00"
    ),
    "input.now year 1 at +05:30": lambda i: edited(
        i, ("input", "now"), "0001-01-01T01:00:00+05:30"
    ),
    "packet timestamp year 9999": lambda i: edited(
        i, ("input", "packets", 1, "timestamp"), "9999-12-31T23:59:00-00:30"
    ),
    "turn 2**31": lambda i: edited(i, ("turn",), 2**31),
    "rank 2**31": lambda i: edited(i, ("result", "decisions", 0, "rank"), 2**31),
    "partition items 2**31": lambda i: edited(i, ("result", "partitions", 0, "items"), 2**31),
    "report budget 2**70": lambda i: edited(i, ("result", "report", "budget"), 2**70),
    "max_tokens 2**70": lambda i: edited(i, ("config", "max_tokens"), 2**70),
    "window 2**70": lambda i: edited(i, ("input", "window"), 2**70),
    "packet tokens 2**70": lambda i: edited(i, ("input", "packets", 0, "tokens"), 2**70),
    "tokens_after -2**70": lambda i: edited(
        i, ("result", "decisions", 1, "tokens_after"), -(2**70)
    ),
    "priority 2**70": lambda i: edited(i, ("input", "packets", 0, "priority"), 2**70),
    "usage 2**70": lambda i: edited(i, ("outcome",), {"usage": {"prompt_tokens": 2**70}}),
    "metadata 65 deep": lambda i: with_metadata(i, "trace", 65),
    "metadata 500 deep": lambda i: with_metadata(i, "trace", 500),
    "metadata 900 deep": lambda i: with_metadata(i, "trace", 900),
    "metadata 1000 deep": lambda i: with_metadata(i, "trace", 1000),
    "metadata 100000 deep": lambda i: with_metadata(i, "trace", 100_000),
    "packet metadata 300 deep": lambda i: with_metadata(i, "packet", 300),
    "tool parameters 70 deep": lambda i: with_metadata(i, "tool", 70),
    "metadata 1e400": lambda i: (
        make_trace(i).to_json().replace('"metadata":{}', '"metadata":{"x":1e400}', 1).encode()
    ),  # fmt: skip
    "metadata lone surrogate": lambda i: (
        make_trace(i)
        .to_json()
        .replace('"metadata":{}', '"metadata":{"x":"cut \\ud83d"}', 1)
        .encode()
    ),  # fmt: skip
}


def ingest_lines(tmp_path: Path, lines: list[bytes], *, diagnose: bool) -> tuple[Any, TraceStore]:
    f = tmp_path / "in.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    store = TraceStore(tmp_path / f"s{int(diagnose)}.duckdb", diagnose=diagnose)
    return ingest_paths(store, [f]), store


# --------------------------------------------------------------------------- 1. validation


@pytest.mark.parametrize("diagnose", [False, True], ids=["fast-path", "pydantic"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_value_costs_its_line_only(tmp_path: Path, case: str, diagnose: bool) -> None:
    good = [make_trace(i).to_json().encode() for i in (0, 2)]
    c, store = ingest_lines(tmp_path, [good[0], HOSTILE[case](1), good[1]], diagnose=diagnose)
    with store:
        assert (c.traces_added, c.errors) == (2, 1)
        (err,) = c.error_rows
        assert err.line == 2 and "\n" not in err.message and "Traceback" not in err.message
        assert {r.trace_id for r in store.list_traces().rows} == {"t000000", "t000002"}
        assert store.ingest_errors()[0].message == err.message


def _error_of(fn: Callable[[], object]) -> str:
    with pytest.raises(CtxscopeError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_build_check_import_and_ingest_give_the_same_error(tmp_path: Path, case: str) -> None:
    from ctxcore.cli.check import run_check
    from ctxcore.formats.load import load_file
    from ctxcore.loading import load_input_or_trace

    raw = HOSTILE[case](1)
    c, store = ingest_lines(tmp_path, [raw], diagnose=False)
    store.close()
    ingested = c.error_rows[0].message
    jsonl, doc = tmp_path / "one.jsonl", tmp_path / "one.json"
    jsonl.write_bytes(raw + b"\n")
    doc.write_bytes(raw)
    said = io.StringIO()
    assert run_check([str(jsonl)], err=said) == 2  # a line it could not read: said, bad input
    checked = said.getvalue().splitlines()[0].removeprefix("ctxscope check: error: ")
    built = _error_of(lambda: load_input_or_trace(doc))
    imported = _error_of(lambda: load_file(doc, "trace"))
    assert checked == f"{jsonl}:1: {ingested}"
    assert built == f"{doc}: {ingested}"
    assert imported == f"{doc}: {ingested}"


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_fast_path_refuses_what_the_models_refuse(case: str) -> None:
    from pydantic import ValidationError

    raw = HOSTILE[case](1)
    assert fastdecode.decode(raw) is None
    with pytest.raises(ValidationError):
        m.Trace.model_validate_json(raw)


def test_the_edges_the_store_can_hold_are_stored_and_read_back(tmp_path: Path) -> None:
    """Validation is what the store can hold: the last values accepted go in and come
    back out of the store, the JSON export and the Arrow rows alike."""
    d = make_trace(1).to_dict()
    d["turn"] = settings.MAX_INT32
    d["created_at"] = "0001-01-01T01:00:00+01:00"  # 0001-01-01T00:00Z
    d["input"]["now"] = "9999-12-31T22:59:59.999999-01:00"  # the last microsecond in UTC
    d["result"]["decisions"][0]["rank"] = settings.MAX_INT32
    d["result"]["partitions"][0]["items"] = settings.MAX_INT32
    d["result"]["report"]["budget"] = settings.MAX_TOKENS
    d["config"]["max_tokens"] = settings.MAX_TOKENS
    d["input"]["packets"][0]["priority"] = 2**63 - 1
    d["outcome"] = {"usage": {"prompt_tokens": 2**63 - 1}}
    raw = line_of(d).replace(b'"metadata": {}', f'"metadata": {nested(64)}'.encode(), 1)
    assert fastdecode.decode(raw) is not None
    want = m.Trace.model_validate_json(raw)
    for diagnose in (False, True):
        c, store = ingest_lines(tmp_path, [raw], diagnose=diagnose)
        with store:
            assert (c.traces_added, c.errors) == (1, 0)
            assert store.get_trace(want.trace_id) == want
            (row,) = store.list_traces().rows
            assert (row.turn, row.budget) == (settings.MAX_INT32, settings.MAX_TOKENS)
            assert row.created_at.year == 1
            assert m.Trace.model_validate_json(want.to_json()) == want


def test_an_unexpected_exception_on_one_line_is_that_lines_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net: whatever raises while one line is decoded, validated, turned into
    rows or diagnosed becomes that line's error row, never the file's or the batch's."""
    from ctxcore import diagnostics
    from ctxcore.store import workers

    real_diagnose, real_decode = diagnostics.diagnose, fastdecode.decode

    def diagnose(trace: m.Trace, **kw: Any) -> Any:
        if trace.trace_id == "t000001":
            raise ZeroDivisionError("a detector's bug")
        return real_diagnose(trace, **kw)

    def decode(raw: bytes, checked: bool = False) -> Any:
        if b'"t000004"' in raw:
            raise MemoryError("a decoder's bug")
        return real_decode(raw, checked)

    monkeypatch.setattr(diagnostics, "diagnose", diagnose)
    monkeypatch.setattr(workers.fastdecode, "decode", decode)
    good = [make_trace(i).to_json().encode() for i in range(6)]
    for diag, line, why in ((True, 2, "ZeroDivisionError: a detector's bug"),
                            (False, 5, "MemoryError: a decoder's bug")):  # fmt: skip
        c, store = ingest_lines(tmp_path, good, diagnose=diag)
        with store:
            assert c.traces_added == 5 and store.count() == 5
            (err,) = c.error_rows
            assert err.line == line and why in err.message


# --------------------------------------------------------------------------- 2. watcher


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.05)


def truncated_gz(lines: list[bytes]) -> bytes:
    data = gzip.compress(b"".join(x + b"\n" for x in lines), mtime=0)
    return data[: len(data) * 2 // 3]


def test_a_failing_file_is_tried_again_only_once_it_changes(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    bad = folder / "bad.jsonl.gz"
    bad.write_bytes(b"this is not gzip\n" * 10)
    write_jsonl(folder / "good.jsonl", [make_trace(1)])
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as store:
        c = ingest_paths(store, [folder])
        assert (c.traces_added, c.errors) == (1, 1)
        assert "not a gzip file" in c.error_rows[0].message
        (failing,) = store.failing_files()
        assert failing.file == str(bad.resolve()) and "not a gzip file" in failing.reason
        for _ in range(3):  # unchanged: not read again, not reported again
            again = ingest_paths(store, [folder])
            assert (again.files, again.errors) == (0, 0)
        assert len(store.ingest_errors()) == 1
        bad.write_bytes(gzip.compress(make_trace(2).to_json().encode() + b"\n"))
        fixed = ingest_paths(store, [folder])
        assert (fixed.traces_added, fixed.errors) == (1, 0)
        assert store.failing_files() == [] and store.count() == 2


@pytest.mark.slow
def test_the_watcher_never_wedges_on_poison(tmp_path: Path) -> None:
    """A watched folder with poison among good files while writers append and add files
    for a few seconds: every good trace is stored, each poison is reported once, and the
    watcher goes on (rescans every half second, so a wedge would repeat)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    good: set[str] = set()
    # poison that is the file's: not gzip, a gzip cut short, a FIFO, a document too big
    (folder / "notgz.jsonl.gz").write_bytes(os.urandom(5000))
    (folder / "cut.jsonl.gz").write_bytes(
        truncated_gz([make_trace(i).to_json().encode() for i in range(900, 990)])
    )
    os.mkfifo(folder / "pipe.jsonl")
    # poison on lines, among good lines of the same file
    values = [make_trace(800).to_json().encode()] + [
        HOSTILE[k](801 + n) for n, k in enumerate(sorted(HOSTILE))
    ]
    values.append(make_trace(850).to_json().encode())
    (folder / "values.jsonl").write_bytes(b"\n".join(values) + b"\n")
    good |= {"t000800", "t000850"}
    store = TraceStore(tmp_path / "s.duckdb", diagnose=False)
    stop = time.monotonic() + 4.0

    def writer(w: int) -> None:
        n = 0
        while time.monotonic() < stop:
            t = make_trace(10_000 * (w + 1) + n, n_packets=3)
            with (folder / f"w{w}-{n // 20}.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(t.to_json() + "\n")
            good.add(t.trace_id)
            n += 1
            time.sleep(0.01)

    with Watcher(store, folder, debounce=0.1, max_wait=0.5, rescan_every=0.5) as w:
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_for(
            lambda: (
                {r[0] for r in store._cur().execute("SELECT trace_id FROM traces").fetchall()}
                >= good
            )
        )
        time.sleep(2.0)  # four more rescans: nothing may be reported twice
        assert w.last_error is None and w.running
    stored = {r[0] for r in store._cur().execute("SELECT trace_id FROM traces").fetchall()}
    # the cut gzip's complete lines before the damage are stored too
    assert good <= stored and stored - good <= {f"t{i:06d}" for i in range(900, 990)}
    errors = store.ingest_errors(limit=10_000)
    where = [(Path(e.file).name, e.line) for e in errors]
    assert len(where) == len(set(where)), "an error was reported twice"
    by_file: dict[str, int] = {}
    for name, _ in where:
        by_file[name] = by_file.get(name, 0) + 1
    assert by_file == {
        "notgz.jsonl.gz": 1,
        "cut.jsonl.gz": 1,
        "pipe.jsonl": 1,
        "values.jsonl": len(HOSTILE),
    }
    failing = {Path(f.file).name: f.reason for f in store.failing_files()}
    assert set(failing) == {"notgz.jsonl.gz", "cut.jsonl.gz", "pipe.jsonl"}
    assert "not a gzip file" in failing["notgz.jsonl.gz"]
    assert "ends early" in failing["cut.jsonl.gz"]
    assert "not a regular file" in failing["pipe.jsonl"]
    store.close()


# --------------------------------------------------------------------------- 3. memory

PEAK = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(p.stdout)
sys.stderr.write(p.stderr)
print(f"@@peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}", file=sys.stderr)
sys.exit(p.returncode)
"""


def run_measured(*args: str, timeout: float = 900) -> tuple[int, str, str, int]:
    """Run ``ctxscope ARGS`` in a child of a wrapper process: (exit code, stdout, stderr,
    the child's peak RSS in bytes, from the wrapper's ``RUSAGE_CHILDREN``)."""
    out = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "ctxcore", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    err, _, peak = out.stderr.rpartition("@@peak ")
    return out.returncode, out.stdout, err, int(peak)


@pytest.fixture(scope="module")
def huge_line_gz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4 MB .jsonl.gz holding one 4 GiB line (gzip members of 64 MiB of 'x'), then a
    good trace."""
    path = tmp_path_factory.mktemp("huge") / "huge.jsonl.gz"
    member = gzip.compress(b"x" * (64 << 20), compresslevel=9, mtime=0)
    with path.open("wb") as f:
        f.write(gzip.compress(b'{"schema":"ctxscope.trace/1","trace_id":"huge","metadata":{"a":"'))
        for _ in range(4 * GIB // (64 << 20)):
            f.write(member)
        f.write(gzip.compress(b'"}}\n' + make_trace(1).to_json().encode() + b"\n"))
    assert path.stat().st_size < 5 << 20
    return path


@pytest.mark.slow
def test_a_4_gib_line_in_a_4_mb_gz_is_one_error(huge_line_gz: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "h.duckdb")
    rc, out, err, peak = run_measured("ingest", str(huge_line_gz), "--db", db)
    assert rc == 1, err
    assert peak <= GIB, f"ingest peaked at {peak / 2**20:,.0f} MiB"
    lines = out.splitlines()
    assert lines[0] == "ingested 1 new traces from 1 files (0 already stored, 1 errors)"
    assert lines[1:] == [f"{huge_line_gz}:1: {too_long()}"]
    for command in ("check", "import"):
        rc, out, err, peak = run_measured(
            command, str(huge_line_gz), *(["--db", db] if command == "import" else [])
        )
        assert rc == 2 and peak <= GIB, (command, rc, peak, err)
        assert err.strip().count("\n") == 0 and "over 134,217,728 bytes" in err, err


@pytest.fixture(scope="module")
def bad_lines_gz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two million tiny lines, none of them a trace, gzipped to well under a megabyte."""
    path = tmp_path_factory.mktemp("bad") / "bad.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(200):
            f.write(b"".join(b"{bad %d\n" % (i % 3000) for i in range(10_000)))
    assert path.stat().st_size < 1 << 20
    return path


@pytest.mark.slow
def test_two_million_bad_lines_cost_bounded_memory_and_rows(
    bad_lines_gz: Path, tmp_path: Path
) -> None:
    db = str(tmp_path / "b.duckdb")
    rc, out, err, peak = run_measured("ingest", str(bad_lines_gz), "--db", db)
    assert rc == 1, err
    assert peak <= GIB, f"ingest peaked at {peak / 2**20:,.0f} MiB"
    lines = out.splitlines()
    cap = settings.MAX_ERRORS_PER_FILE
    assert len(lines) == 1 + cap + 1
    assert lines[-1].startswith(f"{bad_lines_gz}:{cap + 1}: {2_000_000 - cap:,} more bad lines")
    with TraceStore(db, read_only=True) as store:
        assert len(store.ingest_errors(limit=10_000)) == cap + 1
    for command in ("check", "import"):
        rc, out, err, peak = run_measured(
            command, str(bad_lines_gz), *(["--db", db] if command == "import" else [])
        )
        assert rc == 2 and peak <= GIB, (command, rc, peak, err)
        said = err.strip().splitlines()
        assert f"{bad_lines_gz}:1: malformed JSON at column 2" in said[0], err
        # each bad line up to the cap is said, the rest counted, then the end
        assert len(said) == cap + 2, said[-3:]
        assert said[-2].endswith(
            f"{bad_lines_gz}: {2_000_000 - cap:,} more bad lines not listed "
            f"(only the first {cap:,} of a file are)"
        )
        if command == "check":
            assert said[-1].startswith("ctxscope check: 0 trace(s): ")
            assert said[-1].endswith("; 2,000,000 line(s) could not be read (said above)")
        else:
            assert "nothing imported" in said[-1]


@pytest.mark.slow
def test_a_json_document_over_the_cap_is_refused_unread(tmp_path: Path) -> None:
    doc = tmp_path / "big.json"
    with doc.open("wb") as f:
        f.write(b"[" + b'"padding", ' * (settings.MAX_DOCUMENT_BYTES // 11 + 10) + b"1]")
    db = str(tmp_path / "d.duckdb")
    rc, out, err, peak = run_measured("ingest", str(doc), "--db", db)
    assert rc == 1 and peak <= GIB, (rc, peak, err)
    assert f"{doc}:0: over {settings.MAX_DOCUMENT_BYTES:,} bytes" in out
    for command in ("check", "import"):
        rc, out, err, peak = run_measured(
            command, str(doc), *(["--db", db] if command == "import" else [])
        )
        assert rc == 2 and peak <= GIB, (command, rc, peak, err)
        assert "the limit for a single JSON document" in err and err.strip().count("\n") == 0


def test_line_blocks_drop_long_lines_while_reading() -> None:
    """``LineBlocks`` against a plain split, on random lines around the limit and chunk
    sizes smaller and larger than the lines: the same lines, the long ones reported by
    number and size, the offsets and fingerprints of what was consumed."""
    import io
    import random

    from ctxcore.store import readers

    rng = random.Random(11)
    for _ in range(300):
        limit = rng.randint(1, 60)
        lines = [
            bytes(rng.choice(b"ab") for _ in range(rng.randint(0, 90)))
            for _ in range(rng.randint(0, 12))
        ]
        tail = bytes(rng.choice(b"cd") for _ in range(rng.randint(0, 90)))
        data = b"".join(x + b"\n" for x in lines) + tail
        state = readers.ReadState(0, 0, b"")
        chunk = rng.randint(1, limit)  # (LineBlocks reads at most a line's limit at once)
        got: list[tuple[int, bytes]] = []
        for first, block in readers.LineBlocks(io.BytesIO(data), state, chunk, max_line=limit):
            got += list(enumerate(block.split(b"\n")[:-1], first + 1))
        want = [(n, x) for n, x in enumerate(lines, 1) if len(x) <= limit]
        assert got == want
        assert state.long_lines == [
            (n, len(x) + 1) for n, x in enumerate(lines, 1) if len(x) > limit
        ]
        body = len(data) - len(tail)
        assert (state.offset, state.line) == (body, len(lines))
        assert state.tail == data[:body][-readers.FP_BYTES :]
        assert state.head == data[: min(body, readers.HEAD_BYTES)]
        assert (state.rest, state.rest_over) == (
            (tail, 0) if len(tail) <= limit else (b"", len(tail))
        )


@pytest.mark.parametrize("workers", [1, 2])
def test_error_rows_are_capped_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """The first MAX_ERRORS_PER_FILE bad lines get a row each, one more row counts the
    rest; read here or in worker chunks alike, and the good lines are all stored."""
    import ctxcore.store.ingest as ingest_mod
    import ctxcore.store.workers as workers_mod

    monkeypatch.setattr(workers_mod, "MAX_ERRORS_PER_FILE", 10)
    monkeypatch.setattr(ingest_mod, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "POOL_CHUNK_BYTES", 2000)
    monkeypatch.setattr(ingest_mod, "CHUNK_BYTES", 2000)
    lines = [b"{bad %d" % i for i in range(25)]
    lines[3:3] = [make_trace(1).to_json().encode()]
    lines.append(make_trace(2).to_json().encode())
    f = tmp_path / "x.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as store:
        c = ingest_paths(store, [f], workers=workers)
        assert c.traces_added == 2
        assert [e.line for e in c.error_rows] == [1, 2, 3, *range(5, 13)]
        assert c.error_rows[-1].message.startswith("15 more bad lines in this file")


# --------------------------------------------------------------------------- 4. no silent loss


@pytest.mark.parametrize("how", ["renamed over", "rewritten in place"])
def test_a_replaced_longer_file_is_read_from_its_start(tmp_path: Path, how: str) -> None:
    """The replacement's lines have the same lengths and the same JSON tail, so the bytes
    just before the old offset match: only the inode and the first bytes tell them apart."""
    f = tmp_path / "a.jsonl"
    old = [make_trace(i) for i in range(10)]
    write_jsonl(f, old)
    new = [t.model_copy(update={"trace_id": t.trace_id.replace("t", "u")}) for t in old]
    new += [make_trace(i) for i in range(100, 110)]
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as store:
        assert ingest_paths(store, [f]).traces_added == 10
        if how == "renamed over":
            write_jsonl(tmp_path / ".a.tmp", new)
            os.replace(tmp_path / ".a.tmp", f)
        else:
            write_jsonl(f, new)
        c = ingest_paths(store, [f])
        assert (c.traces_added, c.errors) == (20, 0)
        assert store.count() == 30


def test_a_truncated_then_regrown_file_is_read_from_its_start(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    write_jsonl(f, [make_trace(i) for i in range(5)])
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as store:
        assert ingest_paths(store, [f]).traces_added == 5
        f.write_bytes(b"")
        assert ingest_paths(store, [f]).traces_added == 0
        write_jsonl(f, [make_trace(i) for i in (0, 1, 50, 51, 52, 53)])
        c = ingest_paths(store, [f])
        assert (c.traces_added, c.traces_skipped) == (4, 2)


def test_the_same_trace_id_with_other_content_is_an_error_on_every_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxcore.capture import Recorder
    from ctxcore.cli import main

    first = make_trace(1).model_copy(update={"metadata": {"n": 1}})
    other = first.model_copy(update={"metadata": {"n": 2}})
    subtle = first.model_copy(update={"metadata": {"n": 1.0}})  # equal in Python, not in JSON
    db = tmp_path / "s.duckdb"
    with TraceStore(db, diagnose=False) as store:
        assert store.add_traces([first, make_trace(2)]) == 2
        assert store.add_traces([first]) == 0  # the same content: already there
        for changed in (other, subtle):
            with pytest.raises(
                InputError, match="'t000001' is already stored .* different content"
            ):
                store.add_traces([make_trace(3), changed])
        assert store.count() == 2  # nothing of the refused import was stored
        # Recorder-written files, ingested (by the watcher or the CLI)
        rec = Recorder(tmp_path / "rec", session_id="s1")
        rec.record(first)
        rec.record(other)
        c = ingest_paths(store, [tmp_path / "rec"])
        assert [(e.line, "different content" in e.message) for e in c.error_rows] == [(2, True)]
        # the watcher
        folder = tmp_path / "w"
        folder.mkdir()
        with Watcher(store, folder, rescan_every=3600):
            write_jsonl(folder / "x.jsonl", [subtle])
            wait_for(lambda: len(store.ingest_errors()) == 2)
    # ctxscope import
    src = tmp_path / "imp.jsonl"
    write_jsonl(src, [make_trace(4), other])
    assert main(["import", str(src), "--db", str(db)]) == 2
    assert "already stored" in capsys.readouterr().err
    with TraceStore(db, read_only=True) as store:
        assert store.count() == 2


def test_a_gz_that_is_not_gzip_or_cut_short_is_an_error(tmp_path: Path) -> None:
    from ctxcore.cli import main

    bad, cut = tmp_path / "bad.jsonl.gz", tmp_path / "cut.jsonl.gz"
    bad.write_bytes(b'{"not": "gzip"}\n')
    cut.write_bytes(truncated_gz([make_trace(i).to_json().encode() for i in range(40)]))
    db = tmp_path / "s.duckdb"
    assert main(["ingest", str(bad), str(cut), "--db", str(db)]) == 1
    with TraceStore(db, read_only=True) as store:
        errors = {Path(e.file).name: e for e in store.ingest_errors()}
        assert "not a gzip file" in errors["bad.jsonl.gz"].message
        assert "ends early" in errors["cut.jsonl.gz"].message
        stored = store.count()
        assert 0 < stored < 40  # the complete lines before the cut
        assert errors["cut.jsonl.gz"].line == stored + 1


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "ctxcore", "ingest", str(fifo), "--db", str(tmp_path / "s.duckdb")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "not a regular file" in out.stderr
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as store:
        with pytest.raises(InputError, match="not a regular file"):
            ingest_paths(store, [fifo])
        # inside a folder it is reported (once), and the rest is read
        write_jsonl(tmp_path / "a.jsonl", [make_trace(1)])
        c = ingest_paths(store, [tmp_path])
        assert c.traces_added == 1
        assert [Path(e.file).name for e in c.error_rows] == ["pipe.jsonl"]
        assert ingest_paths(store, [tmp_path]).errors == 0


# --------------------------------------------------------------------------- 5. store faults


def _store_with_traces(path: Path) -> bytes:
    with TraceStore(path) as store:
        store.add_traces([make_trace(i) for i in range(40)])
    return path.read_bytes()


@pytest.mark.slow
def test_a_corrupt_or_truncated_store_is_never_reported_as_locked(tmp_path: Path) -> None:
    data = _store_with_traces(tmp_path / "good.duckdb")
    empty = tmp_path / "nothing"
    empty.mkdir()
    cases = {
        "bit flip": bytearray(data),
        "cut short": bytearray(data[:4096]),
        "cut in half": bytearray(data[: len(data) // 2]),
        "not a store": bytearray(b"hello"),
    }
    cases["bit flip"][100] ^= 0xFF
    for name, content in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.duckdb"
        path.write_bytes(bytes(content))
        with pytest.raises(StoreError) as info:
            TraceStore(path).close()
        msg = str(info.value)
        assert not isinstance(info.value, StoreLockedError) and "in use" not in msg, (name, msg)
        assert "damaged or not a ctxscope store" in msg and "move it aside" in msg, (name, msg)
        assert "\n" not in msg
        out = subprocess.run(
            [sys.executable, "-m", "ctxcore", "ingest", str(empty), "--db", str(path)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "damaged" in out.stderr and "Traceback" not in out.stderr


def _damaged_past_open(tmp_path: Path) -> dict[str, Path]:
    """A store cut short and one with a flipped byte, each damaged where opening it does not
    look (the damage is found when the traces are read), and damaged on the last such block."""
    good = tmp_path / "good.duckdb"
    with TraceStore(good) as store:
        store.add_traces([make_trace(i, n_packets=20) for i in range(200)])
    data = good.read_bytes()
    block = 256 * 1024
    found: dict[str, Path] = {}
    for n in range(len(data) // block, 0, -1):
        flipped = bytearray(data)
        flipped[n * block + 4096] ^= 0xFF
        for name, content in (("cut short", data[: n * block]), ("bit flip", bytes(flipped))):
            if name in found:
                continue
            path = tmp_path / f"{name.replace(' ', '_')}-{n}.duckdb"
            path.write_bytes(content)
            try:
                store = TraceStore(path, read_only=True)
            except StoreError:
                continue
            try:
                with store:
                    store.traces_json([r.trace_id for r in store.list_traces(limit=500).rows])
            except Exception:  # the damage this case wants: found on reading
                found[name] = path
    assert set(found) == {"cut short", "bit flip"}, found
    return found


@pytest.mark.slow
def test_a_store_damaged_past_what_open_reads_is_one_line_for_every_reader(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "no-files"
    empty.mkdir()
    env = dict(os.environ, CTXSCOPE_TRACES=str(empty))
    for name, path in _damaged_past_open(tmp_path).items():
        with TraceStore(path, read_only=True) as store, pytest.raises(StoreError) as info:
            store.traces_json([r.trace_id for r in store.list_traces(limit=500).rows])
        assert "damaged or not a ctxscope store" in str(info.value), (name, info.value)
        for cmd in (
            ["replay", "--session", "s1", "--set", "max_tokens=300"],
            ["replay", "--all", "--no-findings"],
            ["export", "--session", "s1", "--format", "json"],
        ):
            out = subprocess.run(
                [sys.executable, "-m", "ctxcore", *cmd, "--db", str(path)],
                cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
            )  # fmt: skip
            said = (name, cmd, out.stderr)
            assert out.returncode == 2 and out.stderr.count("\n") == 1, said
            assert "damaged" in out.stderr and "move it aside" in out.stderr, said
            assert "Traceback" not in out.stderr, said


BUSY_WRITER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from helpers_store import make_trace
from ctxcore.store import TraceStore
store = TraceStore(sys.argv[1], diagnose=False)
k = 0
while True:  # until killed: a commit every few ms, and a checkpoint every tenth one
    store.add_traces([make_trace(k * 20 + i, n_packets=20, session_id="busy") for i in range(20)])
    k += 1
    if k % 10 == 0:
        store._cur().execute("CHECKPOINT")
        if k == 10:  # the first traces are in the file: a reader has something to see
            print("ready", flush=True)
    time.sleep(0.01)
"""


@pytest.mark.slow
def test_a_store_another_process_keeps_writing_is_read_from_whole_copies(
    tmp_path: Path,
) -> None:
    """``read_store`` while another process commits and checkpoints without pause: every
    read opens (a torn copy is taken again), sees whole traces, and never fewer than before."""
    import signal

    from ctxcore.store.engines import read_store

    db = tmp_path / "busy.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_WRITER, str(db), str(ROOT / "tests")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    notes: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        seen = 0
        for _ in range(12):
            with read_store(db, note=notes.append) as store:
                ids = [r.trace_id for r in store.list_traces(limit=100_000).rows]
                assert len(ids) == store.count() >= seen
                assert len(store.traces_json(ids)) == len(ids)
                seen = len(ids)
        assert proc.poll() is None  # the writer was never stopped
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(notes) == 12 and all("reading a copy" in n for n in notes)
    assert seen > 0
    assert [p.name for p in tmp_path.iterdir() if ".read-" in p.name] == []


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount small tmpfs folders (root only): a full disk and a read-only folder."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(size: str, name: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)  # fmt: skip
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_line(tmp_path: Path, tmpfs: Callable[..., Path]) -> None:
    disk = tmpfs("64k", "full")
    src = tmp_path / "in"
    src.mkdir()
    write_jsonl(src / "a.jsonl", [make_trace(i, n_packets=20) for i in range(300)])
    out = subprocess.run(
        [sys.executable, "-m", "ctxcore", "ingest", str(src), "--db", str(disk / "s.duckdb")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "the disk is full" in out.stderr, out.stderr
    assert "free some space" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_checkpoint_that_fills_the_disk_is_one_line_and_the_watcher_keeps_going(
    tmp_path: Path, tmpfs: Callable[..., Path]
) -> None:
    """One ingest of 3,600 traces on a 10 MB disk: the commit fits, the checkpoint after it
    does not, and DuckDB gives up on the database ("invalidated"). `ctxscope watch` said so in
    one line and then printed a traceback every two seconds (diagnostics on the dead
    connection), and kept nothing even once there was room, until restarted. Now: one line,
    no traceback, and once the disk has room the next rescan ingests every trace."""
    import signal

    disk = tmpfs("10m", "full")
    src = tmp_path / "in"
    src.mkdir()
    for f in range(12):
        traces = [make_trace(f * 300 + i, n_packets=20, session_id=f"s{f}") for i in range(300)]
        write_jsonl(src / f"f{f:02}.jsonl", traces)
    db = disk / "s.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "watch", str(src), "--db", str(db)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    err: list[str] = []
    out: list[str] = []
    readers = [
        threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True),
        threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True),
    ]
    for r in readers:
        r.start()

    def wait_for(what: str, lines: list[str]) -> str:
        deadline = time.monotonic() + 120  # a bound on the wait, not a measurement
        while not any(what in x for x in lines):
            assert proc.poll() is None, "".join(err)
            assert time.monotonic() < deadline, f"no {what!r}: {''.join(out + err)}"
            time.sleep(0.2)
        return next(x for x in lines if what in x)

    try:
        wait_for("the disk is full", err)
        time.sleep(5)  # idle moments: the diagnostics ran on the dead store (a traceback each)
        subprocess.run(["mount", "-o", "remount,size=200m", str(disk)], check=True)
        line = wait_for("ingested", out)  # by the next rescan (every 10 s)
        assert "3600 new traces" in line, line
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for r in readers:
            r.join(timeout=10)
    said = "".join(err)
    assert "Traceback" not in said, said
    assert said.count("the disk is full") == 1, said
    with TraceStore(db, read_only=True) as store:
        assert store.count() == 3600


def test_a_read_only_folder_is_one_line(tmp_path: Path, tmpfs: Callable[..., Path]) -> None:
    ro = tmpfs("4m", "ro")
    _store_with_traces(ro / "s.duckdb")
    subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
    for db in (ro / "s.duckdb", ro / "new.duckdb", ro / "sub" / "new.duckdb"):
        with pytest.raises(StoreError) as info:
            TraceStore(db).close()
        msg = str(info.value)
        assert "cannot write the store or its folder" in msg and "writable" in msg, msg
        assert not isinstance(info.value, StoreLockedError)
    with TraceStore(ro / "s.duckdb", read_only=True) as store:
        assert store.count() == 40  # reading still works


INGESTER = """
import sys
import ctxcore.store.ingest as ingest_mod
from ctxcore.store import TraceStore
from ctxcore.store.ingest import ingest_paths
ingest_mod.POOL_MIN_BYTES = 0
ingest_mod.SMALL_FILE_BYTES = 0
ingest_mod.POOL_CHUNK_BYTES = 64 * 1024
if __name__ == "__main__":
    store = TraceStore(sys.argv[1], diagnose=False)
    def progress(done, total):
        print(done, total, flush=True)
    ingest_paths(store, [sys.argv[2]], progress, workers=2)
    print("done", flush=True)
"""


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


@pytest.mark.slow
def test_workers_and_the_forkserver_die_with_a_killed_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    import shutil
    import signal
    import tempfile

    src = tmp_path / "in"
    src.mkdir()
    for k in range(4):
        write_jsonl(
            src / f"f{k}.jsonl", [make_trace(k * 1000 + i, n_packets=30) for i in range(150)]
        )
    script = tmp_path / "ingester.py"
    script.write_text(INGESTER, encoding="utf-8")
    # short: the forkserver's socket lives in it, and an AF_UNIX path holds 107 bytes at most
    # (pytest-xdist's tmp_path is too long for that)
    spill = Path(tempfile.mkdtemp(prefix="ctxk-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(spill, ignore_errors=True))
    env = {**os.environ, "TMPDIR": str(spill), "PYTHONPATH": str(ROOT)}
    db = tmp_path / "k.duckdb"
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(src)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    kids: list[int] = []
    for out in proc.stdout:
        parts = out.split()
        assert parts[0] != "done", "the ingest finished before it could be killed"
        kids = descendants(proc.pid)
        if int(parts[0]) > int(parts[1]) * 0.3 and len(kids) >= 3:  # forkserver + 2 workers
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert len(kids) >= 3, kids
    assert list(spill.glob("ctxscope-ingest-*")), "the run had no spill folder"
    wait_for(lambda: not [k for k in kids if alive(k)], timeout=10)
    # the next run (any size) removes what the killed one left behind
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    with TraceStore(tmp_path / "next.duckdb", diagnose=False) as store:
        ingest_paths(store, [src / "f0.jsonl"])
    assert not list(spill.glob("ctxscope-ingest-*"))


LONG_TMPDIR_SCRIPT = """
import sys
from pathlib import Path
from ctxcore.models import Trace
import ctxcore.replay.pool as replay_pool
import ctxcore.store.ingest as ingest_mod
import ctxcore.store.workers as workers
from ctxcore.processes import fork_server_fits
from ctxcore.replay import replay
from ctxcore.store import TraceStore
from ctxcore.store.ingest import ingest_paths
ingest_mod.POOL_MIN_BYTES = 0
ingest_mod.SMALL_FILE_BYTES = 0
ingest_mod.POOL_CHUNK_BYTES = 64 * 1024
made = []
def recording(real):
    def context(preload):
        ctx = real(preload)
        made.append(ctx.get_start_method())
        return ctx
    return context
workers.worker_context = recording(workers.worker_context)
replay_pool.worker_context = recording(replay_pool.worker_context)
if __name__ == "__main__":
    assert not fork_server_fits()
    with TraceStore(sys.argv[1], diagnose=False) as store:
        counts = ingest_paths(store, [sys.argv[2]], workers=2)
    print(counts.traces_added, counts.errors, flush=True)
    traces = [
        Trace.model_validate_json(line)
        for f in sorted(Path(sys.argv[2]).glob("*.jsonl"))
        for line in f.read_text(encoding="utf-8").splitlines()
    ]
    a = replay(traces, {"max_tokens": 2000}, workers=2, findings=False)
    b = replay(traces, {"max_tokens": 2000}, workers=1, findings=False)
    same = a.model_dump(exclude={"seconds"}) == b.model_dump(exclude={"seconds"})
    print(len(a.turns), same, ",".join(made), flush=True)
"""


def test_a_temp_folder_too_long_for_the_fork_servers_socket_spawns_the_workers(
    tmp_path: Path,
) -> None:
    """Under a TMPDIR where multiprocessing's AF_UNIX socket path would pass 107 bytes, the
    fork server cannot start ("AF_UNIX path too long"): ingest's parsers and replay's
    workers are spawned instead, and do the same work."""
    from ctxcore.processes import SOCKET_PATH_MAX, SOCKET_TAIL

    long_tmp = tmp_path / ("t" * max(1, SOCKET_PATH_MAX - SOCKET_TAIL - len(str(tmp_path)) + 5))
    long_tmp.mkdir()
    assert len(str(long_tmp)) + SOCKET_TAIL > SOCKET_PATH_MAX
    src = tmp_path / "in"
    src.mkdir()
    for k in range(2):
        made = [make_trace(k * 1000 + i, n_packets=20) for i in range(150)]
        write_jsonl(src / f"f{k}.jsonl", made)
    script = tmp_path / "long_tmp.py"
    script.write_text(LONG_TMPDIR_SCRIPT, encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(long_tmp), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "s.duckdb"), str(src)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    ingested, replayed = out.stdout.split("\n")[:2]
    assert ingested == "300 0"
    turns, same, methods = replayed.split()
    assert int(turns) == 300 and same == "True"
    assert set(methods.split(",")) == {"spawn"}, methods


# --------------------------------------------------------------------------- the limits


def _limit_value(text: str) -> int:
    """'128 MiB' -> 2**27, '10 M characters' -> 10 * 2**20, '2^31 - 1', '1,000', '64 levels'."""
    words = text.replace(",", "").split()
    if "^" in words[0]:
        base, exp = words[0].split("^")
        return int(base) ** int(exp) - (int(words[2]) if len(words) > 2 else 0)
    scale = {"GiB": 2**30, "MiB": 2**20, "M": 2**20}.get(words[1] if len(words) > 1 else "", 1)
    return int(words[0]) * scale


def test_the_readme_lists_every_limit_with_its_value() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Limits", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0].startswith("MAX_"):
            rows[cells[0]] = (cells[1], cells[2])
    assert set(rows) == set(settings.LIMITS)
    for name, (value, _what) in settings.LIMITS.items():
        assert rows[name][0] == value, name
        assert _limit_value(value) == getattr(settings, name), name
