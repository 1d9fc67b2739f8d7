"""TraceStore: what the app reads (lists, one trace, sessions) and who may write."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from helpers_store import T0, make_trace

from ctxcore.errors import StoreError, StoreLockedError
from ctxcore.models import Status, Trace
from ctxcore.store import TraceFilter, TraceStore
from ctxcore.store.rows import RowTables, prepare
from ctxcore.store.tracestore import FileOffset

ROOT = Path(__file__).resolve().parent.parent


def sample() -> list[Trace]:
    out = []
    for i in range(30):
        out.append(
            make_trace(
                i,
                n_packets=3 + i % 7,
                session_id=f"sess-{i % 3}",
                turn=i // 3,
                tags=["nightly"] if i % 4 == 0 else ["ci", "nightly"] if i % 4 == 1 else [],
                verdict=["good", "bad", None][i % 3],
                must_keep_dropped=i % 5 == 0,
                warnings=["system instructions alone exceed the budget"] if i % 6 == 0 else [],
            )
        )
    return out


@pytest.fixture
def store(tmp_path: Path) -> TraceStore:
    s = TraceStore(tmp_path / "s.duckdb")
    s.add_traces(sample())
    return s


def ids(page_rows: list) -> list[str]:  # type: ignore[type-arg]
    return [r.trace_id for r in page_rows]


def test_add_is_idempotent_and_counts_new_ones(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "a.duckdb") as s:
        traces = sample()
        assert s.add_traces(traces[:10]) == 10
        assert s.add_traces(traces) == 20
        assert s.add_traces(traces) == 0
        assert s.count() == 30


def test_one_trace_round_trips_with_its_decisions(store: TraceStore) -> None:
    t = sample()[7]
    assert store.get_trace(t.trace_id) == t
    assert store.get_trace("nope") is None
    rows = store.decisions(t.trace_id)
    assert t.result is not None
    assert [r["packet_id"] for r in rows] == [d.packet_id for d in t.result.decisions]
    for r, d in zip(rows, t.result.decisions, strict=True):
        assert (r["status"], r["reason"], r["tokens_before"], r["tokens_after"]) == (
            d.status.value,
            d.reason.value,
            d.tokens_before,
            d.tokens_after,
        )
        assert (r["score"], r["rank"], r["partition"], r["budget_left"]) == (
            d.score,
            d.rank,
            d.partition,
            d.budget_left,
        )
    must = {p.id for p in t.input.packets if p.must_keep}
    assert {r["packet_id"] for r in rows if r["must_keep"]} == must
    assert store.packet_content(t.trace_id, "tool:call_1") == t.input.packets[1].content


def test_list_columns_match_the_trace(store: TraceStore) -> None:
    by_id = {t.trace_id: t for t in sample()}
    page = store.list_traces(limit=100)
    assert page.total == 30 and len(page.rows) == 30
    for row in page.rows:
        t = by_id[row.trace_id]
        assert t.result is not None
        statuses = [d.status for d in t.result.decisions]
        assert row.n_kept == statuses.count(Status.KEPT)
        assert row.n_dropped == statuses.count(Status.DROPPED)
        assert row.n_summarized == statuses.count(Status.SUMMARIZED)
        assert row.n_truncated == statuses.count(Status.TRUNCATED)
        assert row.n_packets == len(statuses)
        assert (row.budget, row.used) == (t.result.report.budget, t.result.report.used)
        assert row.created_at == t.created_at
        assert row.tags == tuple(t.tags)
        assert row.verdict == (t.outcome.verdict if t.outcome else "unknown")
        assert row.n_warnings == len(t.result.warnings)


@pytest.mark.parametrize(
    "flt, keep",
    [
        (TraceFilter(session_id="sess-1"), lambda t: t.session_id == "sess-1"),
        (TraceFilter(tags=("ci", "nightly")), lambda t: {"ci", "nightly"} <= set(t.tags)),
        (TraceFilter(tags=("nightly",)), lambda t: "nightly" in t.tags),
        (TraceFilter(verdict="bad"), lambda t: t.outcome and t.outcome.verdict == "bad"),
        (TraceFilter(has_warnings=True), lambda t: bool(t.result.warnings)),
        (TraceFilter(has_warnings=False), lambda t: not t.result.warnings),
        (
            TraceFilter(lost_must_keep=True),
            lambda t: any(
                d.status in (Status.DROPPED, Status.FILTERED, Status.SUMMARIZED)
                and any(p.id == d.packet_id and p.must_keep for p in t.input.packets)
                for d in t.result.decisions
            ),
        ),
        (
            TraceFilter(since=T0 + timedelta(minutes=10), until=T0 + timedelta(minutes=19)),
            lambda t: T0 + timedelta(minutes=10) <= t.created_at <= T0 + timedelta(minutes=19),
        ),
        (TraceFilter(preset="hello-agents"), lambda t: False),
    ],
)
def test_filters_select_what_python_selects(store: TraceStore, flt: TraceFilter, keep) -> None:  # type: ignore[no-untyped-def]
    expected = {t.trace_id for t in sample() if keep(t)}
    page = store.list_traces(flt, limit=100)
    assert set(ids(page.rows)) == expected
    assert page.total == len(expected)


def test_search_finds_packet_content_case_insensitively(store: TraceStore) -> None:
    traces = sample()
    word = traces[4].input.packets[2].content.split()[1]
    expected = {
        t.trace_id
        for t in traces
        if any(word.lower() in p.content.lower() or word.lower() in p.id for p in t.input.packets)
    }
    page = store.list_traces(TraceFilter(search=word.upper()), limit=100)
    assert traces[4].trace_id in expected
    assert set(ids(page.rows)) == expected
    # LIKE wildcards in the query are literal characters, not patterns.
    assert store.list_traces(TraceFilter(search="%"), limit=100).total == len(
        [t for t in traces if any("%" in p.content for p in t.input.packets)]
    )


def test_sort_and_paging_match_a_python_sort(store: TraceStore) -> None:
    traces = sample()
    want = [
        t.trace_id
        for t in sorted(
            traces, key=lambda t: (t.result.report.used, int(t.trace_id[1:])), reverse=True
        )
    ]
    got: list[str] = []
    for off in range(0, 30, 7):
        page = store.list_traces(sort="used", limit=7, offset=off)
        assert page.total == 30
        got += ids(page.rows)
    assert got == want
    asc = store.list_traces(sort="turn", descending=False, limit=5)
    assert [r.turn for r in asc.rows] == sorted(t.turn for t in traces)[:5]
    with pytest.raises(StoreError, match="cannot sort by"):
        store.list_traces(sort="evil; DROP TABLE traces")  # type: ignore[arg-type]


def test_sessions_timelines_and_facets(store: TraceStore) -> None:
    traces = [t for t in sample() if t.session_id == "sess-2"]
    sessions = {s.session_id: s for s in store.sessions()}
    assert set(sessions) == {"sess-0", "sess-1", "sess-2"}
    s2 = sessions["sess-2"]
    assert s2.traces == len(traces)
    assert (s2.first_turn, s2.last_turn) == (traces[0].turn, traces[-1].turn)
    rows = store.session_statuses("sess-2")
    assert len(rows) == sum(len(t.result.decisions) for t in traces)
    assert [(r["turn"], r["packet_id"], r["status"]) for r in rows] == [
        (t.turn, d.packet_id, d.status.value) for t in traces for d in t.result.decisions
    ]
    parts = store.session_partitions("sess-2")
    assert [(p["turn"], p["partition"], p["used"]) for p in parts] == [
        (t.turn, p.name, p.used) for t in traces for p in t.result.partitions
    ]
    facets = store.facets()
    assert facets["session_id"] == ["sess-0", "sess-1", "sess-2"]
    assert facets["tags"] == ["ci", "nightly"]
    assert facets["verdict"] == ["bad", "good", "unknown"]


def bulk_diagnose(t: Trace) -> list:  # type: ignore[type-arg]
    """What the store stores: diagnostics with its bulk options (no fix search)."""
    diagnostics = pytest.importorskip("ctxcore.diagnostics")
    options = getattr(diagnostics, "INGEST_OPTIONS", None)
    if options is None:
        return diagnostics.diagnose(t)  # type: ignore[no-any-return]
    return diagnostics.diagnose(t, options=options)  # type: ignore[no-any-return]


def test_findings_come_from_diagnostics(tmp_path: Path) -> None:
    t = make_trace(1, 8, must_keep_dropped=True)
    want = bulk_diagnose(t)
    assert want  # a dropped must-keep packet is something diagnostics must flag
    with TraceStore(tmp_path / "f.duckdb") as s:
        s.add_traces([t])
        got = s.findings(t.trace_id)
        assert [(f["detector"], f["severity"], f["packet_ids"], f["message"]) for f in got] == [
            (f.detector, f.severity, list(f.packet_ids), f.message) for f in want
        ]
        flt = TraceFilter(finding=want[0].detector)
        assert ids(s.list_traces(flt).rows) == [t.trace_id]
        assert ids(s.list_traces(TraceFilter(finding="no_such_detector")).rows) == []
        row = s.list_traces().rows[0]
        assert row.n_findings == len(want)
        assert row.max_severity == max(
            (f.severity for f in want), key=["info", "warning", "error"].index
        )


def test_ingest_errors_and_latest_change(store: TraceStore) -> None:
    before = store.latest_change()
    store.add_ingest_error("a.jsonl", 3, "malformed JSON")
    assert store.latest_change() > before
    before = store.latest_change()
    store.add_traces([make_trace(99)])
    assert store.latest_change() > before
    errs = store.ingest_errors()
    assert [(e.file, e.line, e.message) for e in errs] == [("a.jsonl", 3, "malformed JSON")]
    assert errs[0].at.tzinfo is not None


def test_threads_read_while_another_writes(tmp_path: Path) -> None:
    s = TraceStore(tmp_path / "t.duckdb")
    problems: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                page = s.list_traces(limit=5)
                if page.rows:
                    assert s.decisions(page.rows[0].trace_id)
        except BaseException as exc:  # pragma: no cover - reported below
            problems.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for r in readers:
        r.start()
    for i in range(0, 60, 6):
        s.add_traces([make_trace(j) for j in range(i, i + 6)])
    stop.set()
    for r in readers:
        r.join()
    assert problems == []
    assert s.count() == 60
    s.close()


def test_second_process_gets_one_line_naming_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "locked.duckdb"
    with TraceStore(db):
        code = (
            "import sys\n"
            "from ctxcore.store.tracestore import TraceStore\n"
            "from ctxcore.errors import StoreLockedError\n"
            "try:\n"
            f"    TraceStore({str(db)!r})\n"
            "except StoreLockedError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
        )
        assert r.returncode == 3, r.stderr
        line = r.stdout.strip()
        assert "\n" not in line
        assert f"PID {os.getpid()}" in line
        assert "drop your trace files into the folder" in line

        cli = subprocess.run(
            [sys.executable, "-m", "ctxcore", "ingest", str(tmp_path), "--db", str(db)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert cli.returncode == 2
        err = cli.stderr.strip()
        assert err.count("\n") == 0 and "Traceback" not in err
        assert f"PID {os.getpid()}" in err


def test_store_locked_error_is_a_store_error() -> None:
    assert issubclass(StoreLockedError, StoreError)


def test_deferred_diagnostics_are_filled_in_later(tmp_path: Path) -> None:
    traces = [make_trace(i, 8, must_keep_dropped=True) for i in range(3)]
    with TraceStore(tmp_path / "d.duckdb", diagnose=False) as s:
        s.add_traces(traces)
        assert all(s.findings(t.trace_id) == [] for t in traces)
        assert s.diagnose_pending() == 3
        assert s.diagnose_pending() == 0
        for t in traces:
            want = bulk_diagnose(t)
            got = s.findings(t.trace_id)
            assert [(f["detector"], f["message"]) for f in got] == [
                (f.detector, f.message) for f in want
            ]
        rows = {r.trace_id: r for r in s.list_traces().rows}
        assert rows[traces[0].trace_id].n_findings == len(bulk_diagnose(traces[0]))


def test_two_stores_on_one_file_in_one_process_do_not_mix_rows(tmp_path: Path) -> None:
    a = TraceStore(tmp_path / "same.duckdb")
    b = TraceStore(tmp_path / "same.duckdb")
    for i in range(0, 20, 2):
        a.add_traces([make_trace(i, n_packets=3 + i % 4)])
        b.add_traces([make_trace(i + 1, n_packets=3 + (i + 1) % 4)])
    for i in range(20):
        t = make_trace(i, n_packets=3 + i % 4)
        assert [d["packet_id"] for d in a.decisions(t.trace_id)] == [
            d.packet_id for d in t.result.decisions
        ]
    b.close()
    a.close()


@pytest.mark.parametrize(
    "values",
    [
        ["plain", "", "ascii only " * 50],
        ["中文 and ascii", "é", ""],  # byte lengths differ from str lengths
        ["x", None, "y"],  # a NULL (content of an unknown packet)
        [],
    ],
)
def test_bulk_text_columns_equal_arrows_own_conversion(values: list[str | None]) -> None:
    import pyarrow as pa

    from ctxcore.store.rows import _bulk_array

    assert _bulk_array(values, pa.string()).equals(pa.array(values, pa.string()))


@pytest.mark.parametrize(
    "text",
    ["", "short", "x" * 4000, "x" * 4001, "ab" * 9_000, "中文é" * 3_000, "a" * 3_999 + "中" * 5],
)
def test_a_text_is_stored_in_pieces_that_join_back(text: str) -> None:
    """Pieces of at most PART_BYTES bytes of UTF-8, cut between characters, each but the
    last at least 1,000 characters long; a blob likewise, without copying it piece by piece."""
    from ctxcore.store.rows import PART_BYTES, blob_parts, text_parts

    parts = text_parts(text)
    assert "".join(parts) == text and parts
    assert all(len(p.encode()) <= PART_BYTES for p in parts)
    assert all(len(p) >= 1_000 for p in parts[:-1])
    blobs = [text.encode(), b"", b"z" * 10_001]
    data, which, number = blob_parts(blobs)
    for k, blob in enumerate(blobs):
        pieces = [data[i].as_py() for i in range(len(data)) if which[i] == k]
        assert b"".join(pieces) == blob and all(len(x) <= PART_BYTES for x in pieces)
        assert list(number[which == k]) == list(range(len(pieces)))


def test_long_texts_are_stored_once_in_short_pieces(tmp_path: Path) -> None:
    """No stored value is longer than PART_BYTES (docs/design.md, "Store"): a long packet
    text comes back whole, search finds a word across the cut between two pieces (a word
    longer than the kept tail too), and a text several traces hold is stored once."""
    from ctxcore.models import Packet
    from ctxcore.store.rows import PART_BYTES

    cut = "é" * 1_999 + "x"  # 3,999 bytes: the next character starts the second piece
    long_word = "Q" * 300
    text = f"{cut}needle-across the cut " + "中文 " * 3_000 + "y" * 3_900 + long_word + " end"
    a, b = make_trace(1, trace_id="long-a"), make_trace(2, trace_id="long-b")
    packet = Packet(id="file:big.py", kind="file", content=text)
    traces = []
    for t in (a, b):
        inp = t.input.model_copy(update={"packets": [*t.input.packets, packet]})
        decisions = [*t.result.decisions, t.result.decisions[0].model_copy(
            update={"packet_id": "file:big.py", "kind": "file"})]  # fmt: skip
        result = t.result.model_copy(update={"decisions": decisions})
        traces.append(t.model_copy(update={"input": inp, "result": result}))
    with TraceStore(tmp_path / "s.duckdb") as s:
        s.add_traces(traces)
        assert s.packet_content("long-a", "file:big.py") == text
        assert s.packet_content("long-b", "file:big.py") == text
        assert s.packet_content("long-a", "tool:call_1") == traces[0].input.packets[1].content
        for word in ("XNEEDLE-ACROSS", "needle", "yyyQQQ", "y" + long_word, "中文 中文"):
            page = s.list_traces(TraceFilter(search=word), limit=10)
            assert set(ids(page.rows)) == {"long-a", "long-b"}, word
        assert s.list_traces(TraceFilter(search="needle-acrossX")).total == 0
        cur = s._cur()
        [(longest_text, n_texts)] = cur.execute(
            "SELECT max(strlen(text)), count(DISTINCT cid) FROM contents"
        ).fetchall()
        [(longest_part,)] = cur.execute(
            "SELECT max(octet_length(data)) FROM trace_parts"
        ).fetchall()
        assert longest_text <= PART_BYTES and longest_part <= PART_BYTES
        shared = cur.execute(
            "SELECT count(DISTINCT cid) FROM decisions WHERE packet_id = 'file:big.py'"
        ).fetchall()
        assert shared == [(1,)] and n_texts < 2 * len(traces[0].input.packets)
        assert s.get_trace("long-a") == traces[0]


def test_compressed_json_round_trips_exactly(tmp_path: Path) -> None:
    """The stored JSON is the ingested text, byte for byte (zstd, in trace_parts)."""
    from ctxcore.store.ingest import ingest_paths

    raw = make_trace(1, turn=1, trace_id="zst-1").to_json().replace('"turn":1', '"turn": 1')
    f = tmp_path / "in.jsonl"
    f.write_text(raw + "\n", encoding="utf-8")
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as s:
        assert ingest_paths(s, [f]).traces_added == 1
        [(_, stored)] = s.traces_json(["zst-1"])
        [packed] = s.traces_packed(["zst-1"])
        size = s._cur().execute("SELECT json_bytes FROM traces").fetchall()[0][0]
    assert stored == raw.encode() and size == len(raw.encode()) == packed.size
    assert packed.json() == stored and len(packed.data) < size


def test_threads_are_set_for_a_while_and_restored(tmp_path: Path) -> None:
    """The DuckDB engine (``duck.Database.threads``): a bulk writer with worker processes
    keeps DuckDB to one thread until it closes."""
    with TraceStore(tmp_path / "t.duckdb") as s:
        cur = s._cur()
        before = cur.execute("SELECT current_setting('threads')").fetchall()[0][0]
        with s._db.threads(1):
            assert s._db.read_cursor().execute("SELECT current_setting('threads')").fetchall() == [
                (1,)
            ]
        assert cur.execute("SELECT current_setting('threads')").fetchall()[0][0] == before
        with s.bulk_writer(workers=2) as w:
            assert cur.execute("SELECT current_setting('threads')").fetchall() == [(1,)]
            w.add(row_tables([make_trace(0)]))
        assert cur.execute("SELECT current_setting('threads')").fetchall()[0][0] == before


# ---- the bulk writer (what ingest loads through)


def row_tables(traces: list[Trace], source: str = "in.jsonl") -> RowTables:
    items = [(t, t.to_json().encode()) for t in traces]
    return prepare(items, [source] * len(items), diagnose=False)


def committed(s: TraceStore) -> tuple[int, int, int, int]:
    """(traces, decisions, ingest errors, file offsets) as another cursor sees them."""
    cur = s._db.read_cursor()
    try:
        return tuple(  # type: ignore[return-value]
            cur.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            for table in ("traces", "decisions", "ingest_errors", "file_offsets")
        )
    finally:
        cur.close()


def offset(name: str) -> FileOffset:
    return FileOffset(name, 10, 1, 10, 0.0, "fp")


def test_bulk_writer_commits_everything_at_once(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "b.duckdb", diagnose=False) as s:
        w = s.bulk_writer()
        w.begin()
        res = w.add(row_tables([make_trace(i, n_packets=4) for i in range(3)]))
        assert (res.added, res.skipped, res.conflicts) == (3, 0, [])
        w.add(row_tables([make_trace(3, n_packets=2)]))
        w.add_errors([("in.jsonl", 7, "malformed JSON")])
        w.add_offsets([offset("in.jsonl")])
        assert w.in_transaction and committed(s) == (0, 0, 0, 0)
        errors = w.commit()
        assert [(e.file, e.line, e.message) for e in errors] == [("in.jsonl", 7, "malformed JSON")]
        assert not w.in_transaction and committed(s) == (4, 14, 1, 1)
        assert w.commit() == []  # nothing open: nothing to do
        w.close()
        t = s.get_trace(make_trace(1).trace_id)
        assert t is not None and t == make_trace(1, n_packets=4)
        assert len(s.decisions(make_trace(3).trace_id)) == 2
        assert s.file_offset("in.jsonl") == offset("in.jsonl")


def test_bulk_writer_abort_leaves_nothing(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "b.duckdb", diagnose=False) as s:
        w = s.bulk_writer()
        assert w.add(row_tables([make_trace(i) for i in range(5)])).added == 5
        w.add_errors([("in.jsonl", 1, "bad")])
        w.add_offsets([offset("in.jsonl")])
        w.abort()
        assert not w.in_transaction and committed(s) == (0, 0, 0, 0)
        assert s.file_offset("in.jsonl") is None
        # nothing of the aborted transaction is remembered: the same traces are new again
        assert w.add(row_tables([make_trace(i) for i in range(5)])).added == 5
        w.commit()
        w.close()
        assert committed(s) == (5, 25, 0, 0)


def test_bulk_writer_dedupes_within_a_transaction(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "b.duckdb", diagnose=False) as s:
        with s.bulk_writer() as w:
            assert w.add(row_tables([make_trace(0), make_trace(1), make_trace(0)])).added == 2
            res = w.add(row_tables([make_trace(1), make_trace(2, n_packets=3), make_trace(2)]))
            # the same content is skipped; the same id with other content too, and reported
            assert (res.added, res.skipped) == (1, 1)
            assert res.conflicts == [(2, make_trace(2).trace_id, "in.jsonl")]
        assert committed(s)[:2] == (3, 5 + 5 + 3)


def test_bulk_writer_dedupes_against_the_store(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "b.duckdb", diagnose=False) as s:
        with s.bulk_writer() as w:
            w.add(row_tables([make_trace(i) for i in range(3)], "first.jsonl"))
        with s.bulk_writer() as w:
            res = w.add(row_tables([make_trace(0), make_trace(1, n_packets=2), make_trace(3)]))
            assert (res.added, res.skipped) == (1, 1)
            assert res.conflicts == [(1, make_trace(1).trace_id, "first.jsonl")]
        assert s.count() == 4
        assert len(s.decisions(make_trace(1).trace_id)) == 5  # the stored one is kept


def test_bulk_writer_aborts_on_an_exception_and_releases_the_lock(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "b.duckdb", diagnose=False) as s:
        with pytest.raises(RuntimeError, match="boom"), s.bulk_writer() as w:
            w.add(row_tables([make_trace(i, n_packets=50) for i in range(20)]))
            raise RuntimeError("boom")
        assert committed(s) == (0, 0, 0, 0)
        # the write lock is free: another thread can write
        done = threading.Event()

        def write() -> None:
            s.add_traces([make_trace(99)])
            done.set()

        t = threading.Thread(target=write)
        t.start()
        t.join(timeout=30)
        assert done.is_set() and s.count() == 1
        # nothing is left running: no writer thread
        assert not [th for th in threading.enumerate() if th.name.startswith("ctxscope-ingest")]


def test_bulk_writer_refuses_a_read_only_store(tmp_path: Path) -> None:
    TraceStore(tmp_path / "b.duckdb").close()
    with TraceStore(tmp_path / "b.duckdb", read_only=True) as s:
        w = s.bulk_writer()
        with pytest.raises(StoreError, match="read-only"):
            w.add(row_tables([make_trace(1)]))
        w.close()


def test_list_findings_pages_the_findings_of_the_filtered_traces(store: TraceStore) -> None:
    def expected(flt: TraceFilter) -> list[tuple[str, str, int, str, str, str]]:
        # list_traces sorts newest first (ties: last stored first); each trace's findings
        # keep their stored order (most severe first)
        return [
            (r.trace_id, r.session_id, r.turn, f["detector"], f["severity"], f["message"])
            for r in store.list_traces(flt, limit=1000).rows
            for f in store.findings(r.trace_id)
            if not flt.finding or f["detector"] == flt.finding
        ]

    def got(flt: TraceFilter, size: int, total: int) -> list[tuple[str, str, int, str, str, str]]:
        out = []
        for off in range(0, total + size, size):
            page = store.list_findings(flt, limit=size, offset=off)
            assert page.total == total
            assert len(page.rows) == max(0, min(size, total - off))
            out += [
                (r.trace_id, r.session_id, r.turn, r.detector, r.severity, r.message)
                for r in page.rows
            ]
        return out

    for flt in (TraceFilter(), TraceFilter(session_id="sess-1"), TraceFilter(tags=("ci",))):
        want = expected(flt)
        assert len({w[0] for w in want}) > 1, "the sample must give several traces findings"
        assert got(flt, 4, len(want)) == want
    # a detector filter keeps the traces that have it, and only its findings
    everything = expected(TraceFilter())
    assert len({w[3] for w in everything}) > 1
    detector = everything[0][3]
    flt = TraceFilter(finding=detector)
    want = expected(flt)
    assert want and {w[3] for w in want} == {detector}
    assert got(flt, 5, len(want)) == want
    page = store.list_findings(TraceFilter(session_id="no-such-session"))
    assert (page.rows, page.total) == ([], 0)
    row = store.list_findings(limit=1).rows[0]
    assert row.created_at.tzinfo is not None
    assert row.packet_ids == tuple(store.findings(row.trace_id)[0]["packet_ids"])


def test_traces_json_returns_the_stored_json_in_the_order_asked(tmp_path: Path) -> None:
    import app_support as data

    from ctxcore.models import Trace

    traces = data.session("json-s", 3)
    with TraceStore(tmp_path / "j.duckdb") as store:
        store.add_traces(traces)
        ids = [traces[2].trace_id, "missing", traces[0].trace_id]
        got = store.traces_json(ids)
    assert [t for t, _ in got] == [traces[2].trace_id, traces[0].trace_id]
    assert Trace.model_validate_json(got[0][1]) == traces[2]
    assert Trace.model_validate_json(got[1][1]) == traces[0]


def test_the_process_remembers_the_latest_stored_texts_in_bounded_memory() -> None:
    """``duck.Shared`` names a packet text a commit of this process stored lately by its cid: at
    least the last TEXT_KEYS, never more than twice as many (plus one commit's), a text
    looked up again kept as a new one."""
    from ctxcore.store.duck import Shared
    from ctxcore.store.rows import TEXT_KEYS

    shared = Shared()
    n = 3 * TEXT_KEYS
    key = [i.to_bytes(16, "little") for i in range(n)]
    shared.remember({key[i]: i for i in range(TEXT_KEYS + 1)})  # the newer ones pass TEXT_KEYS
    assert shared.text_cid(key[0]) == 0  # looked up: it moves to the newer generation
    shared.remember({key[i]: i for i in range(TEXT_KEYS + 1, 2 * TEXT_KEYS + 2)})
    assert shared.text_cid(key[0]) == 0 and shared.text_cid(key[1]) is None
    for start in range(2 * TEXT_KEYS + 2, n, 7_000):
        shared.remember({key[i]: i for i in range(start, min(start + 7_000, n))})
        assert len(shared.texts) + len(shared.older) <= 2 * TEXT_KEYS + 7_000
    assert all(shared.text_cid(key[i]) == i for i in range(n - TEXT_KEYS, n))
    assert shared.text_cid(key[TEXT_KEYS // 2]) is None
    shared.forget()
    assert shared.text_cid(key[-1]) is None


def test_traces_whose_pieces_pass_duckdbs_memory_limit_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading traces streams their ``trace_parts`` pieces out of DuckDB: 40 traces of ~2.2 MB
    of incompressible text each (~66 MB stored) are read back whole from a store opened with
    a 32 MB limit (sorting the pieces in SQL held them all and failed "Out of Memory")."""
    import base64
    import random

    from helpers_store import make_trace

    rng = random.Random(7)
    traces = []
    for i in range(40):
        t = make_trace(i, 2, session_id="big", turn=i)
        blob = base64.b64encode(rng.randbytes(1_650_000)).decode("ascii")
        p = t.input.packets[1].model_copy(update={"content": blob})
        traces.append(
            t.model_copy(
                update={"input": t.input.model_copy(update={"packets": [t.input.packets[0], p]})}
            )
        )
    db = tmp_path / "big.duckdb"
    with TraceStore(db, diagnose=False) as store:
        store.add_traces(traces)
    monkeypatch.setenv("CTXSCOPE_DB_MEMORY", "32MB")
    with TraceStore(db, read_only=True) as store:
        stored = sum(len(p.data) for p in store.traces_packed([t.trace_id for t in traces]))
        assert stored > 60 * 2**20  # near twice the limit
        got = store.traces_json([t.trace_id for t in reversed(traces)])
        one = store.get_trace(traces[3].trace_id)
    assert [tid for tid, _ in got] == [t.trace_id for t in reversed(traces)]
    assert [Trace.model_validate_json(js) for _, js in got] == list(reversed(traces))
    assert one == traces[3]
